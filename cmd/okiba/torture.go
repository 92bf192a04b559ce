package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/okiba/okiba/internal/torture"
)

type tortureCmd struct{ app *app }

func (c *tortureCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.flags("torture", `
Usage: okiba torture [--cycles 20] [--duration 10m] [--seed N] [--data DIR]

Checks okiba's delivery guarantee yourself, against this very binary: it runs
'okiba serve' as a child process under load (producers sending batches, consumers
that ack, nack, dead-letter and abandon messages, ordered groups), kills it with
SIGKILL at random moments (also during checkpoints, compaction and redrive), sometimes
freezes it with SIGSTOP past its leases, restarts it on the same data directory, and
finally drains every queue into a checker that counts:

  lost         sends acknowledged but never delivered (not even as dead letters)
  vanished     deliveries never settled that never came back
  resurrected  deliveries after an ack had been acknowledged
  unexpected   deliveries of messages nobody sent
  reordered    group messages delivered after a later one of their group was acked
  duplicated   messages delivered more than once before their ack (allowed, a rate)

Beside the queues, a topic load goes through the same kills: keyed publishes to a
topic of 3 partitions (half with dedup ids, retried after a failure), a subscription
into a queue, and a consumer group of two members that commit, lag and crash. After
every restart and at the end it checks that no acknowledged publish is lost or moved,
one key's records keep their publish order, no committed offset passes a record no
member was handed, committed offsets never go back, every record comes out of the
subscription's queue as one message, and no retried publish is written twice.

Every count but duplicated (and redeliveries) must be 0; the command exits 1
otherwise. The seed is printed: run again with --seed to replay the same choices.
Small segments and checkpoints make kills land in segment rolls, checkpoints and
compaction.`, `
okiba torture
okiba torture --cycles 1000
okiba torture --duration 10m --seed 42 --data /tmp/okiba-torture`)
	cycles := f.Int("cycles", 20, "kill cycles to run (a minimum with --duration)")
	duration := f.Duration("duration", 0, "keep cycling until this much time has passed")
	seed := f.Uint64("seed", 0, "seed for the run's choices (0 picks one)")
	data := f.String("data", "", "parent directory for the server's data and log (default a temporary one, removed after a clean run)")
	producers := f.Int("producers", 4, "concurrent producers")
	consumers := f.Int("consumers", 4, "concurrent consumers")
	topicPublishers := f.Int("topic-publishers", 2, "publishers of the topic load (0: no topic load)")
	segment := f.String("segment-size", "2MiB", "the server's --segment-size")
	ckpt := f.String("checkpoint-bytes", "256KiB", "the server's --checkpoint-bytes")
	if _, err := f.parseArgs(args, 0, 0, "[flags]"); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the okiba binary to run as the server: %w", err)
	}
	if *topicPublishers <= 0 {
		*topicPublishers = -1 // Config's "none"; its 0 means the default
	}
	rep, err := torture.Run(ctx, torture.Config{
		Binary: self, Dir: *data, Cycles: *cycles, Duration: *duration, Seed: *seed,
		Producers: *producers, Consumers: *consumers, TopicPublishers: *topicPublishers, SegmentSize: *segment, CheckpointBytes: *ckpt,
		Log: a.Stderr,
	})
	if err != nil {
		return fmt.Errorf("torture (seed %d): %w", rep.Seed, err)
	}
	fmt.Fprintln(a.Stdout, rep.String())
	for _, e := range rep.Examples {
		fmt.Fprintln(a.Stdout, "  "+e)
	}
	if !rep.OK() {
		return errors.New("the delivery guarantee failed; replay with --seed " + fmt.Sprint(rep.Seed))
	}
	return nil
}
