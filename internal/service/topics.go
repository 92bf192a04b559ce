package service

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

// Topics lists the topics whose name starts with prefix that the caller in ctx may
// browse (every one for a call from inside the process), by name: what GET /v1/topics
// lists.
func (s *Service) Topics(ctx context.Context, prefix string) []api.Topic {
	ts := s.b.Topics(prefix)
	out := make([]api.Topic, 0, len(ts))
	for _, ti := range ts {
		if auth.Allowed(ctx, access.Browse, access.TopicNamed(ti.Name)) {
			out = append(out, wireTopic(ti))
		}
	}
	return out
}

// Topic returns one topic with its partitions.
func (s *Service) Topic(ctx context.Context, name string) (api.Topic, *api.Error) {
	ti, err := s.b.Topic(name)
	if err != nil {
		return api.Topic{}, s.errorOf(err)
	}
	return wireTopic(ti), nil
}

// PutTopic creates the topic or changes the fields in of its configuration, and returns
// it as it now is, and whether it was created.
func (s *Service) PutTopic(ctx context.Context, name string, in api.TopicConfig) (api.Topic, bool, *api.Error) {
	ti, created, err := s.b.PutTopic(ctx, name, func(c *topic.Config, _ bool) error {
		return applyTopicConfig(c, &in)
	})
	if err != nil {
		return api.Topic{}, false, s.errorOf(err)
	}
	return wireTopic(ti), created, nil
}

// DeleteTopic deletes a topic and its records; one with subscriptions or groups only with
// force.
func (s *Service) DeleteTopic(ctx context.Context, name string, force bool) *api.Error {
	if err := s.b.DeleteTopic(ctx, name, force); err != nil {
		return s.errorOf(err)
	}
	return nil
}

func applyTopicConfig(c *topic.Config, in *api.TopicConfig) error {
	if in.Partitions != nil {
		c.Partitions = *in.Partitions
	}
	if in.Retention != nil {
		c.RetentionAge = in.Retention.Age
		if in.Retention.Forever {
			c.RetentionAge = 0
		}
	}
	if in.RetentionBytes != nil {
		c.RetentionBytes = *in.RetentionBytes
	}
	if in.RetentionRecords != nil {
		c.RetentionRecords = *in.RetentionRecords
	}
	if in.Discard != nil {
		d, err := topic.ParseDiscard(*in.Discard)
		if err != nil {
			return err
		}
		c.Discard = d
	}
	if in.MaxRecordSize != nil {
		c.MaxRecordSize = *in.MaxRecordSize
	}
	if in.DedupWindow != nil {
		c.DedupWindow = in.DedupWindow.D()
	}
	if in.SegmentBytes != nil {
		c.SegmentBytes = *in.SegmentBytes
	}
	if in.SegmentAge != nil {
		c.SegmentAge = in.SegmentAge.D()
	}
	if in.Hash != nil && *in.Hash != topic.HashMurmur2.String() {
		return &queue.ConfigError{Field: "hash", Reason: fmt.Sprintf("must be murmur2, got %q", *in.Hash)}
	}
	if in.Tags != nil {
		c.Tags = in.Tags
	}
	return nil
}

func wireTopicConfig(c topic.Config) api.TopicConfig {
	v := &struct {
		c             topic.Config
		ret           api.Retention
		dedup, segAge api.Duration
		discard, hash string
	}{c: c, ret: api.Retention{Age: c.RetentionAge, Forever: c.RetentionAge == 0},
		dedup: api.Duration(c.DedupWindow), segAge: api.Duration(c.SegmentAge), discard: c.Discard.String(), hash: c.Hash.String()}
	return api.TopicConfig{
		Partitions: &v.c.Partitions, Retention: &v.ret, RetentionBytes: &v.c.RetentionBytes,
		RetentionRecords: &v.c.RetentionRecords, Discard: &v.discard, MaxRecordSize: &v.c.MaxRecordSize,
		DedupWindow: &v.dedup, SegmentBytes: &v.c.SegmentBytes, SegmentAge: &v.segAge, Hash: &v.hash, Tags: v.c.Tags,
	}
}

