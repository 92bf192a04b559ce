package sqs

import (
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/queue"
)

// Message move tasks are okiba redrive tasks (docs/semantics.md "Redrive"): durable, resumed
// after a restart, listed and cancelled through either API. A task handle is the
// base64url encoding of "okiba-redrive:<task id>:<source queue>".

const handlePrefix = "okiba-redrive:"

func taskHandle(t queue.Task) string {
	return base64.RawURLEncoding.EncodeToString([]byte(handlePrefix + strconv.FormatUint(t.ID, 10) + ":" + t.SourceName))
}

// parseTaskHandle returns the task id a handle names and the source queue it claims
// (which only the task itself can vouch for).
func parseTaskHandle(h string) (uint64, string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		return 0, "", false
	}
	rest, ok := strings.CutPrefix(string(b), handlePrefix)
	if !ok {
		return 0, "", false
	}
	idStr, source, _ := strings.Cut(rest, ":")
	id, err := strconv.ParseUint(idStr, 10, 64)
	return id, source, err == nil
}

func taskStatus(s queue.TaskState) string {
	switch s {
	case queue.TaskRunning:
		return "RUNNING"
	case queue.TaskCompleted:
		return "COMPLETED"
	case queue.TaskCancelled:
		return "CANCELLED"
	}
	return "FAILED"
}

// arnName reads an ARN parameter as a queue name, without looking the queue up.
func arnName(param string, arn *string) (string, *apiError) {
	if deref(arn) == "" {
		return "", missingParam(param)
	}
	name, ok := nameFromARN(*arn)
	if !ok {
		return "", invalidParam("Value %q for parameter %s is invalid. Reason: not an SQS queue ARN (arn:aws:sqs:<region>:<account-id>:<queue-name>).", *arn, param)
	}
	return name, nil
}

// queueExists answers for an ARN parameter naming a queue that does not exist.
func (f *Front) queueExists(param, name string) *apiError {
	if _, err := f.b.QueueConfig(name); err != nil {
		return newErr(kResourceNotFound, "The resource that you specified for the %s parameter doesn't exist: queue %s.", param, name)
	}
	return nil
}

// arnQueue resolves an ARN parameter to an existing queue's name.
func (f *Front) arnQueue(param string, arn *string) (string, *apiError) {
	name, e := arnName(param, arn)
	if e != nil {
		return "", e
	}
	return name, f.queueExists(param, name)
}

func (f *Front) startMoveTask(q *request) (any, *apiError) {
	var in startMoveIn
	if e := q.decode(&in); e != nil {
		return nil, e
	}
	src, e := f.arnQueue("SourceArn", in.SourceARN)
	if e != nil {
		return nil, e
	}
	spec := queue.RedriveSpec{Source: src}
	if deref(in.DestinationARN) != "" {
		if spec.Target, e = arnName("DestinationArn", in.DestinationARN); e != nil {
			return nil, e
		}
		// The move sends to the destination: refused before the caller learns whether
		// it exists.
		if e := f.require(q, access.Send, spec.Target); e != nil {
			return nil, e
		}
		if e := f.queueExists("DestinationArn", spec.Target); e != nil {
			return nil, e
		}
	}
	if in.MaxNumberOfMessagesPerSecond != nil {
		r := *in.MaxNumberOfMessagesPerSecond
		if r < 1 || r > 500 {
			return nil, invalidParam("Value %d for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: must be between 1 and 500.", r)
		}
		spec.Rate = int(r)
	}
	qi, err := f.b.Queue(src)
	if err != nil {
		return nil, f.errorOf(err, src)
	}
	if len(qi.DeadLetterSources) == 0 {
		return nil, invalidParam("Source queue %s must be configured as a dead-letter queue of another queue.", src)
	}
	if spec.Target == "" {
		// Back where they came from: send on each of the queues that name src (known,
		// checked first) and, under the lock that starts the task, on every queue its
		// messages came from (StartRedriveChecked).
		for _, s := range qi.DeadLetterSources {
			if e := f.require(q, access.Send, s); e != nil {
				return nil, e
			}
		}
	}
	for _, t := range f.b.Tasks() {
		if t.SourceName == src && t.State == queue.TaskRunning {
			return nil, invalidParam("There is already a task running on %s: only one active message move task is allowed per source queue.", src)
		}
	}
	ctx := q.r.Context()
	t, err := f.b.StartRedriveChecked(ctx, spec, func(targets []string) error {
		for _, name := range targets {
			if err := auth.Require(ctx, access.Send, access.QueueNamed(name)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, f.errorOf(err, src)
	}
	return startMoveOut{TaskHandle: taskHandle(t)}, nil
}

func (f *Front) listMoveTasks(q *request) (any, *apiError) {
	var in listMovesIn
	if e := q.decode(&in); e != nil {
		return nil, e
	}
	src, e := f.arnQueue("SourceArn", in.SourceARN)
	if e != nil {
		return nil, e
	}
	max := 1
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > 10 {
			return nil, invalidParam("Value %d for parameter MaxResults is invalid. Reason: must be between 1 and 10.", *in.MaxResults)
		}
		max = int(*in.MaxResults)
	}
	out := listMovesOut{Results: []moveTask{}}
	for _, t := range f.b.Tasks() { // newest first
		if t.SourceName != src {
			continue
		}
		if len(out.Results) == max {
			break
		}
		mt := moveTask{
			Status:                           taskStatus(t.State),
			SourceArn:                        f.queueARN(t.SourceName),
			ApproximateNumberOfMessagesMoved: t.Moved,
			StartedTimestamp:                 t.CreatedAt,
		}
		total := t.Total
		mt.ApproximateNumberOfMessagesToMove = &total
		if t.TargetName != "" {
			mt.DestinationArn = f.queueARN(t.TargetName)
		}
		if t.Rate > 0 {
			r := int64(t.Rate)
			mt.MaxNumberOfMessagesPerSecond = &r
		}
		if t.State == queue.TaskRunning {
			mt.TaskHandle = taskHandle(t)
		}
		if t.State == queue.TaskFailed {
			mt.FailureReason = t.Message
		}
		out.Results = append(out.Results, mt)
	}
	return out, nil
}

func (f *Front) cancelMoveTask(q *request) (any, *apiError) {
	var in cancelMoveIn
	if e := q.decode(&in); e != nil {
		return nil, e
	}
	if deref(in.TaskHandle) == "" {
		return nil, missingParam("TaskHandle")
	}
	id, _, ok := parseTaskHandle(*in.TaskHandle)
	if !ok {
		return nil, newErr(kResourceNotFound, "Task handle %q does not name a message move task.", *in.TaskHandle)
	}
	t, err := f.b.CancelRedrive(q.r.Context(), id)
	if err != nil {
		return nil, f.errorOf(err, "")
	}
	return cancelMoveOut{ApproximateNumberOfMessagesMoved: t.Moved}, nil
}
