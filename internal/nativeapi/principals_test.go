package nativeapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/okibatest"
)

const adminToken = "admin-token-0123456789abcdef"

// as returns a client of e's server that sends token.
func (e *env) as(token string) *env {
	c := *e
	c.token = token
	return &c
}

// The principals' API: a secret shown once, usable at once, with the grants given;
// grants and revocations take effect on the next request; a rotation keeps the old
// secret as long as asked; a deletion ends the secrets at once. Declared principals are
// listed, marked, and cannot be changed here.
func TestPrincipalsAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{Token: adminToken, FakeClock: true, Principals: []okibatest.Principal{
		{Name: "declared-reader", Secret: "declared-reader-0123456789", Grants: []string{"browse queue:*"}},
	}})
	e.putQueue("orders-1", `{}`)
	e.putQueue("other", `{}`)

	var made api.IssuedSecret
	r := e.call("POST", "/v1/principals", `{"name":"worker","grants":["send queue:orders-*"]}`, 201, &made)
	if got := r.Header.Get("Location"); got != "/v1/principals/worker" {
		t.Errorf("Location %q", got)
	}
	if !strings.HasPrefix(made.Secret, "okiba_") || len(made.Secret) < 22 {
		t.Fatalf("secret %q", made.Secret)
	}
	p := made.Principal
	if p.Name != "worker" || strings.Join(p.Grants, ",") != "send queue:orders-*" || p.Declared ||
		len(p.Secrets) != 1 || p.Secrets[0].ID == "" || p.Secrets[0].ExpiresAt != nil || p.CreatedAt.IsZero() {
		t.Fatalf("created %+v", p)
	}
	w := e.as(made.Secret)
	w.call("POST", "/v1/queues/orders-1/messages", `{"body":"x"}`, 200, nil)
	expectError(t, w.do("POST", "/v1/queues/other/messages", `{"body":"x"}`), api.CodeForbidden, `principal "worker"`, "send", "queue:other")
	expectError(t, w.do("GET", "/v1/principals", nil), api.CodeForbidden, "admin")

	// No answer but the create's (and a rotation's) carries a secret.
	for _, path := range []string{"/v1/principals", "/v1/principals/worker"} {
		if r := e.call("GET", path, nil, 200, nil); strings.Contains(string(r.Body), made.Secret) || strings.Contains(string(r.Body), "declared-reader-0123456789") {
			t.Fatalf("GET %s shows a secret: %s", path, r.Body)
		}
	}
	var list api.PrincipalList
	e.call("GET", "/v1/principals", nil, 200, &list)
	var names []string
	for _, p := range list.Principals {
		names = append(names, p.Name)
		if p.Declared != (p.Name != "worker") {
			t.Errorf("%s: declared %v", p.Name, p.Declared)
		}
	}
	if strings.Join(names, ",") != "worker,admin,declared-reader" {
		t.Fatalf("listed %v, want worker then the declared admin and declared-reader", names)
	}
	var dr api.Principal
	e.call("GET", "/v1/principals/declared-reader", nil, 200, &dr)
	if !dr.Declared || strings.Join(dr.Grants, ",") != "browse queue:*" || len(dr.Secrets) != 0 {
		t.Fatalf("declared principal %+v", dr)
	}

	// Grants and revocations take effect on the next request.
	var after api.Principal
	e.call("POST", "/v1/principals/worker/grant", `{"grants":["send queue:other","receive queue:orders-*"]}`, 200, &after)
	if strings.Join(after.Grants, ",") != "send queue:orders-*,send queue:other,receive queue:orders-*" {
		t.Fatalf("after grant: %v", after.Grants)
	}
	w.call("POST", "/v1/queues/other/messages", `{"body":"x"}`, 200, nil)
	e.call("POST", "/v1/principals/worker/revoke", `{"grants":["send queue:other","browse *"]}`, 200, &after)
	if strings.Join(after.Grants, ",") != "send queue:orders-*,receive queue:orders-*" {
		t.Fatalf("after revoke: %v", after.Grants)
	}
	expectError(t, w.do("POST", "/v1/queues/other/messages", `{"body":"x"}`), api.CodeForbidden, "send", "queue:other")

	// A rotation: both secrets work until keep has passed.
	var rot api.IssuedSecret
	e.call("POST", "/v1/principals/worker/rotate", `{"keep":"1h"}`, 200, &rot)
	if rot.Secret == made.Secret || !strings.HasPrefix(rot.Secret, "okiba_") || len(rot.Principal.Secrets) != 2 ||
		rot.Principal.Secrets[0].ExpiresAt == nil || rot.Principal.Secrets[1].ExpiresAt != nil {
		t.Fatalf("rotated: %+v", rot)
	}
	w2 := e.as(rot.Secret)
	w.call("GET", "/v1/queues/orders-1/messages", nil, 403, nil) // the old secret still authenticates
	w2.call("GET", "/v1/queues/orders-1/messages", nil, 403, nil)
	e.srv.Clock.Advance(time.Hour + time.Second)
	expectError(t, w.do("POST", "/v1/queues/orders-1/messages", `{"body":"x"}`), api.CodeUnauthorized)
	w2.call("POST", "/v1/queues/orders-1/messages", `{"body":"x"}`, 200, nil)
	// The default keeps the old one a day; 0s ends it now.
	e.call("POST", "/v1/principals/worker/rotate", ``, 200, &rot)
	if ex := rot.Principal.Secrets[0].ExpiresAt; ex == nil || ex.Sub(rot.Principal.UpdatedAt) != api.DefaultRotateKeep {
		t.Fatalf("a rotation without keep: %+v", rot.Principal.Secrets)
	}
	w3 := e.as(rot.Secret)
	e.call("POST", "/v1/principals/worker/rotate", `{"keep":"0s"}`, 200, &rot)
	if len(rot.Principal.Secrets) != 1 {
		t.Fatalf("keep 0s left %+v", rot.Principal.Secrets)
	}
	expectError(t, w3.do("POST", "/v1/queues/orders-1/messages", `{"body":"x"}`), api.CodeUnauthorized)
	w4 := e.as(rot.Secret)
	w4.call("POST", "/v1/queues/orders-1/messages", `{"body":"x"}`, 200, nil)

	// What is wrong with a request is said in the access package's words.
	for _, c := range []struct{ method, path, body, mention string }{
		{"POST", "/v1/principals", `{"name":"-bad"}`, "starting with a letter or digit"},
		{"POST", "/v1/principals", `{"name":"x","grants":["write queue:a"]}`, `"write" is not a permission`},
		{"POST", "/v1/principals", `{"name":"x","grants":["send orders"]}`, "is not a pattern"},
		{"POST", "/v1/principals", `{"name":"x","grants":["admin queue:a"]}`, "whole server"},
		{"POST", "/v1/principals/worker/grant", `{"grants":[]}`, "grants is required"},
		{"POST", "/v1/principals/worker/rotate", `{"keep":"-1s"}`, "negative"},
		{"GET", "/v1/principals/bad%20name", ``, "principal name"},
	} {
		expectError(t, e.do(c.method, c.path, c.body), api.CodeInvalidRequest, c.mention)
	}
	expectError(t, e.do("POST", "/v1/principals/ghost/grant", `{"grants":["send queue:a"]}`), api.CodePrincipalNotFound, `"ghost"`)
	expectError(t, e.do("POST", "/v1/principals/ghost/rotate", ``), api.CodePrincipalNotFound, `"ghost"`)

	// Declared principals are the configuration's.
	expectError(t, e.do("POST", "/v1/principals", `{"name":"declared-reader"}`), api.CodePrincipalExists, "declared in the server's configuration")
	expectError(t, e.do("POST", "/v1/principals", `{"name":"admin"}`), api.CodePrincipalExists, "declared")
	for _, c := range [][3]string{
		{"DELETE", "/v1/principals/declared-reader", ``},
		{"POST", "/v1/principals/declared-reader/grant", `{"grants":["admin"]}`},
		{"POST", "/v1/principals/admin/revoke", `{"grants":["admin"]}`},
		{"POST", "/v1/principals/admin/rotate", `{}`},
	} {
		expectError(t, e.do(c[0], c[1], c[2]), api.CodeInvalidRequest, "declared in the server's configuration")
	}
	e.as("declared-reader-0123456789").call("GET", "/v1/queues/other", nil, 200, nil)

	// A deletion ends the principal's secrets at once.
	e.call("DELETE", "/v1/principals/worker", nil, 204, nil)
	expectError(t, w4.do("POST", "/v1/queues/orders-1/messages", `{"body":"x"}`), api.CodeUnauthorized)
	expectError(t, e.do("GET", "/v1/principals/worker", nil), api.CodePrincipalNotFound)
	expectError(t, e.do("DELETE", "/v1/principals/worker", nil), api.CodePrincipalNotFound)
}

