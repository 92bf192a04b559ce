package sns_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/sns"
	"github.com/okiba/okiba/okibatest"
)

const adminToken = "admin-t0ken-admin-t0ken-admin"

func secretOf(principal string) string { return principal + "-s3cret-s3cret-s3cret" }

// matrixPrincipals each hold the grants given (none for nobody).
var matrixPrincipals = []struct {
	name   string
	grants []string
}{
	{"nobody", nil},
	{"browser", []string{"browse topic:*", "send queue:*"}},
	{"sender", []string{"send topic:*", "send queue:*"}},
	{"manager", []string{"manage topic:*", "send queue:*"}},
	{"topics-only", []string{"manage topic:*"}}, // no send on queues: Subscribe's "also"
}

// fixture is what one cell of the matrix works on: a topic with a subscription into a
// queue, and a second queue nothing feeds.
type fixture struct {
	prefix, topic, topicARN, queue, queueARN, queue2ARN, sub string
}

// matrixCase is the request the matrix makes for one action, and what it names.
type matrixCase struct {
	call func(ctx context.Context, c *awssns.Client, fx fixture) (listed []string, err error)
	// named is the topic the rule applies to (the fixture's unless given); alsoQueue a
	// queue the caller needs send on besides.
	named     func(fx fixture) string
	alsoQueue func(fx fixture) string
}

func nothing(_ any, err error) ([]string, error) { return nil, err }

var matrixCases = map[string]matrixCase{
	"CreateTopic": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		return nothing(c.CreateTopic(ctx, &awssns.CreateTopicInput{Name: aws.String(fx.prefix + "new")}))
	}, named: func(fx fixture) string { return fx.prefix + "new" }},
	"GetTopicAttributes": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		return nothing(c.GetTopicAttributes(ctx, &awssns.GetTopicAttributesInput{TopicArn: aws.String(fx.topicARN)}))
	}},
	"SetTopicAttributes": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		return nothing(c.SetTopicAttributes(ctx, &awssns.SetTopicAttributesInput{TopicArn: aws.String(fx.topicARN), AttributeName: aws.String("DisplayName"), AttributeValue: aws.String("x")}))
	}},
	"ListTopics": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		out, err := c.ListTopics(ctx, &awssns.ListTopicsInput{})
		if err != nil {
			return nil, err
		}
		var arns []string
		for _, t := range out.Topics {
			if *t.TopicArn == fx.topicARN {
				arns = append(arns, *t.TopicArn)
			}
		}
		return arns, nil
	}},
	"DeleteTopic": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		return nothing(c.DeleteTopic(ctx, &awssns.DeleteTopicInput{TopicArn: aws.String(fx.topicARN)}))
	}},
	"Subscribe": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		return nothing(c.Subscribe(ctx, &awssns.SubscribeInput{TopicArn: aws.String(fx.topicARN), Protocol: aws.String("sqs"), Endpoint: aws.String(fx.queue2ARN)}))
	}, alsoQueue: func(fx fixture) string { return fx.prefix + "q2" }},
	"ConfirmSubscription": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		return nothing(c.ConfirmSubscription(ctx, &awssns.ConfirmSubscriptionInput{TopicArn: aws.String(fx.topicARN), Token: aws.String(fx.sub)}))
	}},
	"Unsubscribe": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		return nothing(c.Unsubscribe(ctx, &awssns.UnsubscribeInput{SubscriptionArn: aws.String(fx.sub)}))
	}},
	"ListSubscriptions": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		out, err := c.ListSubscriptions(ctx, &awssns.ListSubscriptionsInput{})
		if err != nil {
			return nil, err
		}
		var arns []string
		for _, s := range out.Subscriptions {
			if *s.SubscriptionArn == fx.sub {
				arns = append(arns, *s.SubscriptionArn)
			}
		}
		return arns, nil
	}},
	"ListSubscriptionsByTopic": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		return nothing(c.ListSubscriptionsByTopic(ctx, &awssns.ListSubscriptionsByTopicInput{TopicArn: aws.String(fx.topicARN)}))
	}},
	"GetSubscriptionAttributes": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		return nothing(c.GetSubscriptionAttributes(ctx, &awssns.GetSubscriptionAttributesInput{SubscriptionArn: aws.String(fx.sub)}))
	}},
	"SetSubscriptionAttributes": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		return nothing(c.SetSubscriptionAttributes(ctx, &awssns.SetSubscriptionAttributesInput{SubscriptionArn: aws.String(fx.sub), AttributeName: aws.String("RawMessageDelivery"), AttributeValue: aws.String("true")}))
	}},
	"Publish": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		return nothing(c.Publish(ctx, &awssns.PublishInput{TopicArn: aws.String(fx.topicARN), Message: aws.String("m")}))
	}},
	"PublishBatch": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		return nothing(c.PublishBatch(ctx, &awssns.PublishBatchInput{TopicArn: aws.String(fx.topicARN), PublishBatchRequestEntries: []types.PublishBatchRequestEntry{{Id: aws.String("a"), Message: aws.String("m")}}}))
	}},
	"TagResource": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		return nothing(c.TagResource(ctx, &awssns.TagResourceInput{ResourceArn: aws.String(fx.topicARN), Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}}))
	}},
	"UntagResource": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		return nothing(c.UntagResource(ctx, &awssns.UntagResourceInput{ResourceArn: aws.String(fx.topicARN), TagKeys: []string{"team"}}))
	}},
	"ListTagsForResource": {call: func(ctx context.Context, c *awssns.Client, fx fixture) ([]string, error) {
		return nothing(c.ListTagsForResource(ctx, &awssns.ListTagsForResourceInput{ResourceArn: aws.String(fx.topicARN)}))
	}},
}

