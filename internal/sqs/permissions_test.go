package sqs_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/sqs"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
	"github.com/okiba/okiba/queue"
)

const adminToken = "admin-t0ken-admin-t0ken-admin"

func secretOf(principal string) string { return principal + "-s3cret-s3cret-s3cret" }

// newAuthEnv is newEnv on a server with authentication, whose client e.c signs as
// admin; client(name) signs as one of the principals declared.
func newAuthEnv(t *testing.T, opts okibatest.Options) *env {
	t.Helper()
	opts.Token = adminToken
	e := newEnv(t, opts)
	e.c = e.client("admin", adminToken, 1)
	return e
}

func (e *env) as(principal string) *awssqs.Client {
	return e.client(principal, secretOf(principal), 1)
}

func declare(name string, grants ...string) okibatest.Principal {
	return okibatest.Principal{Name: name, Secret: secretOf(name), Grants: grants}
}

// wantDenied checks that err is SQS's AccessDenied, 403, naming the permission and
// the queue that were missing.
func wantDenied(t *testing.T, err error, perm access.Permission, queueName string) {
	t.Helper()
	var ae smithy.APIError
	var re *smithyhttp.ResponseError
	want := perm.String() + " permission on " + access.QueueNamed(queueName).String()
	switch {
	case !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied":
		t.Errorf("got %v, want AccessDenied (%s)", err, want)
	case !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusForbidden:
		t.Errorf("AccessDenied with status %d, want 403", re.HTTPStatusCode())
	case !strings.Contains(ae.ErrorMessage(), want):
		t.Errorf("AccessDenied says %q, not that the %s is missing", ae.ErrorMessage(), want)
	}
}

// state is what a refused request must leave as it was: the queues whose names start
// with a prefix (configuration, times, counts and counters) and the move tasks out of
// them.
type state struct {
	Queues []queue.QueueInfo
	Tasks  []queue.Task
}

func stateOf(b *broker.Broker, prefix string) state {
	var s state
	for _, qi := range b.Queues(prefix) {
		s.Queues = append(s.Queues, qi.QueueInfo)
	}
	for _, t := range b.Tasks() {
		if strings.HasPrefix(t.SourceName, prefix) {
			s.Tasks = append(s.Tasks, t)
		}
	}
	return s
}

// fixture is what one cell of the matrix acts on; every name in it starts with prefix.
type fixture struct {
	prefix     string
	queue, url string // tagged k=v, with one message ready
	receipt    string // of a second message of queue, in flight
	dlq        string // a dead-letter queue (of source)
	dlqURL     string
	dst        string // a queue to move messages to
	task       string // the handle of a running move task out of dlq into dst
}

func arn(name string) string { return "arn:aws:sqs:us-east-1:000000000000:" + name }

// urlOf is the URL of queue name on e's server.
func (e *env) urlOf(name string) string { return e.srv.URL + "/000000000000/" + name }

type setup int

const (
	nothing     setup = iota
	aQueue            // queue, url
	aReceipt          // queue, url, receipt
	aDLQ              // dlq, dlqURL, dst
	aMovingTask       // dlq, dlqURL, dst, task
)

