package harness

import "time"

// Cell is one point of a scenario's matrix.
type Cell struct {
	Scenario  string  `json:"scenario"` // "s1" … "s8"
	Name      string  `json:"name"`     // unique within the scenario, e.g. "p16-w64-1KiB"
	Size      int     `json:"size"`
	Producers int     `json:"producers,omitempty"`
	Window    int     `json:"window,omitempty"`
	Consumers int     `json:"consumers,omitempty"`
	Prefetch  int     `json:"prefetch,omitempty"`
	AckEach   bool    `json:"ack_each,omitempty"`  // per-message acks (else batched)
	LoadFrac  float64 `json:"load_frac,omitempty"` // s4: fraction of the system's own s3 rate
	Count     int     `json:"count,omitempty"`     // s5, s6: messages
	Keys      int     `json:"keys,omitempty"`      // s8: group keys
	// Target is what a topic scenario's cell drives: "queue" or "log" (t1, t2).
	Target string `json:"target,omitempty"`
	Subs   int    `json:"subs,omitempty"` // t3: subscriptions of the log
}

// Point is one sample of a curve (scenario 5).
type Point struct {
	T     float64 `json:"t_s"`   // seconds since the phase began
	Done  int64   `json:"done"`  // messages published (fill) or acked (drain) so far
	RSS   int64   `json:"rss"`   // broker PSS, bytes
	Disk  int64   `json:"disk"`  // data directory size, bytes (0 when unknown)
	Phase string  `json:"phase"` // "fill" or "drain"
}

// Result is what one run of one cell on one system measured.
type Result struct {
	Cell   Cell   `json:"cell"`
	System string `json:"system"`
	Repeat int    `json:"repeat"`
	// Rate is the cell's headline throughput in msg/s: confirmed publishes (s1, s2),
	// acked messages (s3, s4, s8), fill rate (s5).
	Rate        float64  `json:"rate"`
	PublishRate float64  `json:"publish_rate,omitempty"`
	ConsumeRate float64  `json:"consume_rate,omitempty"`
	TargetRate  float64  `json:"target_rate,omitempty"` // s4: the open-loop schedule
	Ack         *Latency `json:"ack_latency,omitempty"` // publish → confirm
	E2E         *Latency `json:"e2e_latency,omitempty"` // (intended) publish → receive
	// Broker resources over the measured window, from /proc of its process tree.
	BrokerCPUPerMsg  float64 `json:"broker_cpu_us_per_msg,omitempty"`
	ClientCPUPerMsg  float64 `json:"client_cpu_us_per_msg,omitempty"` // the harness process
	RSS              int64   `json:"rss_bytes,omitempty"`             // peak PSS of the broker tree
	WriteBytesPerMsg float64 `json:"write_bytes_per_msg,omitempty"`
	// DeviceBytesPerMsg is what the block device wrote per message: the whole
	// machine's writes, like DiskFlushesPerSec.
	DeviceBytesPerMsg float64 `json:"device_bytes_per_msg,omitempty"`
	// DiskFlushesPerSec counts flush requests at the block device: the whole machine's,
	// so other work on it shows up too.
	DiskFlushesPerSec float64 `json:"disk_flushes_per_s,omitempty"`
	// FsyncsPerSec is the system's own count, where it exposes one.
	FsyncsPerSec *float64 `json:"fsyncs_per_s,omitempty"`
	Errors       int64    `json:"errors,omitempty"`
	FirstError   string   `json:"first_error,omitempty"`
	// Extra holds scenario-specific figures (redeliveries, restart time, …).
	Extra  map[string]float64 `json:"extra,omitempty"`
	Series []Point            `json:"series,omitempty"`
	Note   string             `json:"note,omitempty"`
	// Skipped says why the system did not run this cell.
	Skipped string `json:"skipped,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	Host       string  `json:"host"`
	CPUs       int     `json:"cpus"`
	CPUModel   string  `json:"cpu_model"`
	MemoryGiB  float64 `json:"memory_gib"`
	Kernel     string  `json:"kernel"`
	Disk       string  `json:"disk"`
	Filesystem string  `json:"filesystem"`
	Go         string  `json:"go"`
	Load1      float64 `json:"load1_at_start"`
	Load1End   float64 `json:"load1_at_end"`
}

// FsyncProbe is the disk's own cost, measured on a preallocated file.
type FsyncProbe struct {
	RecordBytes int      `json:"record_bytes"`
	Syncs       int      `json:"syncs"`
	PerSec      float64  `json:"per_s"`
	Latency     *Latency `json:"latency"`
}

// Run is everything one invocation measured; it is written as JSON.
type Run struct {
	Started  time.Time         `json:"started"`
	Finished time.Time         `json:"finished"`
	Command  string            `json:"command"`
	Mode     string            `json:"mode"` // quick, full, smoke, custom
	Config   Config            `json:"config"`
	Machine  Machine           `json:"machine"`
	Fsync    []FsyncProbe      `json:"fsync,omitempty"`
	Systems  []Info            `json:"systems"`
	Results  []Result          `json:"results"`
	Failures []string          `json:"failures,omitempty"`
	Notes    []string          `json:"notes,omitempty"`
	Profiles map[string]string `json:"profiles,omitempty"`
}
