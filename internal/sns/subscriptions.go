package sns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/filter"
	"github.com/okiba/okiba/internal/names"
	"github.com/okiba/okiba/topic"
)

// Subscriptions. An SNS subscription is an okiba subscription named sns-<32 hex
// digits> from the topic into the queue its endpoint names, with the filter policy as
// its filter; its other attributes are kept in the state topic (state.go). Every okiba
// subscription of a topic is listed, those made natively too: they deliver raw, as
// okiba's subscriptions do, and Deliver leaves their messages alone.

// subPrefix begins the name of every subscription SNS makes.
const subPrefix = "sns-"

// subAttrs are the subscription attributes a client may set. RawMessageDelivery,
// FilterPolicy, FilterPolicyScope and RedrivePolicy change what okiba does; the others
// are stored.
var subAttrs = map[string]bool{
	"RawMessageDelivery": true, "FilterPolicy": true, "FilterPolicyScope": true, "RedrivePolicy": true,
	"DeliveryPolicy": true, "SubscriptionRoleArn": true, "ReplayPolicy": true,
}

// subSettings are a subscription's attributes, checked.
type subSettings struct {
	attrs  map[string]string // as given, FilterPolicy and FilterPolicyScope among them
	filter []byte
	scope  filter.Scope
}

// checkSubAttrs checks a subscription's attributes for a subscription of topic into
// queue; dlq is the queue a RedrivePolicy names ("" for none).
func (f *Front) checkSubAttrs(q *request, attrs map[string]string, topicName string) (subSettings, string, *apiError) {
	s := subSettings{attrs: attrs}
	for k, v := range attrs {
		if !subAttrs[k] {
			return s, "", invalid("Attributes Reason: unknown attribute %s", k)
		}
		switch k {
		case "RawMessageDelivery":
			if _, e := boolAttr(k, v); e != nil {
				return s, "", e
			}
		case "DeliveryPolicy", "ReplayPolicy":
			if v != "" && !jsonObject(v) {
				return s, "", invalid("Attributes Reason: %s must be a JSON object", k)
			}
		}
	}
	switch attrs["FilterPolicyScope"] {
	case "", "MessageAttributes":
		s.scope = filter.Attributes
	case "MessageBody":
		s.scope = filter.Body
	default:
		return s, "", invalid("Attributes Reason: FilterPolicyScope must be MessageAttributes or MessageBody, got %q", attrs["FilterPolicyScope"])
	}
	if p := attrs["FilterPolicy"]; p != "" {
		pol, err := filter.Parse([]byte(p), s.scope)
		if err != nil {
			return s, "", invalid("Filter policy: %v", err)
		}
		s.filter = pol.Canonical()
	}
	var dlq string
	if rp := attrs["RedrivePolicy"]; rp != "" {
		var v struct {
			Target string `json:"deadLetterTargetArn"`
		}
		if json.Unmarshal([]byte(rp), &v) != nil || v.Target == "" {
			return s, "", invalid("RedrivePolicy: must be a JSON object naming a deadLetterTargetArn")
		}
		name, e := f.queueOfEndpoint(v.Target)
		if e != nil || !strings.HasPrefix(v.Target, "arn:") {
			return s, "", invalid("RedrivePolicy: deadLetterTargetArn %q is not the ARN of a queue of this account and region", v.Target)
		}
		if names.IsFIFO(name) != names.IsFIFO(topicName) {
			return s, "", invalid("RedrivePolicy: the dead-letter queue of a FIFO topic's subscription is a FIFO queue, and only that one's")
		}
		if e := f.require(q, access.Send, access.QueueNamed(name)); e != nil {
			return s, "", e
		}
		if _, err := f.b.QueueConfig(name); err != nil {
			return s, "", invalid("RedrivePolicy: deadLetterTargetArn %q: the queue does not exist", v.Target)
		}
		dlq = name
	}
	return s, dlq, nil
}

