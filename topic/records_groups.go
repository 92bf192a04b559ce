package topic

import (
	"fmt"
	"time"

	"github.com/okiba/okiba/internal/codec"
)

// Records of consumer groups.

// GroupPutRecord creates a group (Start holds each partition's initial committed offset)
// or changes its configuration (Start nil).
type GroupPutRecord struct {
	Now     int64
	TopicID uint64
	GroupID uint64
	Name    string
	Config  GroupConfig
	Start   []uint64
}

func (r *GroupPutRecord) Kind() Kind  { return KindGroupPut }
func (r *GroupPutRecord) Time() int64 { return r.Now }

func (r *GroupPutRecord) AppendTo(b []byte) []byte {
	b = header(b, KindGroupPut, r.Now)
	b = codec.AppendUvarint(b, r.TopicID)
	b = codec.AppendUvarint(b, r.GroupID)
	b = codec.AppendString(b, r.Name)
	b = appendGroupConfig(b, &r.Config)
	b = codec.AppendUvarint(b, uint64(len(r.Start)))
	for _, o := range r.Start {
		b = codec.AppendUvarint(b, o)
	}
	return b
}

func (r *GroupPutRecord) decode(d *codec.Decoder, now int64) {
	r.Now = now
	r.TopicID = d.Uvarint()
	r.GroupID = d.Uvarint()
	r.Name = d.String()
	r.Config = decodeGroupConfig(d)
	if n := d.Count(); n > 0 {
		r.Start = make([]uint64, n)
		for i := range r.Start {
			r.Start[i] = d.Uvarint()
		}
	}
}

func appendGroupConfig(b []byte, c *GroupConfig) []byte {
	b = append(b, byte(c.Start), byte(c.OnFailure))
	b = codec.AppendVarint(b, c.MemberLease.Milliseconds())
	return codec.AppendUvarint(b, uint64(c.MaxFailures))
}

func decodeGroupConfig(d *codec.Decoder) GroupConfig {
	var c GroupConfig
	c.Start = StartAt(d.Byte())
	c.OnFailure = OnFailure(d.Byte())
	c.MemberLease = time.Duration(d.Varint()) * time.Millisecond
	c.MaxFailures = int(d.Uvarint() & 0xffffffff)
	return c
}

func (r *GroupPutRecord) apply(m *Machine) error {
	t := m.byID[r.TopicID]
	if t == nil {
		return fmt.Errorf("group of unknown topic id %d", r.TopicID)
	}
	if r.GroupID > m.lastGID {
		m.lastGID = r.GroupID
	}
	if g := t.groups[r.Name]; g != nil {
		if g.id != r.GroupID {
			return fmt.Errorf("group %q of %q is id %d, record says %d", r.Name, t.name, g.id, r.GroupID)
		}
		g.cfg = r.Config
		return nil
	}
	if len(r.Start) != len(t.parts) {
		return fmt.Errorf("group %q of %q created with %d offsets for %d partitions", r.Name, t.name, len(r.Start), len(t.parts))
	}
	g := &group{id: r.GroupID, name: r.Name, cfg: r.Config, createdAt: r.Now, parts: make([]gpart, len(t.parts)),
		members: make(map[string]*member)}
	for i, o := range r.Start {
		g.parts[i].committed, g.parts[i].position = o, o
	}
	if t.groups == nil {
		t.groups = make(map[string]*group)
	}
	t.groups[r.Name] = g
	return nil
}

// groupOf finds the group a record names.
func (m *Machine) groupOf(topicID, groupID uint64) (*topicState, *group, error) {
	t := m.byID[topicID]
	if t == nil {
		return nil, nil, fmt.Errorf("record of unknown topic id %d", topicID)
	}
	for _, g := range t.groups {
		if g.id == groupID {
			return t, g, nil
		}
	}
	return nil, nil, fmt.Errorf("record of unknown group id %d of topic %q", groupID, t.name)
}

// GroupDeleteRecord deletes a group.
type GroupDeleteRecord struct {
	Now     int64
	TopicID uint64
	GroupID uint64
}

func (r *GroupDeleteRecord) Kind() Kind  { return KindGroupDelete }
func (r *GroupDeleteRecord) Time() int64 { return r.Now }

func (r *GroupDeleteRecord) AppendTo(b []byte) []byte {
	b = header(b, KindGroupDelete, r.Now)
	b = codec.AppendUvarint(b, r.TopicID)
	return codec.AppendUvarint(b, r.GroupID)
}

func (r *GroupDeleteRecord) decode(d *codec.Decoder, now int64) {
	r.Now, r.TopicID, r.GroupID = now, d.Uvarint(), d.Uvarint()
}

