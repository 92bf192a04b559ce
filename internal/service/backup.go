package service

import (
	"context"
	"io"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/broker"
)

// Backup writes a consistent backup of the broker to w (broker.Backup), for a caller
// with the admin permission: a backup holds every message and the data directory's
// secret. An error before anything was written is an *api.Error; one after (a broken
// connection, a read that failed) ends the stream before its end frame, which a
// restore then refuses.
func (s *Service) Backup(ctx context.Context, w io.Writer) (broker.BackupInfo, *api.Error) {
	if err := requireAdmin(ctx); err != nil {
		return broker.BackupInfo{}, s.errorOf(err)
	}
	info, err := s.b.Backup(ctx, w)
	if err != nil {
		s.log.Warn("backup failed", "error", err, "bytes", info.Bytes)
		return info, s.errorOf(err)
	}
	s.log.Info("backup taken", "messages", info.Messages, "topic_records", info.TopicRecords, "bytes", info.Bytes, "at", info.At)
	return info, nil
}
