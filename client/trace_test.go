package client_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/internal/testkit"
	"github.com/okiba/okiba/okibatest"
)

// TestTraceContinuesThroughAQueue sends from inside a span and consumes with the
// consumer runtime: the handler's span continues the sender's trace, as a child of the
// send span, and carries the correlation id on to what it sends.
func TestTraceContinuesThroughAQueue(t *testing.T) {
	t.Parallel()
	for _, json := range []bool{false, true} {
		t.Run(map[bool]string{false: "binary", true: "json"}[json], func(t *testing.T) {
			t.Parallel()
			srv := okibatest.New(t, okibatest.Options{})
			srv.CreateQueue(t, "orders")
			srv.CreateQueue(t, "payments")
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			defer tp.Shutdown(context.Background())
			c, err := client.New(srv.URL, client.Options{TracerProvider: tp, JSON: json})
			if err != nil {
				t.Fatal(err)
			}

			ctx, parent := tp.Tracer("test").Start(context.Background(), "checkout")
			ctx = client.WithCorrelationID(ctx, "order-42")
			headers := map[string]string{"content-type": "text/plain"}
			if _, err := c.Send(ctx, "orders", client.Message{Body: []byte("pay"), Headers: headers}); err != nil {
				t.Fatal(err)
			}
			parent.End()
			if len(headers) != 1 {
				t.Fatalf("Send changed the caller's headers: %v", headers)
			}

			type seen struct {
				sc          trace.SpanContext
				correlation string
				headers     map[string]string
			}
			got := make(chan seen, 1)
			cctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- c.Consume(cctx, "orders", func(ctx context.Context, d *client.Delivery) error {
					// What the handler sends carries the trace and the correlation id on.
					if _, err := c.Send(ctx, "payments", client.Message{Body: []byte("charge")}); err != nil {
						return err
					}
					got <- seen{trace.SpanContextFromContext(ctx), client.CorrelationID(ctx), d.Headers}
					return nil
				}, client.ConsumeOptions{PollWait: 50 * time.Millisecond})
			}()
			s := testkit.Recv(t, got, 10*time.Second, "the handler")
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}

			if s.headers["traceparent"] == "" || s.headers["correlation-id"] != "order-42" || s.headers["content-type"] != "text/plain" {
				t.Fatalf("delivered headers = %v", s.headers)
			}
			if s.sc.TraceID() != parent.SpanContext().TraceID() {
				t.Fatalf("handler trace %s, sender trace %s", s.sc.TraceID(), parent.SpanContext().TraceID())
			}
			if s.correlation != "order-42" {
				t.Fatalf("handler correlation id %q", s.correlation)
			}
			spans := map[string]sdktrace.ReadOnlySpan{}
			for _, sp := range rec.Ended() {
				spans[sp.Name()] = sp
			}
			send, process := spans["send orders"], spans["process orders"]
			if send == nil || process == nil || spans["send payments"] == nil {
				t.Fatalf("spans recorded: %v", keys(spans))
			}
			if send.Parent().SpanID() != parent.SpanContext().SpanID() || send.SpanKind() != trace.SpanKindProducer {
				t.Errorf("send span: parent %s kind %v", send.Parent().SpanID(), send.SpanKind())
			}
			if process.Parent().SpanID() != send.SpanContext().SpanID() || !process.Parent().IsRemote() || process.SpanKind() != trace.SpanKindConsumer {
				t.Errorf("process span: parent %s (remote %v), want the send span %s", process.Parent().SpanID(), process.Parent().IsRemote(), send.SpanContext().SpanID())
			}
			if spans["send payments"].Parent().SpanID() != process.SpanContext().SpanID() {
				t.Error("a send from the handler is not a child of the process span")
			}

			// The message the handler sent: same trace, same correlation id.
			ds, err := srv.Client.Receive(context.Background(), "payments", client.ReceiveOptions{Max: 1})
			if err != nil || len(ds) != 1 {
				t.Fatalf("receive payments: %v %v", ds, err)
			}
			if ds[0].Headers["correlation-id"] != "order-42" {
				t.Errorf("forwarded correlation id = %q", ds[0].Headers["correlation-id"])
			}
		})
	}
}

// TestTraceWithoutAnSDK: with the global, non-recording provider a sender's incoming
// trace context still travels (so a service that only forwards keeps the trace
// whole), and a sender without one adds no header.
func TestTraceWithoutAnSDK(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	c := srv.Client
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	remote := trace.ContextWithRemoteSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
	p := client.NewProducer(c, "q", client.ProducerOptions{})
	if _, err := p.Send(remote, client.Message{Body: []byte("traced")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(context.Background(), "q", client.Message{Body: []byte("untraced")}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	ds, err := c.Receive(context.Background(), "q", client.ReceiveOptions{Max: 2})
	if err != nil || len(ds) != 2 {
		t.Fatalf("receive: %v %v", len(ds), err)
	}
	for _, d := range ds {
		switch string(d.Body) {
		case "traced":
			if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; d.Headers["traceparent"] != want {
				t.Errorf("traceparent = %q, want %q", d.Headers["traceparent"], want)
			}
		case "untraced":
			if len(d.Headers) != 0 {
				t.Errorf("headers without a trace: %v", d.Headers)
			}
		default:
			t.Errorf("received %q, which was never sent", d.Body)
		}
	}
}

// TestHandlerErrorMarksItsSpan: a failed handler's span records the error.
func TestHandlerErrorMarksItsSpan(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{})
	srv.CreateQueue(t, "q")
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	c, err := client.New(srv.URL, client.Options{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(context.Background(), "q", client.Message{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(ctx, "q", func(ctx context.Context, d *client.Delivery) error {
			ran <- struct{}{}
			return client.DeadLetter("broken", "")
		}, client.ConsumeOptions{PollWait: 50 * time.Millisecond})
	}()
	testkit.Recv(t, ran, 10*time.Second, "the handler")
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, sp := range rec.Ended() {
		if sp.Name() == "process q" {
			if sp.Status().Code.String() != "Error" || len(sp.Events()) == 0 {
				t.Fatalf("process span status %v, events %d", sp.Status(), len(sp.Events()))
			}
			return
		}
	}
	t.Fatal("no process span")
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
