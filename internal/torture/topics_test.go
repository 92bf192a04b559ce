package torture

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
)

// world is a small topic history fed to the checker the way the load feeds it: a
// publisher's acknowledged records, what reads of the topic return, a member's pulls and
// commits, observations of the group, and deliveries from the subscription's queue. The
// clean world breaks no rule; each case below breaks one, and the checker must name it,
// and only it. This is what makes the torture's topic checks able to fail.
type world struct {
	bodies  []string             // publisher 0's records of key k1, in publish order
	acks    []client.Published   // their answers
	replay  []client.Published   // answers to sending them again with their dedup ids (nil: not sent)
	log     []client.TopicRecord // partition 1, as a read returns it
	ends    [topicPartitions]uint64
	pulls   []api.PullResponse // m0's, in order
	commits []api.ItemResult   // answers to committing 4 on partition 1 under epoch 1
	gets    []uint64           // the group's committed offset of partition 1, as GETs see it, in order
	fanned  []client.Delivery
}

func cleanWorld() *world {
	w := &world{}
	for i := range 4 {
		w.bodies = append(w.bodies, topicBody(0, i+1, "k1", i+1))
		w.acks = append(w.acks, client.Published{Partition: 1, Offset: uint64(i)})
		w.log = append(w.log, client.TopicRecord{Partition: 1, Offset: uint64(i), Key: []byte("k1"), HasKey: true, Body: []byte(w.bodies[i])})
	}
	w.ends[1] = 4
	rec := func(o int) api.Record {
		b := w.bodies[o]
		return api.Record{Partition: 1, Offset: uint64(o), Body: &b}
	}
	w.pulls = []api.PullResponse{
		{Session: "1", Assignment: []api.Assignment{{Partition: 1, Epoch: 1, Position: 2, Committed: 0, End: 4}}, Records: []api.Record{rec(0), rec(1)}},
		{Session: "1", Assignment: []api.Assignment{{Partition: 1, Epoch: 1, Position: 4, Committed: 0, End: 4}}, Records: []api.Record{rec(2), rec(3)}},
	}
	w.commits = []api.ItemResult{{OK: true}}
	w.gets = []uint64{4}
	for i, b := range w.bodies {
		w.fanned = append(w.fanned, client.Delivery{ID: fmt.Sprintf("m%d", i), Body: []byte(b), Headers: map[string]string{
			"okiba-topic": topicName, "okiba-partition": "1", "okiba-offset": fmt.Sprint(i), "okiba-record-id": fmt.Sprintf("1-1-%d", i)}})
	}
	return w
}

// run feeds w to a new history in the load's order and returns the violation kinds found.
func (w *world) run() (map[string]int, []string) {
	th := newTopicHistory()
	for i, b := range w.bodies {
		th.recs[b] = &pubRec{pub: 0, seq: i + 1, key: "k1", dedup: true}
	}
	th.published(w.bodies, w.acks, 0)
	if w.replay != nil {
		th.replayed(w.bodies, w.replay)
	}
	parts := map[int]*memberPart{}
	for i := range w.pulls {
		th.pulled("m0", time.Now(), &w.pulls[i], parts, i == 0)
	}
	th.committed("m0", time.Now(), []api.CommitOffset{{Partition: 1, Offset: 4, Epoch: 1}}, w.commits)
	th.fannedOut(w.fanned)
	th.mu.Lock()
	for _, v := range w.gets {
		th.observeCommitted(1, v, time.Now(), "a GET")
	}
	th.merge(1, w.log)
	th.compare(1, w.log)
	th.verifyAcked(len(th.acked), w.ends, time.Now(), true)
	th.checkOrder(true)
	th.finalChecks()
	found := map[string]int{}
	for kind, ids := range th.violations {
		found[kind] = len(ids)
	}
	th.mu.Unlock()
	return found, th.examples
}

