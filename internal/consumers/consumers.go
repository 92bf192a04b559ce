// Package consumers keeps, per queue, the receivers a node has seen lately: who they
// are (a client's own name, else its principal and address), when each was last seen,
// the long polls each has waiting now and the leases each holds — what
// GET /v1/queues/{name}/consumers, the console's queue page and okiba consumers show.
//
// The table is memory only, small and bounded, and each node has its own: it is not
// written to the log, not replicated, and starts empty after a restart (docs/console.md).
// The receive paths feed it (the native API's HTTP and stream receives, the SQS
// front's ReceiveMessage), and settles take leases off it. A lease is counted from the
// receive that took it until its deadline passes or a settle (ack, nack, dead-letter,
// SQS DeleteMessage) names its receipt; an extend moves its deadline. It is a view of
// what this node saw, not the queue's state: the queue's in_flight is the truth.
//
// Every method takes the time, so that tests drive it with a fake clock.
package consumers

import (
	"cmp"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/okiba/okiba/api"
)

// Defaults of Options.
const (
	DefaultWindow      = time.Minute
	DefaultMaxPerQueue = 64
	DefaultMaxLeases   = 1024
)

// Options bound a Table. The zero value means the defaults.
type Options struct {
	// Window is how long a receiver stays listed after its last receive (while it has
	// no poll waiting and no lease). Defaults to a minute.
	Window time.Duration
	// MaxPerQueue bounds the receivers kept per queue; a new one then replaces the one
	// seen least lately among those without a poll waiting. Defaults to 64.
	MaxPerQueue int
	// MaxLeases bounds the leases kept per receiver; beyond, it says at least that many
	// (LeasesCapped). Defaults to 1024.
	MaxLeases int
}

// Who is a receiver as a request shows it.
type Who struct {
	// Name is the client's own name (the Okiba-Client header; the Go client's
	// Options.Name, host/pid by default). Empty for clients that send none.
	Name string
	// Principal is who the request authenticated as ("" with authentication off).
	Principal string
	// Remote is the connection's peer address (host:port).
	Remote string
	// Via is the interface: "http", "stream" or "sqs".
	Via string
}

// host is Remote without its port: a client's connections come from many ports.
func (w Who) host() string {
	if h, _, err := net.SplitHostPort(w.Remote); err == nil {
		return h
	}
	return w.Remote
}

// key tells receivers apart: by name when the client gives one, else by principal and
// host.
func (w Who) key() string {
	if w.Name != "" {
		return "name\x00" + w.Name + "\x00" + w.Principal
	}
	return "addr\x00" + w.Principal + "\x00" + w.host()
}

type entry struct {
	who       Who
	first     time.Time
	last      time.Time
	receives  uint64
	received  uint64
	waiting   int
	leases    map[string]time.Time // receipt → deadline
	capped    bool
	lastLease time.Time // the latest deadline among leases
}

// Table is the receivers of every queue. It is safe for concurrent use.
type Table struct {
	opts   Options
	mu     sync.Mutex
	queues map[string]map[string]*entry
}

// New returns an empty table.
func New(opts Options) *Table {
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.MaxPerQueue <= 0 {
		opts.MaxPerQueue = DefaultMaxPerQueue
	}
	if opts.MaxLeases <= 0 {
		opts.MaxLeases = DefaultMaxLeases
	}
	return &Table{opts: opts, queues: map[string]map[string]*entry{}}
}

// Window is how long a receiver stays listed after its last receive.
func (t *Table) Window() time.Duration { return t.opts.Window }

// Receive is a receive under way, from Receiving to Done.
type Receive struct {
	t       *Table
	queue   string
	key     string
	polling bool
}

// Receiving records that who began a receive of queue at now; polling says it may wait
// (a long poll), which counts as waiting until Done. Nil-safe: a nil table records
// nothing.
func (t *Table) Receiving(queue string, who Who, polling bool, now time.Time) *Receive {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entry(queue, who, now)
	e.last = now
	e.receives++
	if polling {
		e.waiting++
	}
	return &Receive{t: t, queue: queue, key: who.key(), polling: polling}
}

