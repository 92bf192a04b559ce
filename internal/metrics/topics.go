package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/okiba/okiba/broker"
)

// topicCollector reads every topic, its consumer groups and its subscriptions at scrape
// time, as queueCollector reads the queues, so that the values are what GET /v1/topics/…
// answers at that moment and nothing is kept between scrapes.
//
// The series are per topic, per group and per subscription, never per partition or per
// member: a topic may have 256 partitions, and partitions are what an operator drills
// into on the console, not what an alert watches. A group's lag in records is the sum
// over its partitions and its lag in time the largest, so that one stalled partition
// shows. Cardinality is bounded by the broker's limits on topics, groups per topic and
// subscriptions per topic (docs/operations.md).
type topicCollector struct {
	mu sync.Mutex
	b  *broker.Broker

	topics                                   *prometheus.Desc
	published, truncated                     *prometheus.Desc
	retainedRecords, retainedBytes           *prometheus.Desc
	groupLag, groupLagSeconds, groupLost     *prometheus.Desc
	groupMembers                             *prometheus.Desc
	subLag, subPaused, subDelivered, subLost *prometheus.Desc
}

func newTopicCollector() *topicCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	t := []string{"topic"}
	g := []string{"topic", "group"}
	s := []string{"topic", "subscription", "queue"}
	return &topicCollector{
		topics:          d("okiba_topics", "Topics in the broker."),
		published:       d("okiba_topic_records_total", "Records published to the topic (duplicates and refusals not counted).", t...),
		truncated:       d("okiba_topic_truncated_records_total", "Records retention deleted from the topic, whole segments at a time.", t...),
		retainedRecords: d("okiba_topic_retained_records", "Records the topic retains now, every partition together.", t...),
		retainedBytes:   d("okiba_topic_retained_bytes", "Bytes the topic retains now (body, key, header names and values), every partition together.", t...),
		groupLag:        d("okiba_group_lag_records", "Records of the topic the consumer group has not committed: the sum over partitions of end − committed.", g...),
		groupLagSeconds: d("okiba_group_lag_seconds",
			"How far behind the consumer group is in time: now − the publish time of the first uncommitted record, in its most lagging partition; 0 when caught up.", g...),
		groupLost: d("okiba_group_lost_to_retention_total",
			"Records retention deleted before the consumer group committed past them: the group skipped them.", g...),
		groupMembers: d("okiba_group_members", "Live members of the consumer group.", g...),
		subLag:       d("okiba_subscription_lag_records", "Records of the topic the subscription has yet to take (copy into its queue or filter out).", s...),
		subPaused: d("okiba_subscription_paused",
			"1 while the subscription is behind and its last copy stopped at its full queue; it resumes, from where it stopped, when the queue has room.", s...),
		subDelivered: d("okiba_subscription_delivered_total", "Records the subscription put into its queue.", s...),
		subLost: d("okiba_subscription_lost_to_retention_total",
			"Records retention deleted before the subscription took them (while it was paused or behind).", s...),
	}
}

func (c *topicCollector) watch(b *broker.Broker) {
	c.mu.Lock()
	c.b = b
	c.mu.Unlock()
}

// Describe sends every descriptor.
func (c *topicCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.topics, c.published, c.truncated, c.retainedRecords, c.retainedBytes,
		c.groupLag, c.groupLagSeconds, c.groupLost, c.groupMembers, c.subLag, c.subPaused, c.subDelivered, c.subLost} {
		ch <- d
	}
}

// Collect reads the broker. Each topic's groups and subscriptions are read after the
// topic list, each under the broker's lock for a moment of its own, so that a scrape
// never holds the lock for every topic at once; a topic deleted in between is left out.
func (c *topicCollector) Collect(ch chan<- prometheus.Metric) {
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
	ts := b.Topics("")
	gauge(c.topics, float64(len(ts)))
	for i := range ts {
		ti := &ts[i]
		name := ti.Name
		count(c.published, ti.Stats.Published, name)
		count(c.truncated, ti.Stats.Truncated, name)
		gauge(c.retainedRecords, float64(ti.Records), name)
		gauge(c.retainedBytes, float64(ti.Bytes), name)
		if gs, err := b.Groups(name); err == nil {
			for j := range gs {
				gi := &gs[j]
				gauge(c.groupLag, float64(gi.LagRecords), name, gi.Name)
				gauge(c.groupLagSeconds, gi.LagSeconds, name, gi.Name)
				count(c.groupLost, gi.LostToRetention, name, gi.Name)
				gauge(c.groupMembers, float64(len(gi.Members)), name, gi.Name)
			}
		}
		if ss, err := b.Subscriptions(name); err == nil {
			for j := range ss {
				si := &ss[j]
				paused := 0.0
				if si.Paused {
					paused = 1
				}
				gauge(c.subLag, float64(si.Lag), name, si.Name, si.Queue)
				gauge(c.subPaused, paused, name, si.Name, si.Queue)
				count(c.subDelivered, si.Delivered, name, si.Name, si.Queue)
				count(c.subLost, si.LostToRetention, name, si.Name, si.Queue)
			}
		}
	}
}
