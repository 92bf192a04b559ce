package vfs_test

import (
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
)

func TestFaultyFailNthSync(t *testing.T) {
	t.Parallel()
	f := vfs.NewFaulty(vfs.NewMemFS(), vfs.FailNth(vfs.OpSync, 3))
	mustMkdir(t, f, "/d")
	file := writeFile(t, f, "/d/a", "x", false)
	defer file.Close()
	var errs []error
	for range 5 {
		errs = append(errs, file.Sync())
	}
	for i, err := range errs {
		if want := i == 2; want != (err != nil) {
			t.Fatalf("sync %d: %v", i+1, err)
		}
	}
	if !errors.Is(errs[2], vfs.ErrInjected) {
		t.Fatalf("injected error %v does not wrap ErrInjected", errs[2])
	}
}

func TestFaultyTearWriteAt(t *testing.T) {
	t.Parallel()
	m := vfs.NewMemFS()
	f := vfs.NewFaulty(m, nil)
	mustMkdir(t, f, "/d")
	file := writeFile(t, f, "/d/a", "0123", true)
	defer file.Close()
	f.SyncDir("/d")
	f.SetHook(vfs.TearWriteAt("a", 6))

	// A write that does not cover offset 6 goes through.
	if _, err := file.WriteAt([]byte("45"), 4); err != nil {
		t.Fatal(err)
	}
	n, err := file.WriteAt([]byte("6789"), 4)
	var torn *vfs.TornWriteError
	if n != 2 || !errors.As(err, &torn) || !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("torn write = %d, %v", n, err)
	}
	if got, _ := readFile(t, m, "/d/a"); got != "012367" {
		t.Fatalf("after torn write: %q", got)
	}
	// Only the first covering write is torn.
	if _, err := file.WriteAt([]byte("6789"), 4); err != nil {
		t.Fatal(err)
	}
}

func TestFaultyEventsAndMatch(t *testing.T) {
	t.Parallel()
	var events []vfs.Event
	record := func(e vfs.Event) error { events = append(events, e); return nil }
	failRename := vfs.Match(func(e vfs.Event) bool { return e.Op == vfs.OpRename && e.NewName == "/d/b" },
		func(vfs.Event) error { return vfs.ErrInjected })
	f := vfs.NewFaulty(vfs.NewMemFS(), vfs.Chain(record, failRename))
	mustMkdir(t, f, "/d")
	file, err := f.OpenFile("/d/a", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	file.WriteAt([]byte("abc"), 10)
	file.Close()
	if err := f.Rename("/d/a", "/d/b"); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("rename = %v", err)
	}
	if err := f.Rename("/d/a", "/d/c"); err != nil {
		t.Fatal(err)
	}
	want := []vfs.Event{
		{Seq: 1, Op: vfs.OpMkdirAll, Name: "/d"},
		{Seq: 2, Op: vfs.OpCreate, Name: "/d/a", Flag: os.O_RDWR | os.O_CREATE},
		{Seq: 3, Op: vfs.OpWrite, Name: "/d/a", Offset: 10, Length: 3},
		{Seq: 4, Op: vfs.OpClose, Name: "/d/a"},
		{Seq: 5, Op: vfs.OpRename, Name: "/d/a", NewName: "/d/b"},
		{Seq: 6, Op: vfs.OpRename, Name: "/d/a", NewName: "/d/c"},
	}
	if len(events) != len(want) {
		t.Fatalf("events = %v", events)
	}
	for i := range want {
		got := events[i]
		if got.Op == vfs.OpWrite && string(got.Data) != "abc" {
			t.Errorf("write event carries %q, want the bytes being written", got.Data)
		}
		got.Data = nil
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("event %d = %v, want %v", i, got, want[i])
		}
	}
	if f.Ops() != 6 {
		t.Fatalf("Ops = %d", f.Ops())
	}
}

func TestFaultyFromNth(t *testing.T) {
	t.Parallel()
	h := vfs.FromNth(2, vfs.ErrInjected)
	var got []bool
	for range 4 {
		got = append(got, h(vfs.Event{}) != nil)
	}
	if got[0] || !got[1] || !got[2] || !got[3] {
		t.Fatalf("FromNth pattern %v", got)
	}
}