func TestTopicChecksCatchViolations(t *testing.T) {
	body := func(w *world, o int) *string { b := w.bodies[o]; return &b }
	cases := []struct {
		name   string
		want   string // the one kind expected; "" for none
		mutate func(w *world)
	}{
		{"clean", "", func(w *world) {}},
		{"acknowledged record missing from the tail", vTopicLost, func(w *world) {
			w.log, w.ends[1] = w.log[:3], 3
			w.fanned = w.fanned[:3]
			w.pulls[1].Records, w.pulls[1].Assignment[0].Position = w.pulls[1].Records[:1], 3
			w.gets = []uint64{3}
			w.commits = []api.ItemResult{{Error: &api.Error{Code: api.CodeEpochStale}}}
		}},
		{"acknowledged record holds another body", vTopicLost, func(w *world) {
			w.acks[1].Offset, w.acks[2].Offset = 2, 1 // the broker answered the wrong offsets
			w.log[1].Body, w.log[2].Body = []byte(w.bodies[1]), []byte(w.bodies[2])
		}},
		{"records of a key out of publish order", vTopicReordered, func(w *world) {
			// The broker put seq 3 before seq 2, and said so.
			w.acks[1].Offset, w.acks[2].Offset = 2, 1
			w.log[1].Body, w.log[2].Body = w.log[2].Body, w.log[1].Body
			w.pulls[0].Records[1].Body, w.pulls[1].Records[0].Body = body(w, 2), body(w, 1)
			w.fanned[1].Body, w.fanned[2].Body = w.fanned[2].Body, w.fanned[1].Body
		}},
		{"a retried record written twice", vTopicDuplicated, func(w *world) {
			w.log = append(w.log, client.TopicRecord{Partition: 1, Offset: 4, Key: []byte("k1"), HasKey: true, Body: []byte(w.bodies[3])})
			w.ends[1] = 5
			w.fanned = append(w.fanned, client.Delivery{ID: "m4", Body: []byte(w.bodies[3]), Headers: map[string]string{
				"okiba-topic": topicName, "okiba-partition": "1", "okiba-offset": "4", "okiba-record-id": "1-1-4"}})
		}},
		{"a replay with the dedup id not answered duplicate", vTopicDuplicated, func(w *world) {
			w.replay = append([]client.Published(nil), w.acks...)
			for i := range w.replay {
				w.replay[i].Duplicate = true
			}
			w.replay[2].Duplicate = false
		}},
		{"a record nobody published", vTopicUnexpected, func(w *world) {
			w.log[3].Body = []byte("t9-9|k1|1")
			w.acks[3].Err = &api.Error{Code: api.CodeTopicFull} // and the last record was refused
			w.pulls[1].Records[1].Body = &[]string{"t9-9|k1|1"}[0]
			w.fanned[3].Body = []byte("t9-9|k1|1")
		}},
		{"a pull that skips an offset", vGroupSkipped, func(w *world) {
			w.pulls[1].Records = w.pulls[1].Records[1:]
		}},
		{"committed above an offset never handed", vGroupSkipped, func(w *world) {
			w.pulls = w.pulls[:1]
			w.commits = []api.ItemResult{{Error: &api.Error{Code: api.CodeEpochStale}}}
		}},
		{"an offset handed twice under one epoch", vGroupRehanded, func(w *world) {
			w.pulls[1].Records = append([]api.Record{w.pulls[0].Records[1]}, w.pulls[1].Records...)
		}},
		{"committed offset moving back", vGroupRegressed, func(w *world) {
			w.gets = []uint64{4, 2}
		}},
		{"a commit of handed offsets refused", vGroupRefused, func(w *world) {
			w.commits = []api.ItemResult{{Error: &api.Error{Code: api.CodeOffsetOutOfRange}}}
		}},
		{"a record never delivered from the queue", vSubMissing, func(w *world) {
			w.fanned = w.fanned[:3]
		}},
		{"a record delivered as two messages", vSubDoubled, func(w *world) {
			d := w.fanned[2]
			d.ID = "m9"
			w.fanned = append(w.fanned, d)
		}},
		{"a redelivery of one message is fine", "", func(w *world) {
			w.fanned = append(w.fanned, w.fanned[2])
		}},
		{"a message naming the wrong record", vSubUnexpected, func(w *world) {
			w.fanned[1].Headers = map[string]string{"okiba-topic": topicName, "okiba-partition": "1", "okiba-offset": "2", "okiba-record-id": "1-1-2"}
			w.fanned = append(w.fanned, client.Delivery{ID: "m1b", Body: []byte(w.bodies[1]), Headers: map[string]string{
				"okiba-topic": topicName, "okiba-partition": "1", "okiba-offset": "1", "okiba-record-id": "1-1-1"}})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := cleanWorld()
			c.mutate(w)
			found, examples := w.run()
			var kinds []string
			for k := range found {
				kinds = append(kinds, k)
			}
			sort.Strings(kinds)
			want := []string{}
			if c.want != "" {
				want = []string{c.want}
			}
			if strings.Join(kinds, ",") != strings.Join(want, ",") {
				t.Fatalf("found %v, want %v; examples:\n%s", found, want, strings.Join(examples, "\n"))
			}
		})
	}
}
