package access

import (
	"fmt"
	"slices"
	"strings"
)

// Permission is what a grant lets a principal do to the resources its pattern names.
// Values are part of the log's format: never reuse one.
type Permission uint8

const (
	// Send: send messages to a queue, publish records to a topic.
	Send Permission = 1
	// Receive: receive from a queue and settle what was received (ack, nack, extend,
	// dead-letter) with a valid receipt; join a topic's consumer groups, pull, commit and
	// seek. Receipts are capabilities, as SQS treats receipt handles: whoever holds one
	// and may receive from its queue may settle it.
	Receive Permission = 2
	// Browse: read without taking — peek, statistics, explain, list, read a topic's
	// records by offset.
	Browse Permission = 3
	// Manage: create, update, purge and delete, redrive, subscriptions, group deletion.
	// Includes Browse.
	Manage Permission = 4
	// Admin: everything, on everything — principals, the server's configuration.
	Admin Permission = 5
	// Metrics: scrape /metrics, and nothing else (a Prometheus principal). Browse on "*"
	// allows it too.
	Metrics Permission = 6
)

var permissionNames = [...]string{Send: "send", Receive: "receive", Browse: "browse", Manage: "manage", Admin: "admin", Metrics: "metrics"}

// Permissions lists every permission, in order.
var Permissions = []Permission{Send, Receive, Browse, Manage, Admin, Metrics}

func (p Permission) String() string {
	if int(p) < len(permissionNames) && permissionNames[p] != "" {
		return permissionNames[p]
	}
	return fmt.Sprintf("permission(%d)", uint8(p))
}

// ParsePermission reads a permission's name.
func ParsePermission(s string) (Permission, error) {
	for p, name := range permissionNames {
		if name != "" && name == s {
			return Permission(p), nil
		}
	}
	return 0, &InvalidError{Field: "permission", Reason: fmt.Sprintf("%q is not a permission (send, receive, browse, manage, admin, metrics)", s)}
}

// Kind is a kind of resource a pattern names.
type Kind uint8

const (
	// AnyKind is a pattern's kind when it names resources of every kind ("*").
	AnyKind Kind = 0
	Queue   Kind = 1
	Topic   Kind = 2
)

func (k Kind) String() string {
	switch k {
	case Queue:
		return "queue"
	case Topic:
		return "topic"
	}
	return "*"
}

// Resource is one thing a request acts on: a queue or a topic by name. The zero
// Resource is the server itself (principals, /metrics).
type Resource struct {
	Kind Kind
	Name string
}

func (r Resource) String() string {
	if r.Kind == AnyKind {
		return "*"
	}
	return r.Kind.String() + ":" + r.Name
}

// QueueNamed and TopicNamed are the resources of one queue and one topic.
func QueueNamed(name string) Resource { return Resource{Kind: Queue, Name: name} }
func TopicNamed(name string) Resource { return Resource{Kind: Topic, Name: name} }

// Limits of patterns and grants.
const (
	MaxPattern = 256 // bytes of a pattern's text
	MaxGrants  = 100 // grants of one principal
)

// Pattern names resources: "queue:orders-*" (every queue whose name starts with
// "orders-"), "topic:events.*", "queue:*", or "*" (every resource of every kind, and the
// server itself). A '*' matches any run of characters, none included; every other
// character matches itself.
type Pattern struct {
	Kind Kind
	Glob string
}

// ParsePattern reads a pattern.
func ParsePattern(s string) (Pattern, error) {
	if s == "*" {
		return Pattern{Kind: AnyKind, Glob: "*"}, nil
	}
	if len(s) > MaxPattern {
		return Pattern{}, &InvalidError{Field: "pattern", Reason: fmt.Sprintf("a pattern is at most %d bytes, got %d", MaxPattern, len(s))}
	}
	kind, glob, ok := strings.Cut(s, ":")
	var p Pattern
	switch kind {
	case "queue":
		p.Kind = Queue
	case "topic":
		p.Kind = Topic
	default:
		ok = false
	}
	if !ok || glob == "" {
		return Pattern{}, &InvalidError{Field: "pattern", Reason: fmt.Sprintf("%q is not a pattern: want queue:GLOB, topic:GLOB or *, such as queue:orders-* or topic:events.*", s)}
	}
	for _, c := range glob {
		if !nameChar(c) && c != '*' {
			return Pattern{}, &InvalidError{Field: "pattern", Reason: fmt.Sprintf("pattern %q has %q: a name pattern holds letters, digits, '-', '_', '.' and '*'", s, c)}
		}
	}
	p.Glob = glob
	return p, nil
}

func nameChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

func (p Pattern) String() string {
	if p.Kind == AnyKind {
		return "*"
	}
	return p.Kind.String() + ":" + p.Glob
}

// Matches reports whether the pattern names r. Only "*" names the server itself.
func (p Pattern) Matches(r Resource) bool {
	if p.Kind == AnyKind {
		return true
	}
	return p.Kind == r.Kind && glob(p.Glob, r.Name)
}

// glob matches name against a pattern whose only special character is '*', in linear
// time (the classic two-pointer walk with one backtrack point).
func glob(pat, name string) bool {
	p, n, star, mark := 0, 0, -1, 0
	for n < len(name) {
		switch {
		case p < len(pat) && pat[p] == '*':
			star, mark = p, n
			p++
		case p < len(pat) && pat[p] == name[n]:
			p++
			n++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pat) && pat[p] == '*' {
		p++
	}
	return p == len(pat)
}

// Grant is one permission on the resources a pattern names.
type Grant struct {
	Permission Permission
	On         Pattern
}

func (g Grant) String() string { return g.Permission.String() + " " + g.On.String() }

// ParseGrant reads "PERMISSION PATTERN" ("send queue:orders-*", "admin *"), or
// "PERMISSION" alone for the permissions that are not about resources (admin, metrics).
func ParseGrant(s string) (Grant, error) {
	perm, pat, _ := strings.Cut(strings.TrimSpace(s), " ")
	p, err := ParsePermission(perm)
	if err != nil {
		return Grant{}, err
	}
	pat = strings.TrimSpace(pat)
	if pat == "" && (p == Admin || p == Metrics) {
		pat = "*"
	}
	if pat == "" {
		return Grant{}, &InvalidError{Field: "grant", Reason: fmt.Sprintf("%q names no resources: want %s PATTERN, such as %s queue:orders-*", s, p, p)}
	}
	on, err := ParsePattern(pat)
	if err != nil {
		return Grant{}, err
	}
	g := Grant{Permission: p, On: on}
	return g, g.check()
}

func (g Grant) check() error {
	if _, err := ParsePermission(g.Permission.String()); err != nil {
		return err
	}
	if (g.Permission == Admin || g.Permission == Metrics) && g.On.Kind != AnyKind {
		return &InvalidError{Field: "grant", Reason: fmt.Sprintf("%s is a permission on the whole server: grant it on *, not %s", g.Permission, g.On)}
	}
	if g.On.Kind == AnyKind && g.On.Glob != "*" {
		return &InvalidError{Field: "grant", Reason: "a pattern without a kind is *"}
	}
	if g.On.Kind != AnyKind {
		if _, err := ParsePattern(g.On.String()); err != nil {
			return err
		}
	}
	return nil
}

// Grants is what one principal may do. The zero value allows nothing: okiba denies
// what no grant allows.
type Grants []Grant

// Allows reports whether the grants allow perm on r. Admin allows everything; Manage
// allows Browse; Metrics is allowed by a Metrics grant or by Browse (or Manage) on "*".
func (gs Grants) Allows(perm Permission, r Resource) bool {
	for _, g := range gs {
		if g.Permission == Admin {
			return true
		}
		if perm == Metrics {
			if g.Permission == Metrics || (g.Permission == Browse || g.Permission == Manage) && g.On.Kind == AnyKind {
				return true
			}
			continue
		}
		if !g.On.Matches(r) {
			continue
		}
		if g.Permission == perm || g.Permission == Manage && perm == Browse {
			return true
		}
	}
	return false
}

// normalize sorts grants and drops repeats, so that the same set is always the same
// list (and the same bytes in the log).
func normalize(gs []Grant) []Grant {
	out := slices.Clone(gs)
	slices.SortFunc(out, func(a, b Grant) int {
		if a.Permission != b.Permission {
			return int(a.Permission) - int(b.Permission)
		}
		return strings.Compare(a.On.String(), b.On.String())
	})
	return slices.Compact(out)
}
