package service

import (
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/queue"
)

// ---------------------------------------------------------------------------------------
// Send

// Sent is what a send did, message by message, for the transport to answer in the
// encoding its client accepts.
type Sent struct {
	res      []queue.SendResult
	errs     []*api.Error // the wire error of each message that failed
	repeated bool
}

// From names the producer request a send is (idempotent sends); the zero value is none.
type From struct {
	Producer string
	Seq      uint64
}

// JSON is the send's answer in the JSON encoding; its Error is set when every message
// failed alike (the answer's status is then that error's).
func (x Sent) JSON() api.SendResponse {
	out := api.SendResponse{Results: make([]api.SendResult, len(x.res)), Repeated: x.repeated}
	for i, r := range x.res {
		if x.errs[i] != nil {
			out.Results[i].Error = x.errs[i]
			continue
		}
		out.Results[i] = api.SendResult{ID: queue.FormatID(r.ID), Duplicate: r.Duplicate}
	}
	out.Error = commonError(x.errs)
	return out
}

// Binary is the send's answer in the binary encoding, and the error every message
// failed with, if they all failed alike.
func (x Sent) Binary() ([]api.BinaryResult, *api.Error) {
	out := make([]api.BinaryResult, len(x.res))
	for i, r := range x.res {
		if x.errs[i] != nil {
			out[i].Err = x.errs[i]
			continue
		}
		out[i] = api.BinaryResult{ID: r.ID, Duplicate: r.Duplicate}
	}
	return out, commonError(x.errs)
}

// checkBatch refuses a send of more messages than one request may carry.
func checkBatch(n int) *api.Error {
	if n > api.MaxBatch {
		return &api.Error{Code: api.CodeBatchTooLarge, Message: fmt.Sprintf("%d messages in one send; at most %d", n, api.MaxBatch)}
	}
	return nil
}

// Send sends messages decoded from JSON. A malformed message refuses the whole request;
// each message that the queue refuses has its own error in the results.
func (s *Service) Send(ctx context.Context, name string, from From, msgs []api.SendMessage) (Sent, *api.Error) {
	if e := checkBatch(len(msgs)); e != nil {
		return Sent{}, e
	}
	inputs := make([]queue.SendInput, len(msgs))
	for i, m := range msgs {
		in, e := sendInput(m)
		if e != nil {
			e.Message = fmt.Sprintf("messages[%d]: %s", i, e.Message)
			return Sent{}, e
		}
		inputs[i] = in
	}
	return s.send(ctx, name, from, inputs)
}

// SendBinary sends messages decoded from the binary encoding, as Send does.
func (s *Service) SendBinary(ctx context.Context, name string, from From, msgs []api.BinaryMessage) (Sent, *api.Error) {
	if e := checkBatch(len(msgs)); e != nil {
		return Sent{}, e
	}
	inputs := make([]queue.SendInput, len(msgs))
	for i, m := range msgs {
		if m.Delay >= 0 && time.Duration(m.Delay)*time.Millisecond > queue.MaxDelay {
			return Sent{}, &api.Error{Code: api.CodeInvalidDelay, Message: fmt.Sprintf("messages[%d]: delay must be between 0 and 168h", i)}
		}
		in := queue.SendInput{
			// Copy: the broker keeps bodies (its cache), and they must not pin the request.
			Payload: queue.Payload{Body: append([]byte(nil), m.Body...), Group: m.Group, DedupID: m.DedupID},
			Delay:   m.Delay,
		}
		if len(m.Headers) > 0 {
			in.Payload.Attrs = make([]queue.Attr, len(m.Headers))
			for j, h := range m.Headers {
				in.Payload.Attrs[j] = queue.Attr{Name: h.Name, Type: "String", Value: []byte(h.Value)}
			}
		}
		inputs[i] = in
	}
	return s.send(ctx, name, from, inputs)
}

func (s *Service) send(ctx context.Context, name string, from From, inputs []queue.SendInput) (Sent, *api.Error) {
	if from.Producer == "" && from.Seq != 0 {
		return Sent{}, &api.Error{Code: api.CodeInvalidRequest, Message: "a sequence needs its producer_id (POST /v1/producers hands one out)"}
	}
	res, repeated, err := s.b.SendFrom(ctx, name, from.Producer, from.Seq, inputs)
	if err != nil {
		return Sent{}, s.errorOf(err)
	}
	x := Sent{res: res, errs: make([]*api.Error, len(res)), repeated: repeated}
	for i, r := range res {
		if r.Err != nil {
			x.errs[i] = s.errorOf(r.Err)
		}
	}
	return x, nil
}