func wireTopic(ti topic.TopicInfo) api.Topic {
	out := api.Topic{
		Name: ti.Name, CreatedAt: time.UnixMilli(ti.CreatedAt).UTC(), UpdatedAt: time.UnixMilli(ti.UpdatedAt).UTC(),
		Config:     wireTopicConfig(ti.Config),
		Partitions: make([]api.Partition, len(ti.Partitions)),
		Stats: api.TopicStats{Records: ti.Records, Bytes: ti.Bytes, Published: ti.Stats.Published,
			Truncated: ti.Stats.Truncated, DedupEntries: ti.DedupEntries},
	}
	for i, p := range ti.Partitions {
		out.Partitions[i] = api.Partition{Partition: p.Partition, Start: p.Start, End: p.End, Records: p.Records,
			Bytes: p.Bytes, Segments: p.Segments}
		if p.Records > 0 {
			out.Partitions[i].FirstTime, out.Partitions[i].LastTime = timePtr(p.FirstTime), timePtr(p.LastTime)
		}
	}
	return out
}

// Publish appends records to a topic. A malformed record refuses the whole request; each
// record the topic refuses has its own error in the results.
func (s *Service) Publish(ctx context.Context, name string, recs []api.PublishRecord) (api.PublishResponse, *api.Error) {
	if len(recs) > api.MaxPublishBatch {
		return api.PublishResponse{}, &api.Error{Code: api.CodeBatchTooLarge, Message: fmt.Sprintf("%d records in one publish; at most %d", len(recs), api.MaxPublishBatch)}
	}
	in := make([]topic.PublishInput, len(recs))
	for i, r := range recs {
		x, e := publishInput(r)
		if e != nil {
			e.Message = fmt.Sprintf("records[%d]: %s", i, e.Message)
			return api.PublishResponse{}, e
		}
		in[i] = x
	}
	return s.publish(ctx, name, in)
}

// PublishBinary appends records decoded from the binary encoding, as Publish does.
func (s *Service) PublishBinary(ctx context.Context, name string, recs []api.BinaryPublishRecord) (api.PublishResponse, *api.Error) {
	if len(recs) > api.MaxPublishBatch {
		return api.PublishResponse{}, &api.Error{Code: api.CodeBatchTooLarge, Message: fmt.Sprintf("%d records in one publish; at most %d", len(recs), api.MaxPublishBatch)}
	}
	in := make([]topic.PublishInput, len(recs))
	for i := range recs {
		x, e := binaryPublishInput(&recs[i])
		if e != nil {
			e.Message = fmt.Sprintf("records[%d]: %s", i, e.Message)
			return api.PublishResponse{}, e
		}
		in[i] = x
	}
	return s.publish(ctx, name, in)
}

// binaryPublishInput checks a binary record as publishInput checks a JSON one; its
// headers, which JSON keeps in an object, must have distinct names, and are stored in
// name order as JSON's are.
func binaryPublishInput(r *api.BinaryPublishRecord) (topic.PublishInput, *api.Error) {
	// The body is not copied, unlike a send's: the topic keeps no reference to it (the
	// log and the tail cache copy the record's encoding, a fan-out's messages share a copy
	// of their own; topic.PublishInput), so it cannot pin the request. A copy here was
	// a kilobyte allocated and copied a record for nothing (4–5 % of a publish
	// benchmark's CPU with its share of the GC). The key is copied: it is small, and
	// kept as a fan-out's message attribute.
	in := topic.PublishInput{Partition: topic.AnyPartition, Body: r.Body, DedupID: r.DedupID}
	if r.HasKey {
		in.HasKey, in.Key = true, append([]byte{}, r.Key...)
	}
	if r.Partition >= 0 {
		if r.Partition >= topic.MaxPartitions {
			return topic.PublishInput{}, &api.Error{Code: api.CodePartitionOutOfRange, Message: fmt.Sprintf("partition %d: partitions are numbered from 0 to at most %d", r.Partition, topic.MaxPartitions-1)}
		}
		in.Partition = r.Partition
	}
	if len(r.Headers) > 0 {
		in.Headers = make([]topic.Header, len(r.Headers))
		for j, h := range r.Headers {
			in.Headers[j] = topic.Header{Name: h.Name, Value: h.Value}
		}
		byName := func(a, b topic.Header) int { return strings.Compare(a.Name, b.Name) }
		if !slices.IsSortedFunc(in.Headers, byName) {
			slices.SortFunc(in.Headers, byName)
		}
		for j := 1; j < len(in.Headers); j++ {
			if in.Headers[j].Name == in.Headers[j-1].Name {
				return topic.PublishInput{}, &api.Error{Code: api.CodeInvalidMessage, Message: fmt.Sprintf("header %q is given twice", in.Headers[j].Name)}
			}
		}
	}
	return in, nil
}

