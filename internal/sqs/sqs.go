// Package sqs serves the Amazon SQS API over an okiba broker, so that an application
// written for SQS runs against okiba by changing only its endpoint URL.
//
// It speaks both of SQS's protocols: JSON (awsJson1_0: POST / with X-Amz-Target:
// AmazonSQS.<Action> and Content-Type application/x-amz-json-1.0), which current AWS
// SDKs (aws-sdk-go-v2, the JavaScript SDK v3, recent boto3 and AWS CLI v2) use, and the
// older query protocol (forms with Action=…, answered in XML: query.go), which older
// SDKs, Debian's boto3 and AWS CLI, kombu and Celery use. Both decode into the same
// request structs and run the same handlers. It is a front door, not a second engine:
// every action is a call on package broker, so a queue created through SQS is an okiba
// queue and the other way round. docs/sqs.md lists the actions and attributes and every
// known difference from SQS.
//
// With Options.Keys, every request is signed by a principal (auth.go) and may do what
// its grants allow: each action needs a permission on the queue the request names,
// checked before the action runs (Actions, permissions.go).
//
// The front keeps two things of its own, in memory: FIFO receive answers by
// ReceiveRequestAttemptId (five minutes, bounded) and the time of each queue's last
// purge (one purge per queue per 60 s). Neither survives a restart.
package sqs

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"github.com/okiba/okiba/internal/consumers"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/clock"
	"github.com/okiba/okiba/internal/auth"
)

// Defaults of Options.
const (
	DefaultRegion    = "us-east-1"
	DefaultAccountID = "000000000000"
)

// MaxRequestBody bounds a request body: a batch of ten messages totalling 1 MiB, with
// room for JSON escaping and base64-encoded binary attributes.
const MaxRequestBody = 8 << 20

// Options configure a Front. The zero value means the defaults.
type Options struct {
	// Region appears in queue ARNs and is the region signatures must be scoped to (with
	// Keys; without, any is accepted). Defaults to "us-east-1".
	Region string
	// AccountID appears in queue URLs and ARNs. Defaults to "000000000000".
	AccountID string
	// BaseURL, when set, is the scheme and host used in queue URLs
	// ("https://sqs.example.com"). Defaults to the scheme and Host of each request.
	BaseURL string
	// Keys finds the principal an access key id names and its secrets (the node's
	// auth.Keyring). When set, every request must be signed with AWS Signature Version 4
	// by one of them, and may do what that principal's grants allow; when nil, any
	// credentials (or none) are accepted, and every request may do everything.
	Keys Keys
	// Clock times purges and ReceiveRequestAttemptId memory. Defaults to clock.Real;
	// give the broker's clock so that tests on a fake clock can move past the limits.
	Clock clock.Clock
	// Consumers is the node's table of receivers (internal/consumers), which
	// ReceiveMessage feeds and deletes and visibility changes update, as the native
	// API's receives do. Nil: none kept.
	Consumers *consumers.Table
	// Logger receives internal errors. Defaults to discarding them.
	Logger *slog.Logger
	// ReadBarrier, on a node of a cluster, runs before every action that only reads
	// (those needing browse): it returns once the node's state may answer without being
	// stale, or why not (ServiceUnavailable, which the SDKs retry).
	ReadBarrier func(ctx context.Context) error
	// SNS serves the SNS requests of the query protocol, which share the endpoint
	// (query.go). Defaults to none: they are refused with an error that says so.
	SNS SNS
}

// Front serves the SQS API over a broker. It is an http.Handler.
type Front struct {
	b        *broker.Broker
	opts     Options // with every default filled in by New
	attempts *attempts
	purges   *purges
}

// New returns an SQS front for b.
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
	if opts.Clock == nil {
		opts.Clock = clock.Real
	}
	opts.BaseURL = strings.TrimRight(opts.BaseURL, "/")
	return &Front{b: b, opts: opts, attempts: newAttempts(), purges: newPurges()}
}

