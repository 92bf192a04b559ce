package nativeapi

import (
	"net/http"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/reply"
)

// The named resources — queues, topics, consumer groups, subscriptions — are put, read
// and deleted alike: these answer for all of them, and each handler says only what
// differs (the path values and the service call).

// put decodes the request body into an In (an empty body is the zero In when
// allowEmpty) and answers what f returns: 201 when it created the resource, 200 when it
// was there already.
func put[In, Out any](w http.ResponseWriter, r *http.Request, allowEmpty bool, f func(in In) (Out, bool, *api.Error)) {
	var in In
	if e := decode(w, r, &in, allowEmpty); e != nil {
		reply.Error(w, e)
		return
	}
	out, created, e := f(in)
	if e != nil {
		reply.Error(w, e)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	reply.JSON(w, status, out)
}

// get answers what f returns, or its error.
func get[Out any](w http.ResponseWriter, out Out, e *api.Error) {
	if e != nil {
		reply.Error(w, e)
		return
	}
	reply.JSON(w, http.StatusOK, out)
}

// del answers 204 once f deleted the resource, or f's error. With force, f gets the
// request's force parameter (a malformed one is refused before f runs).
func del(w http.ResponseWriter, r *http.Request, force bool, f func(force bool) *api.Error) {
	var forced bool
	var e *api.Error
	if force {
		forced, e = boolParam(r, "force")
	}
	if e == nil {
		e = f(forced)
	}
	if e != nil {
		reply.Error(w, e)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
