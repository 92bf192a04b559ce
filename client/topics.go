package client

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/okiba/okiba/api"
)

// Topics: a topic is a partitioned, append-only log; records are published once and read
// by offset (docs/api.md "Topics").

func tpath(name string, rest ...string) string {
	p := "/v1/topics/" + url.PathEscape(name)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// PutTopic creates a topic or updates the fields set in cfg (nil fields keep their value,
// or okiba's default on creation).
func (c *Client) PutTopic(ctx context.Context, name string, cfg api.TopicConfig) (*api.Topic, error) {
	var t api.Topic
	if err := c.do(ctx, "PUT", tpath(name), cfg, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Topic returns a topic with its partitions.
func (c *Client) Topic(ctx context.Context, name string) (*api.Topic, error) {
	var t api.Topic
	if err := c.do(ctx, "GET", tpath(name), nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Topics lists topics whose name starts with prefix.
func (c *Client) Topics(ctx context.Context, prefix string) ([]api.Topic, error) {
	var l api.TopicList
	p := "/v1/topics"
	if prefix != "" {
		p += "?prefix=" + url.QueryEscape(prefix)
	}
	if err := c.do(ctx, "GET", p, nil, &l); err != nil {
		return nil, err
	}
	return l.Topics, nil
}

// DeleteTopic deletes a topic and its records; force deletes one that has subscriptions
// or consumer groups, and them with it.
func (c *Client) DeleteTopic(ctx context.Context, name string, force bool) error {
	p := tpath(name)
	if force {
		p += "?force=true"
	}
	return c.do(ctx, "DELETE", p, nil, nil)
}

// Record is one record to publish to a topic.
type Record struct {
	// Key places the record (Kafka's partition for it) when HasKey; an empty key is a key.
	Key    []byte
	HasKey bool
	// Partition, when not nil, places the record explicitly.
	Partition *int
	Headers   map[string]string
	Body      []byte
	DedupID   string
}

// Published is the outcome of one record of a publish.
type Published struct {
	Partition int
	Offset    uint64
	Duplicate bool
	// Err is the record's own error (an *api.Error), if the topic refused it.
	Err error
}

// PublishRecords appends records to a topic and returns once they are durable, one result
// per record. The error is for the whole request; a record the topic refused has its own
// Err.
func (c *Client) PublishRecords(ctx context.Context, topic string, recs []Record) ([]Published, error) {
	if !c.json {
		return c.publishBinary(ctx, topic, recs)
	}
	req := api.PublishRequest{Records: make([]api.PublishRecord, len(recs))}
	for i, r := range recs {
		w := api.PublishRecord{Partition: r.Partition, Headers: r.Headers, DedupID: r.DedupID}
		w.Body, w.BodyBase64 = api.EncodeBody(r.Body)
		if r.HasKey {
			w.Key, w.KeyBase64 = api.EncodeBody(r.Key)
		}
		req.Records[i] = w
	}
	var out api.PublishResponse
	err := c.do(ctx, "POST", tpath(topic, "records"), req, &out)
	if len(out.Results) != len(recs) {
		if err == nil {
			err = fmt.Errorf("client: server answered %d results for %d records", len(out.Results), len(recs))
		}
		return nil, err
	}
	res := make([]Published, len(out.Results))
	for i, r := range out.Results {
		res[i] = Published{Partition: r.Partition, Offset: r.Offset, Duplicate: r.Duplicate}
		if r.Error != nil {
			res[i].Err = r.Error
		}
	}
	return res, nil
}

// publishBinary publishes records in the binary encoding.
func (c *Client) publishBinary(ctx context.Context, topic string, recs []Record) ([]Published, error) {
	br := make([]api.BinaryPublishRecord, len(recs))
	size := 16
	for i := range recs {
		r := &recs[i]
		br[i] = api.BinaryPublishRecord{Key: r.Key, HasKey: r.HasKey, Partition: -1, Body: r.Body, DedupID: r.DedupID}
		if r.Partition != nil {
			if *r.Partition < 0 {
				// The binary encoding has no negative partition; JSON carries it to the
				// server, which refuses it. Refuse it here alike, before sending anything.
				return nil, &api.Error{Code: api.CodePartitionOutOfRange, Status: api.Status[api.CodePartitionOutOfRange],
					Message: fmt.Sprintf("records[%d]: partition %d: partitions are numbered from 0", i, *r.Partition)}
			}
			br[i].Partition = *r.Partition
		}
		if len(r.Headers) > 0 {
			br[i].Headers = make([]api.Header, 0, len(r.Headers))
			for _, k := range slices.Sorted(maps.Keys(r.Headers)) {
				br[i].Headers = append(br[i].Headers, api.Header{Name: k, Value: r.Headers[k]})
				size += len(k) + len(r.Headers[k]) + 4
			}
		}
		size += len(r.Body) + len(r.Key) + len(r.DedupID) + 16
	}
	var out []Published
	err := c.doBinary(ctx, tpath(topic, "records"), nil, api.AppendPublishRequest(make([]byte, 0, size), br), func(data []byte) error {
		rs, err := api.DecodePublishAnswer(data)
		if err != nil {
			return err
		}
		if len(rs) != len(recs) {
			return fmt.Errorf("client: server answered %d results for %d records", len(rs), len(recs))
		}
		out = make([]Published, len(rs))
		for i, r := range rs {
			out[i] = Published{Partition: r.Partition, Offset: r.Offset, Duplicate: r.Duplicate}
			if r.Error != nil {
				out[i].Err = r.Error
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReadOptions says what ReadPartition reads.
type ReadOptions struct {
	Offset   uint64
	Max      int           // 0: the server's default (100)
	MaxBytes int           // 0: the server's default (16 MiB)
	Wait     time.Duration // how long to wait at the partition's end
}

// TopicRecord is one record read from a partition.
type TopicRecord struct {
	Partition int
	Offset    uint64
	Time      time.Time
	Key       []byte
	HasKey    bool
	Headers   map[string]string
	Body      []byte
}

// Batch is what ReadPartition returns: records, the partition's bounds as it was read,
// and the offset to read next.
type Batch struct {
	Records    []TopicRecord
	Start, End uint64
	Next       uint64
}

// ReadPartition reads one partition of a topic from an offset, without a consumer group.
func (c *Client) ReadPartition(ctx context.Context, topic string, partition int, opts ReadOptions) (*Batch, error) {
	q := url.Values{}
	q.Set("offset", strconv.FormatUint(opts.Offset, 10))
	if opts.Max > 0 {
		q.Set("max", strconv.Itoa(opts.Max))
	}
	if opts.MaxBytes > 0 {
		q.Set("max_bytes", strconv.Itoa(opts.MaxBytes))
	}
	if opts.Wait > 0 {
		q.Set("wait", opts.Wait.String())
	}
	var out api.ReadResponse
	if err := c.do(ctx, "GET", tpath(topic, "partitions", strconv.Itoa(partition), "records")+"?"+q.Encode(), nil, &out); err != nil {
		return nil, err
	}
	b := &Batch{Start: out.Start, End: out.End, Next: out.Next, Records: make([]TopicRecord, len(out.Records))}
	for i := range out.Records {
		r, err := topicRecord(&out.Records[i])
		if err != nil {
			return nil, err
		}
		b.Records[i] = r
	}
	return b, nil
}

// topicRecord turns a wire record into a TopicRecord.
func topicRecord(r *api.Record) (TopicRecord, error) {
	body, err := api.DecodeBody(r.Body, r.BodyBase64)
	if err != nil {
		return TopicRecord{}, fmt.Errorf("okiba: record %d/%d: %w", r.Partition, r.Offset, err)
	}
	tr := TopicRecord{Partition: r.Partition, Offset: r.Offset, Time: r.Time, Headers: r.Headers, Body: body}
	if r.Key != nil || r.KeyBase64 != nil {
		if tr.Key, err = api.DecodeBody(r.Key, r.KeyBase64); err != nil {
			return TopicRecord{}, fmt.Errorf("okiba: record %d/%d key: %w", r.Partition, r.Offset, err)
		}
		tr.HasKey = true
	}
	return tr, nil
}

// binaryTopicRecord turns a record of a binary answer into a TopicRecord; its body and
// key alias the answer, which nothing else holds.
func binaryTopicRecord(x *api.BinaryTopicRecord) TopicRecord {
	tr := TopicRecord{Partition: x.Partition, Offset: x.Offset, Time: time.UnixMilli(x.Time).UTC(), Body: x.Body}
	if x.HasKey {
		tr.Key, tr.HasKey = x.Key, true
	}
	if len(x.Headers) > 0 {
		tr.Headers = make(map[string]string, len(x.Headers))
		for _, h := range x.Headers {
			tr.Headers[h.Name] = h.Value
		}
	}
	return tr
}
