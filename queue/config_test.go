package queue

import (
	"bytes"
	"encoding/hex"
	"errors"
	"maps"
	"reflect"
	"testing"
	"time"
)

// frontConfig is a configuration with every front attribute set.
func frontConfig() Config {
	return Config{
		VisibilityTimeout: 30 * time.Second, MaxDeliveries: 10, DeadLetterQueue: "jobs-dlq.fifo",
		BackoffBase: time.Second, BackoffMax: 5 * time.Minute, Retention: 14 * 24 * time.Hour,
		DedupWindow: 5 * time.Minute, DedupScope: DedupGroup, ContentDedup: true, MaxMessages: 1000,
		MaxMessageSize: MaxMessageSizeLimit, ReceiveWait: 20 * time.Second, OrderedGroups: true,
		Tags: map[string]string{"team": "billing"},
		Front: FrontAttributes{
			Policy:                `{"Version":"2012-10-17","Statement":[]}`,
			RedriveAllowPolicy:    `{"redrivePermission":"denyAll"}`,
			KMSMasterKeyID:        "alias/aws/sqs",
			KMSDataKeyReusePeriod: "300",
			SQSManagedSSE:         "true",
			FIFOThroughputLimit:   "perMessageGroupId",
		},
	}
}

// The bytes below were written by the code before the front attributes had fields, from
// the same configuration with Attrs = {"sqs.Policy": …, "sqs.RedriveAllowPolicy": …,
// "sqs.KmsMasterKeyId": …, "sqs.KmsDataKeyReusePeriodSeconds": …,
// "sqs.SqsManagedSseEnabled": …, "sqs.FifoThroughputLimit": …}; the second adds
// "sqs.SomethingNew": "x" and "other.key": "y", keys no field takes.
const (
	untypedAttrsRecord = "0180a0abfef96207096a6f62732e6669666fe0d403140d6a6f62732d646c712e6669666fd00fc0cf240080a0c88109c0cf240101d00f0080808001c0b8020101047465616d0762696c6c696e6706177371732e4669666f5468726f7567687075744c696d6974117065724d65737361676547726f75704964207371732e4b6d73446174614b65795265757365506572696f645365636f6e647303333030127371732e4b6d734d61737465724b657949640d616c6961732f6177732f7371730a7371732e506f6c696379277b2256657273696f6e223a22323031322d31302d3137222c2253746174656d656e74223a5b5d7d167371732e52656472697665416c6c6f77506f6c6963791f7b22726564726976655065726d697373696f6e223a2264656e79416c6c227d187371732e5371734d616e61676564537365456e61626c65640474727565"
	unknownAttrsRecord = "0180a0abfef96207096a6f62732e6669666fe0d403140d6a6f62732d646c712e6669666fd00fc0cf240080a0c88109c0cf240101d00f0080808001c0b8020101047465616d0762696c6c696e6708096f746865722e6b65790179177371732e4669666f5468726f7567687075744c696d6974117065724d65737361676547726f75704964207371732e4b6d73446174614b65795265757365506572696f645365636f6e647303333030127371732e4b6d734d61737465724b657949640d616c6961732f6177732f7371730a7371732e506f6c696379277b2256657273696f6e223a22323031322d31302d3137222c2253746174656d656e74223a5b5d7d167371732e52656472697665416c6c6f77506f6c6963791f7b22726564726976655065726d697373696f6e223a2264656e79416c6c227d107371732e536f6d657468696e674e65770178187371732e5371734d616e61676564537365456e61626c65640474727565"
)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFrontAttributesKeepTheirEncoding: typed front attributes are written as the same
// bytes as the untyped map was, and those bytes read back into the fields.
func TestFrontAttributesKeepTheirEncoding(t *testing.T) {
	t.Parallel()
	want := mustHex(t, untypedAttrsRecord)
	r := &QueuePutRecord{Now: 1700000000000, QueueID: 7, Name: "jobs.fifo", Config: frontConfig()}
	if got := r.AppendTo(nil); !bytes.Equal(got, want) {
		t.Fatalf("encoding changed:\n got %x\nwant %x", got, want)
	}
	dec, err := DecodeRecord(want)
	if err != nil {
		t.Fatal(err)
	}
	got := dec.(*QueuePutRecord).Config
	if !got.Equal(frontConfig()) || got.Front.Unknown != nil {
		t.Fatalf("decoded front attributes %+v, want %+v", got.Front, frontConfig().Front)
	}
}

