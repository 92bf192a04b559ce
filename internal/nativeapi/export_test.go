package nativeapi

import "net/http"

// Handle adds a handler to the native API's routes, for tests that need one that does
// what no route does (panics, say).
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }
