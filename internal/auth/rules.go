package auth

import (
	"context"
	"sync"

	"github.com/okiba/okiba/access"
)

// Rule is what one route of an interface (a path and method of the native API, an SQS
// action, a console endpoint) requires of its caller. Every interface keeps a table of
// its routes with their rules, which its handlers check through Require and which the
// permission matrix tests read: a route without a rule fails them.
type Rule struct {
	// Permission is what the caller must hold on the resource (zero with Open).
	Permission access.Permission
	// Kind is the kind of resource the request names (AnyKind: the server itself, as
	// for principals and /metrics).
	Kind access.Kind
	// Param names where the request names its resource: a path parameter ("name"), an
	// SQS field ("QueueUrl"). Empty for the server itself.
	Param string
	// Filtered: the route lists resources, showing only those the caller holds
	// Permission on, and refuses nothing.
	Filtered bool
	// Open: the route needs no permission (/healthz, the console's sign-in page).
	Open bool
	// Also says in words what else the handler checks on resources the request's body
	// names (a subscription's queue, a redrive's target), for the docs' table.
	Also string
}

// Resource returns the resource the rule names, given its name.
func (r Rule) Resource(name string) access.Resource {
	if r.Kind == access.AnyKind {
		return access.Resource{}
	}
	return access.Resource{Kind: r.Kind, Name: name}
}

// Decision is one permission check a request made.
type Decision struct {
	Permission access.Permission
	Resource   access.Resource
	Allowed    bool
}

// Recorder collects the decisions of one request that the node's audit log writes:
// which management actions ran, which requests were refused and for what.
type Recorder struct {
	mu        sync.Mutex
	decisions []Decision
}

type recorderKey struct{}

// WithRecorder returns ctx with a fresh Recorder for one request (a stream gives each
// frame its own).
func WithRecorder(ctx context.Context) (context.Context, *Recorder) {
	r := &Recorder{}
	return context.WithValue(ctx, recorderKey{}, r), r
}

// Decisions returns what was recorded.
func (r *Recorder) Decisions() []Decision {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Decision(nil), r.decisions...)
}

// record keeps what the audit log reads: a refusal, or a management action (manage or
// admin) that passed. The checks of sends and receives, the hot path's, are not kept.
func record(ctx context.Context, d Decision) {
	if d.Allowed && d.Permission != access.Manage && d.Permission != access.Admin {
		return
	}
	if r, ok := ctx.Value(recorderKey{}).(*Recorder); ok {
		r.mu.Lock()
		r.decisions = append(r.decisions, d)
		r.mu.Unlock()
	}
}
