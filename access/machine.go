// Package access is who may do what: the principals of a broker — each with a name,
// its secrets (sealed: this package never sees one in the clear) and its grants — as a
// deterministic state machine beside the queues' and the topics', whose records go into
// the same log. Replicas that apply the same records hold the same principals, so a
// replicated cluster replicates them as it does queues.
//
// The machine decides nothing about requests: Grants.Allows says whether a set of grants
// allows a permission on a resource; the node's authentication step (internal/auth)
// finds the principal a credential proves and each interface asks Allows before it acts.
package access

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// Limits of the machine.
const (
	MaxPrincipals = 1000 // principals of one broker
	MaxName       = 64   // bytes of a principal's name
	MaxSealed     = 512  // bytes of one sealed secret
	// MaxSecrets is how many secrets a principal holds at once: during a rotation the
	// old one stays valid beside the new one (as a cloud provider's two access keys).
	MaxSecrets = 2
)

// Sentinel errors callers branch on; internal/errcode maps each to a stable code.
var (
	ErrNotFound      = errors.New("principal not found")
	ErrExists        = errors.New("principal already exists")
	ErrTooMany       = errors.New("too many principals")
	ErrDenied        = errors.New("permission denied")
	ErrSnapshotNewer = errors.New("access snapshot from a newer okiba")
)

// InvalidError reports a malformed name, pattern or grant.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string { return e.Reason }

// DeniedError is a request refused for a missing permission; it names the permission and
// the resource, so that the caller knows which grant to ask for.
type DeniedError struct {
	Principal  string
	Permission Permission
	Resource   Resource
}

func (e *DeniedError) Error() string {
	who := e.Principal
	if who == "" {
		who = "this principal"
	} else {
		who = fmt.Sprintf("principal %q", who)
	}
	if e.Resource.Kind == AnyKind {
		return fmt.Sprintf("forbidden: %s lacks the %s permission", who, e.Permission)
	}
	return fmt.Sprintf("forbidden: %s lacks the %s permission on %s", who, e.Permission, e.Resource)
}

func (e *DeniedError) Unwrap() error { return ErrDenied }

// Secret is one of a principal's secrets, sealed by the node (internal/auth) before it
// reaches the machine. ID is unique among every secret the machine ever held, so that a
// console session signed in with a secret ends with it, even if a principal of the same
// name is made again.
type Secret struct {
	ID      uint64
	Sealed  []byte
	Created int64 // Unix milliseconds
	// Expires, when not zero, is when the secret stops being valid (Unix milliseconds):
	// the old secret of a rotation.
	Expires int64
}

// Valid reports whether the secret is valid at now (Unix milliseconds).
func (s Secret) Valid(now int64) bool { return s.Expires == 0 || now < s.Expires }

// Principal is one caller okiba knows.
type Principal struct {
	Name    string
	Grants  Grants
	Secrets []Secret
	Created int64 // Unix milliseconds
	Updated int64
}

func (p Principal) clone() Principal {
	p.Grants = slices.Clone(p.Grants)
	p.Secrets = slices.Clone(p.Secrets)
	return p
}

// Sink receives the machine's records in emission order (the broker appends them to
// its log); the machine applies each right after emitting it.
type Sink interface{ Emit(Record) }

// Machine holds every principal. It is not safe for concurrent use: its owner (the
// broker) serialises calls.
type Machine struct {
	now        int64
	principals map[string]*Principal
	lastSecret uint64
	applied    uint64 // records applied: not state, a change counter for caches
}

// New returns a machine without principals.
func New() *Machine { return &Machine{principals: map[string]*Principal{}} }

// Changes counts the records the machine has applied since it was made: a cache of its
// principals (the node's keyring) rebuilds when it moves. It is not replicated state.
func (m *Machine) Changes() uint64 { return m.applied }

// CheckName reports whether name may name a principal: 1 to 64 letters, digits, '-',
// '_', '.' and '@', starting with a letter or digit. A name is also the principal's SQS
// access key id.
func CheckName(name string) error {
	if name == "" || len(name) > MaxName {
		return &InvalidError{Field: "name", Reason: fmt.Sprintf("a principal's name is 1 to %d characters, got %d", MaxName, len(name))}
	}
	for i, c := range name {
		if !nameChar(c) && c != '@' || i == 0 && (c == '-' || c == '_' || c == '.' || c == '@') {
			return &InvalidError{Field: "name", Reason: fmt.Sprintf("principal name %q: use letters, digits, '-', '_', '.' and '@', starting with a letter or digit", name)}
		}
	}
	return nil
}

func checkGrants(gs []Grant) error {
	if len(gs) > MaxGrants {
		return &InvalidError{Field: "grants", Reason: fmt.Sprintf("a principal has at most %d grants, got %d", MaxGrants, len(gs))}
	}
	for _, g := range gs {
		if err := g.check(); err != nil {
			return err
		}
	}
	return nil
}