// Keys is where the front finds access keys: the principal an access key id names, and
// its valid secrets.
type Keys interface {
	SigningSecrets(keyID string) (auth.Principal, []string, bool)
}

// Authenticates reports whether the front verifies signatures (Keys are set).
func (f *Front) Authenticates() bool { return f.opts.Keys != nil }

// Region is the region queue ARNs name.
func (f *Front) Region() string { return f.opts.Region }

// AccountID is the account queue URLs and ARNs name.
func (f *Front) AccountID() string { return f.opts.AccountID }

// IsSQSRequest reports whether r is addressed to the SQS front: a POST whose
// X-Amz-Target names the AmazonSQS service, or a request of the query protocol (a form
// post, or a GET with Action in its query string), which SNS shares and the front
// dispatches (query.go).
func IsSQSRequest(r *http.Request) bool {
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		return false
	}
	if r.Method == http.MethodPost && strings.HasPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.") {
		return true
	}
	return isQuery(r)
}

// ActionOf names the action r asks for, for logs and the audit: from its X-Amz-Target,
// or its query parameters (those of its body once Authenticate has read them).
func ActionOf(r *http.Request) string {
	if t := r.Header.Get("X-Amz-Target"); t != "" {
		return strings.TrimPrefix(t, "AmazonSQS.")
	}
	if in, ok := r.Context().Value(bodyKey{}).(*incoming); ok && in.form != nil {
		return in.form.Get("Action")
	}
	return r.URL.Query().Get("Action")
}

// LongPoll reports whether r is an SQS receive that may wait for messages, which a
// shutdown should answer at once: a JSON ReceiveMessage, or a query-protocol GET naming
// ReceiveMessage. A query-protocol POST names its action in a body not read yet, so a
// receive posted as a form waits out its WaitTimeSeconds (at most 20 s) within the
// shutdown's grace period, like any request that is not known to wait.
func LongPoll(r *http.Request) bool {
	if r.Method == http.MethodPost && r.Header.Get("X-Amz-Target") == "AmazonSQS.ReceiveMessage" {
		return true
	}
	return r.Method == http.MethodGet && isQuery(r) && r.URL.Query().Get("Action") == "ReceiveMessage"
}

// request is one decoded SQS call.
type request struct {
	r      *http.Request
	w      http.ResponseWriter
	action string
	body   []byte
	form   url.Values  // the query protocol's parameters; nil for the JSON protocol
	pre    any         // the JSON body of a hot action as predecode read it, or nil
	header http.Header // extra response headers
}

type handler func(f *Front, q *request) (any, *apiError)

// Action is one action of the SQS API with what it requires of its caller. The table
// (Actions) is the front's one list of its actions: requests are dispatched from it,
// each is checked against its action's rule before the handler runs, and the
// permission matrix test and docs/sqs.md walk it, so that an action cannot be added
// without saying what it needs.
type Action struct {
	// Name is the action, as X-Amz-Target names it after "AmazonSQS.".
	Name string
	// Rule is the permission the caller must hold on the queue the request names in
	// its Param member (QueueUrl, QueueName, SourceArn, or the TaskHandle's task); Also
	// says what the handler checks besides, on the other queues the request names.
	Rule auth.Rule
	h    handler
}

const (
	send, receive, browse, manage = access.Send, access.Receive, access.Browse, access.Manage
)

// on is the rule of perm on the queue that the request member param names.
func on(perm access.Permission, param string) auth.Rule {
	return auth.Rule{Permission: perm, Kind: access.Queue, Param: param}
}

func also(r auth.Rule, what string) auth.Rule { r.Also = what; return r }

// redriveAlso is what CreateQueue and SetQueueAttributes check besides manage on the
// queue: a dead-letter queue is a queue its source sends to.
const redriveAlso = "send on the dead-letter queue a RedrivePolicy names, unless it is the queue's own <name>-dlq"

