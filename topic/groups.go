package topic

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/okiba/okiba/queue"
)

// Consumer groups. A group reads a topic at its own pace: one committed offset per
// partition (the next offset to read, Kafka's convention), and members that pull
// batches. Each partition is owned by at most one member at a time, so one key's
// records are handled in order; the broker assigns partitions to live members (join,
// leave and expiry rebalance), revoking cooperatively: a partition that must move stays
// with its owner until the owner's next pull or heartbeat (it finishes and commits
// first), or until its lease ends. Grants, revocations, the position each partition has
// been handed out to, and commits are records: every replica agrees on who owns what and
// on what was handed to whom, and a commit can be checked against it.

// Limits of groups.
const (
	MaxMemberNameLen   = 128
	DefaultMemberLease = 30 * time.Second
	MinMemberLease     = time.Second
	MaxMemberLease     = 5 * time.Minute
	DefaultMaxFailures = 10
	MaxMaxFailures     = 1000
)

// Errors of groups, beside the topic's.
var (
	ErrGroupNotFound   = errors.New("consumer group not found")
	ErrGroupDeleted    = errors.New("consumer group was deleted")
	ErrMemberUnknown   = errors.New("not a member of the consumer group")
	ErrEpochStale      = errors.New("partition epoch is stale")
	ErrOffsetRegressed = errors.New("commit would move the committed offset backwards")
)

// MemberError reports a call from a member the group does not know (any more): its
// lease ended, it left, or its session is not the current one. The member rejoins by
// pulling without a session.
type MemberError struct {
	Group, Member string
	Reason        string
}

func (e *MemberError) Error() string {
	return fmt.Sprintf("%q is not a member of group %q (%s): pull again without a session to rejoin", e.Member, e.Group, e.Reason)
}

func (e *MemberError) Unwrap() error { return ErrMemberUnknown }

// EpochError reports a commit for a partition the member no longer holds under that
// epoch: it was moved to another member, or the group was sought.
type EpochError struct {
	Group     string
	Partition int
	Epoch     uint64 // the commit's
	Current   uint64
	Owner     string
}

func (e *EpochError) Error() string {
	return fmt.Sprintf("group %q partition %d: the commit's epoch %d is not the current %d (owner %q): the partition was reassigned or sought; pull again and commit what you are handed",
		e.Group, e.Partition, e.Epoch, e.Current, e.Owner)
}

func (e *EpochError) Unwrap() error { return ErrEpochStale }

// RegressError reports a commit below the committed offset: only a seek moves it back.
type RegressError struct {
	Group     string
	Partition int
	Offset    uint64
	Committed uint64
}

func (e *RegressError) Error() string {
	return fmt.Sprintf("group %q partition %d: commit of %d is below the committed %d; a committed offset only moves back by a seek", e.Group, e.Partition, e.Offset, e.Committed)
}

func (e *RegressError) Unwrap() error { return ErrOffsetRegressed }

// StartAt says where a new group begins.
type StartAt uint8

const (
	// StartFirst begins at each partition's oldest retained record (the default: a new
	// projection reads the whole history).
	StartFirst StartAt = 0
	// StartLast begins at each partition's end: only records published from now on.
	StartLast StartAt = 1
)

func (s StartAt) String() string {
	if s == StartLast {
		return "last"
	}
	return "first"
}

// ParseStartAt accepts "first" and "last".
func ParseStartAt(s string) (StartAt, error) {
	switch s {
	case "first", "":
		return StartFirst, nil
	case "last":
		return StartLast, nil
	}
	return 0, &queue.ConfigError{Field: "start", Reason: fmt.Sprintf("%q is not one of first, last", s)}
}

// OnFailure says what the client runtime does with a record whose handler keeps failing.
type OnFailure uint8

const (
	// FailDeadLetter writes the record to the group's dead-letter queue after
	// MaxFailures and moves on.
	FailDeadLetter OnFailure = 0
	// FailBlock retries the record for ever: a strict projection stops rather than skip.
	FailBlock OnFailure = 1
)

func (f OnFailure) String() string {
	if f == FailBlock {
		return "block"
	}
	return "dead_letter"
}

