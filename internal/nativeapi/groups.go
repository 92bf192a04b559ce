package nativeapi

import (
	"net/http"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/reply"
)

// Consumer group handlers: /v1/topics/{name}/groups…

func (s *Server) putGroup(w http.ResponseWriter, r *http.Request) {
	put(w, r, true, func(in api.GroupConfig) (api.Group, bool, *api.Error) {
		return s.svc.PutGroup(r.Context(), r.PathValue("name"), r.PathValue("group"), in)
	})
}

func (s *Server) getGroup(w http.ResponseWriter, r *http.Request) {
	g, e := s.svc.Group(r.PathValue("name"), r.PathValue("group"))
	get(w, g, e)
}

func (s *Server) listGroups(w http.ResponseWriter, r *http.Request) {
	gs, e := s.svc.Groups(r.Context(), r.PathValue("name"))
	get(w, api.GroupList{Groups: gs}, e)
}

func (s *Server) deleteGroup(w http.ResponseWriter, r *http.Request) {
	del(w, r, false, func(bool) *api.Error {
		return s.svc.DeleteGroup(r.Context(), r.PathValue("name"), r.PathValue("group"))
	})
}

func (s *Server) pull(w http.ResponseWriter, r *http.Request) {
	var in api.PullRequest
	if e := decode(w, r, &in, false); e != nil {
		reply.Error(w, e)
		return
	}
	if wantsBinary(r) {
		out, e := s.svc.PullBinary(r.Context(), r.PathValue("name"), r.PathValue("group"), in)
		if e != nil {
			reply.Error(w, e)
			return
		}
		writeBinaryPull(w, &out)
		return
	}
	out, e := s.svc.Pull(r.Context(), r.PathValue("name"), r.PathValue("group"), in)
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, out)
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) {
	var in api.MemberRequest
	if e := decode(w, r, &in, false); e != nil {
		reply.Error(w, e)
		return
	}
	out, e := s.svc.Heartbeat(r.Context(), r.PathValue("name"), r.PathValue("group"), in)
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, out)
}

func (s *Server) leave(w http.ResponseWriter, r *http.Request) {
	var in api.MemberRequest
	if e := decode(w, r, &in, false); e != nil {
		reply.Error(w, e)
		return
	}
	if e := s.svc.Leave(r.Context(), r.PathValue("name"), r.PathValue("group"), in); e != nil {
		reply.Error(w, e)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) commit(w http.ResponseWriter, r *http.Request) {
	var in api.CommitRequest
	e := decode(w, r, &in, false)
	var out api.ReceiptsResponse
	if e == nil {
		out, e = s.svc.Commit(r.Context(), r.PathValue("name"), r.PathValue("group"), in)
	}
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.Batch(w, out.Error, out)
}

func (s *Server) seek(w http.ResponseWriter, r *http.Request) {
	var in api.SeekRequest
	if e := decode(w, r, &in, false); e != nil {
		reply.Error(w, e)
		return
	}
	g, e := s.svc.Seek(r.Context(), r.PathValue("name"), r.PathValue("group"), in)
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, g)
}

func (s *Server) groupDeadLetter(w http.ResponseWriter, r *http.Request) {
	var in api.GroupDeadLetterRequest
	if e := decode(w, r, &in, false); e != nil {
		reply.Error(w, e)
		return
	}
	if e := s.svc.DeadLetterRecord(r.Context(), r.PathValue("name"), r.PathValue("group"), in); e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, struct{}{})
}