// actionTable is the table Actions returns: sends need send; receives, and what
// settles or extends a receipt, need receive (receipts are capabilities, as SQS treats
// them); reads that take nothing need browse; the rest, unsupported actions included,
// need manage.
var actionTable = []Action{
	{"CreateQueue", also(on(manage, "QueueName"), redriveAlso), (*Front).createQueue},
	{"GetQueueUrl", on(browse, "QueueName"), (*Front).getQueueURL},
	{"ListQueues", auth.Rule{Permission: browse, Kind: access.Queue, Filtered: true}, (*Front).listQueues},
	{"DeleteQueue", on(manage, "QueueUrl"), (*Front).deleteQueue},
	{"GetQueueAttributes", on(browse, "QueueUrl"), (*Front).getQueueAttributes},
	{"SetQueueAttributes", also(on(manage, "QueueUrl"), redriveAlso), (*Front).setQueueAttributes},
	{"PurgeQueue", on(manage, "QueueUrl"), (*Front).purgeQueue},
	{"SendMessage", on(send, "QueueUrl"), (*Front).sendMessage},
	{"SendMessageBatch", on(send, "QueueUrl"), (*Front).sendMessageBatch},
	{"ReceiveMessage", on(receive, "QueueUrl"), (*Front).receiveMessage},
	{"DeleteMessage", on(receive, "QueueUrl"), (*Front).deleteMessage},
	{"DeleteMessageBatch", on(receive, "QueueUrl"), (*Front).deleteMessageBatch},
	{"ChangeMessageVisibility", on(receive, "QueueUrl"), (*Front).changeVisibility},
	{"ChangeMessageVisibilityBatch", on(receive, "QueueUrl"), (*Front).changeVisibilityBatch},
	{"TagQueue", on(manage, "QueueUrl"), (*Front).tagQueue},
	{"UntagQueue", on(manage, "QueueUrl"), (*Front).untagQueue},
	{"ListQueueTags", on(browse, "QueueUrl"), (*Front).listQueueTags},
	{"ListDeadLetterSourceQueues", also(on(browse, "QueueUrl"), "lists only the sources the caller may browse"), (*Front).listDeadLetterSources},
	{"StartMessageMoveTask", also(on(manage, "SourceArn"), "send on the DestinationArn queue; without one, on every queue the messages go back to"), (*Front).startMoveTask},
	{"ListMessageMoveTasks", on(browse, "SourceArn"), (*Front).listMoveTasks},
	{"CancelMessageMoveTask", also(on(manage, "TaskHandle"), "on the task's source, the dead-letter queue"), (*Front).cancelMoveTask},
	{"AddPermission", on(manage, "QueueUrl"), (*Front).unsupported},
	{"RemovePermission", on(manage, "QueueUrl"), (*Front).unsupported},
}

// actions indexes actionTable by name.
var actions map[string]*Action

func init() {
	actions = make(map[string]*Action, len(actionTable))
	for i := range actionTable {
		a := &actionTable[i]
		if a.Rule.Permission == 0 || a.Rule.Kind != access.Queue || a.Rule.Param == "" && !a.Rule.Filtered {
			panic("sqs: action " + a.Name + " has no rule") // a bug: every action says what it needs
		}
		actions[a.Name] = a
	}
}

// Actions returns the front's actions with their rules, in the order docs/sqs.md lists
// them.
func Actions() []Action { return slices.Clone(actionTable) }

// Authenticate is the front's part of the node's authentication step: it reads the
// request (an SQS request is signed over its body), checks its signature against the
// configured access keys (any, or none, when there are none) and returns the request to
// serve, which carries the principal and its body, or answers the refusal itself and
// reports false.
func (f *Front) Authenticate(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	in, e := f.readRequest(w, r)
	var p auth.Principal
	if e == nil {
		// Signatures are dated by the wall clock, not Options.Clock: the signer's clock is a
		// real one even when the broker runs on a fake clock in tests.
		p, e = f.authenticate(r, in.body, time.Now(), in.service())
	}
	if e != nil {
		w.Header().Set("X-Amzn-RequestId", requestID())
		f.writeError(w, in.proto, e)
		return nil, false
	}
	r = r.WithContext(context.WithValue(auth.With(r.Context(), p), bodyKey{}, in))
	return r, true
}

