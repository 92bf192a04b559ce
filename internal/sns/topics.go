package sns

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/names"
	"github.com/okiba/okiba/topic"
)

// MaxMessageBytes is SNS's bound on a message: its body with its attributes' names,
// types and values; also the record size of the topics CreateTopic makes, so that every
// queue of 256 KiB or more can subscribe.
const MaxMessageBytes = 256 << 10

// topicAttrs are the topic attributes a client may set, and what each must be; they
// are stored, and only SignatureVersion and ContentBasedDeduplication change what
// okiba does.
var topicAttrs = map[string]func(v string, fifo bool) *apiError{
	"DisplayName":      func(v string, _ bool) *apiError { return maxLen("DisplayName", v, 100) },
	"Policy":           jsonAttr("Policy"),
	"DeliveryPolicy":   jsonAttr("DeliveryPolicy"),
	"KmsMasterKeyId":   func(v string, _ bool) *apiError { return maxLen("KmsMasterKeyId", v, 2048) },
	"TracingConfig":    oneOf("TracingConfig", "PassThrough", "Active"),
	"SignatureVersion": oneOf("SignatureVersion", "1", "2"),
	"ArchivePolicy":    jsonAttr("ArchivePolicy"),
	"ContentBasedDeduplication": func(v string, fifo bool) *apiError {
		if !fifo {
			return invalid("Attributes Reason: ContentBasedDeduplication can only be set for FIFO topics")
		}
		_, e := boolAttr("ContentBasedDeduplication", v)
		return e
	},
	"FifoThroughputScope": func(v string, fifo bool) *apiError {
		if !fifo {
			return invalid("Attributes Reason: FifoThroughputScope can only be set for FIFO topics")
		}
		return oneOf("FifoThroughputScope", "Topic", "MessageGroup")(v, fifo)
	},
}

func maxLen(name, v string, n int) *apiError {
	if len(v) > n {
		return invalid("Attributes Reason: %s is at most %d characters", name, n)
	}
	return nil
}

func jsonAttr(name string) func(string, bool) *apiError {
	return func(v string, _ bool) *apiError {
		if v != "" && !jsonObject(v) {
			return invalid("Attributes Reason: %s must be a JSON object", name)
		}
		return nil
	}
}

func oneOf(name string, vals ...string) func(string, bool) *apiError {
	return func(v string, _ bool) *apiError {
		if !slices.Contains(vals, v) {
			return invalid("Attributes Reason: %s must be one of %s, got %q", name, strings.Join(vals, ", "), v)
		}
		return nil
	}
}

// topicOf returns the topic a request names in its TopicArn (or Publish's TargetArn),
// which must exist.
func (f *Front) topicOf(q *request) (topic.TopicInfo, *apiError) {
	name, e := f.topicOfARN(q.param("TopicArn", "TargetArn"), "TopicArn")
	if e != nil {
		return topic.TopicInfo{}, e
	}
	return f.existing(name)
}

func (f *Front) existing(name string) (topic.TopicInfo, *apiError) {
	if name == stateTopic {
		return topic.TopicInfo{}, newErr("NotFound", "Topic does not exist")
	}
	ti, err := f.b.Topic(name)
	if errors.Is(err, topic.ErrTopicNotFound) {
		return ti, newErr("NotFound", "Topic does not exist")
	}
	if err != nil {
		return ti, f.errorOf(err)
	}
	return ti, nil
}

func (f *Front) createTopic(q *request) *apiError {
	name := q.form.Get("Name")
	if name == "" {
		return invalid("Name")
	}
	if names.ValidateTopic(name) != nil || name == stateTopic {
		return invalid("Topic Name: topic names are 1 to %d letters, digits, hyphens and underscores (a FIFO topic's end in .fifo), and %s is okiba's own", names.MaxLen, stateTopic)
	}
	attrs, e := stringMap(q.form, "Attributes")
	if e != nil {
		return e
	}
	tags, e := tagList(q.form, "Tags")
	if e != nil {
		return e
	}
	fifo := names.IsFIFO(name)
	if v, ok := attrs["FifoTopic"]; ok {
		want, e := boolAttr("FifoTopic", v)
		if e != nil {
			return e
		}
		if want != fifo {
			return invalid("Topic Name: a FIFO topic's name ends in .fifo, and only a FIFO topic's does")
		}
		delete(attrs, "FifoTopic")
	} else if fifo {
		return invalid("Topic Name: a name ending in .fifo is a FIFO topic's: give the attribute FifoTopic=true")
	}
	for k, v := range attrs {
		check, ok := topicAttrs[k]
		if !ok {
			return invalid("Attributes Reason: unknown attribute %s", k)
		}
		if e := check(v, fifo); e != nil {
			return e
		}
	}
	if e := checkTags(tags); e != nil {
		return e
	}
	ctx := q.r.Context()
	ti, created, err := f.b.PutTopic(ctx, name, func(cfg *topic.Config, exists bool) error {
		if exists {
			if len(tags) > 0 && !maps.Equal(cfg.Tags, tags) {
				return invalid("Tags Reason: the topic exists with other tags; use TagResource")
			}
			return nil
		}
		cfg.Partitions = 1
		cfg.MaxRecordSize = MaxMessageBytes
		if !fifo {
			cfg.DedupWindow = 0
		}
		if len(tags) > 0 {
			cfg.Tags = tags
		}
		return nil
	})
	if err != nil {
		return f.errorOf(err)
	}
	if len(attrs) > 0 {
		cur, err := f.attrs(ctx, topicKey(name), ti.ID, 0)
		if err != nil {
			return f.errorOf(err)
		}
		if !created {
			for k, v := range attrs {
				if cur[k] != v {
					return invalid("Attributes Reason: topic already exists with different attributes")
				}
			}
		} else if err := f.putAttrs(ctx, topicKey(name), ti.ID, 0, attrs); err != nil {
			return f.errorOf(err)
		}
	}
	q.out.el("TopicArn", f.topicARN(name))
	return nil
}

