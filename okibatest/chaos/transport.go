package chaos

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/okiba/okiba/api"
)

// ErrCrashed is what a crashed Transport answers to requests whose answer someone might
// still read (sends, queue reads).
var ErrCrashed = errors.New("chaos: this client has crashed")

// Transport is an http.RoundTripper for an okiba client that loses chosen acks, and
// after Crash loses everything the client settles or extends. Give each consumer
// incarnation its own:
//
//	tr := chaos.NewTransport(nil)
//	c, _ := client.New(url, client.Options{HTTPClient: &http.Client{Transport: tr}})
//
// A lost ack is answered with success, as a real lost ack looks to a consumer that
// does not wait for confirmation; the broker never hears of it and redelivers the
// message when its lease ends.
type Transport struct {
	base http.RoundTripper

	mu   sync.Mutex
	lose map[string]bool // receipts whose ack is to be lost

	crashed  atomic.Bool
	lostAcks atomic.Int64
	lostReqs atomic.Int64
}

// NewTransport wraps base (nil means a transport of its own, without proxies).
func NewTransport(base http.RoundTripper) *Transport {
	if base == nil {
		base = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	}
	return &Transport{base: base, lose: map[string]bool{}}
}

// LoseAck makes the next ack of receipt vanish on its way to the broker.
func (t *Transport) LoseAck(receipt string) {
	t.mu.Lock()
	t.lose[receipt] = true
	t.mu.Unlock()
}

// Crash makes the client dead to the broker from now on: acks, nacks, dead-letters and
// extensions are lost (answered with success locally), receives come back empty, and
// anything else fails with ErrCrashed.
func (t *Transport) Crash() { t.crashed.Store(true) }

// Crashed reports whether Crash was called.
func (t *Transport) Crashed() bool { return t.crashed.Load() }

// LostAcks counts acks lost by LoseAck (not those lost by a crash).
func (t *Transport) LostAcks() int64 { return t.lostAcks.Load() }

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	op := settleOp(req)
	if t.crashed.Load() {
		t.lostReqs.Add(1)
		switch {
		case op != "":
			return t.fakeSettle(req)
		case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/receive"):
			// A dead process receives nothing. Answer after a moment (or when the caller
			// gives up) so that a fetcher that is still running does not spin.
			drain(req)
			select {
			case <-req.Context().Done():
				return nil, req.Context().Err()
			case <-time.After(20 * time.Millisecond):
			}
			return emptyReceive(req), nil
		default:
			drain(req)
			return nil, ErrCrashed
		}
	}
	if op != "ack" {
		return t.base.RoundTrip(req)
	}
	return t.ack(req)
}

// ack forwards an ack without the receipts that are to be lost, and answers success
// for those.
func (t *Transport) ack(req *http.Request) (*http.Response, error) {
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	var in api.ReceiptsRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return t.base.RoundTrip(withBody(req, body))
	}
	t.mu.Lock()
	lost := make([]bool, len(in.Receipts))
	var keep []string
	for i, r := range in.Receipts {
		if t.lose[r] {
			delete(t.lose, r)
			lost[i] = true
			continue
		}
		keep = append(keep, r)
	}
	t.mu.Unlock()
	if len(keep) == len(in.Receipts) {
		return t.base.RoundTrip(withBody(req, body))
	}
	t.lostAcks.Add(int64(len(in.Receipts) - len(keep)))
	results := make([]api.ItemResult, len(in.Receipts))
	for i := range results {
		results[i].OK = true
	}
	if len(keep) > 0 {
		out := in
		out.Receipts = keep
		b, _ := json.Marshal(out)
		resp, err := t.base.RoundTrip(withBody(req, b))
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 300 {
			// A request-level failure: pass it on as it is; the consumer retries the
			// whole ack and the lost receipts are lost again only if asked again.
			return resp, nil
		}
		var got api.ReceiptsResponse
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(data, &got); err != nil || len(got.Results) != len(keep) {
			return nil, errors.New("chaos: unexpected ack answer: " + string(data))
		}
		j := 0
		for i := range results {
			if !lost[i] {
				results[i] = got.Results[j]
				j++
			}
		}
	}
	return jsonResponse(req, http.StatusOK, api.ReceiptsResponse{Results: results}), nil
}

// fakeSettle answers a settle or extend that never reaches the broker with success for
// every receipt.
func (t *Transport) fakeSettle(req *http.Request) (*http.Response, error) {
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	var in api.ReceiptsRequest
	_ = json.Unmarshal(body, &in)
	results := make([]api.ItemResult, len(in.Receipts))
	for i := range results {
		results[i].OK = true
	}
	return jsonResponse(req, http.StatusOK, api.ReceiptsResponse{Results: results}), nil
}

// settleOp returns "ack", "nack", "extend" or "deadletter" for those requests, else "".
func settleOp(req *http.Request) string {
	if req.Method != http.MethodPost || !strings.HasPrefix(req.URL.Path, "/v1/queues/") {
		return ""
	}
	i := strings.LastIndexByte(req.URL.Path, '/')
	switch op := req.URL.Path[i+1:]; op {
	case "ack", "nack", "extend", "deadletter":
		return op
	}
	return ""
}

func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil {
		return nil, nil
	}
	defer req.Body.Close()
	return io.ReadAll(req.Body)
}

func drain(req *http.Request) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
}

func withBody(req *http.Request, body []byte) *http.Request {
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return r
}

// emptyReceive is a receive's answer with no messages, in the encoding the request asked
// for (the Go client asks for the binary one).
func emptyReceive(req *http.Request) *http.Response {
	if strings.Contains(req.Header.Get("Accept"), api.ContentTypeBinary) {
		return response(req, http.StatusOK, api.ContentTypeBinary, api.AppendReceiveAnswer(nil, nil))
	}
	return jsonResponse(req, http.StatusOK, api.ReceiveResponse{Messages: []api.Message{}})
}

func jsonResponse(req *http.Request, status int, v any) *http.Response {
	b, _ := json.Marshal(v)
	return response(req, status, "application/json", b)
}

func response(req *http.Request, status int, ctype string, b []byte) *http.Response {
	return &http.Response{
		Status: strconv.Itoa(status) + " " + http.StatusText(status), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": []string{ctype}},
		Body:          io.NopCloser(bytes.NewReader(b)),
		ContentLength: int64(len(b)),
		Request:       req,
	}
}
