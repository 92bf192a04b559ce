package nativeapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/nativeapi"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

// The permission matrix: every route of the native API's table × every single grant,
// the expectation computed from the route's rule (access.Grants.Allows), the request
// sent through the real server. A denied request answers 403 forbidden naming the
// permission that was missing and changes nothing; an allowed one is not refused.

// need is one permission a request needs.
type need struct {
	perm access.Permission
	res  access.Resource
}

func (n need) String() string { return n.perm.String() + " on " + n.res.String() }

// probe is one well-formed request of a route, as the matrix sends it.
type probe struct {
	method, path, body string
	// resource names the rule's resource when the path does not (a redrive task's
	// dead-letter queue).
	resource string
	// also are the checks the handler makes beyond its rule (auth.Rule.Also), in order.
	also []need
}

// matrixGrant is one principal of the matrix: a single grant (or none).
type matrixGrant struct {
	name, grant string
	kind        access.Kind // the kind of resource the grant is about; AnyKind for none, admin, metrics
}

var matrixGrants = func() []matrixGrant {
	out := []matrixGrant{{name: "m-none"}, {name: "m-admin", grant: "admin"}, {name: "m-metrics", grant: "metrics"}}
	for _, kind := range []access.Kind{access.Queue, access.Topic} {
		for _, perm := range []access.Permission{access.Send, access.Receive, access.Browse, access.Manage} {
			out = append(out, matrixGrant{name: "m-" + perm.String() + "-" + kind.String(),
				grant: perm.String() + " " + kind.String() + ":*", kind: kind})
		}
	}
	return out
}()

func (g matrixGrant) secret() string { return g.name + "-secret-0123456789abc" }

func (g matrixGrant) grants(t *testing.T) access.Grants {
	if g.grant == "" {
		return nil
	}
	gr, err := access.ParseGrant(g.grant)
	if err != nil {
		t.Fatal(err)
	}
	return access.Grants{gr}
}

// fixture is the server of the matrix and what its probes use, made once.
type fixture struct {
	t *testing.T
	e *env // as admin
	n int  // for unique names
}

func newFixture(t *testing.T, extra ...okibatest.Principal) *fixture {
	t.Helper()
	var ps []okibatest.Principal
	for _, g := range matrixGrants {
		p := okibatest.Principal{Name: g.name, Secret: g.secret()}
		if g.grant != "" {
			p.Grants = []string{g.grant}
		}
		ps = append(ps, p)
	}
	// A fake clock: no lease, member or retention ends while the matrix runs.
	e := newEnv(t, okibatest.Options{Token: adminToken, FakeClock: true, Principals: append(ps, extra...)})
	f := &fixture{t: t, e: e}
	for _, q := range []string{"pm-q", "pm-settle", "pm-purge", "pm-rd", "pm-rt", "pm-subq"} {
		e.putQueue(q, `{}`)
	}
	for _, tp := range []string{"pm-t", "pm-subs"} {
		e.call("PUT", "/v1/topics/"+tp, `{}`, 201, nil)
	}
	e.call("POST", "/v1/topics/pm-t/records", `{"body":"first"}`, 200, nil)
	e.call("PUT", "/v1/topics/pm-t/groups/g0", `{}`, 201, nil)
	e.call("PUT", "/v1/topics/pm-subs/subscriptions/s0", `{"queue":"pm-subq"}`, 201, nil)
	e.call("POST", "/v1/principals", `{"name":"pm-p","grants":["browse queue:pm-*"]}`, 201, nil)
	return f
}

func (f *fixture) unique(prefix string) string {
	f.n++
	return fmt.Sprintf("%s-%d", prefix, f.n)
}

// receipt returns the receipt of a message just sent to queue and received.
func (f *fixture) receipt(queue string) string {
	f.e.send(queue, "to settle")
	ms := f.e.receive(queue, 1, "")
	if len(ms) != 1 {
		f.t.Fatalf("receive from %s: %d messages", queue, len(ms))
	}
	return ms[0].Receipt
}

// deferred defers a message of queue and returns its id.
func (f *fixture) deferred(queue string) string {
	f.e.send(queue, "to defer")
	ms := f.e.receive(queue, 1, "")
	if len(ms) != 1 {
		f.t.Fatalf("receive from %s: %d messages", queue, len(ms))
	}
	if res, _ := f.e.settle(queue, "defer", []string{ms[0].Receipt}, ""); res.Status != 200 {
		f.t.Fatalf("defer: %v", res)
	}
	return ms[0].ID
}