func checkTags(tags map[string]string) *apiError {
	if len(tags) > 50 {
		return newErr("TagLimitExceeded", "Could not complete request: tag quota of per resource exceeded (at most 50 tags)")
	}
	for k, v := range tags {
		if k == "" || len(k) > 128 || len(v) > 256 {
			return invalid("Tags Reason: tag keys are 1 to 128 characters and values at most 256 (%q)", k)
		}
	}
	return nil
}

func (f *Front) getTopicAttributes(q *request) *apiError {
	ti, e := f.topicOf(q)
	if e != nil {
		return e
	}
	ctx := q.r.Context()
	stored, err := f.attrs(ctx, topicKey(ti.Name), ti.ID, 0)
	if err != nil {
		return f.errorOf(err)
	}
	subs, err := f.b.Subscriptions(ti.Name)
	if err != nil {
		return f.errorOf(err)
	}
	out := map[string]string{
		"TopicArn":                f.topicARN(ti.Name),
		"Owner":                   f.opts.AccountID,
		"DisplayName":             "",
		"SubscriptionsConfirmed":  strconv.Itoa(len(subs)),
		"SubscriptionsPending":    "0",
		"SubscriptionsDeleted":    "0",
		"Policy":                  f.defaultPolicy(ti.Name),
		"EffectiveDeliveryPolicy": defaultDeliveryPolicy,
		"SignatureVersion":        "1",
	}
	if names.IsFIFO(ti.Name) {
		out["FifoTopic"] = "true"
		out["ContentBasedDeduplication"] = "false"
	}
	for k, v := range stored {
		out[k] = v
	}
	if v, ok := stored["DeliveryPolicy"]; ok {
		out["EffectiveDeliveryPolicy"] = v
	}
	q.out.attrMap("Attributes", out)
	return nil
}

// defaultDeliveryPolicy is SNS's HTTP delivery policy, which okiba stores and does not
// interpret (its deliveries are into queues).
const defaultDeliveryPolicy = `{"http":{"defaultHealthyRetryPolicy":{"minDelayTarget":20,"maxDelayTarget":20,"numRetries":3,"numMaxDelayRetries":0,"numNoDelayRetries":0,"numMinDelayRetries":0,"backoffFunction":"linear"},"disableSubscriptionOverrides":false}}`

// defaultPolicy is the access policy SNS gives a new topic: its owner may do everything.
// okiba stores a topic's Policy and does not interpret it; permissions are okiba's.
func (f *Front) defaultPolicy(name string) string {
	arn := f.topicARN(name)
	return `{"Version":"2008-10-17","Id":"__default_policy_ID","Statement":[{"Sid":"__default_statement_ID","Effect":"Allow",` +
		`"Principal":{"AWS":"*"},"Action":["SNS:GetTopicAttributes","SNS:SetTopicAttributes","SNS:AddPermission","SNS:RemovePermission",` +
		`"SNS:DeleteTopic","SNS:Subscribe","SNS:ListSubscriptionsByTopic","SNS:Publish"],"Resource":"` + arn + `",` +
		`"Condition":{"StringEquals":{"AWS:SourceOwner":"` + f.opts.AccountID + `"}}}]}`
}

func (f *Front) setTopicAttributes(q *request) *apiError {
	ti, e := f.topicOf(q)
	if e != nil {
		return e
	}
	name, v := q.form.Get("AttributeName"), q.form.Get("AttributeValue")
	check, ok := topicAttrs[name]
	if !ok {
		return invalid("AttributeName: %q is not an attribute SetTopicAttributes can set", name)
	}
	if e := check(v, names.IsFIFO(ti.Name)); e != nil {
		return e
	}
	ctx := q.r.Context()
	cur, err := f.attrs(ctx, topicKey(ti.Name), ti.ID, 0)
	if err != nil {
		return f.errorOf(err)
	}
	cur[name] = v
	if err := f.putAttrs(ctx, topicKey(ti.Name), ti.ID, 0, cur); err != nil {
		return f.errorOf(err)
	}
	return nil
}

