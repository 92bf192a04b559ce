package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// logState is lesson 5's state as the page reads it.
type logState struct {
	Done     bool   `json:"done"`
	Phase    int    `json:"phase"`
	Failure  string `json:"failure"`
	Topic    string `json:"topic"`
	Queue    string `json:"queue"`
	End      int    `json:"end"`
	Retained int64  `json:"retained"`
	Events   []logEvent
	Groups   []struct {
		Name      string     `json:"name"`
		Committed uint64     `json:"committed"`
		Read      []logEntry `json:"read"`
		Replays   int        `json:"replays"`
	} `json:"groups"`
	Jobs         []logJob `json:"jobs"`
	QueueDepth   int64    `json:"queue_depth"`
	Subscription struct {
		Delivered uint64 `json:"delivered"`
	} `json:"subscription"`
}

func decodeLog(t *testing.T, s jsonState) logState {
	t.Helper()
	b, _ := json.Marshal(s)
	var out logState
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// offsets writes what a group read: 0 1 2 …, a replayed record as r0.
func offsets(es []logEntry) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte(' ')
		}
		if e.Replay {
			b.WriteByte('r')
		}
		fmt.Fprint(&b, e.Offset)
	}
	return b.String()
}

func TestLessonLogGroupsReadAtTheirOwnOffsetsAndReplay(t *testing.T) {
	t.Parallel()
	// With a token, as a node has one: the group calls must carry it too.
	e := start(t, testToken, Options{})
	auth := []string{"Authorization", "Bearer " + testToken}
	r := e.startRun(t, "log", `{"pace_ms": 0}`, auth...)
	s := decodeLog(t, r.until("done", func(s jsonState) bool { return s["done"] == true || s["failure"] != "" }))
	if s.Failure != "" {
		t.Fatalf("the script failed: %s", s.Failure)
	}
	if s.End != 8 || s.Retained != 8 || len(s.Events) != 8 {
		t.Fatalf("published %d events, the topic retains %d; want 8 and 8", s.End, s.Retained)
	}
	billing, analytics := s.Groups[0], s.Groups[1]
	if billing.Name != "billing" || billing.Committed != 8 || offsets(billing.Read) != "0 1 2 3 4 5 6 7" || billing.Replays != 0 {
		t.Errorf("billing read %q and committed %d; want each record once, committed 8", offsets(billing.Read), billing.Committed)
	}
	if analytics.Committed != 8 || offsets(analytics.Read) != "0 1 2 3 4 5 6 7 r0 r1 r2 r3 r4 r5 r6 r7" || analytics.Replays != 8 {
		t.Errorf("analytics read %q and committed %d; want the history twice, the second time as a replay", offsets(analytics.Read), analytics.Committed)
	}
	var jobs []string
	for _, j := range s.Jobs {
		jobs = append(jobs, fmt.Sprint(j.Offset, j.Order))
	}
	if fmt.Sprint(jobs) != "[2A 4B 6C]" || s.QueueDepth != 0 || s.Subscription.Delivered != 3 {
		t.Errorf("the worker handled %v, the queue holds %d, the subscription delivered %d; want the three paid orders, 0, 3",
			jobs, s.QueueDepth, s.Subscription.Delivered)
	}
	// The broker agrees: the groups' offsets are its own, and the log still holds every
	// record although each job was acked.
	for _, name := range []string{"billing", "analytics"} {
		gi, err := e.b.Group(s.Topic, name)
		if err != nil || gi.Partitions[0].Committed != 8 || gi.LagRecords != 0 {
			t.Errorf("the broker's %s: %+v %v", name, gi.Partitions, err)
		}
	}
	if ti, err := e.b.Topic(s.Topic); err != nil || ti.Records != 8 {
		t.Errorf("the broker's topic: %d records, %v", ti.Records, err)
	}
	// The topic page shows the lesson's topic with both groups.
	if status, html := page(t, e.url+"/topics/"+s.Topic, auth...); status != 200 || !strings.Contains(html, `id="group-billing"`) || !strings.Contains(html, `id="group-analytics"`) {
		t.Errorf("the lesson's topic page: %d", status)
	}

	// Afterwards the page may replay billing, and publish: both groups read on.
	r.control(`{"action": "replay_billing"}`)
	s = decodeLog(t, r.until("billing replayed", func(st jsonState) bool {
		s := decodeLog(t, st)
		return s.Done && s.Groups[0].Replays == 8
	}))
	r.control(`{"action": "publish"}`)
	s = decodeLog(t, r.until("a ninth event read by both", func(st jsonState) bool {
		s := decodeLog(t, st)
		return s.Done && s.End == 9 && s.Groups[0].Committed == 9 && s.Groups[1].Committed == 9
	}))
	if s.Events[8].Order != "C" || s.Events[8].Event != "shipped" {
		t.Errorf("the ninth event is %+v, want C shipped", s.Events[8])
	}
	if resp := do(t, "POST", e.url+"/ui/api/playground/runs/"+r.id, strings.NewReader(`{"action": "dance"}`), auth...); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("an unknown action: %s", resp.Status)
	}
	r.stop()
	if ts, qs := e.b.Topics(PlaygroundPrefix), e.playgroundQueues(t); len(ts) != 0 || len(qs) != 0 {
		t.Fatalf("after stop: topics %v, queues %v", ts, qs)
	}
}

// TestLessonLogRefusesActionsDuringItsScript: the page's actions wait for the script, whose
// outcome they would otherwise change.
func TestLessonLogRefusesActionsDuringItsScript(t *testing.T) {
	t.Parallel()
	e := start(t, "", Options{})
	r := e.startRun(t, "log", `{"pace_ms": 1500}`)
	if resp := do(t, "POST", e.url+"/ui/api/playground/runs/"+r.id, strings.NewReader(`{"action": "publish"}`)); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("an action during the script: %s", resp.Status)
	}
	if r := do(t, "POST", e.url+"/ui/api/playground/log", strings.NewReader(`{"pace_ms": 5000}`)); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("a pace out of range: %s", r.Status)
	}
	r.stop()
	if ts := e.b.Topics(PlaygroundPrefix); len(ts) != 0 {
		t.Fatalf("topics left after stop: %v", ts)
	}
}
