package main

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/okiba/okiba/bench/harness"
)

// machine describes the host from /proc and the run directory's file system.
func machine(dir string) harness.Machine {
	m := harness.Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), Load1: loadavg()}
	m.Host, _ = os.Hostname()
	if i := strings.IndexByte(m.Host, '.'); i > 0 {
		m.Host = m.Host[:i]
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				f := strings.Fields(line)
				kb, _ := strconv.ParseFloat(f[1], 64)
				m.MemoryGiB = kb / (1 << 20)
			}
		}
	}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		var b []byte
		for _, c := range u.Release {
			if c == 0 {
				break
			}
			b = append(b, byte(c))
		}
		m.Kernel = string(b)
	}
	if d, ok := harness.ReadDisk(harness.DiskOf(dir)); ok {
		m.Disk = "/dev/" + d.Device
	}
	if b, err := os.ReadFile("/proc/mounts"); err == nil {
		best := ""
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && strings.HasPrefix(dir, f[1]) && len(f[1]) > len(best) {
				best, m.Filesystem = f[1], f[2]+" on "+f[0]
			}
		}
	}
	return m
}

func loadavg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
