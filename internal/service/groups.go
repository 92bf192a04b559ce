package service

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/topic"
)

// Consumer groups.

func parseSession(v string) (uint64, *api.Error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == 0 {
		return 0, Invalid("session must be the decimal session a pull returned, got %q", v)
	}
	return n, nil
}

func formatSession(s uint64) string {
	if s == 0 {
		return ""
	}
	return strconv.FormatUint(s, 10)
}

// PutGroup creates a consumer group or changes its configuration.
func (s *Service) PutGroup(ctx context.Context, topicName, name string, in api.GroupConfig) (api.Group, bool, *api.Error) {
	gi, created, err := s.b.PutGroup(ctx, topicName, name, func(c *topic.GroupConfig, exists bool) error {
		if in.Start != nil {
			st, err := topic.ParseStartAt(*in.Start)
			if err != nil {
				return err
			}
			if exists && st != c.Start {
				return Invalid("start is where a group begins, at creation; to move an existing group, seek it")
			}
			c.Start = st
		}
		if in.MemberLease != nil {
			c.MemberLease = in.MemberLease.D()
		}
		if in.OnFailure != nil {
			f, err := topic.ParseOnFailure(*in.OnFailure)
			if err != nil {
				return err
			}
			c.OnFailure = f
		}
		if in.MaxFailures != nil {
			c.MaxFailures = *in.MaxFailures
		}
		return nil
	})
	if err != nil {
		if e, ok := err.(*api.Error); ok {
			return api.Group{}, false, e
		}
		return api.Group{}, false, s.errorOf(err)
	}
	return wireGroup(gi), created, nil
}

// Group describes a consumer group.
func (s *Service) Group(topicName, name string) (api.Group, *api.Error) {
	gi, err := s.b.Group(topicName, name)
	if err != nil {
		return api.Group{}, s.errorOf(err)
	}
	return wireGroup(gi), nil
}

// Groups lists a topic's consumer groups.
func (s *Service) Groups(ctx context.Context, topicName string) ([]api.Group, *api.Error) {
	gis, err := s.b.Groups(topicName)
	if err != nil {
		return nil, s.errorOf(err)
	}
	out := make([]api.Group, len(gis))
	for i, gi := range gis {
		out[i] = wireGroup(gi)
	}
	return out, nil
}

// DeleteGroup deletes a consumer group.
func (s *Service) DeleteGroup(ctx context.Context, topicName, name string) *api.Error {
	if err := s.b.DeleteGroup(ctx, topicName, name); err != nil {
		return s.errorOf(err)
	}
	return nil
}

func wireGroup(gi broker.GroupInfo) api.Group {
	c := gi.Config
	start, fail, lease, maxf := c.Start.String(), c.OnFailure.String(), api.Duration(c.MemberLease), c.MaxFailures
	out := api.Group{Topic: gi.Topic, Name: gi.Name, CreatedAt: time.UnixMilli(gi.CreatedAt).UTC(),
		Config:     api.GroupConfig{Start: &start, MemberLease: &lease, OnFailure: &fail, MaxFailures: &maxf},
		LagRecords: gi.LagRecords, LagSeconds: gi.LagSeconds, LostToRetention: gi.LostToRetention,
		DeadLetterQueue: topic.DeadLetterName(gi.Topic, gi.Name),
		Partitions:      make([]api.GroupPartition, len(gi.Partitions)), Members: []api.GroupMember{}}
	for i, p := range gi.Partitions {
		out.Partitions[i] = api.GroupPartition{Partition: p.Partition, Committed: p.Committed, Position: p.Position, End: p.End,
			Owner: p.Owner, Pending: p.Pending, Epoch: p.Epoch, LagRecords: p.Lag, LagSeconds: gi.PartitionLagSeconds[i],
			LostToRetention: p.LostToRetention}
	}
	for _, m := range gi.Members {
		out.Members = append(out.Members, api.GroupMember{Name: m.Name, Session: formatSession(m.Session),
			Joined: time.UnixMilli(m.Joined).UTC(), Expires: time.UnixMilli(m.Expires).UTC()})
	}
	return out
}

func wireSession(s topic.Session) api.PullResponse {
	out := api.PullResponse{Session: formatSession(s.Session), Expires: time.UnixMilli(s.Expires).UTC(), Assignment: []api.Assignment{}}
	for _, a := range s.Assigned {
		out.Assignment = append(out.Assignment, api.Assignment{Partition: a.Partition, Epoch: a.Epoch, Revoking: a.Revoking,
			Position: a.Position, Committed: a.Committed, End: a.End})
	}
	return out
}

func checkMember(member string) *api.Error {
	if member == "" {
		return Invalid("member is required: the name this consumer joins the group under")
	}
	return nil
}

// Pull hands a member records of its partitions (see broker.Pull).
func (s *Service) Pull(ctx context.Context, topicName, group string, in api.PullRequest) (api.PullResponse, *api.Error) {
	p, e := s.pull(ctx, topicName, group, in)
	if e != nil {
		return api.PullResponse{}, e
	}
	out := wireSession(p.Session)
	out.Records = make([]api.Record, len(p.Records))
	for i := range p.Records {
		out.Records[i] = wireRecord(&p.Records[i])
	}
	return out, nil
}

