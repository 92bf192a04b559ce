package metrics

import (
	"cmp"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/queue"
)

// queueCollector reads every queue's statistics and the log's counters at scrape time,
// so the values are those of GET /v1/queues at that moment.
type queueCollector struct {
	maxReasons int

	mu      sync.Mutex
	b       *broker.Broker
	reasons map[string]map[string]bool // per queue: consumer reasons with their own series

	queues, healthy                                     *prometheus.Desc
	messages, bytes, deadLetters, oldest, wait, sojourn *prometheus.Desc
	counters                                            []counterDesc
	deadLettered                                        *prometheus.Desc
	walCommits, walSyncs, walRecords, walBytes          *prometheus.Desc
	moveSteps, moveRecords, moveSyncs                   *prometheus.Desc
	corruptBodies, bodyReadErrors                       *prometheus.Desc
	dedupIDs, dedupIDsLimit, queueDedupIDs              *prometheus.Desc
	parkedGroups                                        *prometheus.Desc
	diskFree, diskMark, diskReserve, diskMargin         *prometheus.Desc
	scrubTime, scrubDuration, scrubOK, scrubDamaged     *prometheus.Desc
	scrubCorrupt, scrubBytes                            *prometheus.Desc
}

// counterDesc is one per-queue counter and how to read it from a queue's statistics.
type counterDesc struct {
	desc *prometheus.Desc
	get  func(qi *broker.QueueInfo) uint64
}