func sendInput(m api.SendMessage) (queue.SendInput, *api.Error) {
	if m.Body == nil && m.BodyBase64 == nil {
		return queue.SendInput{}, &api.Error{Code: api.CodeInvalidBody, Message: "a message needs body (UTF-8 text) or body_base64"}
	}
	body, err := api.DecodeBody(m.Body, m.BodyBase64)
	if err != nil {
		return queue.SendInput{}, &api.Error{Code: api.CodeInvalidBody, Message: err.Error()}
	}
	in := queue.SendInput{Payload: queue.Payload{Body: body, Group: m.Group, DedupID: m.DedupID}, Delay: -1}
	if m.Delay != nil {
		if m.Delay.D() < 0 || m.Delay.D() > queue.MaxDelay {
			return queue.SendInput{}, &api.Error{Code: api.CodeInvalidDelay, Message: fmt.Sprintf("delay must be between 0 and 168h, got %v", m.Delay.D())}
		}
		if m.Delay.D()%time.Millisecond != 0 {
			return queue.SendInput{}, &api.Error{Code: api.CodeInvalidDelay, Message: "delay must be a whole number of milliseconds"}
		}
		in.Delay = m.Delay.D().Milliseconds()
	}
	if len(m.Headers) > 0 {
		names := make([]string, 0, len(m.Headers))
		for k := range m.Headers {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			in.Payload.Attrs = append(in.Payload.Attrs, queue.Attr{Name: k, Type: "String", Value: []byte(m.Headers[k])})
		}
	}
	return in, nil
}

// ---------------------------------------------------------------------------------------
// Receive

// Received is what a receive leased, for the transport to answer in the encoding its
// client accepts.
type Received struct {
	ms []broker.Message
}

// Receive leases messages: in.Max of them (1 when 0), waiting up to in.Wait, for
// in.Visibility; an omitted wait or visibility is the queue's. It returns no messages
// when the wait ends empty or ctx ends while it waits. With in.ReceiveAndDelete it
// settles them instead of leasing them: no receipts, no lease deadline.
func (s *Service) Receive(ctx context.Context, name string, in api.ReceiveRequest) (Received, *api.Error) {
	// max 0 is max 1 (an omitted max decodes as 0); an omitted wait or visibility is the
	// queue's. What was given is checked before it becomes options, in which a negative
	// duration would mean the queue's default.
	opts := broker.ReceiveOptions{Max: in.Max, Wait: -1, Visibility: -1, Delete: in.ReceiveAndDelete}
	if in.ReceiveAndDelete && in.Visibility != nil {
		return Received{}, Invalid("\"visibility\" has no meaning with \"receive_and_delete\": nothing is leased; leave it out")
	}
	if opts.Max == 0 {
		opts.Max = 1
	}
	var wait, vis time.Duration
	if in.Wait != nil {
		wait = in.Wait.D()
		opts.Wait = wait
	}
	if in.Visibility != nil {
		vis = in.Visibility.D()
		opts.Visibility = vis
	}
	if err := broker.CheckReceive(opts.Max, wait, vis); err != nil {
		return Received{}, s.errorOf(err)
	}
	ms, err := s.b.Receive(ctx, name, opts)
	if err != nil {
		return Received{}, s.errorOf(err)
	}
	return Received{ms: ms}, nil
}

// Leases returns the receipts of the messages leased and their lease deadline (none for
// a receive-and-delete), for the table of consumers.
func (x Received) Leases() ([]string, time.Time) {
	var receipts []string
	var deadline time.Time
	for i := range x.ms {
		m := &x.ms[i]
		if m.Receipt == "" || m.LeaseDeadline.IsZero() {
			continue
		}
		receipts = append(receipts, m.Receipt)
		if m.LeaseDeadline.After(deadline) {
			deadline = m.LeaseDeadline
		}
	}
	return receipts, deadline
}