// ParseOnFailure accepts "dead_letter" and "block".
func ParseOnFailure(s string) (OnFailure, error) {
	switch s {
	case "dead_letter", "":
		return FailDeadLetter, nil
	case "block":
		return FailBlock, nil
	}
	return 0, &queue.ConfigError{Field: "on_failure", Reason: fmt.Sprintf("%q is not one of dead_letter, block", s)}
}

// GroupConfig configures a consumer group.
type GroupConfig struct {
	// Start is where the group begins, at creation only.
	Start StartAt
	// MemberLease is how long a member keeps its partitions without a pull or heartbeat
	// (1 s .. 5 min, default 30 s).
	MemberLease time.Duration
	// OnFailure and MaxFailures are for the client runtime: after MaxFailures failures
	// of one record (1..1000, default 10) it dead-letters it, or blocks.
	OnFailure   OnFailure
	MaxFailures int
}

// DefaultGroupConfig returns okiba's defaults for a group.
func DefaultGroupConfig() GroupConfig {
	return GroupConfig{MemberLease: DefaultMemberLease, MaxFailures: DefaultMaxFailures}
}

// Validate checks every field's range.
func (c *GroupConfig) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &queue.ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if c.Start > StartLast {
		return bad("start", "must be first or last")
	}
	if c.MemberLease < MinMemberLease || c.MemberLease > MaxMemberLease || c.MemberLease%time.Millisecond != 0 {
		return bad("member_lease", "must be between 1s and 5m in whole milliseconds, got %v", c.MemberLease)
	}
	if c.OnFailure > FailBlock {
		return bad("on_failure", "must be dead_letter or block")
	}
	if c.MaxFailures < 1 || c.MaxFailures > MaxMaxFailures {
		return bad("max_failures", "must be between 1 and %d, got %d", MaxMaxFailures, c.MaxFailures)
	}
	return nil
}

type group struct {
	id          uint64
	name        string
	cfg         GroupConfig
	createdAt   int64
	parts       []gpart
	members     map[string]*member
	lastSession uint64
	commits     uint64 // commit records applied, for statistics
}

// gpart is a group's state of one partition.
type gpart struct {
	committed uint64 // the next offset to read
	position  uint64 // offsets below were handed out under the current epoch (or committed)
	owner     string // the member holding it, or ""
	pending   string // the member it goes to when its owner lets go, or ""
	revokeAt  int64  // when it became pending: the owner lets go within a member lease
	epoch     uint64 // raised at every grant and seek
	lost      uint64 // records retention deleted before the group committed past them
}

type member struct {
	name    string
	session uint64
	expires int64
	joined  int64
}

// DeadLetterName is the name of a group's dead-letter queue: "<topic>.<group>-dlq".
func DeadLetterName(topic, group string) string { return topic + "." + group + "-dlq" }

func (m *Machine) group(t *topicState, name string) (*group, error) {
	g := t.groups[name]
	if g == nil {
		return nil, fmt.Errorf("%w: %q on topic %q", ErrGroupNotFound, name, t.name)
	}
	return g, nil
}

func checkMemberName(name string) error {
	if name == "" || len(name) > MaxMemberNameLen {
		return &queue.InvalidError{Field: "member", Reason: fmt.Sprintf("a member name is 1 to %d bytes", MaxMemberNameLen)}
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c > '~' {
			return &queue.InvalidError{Field: "member", Reason: "a member name is printable ASCII without spaces"}
		}
	}
	return nil
}

