package nativeapi

import (
	"net/http"

	"github.com/okiba/okiba/api"
)

// Subscription handlers: /v1/topics/{name}/subscriptions…

func (s *Server) putSubscription(w http.ResponseWriter, r *http.Request) {
	put(w, r, false, func(in api.SubscriptionRequest) (api.Subscription, bool, *api.Error) {
		return s.svc.Subscribe(r.Context(), r.PathValue("name"), r.PathValue("sub"), in)
	})
}

func (s *Server) getSubscription(w http.ResponseWriter, r *http.Request) {
	sub, e := s.svc.Subscription(r.PathValue("name"), r.PathValue("sub"))
	get(w, sub, e)
}

func (s *Server) listSubscriptions(w http.ResponseWriter, r *http.Request) {
	subs, e := s.svc.Subscriptions(r.Context(), r.PathValue("name"))
	get(w, api.SubscriptionList{Subscriptions: subs}, e)
}

func (s *Server) deleteSubscription(w http.ResponseWriter, r *http.Request) {
	del(w, r, false, func(bool) *api.Error { return s.svc.Unsubscribe(r.Context(), r.PathValue("name"), r.PathValue("sub")) })
}
