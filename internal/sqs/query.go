package sqs

import (
	"bytes"
	"encoding/base64"
	"encoding/xml"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/okiba/okiba/broker"
)

// The SQS query protocol: the older of SQS's two wire protocols, which every AWS SDK
// spoke before the JSON protocol (boto3 before 1.31-ish botocore, aws-sdk-go v1 before
// v1.47.6, the AWS CLI 2.9 that Debian ships, kombu's own SQS client).
//
// A request is a form: POST with Content-Type application/x-www-form-urlencoded, or GET
// with the parameters in the query string (kombu; then possibly presigned, auth.go).
// Action names the action and Version, when given, the API version. Lists and maps are
// flattened into numbered members ("AttributeName.1", "Attribute.1.Name",
// "Attribute.1.Value", "SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.DataType"),
// named by the query tags of wire.go. A request posted to a queue's URL
// (/<account>/<queue>) without a QueueUrl parameter names that queue.
//
// The form is decoded into the same request structs as the JSON body, and the same
// handlers run: the protocol is a decoder and an encoder, not a second front. Answers
// are XML as SQS shapes them: <ActionResponse xmlns=…><ActionResult>…</ActionResult>
// <ResponseMetadata><RequestId>…</RequestId></ResponseMetadata></ActionResponse>, lists
// flattened, binary values base64; errors are <ErrorResponse><Error><Type>Sender or
// Receiver</Type><Code>…</Code><Message>…</Message></Error><RequestId>…</RequestId>
// </ErrorResponse> with the query protocol's codes (internal/errcode).
//
// SQS and SNS share this protocol and one endpoint in okiba: which service a request is
// for is decided by its signature's credential scope, then its Version, then its action,
// then whether it names a TopicArn (queryService). SNS requests are authenticated here
// (signed for service "sns") and handed to the SNS front (Options.SNS, package
// internal/sns); without one they are answered with an error in SNS's own namespace
// that says so.

// API versions and XML namespaces of the query protocol.
const (
	sqsVersion   = "2012-11-05"
	snsVersion   = "2010-03-31"
	sqsNamespace = "http://queue.amazonaws.com/doc/" + sqsVersion + "/"
	snsNamespace = "http://sns.amazonaws.com/doc/" + snsVersion + "/"
)

// isQuery reports whether r is a query-protocol request: a form post without an
// X-Amz-Target, or a GET or POST whose query string names an Action (kombu's GETs,
// presigned URLs).
func isQuery(r *http.Request) bool {
	if r.Header.Get("X-Amz-Target") != "" || strings.HasPrefix(r.URL.Path, "/v1/") {
		return false
	}
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		return false
	}
	return r.Method == http.MethodPost && strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") ||
		r.URL.Query().Has("Action")
}

// authParams are the presigned signature's parameters (auth.go): not the action's.
var authParams = []string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
	"X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token"}

// queryParams returns the parameters of a query request: its query string's and, for a
// POST, its form body's, with the presigned signature's taken out. A parameter given
// twice (in one place or in both) is refused, since which one would count is a guess.
// A POST to a queue's path without a QueueUrl names that queue.
func queryParams(r *http.Request, body []byte) (url.Values, *apiError) {
	form, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, newErr(kSerialization, "malformed query string: %v", err)
	}
	if r.Method == http.MethodPost {
		posted, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, newErr(kSerialization, "malformed form body: %v", err)
		}
		for k, vs := range posted {
			form[k] = append(form[k], vs...)
		}
	}
	for _, k := range authParams {
		delete(form, k)
	}
	for k, vs := range form {
		if len(vs) > 1 {
			return nil, newErr(kSerialization, "parameter %s is given %d times; give it once", k, len(vs))
		}
	}
	if !form.Has("QueueUrl") {
		if p := strings.Trim(r.URL.Path, "/"); strings.Count(p, "/") == 1 {
			form.Set("QueueUrl", "/"+p)
		}
	}
	return form, nil
}

