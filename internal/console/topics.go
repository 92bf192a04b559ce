package console

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/auth"
)

// The topic pages are rendered on the server, where the queue pages draw themselves from
// JSON: a topic page is tables of numbers that change at the pace of publishes and
// commits, with no chart to feed, and html/template then escapes every record body, key,
// header and filter in one place rather than in each script that shows one. The pages
// refresh their live sections from their own URL (static/topics.js, with ?live=1, which
// leaves out the record view: it reads only when asked).
//
// What a topic is, its subscriptions and its consumer groups are read through Service,
// as the queue pages' numbers are. The record view reads the partition through the
// console's client (Options.Client), since reading records is a call of the native API
// that Service does not offer in types the console can name; without a client it says
// so and the rest of the page stands. That client is the node's admin, so the page reads
// records only after its route's rule, browse on the topic, which is what reading records
// by offset needs in the native API too.

const (
	recordsShown    = 20      // records the record view shows unless asked for more
	recordsMax      = 100     // and at most
	recordBodyShown = 512     // bytes of a body shown before it is cut
	recordKeyShown  = 128     // bytes of a key
	recordReadBytes = 1 << 20 // bytes one read of the record view asks for at most
	rateWindow      = time.Minute
)

// kv is a label and its value, in the order shown.
type kv struct{ K, V string }

// topicRow is a topic as the list and the top of its page show it.
type topicRow struct {
	api.Topic
	Retention string
	Rate      float64 // records published per second over the last minute
	HasRate   bool    // false until the sampler has seen the topic twice
	LastTime  *time.Time
}

type topicsPage struct {
	Topics         []topicRow
	Hidden         int // playground topics left out
	ShowPlayground bool
}

type topicPage struct {
	topicRow
	Config        []kv
	Subscriptions []api.Subscription
	Groups        []api.Group
	Problems      []string // what could not be read, said rather than hidden
	Read          *readView
}

// readView is the record view: records of one partition from an offset.
type readView struct {
	Partition   int
	Partitions  []int
	Offset      uint64
	Max         int
	Start, End  uint64
	Next        uint64
	Records     []recordView
	Older       string // links to the records before and after, when there are any
	Newer       string
	Latest      string
	Range       string // what the partition retains, in words
	Error       string
	EmptyReason string
}

type recordView struct {
	Offset    uint64
	Time      time.Time
	HasKey    bool
	Key       string
	KeyBinary bool
	Headers   []kv
	Body      string
	Binary    bool
	Cut       bool
	Size      int64
}

func (c *Console) row(t api.Topic) topicRow {
	r := topicRow{Topic: t, Retention: retentionText(t.Config)}
	r.Rate, r.HasRate = c.hist.publishRate(t.Name, rateWindow)
	for i := range t.Partitions {
		if lt := t.Partitions[i].LastTime; lt != nil && (r.LastTime == nil || lt.After(*r.LastTime)) {
			r.LastTime = lt
		}
	}
	return r
}

// topicsList serves /topics: every topic but the playground's, unless asked for.
func (c *Console) topicsList(w http.ResponseWriter, r *http.Request) {
	show := r.URL.Query().Get("playground") == "show"
	page := topicsPage{ShowPlayground: show, Topics: []topicRow{}}
	for _, t := range c.svc.Topics(r.Context(), "") {
		if !auth.Allowed(r.Context(), access.Browse, access.TopicNamed(t.Name)) {
			continue // the service filters by the same rule; the console does not rely on it
		}
		if !show && strings.HasPrefix(t.Name, PlaygroundPrefix) {
			page.Hidden++
			continue
		}
		page.Topics = append(page.Topics, c.row(t))
	}
	c.write(w, r, http.StatusOK, "topics", pageData{Title: "Topics", Page: "topics", Data: page,
		CanCreate: auth.Allowed(r.Context(), access.Manage, access.TopicNamed("*"))})
}

// topicPage serves /topics/{name}.
func (c *Console) topicPage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx := r.Context()
	t, e := c.svc.Topic(ctx, name)
	if e != nil {
		if e.Code == api.CodeForbidden {
			c.refuse(w, r, true, e)
			return
		}
		c.write(w, r, http.StatusNotFound, "notfound", pageData{Title: "No such topic", Page: "notfound", Topic: name})
		return
	}
	page := topicPage{topicRow: c.row(t), Config: topicConfig(t)}
	var err *api.Error
	if page.Subscriptions, err = c.svc.Subscriptions(ctx, name); err != nil {
		page.Problems = append(page.Problems, "subscriptions: "+err.Message)
	}
	if page.Groups, err = c.svc.Groups(ctx, name); err != nil {
		page.Problems = append(page.Problems, "consumer groups: "+err.Message)
	}
	if r.URL.Query().Get("live") == "" {
		page.Read = c.readRecords(r.Context(), t, r.URL.Query())
	}
	d := pageData{Title: name, Page: "topic", Topic: name, Data: page}
	d.offers(ctx, access.TopicNamed(name)) // seeking a group is receive's
	c.write(w, r, http.StatusOK, "topic", d)
}

