// Package coalesce writes to a connection from many goroutines without a writer
// goroutine: whoever finds no write running writes, and takes along everything the
// others added meanwhile. Answers that complete together (a group commit wakes dozens
// at once) leave in one system call, and a lone answer pays no hand-off to another
// goroutine, which on a machine whose idle cores sleep costs more than the write.
package coalesce

import (
	"io"
	"sync"
)

// maxSpare is the largest buffer kept between writes.
const maxSpare = 1 << 20

// Writer coalesces writes to w. The zero value is not usable; see New.
type Writer struct {
	w       io.Writer
	mu      sync.Mutex
	out     []byte // waiting for the running write
	spare   []byte
	writing bool
	err     error
}

// New returns a Writer to w.
func New(w io.Writer) *Writer { return &Writer{w: w} }

// Write appends what fill appends to the output (fill runs under the Writer's lock and
// must be quick) and returns once it is written, or handed to the goroutine writing
// now. It returns the first write error, after which nothing more is written.
func (c *Writer) Write(fill func([]byte) []byte) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.out = fill(c.out)
	if c.writing {
		c.mu.Unlock()
		return nil
	}
	c.writing = true
	for len(c.out) > 0 && c.err == nil {
		buf := c.out
		c.out = c.spare[:0]
		c.spare = nil
		c.mu.Unlock()
		_, err := c.w.Write(buf)
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
