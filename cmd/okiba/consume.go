package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/okiba/okiba/client"
)

// consumeCmd is okiba consume: a consumer made of a shell command, run once per message
// by the Go client's consumer runtime (client.Consume), which holds the leases, settles
// and stops gracefully. The command is the handler; its exit status settles the message.
type consumeCmd struct{ app *app }

const consumeUsage = `
Usage: okiba consume QUEUE [flags] -- COMMAND [ARGS...]

Receives QUEUE's messages and runs COMMAND for each, with the body on its stdin, until
interrupted. The command's stdout and stderr are okiba's. Its environment is okiba's plus:
  OKIBA_QUEUE, OKIBA_MESSAGE_ID, OKIBA_RECEIPT, OKIBA_DELIVERIES (1 on the first delivery)
  OKIBA_GROUP, OKIBA_DEDUP_ID     when the message has them
  OKIBA_HEADER_<NAME>             each header, NAME upper-cased, other characters than
                                  letters and digits as _ (trace-id: OKIBA_HEADER_TRACE_ID)
Its exit status settles the message: 0 acks it; --dead-letter-code N dead-letters it
(reason --dead-letter-reason); anything else, or being killed, nacks it, for a later
delivery after the queue's backoff (and the dead-letter queue after max_deliveries).

While the command runs, the message's lease is extended, so a command may take longer
than the queue's visibility_timeout. --concurrency N runs up to N commands at once;
messages of one group run one at a time, in order.

SIGINT (Ctrl-C) or SIGTERM stops gracefully: no more messages are received, messages not
started go back at once, and running commands finish — they run in a process group of
their own, so a Ctrl-C in the terminal does not reach them — within --drain-timeout,
after which they get SIGTERM (and SIGKILL 5 s later) and their messages are nacked. A
second signal does that at once. The exit status is 0 after a stop, 1 when the queue
cannot be consumed (queue_not_found, unauthorized).`

const consumeExamples = `
okiba consume orders -- ./process-order.sh
okiba consume orders --concurrency 8 -- python3 worker.py
okiba consume emails --dead-letter-code 65 -- sh -c 'send-mail --to "$OKIBA_HEADER_TO"'`

func (c *consumeCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.serverFlags("consume", consumeUsage, consumeExamples)
	concurrency := f.Int("concurrency", 1, "run up to `N` commands at once, 1..1000")
	dlCode := f.Int("dead-letter-code", 0, "dead-letter the message when the command exits with this `CODE`, 1..255 (default none)")
	dlReason := f.String("dead-letter-reason", "consumer", "the `REASON` recorded with those dead letters")
	vis := f.Duration("visibility", 0, "lease length, extended at half of it while a command runs (default the queue's visibility_timeout)")
	drain := f.Duration("drain-timeout", 30*time.Second, "how long running commands may take to finish after SIGINT or SIGTERM")
	flagArgs, command, found := cutCommand(args)
	pos, err := f.parseArgs(flagArgs, 1, 1, "QUEUE [flags] -- COMMAND [ARGS...]")
	if err != nil {
		return err
	}
	switch {
	case !found || len(command) == 0:
		return f.fail("no command: okiba consume QUEUE [flags] -- COMMAND [ARGS...]")
	case *concurrency < 1 || *concurrency > 1000:
		return f.fail("--concurrency must be between 1 and 1000, got %d", *concurrency)
	case *dlCode < 0 || *dlCode > 255:
		return f.fail("--dead-letter-code must be an exit status, 1..255, got %d", *dlCode)
	case *vis < 0 || *vis > 12*time.Hour:
		return f.fail("--visibility must be between 0s and 12h, got %v", *vis)
	case *drain <= 0:
		return f.fail("--drain-timeout must be positive, got %v", *drain)
	}
	path, err := exec.LookPath(command[0])
	if err != nil {
		return f.fail("cannot run %q: %v", command[0], err)
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	base := inheritedEnv(os.Environ())
	logger := slog.New(slog.NewTextHandler(a.Stderr, nil))
	h := &commandHandler{app: a, path: path, args: command[1:], env: base, dlCode: *dlCode, dlReason: *dlReason}
	// The first SIGINT or SIGTERM cancels ctx (main); the second is a hard stop here, which
	// stops the commands, since they do not share okiba's process group.
	hard := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		for n := 0; ; {
			select {
			case <-sigs:
				if n++; n == 2 {
					logger.Warn("second signal: stopping the running commands")
					close(hard)
					return
				}
			case <-stopped:
				return
			}
		}
	}()
	logger.Info("consuming", "queue", pos[0], "command", strings.Join(command, " "), "concurrency", *concurrency)
	err = cl.Consume(ctx, pos[0], h.handle, client.ConsumeOptions{
		Concurrency: *concurrency, Visibility: *vis, DrainTimeout: *drain, Logger: logger, HardStop: hard,
	})
	if err != nil {
		return err
	}
	logger.Info("stopped", "queue", pos[0])
	return nil
}