// deadLetter puts one dead letter from queue into its dead-letter queue.
func (f *fixture) deadLetter(queue string) {
	r := f.receipt(queue)
	if res, _ := f.e.settle(queue, "deadletter", []string{r}, ""); res.Status != 200 {
		f.t.Fatalf("deadletter: %v", res)
	}
}

// redriveTask starts a redrive of the empty queue pm-rt and returns its id.
func (f *fixture) redriveTask() string {
	var task api.RedriveTask
	f.e.call("POST", "/v1/queues/pm-rt/redrive", `{}`, 202, &task)
	return task.ID
}

func (f *fixture) ensure(method, path, body string) {
	if r := f.e.do(method, path, body); r.Status >= 300 && r.Status != 409 {
		f.t.Fatalf("%s %s: %v", method, path, r)
	}
}

func receipts(r string) string { return fmt.Sprintf(`{"receipts":[%q]}`, r) }

// probes returns each route's request builder, by "METHOD PATTERN". A builder prepares,
// as admin, what its request needs (a message, a receipt, a resource to delete).
func (f *fixture) probes() map[string]func() probe {
	member := `{"member":"m","session":"1"}`
	return map[string]func() probe{
		"GET /healthz":     func() probe { return probe{method: "GET", path: "/healthz"} },
		"GET /v1/queues":   func() probe { return probe{method: "GET", path: "/v1/queues"} },
		"GET /v1/stats":    func() probe { return probe{method: "GET", path: "/v1/stats"} },
		"GET /v1/redrives": func() probe { return probe{method: "GET", path: "/v1/redrives"} },
		"GET /v1/topics":   func() probe { return probe{method: "GET", path: "/v1/topics"} },
		"GET /v1/stream":   func() probe { return probe{method: "GET", path: "/v1/stream"} },
		"PUT /v1/queues/{name}": func() probe {
			return probe{method: "PUT", path: "/v1/queues/pm-put", body: `{"visibility_timeout":"20s"}`}
		},
		"GET /v1/queues/{name}": func() probe { return probe{method: "GET", path: "/v1/queues/pm-q"} },
		"DELETE /v1/queues/{name}": func() probe {
			f.e.putQueue("pm-victim", `{}`)
			return probe{method: "DELETE", path: "/v1/queues/pm-victim"}
		},
		"POST /v1/queues/{name}/messages": func() probe {
			return probe{method: "POST", path: "/v1/queues/pm-q/messages", body: `{"body":"x"}`}
		},
		"GET /v1/queues/{name}/messages": func() probe { return probe{method: "GET", path: "/v1/queues/pm-q/messages"} },
		"GET /v1/queues/{name}/messages/{id}": func() probe {
			return probe{method: "GET", path: "/v1/queues/pm-q/messages/" + f.e.send("pm-q", "peeked")[0]}
		},
		"GET /v1/queues/{name}/messages/{id}/explain": func() probe {
			return probe{method: "GET", path: "/v1/queues/pm-q/messages/" + f.e.send("pm-q", "explained")[0] + "/explain"}
		},
		"GET /v1/queues/{name}/explain": func() probe {
			return probe{method: "GET", path: "/v1/queues/pm-q/explain?dedup_id=d1"}
		},
		"DELETE /v1/queues/{name}/messages/{id}": func() probe {
			return probe{method: "DELETE", path: "/v1/queues/pm-q/messages/" + f.e.send("pm-q", "deleted")[0]}
		},
		"GET /v1/queues/{name}/consumers": func() probe { return probe{method: "GET", path: "/v1/queues/pm-q/consumers"} },
		"POST /v1/queues/{name}/receive": func() probe {
			return probe{method: "POST", path: "/v1/queues/pm-q/receive", body: `{"max":1,"wait":0}`}
		},
		"POST /v1/queues/{name}/ack": func() probe {
			return probe{method: "POST", path: "/v1/queues/pm-settle/ack", body: receipts(f.receipt("pm-settle"))}
		},
		"POST /v1/queues/{name}/nack": func() probe {
			return probe{method: "POST", path: "/v1/queues/pm-settle/nack", body: receipts(f.receipt("pm-settle"))}
		},
		"POST /v1/queues/{name}/extend": func() probe {
			return probe{method: "POST", path: "/v1/queues/pm-settle/extend",
				body: fmt.Sprintf(`{"receipts":[%q],"visibility":"1m"}`, f.receipt("pm-settle"))}
		},
		"POST /v1/queues/{name}/deadletter": func() probe {
			return probe{method: "POST", path: "/v1/queues/pm-settle/deadletter", body: receipts(f.receipt("pm-settle"))}
		},
		"POST /v1/queues/{name}/defer": func() probe {
			return probe{method: "POST", path: "/v1/queues/pm-settle/defer", body: receipts(f.receipt("pm-settle"))}
		},
		"POST /v1/queues/{name}/deferred/receive": func() probe {
			return probe{method: "POST", path: "/v1/queues/pm-settle/deferred/receive", body: fmt.Sprintf(`{"ids":[%q]}`, f.deferred("pm-settle"))}
		},
		"GET /v1/queues/{name}/parked": func() probe { return probe{method: "GET", path: "/v1/queues/pm-q/parked"} },
		"POST /v1/queues/{name}/groups/{group}/release": func() probe {
			// No group of pm-q is parked: allowed, it answers not_parked (409).
			return probe{method: "POST", path: "/v1/queues/pm-q/groups/g1/release"}
		},
		"POST /v1/queues/{name}/purge": func() probe {
			f.e.send("pm-purge", "purged")
			return probe{method: "POST", path: "/v1/queues/pm-purge/purge"}
		},
		"POST /v1/queues/{name}/redrive": func() probe {
			// Back where they came from: pm-rd's dead letters go back to pm-rd.
			f.deadLetter("pm-rd")
			return probe{method: "POST", path: "/v1/queues/pm-rd-dlq/redrive", body: `{}`,
				also: []need{{access.Send, access.QueueNamed("pm-rd")}}}
		},
		"GET /v1/redrives/{id}": func() probe {
			return probe{method: "GET", path: "/v1/redrives/" + f.redriveTask(), resource: "pm-rt"}
		},
		"DELETE /v1/redrives/{id}": func() probe {
			return probe{method: "DELETE", path: "/v1/redrives/" + f.redriveTask(), resource: "pm-rt"}
		},
		"PUT /v1/topics/{name}": func() probe {
			return probe{method: "PUT", path: "/v1/topics/pm-tput", body: `{"retention":"1h"}`}
		},
		"GET /v1/topics/{name}": func() probe { return probe{method: "GET", path: "/v1/topics/pm-t"} },
		"DELETE /v1/topics/{name}": func() probe {
			f.ensure("PUT", "/v1/topics/pm-tvictim", `{}`)
			return probe{method: "DELETE", path: "/v1/topics/pm-tvictim"}
		},
		"POST /v1/topics/{name}/records": func() probe {
			return probe{method: "POST", path: "/v1/topics/pm-t/records", body: `{"body":"x"}`}
		},
		"GET /v1/topics/{name}/partitions/{partition}/records": func() probe {
			return probe{method: "GET", path: "/v1/topics/pm-t/partitions/0/records?offset=0&max=1"}
		},
		"GET /v1/topics/{name}/subscriptions": func() probe {
			return probe{method: "GET", path: "/v1/topics/pm-subs/subscriptions"}
		},
		"PUT /v1/topics/{name}/subscriptions/{sub}": func() probe {
			return probe{method: "PUT", path: "/v1/topics/pm-subs/subscriptions/s1", body: `{"queue":"pm-subq"}`,
				also: []need{{access.Send, access.QueueNamed("pm-subq")}}}
		},
		"GET /v1/topics/{name}/subscriptions/{sub}": func() probe {
			return probe{method: "GET", path: "/v1/topics/pm-subs/subscriptions/s0"}
		},
		"DELETE /v1/topics/{name}/subscriptions/{sub}": func() probe {
			f.ensure("PUT", "/v1/topics/pm-subs/subscriptions/svictim", `{"queue":"pm-subq"}`)
			return probe{method: "DELETE", path: "/v1/topics/pm-subs/subscriptions/svictim"}
		},
		"GET /v1/topics/{name}/groups": func() probe { return probe{method: "GET", path: "/v1/topics/pm-t/groups"} },
		"PUT /v1/topics/{name}/groups/{group}": func() probe {
			return probe{method: "PUT", path: "/v1/topics/pm-t/groups/gput", body: `{"member_lease":"1m"}`}
		},
		"GET /v1/topics/{name}/groups/{group}": func() probe { return probe{method: "GET", path: "/v1/topics/pm-t/groups/g0"} },
		"DELETE /v1/topics/{name}/groups/{group}": func() probe {
			f.ensure("PUT", "/v1/topics/pm-t/groups/gvictim", `{}`)
			return probe{method: "DELETE", path: "/v1/topics/pm-t/groups/gvictim"}
		},
		"POST /v1/topics/{name}/groups/{group}/pull": func() probe {
			return probe{method: "POST", path: "/v1/topics/pm-t/groups/g0/pull", body: `{"member":"puller","wait":"0s"}`}
		},
		"POST /v1/topics/{name}/groups/{group}/heartbeat": func() probe {
			return probe{method: "POST", path: "/v1/topics/pm-t/groups/g0/heartbeat", body: member}
		},
		"POST /v1/topics/{name}/groups/{group}/commit": func() probe {
			return probe{method: "POST", path: "/v1/topics/pm-t/groups/g0/commit",
				body: `{"member":"m","session":"1","offsets":[{"partition":0,"offset":1,"epoch":1}]}`}
		},
		"POST /v1/topics/{name}/groups/{group}/seek": func() probe {
			f.ensure("PUT", "/v1/topics/pm-t/groups/gseek", `{}`)
			return probe{method: "POST", path: "/v1/topics/pm-t/groups/gseek/seek", body: `{"to":"last"}`}
		},
		"POST /v1/topics/{name}/groups/{group}/leave": func() probe {
			return probe{method: "POST", path: "/v1/topics/pm-t/groups/g0/leave", body: member}
		},
		"POST /v1/topics/{name}/groups/{group}/deadletter": func() probe {
			return probe{method: "POST", path: "/v1/topics/pm-t/groups/g0/deadletter",
				body: `{"member":"m","session":"1","partition":0,"offset":0,"epoch":1,"reason":"poison"}`}
		},
		"POST /v1/principals": func() probe {
			return probe{method: "POST", path: "/v1/principals", body: fmt.Sprintf(`{"name":%q,"grants":["browse queue:*"]}`, f.unique("pm-new"))}
		},
		"GET /v1/principals":        func() probe { return probe{method: "GET", path: "/v1/principals"} },
		"GET /v1/backup":            func() probe { return probe{method: "GET", path: "/v1/backup"} },
		"POST /v1/producers":        func() probe { return probe{method: "POST", path: "/v1/producers"} },
		"GET /v1/principals/{name}": func() probe { return probe{method: "GET", path: "/v1/principals/pm-p"} },
		"DELETE /v1/principals/{name}": func() probe {
			f.ensure("POST", "/v1/principals", `{"name":"pm-pvictim"}`)
			return probe{method: "DELETE", path: "/v1/principals/pm-pvictim"}
		},
		"POST /v1/principals/{name}/grant": func() probe {
			return probe{method: "POST", path: "/v1/principals/pm-p/grant", body: `{"grants":["send queue:pm-*"]}`}
		},
		"POST /v1/principals/{name}/revoke": func() probe {
			return probe{method: "POST", path: "/v1/principals/pm-p/revoke", body: `{"grants":["send queue:pm-*"]}`}
		},
		"POST /v1/principals/{name}/rotate": func() probe {
			return probe{method: "POST", path: "/v1/principals/pm-p/rotate", body: `{"keep":"1h"}`}
		},
	}
}

