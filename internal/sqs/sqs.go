// Package sqs serves the Amazon SQS API over an okiba broker, so that an application
// written for SQS runs against okiba by changing only its endpoint URL.
//
// It speaks the SQS JSON protocol (awsJson1_0: POST / with X-Amz-Target:
// AmazonSQS.<Action> and Content-Type application/x-amz-json-1.0), which current AWS
// SDKs (aws-sdk-go-v2, the JavaScript SDK v3, boto3, AWS CLI v2) use. It is a front
// door, not a second engine: every action is a call on package broker, so a queue
// created through SQS is an okiba queue and the other way round. docs/sqs.md lists the
// actions and attributes and every known difference from SQS.
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
	"encoding/xml"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

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
	// by one of them; when nil, any credentials (or none) are accepted.
	Keys Keys
	// Clock times purges and ReceiveRequestAttemptId memory. Defaults to clock.Real;
	// give the broker's clock so that tests on a fake clock can move past the limits.
	Clock clock.Clock
	// Logger receives internal errors. Defaults to discarding them.
	Logger *slog.Logger
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
// X-Amz-Target names the AmazonSQS service, or a form post of the older query protocol
// (which the front answers with an error that says to use the JSON protocol).
func IsSQSRequest(r *http.Request) bool {
	if r.Method != http.MethodPost || strings.HasPrefix(r.URL.Path, "/v1/") {
		return false
	}
	if strings.HasPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.") {
		return true
	}
	ct := r.Header.Get("Content-Type")
	return strings.HasPrefix(ct, "application/x-www-form-urlencoded")
}

// request is one decoded SQS call.
type request struct {
	r      *http.Request
	w      http.ResponseWriter
	action string
	body   []byte
	header http.Header // extra response headers
}

type handler func(f *Front, q *request) (any, *apiError)

// actions maps X-Amz-Target actions to their handlers.
var actions map[string]handler

func init() {
	actions = map[string]handler{
		"CreateQueue":                  (*Front).createQueue,
		"GetQueueUrl":                  (*Front).getQueueURL,
		"ListQueues":                   (*Front).listQueues,
		"DeleteQueue":                  (*Front).deleteQueue,
		"GetQueueAttributes":           (*Front).getQueueAttributes,
		"SetQueueAttributes":           (*Front).setQueueAttributes,
		"PurgeQueue":                   (*Front).purgeQueue,
		"SendMessage":                  (*Front).sendMessage,
		"SendMessageBatch":             (*Front).sendMessageBatch,
		"ReceiveMessage":               (*Front).receiveMessage,
		"DeleteMessage":                (*Front).deleteMessage,
		"DeleteMessageBatch":           (*Front).deleteMessageBatch,
		"ChangeMessageVisibility":      (*Front).changeVisibility,
		"ChangeMessageVisibilityBatch": (*Front).changeVisibilityBatch,
		"TagQueue":                     (*Front).tagQueue,
		"UntagQueue":                   (*Front).untagQueue,
		"ListQueueTags":                (*Front).listQueueTags,
		"ListDeadLetterSourceQueues":   (*Front).listDeadLetterSources,
		"StartMessageMoveTask":         (*Front).startMoveTask,
		"ListMessageMoveTasks":         (*Front).listMoveTasks,
		"CancelMessageMoveTask":        (*Front).cancelMoveTask,
		"AddPermission":                (*Front).unsupported,
		"RemovePermission":             (*Front).unsupported,
	}
}

// Authenticate is the front's part of the node's authentication step: it reads the
// request (an SQS request is signed over its body), checks its signature against the
// configured access keys (any, or none, when there are none) and returns the request to
// serve, which carries the principal and its body, or answers the refusal itself and
// reports false.
func (f *Front) Authenticate(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	body, e := f.readRequest(w, r)
	var p auth.Principal
	if e == nil {
		// Signatures are dated by the wall clock, not Options.Clock: the signer's clock is a
		// real one even when the broker runs on a fake clock in tests.
		p, e = f.authenticate(r, body, time.Now())
	}
	if e != nil {
		w.Header().Set("X-Amzn-RequestId", requestID())
		f.writeError(w, e)
		return nil, false
	}
	r = r.WithContext(context.WithValue(auth.With(r.Context(), p), bodyKey{}, body))
	return r, true
}

// bodyKey carries a request body Authenticate has read.
type bodyKey struct{}

// ServeHTTP answers one SQS request. A request that has not been through Authenticate
// (the node always runs it first) is authenticated here, so that the front is never
// open by mistake.
func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := r.Context().Value(bodyKey{}).([]byte); !ok {
		var authed bool
		if r, authed = f.Authenticate(w, r); !authed {
			return
		}
	}
	q := &request{r: r, w: w, header: http.Header{}, body: r.Context().Value(bodyKey{}).([]byte)}
	out, e := f.serve(q)
	for k, vs := range q.header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set("X-Amzn-RequestId", requestID())
	if e != nil {
		f.writeError(w, e)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(statusOK)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(out)
}

// readRequest checks what every SQS request must be and reads its body.
func (f *Front) readRequest(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if r.Method != http.MethodPost {
		return nil, newErr(kMethodNotAllowed, "SQS requests are POST requests; got %s", r.Method)
	}
	if r.Header.Get("X-Amz-Target") == "" {
		return nil, errQueryProtocol
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, newErr(kRequestTooLarge, "request body is larger than %d bytes", MaxRequestBody)
		}
		return nil, newErr(kSerialization, "cannot read the request body: %v", err)
	}
	return body, nil
}

func (f *Front) serve(q *request) (any, *apiError) {
	target := q.r.Header.Get("X-Amz-Target")
	action, ok := strings.CutPrefix(target, "AmazonSQS.")
	h := actions[action]
	if !ok || h == nil {
		return nil, newErr(kUnknownOperation, "unknown operation %q: X-Amz-Target must be AmazonSQS.<Action>, see docs/sqs.md for the supported actions", target)
	}
	q.action = action
	return h(f, q)
}

// decode reads the request body into v. An empty body is an empty object.
func (q *request) decode(v any) *apiError {
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

// errQueryProtocol answers requests in the older query protocol (form posts with
// Action=…), which the front does not speak; it is written in that protocol's XML so
// that old SDKs show its message.
var errQueryProtocol = newErr(kUnknownOperation, "okiba speaks the SQS JSON protocol only (X-Amz-Target: AmazonSQS.<Action>, "+
	"Content-Type: application/x-amz-json-1.0), which current AWS SDKs and AWS CLI v2 use; "+
	"the older query protocol (Action=... form posts) is not supported: upgrade the SDK or CLI (see docs/sqs.md)")

type xmlErrorResponse struct {
	XMLName xml.Name `xml:"ErrorResponse"`
	Type    string   `xml:"Error>Type"`
	Code    string   `xml:"Error>Code"`
	Message string   `xml:"Error>Message"`
	ID      string   `xml:"RequestId"`
}

func (f *Front) writeError(w http.ResponseWriter, e *apiError) {
	if e == errQueryProtocol {
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(e.Status)
		_ = xml.NewEncoder(w).Encode(xmlErrorResponse{Type: "Sender", Code: e.Query, Message: e.Message, ID: w.Header().Get("X-Amzn-RequestId")})
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
// JSON protocol's error shape, with message, so that SDKs report it like any SQS error.
func (f *Front) Forbid(w http.ResponseWriter, message string) {
	w.Header().Set("X-Amzn-RequestId", requestID())
	f.writeError(w, newErr(kAccessDenied, "%s", message))
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
