package sqs

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/names"
	"github.com/okiba/okiba/queue"
)

// Queue attributes map onto queue.Config (docs/sqs.md has the table). Attributes okiba
// stores without interpreting them (Policy, RedriveAllowPolicy, the KMS settings,
// FifoThroughputLimit) live in the fields of Config.Front, which only this front reads.

// SQS's defaults for a queue created through the front (docs/sqs.md).
const (
	sqsVisibility     = 30 * time.Second
	sqsRetention      = 4 * 24 * time.Hour
	sqsMaxMessageSize = 1 << 20
	sqsDedupWindow    = 5 * time.Minute
)

// allQueueAttrs lists the attributes GetQueueAttributes knows, in SQS's order.
var allQueueAttrs = []string{
	"Policy", "VisibilityTimeout", "MaximumMessageSize", "MessageRetentionPeriod",
	"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "CreatedTimestamp",
	"LastModifiedTimestamp", "QueueArn", "ApproximateNumberOfMessagesDelayed", "DelaySeconds",
	"ReceiveMessageWaitTimeSeconds", "RedrivePolicy", "FifoQueue", "ContentBasedDeduplication",
	"KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "DeduplicationScope", "FifoThroughputLimit",
	"RedriveAllowPolicy", "SqsManagedSseEnabled",
}

// storedAttrs are kept verbatim, each in its field of Config.Front ("" is not set).
var storedAttrs = map[string]func(*queue.FrontAttributes) *string{
	"Policy":                       func(a *queue.FrontAttributes) *string { return &a.Policy },
	"RedriveAllowPolicy":           func(a *queue.FrontAttributes) *string { return &a.RedriveAllowPolicy },
	"KmsMasterKeyId":               func(a *queue.FrontAttributes) *string { return &a.KMSMasterKeyID },
	"KmsDataKeyReusePeriodSeconds": func(a *queue.FrontAttributes) *string { return &a.KMSDataKeyReusePeriod },
	"SqsManagedSseEnabled":         func(a *queue.FrontAttributes) *string { return &a.SQSManagedSSE },
	"FifoThroughputLimit":          func(a *queue.FrontAttributes) *string { return &a.FIFOThroughputLimit },
}

// fifoOnlyAttrs exist only on FIFO queues.
var fifoOnlyAttrs = map[string]bool{
	"FifoQueue": true, "ContentBasedDeduplication": true, "DeduplicationScope": true, "FifoThroughputLimit": true,
}

func secs(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }

// queueAttributes returns every attribute of a queue as GetQueueAttributes shows them.
func (f *Front) queueAttributes(qi broker.QueueInfo) map[string]string {
	c := qi.Config
	st := qi.Stats
	out := map[string]string{
		"VisibilityTimeout":                     secs(c.VisibilityTimeout),
		"MaximumMessageSize":                    strconv.FormatInt(c.MaxMessageSize, 10),
		"MessageRetentionPeriod":                secs(c.Retention),
		"ApproximateNumberOfMessages":           strconv.FormatInt(st.Ready, 10),
		"ApproximateNumberOfMessagesNotVisible": strconv.FormatInt(st.InFlight+st.Deferred, 10), // deferred by a native consumer: in the queue, not visible
		"ApproximateNumberOfMessagesDelayed":    strconv.FormatInt(st.Delayed, 10),
		"CreatedTimestamp":                      strconv.FormatInt(qi.CreatedAt/1000, 10),
		"LastModifiedTimestamp":                 strconv.FormatInt(qi.UpdatedAt/1000, 10),
		"QueueArn":                              f.queueARN(qi.Name),
		"DelaySeconds":                          secs(c.Delay),
		"ReceiveMessageWaitTimeSeconds":         secs(c.ReceiveWait),
		"SqsManagedSseEnabled":                  "false",
	}
	if c.DeadLetterQueue != queue.NoDeadLetterQueue && c.MaxDeliveries > 0 {
		out["RedrivePolicy"] = redrivePolicy(f.queueARN(c.DeadLetterQueue), c.MaxDeliveries)
	}
	for name, field := range storedAttrs {
		if v := *field(&c.Front); v != "" {
			out[name] = v
		}
	}
	if names.IsFIFO(qi.Name) {
		out["FifoQueue"] = "true"
		out["ContentBasedDeduplication"] = strconv.FormatBool(c.ContentDedup)
		out["DeduplicationScope"] = "queue"
		if c.DedupScope == queue.DedupGroup {
			out["DeduplicationScope"] = "messageGroup"
		}
		if _, ok := out["FifoThroughputLimit"]; !ok {
			out["FifoThroughputLimit"] = "perQueue"
		}
	} else {
		delete(out, "FifoThroughputLimit")
	}
	return out
}

func redrivePolicy(arn string, max int) string {
	b, _ := json.Marshal(struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
		MaxReceiveCount     int    `json:"maxReceiveCount"`
	}{arn, max})
	return string(b)
}

