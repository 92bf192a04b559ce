package nativeapi_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/nativeapi"
	"github.com/okiba/okiba/internal/reply"
	"github.com/okiba/okiba/internal/service"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/okibatest"
	"github.com/okiba/okiba/queue"
)

// faultyEnv serves a broker whose file system fails the operations hook chooses while
// armed is set. The broker keeps its data in memory.
func faultyEnv(t *testing.T, armed *atomic.Bool, op vfs.Op, cfg broker.Config) (*env, *broker.Broker) {
	t.Helper()
	fs := vfs.NewFaulty(vfs.NewMemFS(), func(ev vfs.Event) error {
		if armed.Load() && ev.Op == op && strings.Contains(ev.Name, "/wal/") {
			return vfs.ErrInjected
		}
		return nil
	})
	cfg.FS, cfg.NoPrecreate = fs, true
	e := newEnv(t, okibatest.Options{Dir: "/data", Broker: cfg})
	return e, e.srv.Broker
}

// TestEveryErrorCode produces every error code of package api through HTTP and checks
// its status, that the body is JSON with a message, and that the message names what to
// fix.
func TestEveryErrorCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("q", `{}`)
	e.putQueue("tiny", `{"max_message_size":10,"max_messages":1}`)
	e.putQueue("nodlq", `{"dead_letter_queue":"none"}`)

	cases := map[string]struct {
		mentions []string
		run      func(t *testing.T) *response
	}{
		api.CodeInvalidRequest: {[]string{"malformed JSON"}, func(t *testing.T) *response {
			return e.do("PUT", "/v1/queues/q", `{"max_deliveries":5`)
		}},
		api.CodeInvalidName: {[]string{`"bad.name"`, "A-Z a-z 0-9 _ -", ".fifo"}, func(t *testing.T) *response {
			return e.do("PUT", "/v1/queues/bad.name", `{}`)
		}},
		api.CodeInvalidConfig: {[]string{"visibility_timeout", "12h"}, func(t *testing.T) *response {
			return e.do("PUT", "/v1/queues/q", `{"visibility_timeout":"13h"}`)
		}},
		api.CodeInvalidMessage: {[]string{"group"}, func(t *testing.T) *response {
			return e.do("POST", "/v1/queues/q/messages", `{"body":"x","group":"tab\there"}`)
		}},
		api.CodeInvalidBody: {[]string{"body", "body_base64"}, func(t *testing.T) *response {
			return e.do("POST", "/v1/queues/q/messages", `{"body":"x","body_base64":"eA=="}`)
		}},
		api.CodeInvalidDelay: {[]string{"delay", "168h"}, func(t *testing.T) *response {
			return e.do("POST", "/v1/queues/q/messages", `{"body":"x","delay":"169h"}`)
		}},
		api.CodeInvalidReceipt: {[]string{"receipt"}, func(t *testing.T) *response {
			return e.do("POST", "/v1/queues/q/ack", `{"receipts":["garbage"]}`)
		}},
		api.CodeInvalidID: {[]string{`"xyz"`, "16 hex digits"}, func(t *testing.T) *response {
			return e.do("GET", "/v1/queues/q/messages/xyz", nil)
		}},
		api.CodeMessageTooLarge: {[]string{"11 bytes", "10"}, func(t *testing.T) *response {
			return e.do("POST", "/v1/queues/tiny/messages", `{"body":"0123456789A"}`)
		}},
		api.CodeSequenceReused: {[]string{"another queue", "p-reused"}, func(t *testing.T) *response {
			e.call("POST", "/v1/queues/q/messages", `{"body":"x","producer_id":"p-reused","sequence":1}`, 200, nil)
			return e.do("POST", "/v1/queues/tiny/messages", `{"body":"y","producer_id":"p-reused","sequence":1}`)
		}},
		api.CodeSequenceTooOld: {[]string{"older", "sequence 1"}, func(t *testing.T) *response {
			for seq := 100; seq < 100+queue.ProducerWindow; seq++ {
				e.call("POST", "/v1/queues/q/messages", fmt.Sprintf(`{"body":"x","producer_id":"p-old","sequence":%d}`, seq), 200, nil)
			}
			return e.do("POST", "/v1/queues/q/messages", `{"body":"x","producer_id":"p-old","sequence":1}`)
		}},
		api.CodeNotRepeated: {[]string{"original request", "new request"}, func(t *testing.T) *response {
			e.call("POST", "/v1/queues/tiny/messages", `{"body":"0123456789A","producer_id":"p-failed","sequence":1}`, 413, nil)
			return e.do("POST", "/v1/queues/tiny/messages", `{"body":"0123456789A","producer_id":"p-failed","sequence":1}`)
		}},
		api.CodeBatchTooLarge: {[]string{"1001", "1000"}, func(t *testing.T) *response {
			msgs := strings.Repeat(`{"body":"x"},`, 1001)
			return e.do("POST", "/v1/queues/q/messages", `{"messages":[`+msgs[:len(msgs)-1]+`]}`)
		}},
		api.CodeRequestTooLarge: {[]string{fmt.Sprint(api.MaxRequestBody)}, func(t *testing.T) *response {
			return e.do("POST", "/v1/queues/q/messages", `{"body":"`+strings.Repeat("x", api.MaxRequestBody)+`"}`)
		}},
		api.CodeQueueNotFound: {[]string{`"nope"`}, func(t *testing.T) *response {
			return e.do("GET", "/v1/queues/nope", nil)
		}},
		api.CodeMessageNotFound: {[]string{"0000000000000001", `"q"`}, func(t *testing.T) *response {
			return e.do("GET", "/v1/queues/q/messages/0000000000000001", nil)
		}},
		api.CodeTaskNotFound: {[]string{"999"}, func(t *testing.T) *response {
			return e.do("GET", "/v1/redrives/999", nil)
		}},
		api.CodeNotFound: {[]string{"/v1/nothing", "docs/api.md"}, func(t *testing.T) *response {
			return e.do("GET", "/v1/nothing", nil)
		}},
		api.CodeMethod: {[]string{"PATCH", "GET", "PUT", "DELETE"}, func(t *testing.T) *response {
			r := e.do("PATCH", "/v1/queues/q", `{}`)
			for _, m := range []string{"GET", "PUT", "DELETE"} {
				if !strings.Contains(r.Header.Get("Allow"), m) {
					t.Errorf("Allow header %q lacks %s", r.Header.Get("Allow"), m)
				}
			}
			return r
		}},
		api.CodeReceiptStale: {[]string{"stale"}, func(t *testing.T) *response {
			// The message stays, its lease ended (nacked): stale.
			e.send("q", "stale")
			ms := e.receive("q", 1, "")
			if r, _ := e.settle("q", "nack", receiptsOf(ms), `,"delay":"1h"`); r.Status != 200 {
				t.Fatalf("nack: %v", r)
			}
			return e.do("POST", "/v1/queues/q/ack", receiptsBody(receiptsOf(ms), ""))
		}},
		api.CodeAlreadySettled: {[]string{"already settled", "no longer in the queue"}, func(t *testing.T) *response {
			e.send("q", "settled")
			ms := e.receive("q", 1, "")
			if r, _ := e.settle("q", "ack", receiptsOf(ms), ""); r.Status != 200 {
				t.Fatalf("first ack: %v", r)
			}
			return e.do("POST", "/v1/queues/q/ack", receiptsBody(receiptsOf(ms), ""))
		}},
		api.CodeQueueInUse: {[]string{`"q-dlq"`, "q", "force"}, func(t *testing.T) *response {
			return e.do("DELETE", "/v1/queues/q-dlq", nil)
		}},
		api.CodeQueueExists: {[]string{"max_deliveries"}, func(t *testing.T) *response {
			e.putQueue("ex-q", `{}`)
			return e.do("PUT", "/v1/queues/ex-q", `{"max_deliveries":4}`, "If-None-Match", "*")
		}},
		api.CodeDLQCycle: {[]string{"cyc-b -> cyc-a -> cyc-b"}, func(t *testing.T) *response {
			e.putQueue("cyc-a", `{"dead_letter_queue":"cyc-b"}`)
			return e.do("PUT", "/v1/queues/cyc-b", `{"dead_letter_queue":"cyc-a"}`)
		}},
		api.CodeNoDeadLetter: {[]string{`"nodlq"`, "none"}, func(t *testing.T) *response {
			e.send("nodlq", "poison")
			ms := e.receive("nodlq", 1, "")
			return e.do("POST", "/v1/queues/nodlq/deadletter", receiptsBody(receiptsOf(ms), `,"reason":"poison"`))
		}},
		api.CodeTaskFinished: {[]string{"completed"}, func(t *testing.T) *response {
			var task api.RedriveTask
			e.call("POST", "/v1/queues/q-dlq/redrive", `{}`, 202, &task)
			testkit.Eventually(t, waitLong, func() bool {
				e.call("GET", "/v1/redrives/"+task.ID, nil, 200, &task)
				return task.State != "running"
			}, "the redrive to complete")
			return e.do("DELETE", "/v1/redrives/"+task.ID, nil)
		}},
		api.CodeMessageCorrupt: {[]string{"corrupt", "unreadable"}, func(t *testing.T) *response {
			return e.do("POST", "/v1/queues/q-dlq/redrive", `{"reason":"corrupt"}`)
		}},
		api.CodeNotDeferred: {[]string{"not deferred", "0000000000000001"}, func(t *testing.T) *response {
			return e.do("POST", "/v1/queues/q/deferred/receive", `{"ids":["0000000000000001"]}`)
		}},
		api.CodeNotParked: {[]string{"no parked group", `"g1"`}, func(t *testing.T) *response {
			return e.do("POST", "/v1/queues/q/groups/g1/release", nil)
		}},
		api.CodeQueueFull: {[]string{`"tiny"`, "max_messages"}, func(t *testing.T) *response {
			e.send("tiny", "1")
			r := e.do("POST", "/v1/queues/tiny/messages", `{"body":"2"}`)
			if got := r.Header.Get("Retry-After"); got != "1" {
				t.Errorf("Retry-After %q, want 1", got)
			}
			if e := wireError(t, r); e == nil || e.RetryAfter == nil || e.RetryAfter.D() <= 0 {
				t.Errorf("no retry_after in %v", r)
			}
			return r
		}},
		api.CodeStorageFailed: {[]string{"storage failed", "restart"}, func(t *testing.T) *response {
			var armed atomic.Bool
			fe, _ := faultyEnv(t, &armed, vfs.OpSync, broker.Config{})
			fe.putQueue("q", `{}`)
			fe.send("q", "before")
			armed.Store(true)
			r := fe.do("POST", "/v1/queues/q/messages", `{"body":"during"}`)
			if r.Status == 200 {
				t.Fatalf("send while fsync fails answered %v: an unsynced send was acknowledged (wal does not report the failed fsync)", r)
			}
			expectError(t, r, api.CodeStorageFailed)
			armed.Store(false) // the disk "recovers"; the broker must keep refusing
			for _, req := range [][3]string{
				{"POST", "/v1/queues/q/messages", `{"body":"after"}`},
				{"POST", "/v1/queues/q/receive", `{}`},
				{"PUT", "/v1/queues/other", `{}`},
				{"POST", "/v1/queues/q/purge", ``},
			} {
				expectError(t, fe.do(req[0], req[1], req[2]), api.CodeStorageFailed)
			}
			h := fe.do("GET", "/healthz", nil)
			if h.Status != 503 || !strings.Contains(string(h.Body), `"failed"`) {
				t.Errorf("healthz after a failed fsync: %v", h)
			}
			return fe.do("POST", "/v1/queues/q/messages", `{"body":"again"}`)
		}},
		api.CodeTooManyQueues: {[]string{"max_queues", `"third"`}, func(t *testing.T) *response {
			le := newEnv(t, okibatest.Options{Broker: broker.Config{MaxQueues: 4}})
			le.putQueue("first", `{}`)  // and first-dlq
			le.putQueue("second", `{}`) // and second-dlq
			before := le.snapshot()
			r := le.do("PUT", "/v1/queues/third", `{}`)
			le.unchanged(t, before, "a queue beyond max_queues")
			return r
		}},
		api.CodeTooManyTopics: {[]string{"max_topics"}, func(t *testing.T) *response {
			le := newEnv(t, okibatest.Options{Broker: broker.Config{MaxTopics: 1}})
			le.call("PUT", "/v1/topics/first", `{}`, 201, nil)
			r := le.do("PUT", "/v1/topics/second", `{}`)
			le.call("GET", "/v1/topics/second", nil, 404, nil)
			return r
		}},
		api.CodeGroupNotFound: {[]string{`"nobody"`}, func(t *testing.T) *response {
			e.call("PUT", "/v1/topics/grouped", `{}`, 201, nil)
			return e.do("POST", "/v1/topics/grouped/groups/nobody/pull", `{"member":"m"}`)
		}},
		api.CodeGroupDeleted: {[]string{`"gone"`}, func(t *testing.T) *response {
			e.call("PUT", "/v1/topics/deleted", `{}`, 201, nil)
			e.call("PUT", "/v1/topics/deleted/groups/gone", `{}`, 201, nil)
			var p api.PullResponse
			e.call("POST", "/v1/topics/deleted/groups/gone/pull", `{"member":"m"}`, 200, &p)
			e.call("DELETE", "/v1/topics/deleted/groups/gone", nil, 204, nil)
			return e.do("POST", "/v1/topics/deleted/groups/gone/pull", fmt.Sprintf(`{"member":"m","session":%q}`, p.Session))
		}},
		api.CodeMemberUnknown: {[]string{`"stranger"`, "rejoin"}, func(t *testing.T) *response {
			e.call("PUT", "/v1/topics/members", `{}`, 201, nil)
			e.call("PUT", "/v1/topics/members/groups/g", `{}`, 201, nil)
			return e.do("POST", "/v1/topics/members/groups/g/heartbeat", `{"member":"stranger","session":"7"}`)
		}},
		api.CodeEpochStale: {[]string{"epoch", "pull again"}, func(t *testing.T) *response {
			e.call("PUT", "/v1/topics/epochs", `{}`, 201, nil)
			e.call("PUT", "/v1/topics/epochs/groups/g", `{}`, 201, nil)
			e.call("POST", "/v1/topics/epochs/records", `{"body":"x"}`, 200, nil)
			var p api.PullResponse
			e.call("POST", "/v1/topics/epochs/groups/g/pull", `{"member":"m"}`, 200, &p)
			e.call("POST", "/v1/topics/epochs/groups/g/seek", `{"to":"first"}`, 200, nil)
			return e.do("POST", "/v1/topics/epochs/groups/g/commit",
				fmt.Sprintf(`{"member":"m","session":%q,"offsets":[{"partition":0,"offset":1,"epoch":%d}]}`, p.Session, p.Assignment[0].Epoch))
		}},
		api.CodeOffsetRegressed: {[]string{"below the committed"}, func(t *testing.T) *response {
			e.call("PUT", "/v1/topics/regress", `{}`, 201, nil)
			e.call("PUT", "/v1/topics/regress/groups/g", `{}`, 201, nil)
			e.call("POST", "/v1/topics/regress/records", `{"records":[{"body":"1"},{"body":"2"}]}`, 200, nil)
			var p api.PullResponse
			e.call("POST", "/v1/topics/regress/groups/g/pull", `{"member":"m"}`, 200, &p)
			commit := func(off int) *response {
				return e.do("POST", "/v1/topics/regress/groups/g/commit",
					fmt.Sprintf(`{"member":"m","session":%q,"offsets":[{"partition":0,"offset":%d,"epoch":%d}]}`, p.Session, off, p.Assignment[0].Epoch))
			}
			if r := commit(2); r.Status != 200 {
				t.Fatalf("commit: %v", r)
			}
			return commit(1)
		}},
		api.CodeTooManyGroups: {[]string{"max_groups"}, func(t *testing.T) *response {
			le := newEnv(t, okibatest.Options{Broker: broker.Config{MaxGroups: 1}})
			le.call("PUT", "/v1/topics/t", `{}`, 201, nil)
			le.call("PUT", "/v1/topics/t/groups/one", `{}`, 201, nil)
			return le.do("PUT", "/v1/topics/t/groups/two", `{}`)
		}},
		api.CodeTooManyMembers: {[]string{"max_members"}, func(t *testing.T) *response {
			le := newEnv(t, okibatest.Options{Broker: broker.Config{MaxMembers: 1}})
			le.call("PUT", "/v1/topics/t", `{}`, 201, nil)
			le.call("PUT", "/v1/topics/t/groups/g", `{}`, 201, nil)
			le.call("POST", "/v1/topics/t/groups/g/pull", `{"member":"one"}`, 200, nil)
			return le.do("POST", "/v1/topics/t/groups/g/pull", `{"member":"two"}`)
		}},
		api.CodeTopicInUse: {[]string{"subscriptions", "force"}, func(t *testing.T) *response {
			e.call("PUT", "/v1/topics/used", `{}`, 201, nil)
			e.putQueue("used-q", `{}`)
			e.call("PUT", "/v1/topics/used/subscriptions/s", `{"queue":"used-q"}`, 201, nil)
			return e.do("DELETE", "/v1/topics/used", nil)
		}},
		api.CodeSubscriptionNotFound: {[]string{`"ghost"`}, func(t *testing.T) *response {
			e.call("PUT", "/v1/topics/subs", `{}`, 201, nil)
			return e.do("GET", "/v1/topics/subs/subscriptions/ghost", nil)
		}},
		api.CodeInvalidFilter: {[]string{"filter"}, func(t *testing.T) *response {
			e.call("PUT", "/v1/topics/filtered", `{}`, 201, nil)
			e.putQueue("filtered-q", `{}`)
			return e.do("PUT", "/v1/topics/filtered/subscriptions/s", `{"queue":"filtered-q","filter":{"price":[{"numeric":[">",10,"<",5]}]}}`)
		}},
		api.CodeTooManySubscriptions: {[]string{"max_subscriptions"}, func(t *testing.T) *response {
			le := newEnv(t, okibatest.Options{Broker: broker.Config{MaxSubscriptions: 1}})
			le.call("PUT", "/v1/topics/t", `{}`, 201, nil)
			le.putQueue("q1", `{}`)
			le.call("PUT", "/v1/topics/t/subscriptions/one", `{"queue":"q1"}`, 201, nil)
			return le.do("PUT", "/v1/topics/t/subscriptions/two", `{"queue":"q1"}`)
		}},
		api.CodeTopicNotFound: {[]string{`"nope"`}, func(t *testing.T) *response {
			return e.do("POST", "/v1/topics/nope/records", `{"body":"x"}`)
		}},
		api.CodeTopicFull: {[]string{"retention_records", "discard new"}, func(t *testing.T) *response {
			e.call("PUT", "/v1/topics/full", `{"retention_records":1,"discard":"new"}`, 201, nil)
			e.call("POST", "/v1/topics/full/records", `{"body":"1"}`, 200, nil)
			r := e.do("POST", "/v1/topics/full/records", `{"body":"2"}`)
			if got := r.Header.Get("Retry-After"); got != "1" {
				t.Errorf("Retry-After %q, want 1", got)
			}
			return r
		}},
		api.CodeOffsetOutOfRange: {[]string{"past the partition's end"}, func(t *testing.T) *response {
			e.call("PUT", "/v1/topics/offsets", `{}`, 201, nil)
			return e.do("GET", "/v1/topics/offsets/partitions/0/records?offset=5", nil)
		}},
		api.CodePartitionOutOfRange: {[]string{"partitions 0 to 0"}, func(t *testing.T) *response {
			e.call("PUT", "/v1/topics/parts", `{}`, 201, nil)
			return e.do("POST", "/v1/topics/parts/records", `{"body":"x","partition":1}`)
		}},
		api.CodeRecordTooLarge: {[]string{"at most 2"}, func(t *testing.T) *response {
			e.call("PUT", "/v1/topics/small", `{"max_record_size":2}`, 201, nil)
			return e.do("POST", "/v1/topics/small/records", `{"body":"xyz"}`)
		}},
		api.CodeTooManyInFlight: {[]string{"max_in_flight", "in flight"}, func(t *testing.T) *response {
			le := newEnv(t, okibatest.Options{Broker: broker.Config{MaxInFlight: 2}})
			le.putQueue("q", `{}`)
			le.send("q", "1", "2", "3")
			if ms := le.receive("q", 10, ""); len(ms) != 2 {
				t.Fatalf("a receive of 10 with room for 2 leases returned %d", len(ms))
			}
			r := le.do("POST", "/v1/queues/q/receive", `{}`)
			if got := r.Header.Get("Retry-After"); got != "1" {
				t.Errorf("Retry-After %q, want 1", got)
			}
			return r
		}},
		api.CodeDiskFull: {[]string{"disk", "free"}, func(t *testing.T) *response {
			free := int64(1 << 40)
			var mu sync.Mutex
			de := newEnv(t, okibatest.Options{FakeClock: true, Broker: broker.Config{MinFreeBytes: 1 << 30, FreeSpace: func(string) (int64, error) {
				mu.Lock()
				defer mu.Unlock()
				return free, nil
			}}})
			de.putQueue("q", `{}`)
			de.send("q", "before")
			mu.Lock()
			free = 100 << 20
			mu.Unlock()
			de.srv.Clock.Advance(3 * time.Second) // the broker looks every 2 s
			var r *response
			testkit.Eventually(t, 10*time.Second, func() bool {
				r = de.do("POST", "/v1/queues/q/messages", `{"body":"while full"}`)
				return r.Status == 507
			}, "sends to be refused")
			// Consumers go on: receive and ack free space.
			ms := de.receive("q", 1, "")
			if len(ms) != 1 {
				t.Fatalf("receive while the disk is nearly full: %d messages", len(ms))
			}
			de.settle("q", "ack", receiptsOf(ms), "")
			mu.Lock()
			free = 1 << 40
			mu.Unlock()
			de.srv.Clock.Advance(3 * time.Second)
			testkit.Eventually(t, 10*time.Second, func() bool {
				return de.do("POST", "/v1/queues/q/messages", `{"body":"after"}`).Status == 200
			}, "sends to be accepted again")
			return r
		}},
		api.CodeUnavailable: {[]string{"closed"}, func(t *testing.T) *response {
			ce := newEnv(t, okibatest.Options{})
			ce.putQueue("q", `{}`)
			if err := ce.srv.Broker.Close(); err != nil {
				t.Fatal(err)
			}
			h := ce.do("GET", "/healthz", nil)
			if h.Status != 503 {
				t.Errorf("healthz of a closed broker: %v", h)
			}
			return ce.do("POST", "/v1/queues/q/messages", `{"body":"x"}`)
		}},
		api.CodeUnauthorized: {[]string{"Authorization: Bearer"}, func(t *testing.T) *response {
			ae := newEnv(t, okibatest.Options{Token: "s3cret-s3cret-s3cret-s3cret"})
			r := ae.do("GET", "/v1/queues", nil, "Authorization", "")
			if !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate %q", r.Header.Get("WWW-Authenticate"))
			}
			return r
		}},
		api.CodeForbidden: {[]string{`"http://evil.example"`, "--cors-origins"}, func(t *testing.T) *response {
			return e.do("POST", "/v1/queues/q/purge", nil, "Origin", "http://evil.example")
		}},
		api.CodePrincipalNotFound: {[]string{`"ghost"`}, func(t *testing.T) *response {
			return e.do("GET", "/v1/principals/ghost", nil)
		}},
		api.CodePrincipalExists: {[]string{`"twice"`}, func(t *testing.T) *response {
			e.call("POST", "/v1/principals", `{"name":"twice"}`, 201, nil)
			return e.do("POST", "/v1/principals", `{"name":"twice","grants":["browse queue:*"]}`)
		}},
		api.CodeTooManyPrincipals: {[]string{fmt.Sprint(access.MaxPrincipals)}, func(t *testing.T) *response {
			// A thousand principals on a disk in memory, straight into the broker (sealed
			// as the node seals, so that the keyring reads them), then one more through
			// the API.
			fe := newEnv(t, okibatest.Options{Dir: "/data", Broker: broker.Config{FS: vfs.NewMemFS(), NoPrecreate: true}})
			b := fe.srv.Broker
			keys, err := auth.NewKeyring(b.DeriveKey("principal secrets"), b, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range access.MaxPrincipals {
				name := fmt.Sprintf("p%d", i)
				if _, err := b.CreatePrincipal(t.Context(), name, nil, keys.Seal(name, auth.NewSecret())); err != nil {
					t.Fatal(err)
				}
			}
			r := fe.do("POST", "/v1/principals", `{"name":"one-more"}`)
			fe.call("GET", "/v1/principals/one-more", nil, 404, nil)
			return r
		}},
		api.CodeInternal: {[]string{"server log"}, func(t *testing.T) *response {
			// No request of the API meets an error the table does not know (a body that
			// cannot be read used to be one, and answers with what it is now): a handler
			// added for the test answers one, through the service's mapping.
			_, ie := serverAt(t, nativeapi.Options{}, func(srv *nativeapi.Server, _ *httptest.Server) {
				srv.Handle("/unforeseen", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					reply.Error(w, service.ErrorOf(slog.New(slog.DiscardHandler), errors.New("read /data/wal/00000001.wal: something unforeseen")))
				}))
			})
			r := ie.do("GET", "/unforeseen", nil)
			if strings.Contains(string(r.Body), "unforeseen") || strings.Contains(string(r.Body), "/data") {
				t.Errorf("internal error leaks details: %v", r)
			}
			return r
		}},
	}

	// The table must cover every code that package api defines.
	var missing []string
	for code := range api.Status {
		if _, ok := cases[code]; !ok {
			missing = append(missing, code)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		t.Fatalf("no test produces %v", missing)
	}
	codes := make([]string, 0, len(cases))
	for code := range cases {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	// The cases run at once: those on e touch queues of their own or are refused, the
	// others start a broker of their own.
	for _, code := range codes {
		c := cases[code]
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			r := c.run(t)
			expectError(t, r, code, c.mentions...)
			// A batch whose items all failed alike carries the error per item too.
			var body struct {
				Results []struct {
					Error *api.Error `json:"error"`
				} `json:"results"`
			}
			_ = json.Unmarshal(r.Body, &body)
			for i, it := range body.Results {
				if it.Error == nil || it.Error.Code != code {
					t.Errorf("results[%d] = %+v, want error %s", i, it.Error, code)
				}
			}
		})
	}
}

