// Package audit is the node's audit log: every management action (what needed manage or
// admin) and every refused request — who, what, from where, and the outcome — as
// structured events through slog and, optionally, as JSON lines in a file of their own.
//
// Refusals are aggregated per source address per minute: the first refusal of a source
// in a window is written at once, the rest are counted and written as one summary when
// the window ends, so that a brute force costs the log one line a minute, not one per
// attempt. Management actions are never aggregated: each is a line.
package audit

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/okiba/okiba/clock"
)

// Event is one audited request.
type Event struct {
	Time time.Time `json:"time"`
	// Kind is "action" (a management action that ran, whatever its result), "refused"
	// (the first refusal of a source in a window) or "refused_summary".
	Kind string `json:"kind"`
	// Principal is who: the principal's name ("" when none was proved), and how it proved
	// it (token, session, signature, anonymous).
	Principal string `json:"principal,omitempty"`
	Method    string `json:"auth_method,omitempty"`
	// Source is where from: the client's address (behind trusted proxies, the address
	// they forwarded).
	Source string `json:"source"`
	// Action is what: "PUT /v1/queues/orders", "sqs:PurgeQueue", "console POST /ui/api/…".
	Action string `json:"action"`
	// Permission and Resource are what was checked ("manage", "queue:orders"), for a
	// refusal the permission that was missing.
	Permission string `json:"permission,omitempty"`
	Resource   string `json:"resource,omitempty"`
	// Status is the HTTP status answered; Outcome says it in a word: ok, failed,
	// forbidden, unauthenticated.
	Status  int    `json:"status"`
	Outcome string `json:"outcome"`
	// Count and Window are a summary's: refusals of the source in the window after its
	// first, and the window's length.
	Count  int    `json:"count,omitempty"`
	Window string `json:"window,omitempty"`
	// Actions are a summary's distinct actions refused (at most ten).
	Actions []string `json:"actions,omitempty"`
}

// Config configures a Log.
type Config struct {
	// Logger receives every event at level info (actions) or warn (refusals). Defaults
	// to discarding.
	Logger *slog.Logger
	// File, when set, also receives every event as one JSON line.
	File io.Writer
	// Window is the aggregation window of refusals. Defaults to one minute.
	Window time.Duration
	// MaxSources bounds the sources counted in one window; refusals from sources beyond
	// it are counted under the source "other". Defaults to 10,000.
	MaxSources int
	// Clock is the events' time. Defaults to the real clock.
	Clock clock.Clock
}

// Log is the audit log. It is safe for concurrent use.
type Log struct {
	cfg Config

	mu      sync.Mutex
	start   time.Time // of the current window
	sources map[string]*tally
	out     sync.Mutex // orders lines in File
}

type tally struct {
	n       int // refusals after the first
	actions map[string]bool
}

// New returns an audit log.
func New(cfg Config) *Log {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Window <= 0 {
		cfg.Window = time.Minute
	}
	if cfg.MaxSources <= 0 {
		cfg.MaxSources = 10_000
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	return &Log{cfg: cfg, start: cfg.Clock.Now(), sources: map[string]*tally{}}
}

// Action records a management action.
func (l *Log) Action(e Event) {
	e.Kind, e.Time = "action", l.cfg.Clock.Now()
	l.write(slog.LevelInfo, e)
}

// Refused records a refused request: written if it is its source's first in the
// window, else counted for the window's summary.
func (l *Log) Refused(e Event) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	summaries := l.rollLocked(now)
	src := e.Source
	t := l.sources[src]
	if t == nil && len(l.sources) >= l.cfg.MaxSources {
		src = "other"
		t = l.sources[src]
	}
	first := t == nil
	if first {
		t = &tally{actions: map[string]bool{}}
		l.sources[src] = t
	} else {
		t.n++
		if len(t.actions) < 10 {
			t.actions[e.Action] = true
		}
	}
	l.mu.Unlock()
	l.emit(summaries)
	if first {
		e.Kind, e.Time = "refused", now
		l.write(slog.LevelWarn, e)
	}
}

// Flush writes the summaries of a window that has ended.
func (l *Log) Flush() {
	l.mu.Lock()
	summaries := l.rollLocked(l.cfg.Clock.Now())
	l.mu.Unlock()
	l.emit(summaries)
}

// Run flushes each window as it ends, until ctx is done, then flushes what is counted.
func (l *Log) Run(ctx context.Context) {
	for {
		t := l.cfg.Clock.NewTimer(l.cfg.Window)
		select {
		case <-ctx.Done():
			t.Stop()
			l.mu.Lock()
			summaries := l.summariesLocked(l.cfg.Clock.Now())
			l.mu.Unlock()
			l.emit(summaries)
			return
		case <-t.C():
			l.Flush()
		}
	}
}

// rollLocked ends the current window if now is past it, returning its summaries.
func (l *Log) rollLocked(now time.Time) []Event {
	if now.Sub(l.start) < l.cfg.Window {
		return nil
	}
	out := l.summariesLocked(now)
	l.start = now
	return out
}

func (l *Log) summariesLocked(now time.Time) []Event {
	var out []Event
	for src, t := range l.sources {
		if t.n == 0 {
			continue
		}
		e := Event{Time: now, Kind: "refused_summary", Source: src, Count: t.n, Window: l.cfg.Window.String(), Outcome: "refused"}
		for a := range t.actions {
			e.Actions = append(e.Actions, a)
		}
		sort.Strings(e.Actions)
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Source < out[j].Source })
	l.sources = map[string]*tally{}
	return out
}

func (l *Log) emit(es []Event) {
	for _, e := range es {
		l.write(slog.LevelWarn, e)
	}
}

func (l *Log) write(level slog.Level, e Event) {
	attrs := []any{"kind", e.Kind, "source", e.Source, "action", e.Action, "status", e.Status, "outcome", e.Outcome}
	if e.Principal != "" {
		attrs = append(attrs, "principal", e.Principal)
	}
	if e.Method != "" {
		attrs = append(attrs, "auth_method", e.Method)
	}
	if e.Permission != "" {
		attrs = append(attrs, "permission", e.Permission)
	}
	if e.Resource != "" {
		attrs = append(attrs, "resource", e.Resource)
	}
	if e.Count > 0 {
		attrs = append(attrs, "count", e.Count, "window", e.Window, "actions", e.Actions)
	}
	l.cfg.Logger.Log(context.Background(), level, "audit", attrs...)
	if l.cfg.File != nil {
		b, _ := json.Marshal(e)
		l.out.Lock()
		_, _ = l.cfg.File.Write(append(b, '\n'))
		l.out.Unlock()
	}
}
