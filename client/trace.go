package client

import (
	"context"
	"log/slog"
	"slices"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing and correlation.
//
// The client follows W3C Trace Context through messages with the OpenTelemetry API: a
// send injects the sender's trace context into the message headers ("traceparent",
// "tracestate"), and Consume extracts it and runs the handler in a span continuing that
// trace. Spans go to Options.TracerProvider, by default the global one, which records
// nothing until the application installs an OpenTelemetry SDK with the exporter of its
// choice: okiba brings no exporter. Without a span in the sender's context, nothing is
// injected.
//
// A correlation id ties together the messages of one business conversation (an order,
// a request) across services. It travels in the "correlation-id" header: a send whose
// message has none takes the one in its context (WithCorrelationID); Consume puts a
// delivery's correlation id into the handler's context, so that what the handler sends
// carries it on, and adds it to the runtime's log lines.

// Header names the client reads and writes.
const (
	CorrelationIDHeader = "correlation-id"
	TraceParentHeader   = "traceparent"
	TraceStateHeader    = "tracestate"
)

const tracerName = "github.com/okiba/okiba/client"

type correlationKey struct{}

// WithCorrelationID returns ctx carrying a correlation id, which sends made with it
// put in the "correlation-id" header of messages that have none.
func WithCorrelationID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, correlationKey{}, id)
}

// CorrelationID returns the correlation id carried by ctx (in a handler: the delivery's),
// or "".
func CorrelationID(ctx context.Context) string {
	id, _ := ctx.Value(correlationKey{}).(string)
	return id
}

// sendSpan starts the span of one send request to queue and returns the context to
// inject into its messages.
func (c *Client) sendSpan(ctx context.Context, queue string, n int) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "okiba"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", queue),
	}
	if n > 1 {
		attrs = append(attrs, attribute.Int("messaging.batch.message_count", n))
	}
	return c.tracer.Start(ctx, "send "+queue, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
}

// sendSpanIfTracing starts the span of one message handed to a Producer, but only when
// the sender is tracing (a span in ctx): a span per message costs more than the rest of
// a pipelined send, and without a trace to continue there is nothing to inject.
func (c *Client) sendSpanIfTracing(ctx context.Context, queue string) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nil
	}
	return c.sendSpan(ctx, queue, 1)
}

// decorate adds the correlation id and the trace context of ctx to a message's headers,
// copying the map rather than changing the caller's. Headers the caller set win.
func (c *Client) decorate(ctx context.Context, headers map[string]string) map[string]string {
	var add lazyCarrier
	if id := CorrelationID(ctx); id != "" && headers[CorrelationIDHeader] == "" {
		add.Set(CorrelationIDHeader, id)
	}
	c.prop.Inject(ctx, &add)
	if len(add.m) == 0 {
		return headers
	}
	out := make(map[string]string, len(headers)+len(add.m))
	for k, v := range add.m {
		out[k] = v
	}
	for k, v := range headers {
		out[k] = v
	}
	return out
}

// processSpan starts the span in which Consume runs the handler for d: a consumer span
// whose parent is the trace context the message carries (or ctx's, if none). The
// returned context also carries the delivery's correlation id.
func (c *Client) processSpan(ctx context.Context, queue string, d *Delivery) (context.Context, trace.Span) {
	if len(d.Headers) > 0 {
		ctx = c.prop.Extract(ctx, propagation.MapCarrier(d.Headers))
		if id := d.Headers[CorrelationIDHeader]; id != "" {
			ctx = WithCorrelationID(ctx, id)
		}
	}
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "okiba"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", queue),
		attribute.String("messaging.message.id", d.ID),
		attribute.Int("messaging.okiba.deliveries", int(d.Deliveries)),
	}
	if id := CorrelationID(ctx); id != "" {
		attrs = append(attrs, attribute.String("messaging.message.conversation_id", id))
	}
	if d.Group != "" {
		attrs = append(attrs, attribute.String("messaging.okiba.group", d.Group))
	}
	return c.tracer.Start(ctx, "process "+queue, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

// endSpan ends a span with the outcome err.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// correlation is the log attribute of a delivery's correlation id (empty, and so left
// out by slog's handlers, when it has none).
func correlation(d *Delivery) slog.Attr {
	if id := d.Headers[CorrelationIDHeader]; id != "" {
		return slog.String("correlation_id", id)
	}
	return slog.Attr{}
}

// tracing returns the propagator and tracer of opts, with the defaults.
func tracing(opts Options) (propagation.TextMapPropagator, trace.Tracer) {
	prop := opts.Propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return prop, tp.Tracer(tracerName)
}

// lazyCarrier is a TextMapCarrier that allocates its map on the first Set.
type lazyCarrier struct{ m map[string]string }

func (c *lazyCarrier) Get(k string) string { return c.m[k] }

func (c *lazyCarrier) Set(k, v string) {
	if c.m == nil {
		c.m = make(map[string]string, 2)
	}
	c.m[k] = v
}

func (c *lazyCarrier) Keys() []string {
	out := make([]string, 0, len(c.m))
	for k := range c.m {
		out = append(out, k)
	}
	return out
}

// decorateAll decorates every message, copying the slice only if a message changes.
func (c *Client) decorateAll(ctx context.Context, msgs []Message) []Message {
	out := msgs
	for i := range msgs {
		h := c.decorate(ctx, msgs[i].Headers)
		if len(h) == len(msgs[i].Headers) {
			continue // nothing added: decorate never removes
		}
		if &out[0] == &msgs[0] {
			out = slices.Clone(msgs)
		}
		out[i].Headers = h
	}
	return out
}