// PutGroup creates a consumer group or changes its configuration (Start matters only at
// creation). It reports whether the group was created.
func (m *Machine) PutGroup(now int64, sink Sink, topic, name string, cfg GroupConfig) (bool, error) {
	now = m.clock(now)
	t, err := m.topic(topic)
	if err != nil {
		return false, err
	}
	if err := queue.CheckName(name); err != nil {
		return false, &queue.NameError{Name: name, Of: "group"}
	}
	if err := cfg.Validate(); err != nil {
		return false, err
	}
	if g := t.groups[name]; g != nil {
		cfg.Start = g.cfg.Start
		if cfg == g.cfg {
			return false, nil
		}
		m.emit(sink, &GroupPutRecord{Now: now, TopicID: t.id, GroupID: g.id, Name: name, Config: cfg})
		return false, nil
	}
	if dlq := DeadLetterName(t.name, name); len(dlq) > queue.MaxNameLen {
		// Refused now rather than at the first poison record, which could not be set aside.
		return false, &queue.NameError{Name: name, Of: "group", Rule: fmt.Sprintf(
			"short enough that its dead-letter queue %q is at most %d bytes (topic name, \".\", group name and \"-dlq\")", dlq, queue.MaxNameLen)}
	}
	if len(t.groups) >= m.limits.MaxGroups {
		return false, &queue.LimitError{Limit: "max_groups", Value: m.limits.MaxGroups, What: fmt.Sprintf("topic %q has too many consumer groups: delete one first", t.name)}
	}
	r := &GroupPutRecord{Now: now, TopicID: t.id, GroupID: m.lastGID + 1, Name: name, Config: cfg, Start: make([]uint64, len(t.parts))}
	for i := range t.parts {
		r.Start[i] = t.parts[i].start
		if cfg.Start == StartLast {
			r.Start[i] = t.parts[i].next
		}
	}
	m.emit(sink, r)
	return true, nil
}

// DeleteGroup deletes a consumer group; its members' next calls are refused.
func (m *Machine) DeleteGroup(now int64, sink Sink, topic, name string) error {
	now = m.clock(now)
	t, err := m.topic(topic)
	if err != nil {
		return err
	}
	g, err := m.group(t, name)
	if err != nil {
		return err
	}
	m.emit(sink, &GroupDeleteRecord{Now: now, TopicID: t.id, GroupID: g.id})
	return nil
}

// member finds the calling member. session 0 asks to join (or rejoin); a session that
// is not the member's current one is refused.
func (m *Machine) memberOf(t *topicState, g *group, name string, session uint64) (*member, error) {
	x := g.members[name]
	switch {
	case x == nil && session != 0:
		return nil, &MemberError{Group: g.name, Member: name, Reason: "its lease ended or it left"}
	case x != nil && session != 0 && x.session != session:
		return nil, &MemberError{Group: g.name, Member: name, Reason: "its session is not the current one: another process joined under that name"}
	}
	return x, nil
}

// Assignment is what a member holds of a group's partitions.
type Assignment struct {
	Partition int
	Epoch     uint64
	// Revoking: the partition goes to another member once this one has committed what
	// it was handed of it (or a member lease after the revocation began); it gets no
	// more records of it meanwhile.
	Revoking bool
	// Position is the next offset the member is handed; Committed the group's.
	Position  uint64
	Committed uint64
	End       uint64 // the partition's end when this was taken
}

// Session is a member's standing after a pull or heartbeat.
type Session struct {
	Session  uint64
	Expires  int64
	Assigned []Assignment
}

// Attend is what a pull or heartbeat does before any record is read: join (session 0)
// or check the session, renew the member's lease when a third of it has passed, let go of
// the partitions being revoked from it that it is done with (see release), and rebalance
// if membership changed. It returns the member's assignment.
func (m *Machine) Attend(now int64, sink Sink, topic, groupName, memberName string, session uint64) (Session, error) {
	now = m.clock(now)
	t, err := m.topic(topic)
	if err != nil {
		return Session{}, err
	}
	g := t.groups[groupName]
	if g == nil {
		if session != 0 {
			return Session{}, fmt.Errorf("%w: %q on topic %q", ErrGroupDeleted, groupName, topic)
		}
		return Session{}, fmt.Errorf("%w: %q on topic %q", ErrGroupNotFound, groupName, topic)
	}
	if err := checkMemberName(memberName); err != nil {
		return Session{}, err
	}
	x, err := m.memberOf(t, g, memberName, session)
	if err != nil {
		return Session{}, err
	}
	lease := g.cfg.MemberLease.Milliseconds()
	switch {
	case x == nil || session == 0:
		if x == nil && len(g.members) >= m.limits.MaxMembers {
			return Session{}, &queue.LimitError{Limit: "max_members", Value: m.limits.MaxMembers, What: fmt.Sprintf("group %q has too many members", g.name)}
		}
		m.emit(sink, &MemberJoinRecord{Now: now, TopicID: t.id, GroupID: g.id, Member: memberName, Session: g.lastSession + 1, Expires: now + lease})
		m.rebalance(now, sink, t, g)
	case x.expires-now < lease*2/3:
		m.emit(sink, &MemberRenewRecord{Now: now, TopicID: t.id, GroupID: g.id, Member: memberName, Expires: now + lease})
	}
	x = g.members[memberName]
	m.release(now, sink, t, g, memberName)
	return g.sessionOf(t, x), nil
}

