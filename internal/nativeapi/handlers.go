package nativeapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/buildinfo"
	"github.com/okiba/okiba/internal/reply"
	"github.com/okiba/okiba/internal/service"
)

// Every handler decodes its request, calls the service (internal/service), which checks
// what the request asks and converts the broker's answer to the wire, and encodes that.

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	h, ok := s.svc.Health()
	if s.opts.Cluster != nil {
		h.Cluster = s.opts.Cluster()
		if h.Cluster.Role == "no_leader" && ok && h.Status == "ok" {
			h.Status, h.Reason = "degraded", "the cluster has no leader: an election is under way, or a quorum of its nodes is unreachable"
		}
	}
	build := buildinfo.Get()
	h.Build = &build
	if !ok {
		reply.JSON(w, http.StatusServiceUnavailable, h)
		return
	}
	reply.JSON(w, http.StatusOK, h)
}

// ---------------------------------------------------------------------------------------
// Queues

func (s *Server) putQueue(w http.ResponseWriter, r *http.Request) {
	// If-None-Match: * makes the PUT create-only (the CLI's queue create): the same
	// configuration is answered 200, another refused 409 queue_exists.
	switch inm := r.Header.Get("If-None-Match"); inm {
	case "":
	case "*":
		put(w, r, true, func(in api.QueueConfig) (api.Queue, bool, *api.Error) {
			return s.svc.CreateQueue(r.Context(), r.PathValue("name"), in)
		})
		return
	default:
		reply.Error(w, invalid("If-None-Match takes only * (create the queue unless it exists), got %q", inm))
		return
	}
	put(w, r, true, func(in api.QueueConfig) (api.Queue, bool, *api.Error) {
		return s.svc.PutQueue(r.Context(), r.PathValue("name"), in)
	})
}

func (s *Server) getQueue(w http.ResponseWriter, r *http.Request) {
	q, e := s.svc.Queue(r.Context(), r.PathValue("name"))
	get(w, q, e)
}

func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) {
	reply.JSON(w, http.StatusOK, api.QueueList{Queues: s.svc.Queues(r.Context(), r.URL.Query().Get("prefix"))})
}

func (s *Server) deleteQueue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	del(w, r, true, func(force bool) *api.Error {
		e := s.svc.DeleteQueue(r.Context(), name, force)
		if e == nil {
			s.table.Forget(name)
		}
		return e
	})
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
	out, e := s.svc.Purge(r.Context(), r.PathValue("name"))
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, out)
}

// parked lists a queue's parked groups.
func (s *Server) parked(w http.ResponseWriter, r *http.Request) {
	out, e := s.svc.Parked(r.Context(), r.PathValue("name"))
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, out)
}

// releaseGroup releases a parked group by hand.
func (s *Server) releaseGroup(w http.ResponseWriter, r *http.Request) {
	out, e := s.svc.ReleaseGroup(r.Context(), r.PathValue("name"), r.PathValue("group"))
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, out)
}

// ---------------------------------------------------------------------------------------
// Messages

// sendBody accepts both {"messages":[…]} and a single message object.
type sendBody struct {
	Messages   []api.SendMessage `json:"messages"`
	ProducerID string            `json:"producer_id"`
	Sequence   uint64            `json:"sequence"`
	api.SendMessage
}

func (s *Server) send(w http.ResponseWriter, r *http.Request) {
	var sent service.Sent
	var e *api.Error
	if isBinary(r) {
		var msgs []api.BinaryMessage
		var from service.From
		if from, msgs, e = binarySendRequest(w, r); e == nil {
			sent, e = s.svc.SendBinary(r.Context(), r.PathValue("name"), from, msgs)
		}
	} else {
		var msgs []api.SendMessage
		var from service.From
		if from, msgs, e = jsonSendRequest(w, r); e == nil {
			sent, e = s.svc.Send(r.Context(), r.PathValue("name"), from, msgs)
		}
	}
	if e != nil {
		reply.Error(w, e)
		return
	}
	if wantsBinary(r) {
		writeBinarySend(w, sent)
		return
	}
	out := sent.JSON()
	reply.Batch(w, out.Error, out)
}

// jsonSendRequest decodes a send in JSON: a batch, or the fields of one message.
func jsonSendRequest(w http.ResponseWriter, r *http.Request) (service.From, []api.SendMessage, *api.Error) {
	var in sendBody
	if e := decode(w, r, &in, false); e != nil {
		return service.From{}, nil, e
	}
	from := service.From{Producer: in.ProducerID, Seq: in.Sequence}
	msgs := in.Messages
	single := in.SendMessage
	hasSingle := single.Body != nil || single.BodyBase64 != nil || single.Group != "" || single.DedupID != "" || single.Delay != nil || single.Headers != nil
	switch {
	case msgs != nil && hasSingle:
		return from, nil, invalid("give either \"messages\" or the fields of one message, not both")
	case msgs == nil:
		msgs = []api.SendMessage{single}
	case len(msgs) == 0:
		return from, nil, invalid("\"messages\" is empty; send at least one message")
	}
	return from, msgs, nil
}

