package server

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/queue"
)

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if err := s.b.Healthy(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, api.Health{Status: "failed", Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
}

// ---------------------------------------------------------------------------------------
// Queues

func (s *Server) putQueue(w http.ResponseWriter, r *http.Request) {
	var in api.QueueConfig
	if e := decode(w, r, &in, true); e != nil {
		writeError(w, e)
		return
	}
	info, created, err := s.b.PutQueue(r.Context(), r.PathValue("name"), func(c *queue.Config, _ bool) error {
		return applyConfig(c, &in)
	})
	if err != nil {
		s.fail(w, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	full, err := s.b.Queue(info.Name)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, status, wireQueue(full))
}

// applyConfig overlays the fields given in a request on c.
func applyConfig(c *queue.Config, in *api.QueueConfig) error {
	dur := func(dst *time.Duration, src *api.Duration) {
		if src != nil {
			*dst = src.D()
		}
	}
	dur(&c.VisibilityTimeout, in.VisibilityTimeout)
	dur(&c.BackoffBase, in.BackoffBase)
	dur(&c.BackoffMax, in.BackoffMax)
	dur(&c.Delay, in.Delay)
	dur(&c.Retention, in.Retention)
	dur(&c.DedupWindow, in.DedupWindow)
	dur(&c.ReceiveWait, in.ReceiveWait)
	if in.MaxDeliveries != nil {
		c.MaxDeliveries = *in.MaxDeliveries
	}
	if in.DeadLetterQueue != nil {
		c.DeadLetterQueue = *in.DeadLetterQueue
		if *in.DeadLetterQueue == queue.NoDeadLetterQueue && in.MaxDeliveries == nil {
			c.MaxDeliveries = 0 // nothing to count deliveries for
		}
	}
	if in.DedupScope != nil {
		sc, err := queue.ParseDedupScope(*in.DedupScope)
		if err != nil {
			return err
		}
		c.DedupScope = sc
	}
	if in.ContentDedup != nil {
		c.ContentDedup = *in.ContentDedup
	}
	if in.MaxMessages != nil {
		c.MaxMessages = *in.MaxMessages
	}
	if in.MaxBytes != nil {
		c.MaxBytes = *in.MaxBytes
	}
	if in.MaxMessageSize != nil {
		c.MaxMessageSize = *in.MaxMessageSize
	}
	if in.OrderedGroups != nil {
		c.OrderedGroups = *in.OrderedGroups
	}
	if in.Tags != nil {
		c.Tags = in.Tags
	}
	return nil
}

func wireConfig(c queue.Config) api.QueueConfig {
	d := func(v time.Duration) *api.Duration { return api.Ptr(v) }
	scope := c.DedupScope.String()
	return api.QueueConfig{
		VisibilityTimeout: d(c.VisibilityTimeout), MaxDeliveries: &c.MaxDeliveries,
		DeadLetterQueue: &c.DeadLetterQueue, BackoffBase: d(c.BackoffBase), BackoffMax: d(c.BackoffMax),
		Delay: d(c.Delay), Retention: d(c.Retention), DedupWindow: d(c.DedupWindow),
		DedupScope: &scope, ContentDedup: &c.ContentDedup, MaxMessages: &c.MaxMessages,
		MaxBytes: &c.MaxBytes, MaxMessageSize: &c.MaxMessageSize, ReceiveWait: d(c.ReceiveWait),
		OrderedGroups: &c.OrderedGroups, Tags: c.Tags,
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func wireQueue(qi broker.QueueInfo) api.Queue {
	st := qi.Stats
	r := qi.Rates
	return api.Queue{
		Name: qi.Name, CreatedAt: time.UnixMilli(qi.CreatedAt).UTC(), UpdatedAt: time.UnixMilli(qi.UpdatedAt).UTC(),
		Config: wireConfig(qi.Config), DeadLetterSources: qi.DeadLetterSources,
		Stats: api.Stats{
			Ready: st.Ready, Delayed: st.Delayed, InFlight: st.InFlight, Bytes: st.Bytes,
			DeadLetters: qi.DeadLetters, Groups: st.Groups, OldestReadyAgeMS: qi.OldestAge.Milliseconds(),
			Sent: st.Sent, Acked: st.Acked, Nacked: st.Nacked, Delivered: st.Delivered,
			Redelivered: st.Redelivered, Extended: st.Extended, DeadLettered: st.DeadLettered,
			DeadLetteredBy: st.ByReason, DeadLetteredIn: st.DeadLetteredIn, Expired: st.Expired,
			RedrivenIn: st.RedrivenIn, RedrivenOut: st.RedrivenOut, Purged: st.Purged,
			Deleted: st.Deleted, Overflow: st.Overflow, DedupHits: qi.Volatile.DedupHits,
			Refused: qi.Volatile.Refused, DedupEvictedEarly: st.DedupEvictedEarly,
			Rates: api.Rates{
				WindowMS: r.Window.Milliseconds(), Sent: r.Sent, Acked: r.Acked, Nacked: r.Nacked,
				Delivered: r.Delivered, DeadLettered: r.DeadLettered, Expired: r.Expired,
			},
			Waiting:  api.LittlesLaw{L: st.Ready, Lambda: r.Sent, MeasuredMS: ms(qi.WaitMeasured), EstimatedMS: ms(qi.WaitEstimate)},
			InSystem: api.LittlesLaw{L: st.Ready + st.InFlight, Lambda: r.Sent, MeasuredMS: ms(qi.SysMeasured), EstimatedMS: ms(qi.SysEstimate)},
		},
	}
}

func (s *Server) getQueue(w http.ResponseWriter, r *http.Request) {
	qi, err := s.b.Queue(r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireQueue(qi))
}

func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) {
	qs := s.b.Queues(r.URL.Query().Get("prefix"))
	out := api.QueueList{Queues: make([]api.Queue, len(qs))}
	for i, qi := range qs {
		out.Queues[i] = wireQueue(qi)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteQueue(w http.ResponseWriter, r *http.Request) {
	force, e := boolParam(r, "force")
	if e != nil {
		writeError(w, e)
		return
	}
	if err := s.b.DeleteQueue(r.Context(), r.PathValue("name"), force); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func boolParam(r *http.Request, name string) (bool, *api.Error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, invalid("query parameter %s=%q must be true or false", name, v)
	}
	return b, nil
}

func (s *Server) purge(w http.ResponseWriter, r *http.Request) {
	n, err := s.b.Purge(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.PurgeResponse{Purged: n})
}

// ---------------------------------------------------------------------------------------
// Messages

// sendBody accepts both {"messages":[…]} and a single message object.
type sendBody struct {
	Messages []api.SendMessage `json:"messages"`
	api.SendMessage
}

func (s *Server) send(w http.ResponseWriter, r *http.Request) {
	if isBinary(r) {
		inputs, e := binarySendInputs(w, r)
		if e != nil {
			writeError(w, e)
			return
		}
		s.sendInputs(w, r, inputs)
		return
	}
	var in sendBody
	if e := decode(w, r, &in, false); e != nil {
		writeError(w, e)
		return
	}
	msgs := in.Messages
	single := in.SendMessage
	hasSingle := single.Body != nil || single.BodyBase64 != nil || single.Group != "" || single.DedupID != "" || single.Delay != nil || single.Headers != nil
	switch {
	case msgs != nil && hasSingle:
		writeError(w, invalid("give either \"messages\" or the fields of one message, not both"))
		return
	case msgs == nil:
		msgs = []api.SendMessage{single}
	case len(msgs) == 0:
		writeError(w, invalid("\"messages\" is empty; send at least one message"))
		return
	}
	if len(msgs) > api.MaxBatch {
		writeError(w, &api.Error{Code: api.CodeBatchTooLarge, Message: fmt.Sprintf("%d messages in one send; at most %d", len(msgs), api.MaxBatch)})
		return
	}
	// Request-level checks first: a malformed entry rejects the whole request.
	inputs := make([]queue.SendInput, len(msgs))
	for i, m := range msgs {
		in, e := sendInput(m)
		if e != nil {
			e.Message = fmt.Sprintf("messages[%d]: %s", i, e.Message)
			writeError(w, e)
			return
		}
		inputs[i] = in
	}
	s.sendInputs(w, r, inputs)
}

// sendInputs sends checked inputs and answers in the encoding the client accepts.
func (s *Server) sendInputs(w http.ResponseWriter, r *http.Request, inputs []queue.SendInput) {
	res, err := s.b.Send(r.Context(), r.PathValue("name"), inputs)
	if err != nil {
		s.fail(w, err)
		return
	}
	if wantsBinary(r) {
		s.writeBinarySend(w, res)
		return
	}
	out := api.SendResponse{Results: make([]api.SendResult, len(res))}
	errs := make([]*api.Error, len(res))
	for i, x := range res {
		if x.Err != nil {
			errs[i] = s.errorOf(x.Err)
			out.Results[i].Error = errs[i]
			continue
		}
		out.Results[i] = api.SendResult{ID: queue.FormatID(x.ID), Duplicate: x.Duplicate}
	}
	out.Error = commonError(errs)
	writeBatch(w, out.Error, out)
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

func (s *Server) receive(w http.ResponseWriter, r *http.Request) {
	var in api.ReceiveRequest
	if e := decode(w, r, &in, true); e != nil {
		writeError(w, e)
		return
	}
	// max 0 is max 1 (an omitted max decodes as 0); an omitted wait or visibility is the
	// queue's. What was given is checked before it becomes options, in which a negative
	// duration would mean the queue's default.
	opts := broker.ReceiveOptions{Max: in.Max, Wait: -1, Visibility: -1}
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
		s.fail(w, err)
		return
	}
	ms, err := s.b.Receive(r.Context(), r.PathValue("name"), opts)
	if err != nil {
		s.fail(w, err)
		return
	}
	if wantsBinary(r) {
		writeBinaryReceive(w, ms)
		return
	}
	out := api.ReceiveResponse{Messages: make([]api.Message, len(ms))}
	for i := range ms {
		m := &ms[i]
		wm := wireMessage(m.ID, &m.Payload)
		wm.Receipt = m.Receipt
		wm.Deliveries = m.Deliveries
		wm.EnqueuedAt = m.EnqueuedAt.UTC()
		if !m.FirstDelivered.IsZero() {
			t := m.FirstDelivered.UTC()
			wm.FirstDeliveredAt = &t
		}
		dl := m.LeaseDeadline.UTC()
		wm.VisibleAt = &dl
		wm.DeadLetter = wireDead(m.Dead)
		out.Messages[i] = wm
	}
	writeJSON(w, http.StatusOK, out)
}

// receipts decodes a receipts request and checks the list.
func receipts(w http.ResponseWriter, r *http.Request) (api.ReceiptsRequest, *api.Error) {
	var in api.ReceiptsRequest
	if e := decode(w, r, &in, false); e != nil {
		return in, e
	}
	if len(in.Receipts) == 0 {
		return in, invalid("\"receipts\" is empty; give at least one receipt")
	}
	if len(in.Receipts) > api.MaxBatch {
		return in, &api.Error{Code: api.CodeBatchTooLarge, Message: fmt.Sprintf("%d receipts in one request; at most %d", len(in.Receipts), api.MaxBatch)}
	}
	return in, nil
}

func (s *Server) writeItems(w http.ResponseWriter, errs []error) {
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
	writeBatch(w, out.Error, out)
}

func (s *Server) ack(w http.ResponseWriter, r *http.Request) {
	in, e := receipts(w, r)
	if e == nil && (in.Delay != nil || in.Visibility != nil || in.Reason != "" || in.Description != "") {
		e = invalid("ack takes only \"receipts\"")
	}
	if e != nil {
		writeError(w, e)
		return
	}
	errs, err := s.b.Ack(r.Context(), r.PathValue("name"), in.Receipts)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.writeItems(w, errs)
}

func (s *Server) nack(w http.ResponseWriter, r *http.Request) {
	in, e := receipts(w, r)
	if e == nil && (in.Visibility != nil || in.Reason != "" || in.Description != "") {
		e = invalid("nack takes \"receipts\" and an optional \"delay\"")
	}
	delay := time.Duration(-1)
	if e == nil && in.Delay != nil {
		delay = in.Delay.D()
		if delay < 0 || delay > queue.MaxDelay || delay%time.Millisecond != 0 {
			e = &api.Error{Code: api.CodeInvalidDelay, Message: fmt.Sprintf("delay must be a whole number of milliseconds between 0 and 168h, got %v", delay)}
		}
	}
	if e != nil {
		writeError(w, e)
		return
	}
	errs, err := s.b.Nack(r.Context(), r.PathValue("name"), in.Receipts, delay)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.writeItems(w, errs)
}

func (s *Server) extend(w http.ResponseWriter, r *http.Request) {
	in, e := receipts(w, r)
	if e == nil && (in.Delay != nil || in.Reason != "" || in.Description != "") {
		e = invalid("extend takes \"receipts\" and \"visibility\"")
	}
	if e == nil && in.Visibility == nil {
		e = invalid("extend needs \"visibility\": the lease's new length from now, such as \"30s\"")
	}
	if e == nil {
		if v := in.Visibility.D(); v < 0 || v > queue.MaxVisibilityTimeout || v%time.Millisecond != 0 {
			e = invalid("visibility must be a whole number of milliseconds between 0 and 12h, got %v", v)
		}
	}
	if e != nil {
		writeError(w, e)
		return
	}
	errs, err := s.b.Extend(r.Context(), r.PathValue("name"), in.Receipts, in.Visibility.D())
	if err != nil {
		s.fail(w, err)
		return
	}
	s.writeItems(w, errs)
}

func (s *Server) deadLetter(w http.ResponseWriter, r *http.Request) {
	in, e := receipts(w, r)
	if e == nil && (in.Delay != nil || in.Visibility != nil) {
		e = invalid("deadletter takes \"receipts\", \"reason\" and an optional \"description\"")
	}
	if e != nil {
		writeError(w, e)
		return
	}
	reason := in.Reason
	if reason == "" {
		reason = "consumer"
	}
	errs, err := s.b.DeadLetter(r.Context(), r.PathValue("name"), in.Receipts, reason, in.Description)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.writeItems(w, errs)
}

var stateNames = map[string]queue.State{"ready": queue.StateReady, "delayed": queue.StateDelayed, "in_flight": queue.StateInFlight}

func (s *Server) peek(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, invalid("limit must be between 1 and %d, got %q", api.MaxBatch, v))
			return
		}
		if err := broker.CheckPeek(n); err != nil {
			s.fail(w, err)
			return
		}
		limit = n
	}
	var after uint64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, invalid("after must be the \"next\" cursor of a previous page, got %q", v))
			return
		}
		after = n
	}
	var states []queue.State
	for _, v := range q["state"] {
		st, ok := stateNames[v]
		if !ok {
			writeError(w, invalid("state must be ready, delayed or in_flight, got %q", v))
			return
		}
		states = append(states, st)
	}
	ms, err := s.b.Peek(r.Context(), r.PathValue("name"), after, limit, states...)
	if err != nil {
		s.fail(w, err)
		return
	}
	out := api.PeekResponse{Messages: make([]api.Message, len(ms))}
	for i := range ms {
		out.Messages[i] = peeked(&ms[i])
	}
	if len(ms) == limit {
		out.Next = strconv.FormatUint(ms[len(ms)-1].Seq, 10)
	}
	writeJSON(w, http.StatusOK, out)
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