func newQueueCollector(maxReasons int) *queueCollector {
	q := []string{"queue"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	c := &queueCollector{
		maxReasons:  maxReasons,
		reasons:     make(map[string]map[string]bool),
		queues:      d("okiba_queues", "Queues in the broker."),
		healthy:     d("okiba_storage_healthy", "1 while the broker accepts writes; 0 after a storage failure (restart it)."),
		messages:    d("okiba_queue_messages", "Messages in the queue by state: ready, delayed (delay or backoff), in_flight (leased).", "queue", "state"),
		bytes:       d("okiba_queue_bytes", "Total size of the queue's messages.", q...),
		deadLetters: d("okiba_queue_dead_letters", "Messages now in the queue's dead-letter queue (0 without one).", q...),
		oldest:      d("okiba_queue_oldest_ready_age_seconds", "Age of the oldest ready message; 0 when none is ready.", q...),
		wait: d("okiba_queue_waiting_seconds",
			"Little's law, waiting: mean time from entering the queue to first delivery, of the messages first delivered in the last minute.", q...),
		sojourn: d("okiba_queue_in_system_seconds",
			"Little's law, in system: mean time from entering the queue to ack, of the messages acked in the last minute.", q...),
		deadLettered: d("okiba_queue_dead_lettered_total",
			"Messages moved out of the queue as dead letters, by reason (max_deliveries, expired, consumer reasons; rare reasons as other).", "queue", "reason"),
		walCommits:  d("okiba_wal_commits_total", "Group commits of the log since start."),
		walSyncs:    d("okiba_wal_syncs_total", "Fsyncs of log segments since start."),
		walRecords:  d("okiba_wal_records_total", "Records made durable since start."),
		walBytes:    d("okiba_wal_bytes_total", "Bytes made durable since start."),
		moveSteps:   d("okiba_topic_move_steps_total", "Steps of the topic mover since start: one partition's records written into its segment files, or synced."),
		moveRecords: d("okiba_topic_moved_records_total", "Topic records the mover wrote from the log into partition segment files since start."),
		moveSyncs: d("okiba_topic_move_syncs_total",
			"Fsyncs of partition segment files (and their directories) since start: the mover syncs once it has caught up, or once 8 MiB are written and not synced."),
		corruptBodies: d("okiba_corrupt_bodies_total",
			"Message bodies a receive found failing their checksum since start: quarantined as dead letters of reason corrupt, or delivered empty and marked where they could not move."),
		dedupIDs:      d("okiba_dedup_ids", "Dedup ids remembered by every queue together (each costs about 240 bytes of memory and of checkpoint)."),
		dedupIDsLimit: d("okiba_dedup_ids_limit", "The bound on okiba_dedup_ids: at it, a send's dedup id evicts its queue's oldest, or is not remembered (limits.max_dedup_ids)."),
		queueDedupIDs: d("okiba_queue_dedup_ids", "Dedup ids the queue remembers.", q...),
		parkedGroups:  d("okiba_parked_groups", "Ordered groups of the queue parked behind a dead letter (on_dead_letter park_group): okiba parked QUEUE lists them.", q...),
		bodyReadErrors: d("okiba_body_read_errors_total",
			"Reads of message bodies that failed otherwise (I/O errors) since start; the messages stayed where they were."),
		diskFree: d("okiba_disk_free_bytes",
			"The broker's estimate of the data directory's free space: statfs at the last look, less the log written since (absent when statfs cannot say or the check is off)."),
		diskMark: d("okiba_disk_send_mark_bytes", "Sends and publishes that would bring okiba_disk_free_bytes below this are refused (disk_full)."),
		diskReserve: d("okiba_disk_reserve_bytes",
			"The part of the send mark kept for draining: a segment for receives, acks and deletes, and the next checkpoint's size."),
		diskMargin:    d("okiba_disk_margin_bytes", "okiba_disk_free_bytes less okiba_disk_send_mark_bytes: negative while sends are refused for space."),
		scrubTime:     d("okiba_scrub_last_finished_timestamp_seconds", "When the last scrub of the storage ended (Unix time; absent before the first)."),
		scrubDuration: d("okiba_scrub_last_duration_seconds", "How long the last scrub took."),
		scrubOK:       d("okiba_scrub_last_ok", "1 if the last scrub finished and found nothing damaged; 0 otherwise."),
		scrubDamaged:  d("okiba_scrub_last_damaged_frames", "Frames of the log and checkpoints the last scrub found damaged (the log names each)."),
		scrubCorrupt:  d("okiba_scrub_last_corrupt_bodies", "Live messages whose bodies lie in the frames the last scrub found damaged."),
		scrubBytes:    d("okiba_scrub_last_bytes", "Bytes the last scrub read."),
	}
	counter := func(name, help string, get func(qi *broker.QueueInfo) uint64) {
		c.counters = append(c.counters, counterDesc{desc: d(name, help, q...), get: get})
	}
	counter("okiba_queue_sent_total", "Messages accepted by send (duplicates and refusals not counted).", func(qi *broker.QueueInfo) uint64 { return qi.Stats.Sent })
	counter("okiba_queue_acked_total", "Messages acked.", func(qi *broker.QueueInfo) uint64 { return qi.Stats.Acked })
	counter("okiba_queue_received_and_deleted_total", "Messages settled by receive-and-delete receives (at-most-once: also in delivered, never in acked).", func(qi *broker.QueueInfo) uint64 { return qi.Stats.ReceivedAndDeleted })
	counter("okiba_queue_deferrals_total", "Messages a consumer deferred (set aside, to fetch by id), each time.", func(qi *broker.QueueInfo) uint64 { return qi.Stats.Deferrals })
	counter("okiba_queue_nacked_total", "Messages nacked (given back for a retry).", func(qi *broker.QueueInfo) uint64 { return qi.Stats.Nacked })
	counter("okiba_queue_delivered_total", "Leases handed out.", func(qi *broker.QueueInfo) uint64 { return qi.Stats.Delivered })
	counter("okiba_queue_redelivered_total", "Leases of messages delivered before.", func(qi *broker.QueueInfo) uint64 { return qi.Stats.Redelivered })
	counter("okiba_queue_lease_extensions_total", "Leases extended.", func(qi *broker.QueueInfo) uint64 { return qi.Stats.Extended })
	counter("okiba_queue_expired_total", "Messages that reached the queue's retention.", func(qi *broker.QueueInfo) uint64 { return qi.Stats.Expired })
	counter("okiba_queue_dead_lettered_in_total", "Dead letters received by this queue (as a dead-letter queue).", func(qi *broker.QueueInfo) uint64 { return qi.Stats.DeadLetteredIn })
	counter("okiba_queue_overflow_total", "Dead letters received beyond the queue's max_messages or max_bytes.", func(qi *broker.QueueInfo) uint64 { return qi.Stats.Overflow })
	counter("okiba_queue_redriven_in_total", "Messages moved into the queue by redrive.", func(qi *broker.QueueInfo) uint64 { return qi.Stats.RedrivenIn })
	counter("okiba_queue_redriven_out_total", "Messages moved out of the queue by redrive.", func(qi *broker.QueueInfo) uint64 { return qi.Stats.RedrivenOut })
	counter("okiba_queue_purged_total", "Messages removed by purge.", func(qi *broker.QueueInfo) uint64 { return qi.Stats.Purged })
	counter("okiba_queue_deleted_total", "Messages removed one by one (DELETE …/messages/{id}).", func(qi *broker.QueueInfo) uint64 { return qi.Stats.Deleted })
	counter("okiba_queue_dedup_hits_total", "Sends answered from the dedup window (since the broker started).", func(qi *broker.QueueInfo) uint64 { return qi.Volatile.DedupHits })
	counter("okiba_queue_refused_total", "Sends refused by backpressure, queue_full (since the broker started).", func(qi *broker.QueueInfo) uint64 { return qi.Volatile.Refused })
	counter("okiba_queue_dedup_evicted_early_total", "Dedup ids forgotten before their window ended (per-queue cap).", func(qi *broker.QueueInfo) uint64 { return qi.Stats.DedupEvictedEarly })
	return c
}

func (c *queueCollector) watch(b *broker.Broker) {
	c.mu.Lock()
	c.b = b
	c.mu.Unlock()
}

// Describe sends every descriptor.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.queues, c.healthy, c.messages, c.bytes, c.deadLetters, c.oldest, c.wait, c.sojourn,
		c.deadLettered, c.walCommits, c.walSyncs, c.walRecords, c.walBytes, c.moveSteps, c.moveRecords, c.moveSyncs, c.corruptBodies, c.bodyReadErrors,
		c.dedupIDs, c.dedupIDsLimit, c.queueDedupIDs, c.parkedGroups, c.diskFree, c.diskMark, c.diskReserve, c.diskMargin,
		c.scrubTime, c.scrubDuration, c.scrubOK, c.scrubDamaged, c.scrubCorrupt, c.scrubBytes} {
		ch <- d
	}
	for _, cd := range c.counters {
		ch <- cd.desc
	}
}

