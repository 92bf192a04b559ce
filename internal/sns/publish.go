package sns

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/okiba/okiba/internal/names"
	"github.com/okiba/okiba/topic"
)

// Publishing. An SNS publish is a native record: its body is the message (for
// MessageStructure=json, the value of its "sqs" key, else of "default"), its headers
// the message attributes by name, a FIFO topic's record keyed by its MessageGroupId and
// deduplicated by its MessageDeduplicationId. What an SNS receiver needs besides rides
// in two headers of the front's, named in the AWS. namespace SNS reserves so that no
// message attribute can take their names: AWS.SNS.Subject (the Subject) and
// AWS.SNS.Types (the data types of the attributes that are not String, as a JSON
// object), so that a delivery gives back what was published. The message id a publish answers names the
// record (messageID), so that every subscription's copy carries the same one.

// Headers of the front's on a record an SNS publish made; every header of a record
// whose name begins with one of ownHeaders is not a message attribute.
const (
	headerSubject = "AWS.SNS.Subject"
	headerTypes   = "AWS.SNS.Types"
)

var ownHeaders = []string{"okiba-", "AWS.SNS."}

// Bounds of a publish.
const (
	maxAttributes = 50 // okiba's bound; raw delivery to SQS takes 10 (Deliver)
	maxSubject    = 100
	maxBatch      = 10
)

// attribute is one message attribute as SNS carries it: a binary value in base64.
type attribute struct {
	Name, Type, Value string
}

// message is one checked publish.
type message struct {
	in      topic.PublishInput
	attrs   []attribute
	size    int
	subject string
}