// TestErrorMessagesNameTheField covers messages that must say which field is wrong.
func TestErrorMessagesNameTheField(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("q", `{}`)
	for _, c := range []struct{ path, body, field string }{
		{"/v1/queues/q", `{"visibility_timeout":"1x"}`, "visibility_timeout"},
		{"/v1/queues/q", `{"retention":"10 days"}`, "retention"},
		{"/v1/queues/q", `{"backoff_max":true}`, "backoff_max"},
		{"/v1/queues/q/messages", `{"body":"x","delay":"soon"}`, "delay"},
		{"/v1/queues/q/receive", `{"wait":"forever"}`, "wait"},
		{"/v1/queues/q/receive", `{"visibility":1e12}`, "visibility"},
		{"/v1/queues/q/nack", `{"receipts":["r"],"delay":"later"}`, "delay"},
	} {
		method := "POST"
		if c.path == "/v1/queues/q" {
			method = "PUT"
		}
		t.Run("duration "+c.field, func(t *testing.T) {
			r := e.do(method, c.path, c.body)
			er := expectError(t, r, api.CodeInvalidRequest)
			// server/server.go jsonError: errors returned by api.Duration.UnmarshalJSON reach
			// the user without the name of the field they are about.
			regression(t, strings.Contains(er.Message, c.field),
				"a bad duration is reported without its field: %q does not mention %q", er.Message, c.field)
		})
	}
	t.Run("invalid receipt", func(t *testing.T) {
		er := expectError(t, e.do("POST", "/v1/queues/q/ack", `{"receipts":["garbage"]}`), api.CodeInvalidReceipt)
		// broker/ops.go leasesLocked wraps ErrInvalidReceipt around receipt.ErrInvalid,
		// which says the same words again.
		regression(t, strings.Count(er.Message, "invalid receipt") == 1,
			"the message repeats itself: %q", er.Message)
	})
	t.Run("top-level array", func(t *testing.T) {
		r := e.do("POST", "/v1/queues/q/messages", `[{"body":"x"}]`)
		er := expectError(t, r, api.CodeInvalidRequest)
		regression(t, !strings.Contains(er.Message, "server.") && strings.Contains(er.Message, "object"),
			"a JSON array instead of an object is reported with a Go type name: %q", er.Message)
	})
	for _, c := range []struct{ path, body, field string }{
		{"/v1/queues/q", `{"max_messages":"10"}`, "max_messages"},
		{"/v1/queues/q/messages", `{"messages":[{"body":5}]}`, "messages.body"},
		{"/v1/queues/q/messages", `{"body":"x","colour":"red"}`, "colour"},
		{"/v1/queues/q/ack", `{"receipts":"abc"}`, "receipts"},
		{"/v1/queues/q/receive", `{"max":"3"}`, "max"},
		{"/v1/queues/q/receive", `{"max":1001}`, "max"},
		{"/v1/queues/q/extend", `{"receipts":["r"]}`, "visibility"},
	} {
		method := "POST"
		if c.path == "/v1/queues/q" {
			method = "PUT"
		}
		t.Run(c.field, func(t *testing.T) {
			expectError(t, e.do(method, c.path, c.body), api.CodeInvalidRequest, c.field)
		})
	}
}

// TestRequestLevelChecksComeFirst: deadletter's reason and a queue's missing DLQ are
// properties of the request; they must be reported whatever the receipts are.
func TestRequestLevelChecksComeFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("q", `{}`)
	e.putQueue("nodlq", `{"dead_letter_queue":"none"}`)
	t.Run("bad reason with a good receipt", func(t *testing.T) {
		e.send("q", "a")
		ms := e.receive("q", 1, "")
		expectError(t, e.do("POST", "/v1/queues/q/deadletter", receiptsBody(receiptsOf(ms), `,"reason":"tab\there"`)),
			api.CodeInvalidMessage, "reason")
	})
	t.Run("bad reason with only bad receipts", func(t *testing.T) {
		r := e.do("POST", "/v1/queues/q/deadletter", `{"receipts":["garbage"],"reason":"tab\there"}`)
		// broker/ops.go settle skips the command (and the reason check in
		// queue.Machine.DeadLetter) when no receipt decodes.
		regression(t, r.Status == 400 && wireError(t, r).Code == api.CodeInvalidMessage,
			"deadletter with an invalid reason answers %v when no receipt decodes; want invalid_message", r)
	})
	t.Run("no dead-letter queue with only bad receipts", func(t *testing.T) {
		r := e.do("POST", "/v1/queues/nodlq/deadletter", `{"receipts":["garbage"]}`)
		regression(t, r.Status == 409 && wireError(t, r).Code == api.CodeNoDeadLetter,
			"deadletter on a queue with dead_letter_queue none answers %v when no receipt decodes; want no_dead_letter_queue", r)
	})
}

