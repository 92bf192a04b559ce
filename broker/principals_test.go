package broker

import (
	"errors"
	"testing"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/internal/vfs"
)

// Principals are records of the log and part of checkpoints: they survive a clean
// restart, a restart from a checkpoint and a power loss, exactly as they were answered.
func TestPrincipalsSurviveRestartsAndPowerLoss(t *testing.T) {
	t.Parallel()
	mem := vfs.NewMemFS()
	cfg := Config{Dir: "/data", FS: mem, Clock: fakeClock()}
	b := start(t, cfg)
	g, _ := access.ParseGrant("send queue:orders-*")
	if _, err := b.CreatePrincipal(ctx, "worker", []access.Grant{g}, []byte("sealed")); err != nil {
		t.Fatal(err)
	}
	before := b.PrincipalChanges()
	if _, err := b.CreatePrincipal(ctx, "ops", nil, []byte("sealed-ops")); err != nil {
		t.Fatal(err)
	}
	if b.PrincipalChanges() == before {
		t.Fatal("PrincipalChanges did not move")
	}
	if _, err := b.CreatePrincipal(ctx, "ops", nil, []byte("x")); !errors.Is(err, access.ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	b.Close()

	b = start(t, cfg) // replay
	if err := b.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RotatePrincipal(ctx, "worker", []byte("sealed-2"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := b.DeletePrincipal(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	want, _ := b.Principals()
	cfg.FS = mem.Crash() // power loss: only what was answered is kept, and all of it
	b.Close()

	b = start(t, cfg) // the checkpoint, then the log after it
	defer b.Close()
	got, _ := b.Principals()
	if len(got) != 1 || got[0].Name != "worker" || len(got[0].Secrets) != 2 || string(got[0].Secrets[1].Sealed) != "sealed-2" ||
		!got[0].Grants.Allows(access.Send, access.QueueNamed("orders-1")) {
		t.Fatalf("after restarts: %+v, want %+v", got, want)
	}
	if _, err := b.Principal("ops"); !errors.Is(err, access.ErrNotFound) {
		t.Fatalf("deleted principal: %v", err)
	}
}
