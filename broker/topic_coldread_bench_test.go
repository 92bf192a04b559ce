package broker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/okiba/okiba/topic"
)

// BenchmarkTopicColdRead is target 4a of the topics issue in process: a new group's one
// member reads a partition's retained records from offset 0 with the page cache dropped,
// against dd reading the same segment files to /dev/null, cache dropped before both.
// OKIBA_COLD_READ_RECORDS records of 1 KiB (default 1M, about 1 GB of segment files) are
// published into a topic of one partition first. OKIBA_COLD_READ_DIR keeps the data
// directory between runs (it is filled only when it holds no topic yet), so that two
// builds can read the same files in turn; without it the files are removed at the end.
// Dropping the cache needs root: without it the benchmark reads warm and says so.
//
// It reports the read's MB/s of segment file, dd's, their ratio, and the process's
// RssAnon before and at most during the read (sampled every 250 ms).
func BenchmarkTopicColdRead(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("OKIBA_COLD_READ_RECORDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	dir := os.Getenv("OKIBA_COLD_READ_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	for i := 0; i < b.N; i++ {
		coldRead(b, dir, n)
	}
}

func coldRead(b *testing.B, dir string, n int) {
	b.StopTimer()
	br, err := Open(Config{Dir: dir, MinFreeBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	info, err := br.Topic("cold")
	if err != nil {
		if _, _, err := br.PutTopic(ctx, "cold", func(cfg *topic.Config, exists bool) error {
			cfg.Partitions = 1
			cfg.RetentionAge = 0 // forever
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		coldFill(b, br, n)
		waitMoved(b, br)
		if info, err = br.Topic("cold"); err != nil {
			b.Fatal(err)
		}
	}
	total := info.Records
	files, _ := filepath.Glob(filepath.Join(dir, "topics", "*", "0", "*.log"))
	sort.Strings(files)
	var size int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			size += st.Size()
		}
	}
	cold := dropCaches() == nil
	t0 := time.Now()
	for _, f := range files {
		if out, err := exec.Command("dd", "if="+f, "of=/dev/null", "bs=1M").CombinedOutput(); err != nil {
			b.Fatalf("dd %s: %v: %s", f, err, out)
		}
	}
	ddSec := time.Since(t0).Seconds()

	group := fmt.Sprintf("cold-%d", time.Now().UnixNano())
	if _, _, err := br.PutGroup(ctx, "cold", group, nil); err != nil {
		b.Fatal(err)
	}
	anon0 := rssAnon()
	var anonMax atomic.Int64
	anonMax.Store(anon0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(250 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				if a := rssAnon(); a > anonMax.Load() {
					anonMax.Store(a)
				}
			}
		}
	}()
	if cold {
		cold = dropCaches() == nil
	}
	b.StartTimer()
	start := time.Now()
	var got int64
	var session uint64
	next := uint64(0)
	for got < total {
		p, err := br.Pull(ctx, "cold", group, PullOptions{Member: "m", Session: session, Max: MaxReadMax})
		if err != nil {
			b.Fatal(err)
		}
		session = p.Session.Session
		if len(p.Records) == 0 {
			b.Fatalf("pull returned nothing at %d of %d", got, total)
		}
		for _, r := range p.Records {
			if r.Offset != next {
				b.Fatalf("record %d where %d belongs", r.Offset, next)
			}
			if len(r.Body) != 1024 || binary.LittleEndian.Uint64(r.Body) != r.Offset {
				b.Fatalf("record %d holds the wrong body", r.Offset)
			}
			next++
		}
		got += int64(len(p.Records))
		offs := []topic.PartitionOffset{{Partition: 0, Offset: next, Epoch: p.Assigned[0].Epoch}}
		if errs, err := br.Commit(ctx, "cold", group, "m", session, offs); err != nil || errs[0] != nil {
			b.Fatalf("commit: %v %v", err, errs)
		}
	}
	readSec := time.Since(start).Seconds()
	b.StopTimer()
	close(stop)
	wg.Wait()
	if !cold {
		b.Log("the page cache could not be dropped (not root?): the read was warm")
	}
	b.ReportMetric(float64(got), "records")
	b.ReportMetric(float64(len(files)), "segments")
	b.ReportMetric(float64(size)/1e6/readSec, "read-MB/s")
	b.ReportMetric(float64(size)/1e6/ddSec, "dd-MB/s")
	b.ReportMetric(ddSec/readSec, "read/dd")
	b.ReportMetric(float64(anon0)/(1<<20), "rssanon-start-MiB")
	b.ReportMetric(float64(anonMax.Load())/(1<<20), "rssanon-max-MiB")
}

// coldFill publishes n records of 1 KiB, the first 8 bytes of each its offset, in
// batches of 1000.
func coldFill(b *testing.B, br *Broker, n int) {
	const batch = 1000
	in := make([]topic.PublishInput, batch)
	bodies := make([]byte, 1024*batch)
	for i := range bodies {
		bodies[i] = byte(i * 7)
	}
	for first := 0; first < n; first += batch {
		k := min(batch, n-first)
		for j := 0; j < k; j++ {
			body := bodies[j*1024 : (j+1)*1024]
			binary.LittleEndian.PutUint64(body, uint64(first+j))
			in[j] = topic.PublishInput{Partition: 0, Body: body}
		}
		res, err := br.Publish(ctx, "cold", in[:k])
		if err != nil {
			b.Fatal(err)
		}
		for j, r := range res {
			if r.Err != nil || r.Offset != uint64(first+j) {
				b.Fatalf("publish %d: offset %d, %v", first+j, r.Offset, r.Err)
			}
		}
	}
}

// dropCaches writes back and drops the page cache (root only).
func dropCaches() error {
	if err := exec.Command("sync").Run(); err != nil {
		return err
	}
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}

// rssAnon is the process's RssAnon in bytes (0 where /proc does not say).
func rssAnon() int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "RssAnon:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
