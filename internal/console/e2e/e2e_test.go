// Package e2e tests okiba's console in a real browser: it builds okiba, starts it on
// loopback with a token and a read-only principal, seeds queues and a topic through the Go
// client, and runs console.mjs (Playwright's playwright-core driving Debian's headless
// Chromium), which signs in, checks every page and plays every lesson, then signs in as
// the read-only principal and checks that no page offers it an action, saving
// screenshots in artifacts/. Then it checks through the API what the pages did.
//
// It needs /usr/bin/chromium (apt-get install chromium), node, and
// `npm ci --prefix internal/console/e2e`; .ci/run installs them. Without them it is skipped with a
// SKIP line, except under CI=true, where it fails. It is skipped with -short too: make
// runs it in its own tier (make browser).
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/testkit"
)

const (
	token = "e2e-console-token-long-enough"
	// viewerSecret is the secret of viewer, a principal of the configuration that may
	// browse queues and topics and do nothing else.
	viewerSecret = "e2e-console-viewer-secret-long-enough"
)

func TestBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: browser tests run in their own tier (make browser), not with -short")
	}
	chromium := envOr("CHROMIUM", "/usr/bin/chromium")
	var missing []string
	if _, err := os.Stat(chromium); err != nil {
		missing = append(missing, chromium+" (apt-get install chromium)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing = append(missing, "node")
	}
	if _, err := os.Stat("node_modules/playwright-core/package.json"); err != nil {
		missing = append(missing, "internal/console/e2e/node_modules (npm ci --prefix internal/console/e2e)")
	}
	if len(missing) > 0 {
		testkit.Missing(t, "the browser tests", "missing "+strings.Join(missing, ", "), "")
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "okiba")
	build := exec.Command("go", "build", "-o", bin, "../../../cmd/okiba")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "okiba.json")
	if err := os.WriteFile(config, []byte(`{"principals": [{"name": "viewer", "secret": "`+viewerSecret+`", "grants": ["browse queue:*", "browse topic:*"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startOkiba(t, bin, "serve", "--config", config, "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data"),
		"--auth-token-file", tokenFile, "--log-level", "debug")
	c, err := client.New(base, client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	seed(t, c)

	artifacts, _ := filepath.Abs("artifacts")
	if err := os.RemoveAll(artifacts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 110*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "console.mjs")
	cmd.Env = append(os.Environ(), "OKIBA_URL="+base, "OKIBA_TOKEN="+token, "OKIBA_VIEWER_SECRET="+viewerSecret, "ARTIFACTS="+artifacts, "CHROMIUM="+chromium)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		t.Log(lines.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("console.mjs: %v (screenshots in %s)", err, artifacts)
	}

	// What the pages did, seen through the API.
	bg := context.Background()
	q, err := c.Queue(bg, "payments")
	if err != nil {
		t.Fatal(err)
	}
	if q.Stats.Ready != 4 || q.Stats.DeadLetters != 0 || q.Stats.RedrivenIn != 3 {
		t.Errorf("payments after the redrives: ready %d, dead letters %d, redriven in %d; want 4, 0, 3", q.Stats.Ready, q.Stats.DeadLetters, q.Stats.RedrivenIn)
	}
	if q, err := c.Queue(bg, "scratch"); err != nil || q.Stats.Ready != 0 || q.Stats.Purged != 3 || q.Stats.DeadLetters != 1 {
		t.Errorf("scratch after the purge: %+v, %v", q, err)
	}
	if q, err := c.Queue(bg, "orders"); err != nil || q.Stats.Acked != 1 || q.Stats.Sent != 9 {
		t.Errorf("orders after the page's send, receive and ack: %+v, %v", q, err)
	}
	// The queue made and deleted from the console is gone.
	if _, err := c.Queue(bg, "made-in-console"); !client.IsCode(err, api.CodeQueueNotFound) {
		t.Errorf("made-in-console after its deletion from the console: %v", err)
	}
	// The topic page's live refresh saw a record published from the page.
	if tp, err := c.Topic(bg, "events"); err != nil || tp.Partitions[0].End != 4 {
		t.Errorf("events after the page's publish: %+v, %v", tp, err)
	}
	// The group was sought back to the first record from the page.
	if g, err := c.Group(bg, "events", "projector"); err != nil || g.Partitions[0].Committed != 0 {
		t.Errorf("projector after the page's seek: %+v, %v", g, err)
	}
	// Every playground run was stopped from its page: their queues and topics are gone.
	testkit.Eventually(t, 10*time.Second, func() bool {
		ts, err := c.Topics(bg, "playground-")
		if err != nil {
			t.Fatal(err)
		}
		return len(ts) == 0
	}, "the playground topics to go")
	var left []api.Queue
	testkit.Eventually(t, 10*time.Second, func() bool {
		var err error
		if left, err = c.Queues(bg, "playground-"); err != nil {
			t.Fatal(err)
		}
		return len(left) == 0
	}, "the playground queues to go; %s", testkit.Lazy(func() string {
		return fmt.Sprintf("%d left behind, e.g. %s", len(left), left[0].Name)
	}))
}

// seed makes what console.mjs expects: orders with 5 ready and 2 in flight, payments
// with 1 ready and 3 dead letters (2 invalid-card, 1 timeout), scratch with 3 to purge;
// and a topic, events (seedTopic).
func seed(t *testing.T, c *client.Client) {
	seedTopic(t, c)
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{"orders", "payments", "scratch"} {
		if _, err := c.PutQueue(ctx, q, api.QueueConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(q string, n int) {
		var msgs []client.Message
		for i := range n {
			msgs = append(msgs, client.Message{Body: []byte(fmt.Sprintf(`{"%s": %d}`, q, i+1)),
				Headers: map[string]string{"content-type": "application/json", "correlation-id": fmt.Sprintf("%s-%d", q, i+1)}})
		}
		if _, err := c.SendBatch(ctx, q, msgs); err != nil {
			t.Fatal(err)
		}
	}
	send("orders", 7)
	send("payments", 4)
	send("scratch", 3)
	vis := 10 * time.Minute
	if ds, err := c.Receive(ctx, "orders", client.ReceiveOptions{Max: 2, Visibility: &vis}); err != nil || len(ds) != 2 {
		t.Fatalf("receive orders: %d %v", len(ds), err)
	}
	ds, err := c.Receive(ctx, "payments", client.ReceiveOptions{Max: 3, Visibility: &vis})
	if err != nil || len(ds) != 3 {
		t.Fatalf("receive payments: %d %v", len(ds), err)
	}
	if _, err := c.DeadLetter(ctx, "payments", "invalid-card", "card number fails the Luhn check", ds[0].Receipt, ds[1].Receipt); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeadLetter(ctx, "payments", "timeout", "the payment provider did not answer in 30s", ds[2].Receipt); err != nil {
		t.Fatal(err)
	}
}

var consoleLine = regexp.MustCompile(`msg=console url=(http://\S+)/ `)

// startOkiba runs the okiba binary and returns the console's base URL, read from its
// start-up log. The process is stopped (SIGTERM, then waited for) at cleanup; its log
// goes to the test log.
func startOkiba(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			t.Log("okiba: " + line)
			if m := consoleLine.FindStringSubmatch(line); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-logDone
		cmd.Wait()
	})
	select {
	case u := <-urls:
		return u
	case <-logDone:
		t.Fatal("okiba exited before serving")
	case <-time.After(30 * time.Second):
		t.Fatal("okiba did not log its console URL within 30s")
	}
	return ""
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// seedTopic makes the topic console.mjs expects: events, of two partitions, with three
// records in partition 0 and a hostile one in partition 1; a subscription audit-feed of
// its paid records into the queue audit (one so far); and a consumer group projector
// whose member was handed everything and committed offset 2 of partition 0 and nothing
// of partition 1.
func seedTopic(t *testing.T, c *client.Client) {
	t.Helper()
	ctx := context.Background()
	two := 2
	if _, err := c.PutTopic(ctx, "events", api.TopicConfig{Partitions: &two}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutQueue(ctx, "audit", api.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(ctx, "events", "audit-feed", api.SubscriptionRequest{Queue: "audit", Filter: []byte(`{"type":["paid"]}`)}); err != nil {
		t.Fatal(err)
	}
	call(t, c, "PUT", "/v1/topics/events/groups/projector", api.GroupConfig{}, nil)
	p0, p1 := 0, 1
	recs := []client.Record{
		{Partition: &p0, Body: []byte(`{"n":1}`), Headers: map[string]string{"type": "placed"}},
		{Partition: &p0, Body: []byte(`{"n":2}`), Headers: map[string]string{"type": "paid"}},
		{Partition: &p0, Body: []byte(`{"n":3}`), Headers: map[string]string{"type": "placed"}},
		{Partition: &p1, Body: []byte(`<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>`),
			Key: []byte(`<i>key</i>`), HasKey: true, Headers: map[string]string{"type": `<b>bold</b>`}},
	}
	res, err := c.PublishRecords(ctx, "events", recs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	var pulled api.PullResponse
	call(t, c, "POST", "/v1/topics/events/groups/projector/pull", api.PullRequest{Member: "projector-1", Max: 10}, &pulled)
	if len(pulled.Records) != 4 {
		t.Fatalf("projector was handed %d records, want 4", len(pulled.Records))
	}
	var epoch uint64
	for _, a := range pulled.Assignment {
		if a.Partition == 0 {
			epoch = a.Epoch
		}
	}
	var done api.ReceiptsResponse
	call(t, c, "POST", "/v1/topics/events/groups/projector/commit", api.CommitRequest{Member: "projector-1", Session: pulled.Session,
		Offsets: []api.CommitOffset{{Partition: 0, Offset: 2, Epoch: epoch}}}, &done)
	if len(done.Results) != 1 || done.Results[0].Error != nil {
		t.Fatalf("commit: %+v", done)
	}
}

// call makes a request of the native API with the token: the consumer-group calls,
// which this branch's Go client does not have.
func call(t *testing.T, c *client.Client, method, path string, in, out any) {
	t.Helper()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, c.Server()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}
