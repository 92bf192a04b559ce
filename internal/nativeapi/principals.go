package nativeapi

import (
	"context"
	"net/http"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/reply"
	"github.com/okiba/okiba/internal/service"
)

// Principal handlers: /v1/principals… (admin only; the route table says so and the
// service checks it again).

func (s *Server) createPrincipal(w http.ResponseWriter, r *http.Request) {
	var in api.CreatePrincipalRequest
	if e := decode(w, r, &in, false); e != nil {
		reply.Error(w, e)
		return
	}
	out, e := s.svc.CreatePrincipal(r.Context(), in)
	if e != nil {
		reply.Error(w, e)
		return
	}
	w.Header().Set("Location", "/v1/principals/"+out.Principal.Name)
	reply.JSON(w, http.StatusCreated, out)
}

func (s *Server) listPrincipals(w http.ResponseWriter, r *http.Request) {
	out, e := s.svc.Principals(r.Context())
	get(w, out, e)
}

func (s *Server) getPrincipal(w http.ResponseWriter, r *http.Request) {
	p, e := s.svc.Principal(r.Context(), r.PathValue("name"))
	get(w, p, e)
}

func (s *Server) deletePrincipal(w http.ResponseWriter, r *http.Request) {
	del(w, r, false, func(bool) *api.Error { return s.svc.DeletePrincipal(r.Context(), r.PathValue("name")) })
}

func (s *Server) grantPrincipal(w http.ResponseWriter, r *http.Request) {
	s.changeGrants(w, r, (*service.Service).GrantPrincipal)
}

func (s *Server) revokePrincipal(w http.ResponseWriter, r *http.Request) {
	s.changeGrants(w, r, (*service.Service).RevokePrincipal)
}

func (s *Server) changeGrants(w http.ResponseWriter, r *http.Request,
	op func(*service.Service, context.Context, string, api.GrantsRequest) (api.Principal, *api.Error)) {
	var in api.GrantsRequest
	if e := decode(w, r, &in, false); e != nil {
		reply.Error(w, e)
		return
	}
	p, e := op(s.svc, r.Context(), r.PathValue("name"), in)
	get(w, p, e)
}

func (s *Server) rotatePrincipal(w http.ResponseWriter, r *http.Request) {
	var in api.RotateRequest
	if e := decode(w, r, &in, true); e != nil {
		reply.Error(w, e)
		return
	}
	out, e := s.svc.RotatePrincipal(r.Context(), r.PathValue("name"), in)
	get(w, out, e)
}
