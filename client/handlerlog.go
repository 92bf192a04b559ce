package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/okiba/okiba/clock"
)

// A handler's error must not be lost from sight: the consumer logs every outcome other
// than success, with the message's id, queue and delivery count and the error. A handler
// that fails on every message of a busy queue must not flood the log either: of each
// handlerLogInterval, by the client's clock, the first handlerLogBurst lines are logged
// and the rest counted, and one line reports the count when the interval ends (or when
// Consume returns).
const (
	handlerLogBurst    = 10
	handlerLogInterval = 10 * time.Second
)

// logLimit decides which lines of a stream are logged: the first burst of each interval,
// which opens with the first line after the previous one closed; the others are counted
// for one line that reports them. It reads no clock: the caller passes the time.
type logLimit struct {
	interval time.Duration
	burst    int

	start   time.Time // when the current interval opened; zero when none is open
	logged  int
	dropped int
	level   slog.Level // the highest level dropped in the current interval
}

// drops is what an interval did not log: how many lines, the highest of their levels
// (the report's, so that a logger that would have shown them shows their count), and
// how long the interval lasted.
type drops struct {
	n     int
	level slog.Level
	over  time.Duration
}

// allow says whether a line at level may be logged at now. When now falls past the
// current interval, that interval closes and its drops are returned, to be reported
// first.
func (l *logLimit) allow(now time.Time, level slog.Level) (ok bool, closed drops) {
	if l.start.IsZero() || !now.Before(l.start.Add(l.interval)) {
		closed = l.close(now)
		l.start = now
	}
	if l.logged < l.burst {
		l.logged++
		return true, closed
	}
	if l.dropped == 0 || level > l.level {
		l.level = level
	}
	l.dropped++
	return false, closed
}

// due is when the current interval's drops are to be reported: its end, or the zero
// time when it dropped nothing.
func (l *logLimit) due() time.Time {
	if l.dropped == 0 {
		return time.Time{}
	}
	return l.start.Add(l.interval)
}

// end closes the current interval if it is over at now, or whatever its time if force,
// and returns its drops; it returns none while the interval runs.
func (l *logLimit) end(now time.Time, force bool) drops {
	if l.start.IsZero() || (!force && now.Before(l.start.Add(l.interval))) {
		return drops{}
	}
	return l.close(now)
}

func (l *logLimit) close(now time.Time) drops {
	var d drops
	if l.dropped > 0 {
		d = drops{n: l.dropped, level: l.level, over: min(max(now.Sub(l.start), 0), l.interval)}
	}
	*l = logLimit{interval: l.interval, burst: l.burst}
	return d
}

// handlerLog logs handlers' outcomes through a logLimit, and its goroutine (run)
// reports an interval's drops when the interval ends.
type handlerLog struct {
	log   *slog.Logger
	clock clock.Clock
	scope []slog.Attr   // what the lines are about: the queue, or the topic and group
	kick  chan struct{} // the first line of an interval was dropped: run has a report to time

	mu    sync.Mutex
	limit logLimit
}

func newHandlerLog(log *slog.Logger, clk clock.Clock, scope ...slog.Attr) *handlerLog {
	return &handlerLog{log: log, clock: clk, scope: scope, kick: make(chan struct{}, 1),
		limit: logLimit{interval: handlerLogInterval, burst: handlerLogBurst}}
}

// outcome logs what a handler returned for d, unless it succeeded. lost says that the
// lease ended under the handler, stopped that the consumer had cancelled the handler's
// context by stopping hard.
func (h *handlerLog) outcome(d *Delivery, err error, lost, stopped bool) {
	if err == nil {
		return
	}
	level, msg, attrs := describe(err, lost, stopped)
	attrs = append(append(h.scope[:len(h.scope):len(h.scope)], slog.String("message", d.ID),
		slog.Int("deliveries", int(d.Deliveries)), correlation(d), slog.String("error", err.Error())), attrs...)
	h.line(level, msg, attrs)
}

// line logs one line if the limit allows, and counts it if not. Lines the logger would
// not show at their level are neither logged nor counted.
func (h *handlerLog) line(level slog.Level, msg string, attrs []slog.Attr) {
	ctx := context.Background()
	if !h.log.Enabled(ctx, level) {
		return
	}
	h.mu.Lock()
	ok, closed := h.limit.allow(h.clock.Now(), level)
	firstDrop := !ok && h.limit.dropped == 1
	h.mu.Unlock()
	h.report(closed)
	if ok {
		h.log.LogAttrs(ctx, level, msg, attrs...)
	}
	if firstDrop {
		kick(h.kick)
	}
}

// report logs the count of an interval's drops, if any.
func (h *handlerLog) report(d drops) {
	if d.n == 0 {
		return
	}
	attrs := append(h.scope[:len(h.scope):len(h.scope)], slog.Int("more", d.n), slog.Duration("interval", d.over))
	h.log.LogAttrs(context.Background(), d.level, "okiba: more handler errors in the last interval, not logged one by one", attrs...)
}

// run is the handler log's goroutine: it reports each interval's drops when the
// interval ends, until ctx ends.
func (h *handlerLog) run(ctx context.Context) {
	wake := alarm{clock: h.clock}
	defer wake.stop()
	for {
		h.mu.Lock()
		due := h.limit.due()
		h.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
		case <-wake.set(due):
			wake.rang()
			h.mu.Lock()
			closed := h.limit.end(h.clock.Now(), false)
			h.mu.Unlock()
			h.report(closed)
		}
	}
}

// flush reports the current interval's drops so far; Consume calls it once its handlers
// have returned, so that no count is lost.
func (h *handlerLog) flush() {
	h.mu.Lock()
	closed := h.limit.end(h.clock.Now(), true)
	h.mu.Unlock()
	h.report(closed)
}

// describe says how a handler's error is logged: at what level, with what message, and
// with what more than the message's id, queue, deliveries and the error. A panic is a
// bug whatever else happened; the other cases follow judge's order.
func describe(err error, lost, stopped bool) (slog.Level, string, []slog.Attr) {
	var pe *panicError
	var dl *DeadLetterError
	var ra *RetryAfterError
	switch {
	case errors.As(err, &pe):
		return slog.LevelError, "okiba: handler panicked; the message will be retried",
			[]slog.Attr{slog.String("panic", fmt.Sprint(pe.value)), slog.String("stack", string(pe.stack))}
	case lost:
		return slog.LevelInfo, "okiba: handler returned after its lease was lost; its outcome is ignored", nil
	case errors.As(err, &dl):
		return slog.LevelWarn, "okiba: handler dead-lettered the message", []slog.Attr{slog.String("reason", dl.Reason)}
	case errors.As(err, &ra):
		return slog.LevelInfo, "okiba: handler asked for the message again later", []slog.Attr{slog.Duration("retry_after", nackDelay(ra.Delay))}
	case stopped:
		return slog.LevelInfo, "okiba: handler cut short by the consumer's stop; the message goes back at once", nil
	default:
		return slog.LevelError, "okiba: handler failed; the message will be retried", nil
	}
}

// panicError is a handler's panic, recovered.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("client: handler panicked: %v", e.value) }
