package nativeapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/reply"
	"github.com/okiba/okiba/internal/service"
)

// Topic handlers: /v1/topics, /v1/topics/{name}, its records and its partitions' records.

func (s *Server) putTopic(w http.ResponseWriter, r *http.Request) {
	put(w, r, true, func(in api.TopicConfig) (api.Topic, bool, *api.Error) {
		return s.svc.PutTopic(r.Context(), r.PathValue("name"), in)
	})
}

func (s *Server) getTopic(w http.ResponseWriter, r *http.Request) {
	t, e := s.svc.Topic(r.Context(), r.PathValue("name"))
	get(w, t, e)
}

func (s *Server) listTopics(w http.ResponseWriter, r *http.Request) {
	reply.JSON(w, http.StatusOK, api.TopicList{Topics: s.svc.Topics(r.Context(), r.URL.Query().Get("prefix"))})
}

func (s *Server) deleteTopic(w http.ResponseWriter, r *http.Request) {
	del(w, r, true, func(force bool) *api.Error { return s.svc.DeleteTopic(r.Context(), r.PathValue("name"), force) })
}

// publishBody is a publish as it may come: a batch, or the fields of one record.
type publishBody struct {
	Records []api.PublishRecord `json:"records"`
	api.PublishRecord
}

func (s *Server) publish(w http.ResponseWriter, r *http.Request) {
	var out api.PublishResponse
	var e *api.Error
	if isBinary(r) {
		var recs []api.BinaryPublishRecord
		if recs, e = binaryPublishRequest(w, r); e == nil {
			out, e = s.svc.PublishBinary(r.Context(), r.PathValue("name"), recs)
		}
	} else {
		var recs []api.PublishRecord
		if recs, e = jsonPublishRequest(w, r); e == nil {
			out, e = s.svc.Publish(r.Context(), r.PathValue("name"), recs)
		}
	}
	if e != nil {
		reply.Error(w, e)
		return
	}
	if wantsBinary(r) {
		writeBinaryPublish(w, out)
		return
	}
	reply.Batch(w, out.Error, out)
}

// jsonPublishRequest decodes a publish in JSON: a batch, or the fields of one record.
func jsonPublishRequest(w http.ResponseWriter, r *http.Request) ([]api.PublishRecord, *api.Error) {
	var in publishBody
	if e := decode(w, r, &in, false); e != nil {
		return nil, e
	}
	one := in.PublishRecord
	hasOne := one.Body != nil || one.BodyBase64 != nil || one.Key != nil || one.KeyBase64 != nil ||
		one.Partition != nil || one.Headers != nil || one.DedupID != ""
	recs := in.Records
	switch {
	case recs != nil && hasOne:
		return nil, invalid("give either \"records\" or the fields of one record, not both")
	case recs == nil:
		recs = []api.PublishRecord{one}
	case len(recs) == 0:
		return nil, invalid("\"records\" is empty; publish at least one record")
	}
	return recs, nil
}

// read serves GET /v1/topics/{name}/partitions/{partition}/records?offset=&max=&max_bytes=&wait=.
func (s *Server) read(w http.ResponseWriter, r *http.Request) {
	in, e := readRequest(r)
	if e == nil {
		var out api.ReadResponse
		if out, e = s.svc.Read(r.Context(), r.PathValue("name"), in); e == nil {
			reply.JSON(w, http.StatusOK, out)
			return
		}
	}
	reply.Error(w, e)
}

func readRequest(r *http.Request) (service.ReadRequest, *api.Error) {
	q := r.URL.Query()
	var in service.ReadRequest
	p, err := strconv.Atoi(r.PathValue("partition"))
	if err != nil || p < 0 {
		return in, &api.Error{Code: api.CodePartitionOutOfRange, Message: "the partition is a number from 0, got " + strconv.Quote(r.PathValue("partition"))}
	}
	in.Partition = p
	if v := q.Get("offset"); v != "" {
		off, e := service.ParseOffset(v)
		if e != nil {
			return in, e
		}
		in.Offset = off
	}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"max", &in.Max}, {"max_bytes", &in.MaxBytes}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return in, invalid("%s must be a positive integer, got %q", f.name, v)
			}
			*f.dst = n
		}
	}
	if v := q.Get("wait"); v != "" {
		var d api.Duration
		if err := d.UnmarshalJSON([]byte(strconv.Quote(v))); err != nil {
			if secs, err2 := strconv.ParseFloat(v, 64); err2 == nil {
				d = api.Duration(secs * float64(time.Second))
			} else {
				return in, invalid("wait must be a duration (\"5s\") or seconds, got %q", v)
			}
		}
		in.Wait = d.D()
	}
	return in, nil
}
