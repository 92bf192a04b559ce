package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is USER_HZ, the unit of CPU times in /proc/<pid>/stat (100 on Linux).
const clockTick = 100

// TreeSample is the resources of a process tree at one moment, from /proc.
type TreeSample struct {
	At  time.Time
	CPU time.Duration // user+system of every live process of the tree
	RSS int64         // sum of proportional set sizes (PSS; RSS where PSS is unreadable)
	// PerPid is each process's user+system CPU and write_bytes, so that a window
	// can account for processes that start or end inside it (PostgreSQL backends).
	PerPid map[int]PidUsage
}

// PidUsage is one process's counters.
type PidUsage struct {
	CPU        time.Duration
	WriteBytes int64
}

// SampleTree reads the tree under roots (the roots themselves included). With no
// roots it samples the harness's own process alone (not the servers it started).
func SampleTree(roots []int) TreeSample {
	pids := []int{os.Getpid()}
	if len(roots) > 0 {
		pids = Descendants(roots)
	}
	s := TreeSample{At: time.Now(), PerPid: map[int]PidUsage{}}
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := statFields(b)
		if len(f) < 22 {
			continue
		}
		// utime and stime are fields 14 and 15 of proc(5). Reaped children's times
		// (cutime, cstime) are left out: the children were counted while alive.
		var ticks int64
		for _, i := range []int{11, 12} {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += v
		}
		u := PidUsage{CPU: time.Duration(ticks) * time.Second / clockTick, WriteBytes: ioField(pid, "write_bytes")}
		s.PerPid[pid] = u
		s.CPU += u.CPU
		s.RSS += pss(pid)
	}
	return s
}

// pss reads the proportional set size (shared pages split between their users, so
// that PostgreSQL's backends do not count shared_buffers once each).
func pss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err == nil {
		if v, ok := kbField(b, "Pss:"); ok {
			return v
		}
	}
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err == nil {
		if v, ok := kbField(b, "VmRSS:"); ok {
			return v
		}
	}
	return 0
}

func kbField(b []byte, name string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name) {
			f := strings.Fields(line[len(name):])
			if len(f) > 0 {
				v, err := strconv.ParseInt(f[0], 10, 64)
				return v * 1024, err == nil
			}
		}
	}
	return 0, false
}

func ioField(pid int, name string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok && k == name {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// DiskStat is a block device's counters from /sys/block/<dev>/stat.
type DiskStat struct {
	Device         string
	Flushes        uint64 // flush requests completed (fsync/fdatasync reaching the device)
	SectorsWritten uint64
}

// DiskOf finds the block device holding dir, for ReadDisk.
func DiskOf(dir string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return ""
	}
	major, minor := (st.Dev>>8)&0xfff|(st.Dev>>32)&^0xfff, st.Dev&0xff|(st.Dev>>12)&^0xff
	p := fmt.Sprintf("/sys/dev/block/%d:%d", major, minor)
	if _, err := os.Stat(filepath.Join(p, "stat")); err != nil {
		return ""
	}
	return p
}

// ReadDisk reads the counters of the device at sysPath (from DiskOf); ok is false
// when the kernel does not report flushes.
func ReadDisk(sysPath string) (DiskStat, bool) {
	if sysPath == "" {
		return DiskStat{}, false
	}
	b, err := os.ReadFile(filepath.Join(sysPath, "stat"))
	if err != nil {
		return DiskStat{}, false
	}
	f := strings.Fields(string(b))
	if len(f) < 17 {
		return DiskStat{}, false
	}
	flushes, _ := strconv.ParseUint(f[15], 10, 64)
	sectors, _ := strconv.ParseUint(f[6], 10, 64)
	dev, _ := filepath.EvalSymlinks(sysPath)
	return DiskStat{Device: filepath.Base(dev), Flushes: flushes, SectorsWritten: sectors}, true
}

// DirSize is the disk space used by the files under dir.
func DirSize(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			} else {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// Usage accumulates a process tree's CPU and writes over a window from successive
// samples: a process that appears counts from zero, one that disappears keeps what it
// had at its last sample.
type Usage struct {
	last       map[int]PidUsage // every process seen, with its latest counters
	CPU        time.Duration
	WriteBytes int64
}

// NewUsage starts accounting from s.
func NewUsage(s TreeSample) *Usage {
	u := &Usage{last: map[int]PidUsage{}}
	for pid, v := range s.PerPid {
		u.last[pid] = v
	}
	return u
}

// Add takes a later sample into account. A process missing from one sample and back
// in the next keeps its baseline.
func (u *Usage) Add(s TreeSample) {
	for pid, cur := range s.PerPid {
		prev := u.last[pid] // zero for a process not seen before
		if cur.CPU >= prev.CPU {
			u.CPU += cur.CPU - prev.CPU
		}
		if cur.WriteBytes >= prev.WriteBytes {
			u.WriteBytes += cur.WriteBytes - prev.WriteBytes
		}
		u.last[pid] = cur
	}
}