func (s *Service) publish(ctx context.Context, name string, in []topic.PublishInput) (api.PublishResponse, *api.Error) {
	res, err := s.b.Publish(ctx, name, in)
	if err != nil {
		return api.PublishResponse{}, s.errorOf(err)
	}
	out := api.PublishResponse{Results: make([]api.PublishResult, len(res))}
	errs := make([]*api.Error, len(res))
	for i, r := range res {
		if r.Err != nil {
			errs[i] = s.errorOf(r.Err)
			out.Results[i] = api.PublishResult{Error: errs[i]}
			continue
		}
		out.Results[i] = api.PublishResult{Partition: r.Partition, Offset: r.Offset, Duplicate: r.Duplicate}
	}
	out.Error = commonError(errs)
	return out, nil
}

func publishInput(r api.PublishRecord) (topic.PublishInput, *api.Error) {
	if r.Body == nil && r.BodyBase64 == nil {
		return topic.PublishInput{}, &api.Error{Code: api.CodeInvalidBody, Message: "a record needs body (UTF-8 text) or body_base64"}
	}
	body, err := api.DecodeBody(r.Body, r.BodyBase64)
	if err != nil {
		return topic.PublishInput{}, &api.Error{Code: api.CodeInvalidBody, Message: err.Error()}
	}
	in := topic.PublishInput{Partition: topic.AnyPartition, Body: body, DedupID: r.DedupID}
	switch {
	case r.Key != nil && r.KeyBase64 != nil:
		return topic.PublishInput{}, &api.Error{Code: api.CodeInvalidMessage, Message: "give key or key_base64, not both"}
	case r.Key != nil:
		in.HasKey, in.Key = true, []byte(*r.Key)
	case r.KeyBase64 != nil:
		k, err := base64.StdEncoding.DecodeString(*r.KeyBase64)
		if err != nil {
			return topic.PublishInput{}, &api.Error{Code: api.CodeInvalidMessage, Message: "key_base64 is not valid standard base64"}
		}
		in.HasKey, in.Key = true, k
	}
	if r.Partition != nil {
		if *r.Partition < 0 || *r.Partition >= topic.MaxPartitions {
			return topic.PublishInput{}, &api.Error{Code: api.CodePartitionOutOfRange, Message: fmt.Sprintf("partition %d: partitions are numbered from 0 to at most %d", *r.Partition, topic.MaxPartitions-1)}
		}
		in.Partition = *r.Partition
	}
	if len(r.Headers) > 0 {
		in.Headers = make([]topic.Header, 0, len(r.Headers))
		for k, v := range r.Headers {
			in.Headers = append(in.Headers, topic.Header{Name: k, Value: v})
		}
		sort.Slice(in.Headers, func(i, j int) bool { return in.Headers[i].Name < in.Headers[j].Name })
	}
	return in, nil
}

// ReadRequest is a read of a partition as the transport parsed it.
type ReadRequest struct {
	Partition int
	Offset    uint64
	Max       int
	MaxBytes  int
	Wait      time.Duration
}

// Read reads a partition from an offset (see broker.ReadTopic).
func (s *Service) Read(ctx context.Context, name string, in ReadRequest) (api.ReadResponse, *api.Error) {
	r, err := s.b.ReadTopic(ctx, name, broker.ReadOptions{Partition: in.Partition, Offset: in.Offset, Max: in.Max, MaxBytes: in.MaxBytes, Wait: in.Wait})
	if err != nil {
		return api.ReadResponse{}, s.errorOf(err)
	}
	out := api.ReadResponse{Records: make([]api.Record, len(r.Records)), Start: r.Start, End: r.End, Next: in.Offset}
	for i, rec := range r.Records {
		out.Records[i] = wireRecord(&rec)
		out.Next = rec.Offset + 1
	}
	return out, nil
}

func wireRecord(r *broker.TopicRecord) api.Record {
	out := api.Record{Partition: r.Partition, Offset: r.Offset, Time: time.UnixMilli(r.Time).UTC()}
	out.Body, out.BodyBase64 = api.EncodeBody(r.Body)
	if r.HasKey {
		out.Key, out.KeyBase64 = api.EncodeBody(r.Key)
	}
	if len(r.Headers) > 0 {
		out.Headers = make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			out.Headers[h.Name] = h.Value
		}
	}
	return out
}

// ParseOffset reads an offset parameter.
func ParseOffset(v string) (uint64, *api.Error) {
	off, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, Invalid("offset must be a non-negative integer, got %q", v)
	}
	return off, nil
}