// JSON is the receive's answer in the JSON encoding.
func (x Received) JSON() api.ReceiveResponse {
	out := api.ReceiveResponse{Messages: make([]api.Message, len(x.ms))}
	for i := range x.ms {
		m := &x.ms[i]
		wm := wireMessage(m.ID, &m.Payload)
		wm.Receipt = m.Receipt
		wm.Deliveries = m.Deliveries
		wm.EnqueuedAt = m.EnqueuedAt.UTC()
		if !m.FirstDelivered.IsZero() {
			t := m.FirstDelivered.UTC()
			wm.FirstDeliveredAt = &t
		}
		if !m.LeaseDeadline.IsZero() {
			dl := m.LeaseDeadline.UTC()
			wm.VisibleAt = &dl
		}
		wm.DeadLetter = wireDead(m.Dead)
		out.Messages[i] = wm
	}
	return out
}

// Binary is the receive's answer in the binary encoding.
func (x Received) Binary() []api.BinaryReceived {
	out := make([]api.BinaryReceived, len(x.ms))
	for i := range x.ms {
		m := &x.ms[i]
		b := api.BinaryReceived{
			ID: m.ID, Receipt: m.Receipt, Deliveries: m.Deliveries, EnqueuedAt: m.EnqueuedAt.UnixMilli(),
			Group: m.Payload.Group, DedupID: m.Payload.DedupID, Body: m.Payload.Body,
		}
		if !m.LeaseDeadline.IsZero() { // zero: a receive-and-delete leased nothing
			b.Deadline = m.LeaseDeadline.UnixMilli()
		}
		if !m.FirstDelivered.IsZero() {
			b.FirstDelivered = m.FirstDelivered.UnixMilli()
		}
		if len(m.Payload.Attrs) > 0 {
			b.Attrs = make([]api.BinaryAttr, len(m.Payload.Attrs))
			for j, a := range m.Payload.Attrs {
				b.Attrs[j] = api.BinaryAttr{Name: a.Name, Type: a.Type, Value: a.Value}
			}
		}
		if d := m.Dead; d != nil {
			b.Dead = &api.BinaryDead{Source: d.SourceName, Reason: d.Reason, Description: d.Description, At: d.At, Deliveries: d.Deliveries}
		}
		out[i] = b
	}
	return out
}

// ---------------------------------------------------------------------------------------
// Settling leases: ack, nack, extend, dead-letter

// checkReceipts refuses an empty or oversized list of receipts.
func checkReceipts(in *api.ReceiptsRequest) *api.Error {
	if len(in.Receipts) == 0 {
		return Invalid("\"receipts\" is empty; give at least one receipt")
	}
	if len(in.Receipts) > api.MaxBatch {
		return &api.Error{Code: api.CodeBatchTooLarge, Message: fmt.Sprintf("%d receipts in one request; at most %d", len(in.Receipts), api.MaxBatch)}
	}
	return nil
}

// items answers a settle: each receipt's outcome, and the error they all failed with,
// if they did alike.
func (s *Service) items(errs []error, err error) (api.ReceiptsResponse, *api.Error) {
	if err != nil {
		return api.ReceiptsResponse{}, s.errorOf(err)
	}
	out := api.ReceiptsResponse{Results: make([]api.ItemResult, len(errs))}
	wire := make([]*api.Error, len(errs))
	for i, err := range errs {
		if err != nil {
			wire[i] = s.errorOf(err)
			out.Results[i].Error = wire[i]
		} else {
			out.Results[i].OK = true
		}
	}
	out.Error = commonError(wire)
	return out, nil
}

// Ack ends the leases of in.Receipts: their messages are done.
func (s *Service) Ack(ctx context.Context, name string, in api.ReceiptsRequest) (api.ReceiptsResponse, *api.Error) {
	e := checkReceipts(&in)
	if e == nil && (in.Delay != nil || in.Visibility != nil || in.Reason != "" || in.Description != "" || in.Error != "") {
		e = Invalid("ack takes only \"receipts\"")
	}
	if e != nil {
		return api.ReceiptsResponse{}, e
	}
	return s.items(s.b.Ack(ctx, name, in.Receipts))
}

