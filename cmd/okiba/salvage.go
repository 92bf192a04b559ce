package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/okiba/okiba/broker"
)

const salvageUsage = `
Usage: okiba salvage DATA-DIR

Repairs a data directory that okiba serve refused to start on because the last batch
of its log is damaged: records that were written whole and fsynced, and damaged since
(bit rot, a bad sector). The refusal says the damage is in the log's last batch and
names this command; okiba serve never discards such records by itself.

salvage copies the damaged bytes to DATA-DIR/wal/quarantine/ with a note saying what
they are, zeroes them in the log segment (which keeps its size), and prints what was
cut: the file, the byte range, and how many frames and records. Then okiba serve
starts. What the records cut had done is undone: a send in them is lost, an ack in them
delivers its message again, a lease in them ends.

salvage refuses to run while okiba serve holds the directory, changes nothing when the
log opens as it is (okiba serve discards the torn end of a write cut short by a crash
itself), and refuses, changing nothing, damage it does not repair: in an earlier batch
or segment, or in records the latest checkpoint covers. Copy the directory first if you
can; see docs/reliability.md and docs/operations.md.`

const salvageExamples = `
okiba salvage /var/lib/okiba
okiba salvage ./okiba-data && okiba serve --data ./okiba-data`

type salvageCmd struct{ app *app }

func (c *salvageCmd) Run(ctx context.Context, args []string) error {
	f := c.app.flags("salvage", salvageUsage, salvageExamples)
	pos, err := f.parseArgs(args, 1, 1, "DATA-DIR")
	if err != nil {
		return err
	}
	dir := pos[0]
	rep, err := broker.Salvage(nil, dir)
	switch {
	case errors.Is(err, broker.ErrLocked):
		return fmt.Errorf("%w: stop the okiba serve using it first", err)
	case err != nil:
		return err
	}
	out := c.app.Stdout
	if len(rep.Cuts) == 0 {
		fmt.Fprintf(out, "nothing to cut: the log of %s opens as it is\n", dir)
		return nil
	}
	fmt.Fprintf(out, "cut the damaged end of the log of %s; these records are lost:\n", dir)
	for _, cut := range rep.Cuts {
		fmt.Fprintf(out, "  file     %s\n", cut.File)
		fmt.Fprintf(out, "  bytes    [%d, %d) zeroed, %d bytes\n", cut.From, cut.To, cut.To-cut.From)
		fmt.Fprintf(out, "  frames   %d cut, %d of them records\n", cut.Frames, cut.Records)
		fmt.Fprintf(out, "  damage   %s\n", cut.Reason)
		fmt.Fprintf(out, "  copy     %s (what it was: the .txt beside it)\n", cut.Quarantine)
	}
	fmt.Fprintf(out, "now okiba serve --data %s can start\n", dir)
	return nil
}