// release hands the partitions being revoked from a member to the members they go to,
// once the member is done with them — it committed everything it was handed — or the
// revocation has lasted a member lease (the member is alive but stuck: the new owner
// must not wait for ever, and gets the uncommitted records again). Until then the member
// sees them as revoking and is handed no more of their records: cooperative, as Kafka's
// incremental rebalance, so that a rebalance does not make the records in flight be
// handled twice.
func (m *Machine) release(now int64, sink Sink, t *topicState, g *group, memberName string) {
	lease := g.cfg.MemberLease.Milliseconds()
	var moves []AssignChange
	for p := range g.parts {
		gp := &g.parts[p]
		if gp.owner == memberName && gp.pending != "" && (gp.committed >= gp.position || now-gp.revokeAt >= lease) {
			moves = append(moves, AssignChange{Partition: p, Owner: gp.pending, Epoch: gp.epoch + 1})
		}
	}
	if len(moves) > 0 {
		m.emit(sink, &AssignRecord{Now: now, TopicID: t.id, GroupID: g.id, Changes: moves})
	}
}

// SessionOf returns a member's session and assignment as they are.
func (m *Machine) SessionOf(topic, groupName, memberName string) (Session, bool) {
	t := m.topics[topic]
	if t == nil || t.groups[groupName] == nil || t.groups[groupName].members[memberName] == nil {
		return Session{}, false
	}
	g := t.groups[groupName]
	return g.sessionOf(t, g.members[memberName]), true
}

func (g *group) sessionOf(t *topicState, x *member) Session {
	s := Session{Session: x.session, Expires: x.expires}
	for p := range g.parts {
		gp := &g.parts[p]
		if gp.owner == x.name {
			s.Assigned = append(s.Assigned, Assignment{Partition: p, Epoch: gp.epoch, Revoking: gp.pending != "",
				Position: gp.position, Committed: gp.committed, End: t.parts[p].next})
		}
	}
	return s
}

// rebalance spreads the partitions over the live members, sorted by name: the first
// P mod M members get one more than P div M. A member keeps what it holds up to its
// quota; what is free or over quota goes to the members below theirs, in partition
// order. A partition whose owner is alive moves only when the owner lets go (pending);
// one without a live owner is granted at once.
func (m *Machine) rebalance(now int64, sink Sink, t *topicState, g *group) {
	names := make([]string, 0, len(g.members))
	for n := range g.members {
		names = append(names, n)
	}
	sort.Strings(names)
	target := balance(g, names)
	var changes []AssignChange
	for p, want := range target {
		gp := &g.parts[p]
		switch {
		case gp.owner == "" || g.members[gp.owner] == nil:
			if want != gp.owner || gp.pending != "" {
				changes = append(changes, AssignChange{Partition: p, Owner: want, Epoch: gp.epoch + 1})
			}
		case want == gp.owner:
			if gp.pending != "" { // it was to move, and now stays
				changes = append(changes, AssignChange{Partition: p, Owner: gp.owner, Epoch: gp.epoch})
			}
		default:
			if gp.pending != want {
				changes = append(changes, AssignChange{Partition: p, Owner: gp.owner, Pending: want, Epoch: gp.epoch})
			}
		}
	}
	if len(changes) > 0 {
		m.emit(sink, &AssignRecord{Now: now, TopicID: t.id, GroupID: g.id, Changes: changes})
	}
}