// snsOnlyActions are the actions of the SNS API that SQS does not have.
var snsOnlyActions = []string{
	"CreateTopic", "DeleteTopic", "ListTopics", "GetTopicAttributes", "SetTopicAttributes",
	"Subscribe", "Unsubscribe", "ConfirmSubscription", "ListSubscriptions", "ListSubscriptionsByTopic",
	"GetSubscriptionAttributes", "SetSubscriptionAttributes", "Publish", "PublishBatch",
	"TagResource", "UntagResource", "ListTagsForResource", "CreatePlatformApplication",
	"CreatePlatformEndpoint", "CheckIfPhoneNumberIsOptedOut", "GetDataProtectionPolicy",
}

// queryService decides which AWS service a query request is for, "sqs" or "sns": the
// service its signature is scoped to, when it is signed; else the API version it names;
// else its action, when only SNS has it; else whether it names a topic.
func queryService(r *http.Request, form url.Values) string {
	if s := scopeService(r); s == "sns" || s == "sqs" {
		return s
	}
	switch form.Get("Version") {
	case snsVersion:
		return "sns"
	case sqsVersion:
		return "sqs"
	}
	if slices.Contains(snsOnlyActions, form.Get("Action")) || form.Has("TopicArn") {
		return "sns"
	}
	return "sqs"
}

// scopeService is the service of the credential scope r is signed with, in its
// Authorization header or presigned query, or "".
func scopeService(r *http.Request) string {
	cred := r.URL.Query().Get("X-Amz-Credential")
	if h := r.Header.Get("Authorization"); h != "" {
		_, rest, _ := strings.Cut(h, "Credential=")
		cred, _, _ = strings.Cut(rest, ",")
	}
	f := strings.Split(cred, "/")
	if len(f) != 5 {
		return ""
	}
	return f[3]
}

// SNS is the SNS front the dispatch hands SNS requests to, and which shapes the
// messages its subscriptions put into queues when an SQS client receives them.
type SNS interface {
	// ServeSNS answers an SNS request that has been authenticated (its principal is in
	// r's context); form holds its parameters.
	ServeSNS(w http.ResponseWriter, r *http.Request, form url.Values)
	// Deliver turns m, received from queue, into what an SQS receiver gets (an SNS
	// envelope, or a raw message with SNS's attributes) when an SNS subscription put it
	// there, and leaves every other message alone. It reports false when the message is
	// not to be answered (the SNS front has settled it otherwise).
	Deliver(r *http.Request, queue string, m *broker.Message) bool
}

// errSNS answers an SNS request when no SNS front is configured.
var errSNS = newErr(kUnknownOperation, "this is an Amazon SNS request (by its signature's scope, Version %s, action or TopicArn): "+
	"okiba does not serve the SNS API yet, only SQS (Version %s) on this port; see docs/sqs.md", snsVersion, sqsVersion)

// checkVersion refuses an SQS query request for another API version.
func checkVersion(form url.Values) *apiError {
	if v := form.Get("Version"); v != "" && v != sqsVersion {
		return newErr(kNoSuchVersion, "The requested version (%s) of service AmazonSQS does not exist: okiba serves %s.", v, sqsVersion)
	}
	return nil
}

// ---------------------------------------------------------------------------------------
// The form decoder

// decodeForm fills v, a pointer to a request struct of wire.go, from the parameters of a
// query request for action. Missing members stay zero, unknown ones are ignored (as the
// JSON decoder does); a malformed value or list is refused with the parameter's name.
func decodeForm(form url.Values, action string, v any) *apiError {
	d := formDecoder{form: form, action: action, next: map[string]map[string]bool{}}
	for k := range form {
		segs := strings.Split(k, ".")
		for i := 1; i < len(segs); i++ {
			p := strings.Join(segs[:i], ".")
			if d.next[p] == nil {
				d.next[p] = map[string]bool{}
			}
			d.next[p][segs[i]] = true
		}
	}
	return d.structAt("", reflect.ValueOf(v).Elem())
}

type formDecoder struct {
	form   url.Values
	action string
	// next holds, for each dotted prefix of a parameter name, the segments that follow it
	// ("Attribute" → {"1", "2"}; "Attribute.1" → {"Name", "Value"}).
	next map[string]map[string]bool
}

