// Package coalesce writes to a connection from many goroutines without a writer
// goroutine: whoever finds no write running writes, and takes along everything the
// others added meanwhile. Answers that complete together (a group commit wakes dozens
// at once) leave in one system call, and a lone answer pays no hand-off to another
// goroutine, which on a machine whose idle cores sleep costs more than the write.
package coalesce

import (
	"io"
	"net"
	"sync"
)

// maxSpare is the largest buffer kept between writes.
const maxSpare = 1 << 20

// LargeBody is the size from which WriteBody sends a body as it lies instead of copying
// it into the output buffer: a copy of a few KiB costs less than a piece of a vectored
// write, a copy of megabytes (a pull's answer) costs a buffer as large and its page
// faults.
const LargeBody = 64 << 10

// BuffersWriter is a writer that sends several buffers in one call (a connection's
// writev). A Writer to one sends its large bodies that way; to any other writer, one
// Write per piece.
type BuffersWriter interface {
	WriteBuffers(bufs *net.Buffers) (int64, error)
}

// Writer coalesces writes to w. The zero value is not usable; see New.
type Writer struct {
	w  io.Writer
	mu sync.Mutex
	// queued are the pieces ahead of out, waiting for the running write: the bytes
	// before a large body, and the body.
	queued  net.Buffers
	out     []byte // waiting for the running write, after queued
	spare   []byte
	writing bool
	err     error
}

// New returns a Writer to w.
func New(w io.Writer) *Writer { return &Writer{w: w} }

// Write appends what fill appends to the output (fill runs under the Writer's lock and
// must be quick) and returns once it is written, or handed to the goroutine writing
// now. It returns the first write error, after which nothing more is written.
func (c *Writer) Write(fill func([]byte) []byte) error { return c.WriteBody(fill, nil) }

// WriteBody is Write followed by body: what fill appends, then body, with nothing
// between them. A body of LargeBody bytes or more is sent as it lies, not copied, so it
// must not change until WriteBody returns, and not after either if another write was
// running (it took the body along): a caller hands the body over for good.
func (c *Writer) WriteBody(fill func([]byte) []byte, body []byte) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.out = fill(c.out)
	if len(body) >= LargeBody {
		c.queued = append(c.queued, c.out, body)
		c.out = nil
	} else {
		c.out = append(c.out, body...)
	}
	if c.writing {
		c.mu.Unlock()
		return nil
	}
	c.writing = true
	for (len(c.out) > 0 || len(c.queued) > 0) && c.err == nil {
		bufs, buf := c.queued, c.out
		c.queued = nil
		c.out = c.spare[:0]
		c.spare = nil
		c.mu.Unlock()
		err := c.send(bufs, buf)
		c.mu.Lock()
		if err != nil {
			c.err = err
		}
		if cap(buf) <= maxSpare {
			c.spare = buf[:0]
		}
	}
	c.writing = false
	err := c.err
	c.mu.Unlock()
	return err
}

// send writes the queued pieces, then buf.
func (c *Writer) send(bufs net.Buffers, buf []byte) error {
	if len(bufs) == 0 {
		_, err := c.w.Write(buf)
		return err
	}
	if len(buf) > 0 {
		bufs = append(bufs, buf)
	}
	if bw, ok := c.w.(BuffersWriter); ok {
		_, err := bw.WriteBuffers(&bufs)
		return err
	}
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if _, err := c.w.Write(b); err != nil {
			return err
		}
	}
	return nil
}
