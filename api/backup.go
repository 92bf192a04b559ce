package api

// BackupPath answers GET with a backup of the broker (admin permission): a binary export
// of every queue, message, topic record and principal, streamed as it is read, never on
// the stream (docs/api.md, "Backup").
const BackupPath = "/v1/backup"

// ContentTypeBackup is the media type of a backup.
const ContentTypeBackup = "application/vnd.okiba.backup"