// pageSize is how many topics or subscriptions one List call answers, as SNS pages
// them (100).
const pageSize = 100

// visibleTopics are the topics the caller may browse, but the state topic, by name.
func (f *Front) visibleTopics(ctx context.Context) []topic.TopicInfo {
	all := f.b.Topics("")
	return slices.DeleteFunc(all, func(t topic.TopicInfo) bool {
		return t.Name == stateTopic || !auth.Allowed(ctx, access.Browse, access.TopicNamed(t.Name))
	})
}

func (f *Front) listTopics(q *request) *apiError {
	all := f.visibleTopics(q.r.Context())
	start, e := pageStart(q.form.Get("NextToken"), len(all))
	if e != nil {
		return e
	}
	end := min(start+pageSize, len(all))
	q.out.open("Topics")
	for _, t := range all[start:end] {
		q.out.open("member")
		q.out.el("TopicArn", f.topicARN(t.Name))
		q.out.close("member")
	}
	q.out.close("Topics")
	if end < len(all) {
		q.out.el("NextToken", strconv.Itoa(end))
	}
	return nil
}

// pageStart reads a NextToken: the index of the page's first item.
func pageStart(token string, n int) (int, *apiError) {
	if token == "" {
		return 0, nil
	}
	i, err := strconv.Atoi(token)
	if err != nil || i < 0 || i > n {
		return 0, invalid("NextToken")
	}
	return i, nil
}

func (f *Front) deleteTopic(q *request) *apiError {
	name, e := f.topicOfARN(q.form.Get("TopicArn"), "TopicArn")
	if e != nil {
		return e
	}
	if name == stateTopic {
		return newErr("NotFound", "Topic does not exist")
	}
	// As SNS: deleting a topic deletes its subscriptions, and deleting one that is not
	// there succeeds.
	if err := f.b.DeleteTopic(q.r.Context(), name, true); err != nil && !errors.Is(err, topic.ErrTopicNotFound) {
		return f.errorOf(err)
	}
	return nil
}

// tagged returns the topic a tagging request's ResourceArn names.
func (f *Front) tagged(q *request) (topic.TopicInfo, *apiError) {
	name, e := f.topicOfARN(q.form.Get("ResourceArn"), "ResourceArn")
	if e != nil {
		return topic.TopicInfo{}, e
	}
	ti, e := f.existing(name)
	if e != nil && e.Code == "NotFound" {
		return ti, newErr("ResourceNotFound", "Resource does not exist")
	}
	return ti, e
}

func (f *Front) tagResource(q *request) *apiError {
	ti, e := f.tagged(q)
	if e != nil {
		return e
	}
	tags, e := tagList(q.form, "Tags")
	if e != nil {
		return e
	}
	if len(tags) == 0 {
		return invalid("Tags")
	}
	_, _, err := f.b.PutTopic(q.r.Context(), ti.Name, func(cfg *topic.Config, exists bool) error {
		if !exists {
			return topic.ErrTopicNotFound
		}
		next := maps.Clone(cfg.Tags)
		if next == nil {
			next = map[string]string{}
		}
		maps.Copy(next, tags)
		if e := checkTags(next); e != nil {
			return e
		}
		cfg.Tags = next
		return nil
	})
	if err != nil {
		return f.errorOf(err)
	}
	return nil
}

func (f *Front) untagResource(q *request) *apiError {
	ti, e := f.tagged(q)
	if e != nil {
		return e
	}
	n, e := members(q.form, "TagKeys.member")
	if e != nil {
		return e
	}
	if n == 0 {
		return invalid("TagKeys")
	}
	_, _, err := f.b.PutTopic(q.r.Context(), ti.Name, func(cfg *topic.Config, exists bool) error {
		if !exists {
			return topic.ErrTopicNotFound
		}
		next := maps.Clone(cfg.Tags)
		for i := 1; i <= n; i++ {
			delete(next, q.form.Get("TagKeys.member."+strconv.Itoa(i)))
		}
		cfg.Tags = next
		return nil
	})
	if err != nil {
		return f.errorOf(err)
	}
	return nil
}

func (f *Front) listTags(q *request) *apiError {
	ti, e := f.tagged(q)
	if e != nil {
		return e
	}
	keys := slices.Sorted(maps.Keys(ti.Config.Tags))
	q.out.open("Tags")
	for _, k := range keys {
		q.out.open("member")
		q.out.el("Key", k)
		q.out.el("Value", ti.Config.Tags[k])
		q.out.close("member")
	}
	q.out.close("Tags")
	return nil
}