func (r *GroupDeleteRecord) apply(m *Machine) error {
	t, g, err := m.groupOf(r.TopicID, r.GroupID)
	if err != nil {
		return err
	}
	delete(t.groups, g.name)
	return nil
}

// MemberJoinRecord adds a member, or starts a new session of one (a process that
// rejoined under the name): the partitions it held are granted to it afresh (a new
// epoch, positions back to the committed offsets), since the new process has none of
// what the old one was handed.
type MemberJoinRecord struct {
	Now     int64
	TopicID uint64
	GroupID uint64
	Member  string
	Session uint64
	Expires int64
}

func (r *MemberJoinRecord) Kind() Kind  { return KindMemberJoin }
func (r *MemberJoinRecord) Time() int64 { return r.Now }

func (r *MemberJoinRecord) AppendTo(b []byte) []byte {
	b = header(b, KindMemberJoin, r.Now)
	b = codec.AppendUvarint(b, r.TopicID)
	b = codec.AppendUvarint(b, r.GroupID)
	b = codec.AppendString(b, r.Member)
	b = codec.AppendUvarint(b, r.Session)
	return codec.AppendVarint(b, r.Expires-r.Now)
}

func (r *MemberJoinRecord) decode(d *codec.Decoder, now int64) {
	r.Now, r.TopicID, r.GroupID, r.Member, r.Session = now, d.Uvarint(), d.Uvarint(), d.String(), d.Uvarint()
	r.Expires = now + d.Varint()
}

func (r *MemberJoinRecord) apply(m *Machine) error {
	_, g, err := m.groupOf(r.TopicID, r.GroupID)
	if err != nil {
		return err
	}
	if r.Session > g.lastSession {
		g.lastSession = r.Session
	}
	x := g.members[r.Member]
	if x == nil {
		x = &member{name: r.Member, joined: r.Now}
		g.members[r.Member] = x
	} else {
		for p := range g.parts {
			if gp := &g.parts[p]; gp.owner == r.Member {
				gp.epoch++
				gp.position = gp.committed
			}
		}
	}
	x.session, x.expires = r.Session, r.Expires
	return nil
}

// MemberRenewRecord extends a member's lease.
type MemberRenewRecord struct {
	Now     int64
	TopicID uint64
	GroupID uint64
	Member  string
	Expires int64
}

func (r *MemberRenewRecord) Kind() Kind  { return KindMemberRenew }
func (r *MemberRenewRecord) Time() int64 { return r.Now }

func (r *MemberRenewRecord) AppendTo(b []byte) []byte {
	b = header(b, KindMemberRenew, r.Now)
	b = codec.AppendUvarint(b, r.TopicID)
	b = codec.AppendUvarint(b, r.GroupID)
	b = codec.AppendString(b, r.Member)
	return codec.AppendVarint(b, r.Expires-r.Now)
}

func (r *MemberRenewRecord) decode(d *codec.Decoder, now int64) {
	r.Now, r.TopicID, r.GroupID, r.Member = now, d.Uvarint(), d.Uvarint(), d.String()
	r.Expires = now + d.Varint()
}

func (r *MemberRenewRecord) apply(m *Machine) error {
	_, g, err := m.groupOf(r.TopicID, r.GroupID)
	if err != nil {
		return err
	}
	x := g.members[r.Member]
	if x == nil {
		return fmt.Errorf("renewal of unknown member %q of group %q", r.Member, g.name)
	}
	x.expires = r.Expires
	return nil
}

// MemberLeaveRecord removes a member (it left, or its lease ended): it owns nothing
// any more, and nothing is to move to it.
type MemberLeaveRecord struct {
	Now     int64
	TopicID uint64
	GroupID uint64
	Member  string
	Expired bool
}

func (r *MemberLeaveRecord) Kind() Kind  { return KindMemberLeave }
func (r *MemberLeaveRecord) Time() int64 { return r.Now }

func (r *MemberLeaveRecord) AppendTo(b []byte) []byte {
	b = header(b, KindMemberLeave, r.Now)
	b = codec.AppendUvarint(b, r.TopicID)
	b = codec.AppendUvarint(b, r.GroupID)
	b = codec.AppendString(b, r.Member)
	return codec.AppendBool(b, r.Expired)
}

func (r *MemberLeaveRecord) decode(d *codec.Decoder, now int64) {
	r.Now, r.TopicID, r.GroupID, r.Member, r.Expired = now, d.Uvarint(), d.Uvarint(), d.String(), d.Bool()
}