// sqsDefaults sets SQS's defaults on a queue being created through the front.
func sqsDefaults(c *queue.Config, name string) {
	c.VisibilityTimeout = sqsVisibility
	c.MaxDeliveries = 0
	c.DeadLetterQueue = queue.NoDeadLetterQueue
	c.Delay = 0
	c.Retention = sqsRetention
	c.ReceiveWait = 0
	c.MaxMessageSize = sqsMaxMessageSize
	c.DedupWindow = sqsDedupWindow
	c.DedupScope = queue.DedupQueue
	c.ContentDedup = false
	c.OrderedGroups = names.IsFIFO(name)
	c.Front = queue.FrontAttributes{}
	if names.IsFIFO(name) {
		c.Front.FIFOThroughputLimit = "perQueue"
	}
}

// attrEdit changes one configuration field.
type attrEdit func(c *queue.Config)

// redriveTarget is a RedrivePolicy's dead-letter queue, checked by the caller against
// the broker (it must exist and allow the source).
type redriveTarget struct {
	name string
}

// parseQueueAttrs validates attributes for CreateQueue (creating) or
// SetQueueAttributes of queue name and returns the edits they make and the dead-letter
// queue a RedrivePolicy names, if any.
func parseQueueAttrs(name string, attrs map[string]string, creating bool) ([]attrEdit, *redriveTarget, *apiError) {
	var edits []attrEdit
	var target *redriveTarget
	fifo := names.IsFIFO(name)
	keys := slices.Sorted(maps.Keys(attrs))
	if creating && fifo && attrs["FifoQueue"] != "true" {
		return nil, nil, newErr(kInvalidParameterValue, "The name of a FIFO queue ends in .fifo and the queue must be created with the attribute FifoQueue=true (queue %q).", name)
	}
	for _, k := range keys {
		v := attrs[k]
		badValue := func(format string, args ...any) *apiError {
			return newErr(kInvalidAttributeValue, "Invalid value for the parameter %s: %s", k, fmt.Sprintf(format, args...))
		}
		seconds := func(lo, hi int64, set func(c *queue.Config, d time.Duration)) *apiError {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < lo || n > hi {
				return badValue("%q is not an integer from %d to %d", v, lo, hi)
			}
			edits = append(edits, func(c *queue.Config) { set(c, time.Duration(n)*time.Second) })
			return nil
		}
		if fifoOnlyAttrs[k] && !fifo {
			if k == "FifoQueue" && creating && v == "false" {
				continue
			}
			if k == "FifoQueue" && creating && v == "true" {
				return nil, nil, newErr(kInvalidParameterValue, "The name of a FIFO queue must end with the .fifo suffix (queue %q).", name)
			}
			return nil, nil, newErr(kInvalidAttributeName, "Unknown Attribute %s: it applies to FIFO queues only.", k)
		}
		var e *apiError
		switch k {
		case "VisibilityTimeout":
			e = seconds(0, maxVisibilitySeconds, func(c *queue.Config, d time.Duration) { c.VisibilityTimeout = d })
		case "DelaySeconds":
			e = seconds(0, maxDelaySeconds, func(c *queue.Config, d time.Duration) { c.Delay = d })
		case "MessageRetentionPeriod":
			e = seconds(60, 1209600, func(c *queue.Config, d time.Duration) { c.Retention = d })
		case "ReceiveMessageWaitTimeSeconds":
			e = seconds(0, maxWaitSeconds, func(c *queue.Config, d time.Duration) { c.ReceiveWait = d })
		case "MaximumMessageSize":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1024 || n > sqsMaxMessageSize {
				e = badValue("%q is not an integer from 1024 to %d", v, sqsMaxMessageSize)
				break
			}
			edits = append(edits, func(c *queue.Config) { c.MaxMessageSize = n })
		case "RedrivePolicy":
			if v == "" {
				edits = append(edits, func(c *queue.Config) {
					c.DeadLetterQueue, c.MaxDeliveries = queue.NoDeadLetterQueue, 0
				})
				break
			}
			dlq, max, err := parseRedrivePolicy(v)
			if err != "" {
				e = badValue("%s", err)
				break
			}
			if dlq == name {
				e = badValue("a queue cannot be its own dead-letter queue")
				break
			}
			if names.IsFIFO(dlq) != fifo {
				e = badValue("the dead-letter queue of a FIFO queue must be a FIFO queue, and of a standard queue a standard queue")
				break
			}
			target = &redriveTarget{name: dlq}
			edits = append(edits, func(c *queue.Config) { c.DeadLetterQueue, c.MaxDeliveries = dlq, max })
		case "RedriveAllowPolicy":
			if v != "" {
				if err := checkRedriveAllowPolicy(v); err != "" {
					e = badValue("%s", err)
					break
				}
			}
			edits = append(edits, storeAttr(k, v))
		case "Policy":
			if v != "" && !json.Valid([]byte(v)) {
				e = badValue("the policy is not a JSON document")
				break
			}
			edits = append(edits, storeAttr(k, v))
		case "KmsMasterKeyId":
			edits = append(edits, storeAttr(k, v))
		case "KmsDataKeyReusePeriodSeconds":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 60 || n > 86400 {
				e = badValue("%q is not an integer from 60 to 86400", v)
				break
			}
			edits = append(edits, storeAttr(k, v))
		case "SqsManagedSseEnabled":
			if v != "true" && v != "false" {
				e = badValue("must be true or false")
				break
			}
			edits = append(edits, storeAttr(k, v))
		case "FifoQueue":
			if !creating {
				e = newErr(kInvalidAttributeName, "FifoQueue can be given only when the queue is created.")
				break
			}
			if v != "true" {
				e = badValue("a queue whose name ends in .fifo is a FIFO queue: FifoQueue must be true")
			}
		case "ContentBasedDeduplication":
			if v != "true" && v != "false" {
				e = badValue("must be true or false")
				break
			}
			on := v == "true"
			edits = append(edits, func(c *queue.Config) { c.ContentDedup = on })
		case "DeduplicationScope":
			var scope queue.DedupScope
			switch v {
			case "queue":
				scope = queue.DedupQueue
			case "messageGroup":
				scope = queue.DedupGroup
			default:
				e = badValue("must be messageGroup or queue")
			}
			if e == nil {
				edits = append(edits, func(c *queue.Config) { c.DedupScope = scope })
			}
		case "FifoThroughputLimit":
			if v != "perQueue" && v != "perMessageGroupId" {
				e = badValue("must be perQueue or perMessageGroupId")
				break
			}
			edits = append(edits, storeAttr(k, v))
		default:
			if slices.Contains(allQueueAttrs, k) {
				e = newErr(kInvalidAttributeName, "Attribute %s is read-only.", k)
			} else {
				e = newErr(kInvalidAttributeName, "Unknown Attribute %s.", k)
			}
		}
		if e != nil {
			return nil, nil, e
		}
	}
	return edits, target, nil
}