// prepare makes a cell's fixture as admin. The broker runs on a fake clock, so that
// nothing changes on its own while the cell is checked: leases do not end, and the move
// task (one message a second) stays at its first message.
func (e *env) prepare(t *testing.T, s setup, prefix string) fixture {
	t.Helper()
	ctx := ctxT(t)
	fx := fixture{prefix: prefix, queue: prefix + "q", dlq: prefix + "dlq", dst: prefix + "dst"}
	switch s {
	case aQueue, aReceipt:
		out, err := e.c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: &fx.queue, Tags: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		fx.url = *out.QueueUrl
		e.send(t, fx.url, "ready")
		if s == aReceipt {
			e.send(t, fx.url, "leased")
			fx.receipt = *e.receive(t, fx.url, 1, 300)[0].ReceiptHandle
		}
	case aDLQ, aMovingTask:
		fx.dlqURL = e.createQueue(t, fx.dlq, nil)
		e.createQueue(t, prefix+"src", map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + arn(fx.dlq) + `","maxReceiveCount":3}`})
		e.createQueue(t, fx.dst, nil)
		if s == aMovingTask {
			for i := range 3 {
				e.send(t, fx.dlqURL, strconv.Itoa(i))
			}
			out, err := e.c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{
				SourceArn: aws.String(arn(fx.dlq)), DestinationArn: aws.String(arn(fx.dst)), MaxNumberOfMessagesPerSecond: aws.Int32(1)})
			if err != nil {
				t.Fatal(err)
			}
			fx.task = *out.TaskHandle
			testkit.Eventually(t, 10*time.Second, func() bool {
				ts := stateOf(e.srv.Broker, prefix).Tasks
				return len(ts) == 1 && ts[0].Moved == 1
			}, "the move task out of %s to move its first message", fx.dlq)
		}
	}
	return fx
}

// need is one permission a request needs.
type need struct {
	perm  access.Permission
	queue string
}

// matrixCase is the request the matrix makes for one action.
type matrixCase struct {
	setup setup
	// named is the queue the action's rule applies to; default fx.queue.
	named func(fx fixture) string
	// also are the permissions the request needs besides its rule's (the rule's Also).
	also func(fx fixture) []need
	// code is the answer when allowed: "" for a success.
	code string
	call func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error)
}

func ignore[T any](_ T, err error) (any, error) { return nil, err }

// matrixCases has one request for every action of the front's table.
var matrixCases = map[string]matrixCase{
	"CreateQueue": {setup: nothing, named: func(fx fixture) string { return fx.prefix + "new" },
		call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
			return ignore(c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(fx.prefix + "new")}))
		}},
	"GetQueueUrl": {setup: aQueue, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: &fx.queue}))
	}},
	"ListQueues": {setup: aQueue, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		out, err := c.ListQueues(ctx, &awssqs.ListQueuesInput{QueueNamePrefix: &fx.prefix})
		if err != nil {
			return nil, err
		}
		return out.QueueUrls, nil
	}},
	"DeleteQueue": {setup: aQueue, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: &fx.url}))
	}},
	"GetQueueAttributes": {setup: aQueue, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: &fx.url, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}}))
	}},
	"SetQueueAttributes": {setup: aQueue, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: &fx.url, Attributes: map[string]string{"VisibilityTimeout": "60"}}))
	}},
	"PurgeQueue": {setup: aQueue, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: &fx.url}))
	}},
	"SendMessage": {setup: aQueue, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: &fx.url, MessageBody: aws.String("m")}))
	}},
	"SendMessageBatch": {setup: aQueue, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: &fx.url,
			Entries: []types.SendMessageBatchRequestEntry{{Id: aws.String("a"), MessageBody: aws.String("m")}}}))
	}},
	"ReceiveMessage": {setup: aQueue, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: &fx.url}))
	}},
	"DeleteMessage": {setup: aReceipt, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: &fx.url, ReceiptHandle: &fx.receipt}))
	}},
	"DeleteMessageBatch": {setup: aReceipt, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: &fx.url,
			Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("a"), ReceiptHandle: &fx.receipt}}}))
	}},
	"ChangeMessageVisibility": {setup: aReceipt, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: &fx.url, ReceiptHandle: &fx.receipt, VisibilityTimeout: 60}))
	}},
	"ChangeMessageVisibilityBatch": {setup: aReceipt, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: &fx.url,
			Entries: []types.ChangeMessageVisibilityBatchRequestEntry{{Id: aws.String("a"), ReceiptHandle: &fx.receipt, VisibilityTimeout: 60}}}))
	}},
	"TagQueue": {setup: aQueue, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.TagQueue(ctx, &awssqs.TagQueueInput{QueueUrl: &fx.url, Tags: map[string]string{"k2": "v2"}}))
	}},
	"UntagQueue": {setup: aQueue, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.UntagQueue(ctx, &awssqs.UntagQueueInput{QueueUrl: &fx.url, TagKeys: []string{"k"}}))
	}},
	"ListQueueTags": {setup: aQueue, call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.ListQueueTags(ctx, &awssqs.ListQueueTagsInput{QueueUrl: &fx.url}))
	}},
	"ListDeadLetterSourceQueues": {setup: aDLQ, named: func(fx fixture) string { return fx.dlq },
		call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
			return ignore(c.ListDeadLetterSourceQueues(ctx, &awssqs.ListDeadLetterSourceQueuesInput{QueueUrl: &fx.dlqURL}))
		}},
	"StartMessageMoveTask": {setup: aDLQ, named: func(fx fixture) string { return fx.dlq },
		also: func(fx fixture) []need { return []need{{access.Send, fx.dst}} },
		call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
			return ignore(c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: aws.String(arn(fx.dlq)), DestinationArn: aws.String(arn(fx.dst))}))
		}},
	"ListMessageMoveTasks": {setup: aDLQ, named: func(fx fixture) string { return fx.dlq },
		call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
			return ignore(c.ListMessageMoveTasks(ctx, &awssqs.ListMessageMoveTasksInput{SourceArn: aws.String(arn(fx.dlq))}))
		}},
	"CancelMessageMoveTask": {setup: aMovingTask, named: func(fx fixture) string { return fx.dlq },
		call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
			return ignore(c.CancelMessageMoveTask(ctx, &awssqs.CancelMessageMoveTaskInput{TaskHandle: &fx.task}))
		}},
	"AddPermission": {setup: aQueue, code: "AWS.SimpleQueueService.UnsupportedOperation", call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.AddPermission(ctx, &awssqs.AddPermissionInput{QueueUrl: &fx.url, Label: aws.String("l"),
			AWSAccountIds: []string{"111122223333"}, Actions: []string{"SendMessage"}}))
	}},
	"RemovePermission": {setup: aQueue, code: "AWS.SimpleQueueService.UnsupportedOperation", call: func(ctx context.Context, c *awssqs.Client, fx fixture) (any, error) {
		return ignore(c.RemovePermission(ctx, &awssqs.RemovePermissionInput{QueueUrl: &fx.url, Label: aws.String("l")}))
	}},
}