func (f *Front) subscribe(q *request) *apiError {
	ti, e := f.topicOf(q)
	if e != nil {
		return e
	}
	if p := q.form.Get("Protocol"); p != "sqs" {
		return invalid("Protocol Reason: okiba delivers to SQS queues only (protocol sqs), not %q", p)
	}
	queueName, e := f.queueOfEndpoint(q.form.Get("Endpoint"))
	if e != nil {
		return e
	}
	if names.IsFIFO(ti.Name) != names.IsFIFO(queueName) {
		if names.IsFIFO(ti.Name) {
			return invalid("Invalid parameter: Endpoint Reason: FIFO topics deliver only to FIFO queues")
		}
		return invalid("Invalid parameter: Endpoint Reason: standard topics cannot deliver to FIFO queues")
	}
	if e := f.require(q, access.Send, access.QueueNamed(queueName)); e != nil {
		return e
	}
	attrs, e := stringMap(q.form, "Attributes")
	if e != nil {
		return e
	}
	if attrs == nil {
		attrs = map[string]string{}
	}
	set, _, e := f.checkSubAttrs(q, attrs, ti.Name)
	if e != nil {
		return e
	}
	ctx := q.r.Context()
	subs, err := f.b.Subscriptions(ti.Name)
	if err != nil {
		return f.errorOf(err)
	}
	// As SNS: subscribing the same endpoint again answers the subscription there is, if
	// the attributes given are its own.
	for _, s := range subs {
		if s.Queue != queueName || !strings.HasPrefix(s.Name, subPrefix) {
			continue
		}
		cur, err := f.attrs(ctx, subKey(ti.Name, s.Name), ti.ID, s.CreatedAt)
		if err != nil {
			return f.errorOf(err)
		}
		for k, v := range attrs {
			if cur[k] != v {
				return invalid("Attributes Reason: Subscription already exists with different attributes")
			}
		}
		q.out.el("SubscriptionArn", f.subARN(ti.Name, s.Name))
		return nil
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	name := subPrefix + hex.EncodeToString(id[:])
	si, _, err := f.b.Subscribe(ctx, ti.Name, name, topic.SubscriptionConfig{Queue: queueName, Filter: set.filter, Scope: set.scope}, broker.SubStart{})
	if err != nil {
		return f.errorOf(err)
	}
	if len(attrs) > 0 {
		if err := f.putAttrs(ctx, subKey(ti.Name, name), ti.ID, si.CreatedAt, attrs); err != nil {
			return f.errorOf(err)
		}
	}
	q.out.el("SubscriptionArn", f.subARN(ti.Name, name))
	return nil
}

// subscriptionOf returns the subscription a request's SubscriptionArn names, with its
// topic.
func (f *Front) subscriptionOf(q *request) (topic.TopicInfo, broker.SubscriptionInfo, *apiError) {
	tn, sn, e := f.parseSubARN(q.form.Get("SubscriptionArn"))
	if e != nil {
		return topic.TopicInfo{}, broker.SubscriptionInfo{}, e
	}
	ti, e := f.existing(tn)
	if e != nil {
		return ti, broker.SubscriptionInfo{}, newErr("NotFound", "Subscription does not exist")
	}
	si, err := f.b.Subscription(tn, sn)
	if errors.Is(err, topic.ErrSubscriptionNotFound) {
		return ti, si, newErr("NotFound", "Subscription does not exist")
	}
	if err != nil {
		return ti, si, f.errorOf(err)
	}
	return ti, si, nil
}

// confirmSubscription: a subscription of an SQS queue of this account is confirmed as it
// is made, so there is nothing to confirm; the token okiba takes is the subscription's
// ARN or name, and the answer names it.
func (f *Front) confirmSubscription(q *request) *apiError {
	ti, e := f.topicOf(q)
	if e != nil {
		return e
	}
	tok := q.form.Get("Token")
	if tok == "" {
		return invalid("Token")
	}
	name := tok
	if strings.HasPrefix(tok, "arn:") {
		tn, sn, e := f.parseSubARN(tok)
		if e != nil || tn != ti.Name {
			return invalid("Token")
		}
		name = sn
	}
	if _, err := f.b.Subscription(ti.Name, name); err != nil {
		return invalid("Token Reason: no subscription of this topic has that token (okiba confirms SQS subscriptions as they are made: give the subscription's ARN)")
	}
	q.out.el("SubscriptionArn", f.subARN(ti.Name, name))
	return nil
}

func (f *Front) unsubscribe(q *request) *apiError {
	ti, si, e := f.subscriptionOf(q)
	if e != nil {
		return e
	}
	if err := f.b.Unsubscribe(q.r.Context(), ti.Name, si.Name); err != nil {
		return f.errorOf(err)
	}
	return nil
}

// subEntry is one subscription as the List calls show it.
type subEntry struct{ topic, name, queue string }

func (f *Front) writeSubs(q *request, all []subEntry) *apiError {
	start, e := pageStart(q.form.Get("NextToken"), len(all))
	if e != nil {
		return e
	}
	end := min(start+pageSize, len(all))
	q.out.open("Subscriptions")
	for _, s := range all[start:end] {
		q.out.open("member")
		q.out.el("SubscriptionArn", f.subARN(s.topic, s.name))
		q.out.el("Owner", f.opts.AccountID)
		q.out.el("Protocol", "sqs")
		q.out.el("Endpoint", f.queueARN(s.queue))
		q.out.el("TopicArn", f.topicARN(s.topic))
		q.out.close("member")
	}
	q.out.close("Subscriptions")
	if end < len(all) {
		q.out.el("NextToken", strconv.Itoa(end))
	}
	return nil
}

func (f *Front) listSubscriptions(q *request) *apiError {
	var all []subEntry
	for _, t := range f.visibleTopics(q.r.Context()) {
		subs, err := f.b.Subscriptions(t.Name)
		if err != nil {
			continue // deleted meanwhile
		}
		for _, s := range subs {
			all = append(all, subEntry{t.Name, s.Name, s.Queue})
		}
	}
	return f.writeSubs(q, all)
}

func (f *Front) listSubscriptionsByTopic(q *request) *apiError {
	ti, e := f.topicOf(q)
	if e != nil {
		return e
	}
	subs, err := f.b.Subscriptions(ti.Name)
	if err != nil {
		return f.errorOf(err)
	}
	all := make([]subEntry, len(subs))
	for i, s := range subs {
		all[i] = subEntry{ti.Name, s.Name, s.Queue}
	}
	return f.writeSubs(q, all)
}

// subView is what okiba knows of a subscription as SNS sees it.
type subView struct {
	raw   bool
	attrs map[string]string
}

// viewOf reads a subscription's SNS attributes. A subscription okiba made natively
// delivers raw.
func (f *Front) viewOf(ctx context.Context, ti topic.TopicInfo, si topic.SubscriptionInfo) (subView, error) {
	attrs, err := f.attrs(ctx, subKey(ti.Name, si.Name), ti.ID, si.CreatedAt)
	if err != nil {
		return subView{}, err
	}
	v := subView{attrs: attrs, raw: !strings.HasPrefix(si.Name, subPrefix)}
	if r, ok := attrs["RawMessageDelivery"]; ok {
		v.raw = strings.EqualFold(r, "true")
	}
	return v, nil
}

func (f *Front) getSubscriptionAttributes(q *request) *apiError {
	ti, si, e := f.subscriptionOf(q)
	if e != nil {
		return e
	}
	v, err := f.viewOf(q.r.Context(), ti, si.SubscriptionInfo)
	if err != nil {
		return f.errorOf(err)
	}
	out := map[string]string{
		"SubscriptionArn": f.subARN(ti.Name, si.Name), "TopicArn": f.topicARN(ti.Name), "Owner": f.opts.AccountID,
		"Protocol": "sqs", "Endpoint": f.queueARN(si.Queue), "ConfirmationWasAuthenticated": "true",
		"PendingConfirmation": "false", "RawMessageDelivery": strconv.FormatBool(v.raw),
		"SubscriptionPrincipal": "arn:aws:iam::" + f.opts.AccountID + ":user/okiba",
	}
	for k, val := range v.attrs {
		out[k] = val
	}
	out["RawMessageDelivery"] = strconv.FormatBool(v.raw)
	if _, ok := v.attrs["FilterPolicy"]; !ok && len(si.Filter) > 0 { // a native subscription's filter
		out["FilterPolicy"] = string(si.Filter)
	}
	if out["FilterPolicy"] != "" && out["FilterPolicyScope"] == "" {
		out["FilterPolicyScope"] = "MessageAttributes"
		if si.Scope == filter.Body {
			out["FilterPolicyScope"] = "MessageBody"
		}
	}
	if dp, ok := v.attrs["DeliveryPolicy"]; ok {
		out["EffectiveDeliveryPolicy"] = dp
	} else {
		out["EffectiveDeliveryPolicy"] = defaultDeliveryPolicy
	}
	q.out.attrMap("Attributes", out)
	return nil
}

func (f *Front) setSubscriptionAttributes(q *request) *apiError {
	ti, si, e := f.subscriptionOf(q)
	if e != nil {
		return e
	}
	name, val := q.form.Get("AttributeName"), q.form.Get("AttributeValue")
	if !subAttrs[name] {
		return invalid("AttributeName: %q is not an attribute SetSubscriptionAttributes can set", name)
	}
	ctx := q.r.Context()
	v, err := f.viewOf(ctx, ti, si.SubscriptionInfo)
	if err != nil {
		return f.errorOf(err)
	}
	next := v.attrs
	if _, ok := next["FilterPolicy"]; !ok && len(si.Filter) > 0 {
		next["FilterPolicy"] = string(si.Filter)
	}
	if name == "FilterPolicy" && val == "" {
		delete(next, "FilterPolicy")
	} else {
		next[name] = val
	}
	set, _, e := f.checkSubAttrs(q, next, ti.Name)
	if e != nil {
		return e
	}
	if name == "FilterPolicy" || name == "FilterPolicyScope" {
		if _, _, err := f.b.Subscribe(ctx, ti.Name, si.Name, topic.SubscriptionConfig{Queue: si.Queue, Filter: set.filter, Scope: set.scope}, broker.SubStart{}); err != nil {
			return f.errorOf(err)
		}
	}
	if err := f.putAttrs(ctx, subKey(ti.Name, si.Name), ti.ID, si.CreatedAt, next); err != nil {
		return f.errorOf(err)
	}
	return nil
}

// jsonObject reports whether s is a JSON object.
func jsonObject(s string) bool {
	var v map[string]any
	return json.Unmarshal([]byte(s), &v) == nil
}
