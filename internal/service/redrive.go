package service

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/queue"
)

// Redrive starts a task that moves messages out of the queue source (usually a
// dead-letter queue), as in says. Besides manage on source (the route's), it needs send
// on every queue the task would move messages into: in.To, or, when messages go back
// where they came from, each queue they came from — checked with the start, under the
// broker's lock (broker.StartRedriveChecked).
func (s *Service) Redrive(ctx context.Context, source string, in api.RedriveRequest) (api.RedriveTask, *api.Error) {
	spec := queue.RedriveSpec{Source: source, Target: in.To, From: in.From, Rate: in.Rate,
		Filter: queue.RedriveFilter{Reason: in.Reason, Group: in.Group}}
	if in.OlderThan != nil {
		if in.OlderThan.D() < 0 {
			return api.RedriveTask{}, Invalid("older_than must not be negative")
		}
		spec.Filter.OlderThan = in.OlderThan.D().Milliseconds()
	}
	if in.Rate < 0 {
		return api.RedriveTask{}, Invalid("rate must be 0 (as fast as possible) or positive")
	}
	if len(in.IDs) > api.MaxRedriveIDs {
		return api.RedriveTask{}, &api.Error{Code: api.CodeBatchTooLarge, Message: fmt.Sprintf("at most %d ids in one redrive", api.MaxRedriveIDs)}
	}
	for _, v := range in.IDs {
		id, err := strconv.ParseUint(v, 16, 64)
		if err != nil || len(v) != 16 {
			return api.RedriveTask{}, &api.Error{Code: api.CodeInvalidID, Message: fmt.Sprintf("ids: %q is not a message id (16 hex digits)", v)}
		}
		spec.Filter.IDs = append(spec.Filter.IDs, id)
	}
	t, err := s.b.StartRedriveChecked(ctx, spec, func(targets []string) error {
		for _, q := range targets {
			if err := auth.Require(ctx, access.Send, access.QueueNamed(q)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return api.RedriveTask{}, s.errorOf(err)
	}
	return wireTask(t), nil
}

// Redrives lists the redrive tasks, running and finished, that the caller in ctx may
// see: those whose source queue it may browse.
func (s *Service) Redrives(ctx context.Context) api.RedriveList {
	ts := s.b.Tasks()
	out := api.RedriveList{Tasks: make([]api.RedriveTask, 0, len(ts))}
	for _, t := range ts {
		if auth.Allowed(ctx, access.Browse, access.QueueNamed(t.SourceName)) {
			out.Tasks = append(out.Tasks, wireTask(t))
		}
	}
	return out
}

// taskID reads a redrive task's id (a decimal number).
func taskID(v string) (uint64, *api.Error) {
	id, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, &api.Error{Code: api.CodeInvalidID, Message: fmt.Sprintf("%q is not a redrive task id (a decimal number)", v)}
	}
	return id, nil
}

// task returns the redrive task id once the caller in ctx holds perm on its source
// queue. A task on a queue the caller may not see answers forbidden, as the queue
// itself would, rather than not found.
func (s *Service) task(ctx context.Context, id string, perm access.Permission) (queue.Task, *api.Error) {
	n, e := taskID(id)
	if e != nil {
		return queue.Task{}, e
	}
	t, err := s.b.Task(n)
	if err == nil {
		err = auth.Require(ctx, perm, access.QueueNamed(t.SourceName))
	}
	if err != nil {
		return queue.Task{}, s.errorOf(err)
	}
	return t, nil
}

// RedriveTask returns one redrive task, by its id; it needs browse on the task's source
// queue.
func (s *Service) RedriveTask(ctx context.Context, id string) (api.RedriveTask, *api.Error) {
	t, e := s.task(ctx, id, access.Browse)
	if e != nil {
		return api.RedriveTask{}, e
	}
	return wireTask(t), nil
}

// CancelRedrive stops a running redrive task; what it moved stays moved. It needs
// manage on the task's source queue.
func (s *Service) CancelRedrive(ctx context.Context, id string) (api.RedriveTask, *api.Error) {
	cur, e := s.task(ctx, id, access.Manage)
	if e != nil {
		return api.RedriveTask{}, e
	}
	t, err := s.b.CancelRedrive(ctx, cur.ID)
	if err != nil {
		return api.RedriveTask{}, s.errorOf(err)
	}
	return wireTask(t), nil
}

func wireTask(t queue.Task) api.RedriveTask {
	out := api.RedriveTask{
		ID: strconv.FormatUint(t.ID, 10), Source: t.SourceName, To: t.TargetName, From: t.FromName,
		Reason: t.Filter.Reason, Group: t.Filter.Group, Rate: t.Rate, State: t.State.String(),
		Total: t.Total, Moved: t.Moved, Skipped: t.Skipped, Message: t.Message,
		CreatedAt: time.UnixMilli(t.CreatedAt).UTC(), UpdatedAt: time.UnixMilli(t.UpdatedAt).UTC(),
	}
	if t.Filter.OlderThan > 0 {
		out.OlderThan = api.Ptr(time.Duration(t.Filter.OlderThan) * time.Millisecond)
	}
	for _, id := range t.Filter.IDs {
		out.IDs = append(out.IDs, queue.FormatID(id))
	}
	return out
}
