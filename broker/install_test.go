package broker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/okiba/okiba/internal/vfs"
)

// A swap of an installed state cut short anywhere — here after two files moved in, and
// between moving the third aside and moving its replacement in — is finished by the next
// open: every file of the broker is the installed one, the rest of the directory stays.
func TestFinishInstallCompletesASwapCutShort(t *testing.T) {
	dir := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{formatFile, "secret", "checkpoints/c", "wal/s", "topics/p"} {
		write(filepath.Join(dir, name), "old")
		write(filepath.Join(dir, installDir, name), "new")
	}
	write(filepath.Join(dir, "raft", "members.json"), "kept")
	write(filepath.Join(dir, "LOCK"), "")
	// The crash: FORMAT and secret swapped, checkpoints moved aside only.
	old := filepath.Join(dir, installOld)
	for _, name := range []string{formatFile, "secret", "checkpoints"} {
		if err := os.MkdirAll(old, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, name), filepath.Join(old, name)); err != nil {
			t.Fatal(err)
		}
		if name != "checkpoints" {
			if err := os.Rename(filepath.Join(dir, installDir, name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 2 { // finishing twice is finishing once
		if err := finishInstall(vfs.OS, dir); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{formatFile: "new", "secret": "new", "checkpoints/c": "new", "wal/s": "new",
		"topics/p": "new", "raft/members.json": "kept"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
	for _, gone := range []string{installDir, installOld} {
		if _, err := os.Stat(filepath.Join(dir, gone)); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", gone, err)
		}
	}
}