// bodyKey carries the *incoming Authenticate has read.
type bodyKey struct{}

// incoming is what Authenticate read of a request.
type incoming struct {
	proto proto
	body  []byte
	form  url.Values // the query protocol's parameters (queryParams)
}

// service is the AWS service the request must be signed for.
func (in *incoming) service() string {
	if in.proto == protoSNS {
		return "sns"
	}
	return "sqs"
}

// proto is the protocol, and for the query protocol the service, a request speaks; its
// answer, error or not, is in the same.
type proto int

const (
	protoJSON  proto = iota
	protoQuery       // SQS's query protocol
	protoSNS         // SNS's query protocol, which SQS shares its endpoint with
)

// ServeHTTP answers one SQS request. A request that has not been through Authenticate
// (the node always runs it first) is authenticated here, so that the front is never
// open by mistake.
func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in, ok := r.Context().Value(bodyKey{}).(*incoming)
	if !ok {
		var authed bool
		if r, authed = f.Authenticate(w, r); !authed {
			return
		}
		in = r.Context().Value(bodyKey{}).(*incoming)
	}
	if in.proto == protoSNS {
		f.opts.SNS.ServeSNS(w, r, in.form)
		return
	}
	q := &request{r: r, w: w, header: http.Header{}, body: in.body, form: in.form}
	out, e := f.serve(q)
	for k, vs := range q.header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	id := requestID()
	w.Header().Set("X-Amzn-RequestId", id)
	if e != nil {
		f.writeError(w, in.proto, e)
		return
	}
	if q.form != nil {
		var b bytes.Buffer
		encodeXML(&b, q.action, out, id)
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(statusOK)
		_, _ = w.Write(b.Bytes())
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if a, ok := out.(jsonAppender); ok {
		bp := answerBuffers.Get().(*[]byte)
		*bp = append(a.appendJSON((*bp)[:0]), '\n')
		// Its length known, the answer goes out in one write, not in chunks.
		w.Header().Set("Content-Length", strconv.Itoa(len(*bp)))
		w.WriteHeader(statusOK)
		_, _ = w.Write(*bp)
		if cap(*bp) <= maxPooledAnswer {
			answerBuffers.Put(bp)
		}
		return
	}
	w.WriteHeader(statusOK)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(out)
}

// answerBuffers hold the JSON answers of the hot actions while they are written; one
// larger than maxPooledAnswer (a receive of big messages) is left to the collector.
var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooledAnswer = 256 << 10

// readRequest checks what every SQS request must be, reads its body and, for the query
// protocol, its parameters, and decides which service a query request is for. Its
// answer's proto is the protocol to refuse the request in.
func (f *Front) readRequest(w http.ResponseWriter, r *http.Request) (*incoming, *apiError) {
	in := &incoming{}
	if isQuery(r) {
		in.proto = protoQuery
	} else if r.Method != http.MethodPost {
		return in, newErr(kMethodNotAllowed, "SQS requests are POST requests (or GET with Action=… in the query string); got %s", r.Method)
	}
	if in.proto == protoJSON && r.Header.Get("X-Amz-Target") == "" {
		return in, newErr(kUnknownOperation, "an SQS request names its action in X-Amz-Target: AmazonSQS.<Action> "+
			"(the JSON protocol), or in an Action parameter of a form (the query protocol); this one does neither")
	}
	body, err := readBody(http.MaxBytesReader(w, r.Body, MaxRequestBody), r.ContentLength)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return in, newErr(kRequestTooLarge, "request body is larger than %d bytes", MaxRequestBody)
		}
		return in, newErr(kSerialization, "cannot read the request body: %v", err)
	}
	in.body = body
	if in.proto == protoJSON {
		return in, nil
	}
	form, e := queryParams(r, body)
	if e != nil {
		return in, e
	}
	if queryService(r, form) == "sns" {
		in.proto = protoSNS
		if f.opts.SNS == nil {
			return in, errSNS
		}
		in.form = form
		return in, nil
	}
	if e := checkVersion(form); e != nil {
		return in, e
	}
	in.form = form
	return in, nil
}

