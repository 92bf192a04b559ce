package sqs

import (
	"encoding/base64"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/names"
	"github.com/okiba/okiba/queue"
)

// now is the front's time for purge limits and attempt memory (Options.Clock).
func (f *Front) now() time.Time { return f.opts.Clock.Now() }

// queueInfo resolves a request's QueueUrl to an existing queue: its configuration, without
// statistics (every request does this; see queueStats for the counts).
func (f *Front) queueInfo(u *string) (broker.QueueInfo, *apiError) {
	return f.resolveQueue(u, f.b.QueueConfig)
}

// queueStats resolves a request's QueueUrl with the queue's statistics and dead-letter
// sources.
func (f *Front) queueStats(u *string) (broker.QueueInfo, *apiError) {
	return f.resolveQueue(u, f.b.Queue)
}

// resolveQueue resolves a request's QueueUrl with lookup, which decides how much of the
// queue is read.
func (f *Front) resolveQueue(u *string, lookup func(name string) (broker.QueueInfo, error)) (broker.QueueInfo, *apiError) {
	name, e := nameFromURL(deref(u))
	if e != nil {
		return broker.QueueInfo{}, e
	}
	qi, err := lookup(name)
	if err != nil {
		return broker.QueueInfo{}, f.errorOf(err, name)
	}
	return qi, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func keyOf(qi broker.QueueInfo) queueKey { return queueKey{qi.Name, qi.CreatedAt} }

// applyEdits applies parsed queue attributes to c, in the order they were parsed.
func applyEdits(c *queue.Config, edits []attrEdit) {
	for _, ed := range edits {
		ed(c)
	}
}

// errNoChange aborts a PutQueue edit that must not create or change anything.
var errNoChange = errors.New("no change")

func (f *Front) createQueue(q *request) (any, *apiError) {
	var in createQueueIn
	if e := q.decode(&in); e != nil {
		return nil, e
	}
	name := deref(in.QueueName)
	if name == "" {
		return nil, missingParam("QueueName")
	}
	if names.Validate(name) != nil {
		return nil, newErr(kInvalidParameterValue, "Invalid queue name %q: %s.", name, nameRule)
	}
	edits, target, e := parseQueueAttrs(name, in.Attributes, true)
	if e != nil {
		return nil, e
	}
	if e := f.checkTags(in.Tags); e != nil {
		return nil, e
	}
	if e := f.checkRedriveTarget(q, name, target); e != nil {
		return nil, e
	}
	var mismatch bool
	_, _, err := f.b.PutQueue(q.r.Context(), name, func(c *queue.Config, exists bool) error {
		if exists {
			// CreateQueue never changes an existing queue: the given attributes must
			// match it, or the answer is QueueNameExists.
			probe := c.Clone()
			applyEdits(&probe, edits)
			if !probe.Equal(*c) {
				mismatch = true
				return errNoChange
			}
			return nil
		}
		sqsDefaults(c, name)
		applyEdits(c, edits)
		if len(in.Tags) > 0 {
			c.Tags = maps.Clone(in.Tags)
		}
		return nil
	})
	if mismatch {
		return nil, newErr(kQueueNameExists, "A queue already exists with the same name and a different value for attribute(s): %s.", strings.Join(slices.Sorted(maps.Keys(in.Attributes)), ", "))
	}
	if err != nil {
		return nil, f.errorOf(err, name)
	}
	return queueURLOut{QueueURL: f.queueURL(q.r, name)}, nil
}

// checkRedriveTarget checks that the caller may send to a RedrivePolicy's dead-letter
// queue (a source sends its dead letters there), unless it is source's own default
// <name>-dlq, which manage on source covers; then that the queue exists and that its
// RedriveAllowPolicy lets source use it, as SQS does.
func (f *Front) checkRedriveTarget(q *request, source string, t *redriveTarget) *apiError {
	if t == nil {
		return nil
	}
	if t.name != names.DeadLetterName(source) {
		if e := f.require(q, access.Send, t.name); e != nil {
			return e
		}
	}
	dlq, err := f.b.QueueConfig(t.name)
	if err != nil {
		return newErr(kInvalidAttributeValue, "Value for parameter RedrivePolicy is invalid. Reason: Dead letter target %s does not exist.", f.queueARN(t.name))
	}
	if !allowsSource(dlq.Config, source) {
		return newErr(kInvalidAttributeValue, "Value for parameter RedrivePolicy is invalid. Reason: the RedriveAllowPolicy of %s does not allow %s to use it as its dead-letter queue.", t.name, source)
	}
	return nil
}

func (f *Front) checkTags(tags map[string]string) *apiError {
	if len(tags) > queue.MaxTags {
		return newErr(kInvalidParameterValue, "Too many tags: a queue has at most %d.", queue.MaxTags)
	}
	for k, v := range tags {
		if k == "" || len(k) > 128 || len(v) > 256 {
			return newErr(kInvalidParameterValue, "Tag keys must be 1 to 128 characters and values at most 256 (key %q).", k)
		}
	}
	return nil
}

func (f *Front) getQueueURL(q *request) (any, *apiError) {
	var in getQueueURLIn
	if e := q.decode(&in); e != nil {
		return nil, e
	}
	name := deref(in.QueueName)
	if name == "" {
		return nil, missingParam("QueueName")
	}
	if _, err := f.b.QueueConfig(name); err != nil { // existence only: no statistics
		return nil, f.errorOf(err, name)
	}
	return queueURLOut{QueueURL: f.queueURL(q.r, name)}, nil
}

// pageToken encodes the name after which a listing continues.
func pageToken(after string) string { return base64.RawURLEncoding.EncodeToString([]byte(after)) }

func parsePageToken(tok *string) (string, *apiError) {
	if tok == nil || *tok == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(*tok)
	if err != nil {
		return "", newErr(kInvalidParameterValue, "Invalid NextToken value.")
	}
	return string(b), nil
}

// page returns the names after the token, at most max (0: all, up to 1000), and the
// next token when more remain and max was given.
func page(names []string, tok *string, maxResults *int64) ([]string, string, *apiError) {
	after, e := parsePageToken(tok)
	if e != nil {
		return nil, "", e
	}
	limit := 1000
	if maxResults != nil {
		if *maxResults < 1 || *maxResults > 1000 {
			return nil, "", newErr(kInvalidParameterValue, "Value %d for parameter MaxResults is invalid. Reason: must be between 1 and 1000.", *maxResults)
		}
		limit = int(*maxResults)
	}
	i, _ := slices.BinarySearch(names, after)
	if after != "" && i < len(names) && names[i] == after {
		i++
	}
	rest := names[i:]
	next := ""
	if len(rest) > limit {
		rest = rest[:limit]
		if maxResults != nil {
			next = pageToken(rest[len(rest)-1])
		}
	}
	return rest, next, nil
}

func (f *Front) listQueues(q *request) (any, *apiError) {
	var in listQueuesIn
	if e := q.decode(&in); e != nil {
		return nil, e
	}
	qs := f.b.Queues(deref(in.QueueNamePrefix))
	names := make([]string, len(qs))
	for i, qi := range qs {
		names[i] = qi.Name
	}
	slices.Sort(names)
	// Only what the caller may browse, before paging, so that pages are full.
	sel, next, e := page(mayBrowse(q, names), in.NextToken, in.MaxResults)
	if e != nil {
		return nil, e
	}
	return listQueuesOut{QueueUrls: f.queueURLs(q.r, sel), NextToken: next}, nil
}

func (f *Front) deleteQueue(q *request) (any, *apiError) {
	var in queueIn
	if e := q.decode(&in); e != nil {
		return nil, e
	}
	name, e := nameFromURL(deref(in.QueueURL))
	if e != nil {
		return nil, e
	}
	// SQS deletes a queue whatever uses it as a dead-letter queue: force. Sources that
	// still name it get it back, empty, when they next dead-letter a message.
	if err := f.b.DeleteQueue(q.r.Context(), name, true); err != nil {
		return nil, f.errorOf(err, name)
	}
	return empty{}, nil
}

func (f *Front) getQueueAttributes(q *request) (any, *apiError) {
	var in getQueueAttributesIn
	if e := q.decode(&in); e != nil {
		return nil, e
	}
	qi, e := f.queueStats(in.QueueURL)
	if e != nil {
		return nil, e
	}
	all := f.queueAttributes(qi)
	out := map[string]string{}
	for _, n := range in.AttributeNames {
		if n == "All" {
			maps.Copy(out, all)
			continue
		}
		if !slices.Contains(allQueueAttrs, n) {
			return nil, newErr(kInvalidAttributeName, "Unknown Attribute %s.", n)
		}
		if v, ok := all[n]; ok {
			out[n] = v
		}
	}
	return attributesOut{Attributes: out}, nil
}

func (f *Front) setQueueAttributes(q *request) (any, *apiError) {
	var in setQueueAttributesIn
	if e := q.decode(&in); e != nil {
		return nil, e
	}
	name, e := nameFromURL(deref(in.QueueURL))
	if e != nil {
		return nil, e
	}
	edits, target, e := parseQueueAttrs(name, in.Attributes, false)
	if e != nil {
		return nil, e
	}
	// Checked before the redrive target so that a missing queue is reported as such; the
	// edit below checks again, atomically.
	if _, err := f.b.QueueConfig(name); err != nil {
		return nil, f.errorOf(err, name)
	}
	if e := f.checkRedriveTarget(q, name, target); e != nil {
		return nil, e
	}
	if err := f.editQueue(q, name, func(c *queue.Config) error {
		applyEdits(c, edits)
		return nil
	}); err != nil {
		return nil, f.errorOf(err, name)
	}
	return empty{}, nil
}

// editQueue changes an existing queue's configuration; it never creates one.
func (f *Front) editQueue(q *request, name string, edit func(c *queue.Config) error) error {
	_, _, err := f.b.PutQueue(q.r.Context(), name, func(c *queue.Config, exists bool) error {
		if !exists {
			return queue.ErrQueueNotFound
		}
		return edit(c)
	})
	return err
}

func (f *Front) purgeQueue(q *request) (any, *apiError) {
	var in queueIn
	if e := q.decode(&in); e != nil {
		return nil, e
	}
	qi, e := f.queueInfo(in.QueueURL)
	if e != nil {
		return nil, e
	}
	now := f.now()
	ok, ago := f.purges.allow(keyOf(qi), now)
	if !ok {
		return nil, newErr(kPurgeInProgress, "Only one PurgeQueue operation on %s is allowed every 60 seconds; the last one was %v ago.", qi.Name, ago.Round(time.Second))
	}
	if _, err := f.b.Purge(q.r.Context(), qi.Name); err != nil {
		f.purges.undo(keyOf(qi), now)
		return nil, f.errorOf(err, qi.Name)
	}
	return empty{}, nil
}

func (f *Front) tagQueue(q *request) (any, *apiError) {
	var in tagQueueIn
	if e := q.decode(&in); e != nil {
		return nil, e
	}
	name, e := nameFromURL(deref(in.QueueURL))
	if e != nil {
		return nil, e
	}
	if len(in.Tags) == 0 {
		return nil, missingParam("Tags")
	}
	if e := f.checkTags(in.Tags); e != nil {
		return nil, e
	}
	err := f.editQueue(q, name, func(c *queue.Config) error {
		m := maps.Clone(c.Tags)
		if m == nil {
			m = map[string]string{}
		}
		maps.Copy(m, in.Tags)
		if len(m) > queue.MaxTags {
			return newErr(kInvalidParameterValue, "Too many tags: a queue has at most %d.", queue.MaxTags)
		}
		c.Tags = m
		return nil
	})
	if err != nil {
		return nil, f.errorOf(err, name)
	}
	return empty{}, nil
}

func (f *Front) untagQueue(q *request) (any, *apiError) {
	var in untagQueueIn
	if e := q.decode(&in); e != nil {
		return nil, e
	}
	name, e := nameFromURL(deref(in.QueueURL))
	if e != nil {
		return nil, e
	}
	if len(in.TagKeys) == 0 {
		return nil, missingParam("TagKeys")
	}
	err := f.editQueue(q, name, func(c *queue.Config) error {
		m := maps.Clone(c.Tags)
		for _, k := range in.TagKeys {
			delete(m, k)
		}
		c.Tags = m
		return nil
	})
	if err != nil {
		return nil, f.errorOf(err, name)
	}
	return empty{}, nil
}

func (f *Front) listQueueTags(q *request) (any, *apiError) {
	var in queueIn
	if e := q.decode(&in); e != nil {
		return nil, e
	}
	qi, e := f.queueInfo(in.QueueURL)
	if e != nil {
		return nil, e
	}
	return tagsOut{Tags: qi.Config.Tags}, nil
}

func (f *Front) listDeadLetterSources(q *request) (any, *apiError) {
	var in listDLQSourcesIn
	if e := q.decode(&in); e != nil {
		return nil, e
	}
	qi, e := f.queueStats(in.QueueURL)
	if e != nil {
		return nil, e
	}
	names := slices.Sorted(slices.Values(qi.DeadLetterSources))
	sel, next, e := page(mayBrowse(q, names), in.NextToken, in.MaxResults)
	if e != nil {
		return nil, e
	}
	return listDLQSourcesOut{QueueUrls: f.queueURLs(q.r, sel), NextToken: next}, nil
}
