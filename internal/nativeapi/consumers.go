package nativeapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/auth"
	"github.com/okiba/okiba/internal/consumers"
	"github.com/okiba/okiba/internal/reply"
)

// who is the receiver a request of the native API shows: the client's own name
// (api.ClientHeader, which a stream's frames inherit from its upgrade), its principal,
// the connection's peer, and whether it came in a frame.
func who(r *http.Request) consumers.Who {
	w := consumers.Who{Name: ClientName(r.Header.Get(api.ClientHeader)), Remote: r.RemoteAddr, Via: "http"}
	if p, ok := auth.From(r.Context()); ok {
		w.Principal = p.Name
	}
	if r.Context().Value(framedKey{}) != nil {
		w.Via = "stream"
	}
	return w
}

// ClientName is a client's name as given in api.ClientHeader, made printable and cut to
// api.MaxClientName bytes.
func ClientName(v string) string {
	v = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, strings.TrimSpace(v))
	if len(v) > api.MaxClientName {
		v = strings.ToValidUTF8(v[:api.MaxClientName], "") // no character cut in two
	}
	return v
}

// consumers answers GET /v1/queues/{name}/consumers: the receivers this node saw lately.
func (s *Server) consumers(w http.ResponseWriter, r *http.Request) {
	q, e := s.svc.Queue(r.Context(), r.PathValue("name"))
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, api.ConsumerList{
		Queue: q.Name, WindowMS: s.table.Window().Milliseconds(),
		Consumers: s.table.List(q.Name, s.now()), InFlight: q.Stats.InFlight,
	})
}

func (s *Server) now() time.Time {
	if s.opts.Now != nil {
		return s.opts.Now()
	}
	return time.Now()
}