// cutCommand splits args at the first "--": okiba's flags and the queue before it, the
// command after it, which okiba must not read as its own flags.
func cutCommand(args []string) (before, command []string, found bool) {
	for i, arg := range args {
		if arg == "--" {
			return args[:i], args[i+1:], true
		}
	}
	return args, nil, false
}

// commandHandler runs the command for one message (client.Handler).
type commandHandler struct {
	app      *app
	path     string
	args     []string
	env      []string
	dlCode   int
	dlReason string
}

// killGrace is how long a command has between SIGTERM and SIGKILL when it must stop.
const killGrace = 5 * time.Second

func (h *commandHandler) handle(ctx context.Context, d *client.Delivery) error {
	cmd := exec.Command(h.path, h.args...)
	cmd.Stdin = bytes.NewReader(d.Body)
	cmd.Stdout, cmd.Stderr = h.app.Stdout, h.app.Stderr
	cmd.Env = append(h.env[:len(h.env):len(h.env)], messageEnv(d)...)
	ownProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start %s: %w", h.path, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done(): // the drain timed out, a hard stop, or the lease was lost
		terminate(cmd)
		select {
		case err = <-done:
		case <-time.After(killGrace):
			cmd.Process.Kill()
			err = <-done
		}
		return fmt.Errorf("%s stopped: %w (%v)", h.path, ctx.Err(), err)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && h.dlCode != 0 && ee.ExitCode() == h.dlCode:
		return client.DeadLetter(h.dlReason, fmt.Sprintf("%s exited with status %d", h.path, h.dlCode))
	}
	return fmt.Errorf("%s: %w", h.path, err)
}

// messageEnv is the environment that tells the command about its message.
func messageEnv(d *client.Delivery) []string {
	env := []string{
		"OKIBA_QUEUE=" + d.Queue,
		"OKIBA_MESSAGE_ID=" + d.ID,
		"OKIBA_RECEIPT=" + d.Receipt,
		"OKIBA_DELIVERIES=" + strconv.FormatUint(uint64(d.Deliveries), 10),
	}
	if d.Group != "" {
		env = append(env, "OKIBA_GROUP="+d.Group)
	}
	if d.DedupID != "" {
		env = append(env, "OKIBA_DEDUP_ID="+d.DedupID)
	}
	for k, v := range d.Headers {
		env = append(env, headerEnvName(k)+"="+v)
	}
	return env
}

// headerEnvName is OKIBA_HEADER_ and the header's name upper-cased, with every character
// other than an ASCII letter or digit replaced by _, as shells accept in names.
func headerEnvName(header string) string {
	var b strings.Builder
	b.WriteString("OKIBA_HEADER_")
	for _, r := range header {
		switch {
		case r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// inheritedEnv is okiba's environment without the variables messageEnv sets, so that a
// command never sees another message's (from an okiba consume that started this one).
func inheritedEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "OKIBA_QUEUE", "OKIBA_MESSAGE_ID", "OKIBA_RECEIPT", "OKIBA_DELIVERIES", "OKIBA_GROUP", "OKIBA_DEDUP_ID":
			continue
		}
		if strings.HasPrefix(name, "OKIBA_HEADER_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