// Done ends the receive at now: it leased the messages of receipts (none for a
// receive-and-delete or an empty answer) until deadline.
func (r *Receive) Done(receipts []string, deadline, now time.Time) {
	if r == nil {
		return
	}
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.queues[r.queue][r.key]
	if e == nil {
		return // the queue was forgotten meanwhile
	}
	if r.polling {
		e.waiting--
	}
	e.last = now
	e.received += uint64(len(receipts))
	for _, rc := range receipts {
		if rc == "" || deadline.IsZero() {
			continue
		}
		if len(e.leases) >= t.opts.MaxLeases {
			t.expire(e, now)
			if len(e.leases) >= t.opts.MaxLeases {
				e.capped = true
				continue
			}
		}
		if e.leases == nil {
			e.leases = map[string]time.Time{}
		}
		e.leases[rc] = deadline
		if deadline.After(e.lastLease) {
			e.lastLease = deadline
		}
	}
}

// Settled takes the leases of receipts off whichever receiver of queue holds them (an
// ack, nack, dead-letter or delete ended them, whoever sent it).
func (t *Table) Settled(queue string, receipts []string) {
	if t == nil || len(receipts) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.queues[queue] {
		if len(e.leases) == 0 {
			continue
		}
		for _, rc := range receipts {
			delete(e.leases, rc)
		}
		if len(e.leases) == 0 {
			e.capped = false
		}
	}
}

// Extended moves the deadline of the leases of receipts to deadline.
func (t *Table) Extended(queue string, receipts []string, deadline time.Time) {
	if t == nil || len(receipts) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.queues[queue] {
		for _, rc := range receipts {
			if _, ok := e.leases[rc]; ok {
				e.leases[rc] = deadline
				if deadline.After(e.lastLease) {
					e.lastLease = deadline
				}
			}
		}
	}
}

// Forget drops what is known of queue (deleted).
func (t *Table) Forget(queue string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.queues, queue)
}

// List returns the receivers of queue at now: those seen within the window, with a
// poll waiting or with a lease, the latest seen first.
func (t *Table) List(queue string, now time.Time) []api.Consumer {
	out := []api.Consumer{}
	if t == nil {
		return out
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prune(queue, now)
	for _, e := range t.queues[queue] {
		out = append(out, api.Consumer{
			Name: e.who.Name, Principal: e.who.Principal, Remote: e.who.Remote, Via: e.who.Via,
			FirstSeen: e.first.UTC(), LastSeen: e.last.UTC(), Receives: e.receives, Received: e.received,
			Waiting: e.waiting, Leases: len(e.leases), LeasesCapped: e.capped,
		})
	}
	slices.SortFunc(out, func(a, b api.Consumer) int {
		return cmp.Or(b.LastSeen.Compare(a.LastSeen), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Remote, b.Remote))
	})
	return out
}

// entry returns who's entry of queue, made if new; a full queue gives up the receiver
// seen least lately among those without a poll waiting. Called with mu held.
func (t *Table) entry(queue string, who Who, now time.Time) *entry {
	q := t.queues[queue]
	if q == nil {
		q = map[string]*entry{}
		t.queues[queue] = q
	}
	k := who.key()
	if e := q[k]; e != nil {
		e.who = who // the latest address and interface
		return e
	}
	if len(q) >= t.opts.MaxPerQueue {
		t.prune(queue, now)
	}
	if len(q) >= t.opts.MaxPerQueue {
		var oldest string
		for k, e := range q {
			if e.waiting == 0 && (oldest == "" || e.last.Before(q[oldest].last)) {
				oldest = k
			}
		}
		if oldest == "" {
			for k, e := range q {
				if oldest == "" || e.last.Before(q[oldest].last) {
					oldest = k
				}
			}
		}
		delete(q, oldest)
	}
	e := &entry{who: who, first: now, last: now}
	q[k] = e
	return e
}

// expire drops e's leases whose deadline has passed. Called with mu held.
func (t *Table) expire(e *entry, now time.Time) {
	for rc, dl := range e.leases {
		if !now.Before(dl) {
			delete(e.leases, rc)
		}
	}
	if len(e.leases) == 0 {
		e.capped = false
	}
}

// prune drops the receivers of queue that have been idle past the window, and the
// queue when none is left. Called with mu held.
func (t *Table) prune(queue string, now time.Time) {
	q := t.queues[queue]
	for k, e := range q {
		for rc, dl := range e.leases {
			if !now.Before(dl) {
				delete(e.leases, rc)
			}
		}
		if len(e.leases) == 0 {
			e.capped = false
		}
		if e.waiting == 0 && len(e.leases) == 0 && now.Sub(e.last) > t.opts.Window {
			delete(q, k)
		}
	}
	if q != nil && len(q) == 0 {
		delete(t.queues, queue)
	}
}
