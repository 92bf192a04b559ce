package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/okiba/okiba/broker"
)

// backupCmd is okiba backup: a consistent copy of a running broker, over the API.
type backupCmd struct{ app *app }

func (c *backupCmd) Run(ctx context.Context, args []string) error {
	f := c.app.serverFlags("backup", `
Usage: okiba backup --to FILE [--server URL]

Writes a backup of a running broker to FILE without stopping it: every queue with its
configuration, every message (ready, delayed, leased, dead-lettered) with its body and
lease, every retained topic record, consumer groups and subscriptions, principals, and
the data directory's secret, all as of one moment. Every send answered before the
backup began is in it; sends go on while it is written. It needs the admin permission,
and FILE holds every message: keep it as you keep the data directory.

FILE is written beside itself and renamed into place once complete and synced, so a
backup that fails leaves no FILE; "-" writes to standard output. okiba restore makes a
data directory of it.`, `
okiba backup --to /backups/okiba-$(date +%F).backup
okiba backup --to - | gzip > okiba.backup.gz`)
	to := f.String("to", "", "the file to write (required; - for standard output)")
	_, cl, err := f.clientArgs(args, 0, 0, "--to FILE")
	if err != nil {
		return err
	}
	if *to == "" {
		return &usageError{cmd: "backup", msg: "--to FILE is required (or --to - for standard output)"}
	}
	if *to == "-" {
		_, err := cl.Backup(ctx, c.app.Stdout)
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(*to), "."+filepath.Base(*to)+".partial-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := cl.Backup(ctx, tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), *to); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(*to)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	fmt.Fprintf(c.app.Stdout, "backup of %s written to %s (%d bytes)\n", cl.Server(), *to, n)
	return nil
}

// restoreCmd is okiba restore: a new data directory from a backup, offline.
type restoreCmd struct{ app *app }

func (c *restoreCmd) Run(ctx context.Context, args []string) error {
	f := c.app.flags("restore", `
Usage: okiba restore --from FILE DATA-DIR

Makes DATA-DIR, a new data directory, from a backup that okiba backup wrote; then
okiba serve --data DATA-DIR serves what the backup holds, and receipts, console
sessions and principals' secrets from before the backup stay valid. DATA-DIR must not
exist or be empty: restore never overwrites a data directory, live or not. It builds
the directory beside DATA-DIR and renames it into place once all of it is durable, so
a restore that fails (a backup cut short or damaged: each frame is checksummed and the
backup must reach its end) leaves nothing. "-" reads the backup from standard input.`, `
okiba restore --from /backups/okiba-2026-12-01.backup /var/lib/okiba
gunzip -c okiba.backup.gz | okiba restore --from - ./okiba-data`)
	from := f.String("from", "", "the backup file to read (required; - for standard input)")
	pos, err := f.parseArgs(args, 1, 1, "DATA-DIR")
	if err != nil {
		return err
	}
	if *from == "" {
		return &usageError{cmd: "restore", msg: "--from FILE is required (or --from - for standard input)"}
	}
	var in io.Reader = c.app.Stdin
	if *from != "-" {
		file, err := os.Open(*from)
		if err != nil {
			return err
		}
		defer file.Close()
		in = file
	}
	info, err := broker.Restore(broker.Config{Dir: pos[0]}, in)
	if errors.Is(err, broker.ErrLocked) {
		return fmt.Errorf("%w: restore never writes into a directory a broker uses", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.app.Stdout, "restored %s: %d queues, %d messages, %d topic records, as of %s\n",
		pos[0], info.Queues, info.Messages, info.TopicRecords, info.At.UTC().Format("2006-01-02 15:04:05.000Z"))
	return nil
}