// PullBinary is Pull answering in the binary encoding: the records' bodies, keys and
// headers as they are, without JSON's text-or-base64 choice.
func (s *Service) PullBinary(ctx context.Context, topicName, group string, in api.PullRequest) (api.BinaryPull, *api.Error) {
	p, e := s.pull(ctx, topicName, group, in)
	if e != nil {
		return api.BinaryPull{}, e
	}
	w := wireSession(p.Session)
	out := api.BinaryPull{Session: w.Session, Expires: p.Session.Expires, Assignment: w.Assignment, Records: make([]api.BinaryTopicRecord, len(p.Records))}
	for i := range p.Records {
		r := &p.Records[i]
		x := api.BinaryTopicRecord{Partition: r.Partition, Offset: r.Offset, Time: r.Time, HasKey: r.HasKey, Key: r.Key, Body: r.Body}
		if len(r.Headers) > 0 {
			x.Headers = make([]api.Header, len(r.Headers))
			for j, h := range r.Headers {
				x.Headers[j] = api.Header{Name: h.Name, Value: h.Value}
			}
		}
		out.Records[i] = x
	}
	return out, nil
}

func (s *Service) pull(ctx context.Context, topicName, group string, in api.PullRequest) (broker.Pulled, *api.Error) {
	if e := checkMember(in.Member); e != nil {
		return broker.Pulled{}, e
	}
	session, e := parseSession(in.Session)
	if e != nil {
		return broker.Pulled{}, e
	}
	opts := broker.PullOptions{Member: in.Member, Session: session, Max: in.Max, MaxBytes: in.MaxBytes}
	if in.Max < 0 || in.MaxBytes < 0 {
		return broker.Pulled{}, Invalid("max and max_bytes must be positive")
	}
	if in.Wait != nil {
		opts.Wait = in.Wait.D()
	}
	p, err := s.b.Pull(ctx, topicName, group, opts)
	if err != nil {
		return broker.Pulled{}, s.errorOf(err)
	}
	return p, nil
}

// Heartbeat renews a member's lease and returns its assignment.
func (s *Service) Heartbeat(ctx context.Context, topicName, group string, in api.MemberRequest) (api.PullResponse, *api.Error) {
	if e := checkMember(in.Member); e != nil {
		return api.PullResponse{}, e
	}
	session, e := parseSession(in.Session)
	if e != nil {
		return api.PullResponse{}, e
	}
	sess, err := s.b.Heartbeat(ctx, topicName, group, in.Member, session)
	if err != nil {
		return api.PullResponse{}, s.errorOf(err)
	}
	return wireSession(sess), nil
}

// Leave removes a member from its group.
func (s *Service) Leave(ctx context.Context, topicName, group string, in api.MemberRequest) *api.Error {
	if e := checkMember(in.Member); e != nil {
		return e
	}
	session, e := parseSession(in.Session)
	if e != nil {
		return e
	}
	if err := s.b.Leave(ctx, topicName, group, in.Member, session); err != nil {
		return s.errorOf(err)
	}
	return nil
}

// Commit moves a group's committed offsets, one result per offset.
func (s *Service) Commit(ctx context.Context, topicName, group string, in api.CommitRequest) (api.ReceiptsResponse, *api.Error) {
	if e := checkMember(in.Member); e != nil {
		return api.ReceiptsResponse{}, e
	}
	session, e := parseSession(in.Session)
	if e != nil {
		return api.ReceiptsResponse{}, e
	}
	if session == 0 {
		return api.ReceiptsResponse{}, Invalid("session is required: commit with the session your pull returned")
	}
	if len(in.Offsets) == 0 {
		return api.ReceiptsResponse{}, Invalid("offsets is empty: commit at least one partition's offset")
	}
	if len(in.Offsets) > topic.MaxPartitions*4 {
		return api.ReceiptsResponse{}, &api.Error{Code: api.CodeBatchTooLarge, Message: fmt.Sprintf("%d offsets in one commit; at most %d", len(in.Offsets), topic.MaxPartitions*4)}
	}
	offs := make([]topic.PartitionOffset, len(in.Offsets))
	for i, o := range in.Offsets {
		offs[i] = topic.PartitionOffset{Partition: o.Partition, Offset: o.Offset, Epoch: o.Epoch}
	}
	errs, err := s.b.Commit(ctx, topicName, group, in.Member, session, offs)
	return s.items(errs, err)
}

// Seek moves a group's committed offsets.
func (s *Service) Seek(ctx context.Context, topicName, group string, in api.SeekRequest) (api.Group, *api.Error) {
	to := broker.SeekTo{Partition: -1, Offset: in.Offset, Time: in.Time}
	if in.Partition != nil {
		if *in.Partition < 0 {
			return api.Group{}, &api.Error{Code: api.CodePartitionOutOfRange, Message: fmt.Sprintf("partition %d: partitions are numbered from 0", *in.Partition)}
		}
		to.Partition = *in.Partition
	}
	switch in.To {
	case "":
	case "first":
		to.First = true
	case "last":
		to.Last = true
	default:
		return api.Group{}, Invalid("to must be first or last (or give offset or time instead), got %q", in.To)
	}
	gi, err := s.b.Seek(ctx, topicName, group, to)
	if err != nil {
		return api.Group{}, s.errorOf(err)
	}
	return wireGroup(gi), nil
}

// DeadLetterRecord moves a poison record to the group's dead-letter queue and commits
// past it.
func (s *Service) DeadLetterRecord(ctx context.Context, topicName, group string, in api.GroupDeadLetterRequest) *api.Error {
	if e := checkMember(in.Member); e != nil {
		return e
	}
	session, e := parseSession(in.Session)
	if e != nil {
		return e
	}
	if session == 0 {
		return Invalid("session is required: dead-letter with the session your pull returned")
	}
	if in.Reason == "" {
		return &api.Error{Code: api.CodeInvalidMessage, Message: "reason is required: say why the record is dead-lettered (for example max_failures)"}
	}
	if err := s.b.DeadLetterRecord(ctx, topicName, group, in.Member, session, in.Partition, in.Offset, in.Epoch, in.Reason, in.Description); err != nil {
		return s.errorOf(err)
	}
	return nil
}
