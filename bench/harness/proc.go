package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a server process the harness started. It runs in a process group of its
// own, dies with the harness (SIGKILL on the harness's death), and its whole process
// tree is signalled when it is stopped, so that nothing it started outlives the run.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *os.File
}

// StartProc starts cmd as a server process named name; its output goes to
// <env.Dir>/logs/<name>.log. The process is registered with env, which stops it at
// Cleanup if nobody did before.
func (e *Env) StartProc(name string, cmd *exec.Cmd) (*Proc, error) {
	if err := os.MkdirAll(filepath.Join(e.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(e.Dir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		f.Close()
		return nil, errors.New("harness: stopping; not starting " + name)
	}
	if err := cmd.Start(); err != nil {
		e.mu.Unlock()
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, cmd: cmd, done: make(chan struct{}), log: f}
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	e.Logf("started %s (pid %d): %s", name, cmd.Process.Pid, strings.Join(cmd.Args, " "))
	return p, nil
}

// Pid is the process id of the started command.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends sig to the process tree and waits up to grace for the process to exit,
// then kills what is left of the tree.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) error {
	if ok, _ := p.Exited(); ok {
		killTree(p.Pid(), syscall.SIGKILL) // leftovers whose parent exited
		return nil
	}
	killTree(p.Pid(), sig)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	return p.Kill()
}

// Kill sends SIGKILL to the whole process tree (kill -9) and waits for the process and
// its descendants to be gone (or zombies awaiting their new parent).
func (p *Proc) Kill() error {
	tree := Descendants([]int{p.Pid()})
	killTree(p.Pid(), syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Name, p.Pid())
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range tree {
		for Alive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// Alive reports whether pid is a running process (not gone, not a zombie).
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := statFields(b)
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// killTree signals root, its process group and every descendant found in /proc.
func killTree(root int, sig syscall.Signal) {
	pids := Descendants([]int{root})
	_ = syscall.Kill(-root, sig)
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}

// Descendants returns roots and every process descending from them, read from /proc.
func Descendants(roots []int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return roots
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := ppid(pid); ok {
			children[pp] = append(children[pp], pid)
		}
	}
	var out []int
	seen := map[int]bool{}
	var walk func(int)
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		out = append(out, pid)
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return out
}

func ppid(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	f := statFields(b)
	if len(f) < 2 {
		return 0, false
	}
	v, err := strconv.Atoi(f[1])
	return v, err == nil
}

// statFields returns the fields of /proc/<pid>/stat after the command name (which may
// hold spaces): index 0 is the state, 1 the parent pid, … (field n of proc(5) is
// index n-3).
func statFields(b []byte) []string {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// WaitFor polls ready every 50ms until it returns nil, the process exits, or ctx or
// timeout ends.
func WaitFor(ctx context.Context, p *Proc, timeout time.Duration, what string, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if p != nil {
			if ok, err := p.Exited(); ok {
				return fmt.Errorf("%s exited while starting (%v); see %s", p.Name, err, p.log.Name())
			}
		}
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %v: %w", what, timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Env is a run's environment: where data and logs go, where tools are, and every
// server started, so that Cleanup can stop them all.
type Env struct {
	Dir   string // run directory: one data directory per server, logs/
	Tools string // directory of downloaded tools (nats-server) and the okiba binary
	Repo  string // okiba's working tree (built for the okiba systems)
	Logf  func(format string, args ...any)

	mu      sync.Mutex
	procs   []*Proc
	shared  map[string]any
	stops   []func()
	closed  bool
	nextDir int
}

// NewEnv prepares dir (created if missing).
func NewEnv(dir, tools, repo string, logf func(string, ...any)) (*Env, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Env{Dir: dir, Tools: tools, Repo: repo, Logf: logf, shared: map[string]any{}}, nil
}

// DataDir returns a fresh directory under the run directory.
func (e *Env) DataDir(name string) (string, error) {
	e.mu.Lock()
	e.nextDir++
	d := filepath.Join(e.Dir, fmt.Sprintf("%s-%d", name, e.nextDir))
	e.mu.Unlock()
	return d, os.MkdirAll(d, 0o755)
}

// Shared returns the server named key, starting it with start the first time. stop
// (returned by start) runs at Cleanup, in reverse order of starting.
func (e *Env) Shared(key string, start func() (srv any, stop func(), err error)) (any, error) {
	e.mu.Lock()
	if s, ok := e.shared[key]; ok {
		e.mu.Unlock()
		return s, nil
	}
	e.mu.Unlock()
	srv, stop, err := start()
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.shared[key] = srv
	if stop != nil {
		e.stops = append(e.stops, stop)
	}
	e.mu.Unlock()
	return srv, nil
}

// Cleanup stops every shared server (gracefully, in reverse order), then kills every
// process the harness started that is still running. Safe to call more than once and
// from a signal handler's goroutine.
func (e *Env) Cleanup() {
	e.mu.Lock()
	stops := e.stops
	e.stops = nil
	e.closed = true
	e.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	e.KillAll()
}

// KillAll sends SIGKILL to every process tree the harness started (the hard stop).
func (e *Env) KillAll() {
	e.mu.Lock()
	procs := append([]*Proc(nil), e.procs...)
	e.closed = true
	e.mu.Unlock()
	for _, p := range procs {
		if ok, _ := p.Exited(); !ok {
			e.Logf("killing %s (pid %d)", p.Name, p.Pid())
		}
		_ = p.Kill()
	}
}