var attrNameRE = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,256}$`)

// readMessage reads and checks one message of a Publish (prefix "") or a PublishBatch
// entry (prefix "PublishBatchRequestEntries.member.N."). Every refusal names the
// parameter.
func readMessage(form url.Values, prefix string, ti topic.TopicInfo, cbd bool) (message, *apiError) {
	var m message
	get := func(k string) string { return form.Get(prefix + k) }
	body, ok := form[prefix+"Message"]
	if !ok || body[0] == "" {
		return m, invalid("Empty message")
	}
	msg := body[0]
	if !utf8.ValidString(msg) {
		return m, invalid("Message Reason: a message is UTF-8 text")
	}
	switch get("MessageStructure") {
	case "":
	case "json":
		var per map[string]any
		if json.Unmarshal([]byte(msg), &per) != nil {
			return m, invalid("Message Structure - JSON message body failed to parse")
		}
		d, ok := per["default"].(string)
		if !ok {
			return m, invalid("Message Structure - No default entry in JSON message body")
		}
		msg = d
		if s, ok := per["sqs"].(string); ok {
			msg = s
		}
	default:
		return m, invalid("MessageStructure Reason: must be json, or absent")
	}
	if _, ok := form[prefix+"PhoneNumber"]; ok {
		return m, invalid("PhoneNumber Reason: okiba publishes to topics only")
	}
	m.in = topic.PublishInput{Body: []byte(msg), Partition: topic.AnyPartition}
	m.size = len(msg)
	if s, ok := form[prefix+"Subject"]; ok {
		m.subject = s[0]
		if m.subject == "" || len(m.subject) > maxSubject || !printableASCII(m.subject) {
			return m, invalid("Subject Reason: a subject is 1 to %d printable ASCII characters", maxSubject)
		}
		m.in.Headers = append(m.in.Headers, topic.Header{Name: headerSubject, Value: m.subject})
	}
	attrs, e := readAttributes(form, prefix+"MessageAttributes")
	if e != nil {
		return m, e
	}
	m.attrs = attrs
	types := map[string]string{}
	for _, a := range attrs {
		m.size += len(a.Name) + len(a.Type) + len(a.Value)
		m.in.Headers = append(m.in.Headers, topic.Header{Name: a.Name, Value: a.Value})
		if a.Type != "String" {
			types[a.Name] = a.Type
		}
	}
	if len(types) > 0 {
		b, _ := json.Marshal(types)
		m.in.Headers = append(m.in.Headers, topic.Header{Name: headerTypes, Value: string(b)})
	}
	slices.SortFunc(m.in.Headers, func(a, b topic.Header) int { return strings.Compare(a.Name, b.Name) }) // as records hold them
	if m.size > MaxMessageBytes {
		return m, invalid("Message too long: a message with its attributes is at most %d bytes, this one is %d", MaxMessageBytes, m.size)
	}
	group, dedup := get("MessageGroupId"), get("MessageDeduplicationId")
	if names.IsFIFO(ti.Name) {
		if group == "" {
			return m, invalid("The MessageGroupId parameter is required for FIFO topics")
		}
		if !idChars(group) {
			return m, invalid("MessageGroupId Reason: 1 to 128 characters, letters, digits and punctuation")
		}
		if dedup == "" {
			if !cbd {
				return m, invalid("The topic should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
			}
			sum := sha256.Sum256([]byte(msg))
			dedup = hex.EncodeToString(sum[:])
		} else if !idChars(dedup) {
			return m, invalid("MessageDeduplicationId Reason: 1 to 128 characters, letters, digits and punctuation")
		}
		m.in.Key, m.in.HasKey, m.in.DedupID = []byte(group), true, dedup
	} else if group != "" || dedup != "" {
		if dedup != "" {
			return m, invalid("MessageDeduplicationId Reason: The request includes MessageDeduplicationId parameter that is not valid for this topic type")
		}
		return m, invalid("MessageGroupId Reason: The request includes MessageGroupId parameter that is not valid for this topic type")
	}
	return m, nil
}

// readAttributes reads the flattened map prefix.entry.N.Name/.Value.DataType/
// .Value.StringValue/.Value.BinaryValue, checked as SNS checks it.
func readAttributes(form url.Values, prefix string) ([]attribute, *apiError) {
	n, e := members(form, prefix+".entry")
	if e != nil || n == 0 {
		return nil, e
	}
	if n > maxAttributes {
		return nil, newErr("ParameterValueInvalid", "okiba takes at most %d message attributes, not %d", maxAttributes, n)
	}
	out := make([]attribute, 0, n)
	for i := 1; i <= n; i++ {
		el := prefix + ".entry." + strconv.Itoa(i) + "."
		name := form.Get(el + "Name")
		if !attrNameRE.MatchString(name) || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
			return nil, newErr("ParameterValueInvalid", "The message attribute name %q is invalid: 1 to 256 letters, digits, hyphens, underscores and periods, no period first, last or twice in a row", name)
		}
		low := strings.ToLower(name)
		if strings.HasPrefix(low, "aws.") || strings.HasPrefix(low, "amazon.") || strings.HasPrefix(low, "okiba-") {
			return nil, newErr("ParameterValueInvalid", "The message attribute name %q is reserved: names beginning AWS., Amazon. or okiba- are the services'", name)
		}
		if slices.ContainsFunc(out, func(a attribute) bool { return a.Name == name }) {
			return nil, newErr("ParameterValueInvalid", "The message attribute %q is given twice", name)
		}
		typ := form.Get(el + "Value.DataType")
		base, _, _ := strings.Cut(typ, ".")
		a := attribute{Name: name, Type: typ}
		sv, hasS := form[el+"Value.StringValue"]
		bv, hasB := form[el+"Value.BinaryValue"]
		switch {
		case typ == "String.Array":
			if !hasS || !jsonArray(sv[0]) {
				return nil, newErr("ParameterValueInvalid", "The message attribute '%s' with type 'String.Array' must use field 'String' holding a JSON array.", name)
			}
			a.Value = sv[0]
		case base == "String" || base == "Number":
			if !hasS || sv[0] == "" {
				return nil, newErr("ParameterValueInvalid", "The message attribute '%s' must contain non-empty message attribute value for message attribute type '%s'.", name, typ)
			}
			if base == "Number" {
				if _, err := strconv.ParseFloat(sv[0], 64); err != nil {
					return nil, newErr("ParameterValueInvalid", "Could not cast message attribute '%s' value to number.", name)
				}
			}
			a.Value = sv[0]
		case base == "Binary":
			if !hasB {
				return nil, newErr("ParameterValueInvalid", "The message attribute '%s' with type 'Binary' must use field 'Binary'.", name)
			}
			raw, err := base64.StdEncoding.DecodeString(bv[0])
			if err != nil || len(raw) == 0 {
				return nil, newErr("ParameterValueInvalid", "The message attribute '%s' must contain non-empty, base64-encoded binary value.", name)
			}
			a.Value = bv[0]
		default:
			return nil, newErr("ParameterValueInvalid", "The message attribute '%s' has an invalid message attribute type, the set of supported type prefixes is Binary, Number, and String.", name)
		}
		out = append(out, a)
	}
	return out, nil
}

func (f *Front) contentDedup(q *request, ti topic.TopicInfo) (bool, *apiError) {
	if !names.IsFIFO(ti.Name) {
		return false, nil
	}
	a, err := f.attrs(q.r.Context(), topicKey(ti.Name), ti.ID, 0)
	if err != nil {
		return false, f.errorOf(err)
	}
	return strings.EqualFold(a["ContentBasedDeduplication"], "true"), nil
}

func (f *Front) publish(q *request) *apiError {
	ti, e := f.topicOf(q)
	if e != nil {
		return e
	}
	cbd, e := f.contentDedup(q, ti)
	if e != nil {
		return e
	}
	m, e := readMessage(q.form, "", ti, cbd)
	if e != nil {
		return e
	}
	res, err := f.b.Publish(q.r.Context(), ti.Name, []topic.PublishInput{m.in})
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		return f.errorOf(err)
	}
	q.out.el("MessageId", messageID(topic.RecordID(ti.ID, res[0].Partition, res[0].Offset)))
	if names.IsFIFO(ti.Name) {
		q.out.el("SequenceNumber", sequenceNumber(res[0].Offset))
	}
	return nil
}

var batchIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

func (f *Front) publishBatch(q *request) *apiError {
	ti, e := f.topicOf(q)
	if e != nil {
		return e
	}
	const entries = "PublishBatchRequestEntries.member"
	n, e := members(q.form, entries)
	if e != nil {
		return e
	}
	switch {
	case n == 0:
		return newErr("EmptyBatchRequest", "The batch request doesn't contain any entries")
	case n > maxBatch:
		return newErr("TooManyEntriesInBatchRequest", "The batch request contains more entries than permissible (%d, at most %d)", n, maxBatch)
	}
	cbd, e := f.contentDedup(q, ti)
	if e != nil {
		return e
	}
	type failed struct {
		id string
		e  *apiError
	}
	var fails []failed
	var ok []string
	var ins []topic.PublishInput
	ids, total := map[string]bool{}, 0
	for i := 1; i <= n; i++ {
		prefix := entries + "." + strconv.Itoa(i) + "."
		id := q.form.Get(prefix + "Id")
		if !batchIDRE.MatchString(id) {
			return newErr("InvalidBatchEntryId", "The Id of a batch entry in a batch request doesn't abide by the specification: 1 to 80 letters, digits, hyphens and underscores (%q)", id)
		}
		if ids[id] {
			return newErr("BatchEntryIdsNotDistinct", "Two or more batch entries in the request have the same Id (%s)", id)
		}
		ids[id] = true
		m, e := readMessage(q.form, prefix, ti, cbd)
		total += m.size
		if e != nil {
			fails = append(fails, failed{id, e})
			continue
		}
		ok = append(ok, id)
		ins = append(ins, m.in)
	}
	if total > MaxMessageBytes {
		return newErr("BatchRequestTooLong", "The length of all the messages put together is more than the limit: %d bytes, at most %d", total, MaxMessageBytes)
	}
	q.out.open("Successful")
	if len(ins) > 0 {
		res, err := f.b.Publish(q.r.Context(), ti.Name, ins)
		if err != nil {
			return f.errorOf(err)
		}
		for i, r := range res {
			if r.Err != nil {
				fails = append(fails, failed{ok[i], f.errorOf(r.Err)})
				continue
			}
			q.out.open("member")
			q.out.el("Id", ok[i])
			q.out.el("MessageId", messageID(topic.RecordID(ti.ID, r.Partition, r.Offset)))
			if names.IsFIFO(ti.Name) {
				q.out.el("SequenceNumber", sequenceNumber(r.Offset))
			}
			q.out.close("member")
		}
	}
	q.out.close("Successful")
	q.out.open("Failed")
	for _, x := range fails {
		q.out.open("member")
		q.out.el("Id", x.id)
		q.out.el("Code", x.e.Code)
		q.out.el("Message", x.e.Message)
		q.out.el("SenderFault", strconv.FormatBool(!x.e.Receiver))
		q.out.close("member")
	}
	q.out.close("Failed")
	return nil
}

// messageID is the SNS message id of a record: a UUID-shaped digest of its record id,
// the same in every subscription's copy and in every answer to a duplicate publish.
func messageID(recordID string) string {
	sum := sha256.Sum256([]byte("okiba sns message\x00" + recordID))
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// sequenceNumber is a FIFO publish's sequence number: its offset, in SNS's 20 digits.
func sequenceNumber(offset uint64) string { return fmt.Sprintf("%020d", offset) }

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func idChars(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func jsonArray(s string) bool {
	var v []any
	return json.Unmarshal([]byte(s), &v) == nil
}