// Nack gives the leased messages back, visible again after in.Delay (the queue's
// backoff when omitted).
func (s *Service) Nack(ctx context.Context, name string, in api.ReceiptsRequest) (api.ReceiptsResponse, *api.Error) {
	e := checkReceipts(&in)
	if e == nil && (in.Visibility != nil || in.Reason != "" || in.Description != "") {
		e = Invalid("nack takes \"receipts\", an optional \"delay\" and an optional \"error\"")
	}
	if e == nil {
		if err := queue.CheckHandlerError(in.Error); err != nil {
			e = s.errorOf(err)
		}
	}
	delay := time.Duration(-1)
	if e == nil && in.Delay != nil {
		delay = in.Delay.D()
		if delay < 0 || delay > queue.MaxDelay || delay%time.Millisecond != 0 {
			e = &api.Error{Code: api.CodeInvalidDelay, Message: fmt.Sprintf("delay must be a whole number of milliseconds between 0 and 168h, got %v", delay)}
		}
	}
	if e != nil {
		return api.ReceiptsResponse{}, e
	}
	return s.items(s.b.NackError(ctx, name, in.Receipts, delay, in.Error))
}

// Extend sets the leases to end in.Visibility from now.
func (s *Service) Extend(ctx context.Context, name string, in api.ReceiptsRequest) (api.ReceiptsResponse, *api.Error) {
	e := checkReceipts(&in)
	if e == nil && (in.Delay != nil || in.Reason != "" || in.Description != "" || in.Error != "") {
		e = Invalid("extend takes \"receipts\" and \"visibility\"")
	}
	if e == nil && in.Visibility == nil {
		e = Invalid("extend needs \"visibility\": the lease's new length from now, such as \"30s\"")
	}
	if e == nil {
		if v := in.Visibility.D(); v < 0 || v > queue.MaxVisibilityTimeout || v%time.Millisecond != 0 {
			e = Invalid("visibility must be a whole number of milliseconds between 0 and 12h, got %v", v)
		}
	}
	if e != nil {
		return api.ReceiptsResponse{}, e
	}
	return s.items(s.b.Extend(ctx, name, in.Receipts, in.Visibility.D()))
}

// DeadLetter moves the leased messages to the queue's dead-letter queue with
// in.Reason ("consumer" when empty) and in.Description.
func (s *Service) DeadLetter(ctx context.Context, name string, in api.ReceiptsRequest) (api.ReceiptsResponse, *api.Error) {
	e := checkReceipts(&in)
	if e == nil && (in.Delay != nil || in.Visibility != nil || in.Error != "") {
		e = Invalid("deadletter takes \"receipts\", \"reason\" and an optional \"description\"")
	}
	if e != nil {
		return api.ReceiptsResponse{}, e
	}
	reason := in.Reason
	if reason == "" {
		reason = "consumer"
	}
	return s.items(s.b.DeadLetter(ctx, name, in.Receipts, reason, in.Description))
}

// Defer sets the leased messages of in.Receipts aside: their leases end, and only a
// fetch by id (ReceiveDeferred) takes them again.
func (s *Service) Defer(ctx context.Context, name string, in api.ReceiptsRequest) (api.ReceiptsResponse, *api.Error) {
	e := checkReceipts(&in)
	if e == nil && (in.Delay != nil || in.Visibility != nil || in.Reason != "" || in.Description != "") {
		e = Invalid("defer takes only \"receipts\"")
	}
	if e != nil {
		return api.ReceiptsResponse{}, e
	}
	return s.items(s.b.Defer(ctx, name, in.Receipts))
}

