package broker

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/okiba/okiba/topic"
)

// The data directory holds every message body: it is 0700 and its files 0600, and a
// directory an older okiba made readable to all is tightened when opened.
func TestDataDirectoryIsPrivate(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	b := start(t, Config{Dir: dir})
	mustQueue(t, b, "q", nil)
	send(t, b, "q", "secret body")
	if _, _, err := b.PutTopic(ctx, "t", func(c *topic.Config, _ bool) error { c.Partitions = 1; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, "t", []topic.PublishInput{{Body: []byte("secret record")}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	b.Close()
	check := func(when string) {
		t.Helper()
		n := 0
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			info, _ := d.Info()
			want := os.FileMode(0o600)
			if d.IsDir() {
				want = 0o700
			}
			if got := info.Mode().Perm(); got&^want != 0 {
				t.Errorf("%s: %s is %v, want at most %v", when, path, got, want)
			}
			n++
			return nil
		})
		if n < 6 {
			t.Fatalf("%s: only %d entries under the data directory", when, n)
		}
	}
	check("as created")
	// An older okiba's modes.
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, _ error) error {
		if d.IsDir() {
			return os.Chmod(path, 0o755)
		}
		return os.Chmod(path, 0o644)
	})
	b = start(t, Config{Dir: dir})
	b.Close()
	check("after opening an old directory")
}