// readBody reads a request body into one allocation when its length is declared (and
// within MaxRequestBody), where io.ReadAll would grow its buffer a few times over a
// batch of ten messages.
func readBody(r io.Reader, declared int64) ([]byte, error) {
	if declared <= 0 || declared > MaxRequestBody {
		return io.ReadAll(r)
	}
	// ReadFrom wants MinRead bytes of room before each read: with them it never grows.
	buf := bytes.NewBuffer(make([]byte, 0, declared+bytes.MinRead))
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

func (f *Front) serve(q *request) (any, *apiError) {
	name, ok := "", false
	if q.form != nil {
		name = q.form.Get("Action")
		if name == "" {
			return nil, missingParam("Action")
		}
		ok = true
	} else {
		name, ok = strings.CutPrefix(q.r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	}
	a := actions[name]
	if !ok || a == nil {
		if q.form != nil {
			return nil, newErr(kUnknownOperation, "The action %s is not valid for this endpoint: see docs/sqs.md for the supported actions.", name)
		}
		return nil, newErr(kUnknownOperation, "unknown operation %q: X-Amz-Target must be AmazonSQS.<Action>, see docs/sqs.md for the supported actions", q.r.Header.Get("X-Amz-Target"))
	}
	q.action = name
	q.predecode()
	if e := f.check(q, a.Rule); e != nil {
		return nil, e
	}
	if a.Rule.Permission == browse && f.opts.ReadBarrier != nil {
		if err := f.opts.ReadBarrier(q.r.Context()); err != nil {
			return nil, f.errorOf(err, "")
		}
	}
	return a.h(f, q)
}

// decode reads the request into v: its query parameters (decodeForm) or its JSON body,
// in which an empty body is an empty object.
func (q *request) decode(v any) *apiError {
	if q.form != nil {
		return decodeForm(q.form, q.action, v)
	}
	data := bytes.TrimSpace(q.body)
	if len(data) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return newErr(kSerialization, "malformed JSON request body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return newErr(kSerialization, "malformed JSON request body: unexpected data after the object")
	}
	return nil
}

// writeError answers e in the protocol the request spoke (the request id is already in
// the X-Amzn-RequestId header).
func (f *Front) writeError(w http.ResponseWriter, p proto, e *apiError) {
	if p != protoJSON {
		ns := sqsNamespace
		if p == protoSNS {
			ns = snsNamespace
		}
		var b bytes.Buffer
		encodeXMLError(&b, ns, e, w.Header().Get("X-Amzn-RequestId"))
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(e.Status)
		_, _ = w.Write(b.Bytes())
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Query-Error", e.queryHeader())
	w.WriteHeader(e.Status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(e.body())
}

// Forbid answers a request that the server refuses before it reaches the front (a
// browser request from another origin, say) as SQS would: AccessDenied, 403, in the
// error shape of the protocol r speaks, with message, so that SDKs report it like any
// SQS error.
func (f *Front) Forbid(w http.ResponseWriter, r *http.Request, message string) {
	w.Header().Set("X-Amzn-RequestId", requestID())
	p := protoJSON
	if isQuery(r) {
		p = protoQuery
	}
	f.writeError(w, p, newErr(kAccessDenied, "%s", message))
}

func (f *Front) unsupported(q *request) (any, *apiError) {
	return nil, newErr(kUnsupportedOperation, "%s is not supported by okiba: queue policies and permissions are not implemented (see docs/sqs.md)", q.action)
}

func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Match reports whether r is addressed to the SQS front (see IsSQSRequest).
func (f *Front) Match(r *http.Request) bool { return IsSQSRequest(r) }
