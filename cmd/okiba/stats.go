package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/okiba/okiba/api"
)

type statsCmd struct{ app *app }

func (c *statsCmd) Run(ctx context.Context, args []string) error {
	a := c.app
	f := a.serverFlags("stats", `
Usage: okiba stats [QUEUE] [--json]

Shows message counts, rates over the last minute and Little's law (L = λW) for every
queue or for one, two ways:
  waiting    L = ready messages, W = time from enqueue to first delivery
  in system  L = ready + in flight, W = time from enqueue to ack
each with W measured over the last minute and W estimated as L/λ, where λ is the
arrival (send) rate. A measured W well above the estimate means messages are waiting
longer than the arrival rate explains (consumers falling behind, or old messages).`, `
okiba stats
okiba stats orders
okiba stats orders --json | jq .in_system`)
	asJSON := f.Bool("json", false, "print the API's stats JSON (an object keyed by queue name without QUEUE)")
	pos, cl, err := f.clientArgs(args, 0, 1, "[QUEUE] [--json]")
	if err != nil {
		return err
	}
	if len(pos) == 1 {
		q, err := cl.Queue(ctx, pos[0])
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSONIndent(a.Stdout, q.Stats)
		}
		w := tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', 0)
		st := q.Stats
		fmt.Fprintf(w, "Queue\t%s\n", q.Name)
		fmt.Fprintf(w, "  ready\t%d\n  delayed\t%d\n  in flight\t%d\n  oldest ready\t%s\n", st.Ready, st.Delayed, st.InFlight, oldest(st.OldestReadyAgeMS))
		if deref(q.Config.DeadLetterQueue) != "none" {
			fmt.Fprintf(w, "  dead letters\t%d\n", st.DeadLetters)
		}
		fmt.Fprintf(w, "  totals\tsent %d, delivered %d, acked %d, nacked %d, dead-lettered %d, expired %d\n",
			st.Sent, st.Delivered, st.Acked, st.Nacked, st.DeadLettered, st.Expired)
		printRates(w, st)
		return w.Flush()
	}
	qs, err := cl.Queues(ctx, "")
	if err != nil {
		return err
	}
	if *asJSON {
		out := make(map[string]api.Stats, len(qs))
		for _, q := range qs {
			out[q.Name] = q.Stats
		}
		return printJSONIndent(a.Stdout, out)
	}
	if len(qs) == 0 {
		fmt.Fprintln(a.Stderr, "no queues")
		return nil
	}
	w := tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "QUEUE\tREADY\tIN FLIGHT\tSENT/S\tDELIVERED/S\tACKED/S\tWAIT L\tWAIT W\tWAIT W EST\tSYS L\tSYS W\tSYS W EST\t")
	for _, q := range qs {
		st := q.Stats
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t\n", q.Name, st.Ready, st.InFlight,
			rate(st.Rates.Sent), rate(st.Rates.Delivered), rate(st.Rates.Acked),
			st.Waiting.L, msDur(st.Waiting.MeasuredMS), msDur(st.Waiting.EstimatedMS),
			st.InSystem.L, msDur(st.InSystem.MeasuredMS), msDur(st.InSystem.EstimatedMS))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.Stdout, "\nRates per second over the last minute. WAIT: ready messages, enqueue to first delivery;"+
		"\nSYS: ready + in flight, enqueue to ack. W is measured, W EST is L/λ with λ the send rate.")
	return nil
}