// matrixGrants are the single grants the matrix tries every action with.
var matrixGrants = []struct{ principal, grant string }{
	{"p-none", ""},
	{"p-send", "send queue:*"},
	{"p-receive", "receive queue:*"},
	{"p-browse", "browse queue:*"},
	{"p-manage", "manage queue:*"},
	{"p-admin", "admin"},
	{"p-metrics", "metrics"},
}

// TestPermissionMatrix makes every action of the front's table (sqs.Actions) as a
// principal holding each single grant in turn, through the real server and the real
// SDK, and expects AccessDenied exactly when the grants (access.Grants.Allows) lack what
// the action's rule requires, or what its Also requires on the other queues the request
// names, and, then, no change to anything. An action in the table without a request
// here fails the test.
func TestPermissionMatrix(t *testing.T) {
	t.Parallel()
	opts := okibatest.Options{FakeClock: true}
	grants := map[string]access.Grants{}
	for _, g := range matrixGrants {
		p := declare(g.principal)
		if g.grant != "" {
			p.Grants = []string{g.grant}
			gr, err := access.ParseGrant(g.grant)
			if err != nil {
				t.Fatal(err)
			}
			grants[g.principal] = access.Grants{gr}
		}
		opts.Principals = append(opts.Principals, p)
	}
	e := newAuthEnv(t, opts)
	ctx := ctxT(t)
	clients := map[string]*awssqs.Client{}
	for _, g := range matrixGrants {
		clients[g.principal] = e.as(g.principal)
	}
	inTable := map[string]bool{}
	cell := 0
	for _, a := range sqs.Actions() {
		inTable[a.Name] = true
		c, ok := matrixCases[a.Name]
		if !ok {
			t.Errorf("action %s is in the front's table but the matrix makes no request for it: add one to matrixCases", a.Name)
			continue
		}
		for _, g := range matrixGrants {
			cell++
			fx := e.prepare(t, c.setup, fmt.Sprintf("m%d-", cell))
			named := fx.queue
			if c.named != nil {
				named = c.named(fx)
			}
			needs := []need{{a.Rule.Permission, named}}
			if c.also != nil {
				needs = append(needs, c.also(fx)...)
			}
			held := grants[g.principal]
			var missing *need
			for i, n := range needs {
				if !a.Rule.Filtered && !held.Allows(n.perm, access.QueueNamed(n.queue)) {
					missing = &needs[i]
					break
				}
			}
			before := stateOf(e.srv.Broker, fx.prefix)
			out, err := c.call(ctx, clients[g.principal], fx)
			where := fmt.Sprintf("%s as %s (%q)", a.Name, g.principal, g.grant)
			switch {
			case missing != nil:
				t.Run(where, func(t *testing.T) { wantDenied(t, err, missing.perm, missing.queue) })
				if after := stateOf(e.srv.Broker, fx.prefix); !reflect.DeepEqual(before, after) {
					t.Errorf("%s: refused, yet the state changed:\nbefore %+v\nafter  %+v", where, before, after)
				}
			case c.code != "":
				var ae smithy.APIError
				if !errors.As(err, &ae) || ae.ErrorCode() != c.code {
					t.Errorf("%s: got %v, want %s", where, err, c.code)
				}
			case err != nil:
				t.Errorf("%s: %v", where, err)
			case a.Rule.Filtered:
				// A listing refuses nothing and shows what may be browsed.
				mayBrowse := held.Allows(access.Browse, access.QueueNamed(fx.queue))
				if urls := out.([]string); (len(urls) == 1) != mayBrowse {
					t.Errorf("%s: lists %v; may browse %s: %v", where, urls, fx.queue, mayBrowse)
				}
			}
		}
	}
	for name := range matrixCases {
		if !inTable[name] {
			t.Errorf("the matrix makes a request for %s, which the front's table does not list", name)
		}
	}
}