// TestAuthentication: a token protects /v1, never /healthz.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{Token: "s3cret-s3cret-s3cret-s3cret"})
	e.putQueue("q", `{}`)
	for _, h := range []string{"", "Bearer wrong", "Bearer s3cret2", "Basic czNjcmV0", "s3cret", "Bearer "} {
		r := e.do("GET", "/v1/queues/q", nil, "Authorization", h)
		expectError(t, r, api.CodeUnauthorized)
	}
	// An unknown route under /v1 does not tell an anonymous caller that it is unknown.
	expectError(t, e.do("GET", "/v1/nothing", nil, "Authorization", ""), api.CodeUnauthorized)
	e.call("GET", "/v1/queues/q", nil, 200, nil)
	r := e.do("GET", "/healthz", nil, "Authorization", "")
	if r.Status != 200 || !strings.Contains(string(r.Body), `"ok"`) {
		t.Fatalf("healthz without a token: %v", r)
	}

	// Paths that only lead to /v1 after cleaning are redirected, never served anonymously.
	for _, path := range []string{"/healthz/../v1/queues", "//v1/queues", "/./v1/queues/q", "/v1//queues", "/v1/queues/../queues/q"} {
		c, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: okiba\r\nConnection: close\r\n\r\n", path)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		if res.StatusCode != http.StatusTemporaryRedirect && res.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d, want a redirect or 401", path, res.StatusCode)
		}
	}

	t.Run("scheme is case-insensitive", func(t *testing.T) {
		r := e.do("GET", "/v1/queues/q", nil, "Authorization", "bearer s3cret-s3cret-s3cret-s3cret")
		// RFC 9110 §11.1: the authentication scheme is case-insensitive. server/server.go
		// serveHTTP compares the prefix "Bearer " exactly.
		regression(t, r.Status == 200, `"Authorization: bearer <token>" is refused: %v`, r)
	})

	t.Run("every interface on the port is authenticated", func(t *testing.T) {
		r := envAt(t, e.base).do("GET", "/metrics", nil) // no token
		// Handlers beside the native API (metrics, the console) used to be served
		// without the token when only paths under /v1/ were checked.
		regression(t, r.Status == 401, "/metrics is served without the token: %v", r)
	})
}

// TestBodiesMustBeUTF8: JSON text must be UTF-8; a body that is not would be stored with
// its bytes replaced.
func TestBodiesMustBeUTF8(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{})
	e.putQueue("q", `{}`)
	r := e.do("POST", "/v1/queues/q/messages", "{\"body\":\"caf\xe9\"}") // Latin-1 "café"
	if r.Status == 200 {
		p := e.peek("q", "")
		// server/server.go decode hands the bytes to encoding/json, which replaces invalid
		// UTF-8 with U+FFFD instead of failing: the message is stored altered.
		regression(t, false, "a request body that is not UTF-8 is accepted and the message altered: sent \"caf\\xe9\", stored %q", bodyOf(p.Messages[0]))
	}
	expectError(t, r, api.CodeInvalidRequest, "UTF-8")
}