// readRecords reads the records the query asks for: ?partition= (default 0), ?offset=
// (default: the last ?max= records, 20 unless asked), through the console's client.
func (c *Console) readRecords(ctx context.Context, t api.Topic, q url.Values) *readView {
	v := &readView{Max: recordsShown}
	for i := range t.Partitions {
		v.Partitions = append(v.Partitions, i)
	}
	if s := q.Get("max"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > recordsMax {
			v.Error = fmt.Sprintf("max must be a number from 1 to %d, got %q", recordsMax, s)
			return v
		}
		v.Max = n
	}
	if s := q.Get("partition"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n >= len(t.Partitions) {
			v.Error = fmt.Sprintf("the topic has partitions 0 to %d; there is no partition %q", len(t.Partitions)-1, s)
			return v
		}
		v.Partition = n
	}
	p := t.Partitions[v.Partition]
	v.Start, v.End = p.Start, p.End
	v.Offset = max(p.Start, p.End-min(p.End, uint64(v.Max)))
	if s := q.Get("offset"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			v.Error = fmt.Sprintf("offset must be a whole number, got %q", s)
			return v
		}
		v.Offset = n
	}
	if latest := max(p.Start, p.End-min(p.End, uint64(v.Max))); v.Offset != latest {
		v.Latest = v.link(v.Partition, latest)
	}
	if c.opts.Client == nil {
		v.Error = "this console has no client of the node's API to read records with"
		return v
	}
	if v.Offset == p.End {
		v.Next = p.End
		v.EmptyReason = "No records from this offset yet: it is the partition's end, where the next record will be."
		if p.Start == p.End {
			v.EmptyReason = "This partition holds no records."
		}
		v.setLinks()
		return v
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b, err := c.opts.Client.ReadPartition(ctx, t.Name, v.Partition, client.ReadOptions{Offset: v.Offset, Max: v.Max, MaxBytes: recordReadBytes})
	if err != nil {
		v.Error = err.Error()
		if client.IsCode(err, api.CodeOffsetOutOfRange) {
			v.Error = fmt.Sprintf("offset %d is not retained: partition %d holds offsets %d to %d (its end, %d, is where the next record goes)",
				v.Offset, v.Partition, p.Start, max(p.End, 1)-1, p.End)
		}
		return v
	}
	v.Start, v.End, v.Next = b.Start, b.End, b.Next
	for _, rec := range b.Records {
		rv := recordView{Offset: rec.Offset, Time: rec.Time, HasKey: rec.HasKey, Size: int64(len(rec.Body))}
		rv.Body, rv.Cut, rv.Binary = shown(rec.Body, recordBodyShown)
		if rec.HasKey {
			rv.Key, _, rv.KeyBinary = shown(rec.Key, recordKeyShown)
		}
		for _, k := range slices.Sorted(maps.Keys(rec.Headers)) {
			rv.Headers = append(rv.Headers, kv{k, rec.Headers[k]})
		}
		v.Records = append(v.Records, rv)
	}
	v.setLinks()
	return v
}

func (v *readView) link(partition int, offset uint64) string {
	return fmt.Sprintf("?partition=%d&offset=%d&max=%d#records", partition, offset, v.Max)
}

func (v *readView) setLinks() {
	v.Range = fmt.Sprintf("Partition %d holds no records; the next one gets offset %s.", v.Partition, fmtCount(v.End))
	switch {
	case v.End == v.Start+1:
		v.Range = fmt.Sprintf("Partition %d retains offset %s; the next record gets offset %s.", v.Partition, fmtCount(v.Start), fmtCount(v.End))
	case v.End > v.Start:
		v.Range = fmt.Sprintf("Partition %d retains offsets %s to %s; the next record gets offset %s.", v.Partition, fmtCount(v.Start), fmtCount(v.End-1), fmtCount(v.End))
	}
	if v.Offset > v.Start {
		v.Older = v.link(v.Partition, max(v.Start, v.Offset-min(v.Offset, uint64(v.Max))))
	}
	if v.Next < v.End {
		v.Newer = v.link(v.Partition, v.Next)
	}
}

// shown is the part of a body or key the page shows: its text up to limit bytes (cut on a
// character boundary), or, when it is not UTF-8, the hex of its first bytes. The page
// escapes it (html/template) like every other value.
func shown(b []byte, limit int) (text string, cut, binary bool) {
	if !utf8.Valid(b) {
		n := min(len(b), limit/8)
		return hex.EncodeToString(b[:n]), len(b) > n, true
	}
	if len(b) <= limit {
		return string(b), false, false
	}
	at := limit
	for at > 0 && !utf8.RuneStart(b[at]) {
		at--
	}
	return string(b[:at]), true, false
}

