package nativeapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/reply"
	"github.com/okiba/okiba/internal/service"
)

// The binary encoding (api.ContentTypeBinary) of sends, receives, publishes and pulls:
// the Go client's fast path. Same endpoints, same validation, same errors (JSON) as the JSON encoding.

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
	if fb, ok := r.Body.(*frameBody); ok && fb.Len() == len(fb.b) && len(fb.b) <= api.MaxRequestBody {
		fb.Reset(nil) // read: as a body read to its end
		return fb.b, nil
	}
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

// binarySendRequest decodes a send in the binary encoding.
func binarySendRequest(w http.ResponseWriter, r *http.Request) (service.From, []api.BinaryMessage, *api.Error) {
	data, e := readBody(w, r)
	if e != nil {
		return service.From{}, nil, e
	}
	producer, seq, msgs, err := api.DecodeSendRequestFrom(data)
	if err != nil {
		return service.From{}, nil, invalid("%v", err)
	}
	if len(msgs) == 0 {
		return service.From{}, nil, invalid("the batch is empty; send at least one message")
	}
	return service.From{Producer: producer, Seq: seq}, msgs, nil
}

// writeBinarySend answers a send in binary; the status follows the same rule as JSON.
func writeBinarySend(w http.ResponseWriter, sent service.Sent) {
	out, common := sent.Binary()
	status := reply.BatchStatus(w, common)
	w.Header().Set("Content-Type", api.ContentTypeBinary)
	w.WriteHeader(status)
	w.Write(api.AppendSendAnswer(nil, out))
}

// writeBinaryReceive answers a receive in binary.
func writeBinaryReceive(w http.ResponseWriter, got service.Received) {
	out := got.Binary()
	size := 0
	for i := range out {
		size += len(out[i].Body) + len(out[i].Receipt) + 64
	}
	w.Header().Set("Content-Type", api.ContentTypeBinary)
	w.WriteHeader(http.StatusOK)
	reply.WriteOwned(w, api.AppendReceiveAnswer(make([]byte, 0, size), out))
}

// binaryPublishRequest decodes a publish in the binary encoding.
func binaryPublishRequest(w http.ResponseWriter, r *http.Request) ([]api.BinaryPublishRecord, *api.Error) {
	data, e := readBody(w, r)
	if e != nil {
		return nil, e
	}
	recs, err := api.DecodePublishRequest(data)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if len(recs) == 0 {
		return nil, invalid("the batch is empty; publish at least one record")
	}
	return recs, nil
}

// writeBinaryPublish answers a publish in binary; the status follows the same rule as
// JSON.
func writeBinaryPublish(w http.ResponseWriter, out api.PublishResponse) {
	status := reply.BatchStatus(w, out.Error)
	w.Header().Set("Content-Type", api.ContentTypeBinary)
	w.WriteHeader(status)
	w.Write(api.AppendPublishAnswer(make([]byte, 0, 16+len(out.Results)*8), out.Results))
}

// writeBinaryPull answers a pull in binary.
func writeBinaryPull(w http.ResponseWriter, out *api.BinaryPull) {
	size := 64 + len(out.Assignment)*24
	for i := range out.Records {
		x := &out.Records[i]
		size += len(x.Body) + len(x.Key) + 24
		for _, h := range x.Headers {
			size += len(h.Name) + len(h.Value) + 2
		}
	}
	w.Header().Set("Content-Type", api.ContentTypeBinary)
	w.WriteHeader(http.StatusOK)
	reply.WriteOwned(w, api.AppendPullAnswer(make([]byte, 0, size), out))
}