// A request that names no queue where its action's rule looks (the member missing, not
// a string, or naming no valid queue) passes the front's check, as nothing can be
// checked, and its handler refuses it: it changes nothing, whoever sends it.
func TestRequestsNamingNoQueueAreRefused(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, okibatest.Options{FakeClock: true, Principals: []okibatest.Principal{declare("nobody")}})
	e.prepare(t, aQueue, "n-")
	bodies := []string{
		`{}`,
		`{"QueueUrl":"http://localhost/a/b/c/n-q","QueueName":"","SourceArn":"arn:aws:sqs:us-east-1:0:n q","TaskHandle":"%%%"}`,
		`{"QueueUrl":7,"QueueName":7,"SourceArn":7,"TaskHandle":7}`,
		`{"QueueUrl":"n-q"`,
	}
	before := stateOf(e.srv.Broker, "")
	for _, a := range sqs.Actions() {
		if a.Rule.Filtered {
			continue
		}
		for _, body := range bodies {
			for _, who := range []string{"nobody", "admin"} {
				secret := secretOf(who)
				if who == "admin" {
					secret = adminToken
				}
				status, code := rawSQS(t, e.srv.URL, who, secret, body, map[string]string{
					"X-Amz-Target": "AmazonSQS." + a.Name, "Content-Type": "application/x-amz-json-1.0"}, nil)
				if status == http.StatusOK || code == "" {
					t.Errorf("%s %s as %s: %d %q, want a refusal", a.Name, body, who, status, code)
				}
			}
		}
	}
	if after := stateOf(e.srv.Broker, ""); !reflect.DeepEqual(before, after) {
		t.Errorf("refused requests changed the state:\nbefore %+v\nafter  %+v", before, after)
	}
}

