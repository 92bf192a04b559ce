package vfs_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
)

func writeFile(t *testing.T, fsys vfs.FS, name, data string, sync bool) vfs.File {
	t.Helper()
	f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(data), 0); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func readFile(t *testing.T, fsys vfs.FS, name string) (string, bool) {
	t.Helper()
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := f.Size()
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, 0); err != nil && size > 0 {
		t.Fatal(err)
	}
	return string(buf), true
}

func TestMemFSCrashDropsUnsyncedEntries(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	mustMkdir(t, m, "/d")
	// Synced data under an unsynced entry: lost.
	writeFile(t, m, "/d/a", "aaa", true).Close()
	c := m.Crash()
	if _, ok := readFile(t, c, "/d/a"); ok {
		t.Fatal("file whose entry was never synced survived the crash")
	}
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	if got, ok := readFile(t, m.Crash(), "/d/a"); !ok || got != "aaa" {
		t.Fatalf("after SyncDir: %q, %v", got, ok)
	}
}

func TestMemFSCrashDropsUnsyncedData(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	mustMkdir(t, m, "/d")
	f := writeFile(t, m, "/d/a", "hello", true)
	m.SyncDir("/d")
	f.WriteAt([]byte("HELLO world"), 0)
	if got, _ := readFile(t, m.Crash(), "/d/a"); got != "hello" {
		t.Fatalf("crash kept unsynced bytes: %q", got)
	}
	f.Truncate(2)
	f.Sync()
	f.Truncate(4) // regrow, unsynced: the durable file is the 2 bytes
	if got, _ := readFile(t, m.Crash(), "/d/a"); got != "HE" {
		t.Fatalf("after synced shrink: %q", got)
	}
	f.Sync()
	if got, _ := readFile(t, m.Crash(), "/d/a"); got != "HE\x00\x00" {
		t.Fatalf("after synced regrow: %q", got)
	}
	// The live FS still has everything.
	if got, _ := readFile(t, m, "/d/a"); got != "HE\x00\x00" {
		t.Fatalf("live file: %q", got)
	}
	f.Close()
}

func TestMemFSCrashRenameAndRemove(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	mustMkdir(t, m, "/d")
	writeFile(t, m, "/d/old", "v1", true).Close()
	writeFile(t, m, "/d/gone", "g", true).Close()
	m.SyncDir("/d")

	writeFile(t, m, "/d/tmp", "v2", true).Close()
	if err := m.Rename("/d/tmp", "/d/old"); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove("/d/gone"); err != nil {
		t.Fatal(err)
	}
	c := m.Crash()
	if got, _ := readFile(t, c, "/d/old"); got != "v1" {
		t.Fatalf("unsynced rename took effect: %q", got)
	}
	if _, ok := readFile(t, c, "/d/gone"); !ok {
		t.Fatal("unsynced remove took effect")
	}
	if names, _ := c.ReadDir("/d"); !slices.Equal(names, []string{"gone", "old"}) {
		t.Fatalf("crashed dir = %v", names)
	}
	m.SyncDir("/d")
	c = m.Crash()
	if got, _ := readFile(t, c, "/d/old"); got != "v2" {
		t.Fatalf("synced rename: %q", got)
	}
	if names, _ := c.ReadDir("/d"); !slices.Equal(names, []string{"old"}) {
		t.Fatalf("crashed dir after sync = %v", names)
	}
}

func TestMemFSCrashWithKeepsChosenBytes(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	mustMkdir(t, m, "/d")
	f := writeFile(t, m, "/d/a", "0123", true)
	m.SyncDir("/d")
	f.WriteAt([]byte("456789"), 4)
	var seen []string
	c := m.CrashWith(func(name string, synced, current []byte) []byte {
		seen = append(seen, name)
		if string(synced) != "0123" || string(current) != "0123456789" {
			t.Errorf("keep(%s, %q, %q)", name, synced, current)
		}
		return current[:7] // a torn write: part of the unsynced bytes landed
	})
	if got, _ := readFile(t, c, "/d/a"); got != "0123456" {
		t.Fatalf("CrashWith result %q", got)
	}
	if !slices.Equal(seen, []string{"/d/a"}) {
		t.Fatalf("keep called for %v", seen)
	}
	// The crashed FS is durable as it stands: a second crash changes nothing.
	if got, _ := readFile(t, c.Crash(), "/d/a"); got != "0123456" {
		t.Fatalf("second crash %q", got)
	}
}

func TestMemFSLocksDoNotSurviveCrash(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	mustMkdir(t, m, "/d")
	l, err := m.Lock("/d/LOCK")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := m.Crash()
	l2, err := c.Lock("/d/LOCK")
	if err != nil {
		t.Fatalf("lock on crashed FS: %v", err)
	}
	l2.Close()
}

func TestMemFSHandleSurvivesRename(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	mustMkdir(t, m, "/d")
	f := writeFile(t, m, "/d/a.tmp", "x", false)
	m.Rename("/d/a.tmp", "/d/a")
	f.WriteAt([]byte("yz"), 1)
	f.Sync()
	m.SyncDir("/d")
	if got, _ := readFile(t, m.Crash(), "/d/a"); got != "xyz" {
		t.Fatalf("write through a renamed handle: %q", got)
	}
	f.Close()
}

func TestMemFSConcurrent(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	mustMkdir(t, m, "/d")
	f := writeFile(t, m, "/d/a", "", false)
	defer f.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			buf := bytes.Repeat([]byte{byte(g)}, 64)
			for i := range 50 {
				off := int64((g*50 + i) * 64)
				if _, err := f.WriteAt(buf, off); err != nil {
					t.Error(err)
				}
				if i%10 == 0 {
					f.Sync()
					m.SyncDir("/d")
					m.Crash()
				}
			}
		})
	}
	wg.Wait()
	f.Sync()
	got, _ := readFile(t, m.Crash(), "/d/a")
	for g := range 8 {
		for i := range 50 {
			off := (g*50 + i) * 64
			if got[off] != byte(g) || got[off+63] != byte(g) {
				t.Fatalf("block %d/%d lost", g, i)
			}
		}
	}
}
