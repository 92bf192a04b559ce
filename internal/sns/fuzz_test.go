package sns

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/okiba/okiba/topic"
)

// FuzzPublishForm: any form body decodes into a checked message or a refusal, never a
// panic; what is accepted is within SNS's bounds, its headers sorted as records hold
// them, and none of its attributes takes a name of the front's own.
func FuzzPublishForm(f *testing.F) {
	for _, s := range []string{
		"Message=hi",
		"Message=hi&Subject=s&MessageAttributes.entry.1.Name=a&MessageAttributes.entry.1.Value.DataType=Number&MessageAttributes.entry.1.Value.StringValue=1.5",
		"Message=%7B%22default%22%3A%22d%22%2C%22sqs%22%3A%22q%22%7D&MessageStructure=json",
		"Message=x&MessageAttributes.entry.2.Name=a",
		"Message=x&MessageAttributes.entry.1.Name=b&MessageAttributes.entry.1.Value.DataType=Binary&MessageAttributes.entry.1.Value.BinaryValue=AAE%3D",
		"Message=x&MessageGroupId=g&MessageDeduplicationId=d",
		"Message=x&MessageAttributes.entry.1.Name=AWS.SNS.Subject&MessageAttributes.entry.1.Value.DataType=String&MessageAttributes.entry.1.Value.StringValue=v",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, body string, fifo bool) {
		form, err := url.ParseQuery(body)
		if err != nil {
			return
		}
		ti := topic.TopicInfo{Name: "t"}
		if fifo {
			ti.Name = "t.fifo"
		}
		m, e := readMessage(form, "", ti, true)
		if e != nil {
			if e.Code == "" || e.Status < 400 {
				t.Fatalf("a refusal without a code: %+v", e)
			}
			return
		}
		if m.size > MaxMessageBytes || len(m.in.Body) == 0 || len(m.attrs) > maxAttributes {
			t.Fatalf("accepted out of bounds: size %d, %d attributes", m.size, len(m.attrs))
		}
		if !slices.IsSortedFunc(m.in.Headers, func(a, b topic.Header) int { return strings.Compare(a.Name, b.Name) }) {
			t.Fatalf("headers not sorted: %v", m.in.Headers)
		}
		for _, a := range m.attrs {
			if strings.HasPrefix(a.Name, "AWS.") || strings.HasPrefix(a.Name, "okiba-") {
				t.Fatalf("accepted a reserved attribute name %q", a.Name)
			}
		}
		if fifo != m.in.HasKey {
			t.Fatalf("fifo %v, keyed %v", fifo, m.in.HasKey)
		}
	})
}