func retentionText(cfg api.TopicConfig) string {
	var parts []string
	if r := cfg.Retention; r == nil || r.Forever || r.Age == 0 {
		parts = append(parts, "forever")
	} else {
		parts = append(parts, fmtDur(r.Age))
	}
	if b := cfg.RetentionBytes; b != nil && *b > 0 {
		parts = append(parts, fmtBytes(*b))
	}
	if n := cfg.RetentionRecords; n != nil && *n > 0 {
		parts = append(parts, fmtCount(*n)+" records")
	}
	return strings.Join(parts, ", ")
}

// topicConfig is the configuration as the page lists it.
func topicConfig(t api.Topic) []kv {
	c := t.Config
	opt := func(p *int64, f func(int64) string) string {
		if p == nil || *p == 0 {
			return "none"
		}
		return f(*p)
	}
	dur := func(d *api.Duration, zero string) string {
		if d == nil || d.D() == 0 {
			return zero
		}
		return fmtDur(d.D())
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	out := []kv{
		{"Partitions", strconv.Itoa(len(t.Partitions))},
		{"Retention", retentionText(c)},
		{"Retention bytes", opt(c.RetentionBytes, fmtBytes)},
		{"Retention records", opt(c.RetentionRecords, func(n int64) string { return fmtCount(n) })},
		{"Discard", str(c.Discard)},
		{"Max record size", opt(c.MaxRecordSize, fmtBytes)},
		{"Dedup window", dur(c.DedupWindow, "off")},
		{"Segment bytes", opt(c.SegmentBytes, fmtBytes)},
		{"Segment age", dur(c.SegmentAge, "–")},
		{"Key hash", str(c.Hash)},
		{"Created", fmtTime(t.CreatedAt)},
		{"Updated", fmtTime(t.UpdatedAt)},
	}
	for _, k := range slices.Sorted(maps.Keys(c.Tags)) {
		out = append(out, kv{"Tag " + k, c.Tags[k]})
	}
	return out
}

// Formatting for people, shared by the topic templates.

type integer interface {
	~int | ~int64 | ~uint64 | ~int32 | ~uint32
}

// fmtCount writes n with thousands separators: 1,234,567.
func fmtCount[T integer](n T) string {
	s := fmt.Sprint(n)
	digits := strings.TrimPrefix(s, "-")
	var b strings.Builder
	b.WriteString(s[:len(s)-len(digits)])
	for i := range len(digits) {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(digits[i])
	}
	return b.String()
}

// fmtBytes writes a size in binary units: 512 B, 5.3 KiB, 64 MiB.
func fmtBytes(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v, i = v/1024, i+1
	}
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %s", int64(v), units[i])
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// fmtDur writes a duration the way the console's scripts do: 850 ms, 12.3 s, 4 min 05 s,
// 3 h 02 min, 7 d.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		m, s := int(d.Minutes()), int(d.Seconds())%60
		if s == 0 {
			return fmt.Sprintf("%d min", m)
		}
		return fmt.Sprintf("%d min %02d s", m, s)
	case d < 48*time.Hour:
		h, m := int(d.Hours()), int(d.Minutes())%60
		if m == 0 {
			return fmt.Sprintf("%d h", h)
		}
		return fmt.Sprintf("%d h %02d min", h, m)
	}
	days, h := int(d.Hours())/24, int(d.Hours())%24
	if h == 0 {
		return fmt.Sprintf("%d d", days)
	}
	return fmt.Sprintf("%d d %d h", days, h)
}

// fmtTime writes a time in UTC, to the second: the server does not know the reader's zone.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05") + " UTC"
}

func fmtSecs(s float64) string {
	if s <= 0 {
		return "0"
	}
	return fmtDur(time.Duration(s * float64(time.Second)))
}

func fmtRate(r float64) string {
	switch {
	case r == 0:
		return "0"
	case r >= 100:
		return fmtCount(int64(r + 0.5))
	case r >= 10:
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	return strconv.FormatFloat(r, 'f', 2, 64)
}

// templateFuncs are the formatting functions the templates call.
func templateFuncs(asset func(string) string) map[string]any {
	return map[string]any{
		"asset": asset,
		"count": func(v any) string {
			switch n := v.(type) {
			case int:
				return fmtCount(n)
			case int64:
				return fmtCount(n)
			case uint64:
				return fmtCount(n)
			}
			return fmt.Sprint(v)
		},
		"bytes": fmtBytes,
		"when": func(v any) string {
			switch t := v.(type) {
			case time.Time:
				return fmtTime(t)
			case *time.Time:
				if t != nil {
					return fmtTime(*t)
				}
			}
			return "–"
		},
		"secs": fmtSecs,
		"dur": func(d *api.Duration) string {
			if d == nil {
				return "–"
			}
			return fmtDur(d.D())
		},
		"rate": fmtRate,
		"offsets": func(offs []uint64) string {
			s := make([]string, len(offs))
			for i, o := range offs {
				s[i] = fmtCount(o)
			}
			return strings.Join(s, ", ")
		},
		"owner": func(p api.GroupPartition) string {
			return cmp.Or(p.Owner, "–")
		},
	}
}