func parseID(w http.ResponseWriter, v string) (uint64, bool) {
	id, err := strconv.ParseUint(v, 16, 64)
	if err != nil || len(v) != 16 {
		writeError(w, &api.Error{Code: api.CodeInvalidID, Message: fmt.Sprintf("%q is not a message id (16 hex digits)", v)})
		return 0, false
	}
	return id, true
}

func (s *Server) getMessage(w http.ResponseWriter, r *http.Request) {
	id, ok := parseID(w, r.PathValue("id"))
	if !ok {
		return
	}
	m, err := s.b.GetMessage(r.Context(), r.PathValue("name"), id)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, peeked(&m))
}

func (s *Server) deleteMessage(w http.ResponseWriter, r *http.Request) {
	id, ok := parseID(w, r.PathValue("id"))
	if !ok {
		return
	}
	if err := s.b.DeleteMessage(r.Context(), r.PathValue("name"), id); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ---------------------------------------------------------------------------------------
// Redrive

func (s *Server) redrive(w http.ResponseWriter, r *http.Request) {
	var in api.RedriveRequest
	if e := decode(w, r, &in, true); e != nil {
		writeError(w, e)
		return
	}
	spec := queue.RedriveSpec{Source: r.PathValue("name"), Target: in.To, From: in.From, Rate: in.Rate,
		Filter: queue.RedriveFilter{Reason: in.Reason, Group: in.Group}}
	if in.OlderThan != nil {
		if in.OlderThan.D() < 0 {
			writeError(w, invalid("older_than must not be negative"))
			return
		}
		spec.Filter.OlderThan = in.OlderThan.D().Milliseconds()
	}
	if in.Rate < 0 {
		writeError(w, invalid("rate must be 0 (as fast as possible) or positive"))
		return
	}
	if len(in.IDs) > api.MaxRedriveIDs {
		writeError(w, &api.Error{Code: api.CodeBatchTooLarge, Message: fmt.Sprintf("at most %d ids in one redrive", api.MaxRedriveIDs)})
		return
	}
	for _, v := range in.IDs {
		id, err := strconv.ParseUint(v, 16, 64)
		if err != nil || len(v) != 16 {
			writeError(w, &api.Error{Code: api.CodeInvalidID, Message: fmt.Sprintf("ids: %q is not a message id (16 hex digits)", v)})
			return
		}
		spec.Filter.IDs = append(spec.Filter.IDs, id)
	}
	t, err := s.b.StartRedrive(r.Context(), spec)
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Location", "/v1/redrives/"+strconv.FormatUint(t.ID, 10))
	writeJSON(w, http.StatusAccepted, wireTask(t))
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

func (s *Server) listRedrives(w http.ResponseWriter, r *http.Request) {
	ts := s.b.Tasks()
	out := api.RedriveList{Tasks: make([]api.RedriveTask, len(ts))}
	for i, t := range ts {
		out.Tasks[i] = wireTask(t)
	}
	writeJSON(w, http.StatusOK, out)
}

func taskID(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	v := r.PathValue("id")
	id, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		writeError(w, &api.Error{Code: api.CodeInvalidID, Message: fmt.Sprintf("%q is not a redrive task id (a decimal number)", v)})
		return 0, false
	}
	return id, true
}

func (s *Server) getRedrive(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	t, err := s.b.Task(id)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireTask(t))
}

func (s *Server) cancelRedrive(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	t, err := s.b.CancelRedrive(r.Context(), id)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireTask(t))
}
