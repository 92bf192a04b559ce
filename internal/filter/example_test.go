package filter_test

import (
	"fmt"

	"github.com/okiba/okiba/internal/filter"
)

func Example() {
	p, err := filter.Parse([]byte(`{
		"kind": ["order", "refund"],
		"amount": [{"numeric": [">", 0, "<=", 500]}],
		"okiba-key": [{"prefix": "eu-"}]
	}`), filter.Attributes)
	if err != nil {
		panic(err)
	}
	rec := filter.Input{
		Headers: map[string]string{"kind": "refund", "amount": "120.5"},
		Key:     "eu-7731", HasKey: true,
	}
	fmt.Println(p.Match(rec))
	rec.Headers["amount"] = "900"
	fmt.Println(p.Match(rec))
	fmt.Println(p)
	// Output:
	// true
	// false
	// {"amount":[{"numeric":[">",0,"<=",500]}],"kind":["order","refund"],"okiba-key":[{"prefix":"eu-"}]}
}

func ExampleParse_error() {
	_, err := filter.Parse([]byte(`{"price": [{"numeric": [">", 100, "<", 10]}]}`), filter.Attributes)
	fmt.Println(err)
	// Output:
	// invalid filter policy at $.price[0].numeric: the lower bound must be less than the upper bound (numbers compare to five decimal places)
}

func ExampleParse_body() {
	p, err := filter.Parse([]byte(`{"lines": {"sku": ["A-1"], "qty": [{"numeric": [">", 1]}]}}`), filter.Body)
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Match(filter.Input{Body: []byte(`{"lines": [{"sku": "B-2", "qty": 1}, {"sku": "A-1", "qty": 3}]}`)}))
	fmt.Println(p.Match(filter.Input{Body: []byte(`{"lines": [{"sku": "A-1", "qty": 1}, {"sku": "B-2", "qty": 3}]}`)}))
	// Output:
	// true
	// false
}