func (s *Server) receive(w http.ResponseWriter, r *http.Request) {
	var in api.ReceiveRequest
	if e := decode(w, r, &in, true); e != nil {
		reply.Error(w, e)
		return
	}
	name := r.PathValue("name")
	// A receive that may wait is a long poll while it waits: the queue's receive_wait
	// applies when it gives none, so only an explicit 0 is no poll.
	polling := in.Wait == nil || in.Wait.D() > 0
	rec := s.table.Receiving(name, who(r), polling, s.now())
	got, e := s.svc.Receive(r.Context(), name, in)
	if e != nil {
		rec.Done(nil, time.Time{}, s.now())
		if e.Code == api.CodeQueueNotFound {
			s.table.Forget(name)
		}
		reply.Error(w, e)
		return
	}
	receipts, deadline := got.Leases()
	rec.Done(receipts, deadline, s.now())
	if wantsBinary(r) {
		writeBinaryReceive(w, got)
		return
	}
	reply.JSON(w, http.StatusOK, got.JSON())
}

// receiveDeferred fetches deferred messages by id (JSON only: its answer has a result
// per id, which the binary receive answer has no room for).
func (s *Server) receiveDeferred(w http.ResponseWriter, r *http.Request) {
	var in api.DeferredReceiveRequest
	e := decode(w, r, &in, false)
	var out api.DeferredReceiveResponse
	if e == nil {
		out, e = s.svc.ReceiveDeferred(r.Context(), r.PathValue("name"), in)
	}
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.Batch(w, out.Error, out)
}

// settle serves ack, nack, extend, deadletter and defer: a receipts request, one result per
// receipt.
func (s *Server) settle(op func(*service.Service, context.Context, string, api.ReceiptsRequest) (api.ReceiptsResponse, *api.Error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in api.ReceiptsRequest
		e := decode(w, r, &in, false)
		var out api.ReceiptsResponse
		name := r.PathValue("name")
		if e == nil {
			out, e = op(s.svc, r.Context(), name, in)
		}
		if e != nil {
			reply.Error(w, e)
			return
		}
		s.settled(name, in, out)
		reply.Batch(w, out.Error, out)
	}
}

// settled takes what a settle did off the consumers' table: an extend moves its leases'
// deadlines, the others end them. A receipt that failed (stale, not found) ends its
// lease too: it is no longer held.
func (s *Server) settled(name string, in api.ReceiptsRequest, out api.ReceiptsResponse) {
	if in.Visibility != nil {
		var ok []string
		for i, res := range out.Results {
			if res.Error == nil && i < len(in.Receipts) {
				ok = append(ok, in.Receipts[i])
			}
		}
		s.table.Extended(name, ok, s.now().Add(in.Visibility.D()))
		return
	}
	s.table.Settled(name, in.Receipts)
}

func (s *Server) peek(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			reply.Error(w, invalid("limit must be between 1 and %d, got %q", api.MaxBatch, v))
			return
		}
		if e := s.svc.CheckPeek(n); e != nil {
			reply.Error(w, e)
			return
		}
		limit = n
	}
	var after uint64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			reply.Error(w, invalid("after must be the \"next\" cursor of a previous page, got %q", v))
			return
		}
		after = n
	}
	out, e := s.svc.Peek(r.Context(), r.PathValue("name"), after, limit, q["state"])
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, out)
}

func (s *Server) getMessage(w http.ResponseWriter, r *http.Request) {
	m, e := s.svc.Message(r.Context(), r.PathValue("name"), r.PathValue("id"))
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, m)
}

// explain answers …/messages/{id}/explain, and …/explain?dedup_id=…[&group=…].
func (s *Server) explain(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ex, e := s.svc.Explain(r.Context(), r.PathValue("name"), r.PathValue("id"), q.Get("dedup_id"), q.Get("group"))
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, ex)
}

func (s *Server) deleteMessage(w http.ResponseWriter, r *http.Request) {
	if e := s.svc.DeleteMessage(r.Context(), r.PathValue("name"), r.PathValue("id")); e != nil {
		reply.Error(w, e)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ---------------------------------------------------------------------------------------
// Redrive

func (s *Server) redrive(w http.ResponseWriter, r *http.Request) {
	var in api.RedriveRequest
	if e := decode(w, r, &in, true); e != nil {
		reply.Error(w, e)
		return
	}
	t, e := s.svc.Redrive(r.Context(), r.PathValue("name"), in)
	if e != nil {
		reply.Error(w, e)
		return
	}
	w.Header().Set("Location", "/v1/redrives/"+t.ID)
	reply.JSON(w, http.StatusAccepted, t)
}

func (s *Server) listRedrives(w http.ResponseWriter, r *http.Request) {
	reply.JSON(w, http.StatusOK, s.svc.Redrives(r.Context()))
}

func (s *Server) getRedrive(w http.ResponseWriter, r *http.Request) {
	t, e := s.svc.RedriveTask(r.Context(), r.PathValue("id"))
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, t)
}

func (s *Server) cancelRedrive(w http.ResponseWriter, r *http.Request) {
	t, e := s.svc.CancelRedrive(r.Context(), r.PathValue("id"))
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, t)
}

// newProducer hands out a fresh producer id for idempotent sends. Nothing is stored:
// the machine learns the producer from its first numbered send.
func (s *Server) newProducer(w http.ResponseWriter, r *http.Request) {
	reply.JSON(w, http.StatusCreated, s.svc.NewProducer())
}
