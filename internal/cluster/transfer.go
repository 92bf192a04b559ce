package cluster

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/okiba/okiba/internal/vfs"
)

// Resumable state transfers. A state may be many gigabytes, sent at
// Config.SnapshotRate; a connection that breaks near the end must not send it all again.
// So the serving node writes its backup once, unpaced, to a spool file in its data
// directory (transferDir/snapshot-<applied>.okb), and serves that file with HTTP ranges
// under an identity (spoolTag: the applied index, size and SHA-256 of the spool). The
// fetching node downloads into transferDir/install.download; after a break it asks the
// same member for the rest (Range: bytes=N-, If-Range: the tag), and a member that has
// since replaced its spool answers the whole new one (200), which starts the download
// over. Only a whole download whose checksum is the tag's is installed.
//
// The spool is written before the first byte is sent, and a request that comes while it
// is being written waits for it: a range and its identity need the spool's size and
// checksum, known only once it is whole, and writing to the local disk unpaced takes a
// small part of the paced send's time.
const (
	transferDir   = "cluster"
	spoolPrefix   = "snapshot-"
	spoolSuffix   = ".okb"
	spoolTemp     = "snapshot.tmp"
	downloadFile  = "install.download"
	minParam      = "min" // SnapshotPath's query: the index the state must hold at least
	appliedHeader = "Okiba-Snapshot-Applied"
)

// Defaults of Config's spool settings.
const (
	// DefaultSnapshotSpoolAge: a member that starts a transfer afresh is offered the spool
	// while it is younger than this (or the node has applied nothing since); after, a new
	// one, so that a member does not install a state far behind the cluster's.
	DefaultSnapshotSpoolAge = time.Minute
	// DefaultSnapshotSpoolIdle: a spool no request has read for this long is removed.
	DefaultSnapshotSpoolIdle = 10 * time.Minute
)

// spoolTag identifies one spool: a transfer resumes only on the same one.
type spoolTag struct {
	applied uint64
	size    int64
	sum     string // hex SHA-256 of the spool
}

// String is the tag as the spool's strong ETag.
func (t spoolTag) String() string {
	return fmt.Sprintf(`"%d-%d-%s"`, t.applied, t.size, t.sum)
}

func parseSpoolTag(s string) (spoolTag, error) {
	parts := strings.Split(strings.Trim(s, `"`), "-")
	if len(parts) != 3 || len(parts[2]) != 2*sha256.Size {
		return spoolTag{}, fmt.Errorf("the snapshot's ETag %q is not applied-size-sha256", s)
	}
	applied, err1 := strconv.ParseUint(parts[0], 10, 64)
	size, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil || size < 0 {
		return spoolTag{}, fmt.Errorf("the snapshot's ETag %q is not applied-size-sha256", s)
	}
	return spoolTag{applied: applied, size: size, sum: parts[2]}, nil
}

// spool is one backup of this node's state, whole, in a file.
type spool struct {
	path string
	tag  spoolTag
	made time.Time
}

// transfers is a node's state of its transfers: the spool it serves, and the download
// it resumes.
type transfers struct {
	mu       sync.Mutex
	cur      *spool
	building chan struct{} // closed when the spool being written is done; nil when none is
	active   int           // requests reading cur
	lastUsed time.Time
	idle     *time.Timer
	closed   bool

	// dl is the download under way (run's goroutine only): resumed from the member
	// that offered it while it offers the same spool.
	dl *download
	// resumes counts the transfers this node resumed (a 206 to a ranged request).
	resumes atomic.Uint64
}

type download struct {
	member uint64
	tag    spoolTag
	have   int64     // bytes in the file, every one of them in sum
	sum    hash.Hash // SHA-256 of them
}

func (r *Raft) spoolAge() time.Duration {
	if r.cfg.SnapshotSpoolAge > 0 {
		return r.cfg.SnapshotSpoolAge
	}
	return DefaultSnapshotSpoolAge
}

func (r *Raft) spoolIdle() time.Duration {
	if r.cfg.SnapshotSpoolIdle > 0 {
		return r.cfg.SnapshotSpoolIdle
	}
	return DefaultSnapshotSpoolIdle
}

