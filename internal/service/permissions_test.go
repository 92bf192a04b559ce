package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/service"
)

// as returns ctx carrying a principal with the grants given as text.
func as(t *testing.T, name string, grants ...string) context.Context {
	t.Helper()
	p := auth.Principal{Name: name, Method: auth.Token}
	for _, g := range grants {
		gr, err := access.ParseGrant(g)
		if err != nil {
			t.Fatal(err)
		}
		p.Grants = append(p.Grants, gr)
	}
	return auth.With(context.Background(), p)
}

func wantDenied(t *testing.T, what string, e *api.Error, perm access.Permission, res access.Resource) {
	t.Helper()
	if e == nil || e.Code != api.CodeForbidden {
		t.Fatalf("%s: got %v, want forbidden", what, e)
	}
	if want := "lacks the " + perm.String() + " permission on " + res.String(); !strings.Contains(e.Message, want) {
		t.Fatalf("%s: %q does not say %q", what, e.Message, want)
	}
}

// The checks no route can make — on the resources a request's body names, and on a
// redrive task's queue — are the service's, so that every caller of it (the native API,
// the console) gets them; each refuses before anything changes.
func TestServiceChecksWhatTheRequestNames(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(broker.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	svc := service.New(b, service.Options{})
	inproc := context.Background() // no principal: a call from inside the process
	for _, q := range []string{"app", "ops-q", "ops-other"} {
		if _, _, e := svc.PutQueue(inproc, q, api.QueueConfig{}); e != nil {
			t.Fatal(e)
		}
	}
	body := "poison"
	if _, e := svc.Send(inproc, "app", service.From{}, []api.SendMessage{{Body: &body}}); e != nil {
		t.Fatal(e)
	}
	got, e := svc.Receive(inproc, "app", api.ReceiveRequest{Wait: api.Ptr(0)})
	if e != nil {
		t.Fatal(e)
	}
	if _, e := svc.DeadLetter(inproc, "app", api.ReceiptsRequest{Receipts: []string{got.JSON().Messages[0].Receipt}}); e != nil {
		t.Fatal(e)
	}
	ops := as(t, "ops", "manage queue:*", "send queue:ops-*", "manage topic:*")

	shared := "shared-dlq"
	_, _, e = svc.PutQueue(ops, "ops-new", api.QueueConfig{DeadLetterQueue: &shared})
	wantDenied(t, "a dead-letter queue it may not send to", e, access.Send, access.QueueNamed("shared-dlq"))
	if _, e := svc.Queue(inproc, "ops-new"); e == nil || e.Code != api.CodeQueueNotFound {
		t.Fatalf("the refused queue exists: %v", e)
	}
	for _, dlq := range []string{"ops-new-dlq", "none", "ops-other"} {
		if _, _, e := svc.PutQueue(ops, "ops-new", api.QueueConfig{DeadLetterQueue: &dlq}); e != nil {
			t.Fatalf("dead_letter_queue %s: %v", dlq, e)
		}
	}

	_, e = svc.Redrive(ops, "app-dlq", api.RedriveRequest{})
	wantDenied(t, "a redrive back to a queue it may not send to", e, access.Send, access.QueueNamed("app"))
	_, e = svc.Redrive(ops, "app-dlq", api.RedriveRequest{To: "app"})
	wantDenied(t, "a redrive to a queue it may not send to", e, access.Send, access.QueueNamed("app"))
	if ts := svc.Redrives(inproc).Tasks; len(ts) != 0 {
		t.Fatalf("refused redrives started tasks: %+v", ts)
	}
	task, e := svc.Redrive(ops, "app-dlq", api.RedriveRequest{To: "ops-q"})
	if e != nil {
		t.Fatalf("a redrive to a queue it may send to: %v", e)
	}

	_, e = svc.RedriveTask(as(t, "other", "browse queue:ops-*"), task.ID)
	wantDenied(t, "a task on a queue it may not browse", e, access.Browse, access.QueueNamed("app-dlq"))
	_, e = svc.CancelRedrive(as(t, "other", "browse queue:*"), task.ID)
	wantDenied(t, "cancelling a task on a queue it may only browse", e, access.Manage, access.QueueNamed("app-dlq"))
	if ts := svc.Redrives(as(t, "other", "browse queue:ops-*")).Tasks; len(ts) != 0 {
		t.Fatalf("a principal that may not browse app-dlq lists its task: %+v", ts)
	}

	if _, _, e := svc.PutTopic(inproc, "events", api.TopicConfig{}); e != nil {
		t.Fatal(e)
	}
	_, _, e = svc.Subscribe(ops, "events", "s", api.SubscriptionRequest{Queue: "app"})
	wantDenied(t, "a subscription into a queue it may not send to", e, access.Send, access.QueueNamed("app"))
	if subs, _ := svc.Subscriptions(inproc, "events"); len(subs) != 0 {
		t.Fatalf("the refused subscription exists: %+v", subs)
	}
	if _, _, e := svc.Subscribe(ops, "events", "s", api.SubscriptionRequest{Queue: "ops-q"}); e != nil {
		t.Fatalf("a subscription into a queue it may send to: %v", e)
	}

	var names []string
	for _, q := range svc.Queues(as(t, "ops-reader", "browse queue:ops-*"), "") {
		names = append(names, q.Name)
	}
	if strings.Join(names, ",") != "ops-new,ops-new-dlq,ops-other,ops-other-dlq,ops-q,ops-q-dlq" {
		t.Fatalf("Queues for browse queue:ops-*: %v", names)
	}
	if ts := svc.Topics(as(t, "ops-reader", "browse queue:*"), ""); len(ts) != 0 {
		t.Fatalf("Topics for a principal without topics: %+v", ts)
	}
	if n := len(svc.Queues(inproc, "")); n != len(b.Queues("")) {
		t.Fatalf("an in-process call sees %d of %d queues", n, len(b.Queues("")))
	}
}

// A queue's description names its dead-letter sources only as far as the caller may
// browse them.
func TestDeadLetterSourcesAreFiltered(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(broker.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	svc := service.New(b, service.Options{})
	dlq := "shared-dlq"
	for _, name := range []string{"secret-src", "open-src"} {
		if _, _, e := svc.PutQueue(context.Background(), name, api.QueueConfig{DeadLetterQueue: &dlq}); e != nil {
			t.Fatal(e)
		}
	}
	g, _ := access.ParseGrant("browse queue:open-*")
	g2, _ := access.ParseGrant("browse queue:shared-*")
	ctx := auth.With(context.Background(), auth.Principal{Name: "v", Grants: access.Grants{g, g2}})
	q, e := svc.Queue(ctx, "shared-dlq")
	if e != nil {
		t.Fatal(e)
	}
	if len(q.DeadLetterSources) != 1 || q.DeadLetterSources[0] != "open-src" {
		t.Fatalf("dead-letter sources seen: %v", q.DeadLetterSources)
	}
	all, _ := svc.Queue(context.Background(), "shared-dlq")
	if len(all.DeadLetterSources) != 2 {
		t.Fatalf("from inside the process: %v", all.DeadLetterSources)
	}
}