// balance returns each partition's target member ("" when there are none).
func balance(g *group, names []string) []string {
	P, M := len(g.parts), len(names)
	target := make([]string, P)
	if M == 0 {
		return target
	}
	quota := make(map[string]int, M)
	for i, n := range names {
		quota[n] = P / M
		if i < P%M {
			quota[n]++
		}
	}
	claim := func(gp *gpart) string {
		if gp.pending != "" {
			return gp.pending
		}
		return gp.owner
	}
	var free []int
	for p := range g.parts {
		c := claim(&g.parts[p])
		if q, live := quota[c]; live && q > 0 {
			target[p] = c
			quota[c]--
			continue
		}
		free = append(free, p)
	}
	i := 0
	for _, p := range free {
		for quota[names[i]] == 0 {
			i++
		}
		target[p] = names[i]
		quota[names[i]]--
	}
	return target
}

// PullPlan is what a member may be handed: for each partition it holds and is not
// losing, the offsets from its position to the end, within max records in all.
type PullPlan struct {
	TopicID uint64
	GroupID uint64
	Ranges  []PullRange
}

// PullRange is one partition's part of a pull.
type PullRange struct {
	Partition int
	Epoch     uint64
	From, To  uint64
}

// PlanPull says what a member (after Attend) may be handed, up to max records, the
// partitions taken in turn from a start that moves with the group's positions (see
// turn), so that one busy partition does not starve the others and the plan is a
// function of the state alone.
func (m *Machine) PlanPull(topic, groupName, memberName string, max int) (PullPlan, error) {
	t, err := m.topic(topic)
	if err != nil {
		return PullPlan{}, err
	}
	g, err := m.group(t, groupName)
	if err != nil {
		return PullPlan{}, err
	}
	plan := PullPlan{TopicID: t.id, GroupID: g.id}
	left := max
	n := len(g.parts)
	positions := make([]uint64, n)
	for i := range g.parts {
		positions[i] = g.parts[i].position
	}
	first := turn(positions, n)
	for i := 0; i < n && left > 0; i++ {
		p := (first + i) % n
		gp := &g.parts[p]
		if gp.owner != memberName || gp.pending != "" {
			continue
		}
		end := t.parts[p].next
		if gp.position >= end {
			continue
		}
		to := min(end, gp.position+uint64(left))
		plan.Ranges = append(plan.Ranges, PullRange{Partition: p, Epoch: gp.epoch, From: gp.position, To: to})
		left -= int(to - gp.position)
	}
	return plan, nil
}

// Handed records that a member was handed records: each partition's position moves to
// the offset after the last one it got. A range whose partition changed since it was
// planned (another owner, a seek, a concurrent pull) is dropped and reported false: its
// records must not be returned.
func (m *Machine) Handed(now int64, sink Sink, topicID, groupID uint64, memberName string, got []PullRange) ([]bool, error) {
	now = m.clock(now)
	t := m.byID[topicID]
	if t == nil {
		return nil, fmt.Errorf("%w: id %d", ErrTopicNotFound, topicID)
	}
	var g *group
	for _, x := range t.groups {
		if x.id == groupID {
			g = x
		}
	}
	if g == nil {
		return nil, fmt.Errorf("%w: id %d", ErrGroupDeleted, groupID)
	}
	ok := make([]bool, len(got))
	r := &HandedRecord{Now: now, TopicID: topicID, GroupID: groupID, Member: memberName}
	for i, x := range got {
		gp := &g.parts[x.Partition]
		if gp.owner != memberName || gp.pending != "" || gp.epoch != x.Epoch || gp.position != x.From || x.To <= x.From {
			continue
		}
		ok[i] = true
		r.Positions = append(r.Positions, PartitionOffset{Partition: x.Partition, Offset: x.To})
	}
	if len(r.Positions) > 0 {
		m.emit(sink, r)
	}
	return ok, nil
}

// PartitionOffset is one partition's offset in a commit, seek or pull record.
type PartitionOffset struct {
	Partition int
	Offset    uint64
	Epoch     uint64 // of a commit: the epoch it was handed under
}

