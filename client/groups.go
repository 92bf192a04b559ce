package client

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/okiba/okiba/api"
)

// Consumer groups: a group reads a topic at its own pace, keeping one committed offset per
// partition, and hands each partition to one of its members at a time (docs/api.md
// "Consumer groups"). These are the calls of the HTTP API one by one; ConsumeGroup runs a
// member for you.

func gpath(topic, group string, rest ...string) string {
	return tpath(topic, append([]string{"groups", url.PathEscape(group)}, rest...)...)
}

// PutGroup creates a consumer group of a topic or updates the fields set in cfg (nil
// fields keep their value, or okiba's default on creation; Start counts only at
// creation).
func (c *Client) PutGroup(ctx context.Context, topic, group string, cfg api.GroupConfig) (*api.Group, error) {
	var g api.Group
	if err := c.do(ctx, "PUT", gpath(topic, group), cfg, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// Group returns a consumer group with its partitions, members and lag.
func (c *Client) Group(ctx context.Context, topic, group string) (*api.Group, error) {
	var g api.Group
	if err := c.do(ctx, "GET", gpath(topic, group), nil, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// Groups lists a topic's consumer groups, by name.
func (c *Client) Groups(ctx context.Context, topic string) ([]api.Group, error) {
	var l api.GroupList
	if err := c.do(ctx, "GET", tpath(topic, "groups"), nil, &l); err != nil {
		return nil, err
	}
	return l.Groups, nil
}

// DeleteGroup deletes a consumer group; its members' next calls get group_deleted.
func (c *Client) DeleteGroup(ctx context.Context, topic, group string) error {
	return c.do(ctx, "DELETE", gpath(topic, group), nil, nil)
}

// Member names the calling member of a group: the name it joins under and the session
// its last pull or heartbeat returned. An empty Session joins (or rejoins: the member's
// partitions start again from the committed offsets).
type Member struct {
	Name    string
	Session string
}

// PullOptions shape a pull. Zero values mean the server's defaults: 100 records, 16 MiB,
// no wait.
type PullOptions struct {
	Max      int // 1..10 000 records
	MaxBytes int
	// Wait is how long to wait when there is nothing to hand out: at most 60s and half
	// the member lease (the server shortens it).
	Wait time.Duration
}

// PullResult answers a pull or a heartbeat: the member's session (send it with every
// later call), when its lease ends by the server's clock, the partitions it holds, and,
// for a pull, records of those partitions in offset order per partition.
type PullResult struct {
	Session    string
	Expires    time.Time
	Assignment []api.Assignment
	Records    []TopicRecord
}

// Pull joins the group (m.Session empty) or renews m's lease, lets go of the partitions
// being revoked from it, and hands it records of the partitions it holds from where the
// last pull left off. A partition marked Revoking hands out no more records and moves
// once what was handed of it is committed (at that commit), or a member lease after
// the revocation began.
func (c *Client) Pull(ctx context.Context, topic, group string, m Member, opts PullOptions) (*PullResult, error) {
	req := api.PullRequest{Member: m.Name, Session: m.Session, Max: opts.Max, MaxBytes: opts.MaxBytes}
	if opts.Wait > 0 {
		req.Wait = api.Ptr(opts.Wait)
	}
	if !c.json {
		var p *PullResult
		err := c.doBinary(ctx, gpath(topic, group, "pull"), req, nil, func(data []byte) error {
			bp, err := api.DecodePullAnswer(data)
			if err != nil {
				return err
			}
			p = &PullResult{Session: bp.Session, Expires: time.UnixMilli(bp.Expires).UTC(), Assignment: bp.Assignment, Records: make([]TopicRecord, len(bp.Records))}
			for i := range bp.Records {
				p.Records[i] = binaryTopicRecord(&bp.Records[i])
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	var out api.PullResponse
	if err := c.do(ctx, "POST", gpath(topic, group, "pull"), req, &out); err != nil {
		return nil, err
	}
	p := &PullResult{Session: out.Session, Expires: out.Expires, Assignment: out.Assignment, Records: make([]TopicRecord, len(out.Records))}
	for i := range out.Records {
		r, err := topicRecord(&out.Records[i])
		if err != nil {
			return nil, err
		}
		p.Records[i] = r
	}
	return p, nil
}

// Heartbeat renews m's lease and lets go of the partitions being revoked from it,
// without handing out records: for a member busy with what it was handed. It answers
// like a pull without records.
func (c *Client) Heartbeat(ctx context.Context, topic, group string, m Member) (*PullResult, error) {
	var out api.PullResponse
	if err := c.do(ctx, "POST", gpath(topic, group, "heartbeat"), api.MemberRequest{Member: m.Name, Session: m.Session}, &out); err != nil {
		return nil, err
	}
	return &PullResult{Session: out.Session, Expires: out.Expires, Assignment: out.Assignment}, nil
}

// Commit moves the group's committed offsets: each offset is the next one to read (the
// last handled + 1) with the epoch of the assignment it was handed under. Each offset
// gets nil or its error (epoch_stale: the partition moved or was sought, drop what you
// hold of it; offset_regressed; offset_out_of_range), as Ack does for receipts; the
// error is for the whole request (member_unknown, group_deleted, …).
func (c *Client) Commit(ctx context.Context, topic, group string, m Member, offsets ...api.CommitOffset) ([]error, error) {
	var resp api.ReceiptsResponse
	err := c.do(ctx, "POST", gpath(topic, group, "commit"), api.CommitRequest{Member: m.Name, Session: m.Session, Offsets: offsets}, &resp)
	if len(resp.Results) != len(offsets) {
		if err == nil {
			err = fmt.Errorf("client: server answered %d results for %d offsets", len(resp.Results), len(offsets))
		}
		return nil, err
	}
	out := make([]error, len(resp.Results))
	for i, r := range resp.Results {
		if r.Error != nil {
			out[i] = r.Error
		}
	}
	return out, nil
}

// Seek moves a group's committed offsets — one partition, or every one when
// to.Partition is nil — to the first or last retained record (To "first", "last"), an
// offset, or the first record published at or after a time. The partitions' epochs rise,
// so commits in flight from before are refused. It returns the group as it is after.
func (c *Client) Seek(ctx context.Context, topic, group string, to api.SeekRequest) (*api.Group, error) {
	var g api.Group
	if err := c.do(ctx, "POST", gpath(topic, group, "seek"), to, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// Leave removes m from the group at once; its partitions go to the other members.
func (c *Client) Leave(ctx context.Context, topic, group string, m Member) error {
	return c.do(ctx, "POST", gpath(topic, group, "leave"), api.MemberRequest{Member: m.Name, Session: m.Session}, nil)
}

// HandedRecord names a record as a member was handed it: its partition and offset, and
// the epoch of the assignment it came under.
type HandedRecord struct {
	Partition int
	Offset    uint64
	Epoch     uint64
}

// DeadLetterRecord writes a record that cannot be handled to the group's dead-letter
// queue (the group's DeadLetterQueue, "<topic>.<group>-dlq") with reason (printable
// ASCII, as a queue dead letter's) and description, and commits the offset after it: one
// durable step, so the record is neither lost nor handled again. Like a commit, it is
// accepted only from the member holding the partition under that epoch.
func (c *Client) DeadLetterRecord(ctx context.Context, topic, group string, m Member, rec HandedRecord, reason, description string) error {
	req := api.GroupDeadLetterRequest{Member: m.Name, Session: m.Session, Partition: rec.Partition, Offset: rec.Offset, Epoch: rec.Epoch,
		Reason: reason, Description: description}
	return c.do(ctx, "POST", gpath(topic, group, "deadletter"), req, nil)
}
