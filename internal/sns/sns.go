// Package sns serves the Amazon SNS API over an okiba broker's topics and
// subscriptions, so that an application that publishes through SNS to SQS queues runs
// against okiba by changing only its endpoint URL.
//
// It is a front door, not a second engine: an SNS topic is an okiba topic (one
// partition; a FIFO topic's records are keyed by MessageGroupId), an SNS subscription
// of protocol sqs is an okiba subscription into an okiba queue, with the filter policy
// okiba's subscriptions already speak (internal/filter), and a publish is a native
// record (body = the message, headers = the message attributes). What SNS has and
// okiba's topics do not — topic and subscription attributes such as
// RawMessageDelivery, DisplayName or DeliveryPolicy — is kept in one reserved okiba
// topic, okiba-sns (state.go), so that it is durable and replicated like everything
// else.
//
// SNS speaks the query protocol (forms with Action=…, answered in XML), and on AWS it
// shares it with SQS; okiba serves both on one port, and the SQS front's dispatch
// (internal/sqs, query.go) authenticates SNS requests and hands them here (ServeSNS).
// A message an SNS subscription put into a queue is shaped as SNS delivers it when an
// SQS client receives it (Deliver): the JSON envelope, signed with the node's RSA key
// (envelope.go), or the raw message with its attributes. docs/sns.md lists the actions
// and every known difference from SNS.
package sns

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/auth"
)

// Defaults of Options: those of the SQS front, whose region and account SNS's ARNs
// name too.
const (
	DefaultRegion    = "us-east-1"
	DefaultAccountID = "000000000000"
)

// version and namespace of the SNS API.
const (
	version   = "2010-03-31"
	namespace = "http://sns.amazonaws.com/doc/" + version + "/"
)

// Options configure a Front. The zero value means the defaults, but for SigningSeed.
type Options struct {
	// Region and AccountID appear in topic and subscription ARNs; they are the SQS
	// front's (one pair of settings for both). Default to "us-east-1" and
	// "000000000000".
	Region, AccountID string
	// BaseURL, when set, is the scheme and host the envelope's SigningCertURL and
	// UnsubscribeURL name. Defaults to the scheme and Host of the SQS receive that
	// delivers the message.
	BaseURL string
	// SigningSeed is the 32-byte secret the envelopes' RSA signing key is derived from
	// (the node gives broker.DeriveKey("sns signing key")). Required.
	SigningSeed []byte
	// Logger receives internal errors. Defaults to discarding them.
	Logger *slog.Logger
}

// Front serves the SNS API over a broker.
type Front struct {
	b     *broker.Broker
	opts  Options
	state *store

	signOnce sync.Once
	sign     *signer
	signErr  error
}

