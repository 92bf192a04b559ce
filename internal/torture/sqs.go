package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/okiba/okiba/client"
)

// sqsClient speaks the few SQS JSON-protocol actions the torture load needs, over plain
// HTTP (the server accepts unsigned requests when it has no credentials configured), so
// that the same engine is checked through its second front door.
type sqsClient struct {
	url string
	hc  *http.Client
}

type sqsError struct {
	Status int
	Type   string `json:"__type"`
	Msg    string `json:"message"`
}

func (e *sqsError) Error() string { return fmt.Sprintf("sqs %d %s: %s", e.Status, e.Type, e.Msg) }

// call posts one action and decodes its answer; it returns the response headers too.
func (c *sqsClient) call(ctx context.Context, action string, in, out any) (http.Header, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", c.url+"/", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "AmazonSQS."+action)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		e := &sqsError{Status: resp.StatusCode}
		json.Unmarshal(data, e)
		return resp.Header, e
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.Header, err
		}
	}
	return resp.Header, nil
}

// produceSQS is produce over SendMessageBatch (at most 10 entries a call).
func produceSQS(ctx context.Context, c *sqsClient, h *history, p int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(p)+10))
	seq := map[string]int{}
	n := 0
	type entry struct {
		ID             string `json:"Id"`
		MessageBody    string `json:"MessageBody"`
		MessageGroupID string `json:"MessageGroupId,omitempty"`
	}
	for ctx.Err() == nil {
		k := 1 + rng.IntN(8)
		entries := make([]entry, k)
		for i := range entries {
			n++
			group := ""
			if p%2 == 0 {
				group = fmt.Sprintf("s%d.%d", p, rng.IntN(3))
				seq[group]++
			}
			entries[i] = entry{ID: strconv.Itoa(i), MessageBody: body(p, n, group, seq[group]), MessageGroupID: group}
		}
		h.mu.Lock()
		for _, e := range entries {
			h.attempted[e.MessageBody] = true
		}
		h.mu.Unlock()
		var out struct {
			Successful []struct {
				ID        string `json:"Id"`
				MessageID string `json:"MessageId"`
			}
		}
		if _, err := c.call(ctx, "SendMessageBatch", map[string]any{"QueueUrl": queueName, "Entries": entries}, &out); err != nil {
			pause(ctx, 20*time.Millisecond)
			continue
		}
		if len(out.Successful) < len(entries) {
			pause(ctx, 50*time.Millisecond) // refused entries: the queue is full
		}
		h.mu.Lock()
		for _, s := range out.Successful {
			i, _ := strconv.Atoi(s.ID)
			if i >= 0 && i < len(entries) {
				h.sent[entries[i].MessageBody] = s.MessageID
				h.bodyOf[s.MessageID] = entries[i].MessageBody
				h.sqsSent++
			}
		}
		h.mu.Unlock()
	}
}

// consumeSQS is consume over ReceiveMessage, DeleteMessage (an ack counts only when the
// response header x-okiba-settled says true: SQS answers 200 for a stale receipt too) and
// ChangeMessageVisibility to 0 (a nack). SQS has no explicit dead-letter.
func consumeSQS(ctx context.Context, c *sqsClient, h *history, id int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(id)+2000))
	for ctx.Err() == nil {
		sentAt := time.Now()
		var out struct {
			Messages []struct {
				MessageID     string            `json:"MessageId"`
				ReceiptHandle string            `json:"ReceiptHandle"`
				Body          string            `json:"Body"`
				Attributes    map[string]string `json:"Attributes"`
			}
		}
		_, err := c.call(ctx, "ReceiveMessage", map[string]any{
			"QueueUrl": queueName, "MaxNumberOfMessages": 10, "WaitTimeSeconds": 1,
			"VisibilityTimeout": int(visibility / time.Second), "MessageSystemAttributeNames": []string{"All"},
		}, &out)
		if err != nil {
			pause(ctx, 50*time.Millisecond)
			continue
		}
		if len(out.Messages) == 0 {
			continue
		}
		ds := make([]client.Delivery, len(out.Messages))
		for i, m := range out.Messages {
			n, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
			ds[i] = client.Delivery{ID: m.MessageID, Receipt: m.ReceiptHandle, Body: []byte(m.Body),
				Group: m.Attributes["MessageGroupId"], Deliveries: uint32(n)}
		}
		h.record(ds, queueName, sentAt)
		all := h.isDraining()
		blocked := map[string]bool{}
		for _, d := range ds {
			ack := all || rng.IntN(100) < 88 || (d.Group != "" && rng.IntN(8) != 0)
			if d.Group != "" && blocked[d.Group] {
				ack = false
			}
			if !ack {
				if d.Group != "" {
					blocked[d.Group] = true
				}
				if rng.IntN(2) == 0 { // else abandon: the lease expires
					c.call(ctx, "ChangeMessageVisibility", map[string]any{"QueueUrl": queueName, "ReceiptHandle": d.Receipt, "VisibilityTimeout": 0}, nil)
				}
				continue
			}
			h.mu.Lock()
			h.ackTry[d.Receipt] = true
			if _, ok := h.ackTryAt[d.Receipt]; !ok {
				h.ackTryAt[d.Receipt] = time.Now()
			}
			h.mu.Unlock()
			hdr, err := c.call(ctx, "DeleteMessage", map[string]any{"QueueUrl": queueName, "ReceiptHandle": d.Receipt}, nil)
			if err == nil && hdr.Get("x-okiba-settled") == "true" {
				now := time.Now()
				h.mu.Lock()
				if _, seen := h.ackOK[d.ID]; !seen {
					h.ackOK[d.ID] = now
				}
				h.sqsAcked++
				h.mu.Unlock()
			}
		}
	}
}