func (r *MemberLeaveRecord) apply(m *Machine) error {
	_, g, err := m.groupOf(r.TopicID, r.GroupID)
	if err != nil {
		return err
	}
	if g.members[r.Member] == nil {
		return fmt.Errorf("leave of unknown member %q of group %q", r.Member, g.name)
	}
	delete(g.members, r.Member)
	for p := range g.parts {
		gp := &g.parts[p]
		if gp.owner == r.Member {
			// Nobody holds it: the next grant starts from the committed offset.
			gp.owner, gp.pending, gp.revokeAt = "", "", 0
			gp.epoch++
			gp.position = gp.committed
		}
		if gp.pending == r.Member {
			gp.pending, gp.revokeAt = "", 0
		}
	}
	return nil
}

// AssignChange is one partition's new assignment: Owner under Epoch, and the member it
// is to move to (Pending). A change of owner or epoch is a grant: the partition's
// position goes back to the committed offset.
type AssignChange struct {
	Partition int
	Owner     string
	Pending   string
	Epoch     uint64
}

// AssignRecord changes assignments: grants, revocations, and their cancellation.
type AssignRecord struct {
	Now     int64
	TopicID uint64
	GroupID uint64
	Changes []AssignChange
}

func (r *AssignRecord) Kind() Kind  { return KindAssign }
func (r *AssignRecord) Time() int64 { return r.Now }

func (r *AssignRecord) AppendTo(b []byte) []byte {
	b = header(b, KindAssign, r.Now)
	b = codec.AppendUvarint(b, r.TopicID)
	b = codec.AppendUvarint(b, r.GroupID)
	b = codec.AppendUvarint(b, uint64(len(r.Changes)))
	for _, c := range r.Changes {
		b = codec.AppendUvarint(b, uint64(c.Partition))
		b = codec.AppendString(b, c.Owner)
		b = codec.AppendString(b, c.Pending)
		b = codec.AppendUvarint(b, c.Epoch)
	}
	return b
}

func (r *AssignRecord) decode(d *codec.Decoder, now int64) {
	r.Now, r.TopicID, r.GroupID = now, d.Uvarint(), d.Uvarint()
	n := d.Count()
	r.Changes = make([]AssignChange, 0, n)
	for i := 0; i < n && d.Err == nil; i++ {
		r.Changes = append(r.Changes, AssignChange{Partition: int(d.Uvarint() & 0xffff), Owner: d.String(), Pending: d.String(), Epoch: d.Uvarint()})
	}
}

func (r *AssignRecord) apply(m *Machine) error {
	_, g, err := m.groupOf(r.TopicID, r.GroupID)
	if err != nil {
		return err
	}
	for _, c := range r.Changes {
		if c.Partition < 0 || c.Partition >= len(g.parts) {
			return fmt.Errorf("assignment of partition %d of group %q with %d", c.Partition, g.name, len(g.parts))
		}
		if c.Owner != "" && g.members[c.Owner] == nil || c.Pending != "" && g.members[c.Pending] == nil {
			return fmt.Errorf("assignment of partition %d of group %q to a member it does not have", c.Partition, g.name)
		}
		gp := &g.parts[c.Partition]
		if c.Owner != gp.owner || c.Epoch != gp.epoch {
			gp.position = gp.committed
		}
		switch {
		case c.Pending == "":
			gp.revokeAt = 0
		case c.Pending != gp.pending:
			gp.revokeAt = r.Now
		}
		gp.owner, gp.pending, gp.epoch = c.Owner, c.Pending, c.Epoch
	}
	return nil
}

// HandedRecord records that a member was handed records: each partition's position
// moves to the offset after the last one it got.
type HandedRecord struct {
	Now       int64
	TopicID   uint64
	GroupID   uint64
	Member    string
	Positions []PartitionOffset
}

func (r *HandedRecord) Kind() Kind  { return KindHanded }
func (r *HandedRecord) Time() int64 { return r.Now }

func (r *HandedRecord) AppendTo(b []byte) []byte {
	b = header(b, KindHanded, r.Now)
	b = codec.AppendUvarint(b, r.TopicID)
	b = codec.AppendUvarint(b, r.GroupID)
	b = codec.AppendString(b, r.Member)
	return appendOffsets(b, r.Positions, false)
}

func (r *HandedRecord) decode(d *codec.Decoder, now int64) {
	r.Now, r.TopicID, r.GroupID, r.Member = now, d.Uvarint(), d.Uvarint(), d.String()
	r.Positions = decodeOffsets(d, false)
}

func appendOffsets(b []byte, offs []PartitionOffset, epochs bool) []byte {
	b = codec.AppendUvarint(b, uint64(len(offs)))
	for _, o := range offs {
		b = codec.AppendUvarint(b, uint64(o.Partition))
		b = codec.AppendUvarint(b, o.Offset)
		if epochs {
			b = codec.AppendUvarint(b, o.Epoch)
		}
	}
	return b
}

