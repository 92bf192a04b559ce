package nativeapi

import (
	"net/http"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/reply"
)

// Subscription handlers: /v1/topics/{name}/subscriptions…

func (s *Server) putSubscription(w http.ResponseWriter, r *http.Request) {
	var in api.SubscriptionRequest
	if e := decode(w, r, &in, false); e != nil {
		reply.Error(w, e)
		return
	}
	sub, created, e := s.svc.Subscribe(r.Context(), r.PathValue("name"), r.PathValue("sub"), in)
	if e != nil {
		reply.Error(w, e)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	reply.JSON(w, status, sub)
}

func (s *Server) getSubscription(w http.ResponseWriter, r *http.Request) {
	sub, e := s.svc.Subscription(r.PathValue("name"), r.PathValue("sub"))
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, sub)
}

func (s *Server) listSubscriptions(w http.ResponseWriter, r *http.Request) {
	subs, e := s.svc.Subscriptions(r.PathValue("name"))
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, api.SubscriptionList{Subscriptions: subs})
}

func (s *Server) deleteSubscription(w http.ResponseWriter, r *http.Request) {
	if e := s.svc.Unsubscribe(r.Context(), r.PathValue("name"), r.PathValue("sub")); e != nil {
		reply.Error(w, e)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