// A stream runs each frame as its principal is at that frame: a grant or a revocation
// counts from the next one, and a rotation that keeps nothing, or a deletion, ends what
// the stream may do, as for plain requests.
func TestStreamFollowsItsPrincipal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, okibatest.Options{Token: adminToken})
	e.putQueue("q", `{}`)
	var made api.IssuedSecret
	e.call("POST", "/v1/principals", `{"name":"streamer","grants":["browse queue:q"]}`, 201, &made)
	s := e.as(made.Secret).openStream()
	if f := s.call(1, "GET", "/v1/queues/q", ""); f.Status != 200 {
		t.Fatalf("browse: HTTP %d %s", f.Status, f.Body)
	}
	if f := s.call(2, "POST", "/v1/queues/q/messages", `{"body":"x"}`); f.Status != 403 {
		t.Fatalf("a send before the grant: HTTP %d %s", f.Status, f.Body)
	}
	e.call("POST", "/v1/principals/streamer/grant", `{"grants":["send queue:q"]}`, 200, nil)
	if f := s.call(3, "POST", "/v1/queues/q/messages", `{"body":"x"}`); f.Status != 200 {
		t.Fatalf("a send after the grant: HTTP %d %s", f.Status, f.Body)
	}
	e.call("POST", "/v1/principals/streamer/revoke", `{"grants":["send queue:q"]}`, 200, nil)
	if f := s.call(4, "POST", "/v1/queues/q/messages", `{"body":"x"}`); f.Status != 403 {
		t.Fatalf("a send after the revocation: HTTP %d %s", f.Status, f.Body)
	}
	e.call("POST", "/v1/principals/streamer/rotate", `{"keep":"0s"}`, 200, nil)
	f := s.call(5, "GET", "/v1/queues/q", "")
	if er := frameError(t, f); f.Status != 401 || er == nil || er.Code != api.CodeUnauthorized || !strings.Contains(er.Message, "no longer valid") {
		t.Fatalf("a frame after a rotation that kept nothing: HTTP %d %s", f.Status, f.Body)
	}
	if q := e.queue("q"); q.Stats.Ready != 1 {
		t.Fatalf("%d messages, want the one send that was allowed", q.Stats.Ready)
	}
}
