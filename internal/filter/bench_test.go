package filter

import (
	"testing"
)

// The benchmarks match one record against a policy of the shape a subscription would
// hold: a few keys, a numeric range, a prefix and an $or, the record matching.

func BenchmarkMatchAttributes(b *testing.B) {
	p, err := Parse([]byte(`{"kind": ["order", "refund"], "amount": [{"numeric": [">", 10, "<=", 1000]}],
		"okiba-key": [{"prefix": "eu-"}], "$or": [{"vip": [{"exists": true}]}, {"tier": [{"equals-ignore-case": "GOLD"}]}]}`), Attributes)
	if err != nil {
		b.Fatal(err)
	}
	in := Input{
		Headers: map[string]string{"kind": "refund", "amount": "99.5", "tier": "gold", "region": "eu-west", "trace": "abc123"},
		Key:     "eu-1234", HasKey: true,
	}
	if !p.Match(in) {
		b.Fatal("the record should match")
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Match(in)
	}
}

// benchBody is a body of about 1 KiB, of which the policy reads three properties.
var benchBody = []byte(`{
  "id": "ord_8f14e45fceea167a5a36dedd4bea2543",
  "kind": "refund",
  "created": "2025-11-03T23:28:01.631Z",
  "customer": {"id": "cus_42", "tier": "gold", "country": "PT", "email": "someone@example.org"},
  "amount": {"value": 99.5, "currency": "EUR"},
  "lines": [
    {"sku": "A-100", "qty": 1, "price": 49.5, "tags": ["book", "paper"]},
    {"sku": "B-200", "qty": 2, "price": 25.0, "tags": ["pen"]}
  ],
  "shipping": {"method": "courier", "address": {"line1": "Rua Augusta 1", "city": "Lisboa", "zip": "1100-048"}},
  "notes": "leave at the door \u2014 thanks",
  "metadata": {"source": "web", "campaign": null, "experiments": ["a", "b", "c"], "retries": 0},
  "history": [
    {"at": "2025-11-03T23:28:01Z", "state": "placed"},
    {"at": "2025-11-04T08:00:00Z", "state": "paid"},
    {"at": "2025-11-05T10:12:44Z", "state": "refund-requested"}
  ]
}`)

func BenchmarkMatchBody(b *testing.B) {
	p, err := Parse([]byte(`{"kind": ["order", "refund"], "amount": {"value": [{"numeric": [">", 10, "<=", 1000]}]},
		"$or": [{"customer": {"tier": [{"equals-ignore-case": "GOLD"}]}}, {"lines": {"tags": ["vip"]}}]}`), Body)
	if err != nil {
		b.Fatal(err)
	}
	in := Input{Body: benchBody}
	if !p.Match(in) {
		b.Fatal("the record should match")
	}
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	for b.Loop() {
		p.Match(in)
	}
}