// pathValue returns the path segment that pattern names {param}.
func pathValue(t *testing.T, pattern, path, param string) string {
	t.Helper()
	path, _, _ = strings.Cut(path, "?")
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	for i, p := range ps {
		if p == "{"+param+"}" && i < len(xs) {
			return xs[i]
		}
	}
	t.Fatalf("test bug: pattern %s has no {%s} in %s", pattern, param, path)
	return ""
}

// needs returns what a probe of rt needs, in the order the server checks it.
func needs(t *testing.T, rt nativeapi.Route, p probe) []need {
	t.Helper()
	var out []need
	rule := rt.Rule
	if !rule.Open && !rule.Filtered {
		name := p.resource
		if rule.Param != "" {
			name = pathValue(t, rt.Pattern, p.path, rule.Param)
		} else if rule.Kind != access.AnyKind && name == "" {
			t.Fatalf("%s %s: its rule names no path parameter, so its probe must name the resource", rt.Method, rt.Pattern)
		}
		out = append(out, need{rule.Permission, rule.Resource(name)})
	}
	return append(out, p.also...)
}

// routeOf returns the route pattern the server's table routes method and path to.
func routeOf(routes []nativeapi.Route) func(method, path string) string {
	mux := http.NewServeMux()
	for _, rt := range routes {
		mux.Handle(rt.Method+" "+rt.Pattern, http.NotFoundHandler())
	}
	return func(method, path string) string {
		req, _ := http.NewRequest(method, "http://okiba"+path, nil)
		_, pattern := mux.Handler(req)
		return pattern
	}
}