// removeTransfers removes the spools and the download a node left in dir when it
// stopped: neither is of use after a restart (a download is resumed only within one run,
// whose memory holds its checksum so far).
func removeTransfers(fs vfs.FS, dir string) error {
	td := filepath.Join(dir, transferDir)
	names, err := fs.ReadDir(td)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	for _, n := range names {
		if n == downloadFile || n == spoolTemp || (strings.HasPrefix(n, spoolPrefix) && strings.HasSuffix(n, spoolSuffix)) {
			if err := fs.Remove(filepath.Join(td, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("cluster: remove a state transfer's file: %w", err)
			}
		}
	}
	return nil
}

// closeTransfers stops the spool's idle timer and removes the spool (Close): a stopped
// node serves none.
func (r *Raft) closeTransfers() {
	t := &r.xfer
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.idle != nil {
		t.idle.Stop()
	}
	if t.cur != nil && t.building == nil {
		_ = r.cfg.FS.Remove(t.cur.path)
		t.cur = nil
	}
}

// openSpool returns the spool to serve a request for a state holding entry min at
// least, open, writing a new one if there is none, if the one there is behind min, or
// if it is older than Config.SnapshotSpoolAge and the node has applied entries since —
// unless the request resumes it (ifRange is its tag). The caller calls release when done.
func (r *Raft) openSpool(ctx context.Context, min uint64, ifRange string) (*spool, vfs.File, error) {
	t := &r.xfer
	t.mu.Lock()
	for {
		if t.closed {
			t.mu.Unlock()
			return nil, nil, errors.New("the node is stopping")
		}
		if ch := t.building; ch != nil {
			t.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			t.mu.Lock()
			continue
		}
		if sp := t.cur; sp != nil && (ifRange == sp.tag.String() ||
			(sp.tag.applied >= min && (time.Since(sp.made) < r.spoolAge() || r.b.Applied() <= sp.tag.applied))) {
			f, err := r.cfg.FS.OpenFile(sp.path, os.O_RDONLY, 0)
			if err != nil {
				t.mu.Unlock()
				return nil, nil, fmt.Errorf("open the spool: %w", err)
			}
			t.active++
			t.mu.Unlock()
			return sp, f, nil
		}
		ch := make(chan struct{})
		t.building = ch
		t.mu.Unlock()
		sp, err := r.writeSpool(ctx)
		t.mu.Lock()
		t.building = nil
		close(ch)
		if err != nil {
			t.mu.Unlock()
			return nil, nil, err
		}
		if t.closed {
			_ = r.cfg.FS.Remove(sp.path)
			continue
		}
		if old := t.cur; old != nil && old.path != sp.path {
			// A request still reading the old one reads on: its file stays open.
			_ = r.cfg.FS.Remove(old.path)
		}
		t.cur = sp
		t.lastUsed = time.Now()
		r.armIdle()
		if sp.tag.applied < min {
			t.mu.Unlock()
			return nil, nil, fmt.Errorf("this node holds entries up to %d, the state asked for must hold %d", sp.tag.applied, min)
		}
	}
}

// releaseSpool ends a request's read of the spool.
func (r *Raft) releaseSpool(f vfs.File) {
	f.Close()
	t := &r.xfer
	t.mu.Lock()
	t.active--
	t.lastUsed = time.Now()
	r.armIdle()
	t.mu.Unlock()
}

// armIdle (xfer.mu held) has the spool removed once no request has read it for
// Config.SnapshotSpoolIdle.
func (r *Raft) armIdle() {
	t := &r.xfer
	if t.closed {
		return
	}
	if t.idle != nil {
		t.idle.Stop()
	}
	t.idle = time.AfterFunc(r.spoolIdle(), func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.closed || t.cur == nil || t.building != nil || t.active > 0 || time.Since(t.lastUsed) < r.spoolIdle() {
			return
		}
		_ = r.cfg.FS.Remove(t.cur.path)
		r.log.Info("cluster: removed an idle spool of the state", "applied", t.cur.tag.applied, "bytes", t.cur.tag.size)
		t.cur = nil
	})
}