// ReceiveDeferred fetches deferred messages by id, each leased for in.Visibility (the
// queue's visibility_timeout when omitted): one result per id, not_deferred for an id
// that names no deferred message of the queue.
func (s *Service) ReceiveDeferred(ctx context.Context, name string, in api.DeferredReceiveRequest) (api.DeferredReceiveResponse, *api.Error) {
	if len(in.IDs) == 0 {
		return api.DeferredReceiveResponse{}, Invalid("\"ids\" is empty; give the id of at least one deferred message")
	}
	if len(in.IDs) > api.MaxBatch {
		return api.DeferredReceiveResponse{}, &api.Error{Code: api.CodeBatchTooLarge, Message: fmt.Sprintf("%d ids in one request; at most %d", len(in.IDs), api.MaxBatch)}
	}
	ids := make([]uint64, len(in.IDs))
	for i, v := range in.IDs {
		n, e := parseID(v)
		if e != nil {
			e.Message = fmt.Sprintf("ids[%d]: %s", i, e.Message)
			return api.DeferredReceiveResponse{}, e
		}
		ids[i] = n
	}
	vis := time.Duration(-1)
	if in.Visibility != nil {
		vis = in.Visibility.D()
		if vis < 0 || vis > queue.MaxVisibilityTimeout || vis%time.Millisecond != 0 {
			return api.DeferredReceiveResponse{}, Invalid("visibility must be a whole number of milliseconds between 0 and 12h, got %v", vis)
		}
	}
	res, err := s.b.ReceiveDeferred(ctx, name, ids, vis)
	if err != nil {
		return api.DeferredReceiveResponse{}, s.errorOf(err)
	}
	out := api.DeferredReceiveResponse{Results: make([]api.DeferredResult, len(res))}
	wire := make([]*api.Error, len(res))
	for i := range res {
		out.Results[i].ID = queue.FormatID(ids[i])
		if res[i].Err != nil {
			wire[i] = s.errorOf(res[i].Err)
			out.Results[i].Error = wire[i]
			continue
		}
		m := Received{ms: []broker.Message{res[i].Message}}.JSON().Messages[0]
		out.Results[i].Message = &m
	}
	out.Error = commonError(wire)
	return out, nil
}

// ---------------------------------------------------------------------------------------
// Reading messages without leasing them

var stateNames = map[string]queue.State{"ready": queue.StateReady, "delayed": queue.StateDelayed, "in_flight": queue.StateInFlight, "deferred": queue.StateDeferred}

// CheckPeek refuses a peek page size out of range (1..api.MaxBatch).
func (s *Service) CheckPeek(limit int) *api.Error {
	if err := broker.CheckPeek(limit); err != nil {
		return s.errorOf(err)
	}
	return nil
}

// Peek lists up to limit messages of a queue in arrival order, after the one whose
// sequence is after (0: from the start), in the given states (ready, delayed,
// in_flight, deferred; all when none), without leasing them. Next is set when the page is full.
func (s *Service) Peek(ctx context.Context, name string, after uint64, limit int, states []string) (api.PeekResponse, *api.Error) {
	var sts []queue.State
	for _, v := range states {
		st, ok := stateNames[v]
		if !ok {
			return api.PeekResponse{}, Invalid("state must be ready, delayed, in_flight or deferred, got %q", v)
		}
		sts = append(sts, st)
	}
	ms, err := s.b.Peek(ctx, name, after, limit, sts...)
	if err != nil {
		return api.PeekResponse{}, s.errorOf(err)
	}
	out := api.PeekResponse{Messages: make([]api.Message, len(ms))}
	for i := range ms {
		out.Messages[i] = peeked(&ms[i])
	}
	if len(ms) == limit {
		out.Next = strconv.FormatUint(ms[len(ms)-1].Seq, 10)
	}
	return out, nil
}

// parseID reads a message id (16 hex digits).
func parseID(v string) (uint64, *api.Error) {
	id, err := strconv.ParseUint(v, 16, 64)
	if err != nil || len(v) != 16 {
		return 0, &api.Error{Code: api.CodeInvalidID, Message: fmt.Sprintf("%q is not a message id (16 hex digits)", v)}
	}
	return id, nil
}

// Message returns one message of a queue, by its id, without leasing it.
func (s *Service) Message(ctx context.Context, name, id string) (api.Message, *api.Error) {
	n, e := parseID(id)
	if e != nil {
		return api.Message{}, e
	}
	m, err := s.b.GetMessage(ctx, name, n)
	if err != nil {
		return api.Message{}, s.errorOf(err)
	}
	return peeked(&m), nil
}

// Explain says why a message of a queue is or is not being delivered now: by its id, or,
// with id empty, by dedup id (and group, for a queue whose dedup scope is the group).
func (s *Service) Explain(ctx context.Context, name, id, dedupID, group string) (api.Explanation, *api.Error) {
	var n uint64
	switch {
	case id != "" && dedupID != "":
		return api.Explanation{}, Invalid("give a message id or a dedup_id, not both")
	case id != "":
		var e *api.Error
		if n, e = parseID(id); e != nil {
			return api.Explanation{}, e
		}
	case dedupID == "":
		return api.Explanation{}, Invalid("explain needs a message id (…/messages/{id}/explain) or ?dedup_id=")
	}
	ex, err := s.b.Explain(ctx, name, n, dedupID, group)
	if err != nil {
		return api.Explanation{}, s.errorOf(err)
	}
	return wireExplanation(&ex), nil
}