// world is everything a request could change: queues with their messages and redrive
// tasks (snapshot), topics with their ends, subscriptions and groups' committed offsets,
// and principals. It leaves out what moves by itself (rates, ages, members' leases).
type world struct {
	State      state
	Topics     []topicWorld
	Principals api.PrincipalList
}

type topicWorld struct {
	Name          string
	UpdatedAt     time.Time
	Config        api.TopicConfig
	Ends          []uint64
	Subscriptions []api.Subscription
	Groups        map[string][]uint64
}

func (e *env) world() world {
	e.t.Helper()
	w := world{State: e.snapshot()}
	var topics api.TopicList
	e.call("GET", "/v1/topics", nil, 200, &topics)
	for _, tp := range topics.Topics {
		tw := topicWorld{Name: tp.Name, UpdatedAt: tp.UpdatedAt, Config: tp.Config, Groups: map[string][]uint64{}}
		for _, p := range tp.Partitions {
			tw.Ends = append(tw.Ends, p.End)
		}
		var subs api.SubscriptionList
		e.call("GET", "/v1/topics/"+tp.Name+"/subscriptions", nil, 200, &subs)
		tw.Subscriptions = subs.Subscriptions
		var groups api.GroupList
		e.call("GET", "/v1/topics/"+tp.Name+"/groups", nil, 200, &groups)
		for _, g := range groups.Groups {
			var committed []uint64
			for _, p := range g.Partitions {
				committed = append(committed, p.Committed)
			}
			tw.Groups[g.Name] = committed
		}
		w.Topics = append(w.Topics, tw)
	}
	e.call("GET", "/v1/principals", nil, 200, &w.Principals)
	return w
}

