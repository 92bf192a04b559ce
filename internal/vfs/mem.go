package vfs

import (
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// MemFS is an in-memory FS that forgets, on [MemFS.Crash], everything a real
// disk would be allowed to forget on a power loss. It exists so that storage
// tests can check durability claims instead of trusting them.
//
// Semantics:
//   - Each file has its current bytes and its durable bytes; File.Sync copies
//     the first to the second. Preallocate and Truncate change only the
//     current bytes, like writes.
//   - File entries (create, rename, remove) are volatile until SyncDir of
//     their directory, which makes all of that directory's entries durable
//     at once. A renamed file whose rename was not yet synced survives a
//     crash under its old name; a removed one comes back.
//   - Directories themselves are durable as soon as MkdirAll returns, and a
//     removed empty directory is gone at once: okiba creates its directories
//     once and never relies on their own durability, so modelling it would
//     only add noise.
//   - Locks are per MemFS: a second Lock of the same name fails with
//     ErrLocked, and the MemFS returned by Crash starts with no locks held.
//
// A MemFS is safe for concurrent use. The zero value is not usable; call
// [NewMemFS].
type MemFS struct {
	mu    sync.Mutex
	dirs  map[string]*memDir // by cleaned path
	locks map[string]bool    // cleaned paths currently locked
}

type memDir struct {
	files  map[string]*memNode // current entries, by base name
	synced map[string]*memNode // entries as of the last SyncDir
}

// memNode is an inode: renames and open handles share it.
type memNode struct {
	data   []byte
	synced []byte
	// [dirtyLo, dirtyHi) covers every byte of data that may differ from
	// synced, so that Sync copies only what changed; empty when lo >= hi.
	dirtyLo, dirtyHi int64
}

// NewMemFS returns an empty MemFS holding the root directories "/" and ".".
func NewMemFS() *MemFS {
	m := &MemFS{dirs: map[string]*memDir{}, locks: map[string]bool{}}
	m.dirs[string(filepath.Separator)] = newMemDir()
	m.dirs["."] = newMemDir()
	return m
}

func newMemDir() *memDir {
	return &memDir{files: map[string]*memNode{}, synced: map[string]*memNode{}}
}

// Crash returns a new MemFS holding only what was durable in m: the synced
// contents of the files named by synced directory entries. m itself is left
// as it was, so a test can compare the two.
func (m *MemFS) Crash() *MemFS { return m.CrashWith(nil) }

// CrashWith is Crash with a say in which unsynced bytes survive. For every
// file that survives, keep is called (in path order) with the file's path
// under its durable name, its durable bytes and its current bytes, and
// returns the contents the file has after the crash, typically a mix such as
// a prefix of an unsynced write (a torn write). keep may be nil, meaning
// "durable bytes only". The slices passed to keep are copies.
func (m *MemFS) CrashWith(keep func(name string, synced, current []byte) []byte) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := &MemFS{dirs: map[string]*memDir{}, locks: map[string]bool{}}
	clones := map[*memNode]*memNode{}
	for _, dir := range slices.Sorted(maps.Keys(m.dirs)) {
		d := m.dirs[dir]
		nd := newMemDir()
		for _, base := range slices.Sorted(maps.Keys(d.synced)) {
			n := d.synced[base]
			c, ok := clones[n]
			if !ok {
				content := slices.Clone(n.synced)
				if keep != nil {
					content = slices.Clone(keep(filepath.Join(dir, base), slices.Clone(n.synced), slices.Clone(n.data)))
				}
				if content == nil {
					content = []byte{}
				}
				c = &memNode{data: content, synced: slices.Clone(content)}
				clones[n] = c
			}
			nd.files[base] = c
			nd.synced[base] = c
		}
		out.dirs[dir] = nd
	}
	return out
}

func splitPath(name string) (clean, dir, base string) {
	clean = filepath.Clean(name)
	return clean, filepath.Dir(clean), filepath.Base(clean)
}

func (m *MemFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	clean, dir, base := splitPath(name)
	if _, isDir := m.dirs[clean]; isDir {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	}
	d, ok := m.dirs[dir]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	writable := flag&(os.O_WRONLY|os.O_RDWR) != 0
	n, ok := d.files[base]
	switch {
	case !ok && flag&os.O_CREATE == 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	case !ok:
		n = &memNode{}
		d.files[base] = n
	case flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	}
	if flag&os.O_TRUNC != 0 && writable {
		n.resize(0)
	}
	return &memFile{fs: m, n: n, name: name, readable: flag&os.O_WRONLY == 0, writable: writable}, nil
}

func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	clean, dir, base := splitPath(name)
	if d, isDir := m.dirs[clean]; isDir {
		if len(d.files) > 0 || m.hasSubdirLocked(clean) {
			return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
		}
		delete(m.dirs, clean)
		return nil
	}
	d, ok := m.dirs[dir]
	if !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	if _, ok := d.files[base]; !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(d.files, base)
	return nil
}

func (m *MemFS) hasSubdirLocked(dir string) bool {
	for p := range m.dirs {
		if p != dir && filepath.Dir(p) == dir {
			return true
		}
	}
	return false
}

// Rename moves files only; renaming directories is not supported.
func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	oclean, odir, obase := splitPath(oldname)
	nclean, ndir, nbase := splitPath(newname)
	lerr := func(err error) error { return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err} }
	if _, isDir := m.dirs[oclean]; isDir {
		return lerr(syscall.EISDIR)
	}
	if _, isDir := m.dirs[nclean]; isDir {
		return lerr(syscall.EISDIR)
	}
	od, ok := m.dirs[odir]
	if !ok {
		return lerr(fs.ErrNotExist)
	}
	nd, ok := m.dirs[ndir]
	if !ok {
		return lerr(fs.ErrNotExist)
	}
	n, ok := od.files[obase]
	if !ok {
		return lerr(fs.ErrNotExist)
	}
	delete(od.files, obase)
	nd.files[nbase] = n
	return nil
}

