package metrics

import "github.com/prometheus/client_golang/prometheus"

// ClusterStats is what a node of a cluster reports of it at a scrape.
type ClusterStats struct {
	Term            uint64
	Leading         bool // this node leads and takes commands
	HasLeader       bool // a leader is known
	Commit, Applied uint64
	// Lag is, on the leader, how many committed entries each follower has yet to
	// store, by node name; nil elsewhere.
	Lag      map[string]uint64
	Rebuilds uint64 // times the broker dropped a lost lead's speculation
	// Snapshot is the raft log's snapshot index; Compactions, Installs and SnapshotsSent
	// count the log's compactions, the states this node installed from another, and the
	// snapshots it sent to followers behind its log.
	Snapshot, Compactions, Installs, SnapshotsSent uint64
	// SnapshotResumes counts the transfers of a state this node resumed after a break.
	SnapshotResumes uint64
	// Entries counts the raft entries of commands this node proposed as leader, Commands
	// the commands they carried (Commands ÷ Entries: how many an entry coalesced).
	Entries, Commands uint64
}

type clusterCollector struct {
	read                                            func() ClusterStats
	term, leading, hasLeader, commit, applied, lag  *prometheus.Desc
	rebuilds, snapshot, compactions, installs, sent *prometheus.Desc
	resumes, entries, commands                      *prometheus.Desc
}

// WatchCluster adds the cluster's series, read from read at every scrape.
func (m *Metrics) WatchCluster(read func() ClusterStats) {
	c := &clusterCollector{read: read,
		term:      prometheus.NewDesc("okiba_cluster_term", "The raft term this node knows.", nil, nil),
		leading:   prometheus.NewDesc("okiba_cluster_leader", "1 while this node leads the cluster and takes commands.", nil, nil),
		hasLeader: prometheus.NewDesc("okiba_cluster_has_leader", "1 while this node knows a leader (0: an election, or no quorum).", nil, nil),
		commit:    prometheus.NewDesc("okiba_cluster_commit_index", "The last raft entry this node knows committed.", nil, nil),
		applied:   prometheus.NewDesc("okiba_cluster_applied_index", "The last raft entry this node's broker applied.", nil, nil),
		lag: prometheus.NewDesc("okiba_cluster_replication_lag_entries",
			"On the leader: committed entries a follower has yet to store.", []string{"peer"}, nil),
		rebuilds: prometheus.NewDesc("okiba_cluster_rebuilds_total",
			"Times this node's broker dropped what it ran as a leader that lost its lead, and rebuilt from the committed state.", nil, nil),
		snapshot: prometheus.NewDesc("okiba_cluster_snapshot_index", "The raft log's snapshot: its entries start after this index.", nil, nil),
		compactions: prometheus.NewDesc("okiba_cluster_log_compactions_total",
			"Times this node's raft log dropped the entries its broker's checkpoint holds.", nil, nil),
		installs: prometheus.NewDesc("okiba_cluster_snapshot_installs_total",
			"States this node installed from another member, being behind the others' raft logs.", nil, nil),
		sent: prometheus.NewDesc("okiba_cluster_snapshot_sends_total",
			"Snapshots this node sent as leader to followers behind its raft log.", nil, nil),
		resumes: prometheus.NewDesc("okiba_cluster_snapshot_resumes_total",
			"Transfers of another member's state this node resumed where they broke, rather than starting over.", nil, nil),
		entries: prometheus.NewDesc("okiba_cluster_proposed_entries_total",
			"Raft entries of commands this node proposed as leader (several commands may share one).", nil, nil),
		commands: prometheus.NewDesc("okiba_cluster_proposed_commands_total",
			"Commands this node proposed as leader; divided by okiba_cluster_proposed_entries_total, the commands an entry carried.", nil, nil),
	}
	m.reg.MustRegister(c)
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.term, c.leading, c.hasLeader, c.commit, c.applied, c.lag, c.rebuilds,
		c.snapshot, c.compactions, c.installs, c.sent, c.resumes, c.entries, c.commands} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.read()
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	ch <- prometheus.MustNewConstMetric(c.term, prometheus.GaugeValue, float64(s.Term))
	ch <- prometheus.MustNewConstMetric(c.leading, prometheus.GaugeValue, b(s.Leading))
	ch <- prometheus.MustNewConstMetric(c.hasLeader, prometheus.GaugeValue, b(s.HasLeader))
	ch <- prometheus.MustNewConstMetric(c.commit, prometheus.GaugeValue, float64(s.Commit))
	ch <- prometheus.MustNewConstMetric(c.applied, prometheus.GaugeValue, float64(s.Applied))
	ch <- prometheus.MustNewConstMetric(c.rebuilds, prometheus.CounterValue, float64(s.Rebuilds))
	ch <- prometheus.MustNewConstMetric(c.snapshot, prometheus.GaugeValue, float64(s.Snapshot))
	ch <- prometheus.MustNewConstMetric(c.compactions, prometheus.CounterValue, float64(s.Compactions))
	ch <- prometheus.MustNewConstMetric(c.installs, prometheus.CounterValue, float64(s.Installs))
	ch <- prometheus.MustNewConstMetric(c.sent, prometheus.CounterValue, float64(s.SnapshotsSent))
	ch <- prometheus.MustNewConstMetric(c.resumes, prometheus.CounterValue, float64(s.SnapshotResumes))
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.CounterValue, float64(s.Entries))
	ch <- prometheus.MustNewConstMetric(c.commands, prometheus.CounterValue, float64(s.Commands))
	for peer, lag := range s.Lag {
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(lag), peer)
	}
}
