package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/queue"
)

// The binary encoding (api.ContentTypeBinary) of sends and receives: the Go client's
// fast path. Same endpoints, same validation, same errors (JSON) as the JSON encoding.

func isBinary(r *http.Request) bool {
	return r.Header.Get("Content-Type") == api.ContentTypeBinary
}

func wantsBinary(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), api.ContentTypeBinary)
}

// readBody reads a request body up to the API's limit, in one allocation when the client
// gave a length up to 1 MiB (io.ReadAll's doubling showed up in profiles of batched
// sends), growing with the bytes that arrive beyond (api.ReadFull).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *api.Error) {
	body := http.MaxBytesReader(w, r.Body, api.MaxRequestBody)
	var data []byte
	var err error
	if n := r.ContentLength; n > 0 && n <= api.MaxRequestBody {
		data, err = api.ReadFull(body, int(n))
		if err == nil { // more than announced is a broken request
			var one [1]byte
			if k, _ := body.Read(one[:]); k > 0 {
				err = errors.New("body longer than its Content-Length")
			}
		}
	} else {
		data, err = io.ReadAll(body)
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &api.Error{Code: api.CodeRequestTooLarge, Message: fmt.Sprintf("request body is larger than %d bytes", api.MaxRequestBody)}
		}
		return nil, invalid("cannot read request body: %v", err)
	}
	return data, nil
}

// binarySendInputs decodes and checks a binary send batch; like the JSON form, any
// malformed entry rejects the whole request.
func binarySendInputs(w http.ResponseWriter, r *http.Request) ([]queue.SendInput, *api.Error) {
	data, e := readBody(w, r)
	if e != nil {
		return nil, e
	}
	msgs, err := api.DecodeSendRequest(data)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if len(msgs) == 0 {
		return nil, invalid("the batch is empty; send at least one message")
	}
	if len(msgs) > api.MaxBatch {
		return nil, &api.Error{Code: api.CodeBatchTooLarge, Message: fmt.Sprintf("%d messages in one send; at most %d", len(msgs), api.MaxBatch)}
	}
	inputs := make([]queue.SendInput, len(msgs))
	for i, m := range msgs {
		if m.Delay >= 0 && time.Duration(m.Delay)*time.Millisecond > queue.MaxDelay {
			return nil, &api.Error{Code: api.CodeInvalidDelay, Message: fmt.Sprintf("messages[%d]: delay must be between 0 and 168h", i)}
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
	return inputs, nil
}

// writeBinarySend answers a send in binary; the status follows the same rule as JSON.
func (s *Server) writeBinarySend(w http.ResponseWriter, res []queue.SendResult) {
	out := make([]api.BinaryResult, len(res))
	errs := make([]*api.Error, len(res))
	for i, x := range res {
		if x.Err != nil {
			errs[i] = s.errorOf(x.Err)
			out[i].Err = errs[i]
			continue
		}
		out[i] = api.BinaryResult{ID: x.ID, Duplicate: x.Duplicate}
	}
	status := http.StatusOK
	if common := commonError(errs); common != nil {
		status = api.Status[common.Code]
		setRetryAfter(w, common)
	}
	w.Header().Set("Content-Type", api.ContentTypeBinary)
	w.WriteHeader(status)
	w.Write(api.AppendSendAnswer(nil, out))
}

// writeBinaryReceive answers a receive in binary.
func writeBinaryReceive(w http.ResponseWriter, ms []broker.Message) {
	out := make([]api.BinaryReceived, len(ms))
	size := 0
	for i := range ms {
		m := &ms[i]
		x := api.BinaryReceived{
			ID: m.ID, Receipt: m.Receipt, Deliveries: m.Deliveries, EnqueuedAt: m.EnqueuedAt.UnixMilli(),
			Deadline: m.LeaseDeadline.UnixMilli(), Group: m.Payload.Group, DedupID: m.Payload.DedupID, Body: m.Payload.Body,
		}
		if !m.FirstDelivered.IsZero() {
			x.FirstDelivered = m.FirstDelivered.UnixMilli()
		}
		if len(m.Payload.Attrs) > 0 {
			x.Attrs = make([]api.BinaryAttr, len(m.Payload.Attrs))
			for j, a := range m.Payload.Attrs {
				x.Attrs[j] = api.BinaryAttr{Name: a.Name, Type: a.Type, Value: a.Value}
			}
		}
		if d := m.Dead; d != nil {
			x.Dead = &api.BinaryDead{Source: d.SourceName, Reason: d.Reason, Description: d.Description, At: d.At, Deliveries: d.Deliveries}
		}
		size += len(m.Payload.Body) + len(m.Receipt) + 64
		out[i] = x
	}
	w.Header().Set("Content-Type", api.ContentTypeBinary)
	w.WriteHeader(http.StatusOK)
	w.Write(api.AppendReceiveAnswer(make([]byte, 0, size), out))
}
