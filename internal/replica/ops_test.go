package replica_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/internal/replica"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

// An op is one client command of the simulation. run calls the machines as a broker
// would and describes the outcome as text (no node-local handle, no pointer), so that
// the acknowledged answer and the reference's can be compared; leases are what a
// receive handed the client.
type op interface {
	run(now int64, m *replica.Machines, b *replica.Batch) result
	String() string
}

type result struct {
	text   string
	leases []queue.Lease
}

// command is op as the replica takes it.
func command(o op) replica.Command {
	return func(now int64, m *replica.Machines, b *replica.Batch) any { return o.run(now, m, b) }
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return "error: " + err.Error()
}

// The queues of the simulation: an ordered one with a dead-letter queue, a standard one
// with short retention and backpressure, and the target of a topic's subscription.
var queueConfigs = map[string]func() queue.Config{
	"orders": func() queue.Config {
		c := queue.DefaultConfig()
		c.VisibilityTimeout = 2 * time.Second
		c.MaxDeliveries = 3
		c.DeadLetterQueue = "orders-dlq"
		c.DedupWindow = time.Minute
		c.Retention = 10 * time.Minute
		c.BackoffBase, c.BackoffMax = 100*time.Millisecond, time.Second
		return c
	},
	"jobs": func() queue.Config {
		c := queue.DefaultConfig()
		c.OrderedGroups = false
		c.DeadLetterQueue = queue.NoDeadLetterQueue
		c.MaxDeliveries = 0
		c.VisibilityTimeout = time.Second
		c.Retention = 30 * time.Second
		c.DedupWindow = 10 * time.Second
		c.MaxMessages = 40
		return c
	},
	"feed": func() queue.Config {
		c := queue.DefaultConfig()
		c.DeadLetterQueue = queue.NoDeadLetterQueue
		c.MaxDeliveries = 0
		return c
	},
}

var queueNames = []string{"orders", "jobs", "feed"}

const (
	topicName = "events"
	subName   = "to-feed"
)

type opPutQueue struct{ name string }

func (o opPutQueue) String() string { return "put_queue " + o.name }
func (o opPutQueue) run(now int64, m *replica.Machines, b *replica.Batch) result {
	created, err := m.Queues().PutQueue(now, b.Queue(), o.name, queueConfigs[o.name]())
	return result{text: fmt.Sprintf("created=%v %s", created, errText(err))}
}

// opDeleteQueue deletes with force, as the broker does: the subscriptions that feed
// the queue first (topic records), then the queue (queue records), in one entry.
type opDeleteQueue struct{ name string }

func (o opDeleteQueue) String() string { return "delete_queue " + o.name }
func (o opDeleteQueue) run(now int64, m *replica.Machines, b *replica.Batch) result {
	if _, err := m.Queues().QueueMeta(o.name); err != nil {
		return result{text: errText(err)}
	}
	m.Topics().UnsubscribeQueue(now, b.Topic(), o.name)
	return result{text: errText(m.Queues().DeleteQueue(now, b.Queue(), o.name, true))}
}

type opSend struct {
	queue string
	msgs  []queue.SendInput
}

func (o opSend) String() string {
	var s []string
	for _, in := range o.msgs {
		s = append(s, fmt.Sprintf("{g=%q d=%q delay=%d %dB}", in.Payload.Group, in.Payload.DedupID, in.Delay, len(in.Payload.Body)))
	}
	return "send " + o.queue + " " + strings.Join(s, " ")
}

func (o opSend) run(now int64, m *replica.Machines, b *replica.Batch) result {
	// The machine keeps what it is given: each run gets its own copy, as each request
	// brings its own bytes.
	msgs := make([]queue.SendInput, len(o.msgs))
	for i, in := range o.msgs {
		msgs[i] = queue.SendInput{Payload: *in.Payload.Clone(), Delay: in.Delay}
	}
	res, err := m.Queues().Send(now, b.Queue(), o.queue, msgs)
	if err != nil {
		return result{text: errText(err)}
	}
	var s []string
	for _, r := range res {
		s = append(s, fmt.Sprintf("%x/%d dup=%v %s", r.ID, r.Seq, r.Duplicate, errText(r.Err)))
	}
	return result{text: strings.Join(s, "; ")}
}

type opReceive struct {
	queue      string
	max        int
	visibility int64
}

func (o opReceive) String() string {
	return fmt.Sprintf("receive %s max=%d vis=%d", o.queue, o.max, o.visibility)
}

func (o opReceive) run(now int64, m *replica.Machines, b *replica.Batch) result {
	ds, err := m.Queues().Receive(now, b.Queue(), o.queue, o.max, o.visibility, 0)
	if err != nil {
		return result{text: errText(err)}
	}
	var s []string
	var leases []queue.Lease
	for _, d := range ds {
		dead := "-"
		if d.Dead != nil {
			dead = fmt.Sprintf("%s@%d from %s", d.Dead.Reason, d.Dead.At, d.Dead.SourceName)
		}
		s = append(s, fmt.Sprintf("%s until=%d enq=%d first=%d g=%q dead=%s",
			leaseText(d.Lease), d.Deadline, d.EnqueuedAt, d.FirstDelivered, d.Group, dead))
		leases = append(leases, d.Lease)
	}
	return result{text: fmt.Sprintf("%d: %s", len(ds), strings.Join(s, "; ")), leases: leases}
}