func wireExplanation(ex *queue.Explanation) api.Explanation {
	w := api.Explanation{Queue: ex.Queue, State: ex.Status.String(), Summary: ex.Summary, Seq: ex.Seq, Group: ex.Group,
		FairGroups: ex.FairGroups, Delivery: ex.Delivery, LastDelivery: ex.LastDelivery, To: ex.To, DedupID: ex.DedupID,
		Until: timePtr(ex.Until), At: timePtr(ex.At), DeadLetter: wireDead(ex.Dead)}
	if ex.ID != 0 {
		w.ID = queue.FormatID(ex.ID)
	}
	if ex.Status == queue.StatusReady {
		n := ex.Ahead
		w.Ahead = &n
		w.AheadExact = !ex.AheadMore && !ex.AheadAtLeast
	}
	if ex.How != 0 {
		w.How = ex.How.String()
	}
	if b := ex.Blocker; b != nil {
		w.Blocker = &api.Blocker{ID: queue.FormatID(b.ID), State: b.Status.String(), Until: timePtr(b.Until)}
	}
	if ex.Into != 0 {
		w.Into = queue.FormatID(ex.Into)
	}
	if ex.Target != nil {
		t := wireExplanation(ex.Target)
		w.Target = &t
	}
	if ex.Seq != 0 {
		h := ex.History
		w.History = &api.History{EnqueuedAt: time.UnixMilli(h.EnqueuedAt).UTC(), EnteredAt: time.UnixMilli(h.EnteredAt).UTC(),
			Deliveries: h.Deliveries, FirstDeliveredAt: timePtr(h.FirstDelivered), LastDeliveredAt: timePtr(h.LastDelivered),
			Nacks: h.Nacks, LastError: h.LastError, Partial: h.Partial}
		if h.Nacks > 0 {
			w.History.LastNackDelay = api.Ptr(time.Duration(h.LastNackDelay) * time.Millisecond)
		}
	}
	return w
}

// DeleteMessage deletes one message of a queue, by its id, whatever its state.
func (s *Service) DeleteMessage(ctx context.Context, name, id string) *api.Error {
	n, e := parseID(id)
	if e != nil {
		return e
	}
	if err := s.b.DeleteMessage(ctx, name, n); err != nil {
		return s.errorOf(err)
	}
	return nil
}

// ---------------------------------------------------------------------------------------
// Conversion of messages to the wire

func wireMessage(id uint64, p *queue.Payload) api.Message {
	m := api.Message{ID: queue.FormatID(id), Group: p.Group, DedupID: p.DedupID}
	m.Body, m.BodyBase64 = api.EncodeBody(p.Body)
	if len(p.Attrs) > 0 {
		m.Headers = make(map[string]string, len(p.Attrs))
		for _, a := range p.Attrs {
			if len(a.Type) >= 6 && a.Type[:6] == "Binary" {
				m.Headers[a.Name] = base64.StdEncoding.EncodeToString(a.Value)
			} else {
				m.Headers[a.Name] = string(a.Value)
			}
		}
	}
	return m
}

func wireDead(d *queue.DeadInfo) *api.DeadLetter {
	if d == nil {
		return nil
	}
	return &api.DeadLetter{Source: d.SourceName, Reason: d.Reason, Description: d.Description, At: time.UnixMilli(d.At).UTC(), Deliveries: d.Deliveries}
}

func timePtr(ms int64) *time.Time {
	if ms <= 0 {
		return nil
	}
	t := time.UnixMilli(ms).UTC()
	return &t
}

func peeked(m *broker.PeekedMessage) api.Message {
	wm := wireMessage(m.ID, &m.Payload)
	wm.State = m.State.String()
	wm.Seq = m.Seq
	wm.Deliveries = m.Deliveries
	wm.EnqueuedAt = time.UnixMilli(m.EnqueuedAt).UTC()
	wm.FirstDeliveredAt = timePtr(m.FirstDelivered)
	wm.VisibleAt = timePtr(m.VisibleAt)
	wm.DeadLetter = wireDead(m.Dead)
	return wm
}

// NewProducer hands out a fresh producer id (broker.NewProducerID).
func (s *Service) NewProducer() api.Producer { return api.Producer{ProducerID: broker.NewProducerID()} }