// New returns an SNS front for b.
func New(b *broker.Broker, opts Options) *Front {
	if opts.Region == "" {
		opts.Region = DefaultRegion
	}
	if opts.AccountID == "" {
		opts.AccountID = DefaultAccountID
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if len(opts.SigningSeed) < 32 {
		panic("sns: Options.SigningSeed must be at least 32 bytes") // a bug of the wiring
	}
	opts.BaseURL = strings.TrimRight(opts.BaseURL, "/")
	return &Front{b: b, opts: opts, state: newStore()}
}

// request is one SNS call.
type request struct {
	r      *http.Request
	form   url.Values
	action string
	out    xmlWriter // the result's members
}

type handler func(f *Front, q *request) *apiError

// Action is one action of the SNS API with the permission it requires. The table
// (Actions) is the front's one list of its actions: requests are dispatched from it,
// checked against its rule before the handler runs, and the permission matrix test
// and docs/sns.md walk it.
type Action struct {
	// Name is the action, as its Action parameter names it.
	Name string
	// Rule is the permission the caller must hold on the topic the request names in its
	// Param member (TopicArn, SubscriptionArn, ResourceArn or Name); Also says what the
	// handler checks besides.
	Rule auth.Rule
	h    handler
}

const (
	send, browse, manage = access.Send, access.Browse, access.Manage
)

func on(perm access.Permission, param string) auth.Rule {
	return auth.Rule{Permission: perm, Kind: access.Topic, Param: param}
}

func also(r auth.Rule, what string) auth.Rule { r.Also = what; return r }

// actionTable: publishing needs send on the topic; reads browse; everything that
// creates, changes or deletes a topic or a subscription, manage — a subscription is
// part of its topic, as in the native API.
var actionTable = []Action{
	{"CreateTopic", on(manage, "Name"), (*Front).createTopic},
	{"GetTopicAttributes", on(browse, "TopicArn"), (*Front).getTopicAttributes},
	{"SetTopicAttributes", on(manage, "TopicArn"), (*Front).setTopicAttributes},
	{"ListTopics", auth.Rule{Permission: browse, Kind: access.Topic, Filtered: true}, (*Front).listTopics},
	{"DeleteTopic", on(manage, "TopicArn"), (*Front).deleteTopic},
	{"Subscribe", also(on(manage, "TopicArn"), "send on the queue it delivers to (and on a RedrivePolicy's dead-letter queue)"), (*Front).subscribe},
	{"ConfirmSubscription", on(manage, "TopicArn"), (*Front).confirmSubscription},
	{"Unsubscribe", on(manage, "SubscriptionArn"), (*Front).unsubscribe},
	{"ListSubscriptions", auth.Rule{Permission: browse, Kind: access.Topic, Filtered: true}, (*Front).listSubscriptions},
	{"ListSubscriptionsByTopic", on(browse, "TopicArn"), (*Front).listSubscriptionsByTopic},
	{"GetSubscriptionAttributes", on(browse, "SubscriptionArn"), (*Front).getSubscriptionAttributes},
	{"SetSubscriptionAttributes", also(on(manage, "SubscriptionArn"), "send on a RedrivePolicy's dead-letter queue"), (*Front).setSubscriptionAttributes},
	{"Publish", on(send, "TopicArn"), (*Front).publish},
	{"PublishBatch", on(send, "TopicArn"), (*Front).publishBatch},
	{"TagResource", on(manage, "ResourceArn"), (*Front).tagResource},
	{"UntagResource", on(manage, "ResourceArn"), (*Front).untagResource},
	{"ListTagsForResource", on(browse, "ResourceArn"), (*Front).listTags},
}

var actions map[string]*Action

func init() {
	actions = make(map[string]*Action, len(actionTable))
	for i := range actionTable {
		a := &actionTable[i]
		if a.Rule.Permission == 0 || a.Rule.Kind != access.Topic || a.Rule.Param == "" && !a.Rule.Filtered {
			panic("sns: action " + a.Name + " has no rule") // a bug: every action says what it needs
		}
		actions[a.Name] = a
	}
}

// Actions returns the front's actions with their rules, in the order docs/sns.md lists
// them.
func Actions() []Action { return slices.Clone(actionTable) }

// ServeSNS answers one SNS request of the query protocol, authenticated by the SQS
// front's dispatch (its principal is in r's context); form holds its parameters.
func (f *Front) ServeSNS(w http.ResponseWriter, r *http.Request, form url.Values) {
	id := requestID()
	w.Header().Set("X-Amzn-RequestId", id)
	q := &request{r: r, form: form, action: form.Get("Action")}
	if e := f.serve(q); e != nil {
		f.writeError(w, e, id)
		return
	}
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0"?>` + "\n")
	b.WriteString("<" + q.action + `Response xmlns="` + namespace + `">`)
	b.WriteString("<" + q.action + "Result>")
	b.Write(q.out.Bytes())
	b.WriteString("</" + q.action + "Result>")
	b.WriteString("<ResponseMetadata><RequestId>" + id + "</RequestId></ResponseMetadata></" + q.action + "Response>")
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
}

func (f *Front) serve(q *request) *apiError {
	if q.action == "" {
		return newErr("MissingParameter", "The request must contain the parameter Action.")
	}
	if v := q.form.Get("Version"); v != "" && v != version {
		return newErr("InvalidAction", "The requested version (%s) of service AmazonSNS does not exist: okiba serves %s.", v, version)
	}
	a := actions[q.action]
	if a == nil {
		return newErr("InvalidAction", "The action %s is not valid for this endpoint: okiba serves the SNS actions docs/sns.md lists.", q.action)
	}
	if e := f.check(q, a.Rule); e != nil {
		return e
	}
	return a.h(f, q)
}

// check refuses a request whose caller lacks its action's permission on the topic it
// names. A request that names no valid topic where its rule looks passes to the
// handler, which reads the same member and refuses it for that: it acts on nothing.
func (f *Front) check(q *request, rule auth.Rule) *apiError {
	if rule.Open || rule.Filtered {
		return nil
	}
	var name string
	var e *apiError
	switch rule.Param {
	case "Name":
		name = q.form.Get("Name")
	case "TopicArn":
		name, e = f.topicOfARN(q.param("TopicArn", "TargetArn"), "TopicArn")
	case "ResourceArn":
		name, e = f.topicOfARN(q.form.Get("ResourceArn"), "ResourceArn")
	case "SubscriptionArn":
		name, _, e = f.parseSubARN(q.form.Get("SubscriptionArn"))
	default:
		panic("sns: a rule names the unknown request member " + rule.Param) // a bug of actionTable
	}
	if e != nil || name == "" {
		return nil
	}
	return f.require(q, rule.Permission, access.TopicNamed(name))
}

// require checks that the caller may do perm on res.
func (f *Front) require(q *request, perm access.Permission, res access.Resource) *apiError {
	if err := auth.Require(q.r.Context(), perm, res); err != nil {
		return f.errorOf(err)
	}
	return nil
}

// param is the first of the named parameters the request has ("TopicArn", or Publish's
// "TargetArn").
func (q *request) param(names ...string) string {
	for _, n := range names {
		if v := q.form.Get(n); v != "" {
			return v
		}
	}
	return ""
}

func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