// Commit moves committed offsets, each accepted only from the member holding the
// partition under that epoch, never backwards (a RegressError), and not past what was
// handed out (an OffsetError). A commit equal to the committed offset is accepted and
// changes nothing. Results are per offset.
func (m *Machine) Commit(now int64, sink Sink, topic, groupName, memberName string, session uint64, offs []PartitionOffset) ([]error, error) {
	now = m.clock(now)
	t, err := m.topic(topic)
	if err != nil {
		return nil, err
	}
	g := t.groups[groupName]
	if g == nil {
		return nil, fmt.Errorf("%w: %q on topic %q", ErrGroupDeleted, groupName, topic)
	}
	if x := g.members[memberName]; x == nil || x.session != session {
		return nil, &MemberError{Group: g.name, Member: memberName, Reason: "its lease ended, it left, or the session is not its pull's"}
	}
	errs := make([]error, len(offs))
	r := &CommitRecord{Now: now, TopicID: t.id, GroupID: g.id}
	seen := map[int]uint64{}
	for i, o := range offs {
		if o.Partition < 0 || o.Partition >= len(g.parts) {
			errs[i] = &PartitionError{Topic: t.name, Partition: o.Partition, Partitions: len(g.parts)}
			continue
		}
		gp := &g.parts[o.Partition]
		committed := gp.committed
		if c, ok := seen[o.Partition]; ok {
			committed = c
		}
		switch {
		case gp.owner != memberName || gp.epoch != o.Epoch:
			errs[i] = &EpochError{Group: g.name, Partition: o.Partition, Epoch: o.Epoch, Current: gp.epoch, Owner: gp.owner}
		case o.Offset < committed:
			errs[i] = &RegressError{Group: g.name, Partition: o.Partition, Offset: o.Offset, Committed: committed}
		case o.Offset > gp.position:
			errs[i] = &OffsetError{Topic: t.name, Partition: o.Partition, Offset: o.Offset, Start: committed, End: gp.position,
				Group: g.name}
		case o.Offset > committed:
			seen[o.Partition] = o.Offset
		}
	}
	for p := range g.parts {
		if off, ok := seen[p]; ok {
			r.Offsets = append(r.Offsets, PartitionOffset{Partition: p, Offset: off})
		}
	}
	if len(r.Offsets) > 0 {
		m.emit(sink, r)
		m.release(now, sink, t, g, memberName) // a revoked partition committed to its end goes now
	}
	return errs, nil
}

// SeekGroup moves a group's committed offsets (and positions) to the given offsets, each a
// retained offset or the partition's end, and raises the partitions' epochs so that
// commits in flight from the old position are refused. partition -1 in offs is not
// allowed: the caller resolves "all" to every partition.
func (m *Machine) SeekGroup(now int64, sink Sink, topic, groupName string, offs []PartitionOffset) error {
	now = m.clock(now)
	t, err := m.topic(topic)
	if err != nil {
		return err
	}
	g, err := m.group(t, groupName)
	if err != nil {
		return err
	}
	for _, o := range offs {
		if o.Partition < 0 || o.Partition >= len(t.parts) {
			return &PartitionError{Topic: t.name, Partition: o.Partition, Partitions: len(t.parts)}
		}
		p := &t.parts[o.Partition]
		if o.Offset < p.start || o.Offset > p.next {
			return &OffsetError{Topic: t.name, Partition: o.Partition, Offset: o.Offset, Start: p.start, End: p.next}
		}
	}
	if len(offs) > 0 {
		m.emit(sink, &SeekRecord{Now: now, TopicID: t.id, GroupID: g.id, Offsets: offs})
	}
	return nil
}

// Leave removes a member; its partitions go to the others.
func (m *Machine) Leave(now int64, sink Sink, topic, groupName, memberName string, session uint64) error {
	now = m.clock(now)
	t, err := m.topic(topic)
	if err != nil {
		return err
	}
	g := t.groups[groupName]
	if g == nil {
		return fmt.Errorf("%w: %q on topic %q", ErrGroupDeleted, groupName, topic)
	}
	if x := g.members[memberName]; x == nil || session != 0 && x.session != session {
		return &MemberError{Group: g.name, Member: memberName, Reason: "it is not in the group under that session"}
	}
	m.emit(sink, &MemberLeaveRecord{Now: now, TopicID: t.id, GroupID: g.id, Member: memberName})
	m.rebalance(now, sink, t, g)
	return nil
}