// snsState is what a refused request must leave as it was: the topics of a prefix (their
// configuration, records and subscriptions), and okiba-sns, where attributes are kept.
type snsState struct {
	Topics []any
	Subs   []any
	Kept   uint64
}

func snsStateOf(b *broker.Broker, prefix string) snsState {
	var s snsState
	for _, t := range b.Topics(prefix) {
		s.Topics = append(s.Topics, []any{t.Name, t.Config, t.Partitions[0].End})
		subs, _ := b.Subscriptions(t.Name)
		for _, x := range subs {
			s.Subs = append(s.Subs, []any{x.Name, x.Queue, string(x.Filter)})
		}
	}
	if t, err := b.Topic("okiba-sns"); err == nil {
		s.Kept = t.Partitions[0].End
	}
	return s
}

// TestPermissionMatrix makes every action's request as principals of different grants:
// each is refused with AuthorizationError naming what it lacks, and changes nothing, or
// does what it asks; the listings show what may be browsed. An action of the front's
// table without a case here fails the test.
func TestPermissionMatrix(t *testing.T) {
	t.Parallel()
	opts := okibatest.Options{Token: adminToken}
	held := map[string]access.Grants{}
	for _, p := range matrixPrincipals {
		opts.Principals = append(opts.Principals, okibatest.Principal{Name: p.name, Secret: secretOf(p.name), Grants: p.grants})
		for _, g := range p.grants {
			gr, err := access.ParseGrant(g)
			if err != nil {
				t.Fatal(err)
			}
			held[p.name] = append(held[p.name], gr)
		}
	}
	srv := okibatest.New(t, opts)
	admin := &env{srv: srv, sns: snsClient(srv.URL, "admin", adminToken), sqs: sqsClient(srv.URL, "admin", adminToken)}
	ctx := ctxT(t)
	inTable := map[string]bool{}
	cell, denied := 0, 0
	for _, a := range sns.Actions() {
		inTable[a.Name] = true
		c, ok := matrixCases[a.Name]
		if !ok {
			t.Errorf("action %s is in the front's table but the matrix makes no request for it: add one to matrixCases", a.Name)
			continue
		}
		for _, p := range matrixPrincipals {
			cell++
			fx := fixture{prefix: fmt.Sprintf("m%d-", cell)}
			fx.topic = fx.prefix + "t"
			fx.topicARN = admin.createTopic(t, fx.topic, nil)
			_, _ = admin.sns.TagResource(ctx, &awssns.TagResourceInput{ResourceArn: aws.String(fx.topicARN), Tags: []types.Tag{{Key: aws.String("team"), Value: aws.String("a")}}})
			_, fx.queueARN = admin.createQueue(t, fx.prefix+"q")
			_, fx.queue2ARN = admin.createQueue(t, fx.prefix+"q2")
			fx.sub = admin.subscribe(t, fx.topicARN, fx.queueARN, nil)

			named := fx.topic
			if c.named != nil {
				named = c.named(fx)
			}
			var missing string
			if !a.Rule.Filtered && !held[p.name].Allows(a.Rule.Permission, access.TopicNamed(named)) {
				missing = a.Rule.Permission.String() + " permission on " + access.TopicNamed(named).String()
			} else if c.alsoQueue != nil && !held[p.name].Allows(access.Send, access.QueueNamed(c.alsoQueue(fx))) {
				missing = "send permission on " + access.QueueNamed(c.alsoQueue(fx)).String()
			}
			before := snsStateOf(srv.Broker, fx.prefix)
			listed, err := c.call(ctx, snsClient(srv.URL, p.name, secretOf(p.name)), fx)
			where := fmt.Sprintf("%s as %s", a.Name, p.name)
			switch {
			case missing != "":
				denied++
				wantDenied(t, where, err, missing)
				if after := snsStateOf(srv.Broker, fx.prefix); !reflect.DeepEqual(before, after) {
					t.Errorf("%s: refused, yet the state changed:\nbefore %+v\nafter  %+v", where, before, after)
				}
			case err != nil:
				t.Errorf("%s: %v", where, err)
			case a.Rule.Filtered:
				if may := held[p.name].Allows(access.Browse, access.TopicNamed(fx.topic)); (len(listed) == 1) != may {
					t.Errorf("%s: lists %v; may browse %s: %v", where, listed, fx.topic, may)
				}
			}
		}
	}
	if denied < len(matrixCases) || denied >= cell {
		t.Errorf("%d of %d cells refused: the matrix does not test both sides", denied, cell)
	}
	for name := range matrixCases {
		if !inTable[name] {
			t.Errorf("the matrix makes a request for %s, which the front's table does not list", name)
		}
	}

	// A request signed for SQS is not SNS's, and a bad signature is refused.
	_, err := snsClient(srv.URL, "admin", "not-the-admin-secret-at-all").ListTopics(ctx, &awssns.ListTopicsInput{})
	wantCode(t, err, "SignatureDoesNotMatch")
}