// memberName is a struct field's name in the query protocol, and its query tag's other
// parts (a map's key and value members), or "" for a field the protocol does not carry.
func memberName(f reflect.StructField, action string) (string, []string) {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "-" {
		return "", nil
	}
	if q := f.Tag.Get("query"); q != "" {
		parts := strings.Split(q, ",")
		return strings.ReplaceAll(parts[0], "@", action), parts[1:]
	}
	if name == "" {
		name = f.Name
	}
	return name, nil
}

func (d *formDecoder) structAt(prefix string, v reflect.Value) *apiError {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			if e := d.structAt(prefix, v.Field(i)); e != nil {
				return e
			}
			continue
		}
		name, kv := memberName(f, d.action)
		if name == "" || !f.IsExported() {
			continue
		}
		if e := d.member(prefix+name, kv, v.Field(i)); e != nil {
			return e
		}
	}
	return nil
}

// member decodes the parameter (or flattened parameters) named name into v.
func (d *formDecoder) member(name string, kv []string, v reflect.Value) *apiError {
	switch v.Kind() {
	case reflect.Pointer:
		if _, ok := d.form[name]; !ok {
			return nil
		}
		p := reflect.New(v.Type().Elem())
		if e := d.member(name, kv, p.Elem()); e != nil {
			return e
		}
		v.Set(p)
	case reflect.String:
		if s, ok := d.form[name]; ok {
			v.SetString(s[0])
		}
	case reflect.Int64:
		if s, ok := d.form[name]; ok {
			n, err := strconv.ParseInt(s[0], 10, 64)
			if err != nil {
				return invalidParam("Value %q for parameter %s is invalid. Reason: must be an integer.", s[0], name)
			}
			v.SetInt(n)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 { // []byte: base64
			if s, ok := d.form[name]; ok {
				b, err := base64.StdEncoding.DecodeString(s[0])
				if err != nil {
					return invalidParam("Value for parameter %s is invalid. Reason: must be base64-encoded.", name)
				}
				v.SetBytes(b)
			}
			return nil
		}
		n, e := d.count(name)
		if e != nil || n == 0 {
			return e
		}
		list := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			el := name + "." + strconv.Itoa(i+1)
			var e *apiError
			if list.Index(i).Kind() == reflect.Struct {
				e = d.structAt(el+".", list.Index(i))
			} else {
				if _, ok := d.form[el]; !ok {
					return missingParam(el)
				}
				e = d.member(el, nil, list.Index(i))
			}
			if e != nil {
				return e
			}
		}
		v.Set(list)
	case reflect.Map:
		return d.mapAt(name, kv, v)
	default:
		panic("sqs: a request member of kind " + v.Kind().String() + " has no query form") // a bug of wire.go
	}
	return nil
}

// mapAt decodes the flattened map name.N.<key>/name.N.<value> into v.
func (d *formDecoder) mapAt(name string, kv []string, v reflect.Value) *apiError {
	if len(kv) != 2 {
		panic("sqs: map member " + name + " has no key and value names in its query tag") // a bug of wire.go
	}
	n, e := d.count(name)
	if e != nil || n == 0 {
		return e
	}
	m := reflect.MakeMapWithSize(v.Type(), n)
	for i := range n {
		el := name + "." + strconv.Itoa(i+1) + "."
		key, ok := d.form[el+kv[0]]
		if !ok {
			return missingParam(el + kv[0])
		}
		if m.MapIndex(reflect.ValueOf(key[0])).IsValid() {
			return invalidParam("Value %q for parameter %s is invalid. Reason: it is given twice in %s.", key[0], el+kv[0], name)
		}
		val := reflect.New(v.Type().Elem()).Elem()
		if val.Kind() == reflect.Struct {
			e = d.structAt(el+kv[1]+".", val)
		} else {
			if _, ok := d.form[el+kv[1]]; !ok {
				return missingParam(el + kv[1])
			}
			e = d.member(el+kv[1], nil, val)
		}
		if e != nil {
			return e
		}
		m.SetMapIndex(reflect.ValueOf(key[0]), val)
	}
	v.Set(m)
	return nil
}

