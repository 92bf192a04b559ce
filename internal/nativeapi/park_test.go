package nativeapi_test

import (
	"strings"
	"testing"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/okibatest"
)

// TestParkGroup: through a real server, a queue with on_dead_letter park_group parks a
// group whose head is dead-lettered: receives pass it by, GET …/parked lists it with its
// blocker, explain says parked behind it, stats count it; a release by hand frees it;
// park_group on an unordered queue or without a dead-letter queue is invalid_config and
// changes nothing.
func TestParkGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	before := e.snapshot()
	expectError(t, e.do("PUT", "/v1/queues/pk-bad", `{"on_dead_letter":"park_group","ordered_groups":false}`), api.CodeInvalidConfig, "on_dead_letter")
	expectError(t, e.do("PUT", "/v1/queues/pk-bad", `{"on_dead_letter":"park_group","dead_letter_queue":"none"}`), api.CodeInvalidConfig, "on_dead_letter")
	expectError(t, e.do("PUT", "/v1/queues/pk-bad", `{"on_dead_letter":"park"}`), api.CodeInvalidConfig, "on_dead_letter")
	e.unchanged(t, before, "refused configurations")

	q := e.putQueue("pk", `{"on_dead_letter":"park_group"}`)
	if q.Config.OnDeadLetter == nil || *q.Config.OnDeadLetter != "park_group" {
		t.Fatalf("config: %+v", q.Config)
	}
	var ids []string
	for _, b := range []string{"a1", "a2"} {
		var out api.SendResponse
		e.call("POST", "/v1/queues/pk/messages", `{"body":"`+b+`","group":"alice"}`, 200, &out)
		ids = append(ids, out.Results[0].ID)
	}
	ms := e.receive("pk", 1, "")
	if len(ms) != 1 || ms[0].ID != ids[0] {
		t.Fatalf("receive: %+v", ms)
	}
	if r, _ := e.settle("pk", "deadletter", []string{ms[0].Receipt}, `,"reason":"bad"`); r.Status != 200 {
		t.Fatalf("deadletter: %v", r)
	}
	if got := e.receive("pk", 10, ""); len(got) != 0 {
		t.Fatalf("a parked group gave %+v", got)
	}
	var ps api.ParkedResponse
	e.call("GET", "/v1/queues/pk/parked", nil, 200, &ps)
	if len(ps.Groups) != 1 || ps.Groups[0].Group != "alice" || ps.Groups[0].Blocker != ids[0] || ps.Groups[0].DeadLetterQueue != "pk-dlq" || ps.Groups[0].Messages != 1 {
		t.Fatalf("parked: %+v", ps)
	}
	if st := e.queue("pk").Stats; st.ParkedGroups != 1 {
		t.Fatalf("stats: %+v", st)
	}
	var ex api.Explanation
	e.call("GET", "/v1/queues/pk/messages/"+ids[1]+"/explain", nil, 200, &ex)
	if ex.State != "parked" || ex.Blocker == nil || ex.Blocker.ID != ids[0] || ex.To != "pk-dlq" || !strings.Contains(ex.Summary, "Parked behind dead letter "+ids[0]) {
		t.Fatalf("explain: %+v", ex)
	}
	expectError(t, e.do("POST", "/v1/queues/pk/groups/bob/release", nil), api.CodeNotParked, `"bob"`)
	var rel api.ReleaseResponse
	e.call("POST", "/v1/queues/pk/groups/alice/release", nil, 200, &rel)
	if got := e.receive("pk", 10, ""); len(got) != 1 || got[0].ID != ids[1] {
		t.Fatalf("after release: %+v", got)
	}
	e.call("GET", "/v1/queues/pk/parked", nil, 200, &ps)
	if len(ps.Groups) != 0 {
		t.Fatalf("parked after release: %+v", ps)
	}
}
