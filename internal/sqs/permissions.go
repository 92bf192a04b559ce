package sqs

import (
	"slices"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/names"
)

// Permissions. The principal a request was signed by travels in its context
// (Authenticate puts it there); every action's rule (actionTable) is checked by check
// before the handler runs, on the queue the request names, and the handlers check what
// their rule's Also says on the other queues a request names, before they look those
// queues up: a caller learns nothing of a queue it may not use, not even whether it
// exists. A refusal is an *access.DeniedError, which internal/errcode answers as
// AccessDenied (403) naming the permission and the queue.

// check refuses a request whose caller lacks its action's permission on the queue it
// names. A request that names no queue where its rule looks (the member is missing, is
// not a string, or names no valid queue) passes to the handler, which reads the same
// member the same way and refuses it for that (MissingParameter, InvalidAddress,
// SerializationException, …): it acts on nothing.
func (f *Front) check(q *request, rule auth.Rule) *apiError {
	if rule.Open || rule.Filtered {
		return nil
	}
	name, ok := f.namedQueue(q, rule.Param)
	if !ok {
		return nil
	}
	return f.require(q, rule.Permission, name)
}

// require checks that the caller may do perm on queue name.
func (f *Front) require(q *request, perm access.Permission, name string) *apiError {
	if err := auth.Require(q.r.Context(), perm, access.QueueNamed(name)); err != nil {
		return f.errorOf(err, name)
	}
	return nil
}

// mayBrowse keeps the queues of a listing the caller may browse (a listing refuses
// nothing; it shows less).
func mayBrowse(q *request, queues []string) []string {
	ctx := q.r.Context()
	return slices.DeleteFunc(queues, func(n string) bool { return !auth.Allowed(ctx, access.Browse, access.QueueNamed(n)) })
}

// namedQueue returns the queue the request names in its member param, read as its
// handler reads it: each member into a struct of that member alone, so that whatever
// else the body holds is the handler's to judge.
func (f *Front) namedQueue(q *request, param string) (string, bool) {
	switch param {
	case "QueueUrl":
		if pre, ok := q.pre.(queueURLer); ok {
			name, e := nameFromURL(deref(pre.queueURL()))
			return name, e == nil
		}
		var in struct {
			V *string `json:"QueueUrl"`
		}
		if q.decode(&in) != nil {
			return "", false
		}
		name, e := nameFromURL(deref(in.V))
		return name, e == nil
	case "QueueName":
		var in struct {
			V *string `json:"QueueName"`
		}
		if q.decode(&in) != nil {
			return "", false
		}
		// Any name, valid or not: patterns match any string, and a caller without the
		// permission learns nothing more from its refusal than from QueueDoesNotExist.
		return deref(in.V), deref(in.V) != ""
	case "SourceArn":
		var in struct {
			V *string `json:"SourceArn"`
		}
		if q.decode(&in) != nil {
			return "", false
		}
		return nameFromARN(deref(in.V))
	case "TaskHandle":
		var in struct {
			V *string `json:"TaskHandle"`
		}
		if q.decode(&in) != nil {
			return "", false
		}
		id, named, ok := parseTaskHandle(deref(in.V))
		if !ok {
			return "", false
		}
		// The task's own source, not the one its handle claims; for a task that does not
		// exist, the handle's, so that a stranger's guess is refused like any other.
		if t, err := f.b.Task(id); err == nil {
			return t.SourceName, true
		}
		return named, names.Validate(named) == nil
	}
	panic("sqs: a rule names the unknown request member " + param) // a bug of actionTable
}