func checkSealed(sealed []byte) error {
	if len(sealed) == 0 || len(sealed) > MaxSealed {
		return &InvalidError{Field: "secret", Reason: fmt.Sprintf("a sealed secret is 1 to %d bytes, got %d", MaxSealed, len(sealed))}
	}
	return nil
}

func (m *Machine) emit(sink Sink, r Record) {
	sink.Emit(r)
	if err := m.Apply(r); err != nil {
		panic(fmt.Sprintf("access: applying a record it emitted: %v", err)) // a bug, not input
	}
}

// Create makes a principal with one secret and its grants.
func (m *Machine) Create(now int64, sink Sink, name string, grants []Grant, sealed []byte) (Principal, error) {
	if err := CheckName(name); err != nil {
		return Principal{}, err
	}
	if err := checkGrants(grants); err != nil {
		return Principal{}, err
	}
	if err := checkSealed(sealed); err != nil {
		return Principal{}, err
	}
	if _, ok := m.principals[name]; ok {
		return Principal{}, fmt.Errorf("%w: %q", ErrExists, name)
	}
	if len(m.principals) >= MaxPrincipals {
		return Principal{}, fmt.Errorf("%w: at most %d", ErrTooMany, MaxPrincipals)
	}
	p := Principal{Name: name, Grants: normalize(grants), Created: now, Updated: now,
		Secrets: []Secret{{ID: m.lastSecret + 1, Sealed: slices.Clone(sealed), Created: now}}}
	m.emit(sink, &PutRecord{Now: now, Principal: p})
	return m.Get(name)
}

func (m *Machine) lookup(name string) (*Principal, error) {
	p, ok := m.principals[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return p, nil
}

// Grant adds grants to a principal (those it holds already are kept once).
func (m *Machine) Grant(now int64, sink Sink, name string, grants []Grant) (Principal, error) {
	p, err := m.lookup(name)
	if err != nil {
		return Principal{}, err
	}
	if err := checkGrants(grants); err != nil {
		return Principal{}, err
	}
	next := p.clone()
	next.Grants = normalize(append(next.Grants, grants...))
	if err := checkGrants(next.Grants); err != nil {
		return Principal{}, err
	}
	return m.put(now, sink, next)
}

// Revoke removes grants from a principal; a grant it does not hold is no error.
func (m *Machine) Revoke(now int64, sink Sink, name string, grants []Grant) (Principal, error) {
	p, err := m.lookup(name)
	if err != nil {
		return Principal{}, err
	}
	if err := checkGrants(grants); err != nil {
		return Principal{}, err
	}
	next := p.clone()
	next.Grants = slices.DeleteFunc(next.Grants, func(g Grant) bool { return slices.Contains(grants, g) })
	return m.put(now, sink, next)
}

// Rotate gives a principal a new secret. Its current secrets stay valid for keep more
// (none of them past an earlier expiry), so that its programs can move to the new one;
// keep 0 ends them now, and with them the console sessions signed in with them. Only the
// newest old secret is kept (MaxSecrets).
func (m *Machine) Rotate(now int64, sink Sink, name string, sealed []byte, keep time.Duration) (Principal, error) {
	p, err := m.lookup(name)
	if err != nil {
		return Principal{}, err
	}
	if err := checkSealed(sealed); err != nil {
		return Principal{}, err
	}
	if keep < 0 {
		return Principal{}, &InvalidError{Field: "keep", Reason: fmt.Sprintf("keep must not be negative, got %v", keep)}
	}
	next := p.clone()
	var kept []Secret
	if keep > 0 {
		until := now + keep.Milliseconds()
		for _, s := range next.Secrets {
			if !s.Valid(now) {
				continue
			}
			if s.Expires == 0 || s.Expires > until {
				s.Expires = until
			}
			kept = append(kept, s)
		}
		if len(kept) > MaxSecrets-1 {
			kept = kept[len(kept)-(MaxSecrets-1):]
		}
	}
	next.Secrets = append(kept, Secret{ID: m.lastSecret + 1, Sealed: slices.Clone(sealed), Created: now})
	return m.put(now, sink, next)
}

func (m *Machine) put(now int64, sink Sink, next Principal) (Principal, error) {
	next.Updated = now
	m.emit(sink, &PutRecord{Now: now, Principal: next})
	return m.Get(next.Name)
}

// Delete removes a principal: its secrets stop being valid at once.
func (m *Machine) Delete(now int64, sink Sink, name string) error {
	if _, err := m.lookup(name); err != nil {
		return err
	}
	m.emit(sink, &DeleteRecord{Now: now, Name: name})
	return nil
}

// Get returns a copy of one principal.
func (m *Machine) Get(name string) (Principal, error) {
	p, err := m.lookup(name)
	if err != nil {
		return Principal{}, err
	}
	return p.clone(), nil
}

// List returns a copy of every principal, by name.
func (m *Machine) List() []Principal {
	out := make([]Principal, 0, len(m.principals))
	for _, p := range m.principals {
		out = append(out, p.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Len is the number of principals.
func (m *Machine) Len() int { return len(m.principals) }