// expireMembers removes the members whose lease has ended.
func (m *Machine) expireMembers(now int64, sink Sink, t *topicState) {
	for _, name := range sortedGroupNames(t) {
		g := t.groups[name]
		var gone []string
		for n, x := range g.members {
			if x.expires <= now {
				gone = append(gone, n)
			}
		}
		if len(gone) == 0 {
			continue
		}
		sort.Strings(gone)
		for _, n := range gone {
			m.emit(sink, &MemberLeaveRecord{Now: now, TopicID: t.id, GroupID: g.id, Member: n, Expired: true})
		}
		m.rebalance(now, sink, t, g)
	}
}

func sortedGroupNames(t *topicState) []string {
	names := make([]string, 0, len(t.groups))
	for n := range t.groups {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// GroupInfo describes a consumer group.
type GroupInfo struct {
	ID         uint64
	Topic      string
	Name       string
	Config     GroupConfig
	CreatedAt  int64
	Partitions []GroupPartition
	Members    []MemberInfo
	Commits    uint64
}

// GroupPartition is a group's state of one partition.
type GroupPartition struct {
	Partition int
	Committed uint64
	Position  uint64
	End       uint64 // the partition's
	Start     uint64 // the partition's
	Owner     string
	Pending   string
	Epoch     uint64
	// Lag is End − Committed; LostToRetention the records retention deleted before the
	// group committed past them.
	Lag             uint64
	LostToRetention uint64
}

// MemberInfo describes a member.
type MemberInfo struct {
	Name    string
	Session uint64
	Joined  int64
	Expires int64
}

// Group describes a consumer group.
func (m *Machine) Group(topic, name string) (GroupInfo, error) {
	t, err := m.topic(topic)
	if err != nil {
		return GroupInfo{}, err
	}
	g, err := m.group(t, name)
	if err != nil {
		return GroupInfo{}, err
	}
	return g.info(t), nil
}

// Groups describes every group of a topic, by name.
func (m *Machine) Groups(topic string) ([]GroupInfo, error) {
	t, err := m.topic(topic)
	if err != nil {
		return nil, err
	}
	out := make([]GroupInfo, 0, len(t.groups))
	for _, n := range sortedGroupNames(t) {
		out = append(out, t.groups[n].info(t))
	}
	return out, nil
}

func (g *group) info(t *topicState) GroupInfo {
	gi := GroupInfo{ID: g.id, Topic: t.name, Name: g.name, Config: g.cfg, CreatedAt: g.createdAt, Commits: g.commits,
		Partitions: make([]GroupPartition, len(g.parts))}
	for p := range g.parts {
		gp := &g.parts[p]
		tp := &t.parts[p]
		gi.Partitions[p] = GroupPartition{Partition: p, Committed: gp.committed, Position: gp.position, End: tp.next, Start: tp.start,
			Owner: gp.owner, Pending: gp.pending, Epoch: gp.epoch, Lag: tp.next - gp.committed, LostToRetention: gp.lost}
	}
	for _, n := range sortedMemberNames(g) {
		x := g.members[n]
		gi.Members = append(gi.Members, MemberInfo{Name: n, Session: x.session, Joined: x.joined, Expires: x.expires})
	}
	return gi
}

func sortedMemberNames(g *group) []string {
	names := make([]string, 0, len(g.members))
	for n := range g.members {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// turn picks where a walk over n partitions starts: a hash of the offsets the walk moves
// on (a group's positions, a subscription's cursors), so it changes every time records
// are handed or copied, spreads over the partitions, and is the same on every replica.
func turn(offsets []uint64, n int) int {
	if n <= 1 {
		return 0
	}
	var x uint64
	for _, o := range offsets {
		x += o
	}
	// splitmix64's finaliser
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return int(x % uint64(n))
}
