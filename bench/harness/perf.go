package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Profiler records `perf record -g` of a broker's processes over the measured window
// of the cells it matches, and writes perf's flat report beside the results, so that
// a figure comes with where its CPU went.
type Profiler struct {
	Dir     string   // where FILE.perf.data and FILE.perf.txt go
	Systems []string // system names to profile
	Cells   []string // substrings of cell names to profile ("" matches all)
}

func (p *Profiler) matches(system, cell string) bool {
	if p == nil || !slices.Contains(p.Systems, system) {
		return false
	}
	for _, c := range p.Cells {
		if strings.Contains(cell, c) {
			return true
		}
	}
	return len(p.Cells) == 0
}

// start begins recording pids and returns the function that stops it and writes the
// report, returning the report's path.
func (p *Profiler) start(name string, pids []int) (func() (string, error), error) {
	if _, err := exec.LookPath("perf"); err != nil {
		return nil, fmt.Errorf("perf not installed: %w", err)
	}
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return nil, err
	}
	// The harness itself is recorded alone, not with the servers it started.
	if len(pids) != 1 || pids[0] != os.Getpid() {
		pids = Descendants(pids)
	}
	var ps []string
	for _, pid := range pids {
		ps = append(ps, strconv.Itoa(pid))
	}
	data := filepath.Join(p.Dir, name+".perf.data")
	cmd := exec.Command("perf", "record", "-F", "499", "-g", "-o", data, "-p", strings.Join(ps, ","))
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() (string, error) {
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		txt := filepath.Join(p.Dir, name+".perf.txt")
		out, err := exec.Command("perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "comm,dso,symbol",
			"--percent-limit", "0.7", "-g", "none").CombinedOutput()
		if werr := os.WriteFile(txt, out, 0o644); werr != nil {
			return "", werr
		}
		return txt, err
	}, nil
}
