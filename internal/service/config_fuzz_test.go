package service

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/queue"
)

// FuzzQueueConfig: any JSON body of a queue PUT either is refused or yields a
// configuration that validates, survives the log's encoding, and compares equal to
// itself after a round trip through the API's JSON.
func FuzzQueueConfig(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"visibility_timeout":"30s","max_deliveries":3,"dead_letter_queue":"orders-dlq"}`,
		`{"dead_letter_queue":"none"}`, `{"retention":0,"delay":"1h"}`, `{"dedup_scope":"group","content_dedup":true}`,
		`{"max_messages":10,"max_bytes":1e6,"max_message_size":1024,"receive_wait":20}`, `{"tags":{"team":"pay"}}`,
		`{"visibility_timeout":-1}`, `{"backoff_base":"1s","backoff_max":"500ms"}`, `{"ordered_groups":false}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var in api.QueueConfig
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if dec.Decode(&in) != nil {
			return
		}
		cfg := queue.DefaultConfig()
		cfg.DeadLetterQueue = "q-dlq"
		if applyConfig(&cfg, &in) != nil || cfg.Validate("q") != nil {
			return
		}
		// Through the log: a queue record with this config decodes to the same config.
		rec := &queue.QueuePutRecord{Now: 1, QueueID: 1, Name: "q", Config: cfg}
		back, err := queue.DecodeRecord(rec.AppendTo(nil))
		if err != nil {
			t.Fatalf("a valid config does not decode from its record: %v", err)
		}
		if got := back.(*queue.QueuePutRecord).Config; !got.Equal(cfg) {
			t.Fatalf("config changed through the log:\n%+v\n%+v", cfg, got)
		}
		// Through the API: what GET shows, PUT back, gives the same config.
		wire, err := json.Marshal(wireConfig(cfg))
		if err != nil {
			t.Fatal(err)
		}
		var again api.QueueConfig
		if err := json.Unmarshal(wire, &again); err != nil {
			t.Fatalf("the API's own config JSON does not decode: %v (%s)", err, wire)
		}
		cfg2 := queue.DefaultConfig()
		cfg2.DeadLetterQueue = "q-dlq"
		if err := applyConfig(&cfg2, &again); err != nil || !cfg2.Equal(cfg) {
			t.Fatalf("config changed through the API JSON: %v\n%+v\n%+v", err, cfg, cfg2)
		}
	})
}