func wantDenied(t *testing.T, where string, err error, want string) {
	t.Helper()
	var ae smithy.APIError
	var re *smithyhttp.ResponseError
	switch {
	case !errors.As(err, &ae) || ae.ErrorCode() != "AuthorizationError":
		t.Errorf("%s: got %v, want AuthorizationError (%s)", where, err, want)
	case !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusForbidden:
		t.Errorf("%s: AuthorizationError with status %d, want 403", where, re.HTTPStatusCode())
	case !strings.Contains(ae.ErrorMessage(), want):
		t.Errorf("%s: AuthorizationError says %q, not that the %s is missing", where, ae.ErrorMessage(), want)
	}
}

// TestDocsListEveryActionsPermission: docs/sns.md's permission table names each action
// with the permission its rule needs.
func TestDocsListEveryActionsPermission(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/sns.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(doc), "## Permissions")
	table, _, _ = strings.Cut(table, "\n## ")
	rows := map[string]string{}
	for line := range strings.SplitSeq(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			continue
		}
		for name := range strings.SplitSeq(cells[1], ",") {
			rows[strings.TrimSpace(name)] = strings.TrimSpace(cells[2])
		}
	}
	for _, a := range sns.Actions() {
		got, ok := rows[a.Name]
		want := "`" + a.Rule.Permission.String() + "` on the topic"
		if a.Rule.Filtered {
			want = "nothing: they list only what the caller may `browse`"
		}
		if !ok || got != want || a.Rule.Also != "" && !slices.ContainsFunc(strings.Split(table, "\n"), func(l string) bool {
			return strings.Contains(l, a.Name) && strings.Contains(l, "`send` on")
		}) {
			t.Errorf("docs/sns.md lists %s as %q, want %q (and what it checks besides)", a.Name, got, want)
		}
	}
}
