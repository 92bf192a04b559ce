package sqs

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/consumers"
	"github.com/okiba/okiba/internal/names"
	"github.com/okiba/okiba/queue"
)

// Names of attributes the front adds or keeps for itself.
const (
	// bodyEncodingAttr marks a body that is not valid SQS text (not UTF-8, or with
	// characters XML does not allow) and reaches SQS receivers base64-encoded.
	bodyEncodingAttr = "okiba.BodyEncoding"
	// internalPrefix starts attributes the front stores for SQS system attributes; they
	// are never shown as message attributes.
	internalPrefix = "okiba.sqs."
	traceHeaderKey = internalPrefix + "AWSTraceHeader"
	reservedPrefix = "okiba."
)

// SQS's limits on requests, as its API states them; the queue attributes of the same
// names (attrs.go) share them.
const (
	maxBatch        = 10
	maxMessageAttrs = 10
	maxDelaySeconds = 900
	// maxVisibilitySeconds is 12 hours, the same as okiba's queue.MaxVisibilityTimeout.
	maxVisibilitySeconds = 43200
	maxWaitSeconds       = 20
)

// validSQSText reports whether s holds only the characters SQS accepts in a message:
// #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF.
func validSQSText(s string) bool {
	// Most bodies are printable ASCII, which needs no decoding: skip it eight bytes at
	// a time, then a byte at a time, and decode runes only from the first byte that is
	// not.
	i := plainPrefix(s)
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 {
			if c == 0x9 || c == 0xA || c == 0xD {
				continue
			}
			break
		}
	}
	s = s[i:]
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return false
			}
		}
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF:
		case r >= 0xE000 && r <= 0xFFFD:
		case r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}