// Collect reads the broker.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	b := c.b
	c.mu.Unlock()
	if b == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	count := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	healthy := 1.0
	if b.Healthy() != nil {
		healthy = 0
	}
	gauge(c.healthy, healthy)
	ls := b.LogStats()
	count(c.walCommits, ls.Batches)
	count(c.walSyncs, ls.Syncs)
	count(c.walRecords, ls.Records)
	count(c.walBytes, ls.Bytes)
	ms := b.MoveStats()
	count(c.moveSteps, ms.Steps)
	count(c.moveRecords, ms.Records)
	count(c.moveSyncs, ms.Syncs)
	bs := b.BodyStats()
	count(c.corruptBodies, bs.Corrupt)
	count(c.bodyReadErrors, bs.ReadErrors)
	if ds := b.DiskSpace(); ds.Known {
		gauge(c.diskFree, float64(ds.Free))
		gauge(c.diskMark, float64(ds.Mark))
		gauge(c.diskReserve, float64(ds.Reserve))
		gauge(c.diskMargin, float64(ds.Margin()))
	}
	if sr, ok := b.LastScrub(); ok {
		gauge(c.scrubTime, float64(sr.Finished.UnixMilli())/1000)
		gauge(c.scrubDuration, sr.Finished.Sub(sr.Started).Seconds())
		okv, bodies := 0.0, 0
		if sr.OK() {
			okv = 1
		}
		for _, d := range sr.Damaged {
			bodies += len(d.Messages)
		}
		gauge(c.scrubOK, okv)
		gauge(c.scrubDamaged, float64(len(sr.Damaged)))
		gauge(c.scrubCorrupt, float64(bodies))
		gauge(c.scrubBytes, float64(sr.Bytes))
	}
	dl, dlimit := b.DedupIDs()
	gauge(c.dedupIDs, float64(dl))
	gauge(c.dedupIDsLimit, float64(dlimit))

	qs := b.Queues("")
	gauge(c.queues, float64(len(qs)))
	live := make(map[string]bool, len(qs))
	for i := range qs {
		qi := &qs[i]
		name := qi.Name
		live[name] = true
		st := &qi.Stats
		gauge(c.messages, float64(st.Ready), name, "ready")
		gauge(c.messages, float64(st.Delayed), name, "delayed")
		gauge(c.messages, float64(st.InFlight), name, "in_flight")
		gauge(c.messages, float64(st.Deferred), name, "deferred")
		gauge(c.bytes, float64(st.Bytes), name)
		gauge(c.queueDedupIDs, float64(st.DedupIDs), name)
		gauge(c.parkedGroups, float64(st.ParkedGroups), name)
		gauge(c.deadLetters, float64(qi.DeadLetters), name)
		gauge(c.oldest, qi.OldestAge.Seconds(), name)
		gauge(c.wait, qi.WaitMeasured.Seconds(), name)
		gauge(c.sojourn, qi.SysMeasured.Seconds(), name)
		for _, cd := range c.counters {
			count(cd.desc, cd.get(qi), name)
		}
		for reason, n := range c.byReason(name, st.ByReason) {
			count(c.deadLettered, n, name, reason)
		}
	}
	c.forget(live)
}

// byReason folds a queue's dead-letter counts by reason into bounded labels. A consumer
// reason gets its own label if it was among the first maxReasons seen for the queue
// (several new ones at once: the largest counts first); the choice sticks, so "other"
// only ever grows, as a counter must.
func (c *queueCollector) byReason(name string, counts map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(counts))
	if len(counts) == 0 {
		return out
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	own := c.reasons[name]
	if own == nil {
		own = make(map[string]bool)
		c.reasons[name] = own
	}
	var fresh []string
	for r := range counts {
		if !builtinReason(r) && r != OtherReason {
			if _, seen := own[r]; !seen {
				fresh = append(fresh, r)
			}
		}
	}
	slices.SortFunc(fresh, func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b))
	})
	labelled := 0
	for _, v := range own {
		if v {
			labelled++
		}
	}
	for _, r := range fresh {
		own[r] = labelled < c.maxReasons
		if own[r] {
			labelled++
		}
	}
	for r, n := range counts {
		if builtinReason(r) || own[r] {
			out[r] += n
		} else {
			out[OtherReason] += n
		}
	}
	return out
}

func builtinReason(r string) bool {
	return r == queue.ReasonMaxDeliveries || r == queue.ReasonExpired || r == queue.ReasonCorrupt || r == "consumer"
}

// forget drops the reason labels of deleted queues.
func (c *queueCollector) forget(live map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.reasons {
		if !live[name] {
			delete(c.reasons, name)
		}
	}
}