// quiet waits until no redrive task runs: the world then holds still.
func (e *env) quiet(t *testing.T) {
	t.Helper()
	testkit.Eventually(t, waitLong, func() bool {
		var l api.RedriveList
		e.call("GET", "/v1/redrives", nil, 200, &l)
		for _, task := range l.Tasks {
			if task.State == "running" {
				return false
			}
		}
		return true
	}, "redrive tasks to finish")
}

// expectDenied checks that r is the refusal of n.
func expectDenied(t *testing.T, what string, r *response, n need) {
	t.Helper()
	if r.Status != http.StatusForbidden {
		t.Errorf("%s: %v; want 403 forbidden for lack of %s", what, r, n)
		return
	}
	er := wireError(t, r)
	want := "lacks the " + n.perm.String() + " permission"
	if n.res.Kind != access.AnyKind {
		want += " on " + n.res.String()
	}
	if er == nil || er.Code != api.CodeForbidden || !strings.Contains(er.Message, want) {
		t.Errorf("%s: %v; want code forbidden saying %q", what, r, want)
	}
}

func TestPermissionMatrix(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	routes := nativeapi.New(nil, nativeapi.Options{}).Routes()
	routed := routeOf(routes)
	probes := f.probes()
	for _, rt := range routes {
		if probes[rt.Method+" "+rt.Pattern] == nil {
			t.Errorf("route %s %s has no probe in the permission matrix: add one to (*fixture).probes", rt.Method, rt.Pattern)
		}
	}
	inTable := map[string]bool{}
	for _, rt := range routes {
		inTable[rt.Method+" "+rt.Pattern] = true
	}
	for key := range probes {
		if !inTable[key] {
			t.Errorf("the matrix probes %s, which is no route of the table", key)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	type sent struct {
		rt   nativeapi.Route
		p    probe
		miss *need
	}
	for _, g := range matrixGrants {
		grants := g.grants(t)
		as := f.e.as(g.secret())
		// Prepare every request of the round, then send the denied ones between two
		// looks at the world, then the allowed ones.
		var denied, allowed []sent
		for _, rt := range routes {
			if g.kind != access.AnyKind && rt.Rule.Kind != access.AnyKind && rt.Rule.Kind != g.kind {
				continue // a grant on the other kind: the kind's own grants cover the route
			}
			p := probes[rt.Method+" "+rt.Pattern]()
			if got := routed(p.method, p.path); got != rt.Method+" "+rt.Pattern {
				t.Fatalf("test bug: the probe of %s %s is routed to %q", rt.Method, rt.Pattern, got)
			}
			s := sent{rt: rt, p: p}
			for _, n := range needs(t, rt, p) {
				if !grants.Allows(n.perm, n.res) {
					s.miss = &n
					break
				}
			}
			if s.miss != nil {
				denied = append(denied, s)
			} else {
				allowed = append(allowed, s)
			}
		}
		f.e.quiet(t)
		before := f.e.world()
		for _, s := range denied {
			r := as.do(s.p.method, s.p.path, s.p.body)
			expectDenied(t, fmt.Sprintf("%s: %s %s", g.name, s.p.method, s.p.path), r, *s.miss)
		}
		if after := f.e.world(); !reflect.DeepEqual(before, after) {
			b, _ := json.MarshalIndent(before, "", " ")
			a, _ := json.MarshalIndent(after, "", " ")
			t.Fatalf("%s: the requests refused changed the broker's state:\nbefore: %s\nafter:  %s", g.name, b, a)
		}
		for _, s := range allowed {
			r := as.do(s.p.method, s.p.path, s.p.body)
			if r.Status == http.StatusForbidden || r.Status == http.StatusUnauthorized || r.Status >= 500 {
				t.Errorf("%s (%s): %s %s is allowed by its rule but answered %v", g.name, g.grant, s.p.method, s.p.path, r)
			}
		}
	}
}

// Over the stream each frame is checked as its own route: a send and a receive refused,
// a peek allowed, on one connection; and so through the Go client, which uses the stream.
func TestPermissionsOverTheStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.e.send("pm-q", "waiting")
	browser := f.e.as(matrixGrant{name: "m-browse-queue"}.secret()) // browse queue:*
	before := f.e.world()
	s := browser.openStream()
	fr := s.call(1, "POST", "/v1/queues/pm-q/messages", `{"body":"x"}`)
	expectDenied(t, "a send on the stream", &response{Status: fr.Status, Body: fr.Body}, need{access.Send, access.QueueNamed("pm-q")})
	fr = s.call(2, "POST", "/v1/queues/pm-q/receive", `{"max":1,"wait":0}`)
	expectDenied(t, "a receive on the stream", &response{Status: fr.Status, Body: fr.Body}, need{access.Receive, access.QueueNamed("pm-q")})
	if fr = s.call(3, "GET", "/v1/queues/pm-q/messages", ""); fr.Status != 200 {
		t.Fatalf("a peek on the stream: HTTP %d %s", fr.Status, fr.Body)
	}

	cl, err := client.New(f.e.base, client.Options{Token: browser.token})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = cl.Send(t.Context(), "pm-q", client.Message{Body: []byte("x")})
	if !client.IsCode(err, api.CodeForbidden) || !strings.Contains(err.Error(), "lacks the send permission on queue:pm-q") {
		t.Fatalf("a send through the client: %v", err)
	}
	_, err = cl.Receive(t.Context(), "pm-q", client.ReceiveOptions{Max: 1})
	if !client.IsCode(err, api.CodeForbidden) || !strings.Contains(err.Error(), "lacks the receive permission on queue:pm-q") {
		t.Fatalf("a receive through the client: %v", err)
	}
	if after := f.e.world(); !reflect.DeepEqual(before, after) {
		t.Fatalf("refusals on the stream changed the broker's state")
	}
}

// Cross-resource actions need both sides, and a refusal changes nothing: a dead-letter
// queue other than the default needs send on it, a redrive send on every queue it moves
// messages into, a subscription send on its queue. A redrive task is its dead-letter
// queue's.
func TestCrossResourcePermissions(t *testing.T) {
	t.Parallel()
	ops := okibatest.Principal{Name: "ops", Secret: "ops-secret-0123456789abcdef",
		Grants: []string{"manage queue:ops-*", "send queue:ops-*", "manage topic:ops-*"}}
	f := newFixture(t, ops)
	e, o := f.e, f.e.as(ops.Secret)
	e.putQueue("app", `{"dead_letter_queue":"ops-dlq"}`)
	e.putQueue("ops-src", `{"dead_letter_queue":"ops-dlq"}`)
	e.putQueue("elsewhere", `{}`)
	f.deadLetter("app")
	f.deadLetter("ops-src")
	e.call("PUT", "/v1/topics/ops-events", `{}`, 201, nil)

	before := e.world()
	for _, c := range []struct {
		what               string
		method, path, body string
		missing            string
	}{
		{"a dead-letter queue outside its grants", "PUT", "/v1/queues/ops-new", `{"dead_letter_queue":"shared-dlq"}`, "queue:shared-dlq"},
		{"an existing queue's dead-letter queue", "PUT", "/v1/queues/ops-src", `{"dead_letter_queue":"elsewhere"}`, "queue:elsewhere"},
		{"a redrive back to queues it may not send to", "POST", "/v1/queues/ops-dlq/redrive", `{}`, "queue:app"},
		{"a redrive of one reason, still from app", "POST", "/v1/queues/ops-dlq/redrive", `{"reason":"consumer"}`, "queue:app"},
		{"a redrive back to app alone", "POST", "/v1/queues/ops-dlq/redrive", `{"from":"app"}`, "queue:app"},
		{"a redrive to a queue it may not send to", "POST", "/v1/queues/ops-dlq/redrive", `{"to":"elsewhere"}`, "queue:elsewhere"},
		{"a redrive to a queue that does not exist", "POST", "/v1/queues/ops-dlq/redrive", `{"to":"nowhere"}`, "queue:nowhere"},
		{"a subscription into a queue it may not send to", "PUT", "/v1/topics/ops-events/subscriptions/s", `{"queue":"app"}`, "queue:app"},
	} {
		expectError(t, o.do(c.method, c.path, c.body), api.CodeForbidden, `principal "ops"`, "lacks the send permission on "+c.missing)
	}
	if after := e.world(); !reflect.DeepEqual(before, after) {
		b, _ := json.MarshalIndent(before, "", " ")
		a, _ := json.MarshalIndent(after, "", " ")
		t.Fatalf("refused cross-resource requests changed the broker's state:\nbefore: %s\nafter:  %s", b, a)
	}

	// What its grants cover passes: its own default dead-letter queue, none, one of its
	// queues; a redrive of the dead letters from its own queue; a subscription into one.
	for _, body := range []string{`{"dead_letter_queue":"ops-new-dlq"}`, `{"dead_letter_queue":"none"}`, `{"dead_letter_queue":"ops-src"}`} {
		o.call("PUT", "/v1/queues/ops-new", body, map[bool]int{true: 201, false: 200}[body == `{"dead_letter_queue":"ops-new-dlq"}`], nil)
	}
	// A redrive whose filter selects none of app's dead letters moves none there.
	o.call("POST", "/v1/queues/ops-dlq/redrive", `{"reason":"max_deliveries"}`, 202, nil)
	var task api.RedriveTask
	o.call("POST", "/v1/queues/ops-dlq/redrive", `{"from":"ops-src"}`, 202, &task)
	e.quiet(t)
	if q := e.queue("ops-dlq"); q.Stats.Ready != 1 {
		t.Fatalf("the redrive from ops-src left %d in ops-dlq, want app's one", q.Stats.Ready)
	}
	o.call("PUT", "/v1/topics/ops-events/subscriptions/s", `{"queue":"ops-src"}`, 201, nil)

	// A redrive task is its dead-letter queue's: one on a queue the caller may not see
	// is refused, not hidden.
	var appTask api.RedriveTask
	e.putQueue("app2", `{}`)
	f.deadLetter("app2")
	e.call("POST", "/v1/queues/app2-dlq/redrive", `{}`, 202, &appTask)
	e.quiet(t)
	expectError(t, o.do("GET", "/v1/redrives/"+appTask.ID, nil), api.CodeForbidden, "lacks the browse permission on queue:app2-dlq")
	expectError(t, o.do("DELETE", "/v1/redrives/"+appTask.ID, nil), api.CodeForbidden, "lacks the manage permission on queue:app2-dlq")
	o.call("GET", "/v1/redrives/"+task.ID, nil, 200, nil)
	expectError(t, o.do("GET", "/v1/redrives/999999", nil), api.CodeTaskNotFound)
}

// Lists show only what the caller may browse, and refuse nothing.
func TestListsAreFiltered(t *testing.T) {
	t.Parallel()
	reader := okibatest.Principal{Name: "reader", Secret: "reader-secret-0123456789abc",
		Grants: []string{"browse queue:pm-s*", "manage queue:pm-rt", "browse topic:pm-t"}}
	f := newFixture(t, reader)
	f.redriveTask() // on pm-rt
	f.deadLetter("pm-rd")
	f.e.call("POST", "/v1/queues/pm-rd-dlq/redrive", `{}`, 202, nil)
	f.e.quiet(t)
	r := f.e.as(reader.Secret)

	var ql api.QueueList
	for _, path := range []string{"/v1/queues", "/v1/stats", "/v1/queues?prefix=pm-"} {
		r.call("GET", path, nil, 200, &ql)
		var names []string
		for _, q := range ql.Queues {
			names = append(names, q.Name)
		}
		if got := strings.Join(names, ","); got != "pm-rt,pm-settle,pm-settle-dlq,pm-subq,pm-subq-dlq" {
			t.Errorf("GET %s lists %s", path, got)
		}
	}
	var tl api.TopicList
	r.call("GET", "/v1/topics", nil, 200, &tl)
	if len(tl.Topics) != 1 || tl.Topics[0].Name != "pm-t" {
		t.Errorf("GET /v1/topics lists %+v", tl.Topics)
	}
	var rl api.RedriveList
	r.call("GET", "/v1/redrives", nil, 200, &rl)
	if len(rl.Tasks) != 1 || rl.Tasks[0].Source != "pm-rt" {
		t.Errorf("GET /v1/redrives lists %+v", rl.Tasks)
	}
	var all api.RedriveList
	f.e.call("GET", "/v1/redrives", nil, 200, &all)
	if len(all.Tasks) != 2 {
		t.Errorf("admin sees %d tasks, want 2", len(all.Tasks))
	}
	nobody := f.e.as(matrixGrant{name: "m-none"}.secret())
	nobody.call("GET", "/v1/queues", nil, 200, &ql)
	if len(ql.Queues) != 0 {
		t.Errorf("a principal without grants lists %d queues", len(ql.Queues))
	}
}

// docs/api.md's permission table lists every route of the table with what its rule
// needs, and an "also" exactly where the rule checks more, and no route that is not.
func TestDocsListEveryRoutesPermission(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Permissions\n")
	if !ok {
		t.Fatal(`docs/api.md has no "## Permissions" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string][2]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z]+ /[^`]*)` \\| ([^|]*) \\| ([^|]*) \\|$").FindAllStringSubmatch(section, -1) {
		rows[m[1]] = [2]string{m[2], strings.TrimSpace(m[3])}
	}
	routes := nativeapi.New(nil, nativeapi.Options{}).Routes()
	for _, rt := range routes {
		key := rt.Method + " " + rt.Pattern
		row, ok := rows[key]
		if !ok {
			t.Errorf("docs/api.md's permission table lacks `%s`", key)
			continue
		}
		delete(rows, key)
		switch rule := rt.Rule; {
		case rule.Open && !strings.Contains(row[0], "nothing"):
			t.Errorf("`%s` needs nothing, the docs say %q", key, row[0])
		case !rule.Open && !strings.Contains(row[0], "`"+rule.Permission.String()+"`"):
			t.Errorf("`%s` needs %s, the docs say %q", key, rule.Permission, row[0])
		case rule.Filtered && !strings.Contains(row[0], "lists"):
			t.Errorf("`%s` lists what the caller may %s, the docs say %q", key, rule.Permission, row[0])
		}
		if (rt.Rule.Also != "") != (row[1] != "") {
			t.Errorf("`%s`: the rule's also is %q, the docs' %q", key, rt.Rule.Also, row[1])
		}
	}
	for key := range rows {
		t.Errorf("docs/api.md's permission table lists `%s`, which is no route", key)
	}
}
