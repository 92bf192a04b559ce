//go:build !unix

package torture

// A process cannot be stopped from outside here (Windows has no SIGSTOP). Nothing freezes
// on these platforms anyway: okiba serve does not run on them (no data-directory lock).
func (s *server) freeze() {}
func (s *server) thaw()   {}