func leaseText(l queue.Lease) string {
	return fmt.Sprintf("%d/%d/%x/e%d", l.QueueID, l.Seq, l.MsgID, l.Epoch)
}

func errsText(errs []error, err error) string {
	if err != nil {
		return errText(err)
	}
	var s []string
	for _, e := range errs {
		s = append(s, errText(e))
	}
	return strings.Join(s, "; ")
}

type opAck struct {
	queue  string
	leases []queue.Lease
}

func (o opAck) String() string {
	var s []string
	for _, l := range o.leases {
		s = append(s, leaseText(l))
	}
	return "ack " + o.queue + " " + strings.Join(s, " ")
}

func (o opAck) run(now int64, m *replica.Machines, b *replica.Batch) result {
	return result{text: errsText(m.Queues().Ack(now, b.Queue(), o.queue, o.leases))}
}

type opNack struct {
	queue string
	items []queue.NackInput
}

func (o opNack) String() string {
	var s []string
	for _, it := range o.items {
		s = append(s, fmt.Sprintf("%s delay=%d", leaseText(it.Lease), it.Delay))
	}
	return "nack " + o.queue + " " + strings.Join(s, " ")
}

func (o opNack) run(now int64, m *replica.Machines, b *replica.Batch) result {
	return result{text: errsText(m.Queues().Nack(now, b.Queue(), o.queue, o.items))}
}

type opExtend struct {
	queue string
	items []queue.ExtendInput
}

func (o opExtend) String() string {
	var s []string
	for _, it := range o.items {
		s = append(s, fmt.Sprintf("%s vis=%d", leaseText(it.Lease), it.Visibility))
	}
	return "extend " + o.queue + " " + strings.Join(s, " ")
}

func (o opExtend) run(now int64, m *replica.Machines, b *replica.Batch) result {
	return result{text: errsText(m.Queues().Extend(now, b.Queue(), o.queue, o.items))}
}

type opPutTopic struct{}

func (opPutTopic) String() string { return "put_topic " + topicName }
func (opPutTopic) run(now int64, m *replica.Machines, b *replica.Batch) result {
	cfg := topic.DefaultConfig()
	cfg.Partitions = 2
	cfg.SegmentBytes = 512 // segments cut often, so that retention deletes some
	cfg.RetentionRecords = 30
	created, err := m.Topics().PutTopic(now, b.Topic(), topicName, cfg)
	return result{text: fmt.Sprintf("created=%v %s", created, errText(err))}
}

// opSubscribe subscribes the feed queue to the topic, as the broker does: the queue's
// description read from the queue machine inside the same command.
type opSubscribe struct{}

func (opSubscribe) String() string { return "subscribe " + topicName + "/" + subName }
func (opSubscribe) run(now int64, m *replica.Machines, b *replica.Batch) result {
	qi, err := m.Queues().QueueMeta("feed")
	if err != nil {
		return result{text: errText(err)}
	}
	q := topic.QueueInfo{ID: qi.ID, MaxMessageSize: qi.Config.MaxMessageSize, OrderedGroups: qi.Config.OrderedGroups, Delay: qi.Config.Delay.Milliseconds()}
	created, err := m.Topics().Subscribe(now, b.Topic(), topicName, subName, topic.SubscriptionConfig{Queue: "feed"}, q, nil)
	return result{text: fmt.Sprintf("created=%v %s", created, errText(err))}
}

type opPublish struct{ in []topic.PublishInput }

func (o opPublish) String() string {
	var s []string
	for _, in := range o.in {
		s = append(s, fmt.Sprintf("{key=%q d=%q %dB}", in.Key, in.DedupID, len(in.Body)))
	}
	return "publish " + topicName + " " + strings.Join(s, " ")
}

func (o opPublish) run(now int64, m *replica.Machines, b *replica.Batch) result {
	in := make([]topic.PublishInput, len(o.in))
	for i, x := range o.in {
		x.Body = append([]byte(nil), x.Body...)
		x.Key = append([]byte(nil), x.Key...)
		in[i] = x
	}
	res, err := m.Topics().Publish(now, b.Topic(), topicName, in)
	if err != nil {
		return result{text: errText(err)}
	}
	var s []string
	for _, r := range res {
		s = append(s, fmt.Sprintf("p%d@%d t=%d dup=%v %s", r.Partition, r.Offset, r.Time, r.Duplicate, errText(r.Err)))
	}
	return result{text: strings.Join(s, "; ")}
}

// opTick is the broker's ticker as a command: time-driven work of both machines.
//
// queue.Machine.Tick advances the due queues in id order, whatever their scheduled
// times, which depend on when a machine last settled each queue (at a command, or when
// the next record came): a leader rebuilt from the committed entries emits what one
// that ran every command emits, in the same order — the simulation found the two
// orders apart while Tick followed its heap. Its list of queues woken is a node-local
// hint and no part of the answer.
type opTick struct{}

func (opTick) String() string { return "tick" }
func (opTick) run(now int64, m *replica.Machines, b *replica.Batch) result {
	m.Queues().Tick(now, b.Queue())
	m.Topics().Tick(now, b.Topic())
	return result{text: "ticked"}
}

type opPrincipal struct {
	name  string
	grant string
}

func (o opPrincipal) String() string { return "principal " + o.name + " " + o.grant }
func (o opPrincipal) run(now int64, m *replica.Machines, b *replica.Batch) result {
	g, err := access.ParseGrant(o.grant)
	if err != nil {
		panic(err) // the generator's grants are valid
	}
	p, err := m.Access().Create(now, b.Access(), o.name, []access.Grant{g}, []byte("sealed-"+o.name))
	if err != nil {
		p, err = m.Access().Grant(now, b.Access(), o.name, []access.Grant{g})
	}
	if err != nil {
		return result{text: errText(err)}
	}
	return result{text: fmt.Sprintf("%s grants=%v secrets=%d updated=%d", p.Name, p.Grants, len(p.Secrets), p.Updated)}
}

// clients picks the simulation's commands and keeps what the clients were answered:
// the leases of acknowledged receives, which later acks, nacks and extends use (stale
// ones among them).
type clients struct {
	rng    *rand.Rand
	leases map[string][]queue.Lease
}

func (c *clients) learned(r result, o op) {
	rc, ok := o.(opReceive)
	if !ok || len(r.leases) == 0 {
		return
	}
	l := append(c.leases[rc.queue], r.leases...)
	if len(l) > 40 {
		l = l[len(l)-40:]
	}
	c.leases[rc.queue] = l
}

func (c *clients) pick(q string, n int) []queue.Lease {
	pool := c.leases[q]
	var out []queue.Lease
	for range n {
		if len(pool) == 0 || c.rng.IntN(10) == 0 {
			// A lease no receive gave out: another epoch or sequence.
			out = append(out, queue.Lease{QueueID: 1 + c.rng.Uint64N(4), Seq: 1 + c.rng.Uint64N(20), MsgID: 1, Epoch: uint32(c.rng.IntN(3))})
			continue
		}
		out = append(out, pool[c.rng.IntN(len(pool))])
	}
	return out
}

func (c *clients) next() op {
	r := c.rng
	q := queueNames[r.IntN(len(queueNames))]
	switch p := r.IntN(100); {
	case p < 5:
		return opPutQueue{name: q}
	case p < 6:
		return opDeleteQueue{name: []string{"jobs", "feed"}[r.IntN(2)]}
	case p < 36:
		var msgs []queue.SendInput
		for range 1 + r.IntN(3) {
			in := queue.SendInput{Payload: queue.Payload{Body: []byte(fmt.Sprintf("body-%d", r.IntN(1000)))}}
			if q == "orders" {
				in.Payload.Group = []string{"", "a", "b"}[r.IntN(3)]
			}
			if r.IntN(3) == 0 {
				in.Payload.DedupID = fmt.Sprintf("d%d", r.IntN(6))
			}
			if r.IntN(5) == 0 {
				in.Delay = int64(r.IntN(2000))
			}
			msgs = append(msgs, in)
		}
		return opSend{queue: q, msgs: msgs}
	case p < 56:
		vis := int64(-1)
		if r.IntN(2) == 0 {
			vis = 300 + int64(r.IntN(3000))
		}
		return opReceive{queue: q, max: 1 + r.IntN(4), visibility: vis}
	case p < 68:
		return opAck{queue: q, leases: c.pick(q, 1+r.IntN(3))}
	case p < 73:
		var items []queue.NackInput
		for _, l := range c.pick(q, 1+r.IntN(2)) {
			items = append(items, queue.NackInput{Lease: l, Delay: int64(r.IntN(3)*500) - 500, Jitter: r.Uint64()})
		}
		return opNack{queue: q, items: items}
	case p < 76:
		var items []queue.ExtendInput
		for _, l := range c.pick(q, 1) {
			items = append(items, queue.ExtendInput{Lease: l, Visibility: int64(r.IntN(4000))})
		}
		return opExtend{queue: q, items: items}
	case p < 78:
		return opPutTopic{}
	case p < 80:
		return opSubscribe{}
	case p < 90:
		var in []topic.PublishInput
		for range 1 + r.IntN(2) {
			x := topic.PublishInput{Partition: topic.AnyPartition, Body: []byte(fmt.Sprintf("rec-%d", r.IntN(1000)))}
			if r.IntN(2) == 0 {
				x.Key, x.HasKey = []byte{byte('k'), byte('0' + r.IntN(4))}, true
			}
			if r.IntN(4) == 0 {
				x.DedupID = fmt.Sprintf("e%d", r.IntN(5))
			}
			in = append(in, x)
		}
		return opPublish{in: in}
	case p < 98:
		return opTick{}
	default:
		grants := []string{"send queue:orders*", "receive queue:*", "manage topic:events", "admin"}
		return opPrincipal{name: fmt.Sprintf("p%d", r.IntN(3)), grant: grants[r.IntN(len(grants))]}
	}
}
