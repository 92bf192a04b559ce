package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/okiba/okiba/okibatest"
)

// okiba backup writes a running broker's state to a file; okiba restore makes a data
// directory of it that a new server serves, with the same messages. A backup needs the
// admin permission, and a restore refuses a directory that holds anything.
func TestBackupAndRestore(t *testing.T) {
	t.Parallel()
	token := "backup-token-backup-token"
	srv := okibatest.New(t, okibatest.Options{Token: token})
	h := &harness{t: t, srv: srv, env: map[string]string{"OKIBA_SERVER": srv.URL, "OKIBA_TOKEN": token}}
	h.ok("queue", "create", "orders")
	h.send("orders", "first", "second")
	file := filepath.Join(t.TempDir(), "okiba.backup")
	contains(t, "backup", h.ok("backup", "--to", file), "written to "+file)
	if st, err := os.Stat(file); err != nil || st.Size() == 0 {
		t.Fatalf("backup file: %v", err)
	}
	noToken := &harness{t: t, env: map[string]string{"OKIBA_SERVER": srv.URL}}
	contains(t, "without a token", noToken.fails(1, "backup", "--to", filepath.Join(t.TempDir(), "x")).err, "unauthorized")
	contains(t, "without --to", h.fails(2, "backup").err, "--to FILE is required")

	dir := filepath.Join(t.TempDir(), "restored")
	contains(t, "restore", h.ok("restore", "--from", file, dir), "2 messages")
	contains(t, "restore again", h.fails(1, "restore", "--from", file, dir).err, "not empty")

	restored := okibatest.New(t, okibatest.Options{Dir: dir, Token: token})
	r := &harness{t: t, srv: restored, env: map[string]string{"OKIBA_SERVER": restored.URL, "OKIBA_TOKEN": token}}
	got := r.recvJSON("orders", "--max", "10")
	var bodies []string
	for _, m := range got {
		bodies = append(bodies, m.Body)
	}
	if strings.Join(bodies, ",") != "first,second" {
		t.Fatalf("restored messages: %v", bodies)
	}
}