// storeAttr keeps v as the stored attribute name; "" removes it.
func storeAttr(name, v string) attrEdit {
	field := storedAttrs[name]
	return func(c *queue.Config) { *field(&c.Front) = v }
}

// parseRedrivePolicy reads {"deadLetterTargetArn": "...", "maxReceiveCount": N}
// (maxReceiveCount as a number or a string, 1..1000).
func parseRedrivePolicy(v string) (string, int, string) {
	var p struct {
		DeadLetterTargetArn *string         `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		return "", 0, "RedrivePolicy must be a JSON object with deadLetterTargetArn and maxReceiveCount"
	}
	if p.DeadLetterTargetArn == nil {
		return "", 0, "RedrivePolicy needs deadLetterTargetArn"
	}
	dlq, ok := nameFromARN(*p.DeadLetterTargetArn)
	if !ok {
		return "", 0, fmt.Sprintf("deadLetterTargetArn %q is not an SQS queue ARN (arn:aws:sqs:<region>:<account-id>:<queue-name>)", *p.DeadLetterTargetArn)
	}
	raw := strings.Trim(string(p.MaxReceiveCount), `"`)
	n, err := strconv.Atoi(raw)
	if len(p.MaxReceiveCount) == 0 || err != nil || n < 1 || n > 1000 {
		return "", 0, "maxReceiveCount must be an integer from 1 to 1000"
	}
	return dlq, n, ""
}

// redriveAllowPolicy is the parsed RedriveAllowPolicy attribute.
type redriveAllowPolicy struct {
	RedrivePermission string   `json:"redrivePermission"`
	SourceQueueArns   []string `json:"sourceQueueArns"`
}

func checkRedriveAllowPolicy(v string) string {
	var p redriveAllowPolicy
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		return "RedriveAllowPolicy must be a JSON object with redrivePermission (allowAll, denyAll or byQueue)"
	}
	switch p.RedrivePermission {
	case "allowAll", "denyAll":
		if len(p.SourceQueueArns) > 0 {
			return "sourceQueueArns may be given only with redrivePermission byQueue"
		}
	case "byQueue":
		if len(p.SourceQueueArns) == 0 || len(p.SourceQueueArns) > 10 {
			return "redrivePermission byQueue needs 1 to 10 sourceQueueArns"
		}
		for _, a := range p.SourceQueueArns {
			if _, ok := nameFromARN(a); !ok {
				return fmt.Sprintf("%q is not an SQS queue ARN", a)
			}
		}
	default:
		return "redrivePermission must be allowAll, denyAll or byQueue"
	}
	return ""
}

// allowsSource reports whether a dead-letter queue's RedriveAllowPolicy lets source use
// it.
func allowsSource(dlq queue.Config, source string) bool {
	v := dlq.Front.RedriveAllowPolicy
	if v == "" {
		return true
	}
	var p redriveAllowPolicy
	if json.Unmarshal([]byte(v), &p) != nil {
		return true
	}
	switch p.RedrivePermission {
	case "denyAll":
		return false
	case "byQueue":
		for _, a := range p.SourceQueueArns {
			if n, ok := nameFromARN(a); ok && n == source {
				return true
			}
		}
		return false
	}
	return true
}