// TestUnknownFrontAttributesArePreserved: an attribute key no field takes (an in-process
// user of an older okiba could have stored one) is read into Unknown, written back as it
// was, survives a snapshot and a restore, and does not stop the machine from starting.
func TestUnknownFrontAttributesArePreserved(t *testing.T) {
	t.Parallel()
	raw := mustHex(t, unknownAttrsRecord)
	dec, err := DecodeRecord(raw)
	if err != nil {
		t.Fatal(err)
	}
	r := dec.(*QueuePutRecord)
	unknown := map[string]string{"sqs.SomethingNew": "x", "other.key": "y"}
	if !maps.Equal(r.Config.Front.Unknown, unknown) {
		t.Fatalf("Unknown = %v, want %v", r.Config.Front.Unknown, unknown)
	}
	known := r.Config.Front
	known.Unknown = nil
	if want := frontConfig().Front; !known.Equal(want) {
		t.Fatalf("known attributes %+v, want %+v", known, want)
	}
	if got := r.AppendTo(nil); !bytes.Equal(got, raw) {
		t.Fatalf("written back differently:\n got %x\nwant %x", got, raw)
	}
	if err := r.Config.Validate(r.Name); err != nil {
		t.Fatalf("a configuration read from disk does not validate: %v", err)
	}

	// Replayed, then checkpointed and restored, as a broker's start-up does.
	m := New()
	if err := m.Apply(r); err != nil {
		t.Fatal(err)
	}
	m2, err := Restore(bytes.Join(m.Snapshot(nil), nil), nil)
	if err != nil {
		t.Fatalf("restore with unknown attributes: %v", err)
	}
	qi, err := m2.Queue("jobs.fifo")
	if err != nil {
		t.Fatal(err)
	}
	if !qi.Config.Equal(r.Config) || !maps.Equal(qi.Config.Front.Unknown, unknown) {
		t.Fatalf("restored front attributes %+v, want %+v", qi.Config.Front, r.Config.Front)
	}
}

// TestFrontAttributesEveryFieldStored: every field of FrontAttributes has a key of its
// own in the stored map, so a field added without one is caught here rather than lost
// on the first restart.
func TestFrontAttributesEveryFieldStored(t *testing.T) {
	t.Parallel()
	var a FrontAttributes
	v := reflect.ValueOf(&a).Elem()
	n := 0
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.String {
			f.SetString(v.Type().Field(i).Name + "-value")
			n++
		}
	}
	m := a.stored()
	if len(m) != n {
		t.Fatalf("%d string fields, %d stored keys: %v", n, len(m), m)
	}
	back := frontAttributes(m)
	if !back.Equal(a) || back.Unknown != nil {
		t.Fatalf("read back %+v, want %+v", back, a)
	}
	for _, f := range frontFields {
		b := a
		*f.field(&b) = "other"
		if b.Equal(a) {
			t.Errorf("Equal ignores %s", f.key)
		}
	}
}

func TestFrontAttributesCloneAndValidate(t *testing.T) {
	t.Parallel()
	c := frontConfig()
	c.Front.Unknown = map[string]string{"other.key": "y"}
	d := c.Clone()
	d.Front.Unknown["other.key"] = "changed"
	if c.Front.Unknown["other.key"] != "y" {
		t.Fatal("Clone shares Unknown with the original")
	}
	if c.Equal(d) {
		t.Fatal("Equal ignores Unknown")
	}

	// A known key belongs in its field: in Unknown it would be written twice.
	c.Front.Unknown = map[string]string{"sqs.Policy": "{}"}
	var ce *ConfigError
	if err := c.Validate("jobs.fifo"); !errors.As(err, &ce) || ce.Field != "attributes" {
		t.Fatalf("known key in Unknown: %v", err)
	}
	c.Front.Unknown = map[string]string{"": "x"}
	if err := c.Validate("jobs.fifo"); !errors.As(err, &ce) || ce.Field != "attributes" {
		t.Fatalf("empty key in Unknown: %v", err)
	}
}
