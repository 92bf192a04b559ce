// Command lonesender times one synchronous sender against a running okiba: 1 KiB
// messages sent one at a time with the Go client, each waiting for its answer, for a
// fixed time, in rounds. It reports the p50 and p99 of each round. docs/benchmarks.md
// ("The stream") uses it to compare builds of the server outside the harness.
//
//	go run ./cmd/lonesender [--server http://127.0.0.1:7070] [--duration 3s] [--rounds 2] [--nostream]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
)

func main() {
	server := flag.String("server", "http://127.0.0.1:7070", "the okiba server")
	duration := flag.Duration("duration", 3*time.Second, "length of one round")
	rounds := flag.Int("rounds", 2, "rounds, each reported")
	queue := flag.String("queue", "lonesender", "queue to send to (created if missing)")
	noStream := flag.Bool("nostream", false, "plain HTTP/1.1 instead of the stream")
	flag.Parse()
	if err := run(*server, *queue, *duration, *rounds, *noStream); err != nil {
		fmt.Fprintln(os.Stderr, "lonesender:", err)
		os.Exit(1)
	}
}

func run(server, queue string, d time.Duration, rounds int, noStream bool) error {
	c, err := client.New(server, client.Options{NoStream: noStream, Token: os.Getenv("OKIBA_TOKEN")})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.PutQueue(ctx, queue, api.QueueConfig{}); err != nil {
		return err
	}
	body := []byte(strings.Repeat("x", 1024))
	for range rounds {
		var lat []time.Duration
		for end := time.Now().Add(d); time.Now().Before(end); {
			t0 := time.Now()
			if _, err := c.Send(ctx, queue, client.Message{Body: body}); err != nil {
				return err
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		fmt.Printf("sends %d  p50 %v  p99 %v\n", len(lat), lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond))
	}
	_, err = c.Purge(ctx, queue)
	return err
}