func (m *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var missing []string
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		if _, ok := m.dirs[p]; ok {
			break
		}
		parent, base := filepath.Dir(p), filepath.Base(p)
		if pd, ok := m.dirs[parent]; ok {
			if _, isFile := pd.files[base]; isFile {
				return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
			}
		}
		missing = append(missing, p)
		if parent == p {
			break
		}
	}
	for _, p := range missing {
		m.dirs[p] = newMemDir()
	}
	return nil
}

func (m *MemFS) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	clean := filepath.Clean(dir)
	d, ok := m.dirs[clean]
	if !ok {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: fs.ErrNotExist}
	}
	names := slices.Collect(maps.Keys(d.files))
	for p := range m.dirs {
		if p != clean && filepath.Dir(p) == clean {
			names = append(names, filepath.Base(p))
		}
	}
	slices.Sort(names)
	return names, nil
}

func (m *MemFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.dirs[filepath.Clean(dir)]
	if !ok {
		return &fs.PathError{Op: "syncdir", Path: dir, Err: fs.ErrNotExist}
	}
	d.synced = maps.Clone(d.files)
	return nil
}

// Lock creates name if needed, as flock on a real file system would.
func (m *MemFS) Lock(name string) (io.Closer, error) {
	f, err := m.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	f.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	clean := filepath.Clean(name)
	if m.locks[clean] {
		return nil, fmt.Errorf("lock %s: %w", name, ErrLocked)
	}
	m.locks[clean] = true
	return &memLock{fs: m, name: clean}, nil
}

type memLock struct {
	fs   *MemFS
	name string
	once sync.Once
}

func (l *memLock) Close() error {
	l.once.Do(func() {
		l.fs.mu.Lock()
		delete(l.fs.locks, l.name)
		l.fs.mu.Unlock()
	})
	return nil
}

func (m *MemFS) Stat(name string) (os.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	clean, dir, base := splitPath(name)
	if _, ok := m.dirs[clean]; ok {
		return memInfo{name: base, dir: true}, nil
	}
	if d, ok := m.dirs[dir]; ok {
		if n, ok := d.files[base]; ok {
			return memInfo{name: base, size: int64(len(n.data))}, nil
		}
	}
	return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
}

type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }
func (i memInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}

func (n *memNode) markDirty(lo, hi int64) {
	if lo >= hi {
		return
	}
	if n.dirtyLo >= n.dirtyHi {
		n.dirtyLo, n.dirtyHi = lo, hi
		return
	}
	n.dirtyLo, n.dirtyHi = min(n.dirtyLo, lo), max(n.dirtyHi, hi)
}

// resize sets the current size, zero-filling growth, and marks the changed
// range dirty.
func (n *memNode) resize(size int64) {
	old := int64(len(n.data))
	n.data = resizeZeroed(n.data, size)
	n.markDirty(min(old, size), max(old, size))
}

func resizeZeroed(b []byte, size int64) []byte {
	old := int64(len(b))
	if size <= old {
		return b[:size]
	}
	if size <= int64(cap(b)) {
		b = b[:size]
		clear(b[old:])
		return b
	}
	nb := make([]byte, size, max(size, 2*int64(cap(b))))
	copy(nb, b)
	return nb
}

func (n *memNode) sync() {
	n.synced = resizeZeroed(n.synced, int64(len(n.data)))
	if n.dirtyLo < n.dirtyHi {
		hi := min(n.dirtyHi, int64(len(n.data)))
		if n.dirtyLo < hi {
			copy(n.synced[n.dirtyLo:hi], n.data[n.dirtyLo:hi])
		}
	}
	n.dirtyLo, n.dirtyHi = 0, 0
}

// memFile is an open handle on a memNode. It keeps working after the entry
// is renamed or removed, as an open file descriptor does.
type memFile struct {
	fs       *MemFS
	n        *memNode
	name     string
	readable bool
	writable bool
	closed   bool
}

func (f *memFile) check(op string, write bool) error {
	switch {
	case f.closed:
		return &fs.PathError{Op: op, Path: f.name, Err: fs.ErrClosed}
	case write && !f.writable, !write && !f.readable:
		return &fs.PathError{Op: op, Path: f.name, Err: syscall.EBADF}
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: syscall.EINVAL}
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "write", Path: f.name, Err: syscall.EINVAL}
	}
	end := off + int64(len(p))
	if end > int64(len(f.n.data)) {
		f.n.resize(end)
	}
	copy(f.n.data[off:], p)
	f.n.markDirty(off, end)
	return len(p), nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return &fs.PathError{Op: "close", Path: f.name, Err: fs.ErrClosed}
	}
	f.closed = true
	return nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return &fs.PathError{Op: "sync", Path: f.name, Err: fs.ErrClosed}
	}
	f.n.sync()
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return &fs.PathError{Op: "truncate", Path: f.name, Err: syscall.EINVAL}
	}
	f.n.resize(size)
	return nil
}

func (f *memFile) Preallocate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("preallocate", true); err != nil {
		return err
	}
	if size > int64(len(f.n.data)) {
		f.n.resize(size)
	}
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, &fs.PathError{Op: "stat", Path: f.name, Err: fs.ErrClosed}
	}
	return int64(len(f.n.data)), nil
}
