// Package metrics exposes okiba in the Prometheus text format (GET /metrics): per-queue
// depth by state, counters and Little's-law times, and per topic, consumer group and
// subscription what is retained, published and still to read, read from the broker at
// scrape time; log group-commit latencies and batch sizes, checkpoint durations and HTTP
// request durations measured as they happen.
//
// Wiring, as okiba serve does it:
//
//	m := metrics.New(metrics.Options{})
//	b, _ := broker.Open(broker.Config{Dir: dir, Observer: m})
//	m.Watch(b)
//	srv := server.New(b, server.Options{Observe: m.ObserveRequest})
//	srv.Handle("/metrics", m.Handler())
//
// Cardinality is bounded: per-queue series are labelled by queue name, and queues are
// bounded by the broker's MaxQueues; dead letters are labelled by reason, where the
// broker's own reasons (max_deliveries, expired, corrupt) and the default consumer reason always
// have their own series and other consumer reasons (free text) get one only for the
// first Options.MaxReasons seen per queue, the rest counting as "other". Topic series
// are labelled by topic, group series by topic and group, subscription series by topic,
// subscription and queue, bounded by the broker's limits on each; none is per partition.
// The metric names are listed in docs/operations.md.
package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/buildinfo"
	"github.com/okiba/okiba/wal"
)

// Options configure Metrics. The zero value means the defaults.
type Options struct {
	// MaxReasons is how many distinct consumer dead-letter reasons of one queue get a
	// series of their own; later ones count as reason "other". Defaults to 10.
	MaxReasons int
	// NoRuntime leaves out the Go runtime and process collectors (go_*, process_*).
	NoRuntime bool
	// ScrapeCache is how long one scrape's result answers the next scrapes: the
	// per-queue series visit every queue under the broker's lock, so scrapers in a loop
	// must not make it more often than this. Defaults to one second; negative turns it
	// off.
	ScrapeCache time.Duration
	// Now is the cache's clock. Defaults to time.Now.
	Now func() time.Time
}

// OtherReason labels the dead letters of reasons beyond Options.MaxReasons.
const OtherReason = "other"

// Metrics is okiba's instrumentation. It implements broker.Observer. It is safe for
// concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	walAppend, walWrite, walSync prometheus.Histogram
	batchRecords, batchBytes     prometheus.Histogram
	ckptSeconds                  prometheus.Histogram
	ckptBytes                    prometheus.Gauge
	ckptFailures                 prometheus.Counter
	httpSeconds                  *prometheus.HistogramVec

	queues *queueCollector
	topics *topicCollector
	cache  *cachedGatherer
}

// cachedGatherer answers every Gather within ttl of the last one with its result: N
// scrapers cost one visit of the broker a second, not N.
type cachedGatherer struct {
	g   prometheus.Gatherer
	ttl time.Duration
	now func() time.Time

	mu   sync.Mutex // held while gathering: concurrent scrapes wait for one result
	at   time.Time
	fams []*dto.MetricFamily
	err  error
}

func (c *cachedGatherer) Gather() ([]*dto.MetricFamily, error) {
	if c.ttl < 0 {
		return c.g.Gather()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if c.fams != nil && now.Sub(c.at) < c.ttl && !now.Before(c.at) {
		return c.fams, c.err // the families are only read by the encoders
	}
	c.fams, c.err = c.g.Gather()
	c.at = now
	return c.fams, c.err
}

var _ broker.Observer = (*Metrics)(nil)

// New returns a Metrics with its own registry. Call Watch once the broker is open.
func New(opts Options) *Metrics {
	if opts.MaxReasons <= 0 {
		opts.MaxReasons = 10
	}
	m := &Metrics{reg: prometheus.NewRegistry()}
	if opts.ScrapeCache == 0 {
		opts.ScrapeCache = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	m.cache = &cachedGatherer{g: m.reg, ttl: opts.ScrapeCache, now: opts.Now}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
		m.reg.MustRegister(h)
		return h
	}
	latency := prometheus.ExponentialBuckets(50e-6, 2, 16) // 50µs … 1.6s
	m.walAppend = hist("okiba_wal_append_seconds",
		"Time from a group commit's first append until the batch is durable: the longest wait of any record in it.", latency)
	m.walWrite = hist("okiba_wal_write_seconds", "Time a group commit spends writing its batch (fsync excluded).", latency)
	m.walSync = hist("okiba_wal_fsync_seconds", "Time a group commit spends in fsync.", latency)
	m.batchRecords = hist("okiba_wal_batch_records", "Records per group commit.", prometheus.ExponentialBuckets(1, 2, 14))
	m.batchBytes = hist("okiba_wal_batch_bytes", "Bytes per group commit.", prometheus.ExponentialBuckets(256, 4, 10))
	m.ckptSeconds = hist("okiba_checkpoint_seconds", "Time to write a checkpoint and collect the segments it frees.",
		prometheus.ExponentialBuckets(1e-3, 2, 16))
	m.ckptBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "okiba_checkpoint_bytes", Help: "Size of the state written by the latest checkpoint."})
	m.ckptFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "okiba_checkpoint_failures_total", Help: "Checkpoints that failed."})
	m.httpSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "okiba_http_request_duration_seconds",
		Help:    "HTTP requests by route (the pattern matched; sqs for the SQS API), method and status code. Long polls last up to their wait.",
		Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"route", "method", "code"})
	// The build as a constant series, to join on or to count versions across a fleet.
	b := buildinfo.Get()
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "okiba_build_info",
		Help: "Always 1; the labels say which okiba this is (okiba version)."}, []string{"version", "commit", "go_version"})
	build.WithLabelValues(b.Version, b.Commit, b.GoVersion).Set(1)
	m.reg.MustRegister(m.ckptBytes, m.ckptFailures, m.httpSeconds, build)
	if !opts.NoRuntime {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m.queues = newQueueCollector(opts.MaxReasons)
	m.reg.MustRegister(m.queues)
	m.topics = newTopicCollector()
	m.reg.MustRegister(m.topics)
	return m
}

// Watch makes the per-queue, per-topic and log series read b at every scrape. Until it
// is called they are absent.
func (m *Metrics) Watch(b *broker.Broker) {
	m.queues.watch(b)
	m.topics.watch(b)
}

// Registry returns the registry, to add an application's own collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.cache, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Committed records one group commit of the log (wal.Observer).
func (m *Metrics) Committed(c wal.Commit) {
	m.walAppend.Observe(c.Wait.Seconds())
	m.walWrite.Observe(c.Write.Seconds())
	m.walSync.Observe(c.Sync.Seconds())
	m.batchRecords.Observe(float64(c.Records))
	m.batchBytes.Observe(float64(c.Bytes))
}

// Checkpointed records one checkpoint (broker.Observer).
func (m *Metrics) Checkpointed(d time.Duration, bytes int, err error) {
	if err != nil {
		m.ckptFailures.Inc()
		return
	}
	m.ckptSeconds.Observe(d.Seconds())
	m.ckptBytes.Set(float64(bytes))
}

// ObserveRequest records one HTTP request (server.Options.Observe).
func (m *Metrics) ObserveRequest(route, method string, status int, d time.Duration) {
	if route == "" {
		route = "none"
	}
	m.httpSeconds.WithLabelValues(route, methodLabel(method), statusLabel(status)).Observe(d.Seconds())
}

// methodLabel keeps the method label to a known set.
func methodLabel(m string) string {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS":
		return m
	}
	return "other"
}

// statusLabel keeps the code label to HTTP's three-digit range.
func statusLabel(c int) string {
	if c < 100 || c > 599 {
		return "other"
	}
	return strconv.Itoa(c)
}
