package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// ErrInjected is the error that the fault helpers inject. Tests can tell an
// injected failure from a real one with errors.Is.
var ErrInjected = errors.New("vfs: injected fault")

// Op names an operation seen by [Faulty].
type Op int

const (
	OpOpen        Op = iota + 1 // FS.OpenFile without O_CREATE
	OpCreate                    // FS.OpenFile with O_CREATE
	OpRead                      // File.ReadAt
	OpWrite                     // File.WriteAt
	OpSync                      // File.Sync
	OpTruncate                  // File.Truncate
	OpPreallocate               // File.Preallocate
	OpSize                      // File.Size
	OpClose                     // File.Close
	OpRemove                    // FS.Remove
	OpRename                    // FS.Rename
	OpMkdirAll                  // FS.MkdirAll
	OpReadDir                   // FS.ReadDir
	OpSyncDir                   // FS.SyncDir
	OpLock                      // FS.Lock
	OpStat                      // FS.Stat
)

func (o Op) String() string {
	switch o {
	case OpOpen:
		return "open"
	case OpCreate:
		return "create"
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpSync:
		return "sync"
	case OpTruncate:
		return "truncate"
	case OpPreallocate:
		return "preallocate"
	case OpSize:
		return "size"
	case OpClose:
		return "close"
	case OpRemove:
		return "remove"
	case OpRename:
		return "rename"
	case OpMkdirAll:
		return "mkdirall"
	case OpReadDir:
		return "readdir"
	case OpSyncDir:
		return "syncdir"
	case OpLock:
		return "lock"
	case OpStat:
		return "stat"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Event describes one operation, as [Faulty] passes it to its [Hook] before
// carrying it out.
type Event struct {
	// Seq numbers the events a Faulty has seen, from 1. With a
	// deterministic workload it names a crash point.
	Seq int64
	Op  Op
	// Name is the path the operation is about. For file operations it is
	// the name the file was opened under, even if it was renamed since.
	Name string
	// NewName is the destination of OpRename.
	NewName string
	// Flag holds the os.O_* flags of OpOpen and OpCreate.
	Flag int
	// Offset is the file offset of OpRead and OpWrite.
	Offset int64
	// Length is the byte count of OpRead and OpWrite, and the target size
	// of OpTruncate and OpPreallocate.
	Length int64
	// Data is what an OpWrite is about to write (valid only during the hook, read-only),
	// so that crash tests can model a write torn at any byte.
	Data []byte
}

func (e Event) String() string {
	switch e.Op {
	case OpRename:
		return fmt.Sprintf("#%d %s %s -> %s", e.Seq, e.Op, e.Name, e.NewName)
	case OpRead, OpWrite:
		return fmt.Sprintf("#%d %s %s [%d, %d)", e.Seq, e.Op, e.Name, e.Offset, e.Offset+e.Length)
	case OpTruncate, OpPreallocate:
		return fmt.Sprintf("#%d %s %s %d", e.Seq, e.Op, e.Name, e.Length)
	}
	return fmt.Sprintf("#%d %s %s", e.Seq, e.Op, e.Name)
}

// A Hook sees every operation before [Faulty] carries it out. Returning nil
// lets the operation proceed; returning an error makes the operation fail
// with that error without touching the wrapped FS, except that a
// [TornWriteError] returned for an OpWrite first writes the first N bytes.
// A hook may be called concurrently from several goroutines.
type Hook func(Event) error

// TornWriteError, returned by a Hook for an OpWrite, makes Faulty write only
// the first N bytes of the buffer and then fail the write with this error:
// the short write that a crash or a full disk leaves behind.
type TornWriteError struct {
	N   int
	Err error // what the write returns after its N bytes; ErrInjected if nil
}

// Tear returns a *TornWriteError for n bytes wrapping ErrInjected.
func Tear(n int) error { return &TornWriteError{N: n} }

func (e *TornWriteError) Error() string {
	return fmt.Sprintf("torn write after %d bytes: %v", e.N, e.Unwrap())
}

func (e *TornWriteError) Unwrap() error {
	if e.Err == nil {
		return ErrInjected
	}
	return e.Err
}

// Faulty wraps an FS and calls a Hook before every operation, so tests can
// fail or tear chosen operations. Operations are numbered in the order they
// reach Faulty; with a deterministic workload the numbering, and so any fault
// chosen by it, is deterministic too.
type Faulty struct {
	fs   FS
	hook atomic.Pointer[Hook]
	seq  atomic.Int64
}

// NewFaulty wraps fs. hook may be nil (no faults) and replaced later with
// SetHook, so a test can set up state cleanly and then arm a fault.
func NewFaulty(fs FS, hook Hook) *Faulty {
	f := &Faulty{fs: fs}
	f.SetHook(hook)
	return f
}

// SetHook replaces the hook; nil disables fault injection.
func (f *Faulty) SetHook(h Hook) {
	if h == nil {
		f.hook.Store(nil)
		return
	}
	f.hook.Store(&h)
}

// Ops returns how many operations f has seen.
func (f *Faulty) Ops() int64 { return f.seq.Load() }

func (f *Faulty) call(e Event) error {
	e.Seq = f.seq.Add(1)
	if h := f.hook.Load(); h != nil {
		return (*h)(e)
	}
	return nil
}

func (f *Faulty) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	op := OpOpen
	if flag&os.O_CREATE != 0 {
		op = OpCreate
	}
	if err := f.call(Event{Op: op, Name: name, Flag: flag}); err != nil {
		return nil, err
	}
	file, err := f.fs.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultyFile{fs: f, f: file, name: name}, nil
}

func (f *Faulty) Remove(name string) error {
	if err := f.call(Event{Op: OpRemove, Name: name}); err != nil {
		return err
	}
	return f.fs.Remove(name)
}

func (f *Faulty) Rename(oldname, newname string) error {
	if err := f.call(Event{Op: OpRename, Name: oldname, NewName: newname}); err != nil {
		return err
	}
	return f.fs.Rename(oldname, newname)
}

func (f *Faulty) MkdirAll(dir string, perm os.FileMode) error {
	if err := f.call(Event{Op: OpMkdirAll, Name: dir}); err != nil {
		return err
	}
	return f.fs.MkdirAll(dir, perm)
}

func (f *Faulty) ReadDir(dir string) ([]string, error) {
	if err := f.call(Event{Op: OpReadDir, Name: dir}); err != nil {
		return nil, err
	}
	return f.fs.ReadDir(dir)
}

func (f *Faulty) SyncDir(dir string) error {
	if err := f.call(Event{Op: OpSyncDir, Name: dir}); err != nil {
		return err
	}
	return f.fs.SyncDir(dir)
}

func (f *Faulty) Lock(name string) (io.Closer, error) {
	if err := f.call(Event{Op: OpLock, Name: name}); err != nil {
		return nil, err
	}
	return f.fs.Lock(name)
}

func (f *Faulty) Stat(name string) (os.FileInfo, error) {
	if err := f.call(Event{Op: OpStat, Name: name}); err != nil {
		return nil, err
	}
	return f.fs.Stat(name)
}

type faultyFile struct {
	fs   *Faulty
	f    File
	name string
}

func (ff *faultyFile) ReadAt(p []byte, off int64) (int, error) {
	if err := ff.fs.call(Event{Op: OpRead, Name: ff.name, Offset: off, Length: int64(len(p))}); err != nil {
		return 0, err
	}
	return ff.f.ReadAt(p, off)
}

func (ff *faultyFile) WriteAt(p []byte, off int64) (int, error) {
	err := ff.fs.call(Event{Op: OpWrite, Name: ff.name, Offset: off, Length: int64(len(p)), Data: p})
	if err == nil {
		return ff.f.WriteAt(p, off)
	}
	var torn *TornWriteError
	if !errors.As(err, &torn) {
		return 0, err
	}
	n := min(max(torn.N, 0), len(p))
	if n > 0 {
		if w, werr := ff.f.WriteAt(p[:n], off); werr != nil {
			return w, werr
		}
	}
	return n, err
}

// Close closes the wrapped file even when the hook injects an error, so that
// a failed Close does not leak descriptors in tests.
func (ff *faultyFile) Close() error {
	herr := ff.fs.call(Event{Op: OpClose, Name: ff.name})
	cerr := ff.f.Close()
	if herr != nil {
		return herr
	}
	return cerr
}

func (ff *faultyFile) Sync() error {
	if err := ff.fs.call(Event{Op: OpSync, Name: ff.name}); err != nil {
		return err
	}
	return ff.f.Sync()
}

func (ff *faultyFile) Truncate(size int64) error {
	if err := ff.fs.call(Event{Op: OpTruncate, Name: ff.name, Length: size}); err != nil {
		return err
	}
	return ff.f.Truncate(size)
}

func (ff *faultyFile) Preallocate(size int64) error {
	if err := ff.fs.call(Event{Op: OpPreallocate, Name: ff.name, Length: size}); err != nil {
		return err
	}
	return ff.f.Preallocate(size)
}

func (ff *faultyFile) Size() (int64, error) {
	if err := ff.fs.call(Event{Op: OpSize, Name: ff.name}); err != nil {
		return 0, err
	}
	return ff.f.Size()
}

// Chain returns a hook that calls each hook in turn and returns the first
// error. Every hook sees every event up to the first error, so counters in
// later hooks do not count events an earlier hook failed.
func Chain(hooks ...Hook) Hook {
	return func(e Event) error {
		for _, h := range hooks {
			if h == nil {
				continue
			}
			if err := h(e); err != nil {
				return err
			}
		}
		return nil
	}
}

// Match returns a hook that passes to h only the events for which pred
// reports true; the others proceed untouched and h does not count them.
func Match(pred func(Event) bool, h Hook) Hook {
	return func(e Event) error {
		if !pred(e) {
			return nil
		}
		return h(e)
	}
}

// IsOp is a predicate for Match: the event is one of ops.
func IsOp(ops ...Op) func(Event) bool {
	return func(e Event) bool {
		for _, o := range ops {
			if e.Op == o {
				return true
			}
		}
		return false
	}
}

// OnFile is a predicate for Match: the event's Name has the base name base
// (for example "00000002.wal"), whatever its directory.
func OnFile(base string) func(Event) bool {
	return func(e Event) bool { return filepath.Base(e.Name) == base }
}

// Nth returns a hook that returns err on the n-th event it sees (counting
// from 1) and nil on every other, before and after. Wrap it in Match to count
// only some events: Match(IsOp(OpSync), Nth(3, ErrInjected)) fails the third
// Sync, and only it, as a real disk may (a later fsync "succeeding" after a
// failed one is exactly the trap a storage engine must not fall into).
func Nth(n int, err error) Hook {
	var mu sync.Mutex
	seen := 0
	return func(Event) error {
		mu.Lock()
		defer mu.Unlock()
		seen++
		if seen == n {
			return err
		}
		return nil
	}
}

// FromNth is like Nth but fails the n-th event and every one after it: a
// device that has gone away.
func FromNth(n int, err error) Hook {
	var mu sync.Mutex
	seen := 0
	return func(Event) error {
		mu.Lock()
		defer mu.Unlock()
		seen++
		if seen >= n {
			return err
		}
		return nil
	}
}

// FailNth fails the n-th operation of kind op with ErrInjected.
func FailNth(op Op, n int) Hook { return Match(IsOp(op), Nth(n, ErrInjected)) }

// TearWriteAt returns a hook that tears the first write to a file with base
// name base (any file if base is "") whose byte range covers file offset k:
// the bytes before k are written and the write fails with a
// *TornWriteError. Writes that do not cover k proceed. Combined with
// [MemFS.CrashWith] keeping current bytes, this leaves the torn tail a power
// cut in the middle of a write would.
func TearWriteAt(base string, k int64) Hook {
	var mu sync.Mutex
	done := false
	return func(e Event) error {
		if e.Op != OpWrite || (base != "" && filepath.Base(e.Name) != base) {
			return nil
		}
		if k < e.Offset || k >= e.Offset+e.Length {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if done {
			return nil
		}
		done = true
		return Tear(int(k - e.Offset))
	}
}
