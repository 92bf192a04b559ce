package broker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/okiba/okiba/internal/vfs"
	"github.com/okiba/okiba/wal"
)

// A node of a cluster whose raft log no longer holds the entries it lacks (the others
// compacted theirs) takes another node's state whole: the raft snapshot names an index,
// and the node installs a backup (Backup, an export of every machine, body and topic
// record) of a node that holds at least that index. The backup is restored beside the
// data directory's own files, while the broker still runs, into installDir+".tmp";
// renamed to installDir, it is complete, and the swap begins: each of the broker's own
// files (installed) moves aside into installOld, then its new one moves in, one rename
// each, so that a crash anywhere leaves either the old file or the new one in place and
// the next open finishes the swap (finishInstall). The raft directory, the lock and
// anything else in the data directory stay.
const (
	installDir = "install"
	installOld = "install.old"
)

// installed are the broker's own files and directories in its data directory: what an
// install replaces. A restore makes every one of them.
var installed = []string{formatFile, "secret", "checkpoints", "wal", "topics"}

// errInstallBehind: the state offered to Install is older than the index the raft
// snapshot names; fetch it again (from the leader, or a node further along).
var errInstallBehind = errors.New("the state offered is older than the snapshot it is to install")

// Install replaces the broker's state with the backup read from r, which must hold at
// least the committed entry atLeast: for a cluster's node that receives a raft snapshot.
// The broker serves on its old state until the backup is whole and durable; then it
// stops its background work, swaps the files and opens them as at start-up, answering
// ErrRebuilding meanwhile. A backup that fails (a broken stream, a damaged frame, one
// behind atLeast) changes nothing.
func (b *Broker) Install(r io.Reader, atLeast uint64) (BackupInfo, error) {
	if b.repl == nil {
		return BackupInfo{}, errors.New("broker: Install is for a node of a cluster")
	}
	fs, dir := b.fs, b.cfg.Dir
	tmp := filepath.Join(dir, installDir+".tmp")
	if err := removeAll(fs, tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return BackupInfo{}, fmt.Errorf("install: %w", err)
	}
	cfg := b.cfg
	cfg.Replication, cfg.Observer = nil, nil
	info, err := restoreInto(cfg, tmp, r)
	if err == nil && info.Applied < atLeast {
		err = fmt.Errorf("%w: it holds entry %d, the snapshot %d", errInstallBehind, info.Applied, atLeast)
	}
	if shared, ok := b.repl.(SharedLog); ok && err == nil {
		err = carryInto(cfg, filepath.Join(tmp, "wal"), shared)
	}
	if err != nil {
		_ = removeAll(fs, tmp)
		return info, fmt.Errorf("install: %w", err)
	}
	err = b.reopen(func() error {
		if err := fs.Rename(tmp, filepath.Join(dir, installDir)); err != nil {
			return err
		}
		if err := fs.SyncDir(dir); err != nil {
			return err
		}
		return finishInstall(fs, dir)
	})
	if err != nil {
		return info, fmt.Errorf("install: %w", err)
	}
	b.logger.Info("installed another node's state", "applied", info.Applied, "messages", info.Messages,
		"topic_records", info.TopicRecords, "bytes", info.Bytes)
	return info, nil
}

// carryInto has the replication write what it must keep (raft's term and vote, the
// snapshot being installed) into the restored log in dir, which the swap makes the
// broker's: it is the replication's storage too (SharedLog).
func carryInto(cfg Config, dir string, shared SharedLog) error {
	at, err := wal.ContiguousStart(cfg.FS, dir)
	if err != nil {
		return err
	}
	l, err := wal.Open(wal.Options{FS: cfg.FS, Dir: dir, SegmentSize: cfg.SegmentSize, Logger: cfg.Logger,
		NoPrecreate: cfg.NoPrecreate}, at, func(wal.Pos, []byte) error { return nil })
	if err != nil {
		return fmt.Errorf("open the restored log: %w", err)
	}
	err = shared.Carry(l)
	return errors.Join(err, l.Close())
}

// reopen stops the broker, runs swap on its closed data directory, and opens it again
// as at start-up: Rebuild's steps, and Install's.
func (b *Broker) reopen(swap func() error) error {
	b.ckptMu.Lock()
	defer b.ckptMu.Unlock()
	b.Fence()
	b.cancel()
	b.wg.Wait()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	log := b.log
	b.mu.Unlock()
	if err := log.Close(); err != nil {
		b.logger.Warn("reopen: closing the log", "error", err)
	}
	var serr error
	if swap != nil {
		serr = swap()
	}
	// The lock is held while the machines are filled: every read waits for them
	// (rather than read maps being replayed into), every command finds the broker fenced.
	b.mu.Lock()
	b.reset()
	b.fenced = true
	err := b.open(time.Now(), true)
	if err == nil {
		b.fenced = false
	}
	b.mu.Unlock()
	if err != nil {
		return errors.Join(serr, err)
	}
	b.correctSpace()
	return serr
}

// finishInstall completes the swap of an installed state (see installDir), if one is
// under way, and removes what an earlier one left behind.
func finishInstall(fs vfs.FS, dir string) error {
	src, old := filepath.Join(dir, installDir), filepath.Join(dir, installOld)
	if _, err := fs.Stat(src); errors.Is(err, os.ErrNotExist) {
		if err := removeAll(fs, old); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("install: remove %s: %w", old, err)
		}
		err := removeAll(fs, filepath.Join(dir, installDir+".tmp")) // a restore cut short
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	if err := fs.MkdirAll(old, vfs.DirMode); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	for _, name := range installed {
		from := filepath.Join(src, name)
		if _, err := fs.Stat(from); errors.Is(err, os.ErrNotExist) {
			continue // moved in already
		}
		to := filepath.Join(dir, name)
		if _, err := fs.Stat(to); err == nil {
			aside := filepath.Join(old, name)
			_ = removeAll(fs, aside)
			if err := fs.Rename(to, aside); err != nil {
				return fmt.Errorf("install: %w", err)
			}
		}
		if err := fs.Rename(from, to); err != nil {
			return fmt.Errorf("install: %w", err)
		}
		if err := fs.SyncDir(dir); err != nil {
			return fmt.Errorf("install: %w", err)
		}
	}
	if err := removeAll(fs, src); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if err := removeAll(fs, old); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return fs.SyncDir(dir)
}