// count returns how many members the flattened list name has: they must be numbered
// 1, 2, … without gaps, as every SDK numbers them.
func (d *formDecoder) count(name string) (int, *apiError) {
	segs := d.next[name]
	if len(segs) == 0 {
		return 0, nil
	}
	for s := range segs {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > len(segs) || strconv.Itoa(n) != s {
			return 0, newErr(kSerialization, "parameter %s.%s: the members of %s are numbered 1, 2, 3, … without gaps", name, s, name)
		}
	}
	return len(segs), nil
}

// ---------------------------------------------------------------------------------------
// The XML encoder

// encodeXML writes the answer out to action in the query protocol's XML.
func encodeXML(b *bytes.Buffer, action string, out any, requestID string) {
	b.WriteString(`<?xml version="1.0"?>` + "\n")
	b.WriteString("<" + action + `Response xmlns="` + sqsNamespace + `">`)
	if v := reflect.Indirect(reflect.ValueOf(out)); v.IsValid() && v.NumField() > 0 {
		b.WriteString("<" + action + "Result>")
		writeStruct(b, action, v)
		b.WriteString("</" + action + "Result>")
	}
	b.WriteString("<ResponseMetadata><RequestId>")
	escape(b, requestID)
	b.WriteString("</RequestId></ResponseMetadata></" + action + "Response>")
}

// encodeXMLError writes an error answer in the query protocol's XML, in the namespace
// of the service the request was for.
func encodeXMLError(b *bytes.Buffer, namespace string, e *apiError, requestID string) {
	b.WriteString(`<?xml version="1.0"?>` + "\n")
	b.WriteString(`<ErrorResponse xmlns="` + namespace + `"><Error><Type>` + e.fault() + "</Type><Code>")
	escape(b, e.Query)
	b.WriteString("</Code><Message>")
	escape(b, e.Message)
	b.WriteString("</Message><Detail/></Error><RequestId>")
	escape(b, requestID)
	b.WriteString("</RequestId></ErrorResponse>")
}

func escape(b *bytes.Buffer, s string) { _ = xml.EscapeText(b, []byte(s)) }

func writeStruct(b *bytes.Buffer, action string, v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		fv := v.Field(i)
		if f.Anonymous {
			writeStruct(b, action, fv)
			continue
		}
		name, kv := memberName(f, action)
		if name == "" || !f.IsExported() || (strings.Contains(f.Tag.Get("json"), ",omitempty") && fv.IsZero()) {
			continue
		}
		writeMember(b, action, name, kv, fv)
	}
}

// writeMember writes one member: a scalar as one element, a list as one element per
// member (flattened), a map as one element per entry with its key and value inside.
func writeMember(b *bytes.Buffer, action, name string, kv []string, v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			writeMember(b, action, name, kv, v.Elem())
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			element(b, name, base64.StdEncoding.EncodeToString(v.Bytes()))
			return
		}
		for i := range v.Len() {
			writeMember(b, action, name, nil, v.Index(i))
		}
	case reflect.Map:
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		slices.Sort(keys)
		for _, k := range keys {
			b.WriteString("<" + name + ">")
			element(b, kv[0], k)
			writeMember(b, action, kv[1], nil, v.MapIndex(reflect.ValueOf(k)))
			b.WriteString("</" + name + ">")
		}
	case reflect.Struct:
		b.WriteString("<" + name + ">")
		writeStruct(b, action, v)
		b.WriteString("</" + name + ">")
	case reflect.String:
		element(b, name, v.String())
	case reflect.Int64, reflect.Int:
		element(b, name, strconv.FormatInt(v.Int(), 10))
	case reflect.Bool:
		element(b, name, strconv.FormatBool(v.Bool()))
	default:
		panic("sqs: an answer member of kind " + v.Kind().String() + " has no XML form") // a bug of wire.go
	}
}

func element(b *bytes.Buffer, name, text string) {
	b.WriteString("<" + name + ">")
	escape(b, text)
	b.WriteString("</" + name + ">")
}
