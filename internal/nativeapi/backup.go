package nativeapi

import (
	"net/http"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/reply"
)

// backup answers GET /v1/backup with a backup of the broker as it streams (a binary
// export, docs/operations.md "Backup and restore"). The status is sent with the first
// bytes: an error after them cannot change it, so the handler breaks the connection
// instead, and the stream, which lacks its end frame, is refused by a restore. Not on
// the stream: a stream's answer is one frame, held whole in memory.
func (s *Server) backup(w http.ResponseWriter, r *http.Request) {
	if r.Context().Value(framedKey{}) != nil {
		reply.Error(w, invalid("%s streams a backup of any size: request it over plain HTTP, not inside a stream", api.BackupPath))
		return
	}
	bw := &backupWriter{w: w}
	_, e := s.svc.Backup(r.Context(), bw)
	if e == nil {
		return
	}
	if !bw.started {
		reply.Error(w, e)
		return
	}
	panic(http.ErrAbortHandler) // the client must not take a cut stream for a whole one
}

// backupWriter sends the answer's headers with its first bytes.
type backupWriter struct {
	w       http.ResponseWriter
	started bool
}

func (b *backupWriter) Write(p []byte) (int, error) {
	if !b.started {
		b.started = true
		h := b.w.Header()
		h.Set("Content-Type", api.ContentTypeBackup)
		h.Set("Content-Disposition", `attachment; filename="okiba.backup"`)
		b.w.WriteHeader(http.StatusOK)
	}
	return b.w.Write(p)
}
