package broker

import (
	"context"
	"time"

	"github.com/okiba/okiba/access"
)

// Principals: the access machine (package access) beside the queues and topics, its
// records in the same log, its snapshot in the same checkpoints. The broker stores
// principals and answers after fsync like any command; what a credential proves and what
// a request may do is the node's business (internal/auth). Secrets arrive sealed.

// CreatePrincipal makes a principal with one sealed secret and its grants.
func (b *Broker) CreatePrincipal(ctx context.Context, name string, grants []access.Grant, sealed []byte) (access.Principal, error) {
	var p access.Principal
	err := b.do(ctx, func(now int64) (err error) {
		p, err = b.a.Create(now, b.asink, name, grants, sealed)
		return err
	})
	if err == nil {
		b.logger.Info("principal created", "principal", name)
	}
	return p, err
}

// GrantPrincipal adds grants to a principal.
func (b *Broker) GrantPrincipal(ctx context.Context, name string, grants []access.Grant) (access.Principal, error) {
	var p access.Principal
	err := b.do(ctx, func(now int64) (err error) {
		p, err = b.a.Grant(now, b.asink, name, grants)
		return err
	})
	return p, err
}

// RevokePrincipal removes grants from a principal.
func (b *Broker) RevokePrincipal(ctx context.Context, name string, grants []access.Grant) (access.Principal, error) {
	var p access.Principal
	err := b.do(ctx, func(now int64) (err error) {
		p, err = b.a.Revoke(now, b.asink, name, grants)
		return err
	})
	return p, err
}

// RotatePrincipal gives a principal a new sealed secret; its current ones stay valid for
// keep (access.Machine.Rotate).
func (b *Broker) RotatePrincipal(ctx context.Context, name string, sealed []byte, keep time.Duration) (access.Principal, error) {
	var p access.Principal
	err := b.do(ctx, func(now int64) (err error) {
		p, err = b.a.Rotate(now, b.asink, name, sealed, keep)
		return err
	})
	return p, err
}

// DeletePrincipal removes a principal.
func (b *Broker) DeletePrincipal(ctx context.Context, name string) error {
	return b.do(ctx, func(now int64) error { return b.a.Delete(now, b.asink, name) })
}

// Principal returns one principal.
func (b *Broker) Principal(name string) (access.Principal, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.a.Get(name)
}

// Principals returns every principal, by name, and PrincipalChanges as of that read.
func (b *Broker) Principals() ([]access.Principal, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.a.List(), b.principalChanges.Load()
}

// PrincipalChanges moves whenever the principals change: a cache of them is current
// while it stays the same. It takes no lock (every request's authentication reads it).
func (b *Broker) PrincipalChanges() uint64 { return b.principalChanges.Load() }