func queueNames(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = u[strings.LastIndexByte(u, '/')+1:]
	}
	return out
}

// ListQueues and ListDeadLetterSourceQueues show only the queues the caller may browse,
// in full pages.
func TestListsShowWhatMayBeBrowsed(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, okibatest.Options{Principals: []okibatest.Principal{
		declare("reader", "browse queue:orders-*", "manage queue:shared-dlq", "send queue:billing")}})
	ctx := ctxT(t)
	dlq := e.createQueue(t, "shared-dlq", nil)
	redrive := map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + arn("shared-dlq") + `","maxReceiveCount":3}`}
	for _, n := range []string{"orders-a", "billing", "orders-b", "orders-c"} {
		e.createQueue(t, n, redrive)
	}
	r := e.as("reader")
	var got []string
	var token *string
	for pages := 0; ; pages++ {
		out, err := r.ListQueues(ctx, &awssqs.ListQueuesInput{MaxResults: aws.Int32(2), NextToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if out.NextToken != nil && len(out.QueueUrls) != 2 {
			t.Errorf("page %d holds %d queues, want 2 (the filter runs before paging)", pages, len(out.QueueUrls))
		}
		got = append(got, queueNames(out.QueueUrls)...)
		if token = out.NextToken; token == nil {
			break
		}
	}
	if want := []string{"orders-a", "orders-b", "orders-c", "shared-dlq"}; !slices.Equal(got, want) {
		t.Errorf("ListQueues as reader: %v, want %v (send on billing is no browse)", got, want)
	}
	out, err := r.ListDeadLetterSourceQueues(ctx, &awssqs.ListDeadLetterSourceQueuesInput{QueueUrl: &dlq})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := queueNames(out.QueueUrls), []string{"orders-a", "orders-b", "orders-c"}; !slices.Equal(got, want) {
		t.Errorf("ListDeadLetterSourceQueues as reader: %v, want %v", got, want)
	}
	all, err := e.c.ListQueues(ctx, &awssqs.ListQueuesInput{})
	if err != nil || len(all.QueueUrls) != 5 {
		t.Errorf("ListQueues as admin: %v %v", all, err)
	}
}

// A RedrivePolicy makes its queue send dead letters to the queue it names: setting one
// needs send there, unless it is the queue's own <name>-dlq, which manage on the queue
// covers. The refusal comes before the dead-letter queue is looked up.
func TestRedrivePolicyNeedsSendOnItsQueue(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, okibatest.Options{Principals: []okibatest.Principal{
		declare("ops", "manage queue:orders*"),
		declare("ops-plus", "manage queue:orders*", "send queue:graveyard"),
	}})
	ctx := ctxT(t)
	e.createQueue(t, "graveyard", nil)
	e.createQueue(t, "orders-x-dlq", nil)
	policy := func(dlq string) map[string]string {
		return map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + arn(dlq) + `","maxReceiveCount":3}`}
	}
	create := func(c *awssqs.Client, name, dlq string) error {
		_, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: &name, Attributes: policy(dlq)})
		return err
	}
	ops, plus := e.as("ops"), e.as("ops-plus")
	wantDenied(t, create(ops, "orders-y", "graveyard"), access.Send, "graveyard")
	wantDenied(t, create(ops, "orders-y", "nowhere"), access.Send, "nowhere") // not "does not exist"
	if _, err := e.srv.Broker.QueueConfig("orders-y"); err == nil {
		t.Fatal("a refused CreateQueue created its queue")
	}
	if err := create(ops, "orders-x", "orders-x-dlq"); err != nil {
		t.Fatalf("a queue with its own <name>-dlq, as a manager of it: %v", err)
	}
	url := e.urlOf("orders-x")
	_, err := ops.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: &url, Attributes: policy("graveyard")})
	wantDenied(t, err, access.Send, "graveyard")
	if qi, _ := e.srv.Broker.QueueConfig("orders-x"); qi.Config.DeadLetterQueue != "orders-x-dlq" {
		t.Fatalf("a refused SetQueueAttributes changed the dead-letter queue to %s", qi.Config.DeadLetterQueue)
	}
	if err := create(plus, "orders-y", "graveyard"); err != nil {
		t.Fatalf("with send on the dead-letter queue: %v", err)
	}
	if _, err := plus.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: &url, Attributes: policy("graveyard")}); err != nil {
		t.Fatalf("with send on the dead-letter queue: %v", err)
	}
}