func decodeOffsets(d *codec.Decoder, epochs bool) []PartitionOffset {
	n := d.Count()
	out := make([]PartitionOffset, 0, n)
	for i := 0; i < n && d.Err == nil; i++ {
		o := PartitionOffset{Partition: int(d.Uvarint() & 0xffff), Offset: d.Uvarint()}
		if epochs {
			o.Epoch = d.Uvarint()
		}
		out = append(out, o)
	}
	return out
}

func (r *HandedRecord) apply(m *Machine) error {
	t, g, err := m.groupOf(r.TopicID, r.GroupID)
	if err != nil {
		return err
	}
	for _, o := range r.Positions {
		if o.Partition < 0 || o.Partition >= len(g.parts) {
			return fmt.Errorf("position of partition %d of group %q with %d", o.Partition, g.name, len(g.parts))
		}
		gp := &g.parts[o.Partition]
		if gp.owner != r.Member || o.Offset < gp.position || o.Offset > t.parts[o.Partition].next {
			return fmt.Errorf("group %q partition %d: %q handed up to %d (position %d, owner %q)", g.name, o.Partition, r.Member, o.Offset, gp.position, gp.owner)
		}
		gp.position = o.Offset
	}
	return nil
}

// CommitRecord moves committed offsets forward.
type CommitRecord struct {
	Now     int64
	TopicID uint64
	GroupID uint64
	Offsets []PartitionOffset
}

func (r *CommitRecord) Kind() Kind  { return KindCommit }
func (r *CommitRecord) Time() int64 { return r.Now }

func (r *CommitRecord) AppendTo(b []byte) []byte {
	b = header(b, KindCommit, r.Now)
	b = codec.AppendUvarint(b, r.TopicID)
	b = codec.AppendUvarint(b, r.GroupID)
	return appendOffsets(b, r.Offsets, false)
}

func (r *CommitRecord) decode(d *codec.Decoder, now int64) {
	r.Now, r.TopicID, r.GroupID = now, d.Uvarint(), d.Uvarint()
	r.Offsets = decodeOffsets(d, false)
}

func (r *CommitRecord) apply(m *Machine) error {
	_, g, err := m.groupOf(r.TopicID, r.GroupID)
	if err != nil {
		return err
	}
	for _, o := range r.Offsets {
		if o.Partition < 0 || o.Partition >= len(g.parts) {
			return fmt.Errorf("commit of partition %d of group %q with %d", o.Partition, g.name, len(g.parts))
		}
		gp := &g.parts[o.Partition]
		if o.Offset < gp.committed || o.Offset > gp.position {
			return fmt.Errorf("group %q partition %d: commit of %d outside %d..%d", g.name, o.Partition, o.Offset, gp.committed, gp.position)
		}
		gp.committed = o.Offset
	}
	g.commits++
	return nil
}

// SeekRecord moves committed offsets and positions anywhere in the retained range, and
// raises the partitions' epochs.
type SeekRecord struct {
	Now     int64
	TopicID uint64
	GroupID uint64
	Offsets []PartitionOffset
}

func (r *SeekRecord) Kind() Kind  { return KindSeek }
func (r *SeekRecord) Time() int64 { return r.Now }

func (r *SeekRecord) AppendTo(b []byte) []byte {
	b = header(b, KindSeek, r.Now)
	b = codec.AppendUvarint(b, r.TopicID)
	b = codec.AppendUvarint(b, r.GroupID)
	return appendOffsets(b, r.Offsets, false)
}

func (r *SeekRecord) decode(d *codec.Decoder, now int64) {
	r.Now, r.TopicID, r.GroupID = now, d.Uvarint(), d.Uvarint()
	r.Offsets = decodeOffsets(d, false)
}

func (r *SeekRecord) apply(m *Machine) error {
	t, g, err := m.groupOf(r.TopicID, r.GroupID)
	if err != nil {
		return err
	}
	for _, o := range r.Offsets {
		if o.Partition < 0 || o.Partition >= len(g.parts) {
			return fmt.Errorf("seek of partition %d of group %q with %d", o.Partition, g.name, len(g.parts))
		}
		if p := &t.parts[o.Partition]; o.Offset < p.start || o.Offset > p.next {
			return fmt.Errorf("seek of %s/%d to %d outside %d..%d", t.name, o.Partition, o.Offset, p.start, p.next)
		}
		gp := &g.parts[o.Partition]
		gp.committed, gp.position = o.Offset, o.Offset
		gp.epoch++
	}
	return nil
}
