package sns

import (
	"bytes"
	"encoding/xml"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/okiba/okiba/internal/names"
)

// The query protocol as SNS shapes it. Maps arrive flattened as
// <Map>.entry.N.key / .value (Attributes) or <Map>.entry.N.Name / .Value.<member>
// (MessageAttributes), lists as <List>.member.N[.<member>]; answers are XML with lists
// as <List><member>…</member></List> and maps as <Map><entry><key>…</key><value>…
// </value></entry></Map>.

type xmlWriter struct{ bytes.Buffer }

func escape(b *bytes.Buffer, s string) { _ = xml.EscapeText(b, []byte(s)) }

func (x *xmlWriter) el(name, text string) {
	x.WriteString("<" + name + ">")
	escape(&x.Buffer, text)
	x.WriteString("</" + name + ">")
}

func (x *xmlWriter) open(name string)  { x.WriteString("<" + name + ">") }
func (x *xmlWriter) close(name string) { x.WriteString("</" + name + ">") }

// attrMap writes a map of attributes, by key.
func (x *xmlWriter) attrMap(name string, m map[string]string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	x.open(name)
	for _, k := range keys {
		x.open("entry")
		x.el("key", k)
		x.el("value", m[k])
		x.close("entry")
	}
	x.close(name)
}

// members returns how many members the flattened list or map prefix has (prefix.1,
// prefix.2, … without gaps, as every SDK numbers them).
func members(form url.Values, prefix string) (int, *apiError) {
	seen := map[int]bool{}
	for k := range form {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || strconv.Itoa(n) != num {
			return 0, newErr("MalformedQueryString", "parameter %s: the members of %s are numbered 1, 2, 3, …", k, prefix)
		}
		seen[n] = true
	}
	for i := 1; i <= len(seen); i++ {
		if !seen[i] {
			return 0, newErr("MalformedQueryString", "the members of %s are numbered 1, 2, 3, … without gaps; %d is missing", prefix, i)
		}
	}
	return len(seen), nil
}

// stringMap reads the flattened map prefix.entry.N.key/.value.
func stringMap(form url.Values, prefix string) (map[string]string, *apiError) {
	n, e := members(form, prefix+".entry")
	if e != nil || n == 0 {
		return nil, e
	}
	m := make(map[string]string, n)
	for i := 1; i <= n; i++ {
		el := prefix + ".entry." + strconv.Itoa(i) + "."
		k, ok := form[el+"key"]
		if !ok {
			return nil, newErr("MissingParameter", "The request must contain the parameter %skey.", el)
		}
		if _, dup := m[k[0]]; dup {
			return nil, invalid("%s: %s is given twice", prefix, k[0])
		}
		m[k[0]] = form.Get(el + "value")
	}
	return m, nil
}

// tagList reads the flattened list prefix.member.N.Key/.Value.
func tagList(form url.Values, prefix string) (map[string]string, *apiError) {
	n, e := members(form, prefix+".member")
	if e != nil || n == 0 {
		return nil, e
	}
	m := make(map[string]string, n)
	for i := 1; i <= n; i++ {
		el := prefix + ".member." + strconv.Itoa(i) + "."
		k, ok := form[el+"Key"]
		if !ok {
			return nil, newErr("MissingParameter", "The request must contain the parameter %sKey.", el)
		}
		m[k[0]] = form.Get(el + "Value")
	}
	return m, nil
}

// ---------------------------------------------------------------------------------------
// ARNs

// topicARN is the ARN of topic name.
func (f *Front) topicARN(name string) string {
	return "arn:aws:sns:" + f.opts.Region + ":" + f.opts.AccountID + ":" + name
}

// subARN is the ARN of subscription sub of topic name.
func (f *Front) subARN(topicName, sub string) string { return f.topicARN(topicName) + ":" + sub }

// queueARN is the ARN of queue name, as the SQS front names it.
func (f *Front) queueARN(name string) string {
	return "arn:aws:sqs:" + f.opts.Region + ":" + f.opts.AccountID + ":" + name
}

// topicOfARN returns the topic an ARN of this front's region and account names; param
// names the parameter for the error.
func (f *Front) topicOfARN(arn, param string) (string, *apiError) {
	if arn == "" {
		return "", invalid("%s", param)
	}
	p := strings.Split(arn, ":")
	if len(p) != 6 || p[0] != "arn" || p[2] != "sns" || p[3] != f.opts.Region || p[4] != f.opts.AccountID || names.ValidateTopic(p[5]) != nil {
		return "", invalid("%s Reason: %q is not the ARN of a topic of region %s and account %s (arn:aws:sns:%s:%s:<topic>)", param, arn, f.opts.Region, f.opts.AccountID, f.opts.Region, f.opts.AccountID)
	}
	return p[5], nil
}

// parseSubARN returns the topic and subscription a subscription ARN names.
func (f *Front) parseSubARN(arn string) (string, string, *apiError) {
	i := strings.LastIndexByte(arn, ':')
	if i < 0 || arn == "" {
		return "", "", invalid("SubscriptionArn")
	}
	t, e := f.topicOfARN(arn[:i], "SubscriptionArn")
	if e != nil || arn[i+1:] == "" {
		return "", "", invalid("SubscriptionArn Reason: %q is not the ARN of a subscription (<topic ARN>:<subscription>)", arn)
	}
	return t, arn[i+1:], nil
}

// queueOfEndpoint returns the okiba queue an sqs endpoint names: a queue ARN of this
// front's region and account, or a queue URL (<scheme>://<host>/<account>/<queue>).
func (f *Front) queueOfEndpoint(endpoint string) (string, *apiError) {
	bad := invalid("SQS endpoint ARN Reason: %q names no queue: give a queue's ARN (arn:aws:sqs:%s:%s:<queue>) or URL", endpoint, f.opts.Region, f.opts.AccountID)
	if p := strings.Split(endpoint, ":"); len(p) == 6 && p[0] == "arn" && p[2] == "sqs" {
		if p[3] != f.opts.Region || p[4] != f.opts.AccountID || names.Validate(p[5]) != nil {
			return "", bad
		}
		return p[5], nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" {
		return "", bad
	}
	p := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(p) != 2 || p[0] != f.opts.AccountID || names.Validate(p[1]) != nil {
		return "", bad
	}
	return p[1], nil
}

// boolAttr reads an attribute that is "true" or "false".
func boolAttr(name, v string) (bool, *apiError) {
	switch strings.ToLower(v) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, invalid("Attributes Reason: %s must be true or false, got %q", name, v)
}