// A move task needs manage on its dead-letter queue and send where it moves messages:
// the DestinationArn, or, without one, every queue the messages go back to — the queues
// that name the dead-letter queue, and the origins the messages record. Cancelling needs
// manage on the task's own dead-letter queue, whatever its handle claims; listing,
// browse.
func TestMoveTasksNeedBothSides(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, okibatest.Options{FakeClock: true, Principals: []okibatest.Principal{
		declare("mover", "manage queue:jobs-dlq", "send queue:jobs"),
		declare("half", "manage queue:jobs-dlq"),
		declare("watcher", "browse queue:jobs-dlq"),
	}})
	ctx := ctxT(t)
	b := e.srv.Broker
	e.createQueue(t, "jobs-dlq", nil)
	e.createQueue(t, "archive", nil)
	e.createQueue(t, "secret-dlq", nil)
	redrive := func(dlq string) map[string]string {
		return map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + arn(dlq) + `","maxReceiveCount":3}`}
	}
	e.createQueue(t, "jobs", redrive("jobs-dlq"))
	e.createQueue(t, "secret", redrive("secret-dlq"))
	start := func(c *awssqs.Client, dlq, dst string) (string, error) {
		in := &awssqs.StartMessageMoveTaskInput{SourceArn: aws.String(arn(dlq))}
		if dst != "" {
			in.DestinationArn = aws.String(arn(dst))
		}
		out, err := c.StartMessageMoveTask(ctx, in)
		if err != nil {
			return "", err
		}
		return *out.TaskHandle, nil
	}
	mover, half, watcher := e.as("mover"), e.as("half"), e.as("watcher")
	_, err := start(mover, "jobs-dlq", "archive")
	wantDenied(t, err, access.Send, "archive")
	_, err = start(mover, "jobs-dlq", "nowhere")
	wantDenied(t, err, access.Send, "nowhere") // not "does not exist"
	_, err = start(half, "jobs-dlq", "")
	wantDenied(t, err, access.Send, "jobs")
	if n := len(b.Tasks()); n != 0 {
		t.Fatalf("refused move tasks started %d tasks", n)
	}
	if _, err := start(mover, "jobs-dlq", ""); err != nil {
		t.Fatalf("back to the sources, with send on them: %v", err)
	}

	// A message dead-lettered from a queue that has since stopped naming jobs-dlq goes
	// back there too: the messages say so.
	legacy := e.createQueue(t, "legacy", redrive("jobs-dlq"))
	e.send(t, legacy, "old")
	ms, err := b.Receive(ctx, "legacy", broker.ReceiveOptions{Max: 1, Visibility: time.Minute})
	if err != nil || len(ms) != 1 {
		t.Fatalf("receive: %v %v", ms, err)
	}
	if errs, err := b.DeadLetter(ctx, "legacy", []string{ms[0].Receipt}, "test", ""); err != nil || errs[0] != nil {
		t.Fatalf("dead-letter: %v %v", errs, err)
	}
	if _, err := e.c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: &legacy, Attributes: map[string]string{"RedrivePolicy": ""}}); err != nil {
		t.Fatal(err)
	}
	_, err = start(mover, "jobs-dlq", "")
	wantDenied(t, err, access.Send, "legacy")

	// Cancel and list, on a task that stays running (one message a second, on a clock
	// that stands still).
	for i := range 3 {
		e.send(t, e.urlOf("secret-dlq"), strconv.Itoa(i))
	}
	out, err := e.c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: aws.String(arn("secret-dlq")),
		DestinationArn: aws.String(arn("archive")), MaxNumberOfMessagesPerSecond: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	var running queue.Task
	for _, tk := range b.Tasks() {
		if tk.SourceName == "secret-dlq" {
			running = tk
		}
	}
	if running.State != queue.TaskRunning {
		t.Fatalf("the task of %s is %v, not running", *out.TaskHandle, running.State)
	}
	forged := base64.RawURLEncoding.EncodeToString([]byte("okiba-redrive:" + strconv.FormatUint(running.ID, 10) + ":jobs-dlq"))
	_, err = mover.CancelMessageMoveTask(ctx, &awssqs.CancelMessageMoveTaskInput{TaskHandle: &forged})
	wantDenied(t, err, access.Manage, "secret-dlq")
	if tk, _ := b.Task(running.ID); tk.State != queue.TaskRunning {
		t.Fatalf("a refused cancel ended the task: %v", tk.State)
	}
	if _, err := watcher.ListMessageMoveTasks(ctx, &awssqs.ListMessageMoveTasksInput{SourceArn: aws.String(arn("jobs-dlq"))}); err != nil {
		t.Errorf("listing the tasks of a queue one may browse: %v", err)
	}
	_, err = watcher.ListMessageMoveTasks(ctx, &awssqs.ListMessageMoveTasksInput{SourceArn: aws.String(arn("secret-dlq"))})
	wantDenied(t, err, access.Browse, "secret-dlq")
}