var (
	attrNameRE  = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,256}$`)
	numberRE    = regexp.MustCompile(`^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$`)
	groupIDRE   = regexp.MustCompile(`^[\x21-\x7e]{1,128}$`)
	attemptIDRE = regexp.MustCompile(`^[\x21-\x7e]{1,128}$`)
)

// validBatchID reports whether id is a valid batch entry id: 1 to 80 characters from
// A-Z a-z 0-9 _ - (a loop, where a regular expression cost more than the rest of the
// batch's checks).
func validBatchID(id string) bool {
	if len(id) == 0 || len(id) > 80 {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

func invalidParam(format string, args ...any) *apiError {
	return newErr(kInvalidParameterValue, format, args...)
}

// missingParam is SQS's answer to a request without a required parameter; one place so
// that every action words it the same.
func missingParam(name string) *apiError {
	return newErr(kMissingParameter, "The request must contain the parameter %s.", name)
}

// checkAttrName applies SQS's rules for message attribute names, and keeps "okiba." for
// okiba's own attributes.
func checkAttrName(n string) *apiError {
	low := strings.ToLower(n)
	switch {
	case !attrNameRE.MatchString(n):
		return invalidParam("Message attribute name %q is invalid: use 1 to 256 characters from A-Z a-z 0-9 _ - .", n)
	case strings.HasPrefix(low, "aws.") || strings.HasPrefix(low, "amazon."):
		return invalidParam("Message attribute name %q is invalid: names starting with AWS. or Amazon. are reserved.", n)
	case strings.HasPrefix(low, reservedPrefix):
		return invalidParam("Message attribute name %q is invalid: names starting with okiba. are reserved for okiba.", n)
	case strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".") || strings.Contains(n, ".."):
		return invalidParam("Message attribute name %q is invalid: it must not start or end with a period or contain two periods in a row.", n)
	}
	return nil
}

// parseAttr validates one message attribute value and returns it in both forms: as
// okiba stores it and as SQS digests it.
func parseAttr(name string, v wireAttrValue) (queue.Attr, attrValue, *apiError) {
	dt := v.DataType
	base, custom, hasCustom := strings.Cut(dt, ".")
	if dt == "" {
		return queue.Attr{}, attrValue{}, invalidParam("Message attribute %q must have a DataType.", name)
	}
	if (base != "String" && base != "Number" && base != "Binary") || len(dt) > 256 || (hasCustom && (custom == "" || !printableASCII(custom))) {
		return queue.Attr{}, attrValue{}, invalidParam("Message attribute %q has an invalid DataType %q: use String, Number or Binary, optionally with a .custom suffix.", name, dt)
	}
	if len(v.StringListValues) > 0 || len(v.BinaryListValues) > 0 {
		return queue.Attr{}, attrValue{}, invalidParam("Message attribute %q: StringListValues and BinaryListValues are not supported.", name)
	}
	if base == "Binary" {
		if len(v.BinaryValue) == 0 || v.StringValue != nil {
			return queue.Attr{}, attrValue{}, invalidParam("Message attribute %q must contain a non-empty value of type 'Binary' (BinaryValue) and no StringValue.", name)
		}
		return queue.Attr{Name: name, Type: dt, Value: v.BinaryValue}, attrValue{DataType: dt, BinaryValue: v.BinaryValue}, nil
	}
	if v.StringValue == nil || *v.StringValue == "" || v.BinaryValue != nil {
		return queue.Attr{}, attrValue{}, invalidParam("Message attribute %q must contain a non-empty value of type '%s' (StringValue) and no BinaryValue.", name, base)
	}
	s := *v.StringValue
	if !validSQSText(s) {
		return queue.Attr{}, attrValue{}, newErr(kInvalidMessageContents, "Message attribute %q has characters SQS does not allow; valid are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF.", name)
	}
	if base == "Number" && (!numberRE.MatchString(s) || len(strings.TrimLeft(s, "+-")) > 40) {
		return queue.Attr{}, attrValue{}, invalidParam("Message attribute %q: %q is not a valid Number.", name, s)
	}
	return queue.Attr{Name: name, Type: dt, Value: []byte(s)}, attrValue{DataType: dt, StringValue: s}, nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// prepareSend validates one message for queue qi and builds what the broker stores and
// the digests the answer carries. It changes nothing.
func prepareSend(qi broker.QueueInfo, e *sendEntry) (queue.SendInput, sendMessageOut, *apiError) {
	var out sendMessageOut
	fifo := names.IsFIFO(qi.Name)
	if e.MessageBody == nil || *e.MessageBody == "" {
		return queue.SendInput{}, out, missingParam("MessageBody")
	}
	body := *e.MessageBody
	if !validSQSText(body) {
		return queue.SendInput{}, out, newErr(kInvalidMessageContents, "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF.")
	}
	in := queue.SendInput{Delay: -1, Payload: queue.Payload{Body: []byte(body)}}
	out.MD5OfMessageBody = md5HexBytes(in.Payload.Body)
	if e.DelaySeconds != nil {
		d := *e.DelaySeconds
		switch {
		case d < 0 || d > maxDelaySeconds:
			return queue.SendInput{}, out, invalidParam("Value %d for parameter DelaySeconds is invalid. Reason: must be between 0 and %d.", d, maxDelaySeconds)
		case fifo && d != 0:
			return queue.SendInput{}, out, invalidParam("Value %d for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type: FIFO queues take a delay per queue (DelaySeconds attribute), not per message.", d)
		case !fifo:
			in.Delay = d * 1000
		}
	}
	if e.MessageGroupID != nil {
		g := *e.MessageGroupID
		if !groupIDRE.MatchString(g) {
			return queue.SendInput{}, out, invalidParam("Value %q for parameter MessageGroupId is invalid. Reason: 1 to 128 characters from alphanumerics and punctuation.", g)
		}
		in.Payload.Group = g
	} else if fifo {
		return queue.SendInput{}, out, missingParam("MessageGroupId")
	}
	switch {
	case e.MessageDeduplicationID != nil && !fifo:
		return queue.SendInput{}, out, invalidParam("The request include parameter MessageDeduplicationId that is not valid for this queue type: standard queues do not deduplicate.")
	case e.MessageDeduplicationID != nil:
		d := *e.MessageDeduplicationID
		if !groupIDRE.MatchString(d) {
			return queue.SendInput{}, out, invalidParam("Value %q for parameter MessageDeduplicationId is invalid. Reason: 1 to 128 characters from alphanumerics and punctuation.", d)
		}
		in.Payload.DedupID = d
	case fifo && !qi.Config.ContentDedup:
		return queue.SendInput{}, out, invalidParam("The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly.")
	case fifo:
		sum := sha256.Sum256(in.Payload.Body)
		in.Payload.DedupID = hex.EncodeToString(sum[:])
	}
	digest, ae := parseMessageAttrs(e.MessageAttributes, &in.Payload)
	if ae != nil {
		return queue.SendInput{}, out, ae
	}
	sys, ae := parseSystemAttrs(e.MessageSystemAttributes, &in.Payload)
	if ae != nil {
		return queue.SendInput{}, out, ae
	}
	if size := in.Payload.Size(); size > qi.Config.MaxMessageSize {
		return queue.SendInput{}, out, invalidParam("One or more parameters are invalid. Reason: Message must be shorter than %d bytes (body plus attribute names, types and values; this one is %d).", qi.Config.MaxMessageSize+1, size)
	}
	out.MD5OfMessageAttributes = md5OfAttributes(digest)
	out.MD5OfMessageSystemAttributes = md5OfAttributes(sys)
	return in, out, nil
}

// parseMessageAttrs validates a message's attributes, in name order so that the first
// bad one named is always the same, adds them to p and returns them as SQS digests them.
func parseMessageAttrs(attrs map[string]wireAttrValue, p *queue.Payload) (map[string]attrValue, *apiError) {
	if len(attrs) > maxMessageAttrs {
		return nil, invalidParam("Number of message attributes [%d] exceeds the allowed maximum [%d].", len(attrs), maxMessageAttrs)
	}
	digest := make(map[string]attrValue, len(attrs))
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		if ae := checkAttrName(name); ae != nil {
			return nil, ae
		}
		a, d, ae := parseAttr(name, attrs[name])
		if ae != nil {
			return nil, ae
		}
		p.Attrs = append(p.Attrs, a)
		digest[name] = d
	}
	return digest, nil
}

// parseSystemAttrs validates a message's system attributes (AWSTraceHeader is the only
// one), stores them in p under internal names that receivers never see as message
// attributes, and returns them as SQS digests them.
func parseSystemAttrs(attrs map[string]wireAttrValue, p *queue.Payload) (map[string]attrValue, *apiError) {
	sys := make(map[string]attrValue, len(attrs))
	for name, v := range attrs {
		if name != "AWSTraceHeader" {
			return nil, invalidParam("Message system attribute %q is not supported: the only one is AWSTraceHeader.", name)
		}
		if v.DataType != "String" {
			return nil, invalidParam("Message system attribute AWSTraceHeader must have DataType String.")
		}
		_, d, ae := parseAttr(name, v)
		if ae != nil {
			return nil, ae
		}
		p.Attrs = append(p.Attrs, queue.Attr{Name: traceHeaderKey, Type: "String", Value: []byte(d.StringValue)})
		sys[name] = d
	}
	return sys, nil
}

func seqNumber(seq uint64) string { return fmt.Sprintf("%020d", seq) }

func (f *Front) sendMessage(q *request) (any, *apiError) {
	var in sendMessageIn
	if e := decodeIn(q, &in); e != nil {
		return nil, e
	}
	qi, e := f.queueInfo(in.QueueURL)
	if e != nil {
		return nil, e
	}
	si, out, e := prepareSend(qi, &in.sendEntry)
	if e != nil {
		return nil, e
	}
	res, err := f.b.Send(q.r.Context(), qi.Name, []queue.SendInput{si})
	if err != nil {
		return nil, f.errorOf(err, qi.Name)
	}
	if res[0].Err != nil {
		return nil, f.errorOf(res[0].Err, qi.Name)
	}
	out.fill(res[0], names.IsFIFO(qi.Name))
	return out, nil
}

// fill completes the answer to a send from the broker's result: the message id and, on
// a FIFO queue, its sequence number (the original's for a deduplicated send).
func (o *sendMessageOut) fill(r queue.SendResult, fifo bool) {
	o.MessageID = queue.FormatID(r.ID)
	if fifo && r.Seq != 0 {
		o.SequenceNumber = seqNumber(r.Seq)
	}
}

// batchEntry is an entry of a batch action: each carries the Id its result is reported
// under.
type batchEntry interface{ entryID() *string }

func (e sendEntry) entryID() *string    { return e.ID }
func (e receiptEntry) entryID() *string { return e.ID }

// checkBatchIDs applies the request-level rules of every batch action. It runs before the
// queue is resolved, so that a malformed batch is reported as such even for a missing
// queue.
func checkBatchIDs[E batchEntry](entries []E) *apiError {
	if len(entries) == 0 {
		return newErr(kEmptyBatch, "There should be at least one entry in the request.")
	}
	if len(entries) > maxBatch {
		return newErr(kTooManyEntries, "Maximum number of entries per request are %d. You have sent %d.", maxBatch, len(entries))
	}
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		id := deref(e.entryID())
		if !validBatchID(id) {
			return newErr(kInvalidBatchEntryID, "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long (%q).", id)
		}
		if seen[id] {
			return newErr(kIdsNotDistinct, "Id %s repeated.", id)
		}
		seen[id] = true
	}
	return nil
}

func failed(id string, e *apiError) batchError {
	return batchError{ID: id, SenderFault: !e.Receiver && e.Code != kRequestThrottled.Code, Code: e.Code, Message: e.Message}
}

func (f *Front) sendMessageBatch(q *request) (any, *apiError) {
	var in sendMessageBatchIn
	if e := decodeIn(q, &in); e != nil {
		return nil, e
	}
	if e := checkBatchIDs(in.Entries); e != nil {
		return nil, e
	}
	qi, e := f.queueInfo(in.QueueURL)
	if e != nil {
		return nil, e
	}
	out := sendMessageBatchOut{Successful: make([]sendBatchResultEntry, 0, len(in.Entries)), Failed: []batchError{}}
	msgs := make([]queue.SendInput, 0, len(in.Entries))
	outs := make([]sendBatchResultEntry, 0, len(in.Entries))
	var total int64
	for i := range in.Entries {
		ent := &in.Entries[i]
		if ent.MessageBody != nil {
			total += int64(len(*ent.MessageBody))
		}
		for n, a := range ent.MessageAttributes {
			total += int64(len(n) + len(a.DataType) + len(deref(a.StringValue)) + len(a.BinaryValue))
		}
		si, o, e := prepareSend(qi, ent)
		if e != nil {
			out.Failed = append(out.Failed, failed(*ent.ID, e))
			continue
		}
		msgs = append(msgs, si)
		outs = append(outs, sendBatchResultEntry{ID: *ent.ID, sendMessageOut: o})
	}
	if total > sqsMaxMessageSize {
		return nil, newErr(kBatchTooLong, "Batch requests cannot be longer than %d bytes. You have sent %d bytes.", sqsMaxMessageSize, total)
	}
	if len(msgs) == 0 {
		return out, nil
	}
	res, err := f.b.Send(q.r.Context(), qi.Name, msgs)
	if err != nil {
		return nil, f.errorOf(err, qi.Name)
	}
	fifo := names.IsFIFO(qi.Name)
	full := 0
	for i, r := range res {
		if r.Err != nil {
			if errors.Is(r.Err, queue.ErrQueueFull) {
				full++
			}
			out.Failed = append(out.Failed, failed(outs[i].ID, f.errorOf(r.Err, qi.Name)))
			continue
		}
		o := outs[i]
		o.fill(r, fifo)
		out.Successful = append(out.Successful, o)
	}
	if full == len(in.Entries) {
		// Nothing was sent and nothing else was wrong: answer as a whole so that the
		// SDK's retry (throttling back-off) sends the batch again.
		return nil, f.errorOf(res[0].Err, qi.Name)
	}
	return out, nil
}

// receiveSpec is a validated ReceiveMessage request.
type receiveSpec struct {
	max       int
	vis, wait time.Duration // negative: the queue's
	sys       map[string]bool
	allSys    bool
	attrNames []string // "All", ".*", "prefix.*" or names
	attemptID string
}

var systemAttrNames = []string{
	"SenderId", "SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp",
	"SequenceNumber", "MessageDeduplicationId", "MessageGroupId", "AWSTraceHeader", "DeadLetterQueueSourceArn",
}

func parseReceive(in *receiveMessageIn, fifo bool) (receiveSpec, *apiError) {
	s := receiveSpec{max: 1, vis: -1, wait: -1, sys: map[string]bool{}}
	if in.MaxNumberOfMessages != nil {
		n := *in.MaxNumberOfMessages
		if n < 1 || n > maxBatch {
			return s, invalidParam("Value %d for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.", n)
		}
		s.max = int(n)
	}
	if in.VisibilityTimeout != nil {
		n := *in.VisibilityTimeout
		if n < 0 || n > maxVisibilitySeconds {
			return s, invalidParam("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and %d, if provided.", n, maxVisibilitySeconds)
		}
		s.vis = time.Duration(n) * time.Second
	}
	if in.WaitTimeSeconds != nil {
		n := *in.WaitTimeSeconds
		if n < 0 || n > maxWaitSeconds {
			return s, invalidParam("Value %d for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= %d, if provided.", n, maxWaitSeconds)
		}
		s.wait = time.Duration(n) * time.Second
	}
	for _, n := range slices.Concat(in.AttributeNames, in.MessageSystemAttributeNames) {
		switch {
		case n == "All":
			s.allSys = true
		case slices.Contains(systemAttrNames, n):
			s.sys[n] = true
		case slices.Contains(allQueueAttrs, n):
			// Queue attribute names are accepted here and ignored, as SQS does.
		default:
			return s, newErr(kInvalidAttributeName, "Unknown Attribute %s.", n)
		}
	}
	for _, n := range in.MessageAttributeNames {
		if n == "" || len(n) > 256 {
			return s, invalidParam("Message attribute name %q is invalid.", n)
		}
	}
	s.attrNames = in.MessageAttributeNames
	if in.ReceiveRequestAttemptID != nil && fifo {
		if !attemptIDRE.MatchString(*in.ReceiveRequestAttemptID) {
			return s, invalidParam("Value %q for parameter ReceiveRequestAttemptId is invalid. Reason: 1 to 128 characters from alphanumerics and punctuation.", *in.ReceiveRequestAttemptID)
		}
		s.attemptID = *in.ReceiveRequestAttemptID
	}
	return s, nil
}

// wantAttr reports whether a message attribute was asked for.
func (s *receiveSpec) wantAttr(name string) bool {
	for _, n := range s.attrNames {
		switch {
		case n == "All" || n == ".*":
			return true
		case strings.HasSuffix(n, ".*"):
			if strings.HasPrefix(name, strings.TrimSuffix(n, "*")) {
				return true
			}
		case n == name:
			return true
		}
	}
	return false
}

func (s *receiveSpec) wantSys(name string) bool { return s.allSys || s.sys[name] }

// wireMsg renders a leased message for an SQS receiver.
func (f *Front) wireMsg(m *broker.Message, fifo bool, s *receiveSpec) wireMessage {
	w := wireMessage{MessageID: queue.FormatID(m.ID), ReceiptHandle: m.Receipt}
	// Made once a message has attributes: most have none.
	var attrs map[string]wireAttrValue
	var digest map[string]attrValue
	add := func(name string, wv wireAttrValue, dv attrValue) {
		if attrs == nil {
			attrs, digest = map[string]wireAttrValue{}, map[string]attrValue{}
		}
		attrs[name], digest[name] = wv, dv
	}
	// validSQSText also rejects invalid UTF-8, so one pass over one copy decides.
	if body := string(m.Payload.Body); validSQSText(body) {
		w.Body = body
		w.MD5OfBody = md5HexBytes(m.Payload.Body)
	} else {
		w.Body = base64.StdEncoding.EncodeToString(m.Payload.Body)
		v := "base64"
		add(bodyEncodingAttr, wireAttrValue{DataType: "String", StringValue: &v}, attrValue{DataType: "String", StringValue: v})
	}
	if w.MD5OfBody == "" {
		w.MD5OfBody = md5Hex(w.Body)
	}
	trace := ""
	for _, a := range m.Payload.Attrs {
		if a.Name == traceHeaderKey {
			trace = string(a.Value)
			continue
		}
		if strings.HasPrefix(a.Name, internalPrefix) || a.Name == bodyEncodingAttr || (!s.wantAttr(a.Name) && !brokerMark(m, a.Name)) {
			continue
		}
		if isBinary(a.Type) {
			add(a.Name, wireAttrValue{DataType: a.Type, BinaryValue: a.Value}, attrValue{DataType: a.Type, BinaryValue: a.Value})
			continue
		}
		v := strings.ToValidUTF8(string(a.Value), "\uFFFD")
		add(a.Name, wireAttrValue{DataType: a.Type, StringValue: &v}, attrValue{DataType: a.Type, StringValue: v})
	}
	if len(attrs) > 0 {
		w.MessageAttributes = attrs
		w.MD5OfMessageAttributes = md5OfAttributes(digest)
	}
	var sys map[string]string
	set := func(name, v string) {
		if v != "" && s.wantSys(name) {
			if sys == nil {
				sys = map[string]string{}
			}
			sys[name] = v
		}
	}
	if !s.allSys && len(s.sys) == 0 {
		return w // no system attribute asked for: nothing more to format
	}
	set("SenderId", f.opts.AccountID)
	set("SentTimestamp", strconv.FormatInt(m.EnqueuedAt.UnixMilli(), 10))
	set("ApproximateReceiveCount", strconv.FormatUint(uint64(m.Deliveries), 10))
	first := m.FirstDelivered
	if first.IsZero() {
		first = f.now()
	}
	set("ApproximateFirstReceiveTimestamp", strconv.FormatInt(first.UnixMilli(), 10))
	set("MessageGroupId", m.Payload.Group)
	set("AWSTraceHeader", trace)
	if fifo {
		set("MessageDeduplicationId", m.Payload.DedupID)
		set("SequenceNumber", seqNumber(m.Seq))
	}
	if m.Dead != nil && m.Dead.SourceName != "" {
		set("DeadLetterQueueSourceArn", f.queueARN(m.Dead.SourceName))
	}
	if len(sys) > 0 {
		w.Attributes = sys
	}
	return w
}

// brokerMark reports whether attribute name is one of the broker's marks of a body it
// could not read, which stands in for the body: like okiba.BodyEncoding it is returned
// whatever MessageAttributeNames asks for, so that no receiver takes the empty body for
// the message's. A producer's attribute of that name on a message with a body is not.
func brokerMark(m *broker.Message, name string) bool {
	return len(m.Payload.Body) == 0 && (name == broker.HeaderCorrupt || name == broker.HeaderCorruptLocation)
}

func (f *Front) receiveMessage(q *request) (any, *apiError) {
	var in receiveMessageIn
	if e := decodeIn(q, &in); e != nil {
		return nil, e
	}
	qi, e := f.queueInfo(in.QueueURL)
	if e != nil {
		return nil, e
	}
	fifo := names.IsFIFO(qi.Name)
	spec, e := parseReceive(&in, fifo)
	if e != nil {
		return nil, e
	}
	ctx := q.r.Context()
	key := keyOf(qi)
	if msgs, ok := f.replayAttempt(ctx, qi, key, spec.attemptID); ok {
		return receiveMessageOut{Messages: msgs}, nil
	}
	rec := f.opts.Consumers.Receiving(qi.Name, f.who(q.r), spec.wait != 0, f.opts.Clock.Now())
	msgs, err := f.b.Receive(ctx, qi.Name, broker.ReceiveOptions{Max: spec.max, Wait: spec.wait, Visibility: spec.vis})
	if err != nil {
		rec.Done(nil, time.Time{}, f.opts.Clock.Now())
		return nil, f.errorOf(err, qi.Name)
	}
	var receipts []string
	var deadline time.Time
	for i := range msgs {
		receipts = append(receipts, msgs[i].Receipt)
		deadline = later(deadline, msgs[i].LeaseDeadline)
	}
	rec.Done(receipts, deadline, f.opts.Clock.Now())
	out := receiveMessageOut{}
	if f.opts.SNS != nil { // messages of SNS subscriptions are shaped as SNS delivers them
		kept := msgs[:0]
		for i := range msgs {
			if f.opts.SNS.Deliver(q.r, qi.Name, &msgs[i]) {
				kept = append(kept, msgs[i])
			}
		}
		msgs = kept
	}
	for i := range msgs {
		out.Messages = append(out.Messages, f.wireMsg(&msgs[i], fifo, &spec))
	}
	f.rememberAttempt(key, &spec, msgs, out.Messages)
	return out, nil
}

// replayAttempt answers a FIFO receive retried with the same ReceiveRequestAttemptId from
// memory while the first answer still holds. An answer that no longer holds is
// forgotten, so that the retry is served as a new receive.
func (f *Front) replayAttempt(ctx context.Context, qi broker.QueueInfo, key queueKey, id string) ([]wireMessage, bool) {
	if id == "" {
		return nil, false
	}
	at := f.attempts.get(key, id, f.now())
	if at == nil {
		return nil, false
	}
	if msgs, ok := f.replay(ctx, qi, at); ok {
		return msgs, true
	}
	f.attempts.forget(key, id)
	return nil, false
}

// rememberAttempt keeps the answer to a FIFO receive that named a
// ReceiveRequestAttemptId, with what each message must still be for a retry to get the
// same answer. An empty answer is not kept: a retry of it may as well receive anew.
func (f *Front) rememberAttempt(key queueKey, s *receiveSpec, msgs []broker.Message, wire []wireMessage) {
	if s.attemptID == "" || len(msgs) == 0 {
		return
	}
	now := f.now()
	at := &attempt{key: key, id: s.attemptID, at: now, vis: s.vis, msgs: wire, checks: make([]leaseCheck, len(msgs))}
	for i, m := range msgs {
		at.checks[i] = leaseCheck{id: m.ID, deliveries: m.Deliveries}
		at.bytes += int64(len(wire[i].Body)) + 512
	}
	f.attempts.put(at, now)
}

// replay answers a retried FIFO receive with the messages of the first attempt if none
// of them has been deleted, made visible, or received again since; it restarts their
// visibility timeout, as SQS does.
func (f *Front) replay(ctx context.Context, qi broker.QueueInfo, at *attempt) ([]wireMessage, bool) {
	now := f.now().UnixMilli()
	receipts := make([]string, len(at.checks))
	for i, c := range at.checks {
		pm, err := f.b.GetMessage(ctx, qi.Name, c.id)
		if err != nil || pm.State != queue.StateInFlight || pm.Deliveries != c.deliveries || pm.VisibleAt <= now {
			return nil, false
		}
		receipts[i] = at.msgs[i].ReceiptHandle
	}
	vis := at.vis
	if vis < 0 {
		vis = qi.Config.VisibilityTimeout
	}
	errs, err := f.b.Extend(ctx, qi.Name, receipts, vis)
	if err != nil {
		return nil, false
	}
	for _, e := range errs {
		if e != nil {
			return nil, false
		}
	}
	return at.msgs, true
}

// settleHeader reports on a DeleteMessage whether it settled the message.
const settleHeader = "X-Okiba-Settled"

func (f *Front) deleteMessage(q *request) (any, *apiError) {
	var in deleteMessageIn
	if e := decodeIn(q, &in); e != nil {
		return nil, e
	}
	qi, e := f.queueInfo(in.QueueURL)
	if e != nil {
		return nil, e
	}
	if deref(in.ReceiptHandle) == "" {
		return nil, missingParam("ReceiptHandle")
	}
	errs, err := f.b.Ack(q.r.Context(), qi.Name, []string{*in.ReceiptHandle})
	if err != nil {
		return nil, f.errorOf(err, qi.Name)
	}
	f.opts.Consumers.Settled(qi.Name, []string{*in.ReceiptHandle})
	settled, ae := f.deleteResult(errs[0], q.action, qi.Name, *in.ReceiptHandle)
	if ae != nil {
		return nil, ae
	}
	q.header.Set(settleHeader, strconv.FormatBool(settled))
	return empty{}, nil
}

// deleteResult interprets one ack of receipt in action: a stale receipt on a standard
// queue is a success that settled nothing (as SQS answers), on a FIFO queue an expired
// handle (errorAbout).
func (f *Front) deleteResult(err error, action, name, receipt string) (bool, *apiError) {
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, queue.ErrReceiptStale) && !names.IsFIFO(name):
		return false, nil
	}
	return false, f.errorAbout(err, action, name, receipt)
}

func (f *Front) deleteMessageBatch(q *request) (any, *apiError) {
	rb, e := f.openReceiptBatch(q, nil)
	if e != nil {
		return nil, e
	}
	if len(rb.receipts) == 0 {
		return rb.out, nil
	}
	errs, err := f.b.Ack(q.r.Context(), rb.qi.Name, rb.receipts)
	if err != nil {
		return nil, f.errorOf(err, rb.qi.Name)
	}
	f.opts.Consumers.Settled(rb.qi.Name, rb.receipts)
	var unsettled []string
	rb.record(errs, func(i int, err error) *apiError {
		settled, ae := f.deleteResult(err, q.action, rb.qi.Name, rb.receipts[i])
		if ae == nil && !settled {
			unsettled = append(unsettled, rb.ids[i])
		}
		return ae
	})
	if len(unsettled) > 0 {
		q.header.Set("X-Okiba-Unsettled", strings.Join(unsettled, ","))
	}
	return rb.out, nil
}

// receiptBatch is a DeleteMessageBatch or ChangeMessageVisibilityBatch request, its
// queue resolved and its entries sorted: those that passed their own checks wait for the
// broker (receipts and ids, in request order); the others are already in out.Failed.
type receiptBatch struct {
	qi       broker.QueueInfo
	receipts []string
	ids      []string
	out      receiptBatchOut
}

// openReceiptBatch decodes a receipt batch, applies the batch rules, resolves the queue
// and sorts the entries. An entry fails at once without a ReceiptHandle or when check
// (which may be nil) rejects it; check sees only entries with a ReceiptHandle, and sees
// them in order.
func (f *Front) openReceiptBatch(q *request, check func(e *receiptEntry) *apiError) (*receiptBatch, *apiError) {
	var in receiptBatchIn
	if e := decodeIn(q, &in); e != nil {
		return nil, e
	}
	if e := checkBatchIDs(in.Entries); e != nil {
		return nil, e
	}
	qi, e := f.queueInfo(in.QueueURL)
	if e != nil {
		return nil, e
	}
	rb := &receiptBatch{qi: qi, out: receiptBatchOut{Successful: []idEntry{}, Failed: []batchError{}}}
	for i := range in.Entries {
		ent := &in.Entries[i]
		if ae := entryError(ent, check); ae != nil {
			rb.out.Failed = append(rb.out.Failed, failed(*ent.ID, ae))
			continue
		}
		rb.receipts = append(rb.receipts, *ent.ReceiptHandle)
		rb.ids = append(rb.ids, *ent.ID)
	}
	return rb, nil
}

// entryError is why one receipt batch entry fails before reaching the broker, or nil.
func entryError(ent *receiptEntry, check func(e *receiptEntry) *apiError) *apiError {
	if deref(ent.ReceiptHandle) == "" {
		return missingParam("ReceiptHandle")
	}
	if check == nil {
		return nil
	}
	return check(ent)
}

// record adds the broker's per-entry results (errs[i] is about ids[i] and receipts[i])
// to the answer; result interprets the i-th: nil is a success.
func (rb *receiptBatch) record(errs []error, result func(i int, err error) *apiError) {
	for i, err := range errs {
		if ae := result(i, err); ae != nil {
			rb.out.Failed = append(rb.out.Failed, failed(rb.ids[i], ae))
			continue
		}
		rb.out.Successful = append(rb.out.Successful, idEntry{ID: rb.ids[i]})
	}
}

// visibilityResult interprets one extend of receipt in action (ChangeMessageVisibility
// or its batch) as SQS answers it: a lease that merely ran out, its message neither
// deleted nor received again since, is a success that changes nothing; a message
// deleted or received again is refused in the action's words (internal/errcode).
func (f *Front) visibilityResult(ctx context.Context, err error, action string, qi broker.QueueInfo, receipt string) *apiError {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, queue.ErrReceiptStale) && f.leaseRanOut(ctx, qi, receipt):
		return nil
	}
	return f.errorAbout(err, action, qi.Name, receipt)
}

// leaseRanOut reports whether the stale receipt names a lease that ended by its
// visibility timeout alone: its message is still in the queue and was delivered no
// more often than the lease says.
func (f *Front) leaseRanOut(ctx context.Context, qi broker.QueueInfo, receipt string) bool {
	l, err := f.b.LeaseOf(receipt)
	if err != nil || l.QueueID != qi.ID {
		return false
	}
	pm, err := f.b.GetMessage(ctx, qi.Name, l.MsgID)
	return err == nil && pm.Deliveries == l.Epoch
}

func checkVisibility(v *int64) (time.Duration, *apiError) {
	if v == nil {
		return 0, missingParam("VisibilityTimeout")
	}
	if *v < 0 || *v > maxVisibilitySeconds {
		return 0, invalidParam("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and %d.", *v, maxVisibilitySeconds)
	}
	return time.Duration(*v) * time.Second, nil
}

func (f *Front) changeVisibility(q *request) (any, *apiError) {
	var in changeVisibilityIn
	if e := decodeIn(q, &in); e != nil {
		return nil, e
	}
	qi, e := f.queueInfo(in.QueueURL)
	if e != nil {
		return nil, e
	}
	if deref(in.ReceiptHandle) == "" {
		return nil, missingParam("ReceiptHandle")
	}
	vis, e := checkVisibility(in.VisibilityTimeout)
	if e != nil {
		return nil, e
	}
	errs, err := f.b.Extend(q.r.Context(), qi.Name, []string{*in.ReceiptHandle}, vis)
	if err != nil {
		return nil, f.errorOf(err, qi.Name)
	}
	f.leaseMoved(qi.Name, *in.ReceiptHandle, vis)
	if ae := f.visibilityResult(q.r.Context(), errs[0], q.action, qi, *in.ReceiptHandle); ae != nil {
		return nil, ae
	}
	return empty{}, nil
}

func (f *Front) changeVisibilityBatch(q *request) (any, *apiError) {
	var vis []time.Duration // vis[i] is for receipts[i]
	rb, e := f.openReceiptBatch(q, func(ent *receiptEntry) *apiError {
		v, ae := checkVisibility(ent.VisibilityTimeout)
		if ae == nil {
			vis = append(vis, v)
		}
		return ae
	})
	if e != nil {
		return nil, e
	}
	if len(rb.receipts) == 0 {
		return rb.out, nil
	}
	// One commit for the whole batch, each entry with its own timeout.
	errs, err := f.b.ExtendEach(q.r.Context(), rb.qi.Name, rb.receipts, vis)
	if err != nil {
		return nil, f.errorOf(err, rb.qi.Name)
	}
	for i, rc := range rb.receipts {
		f.leaseMoved(rb.qi.Name, rc, vis[i])
	}
	rb.record(errs, func(i int, err error) *apiError {
		return f.visibilityResult(q.r.Context(), err, q.action, rb.qi, rb.receipts[i])
	})
	return rb.out, nil
}

// who is the receiver an SQS request shows: its access key's principal and address
// (and a name, if it sends api.ClientHeader).
func (f *Front) who(r *http.Request) consumers.Who {
	w := consumers.Who{Name: strings.TrimSpace(r.Header.Get(api.ClientHeader)), Remote: r.RemoteAddr, Via: "sqs"}
	if len(w.Name) > api.MaxClientName {
		w.Name = strings.ToValidUTF8(w.Name[:api.MaxClientName], "")
	}
	if p, ok := auth.From(r.Context()); ok {
		w.Principal = p.Name
	}
	return w
}

// leaseMoved tells the consumers' table of a visibility change: 0 makes the message
// visible again (the lease ends), another moves the lease's deadline.
func (f *Front) leaseMoved(queue, receipt string, vis time.Duration) {
	if vis == 0 {
		f.opts.Consumers.Settled(queue, []string{receipt})
		return
	}
	f.opts.Consumers.Extended(queue, []string{receipt}, f.opts.Clock.Now().Add(vis))
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
