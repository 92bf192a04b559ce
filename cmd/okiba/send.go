package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/queue"
)

type sendCmd struct{ app *app }

func (c *sendCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.serverFlags("send", `
Usage: okiba send QUEUE [BODY] [flags]

Sends one message and prints its id, followed by "(duplicate)" when the dedup id (or,
with content dedup, the body) was already sent within the queue's dedup window: the id
is then the original message's and nothing new was enqueued.

Without BODY (or with BODY "-") the body is read from stdin, byte for byte but for one
trailing newline ("\n" or "\r\n"), which is dropped, as echo and editors add one: echo hi
| okiba send q sends "hi". --keep-newline keeps it (for files that must arrive exactly;
binary files are safest with it). Bodies that are not UTF-8 text are sent
base64-encoded and arrive unchanged.`, `
okiba send orders 'order 42 paid'
okiba send orders '{"id":42}' --group customer-7 --dedup-id order-42 --header type=paid
okiba send orders later --delay 5m
echo 'from a pipe' | okiba send orders
okiba send images --keep-newline < picture.png`)
	group := f.String("group", "", "message group `KEY`: a group's messages are delivered in order")
	dedup := f.String("dedup-id", "", "dedup `ID`: a repeat within the queue's dedup window is a duplicate")
	delay := f.Duration("delay", 0, "keep the message invisible this long, 0s..168h (default the queue's delay)")
	keepNewline := f.Bool("keep-newline", false, "keep a trailing newline of a body read from stdin")
	var headers kvFlag
	f.Var(&headers, "header", "`KEY=VALUE` header (a String attribute), repeatable")
	pos, cl, err := f.clientArgs(args, 1, 2, "QUEUE [BODY] [flags]")
	if err != nil {
		return err
	}
	m := client.Message{Group: *group, DedupID: *dedup, Headers: headers.m}
	if f.given()["delay"] {
		if err := checkDelay(f, *delay); err != nil {
			return err
		}
		m.Delay = delay
	}
	if len(pos) == 2 && pos[1] != "-" {
		m.Body = []byte(pos[1])
	} else {
		if a.StdinTTY {
			fmt.Fprintln(a.Stderr, "reading the message body from stdin; end it with Ctrl-D")
		}
		if m.Body, err = io.ReadAll(a.Stdin); err != nil {
			return fmt.Errorf("read the body from stdin: %w", err)
		}
		if !*keepNewline {
			m.Body = trimNewline(m.Body)
		}
	}
	res, err := cl.Send(ctx, pos[0], m)
	if err != nil {
		return err
	}
	if res.Duplicate {
		fmt.Fprintf(a.Stdout, "%s (duplicate)\n", res.ID)
		return nil
	}
	fmt.Fprintln(a.Stdout, res.ID)
	return nil
}

// trimNewline drops one trailing "\n" or "\r\n".
func trimNewline(b []byte) []byte {
	b, ok := bytes.CutSuffix(b, []byte("\n"))
	if ok {
		b, _ = bytes.CutSuffix(b, []byte("\r"))
	}
	return b
}

// checkDelay refuses a --delay the server would refuse (api.md, invalid_delay), before a
// request: a negative one would otherwise be easy to mistake for "at once".
func checkDelay(f *flags, d time.Duration) error {
	if d < 0 || d > queue.MaxDelay || d%time.Millisecond != 0 {
		return f.fail("--delay must be a whole number of milliseconds between 0s and %s, got %v", human(queue.MaxDelay), d)
	}
	return nil
}