// A principal of the log (not the configuration) signs with its secret; after a
// rotation both the old and the new secret work for keep, and then only the new one.
// Its grants hold whichever secret it signs with.
func TestRotatedSecret(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, okibatest.Options{FakeClock: true})
	ctx := ctxT(t)
	b := e.srv.Broker
	// The node seals with this key (internal/node); a keyring of no principals seals
	// the same way.
	keys, err := auth.NewKeyring(b.DeriveKey("principal secrets"), nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	url := e.createQueue(t, "spin", nil)
	grant, _ := access.ParseGrant("send queue:spin")
	old, next := auth.NewSecret(), auth.NewSecret()
	if _, err := b.CreatePrincipal(ctx, "rotor", []access.Grant{grant}, keys.Seal("rotor", old)); err != nil {
		t.Fatal(err)
	}
	send := func(secret string) error {
		_, err := e.client("rotor", secret, 1).SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x")})
		return err
	}
	if err := send(old); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	_, err = e.client("rotor", old, 1).PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: &url})
	wantDenied(t, err, access.Manage, "spin")
	const keep = time.Hour
	if _, err := b.RotatePrincipal(ctx, "rotor", keys.Seal("rotor", next), keep); err != nil {
		t.Fatal(err)
	}
	e.srv.Clock.Advance(keep - time.Second)
	for _, s := range []string{old, next} {
		if err := send(s); err != nil {
			t.Fatalf("during the rotation: %v", err)
		}
	}
	e.srv.Clock.Advance(time.Second)
	wantAPIError(t, send(old), "SignatureDoesNotMatch")
	if err := send(next); err != nil {
		t.Fatalf("after the rotation, the new secret: %v", err)
	}
	if err := b.DeletePrincipal(ctx, "rotor"); err != nil {
		t.Fatal(err)
	}
	wantAPIError(t, send(next), "InvalidClientTokenId")
}

// docs/sqs.md's table of permissions is the front's table.
func TestDocsListEveryActionsPermission(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "sqs.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for line := range strings.SplitSeq(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) == 6 { // | action | permission | on | also |
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			rows[cells[1]] = cells[2:4]
		}
	}
	for _, a := range sqs.Actions() {
		want := []string{a.Rule.Permission.String(), "`" + a.Rule.Param + "`"}
		if a.Rule.Param == "" {
			want[1] = ""
		}
		if got, ok := rows[a.Name]; !ok || !slices.Equal(got, want) {
			t.Errorf("docs/sqs.md lists %s as %q, want %q", a.Name, got, want)
		}
	}
}