// writeSpool writes a backup of the broker to a new spool, unpaced.
func (r *Raft) writeSpool(ctx context.Context) (*spool, error) {
	fs := r.cfg.FS
	dir := filepath.Join(r.cfg.Dir, transferDir)
	if err := fs.MkdirAll(dir, vfs.DirMode); err != nil {
		return nil, fmt.Errorf("spool the state: %w", err)
	}
	tmp := filepath.Join(dir, spoolTemp)
	f, err := fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, vfs.FileMode)
	if err != nil {
		return nil, fmt.Errorf("spool the state: %w", err)
	}
	start := time.Now()
	sum := sha256.New()
	fw := &fileWriter{f: f}
	bw := bufio.NewWriterSize(io.MultiWriter(fw, sum), 1<<20)
	info, err := r.b.Backup(ctx, bw)
	if err == nil {
		err = bw.Flush()
	}
	// Not synced: a spool is written again after a crash rather than trusted.
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = fs.Remove(tmp)
		return nil, fmt.Errorf("spool the state: %w", err)
	}
	tag := spoolTag{applied: info.Applied, size: fw.off, sum: hex.EncodeToString(sum.Sum(nil))}
	path := filepath.Join(dir, fmt.Sprintf("%s%d%s", spoolPrefix, info.Applied, spoolSuffix))
	if err := fs.Rename(tmp, path); err != nil {
		_ = fs.Remove(tmp)
		return nil, fmt.Errorf("spool the state: %w", err)
	}
	r.log.Info("cluster: spooled the state for a member", "applied", info.Applied, "bytes", tag.size, "duration", time.Since(start))
	return &spool{path: path, tag: tag, made: time.Now()}, nil
}

// fileWriter writes a vfs.File from its start on, in order.
type fileWriter struct {
	f   vfs.File
	off int64
}

func (w *fileWriter) Write(b []byte) (int, error) {
	n, err := w.f.WriteAt(b, w.off)
	w.off += int64(n)
	return n, err
}

// serveSpool answers a request for the state from the spool: a range of it if asked
// for (and, with If-Range, if the spool is still the one named), paced.
func (r *Raft) serveSpool(w http.ResponseWriter, req *http.Request) {
	var min uint64
	if s := req.URL.Query().Get(minParam); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("%s=%q: want the raft index the state must hold, a number", minParam, s), http.StatusBadRequest)
			return
		}
		min = v
	}
	sp, f, err := r.openSpool(req.Context(), min, req.Header.Get("If-Range"))
	if err != nil {
		r.log.Warn("cluster: serving the state to a member failed", "error", err)
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer r.releaseSpool(f)
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("ETag", sp.tag.String())
	h.Set(appliedHeader, strconv.FormatUint(sp.tag.applied, 10))
	cw := &countingResponse{ResponseWriter: w, out: w}
	if r.cfg.SnapshotRate > 0 {
		cw.out = newPacedWriter(w, r.cfg.SnapshotRate)
	}
	http.ServeContent(cw, req, "", time.Time{}, io.NewSectionReader(f, 0, sp.tag.size))
	r.log.Info("cluster: served the state to a member", "applied", sp.tag.applied, "size", sp.tag.size,
		"range", req.Header.Get("Range"), "status", cw.status, "bytes", cw.n)
}

// countingResponse sends the body through out (the pacing) and counts it.
type countingResponse struct {
	http.ResponseWriter
	out    io.Writer
	n      int64
	status int
}

func (c *countingResponse) WriteHeader(code int) {
	c.status = code
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingResponse) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.out.Write(b)
	c.n += int64(n)
	return n, err
}

// downloadPath is the file a state is downloaded into before it is installed.
func (r *Raft) downloadPath() string {
	return filepath.Join(r.cfg.Dir, transferDir, downloadFile)
}

// dropDownload abandons the download under way.
func (r *Raft) dropDownload() {
	r.xfer.dl = nil
	if err := r.cfg.FS.Remove(r.downloadPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.log.Warn("cluster: removing a state's download", "error", err)
	}
}

// fetchFrom downloads m's state, holding entry idx at least, into the download file —
// the rest of it, if the download under way is m's and m still offers the same spool —
// and installs it once whole. It returns the bytes it received.
func (r *Raft) fetchFrom(ctx context.Context, m Member, idx uint64) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dl := r.xfer.dl
	resume := dl != nil && dl.member == m.ID && dl.tag.applied >= idx && dl.have > 0
	url := fmt.Sprintf("%s%s?%s=%d", m.URL, SnapshotPath, minParam, idx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set(SecretHeader, proof(r.cfg.Secret))
	if resume && dl.have < dl.tag.size {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", dl.have))
		req.Header.Set("If-Range", dl.tag.String())
	}
	var got int64
	if !resume || dl.have < dl.tag.size {
		resp, err := r.fetchClient().Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		got, err = r.receive(resp, m, idx, resume)
		if err != nil {
			return got, err
		}
	}
	dl = r.xfer.dl
	if dl.have != dl.tag.size {
		return got, fmt.Errorf("the state ended after %d of its %d bytes", dl.have, dl.tag.size)
	}
	defer r.dropDownload()
	if sum := hex.EncodeToString(dl.sum.Sum(nil)); sum != dl.tag.sum {
		return got, fmt.Errorf("the state's download has SHA-256 %s, its member's spool %s", sum, dl.tag.sum)
	}
	f, err := r.cfg.FS.OpenFile(r.downloadPath(), os.O_RDONLY, 0)
	if err != nil {
		return got, err
	}
	defer f.Close()
	_, err = r.b.Install(io.NewSectionReader(f, 0, dl.tag.size), idx)
	return got, err
}

// receive writes a response for the state into the download: the rest of it (206), or
// all of a new one (200).
func (r *Raft) receive(resp *http.Response, m Member, idx uint64, resume bool) (int64, error) {
	dl := r.xfer.dl
	fs := r.cfg.FS
	flag := os.O_WRONLY
	switch resp.StatusCode {
	case http.StatusPartialContent:
		if !resume {
			return 0, fmt.Errorf("answered a range (206) to a request for the whole state")
		}
		var first, last, size int64
		if _, err := fmt.Sscanf(resp.Header.Get("Content-Range"), "bytes %d-%d/%d", &first, &last, &size); err != nil ||
			first != dl.have || size != dl.tag.size || resp.Header.Get("ETag") != dl.tag.String() {
			r.dropDownload()
			return 0, fmt.Errorf("answered a range %q of %s to a request for bytes %d- of %s",
				resp.Header.Get("Content-Range"), resp.Header.Get("ETag"), dl.have, dl.tag)
		}
		r.xfer.resumes.Add(1)
		r.log.Info("cluster: resuming the transfer of a state", "from", m.Name, "applied", dl.tag.applied, "at", dl.have, "size", dl.tag.size)
	case http.StatusOK:
		tag, err := parseSpoolTag(resp.Header.Get("ETag"))
		if err != nil {
			return 0, err
		}
		if tag.applied < idx {
			return 0, fmt.Errorf("%s offers a state up to entry %d, the snapshot is at %d", m.Name, tag.applied, idx)
		}
		if resume {
			r.log.Info("cluster: the member's spool of the state changed; starting the transfer over", "from", m.Name,
				"had", dl.have, "applied", tag.applied)
		}
		if err := fs.MkdirAll(filepath.Join(r.cfg.Dir, transferDir), vfs.DirMode); err != nil {
			return 0, err
		}
		dl = &download{member: m.ID, tag: tag, sum: sha256.New()}
		r.xfer.dl = dl
		flag |= os.O_CREATE | os.O_TRUNC
	case http.StatusRequestedRangeNotSatisfiable:
		if !resume {
			return 0, fmt.Errorf("answered 416 to a request for the whole state")
		}
		r.dropDownload()
		return 0, fmt.Errorf("answered 416 to bytes %d- of %s: starting over", dl.have, dl.tag)
	default:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, fmt.Errorf("answered %d: %s", resp.StatusCode, msg)
	}
	f, err := fs.OpenFile(r.downloadPath(), flag, vfs.FileMode)
	if err != nil {
		r.xfer.dl = nil
		return 0, err
	}
	defer f.Close()
	start := dl.have
	buf := make([]byte, 256<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if int64(n) > dl.tag.size-dl.have {
				r.dropDownload()
				return dl.have - start, fmt.Errorf("the state runs past its %d bytes", dl.tag.size)
			}
			w, werr := f.WriteAt(buf[:n], dl.have)
			dl.sum.Write(buf[:w])
			dl.have += int64(w)
			if werr != nil {
				return dl.have - start, fmt.Errorf("write the state's download: %w", werr)
			}
		}
		if rerr == io.EOF {
			return dl.have - start, nil
		}
		if rerr != nil {
			return dl.have - start, rerr
		}
	}
}
