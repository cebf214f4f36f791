package gpusched_test

// Wrapper behaviour that needs no gpusched-server: an in-process gRPC server on 127.0.0.1
// records what the Client sends (deadline, trace context) and answers with chosen statuses.

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gpusched/gpusched/clients/go/gpusched"
	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

type fakeServer struct {
	v1.UnimplementedPlacementServiceServer
	v1.UnimplementedInventoryServiceServer

	mu          sync.Mutex
	hasDeadline bool
	remaining   time.Duration
	md          metadata.MD
	err         error // answer of every call when set
}

func (f *fakeServer) record(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	dl, ok := ctx.Deadline()
	f.hasDeadline = ok
	if ok {
		f.remaining = time.Until(dl)
	}
	f.md, _ = metadata.FromIncomingContext(ctx)
	return f.err
}

func (f *fakeServer) Allocate(ctx context.Context, _ *v1.AllocateRequest) (*v1.AllocateResponse, error) {
	if err := f.record(ctx); err != nil {
		return nil, err
	}
	return &v1.AllocateResponse{Result: &v1.AllocationResult{Placed: true, NodeName: "fake"}}, nil
}

func (f *fakeServer) NormalizeInventory(ctx context.Context, _ *v1.NormalizeInventoryRequest) (*v1.NormalizeInventoryResponse, error) {
	if err := f.record(ctx); err != nil {
		return nil, err
	}
	return &v1.NormalizeInventoryResponse{}, nil
}

func (f *fakeServer) seen() (bool, time.Duration, metadata.MD) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hasDeadline, f.remaining, f.md
}

func startFake(t *testing.T) (*fakeServer, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{}
	s := grpc.NewServer()
	v1.RegisterPlacementServiceServer(s, f)
	v1.RegisterInventoryServiceServer(s, f)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return f, lis.Addr().String()
}

func TestDefaultDeadlineIsAppliedWhenTheContextHasNone(t *testing.T) {
	f, addr := startFake(t)
	c := dial(t, addr, gpusched.WithTimeout(7*time.Second))
	if _, err := c.Allocate(context.Background(), &v1.AllocateRequest{}); err != nil {
		t.Fatal(err)
	}
	has, remaining, _ := f.seen()
	if !has || remaining > 7*time.Second || remaining < 5*time.Second {
		t.Fatalf("server saw deadline=%v remaining=%v, want about 7s", has, remaining)
	}
	// The inventory service and the raw stubs go through the same connection default.
	if _, err := c.NormalizeInventory(context.Background(), &v1.NormalizeInventoryRequest{}); err != nil {
		t.Fatal(err)
	}
	if has, _, _ := f.seen(); !has {
		t.Fatal("NormalizeInventory: no deadline")
	}
	if _, err := c.PlacementService().Allocate(context.Background(), &v1.AllocateRequest{}); err != nil {
		t.Fatal(err)
	}
	if has, _, _ := f.seen(); !has {
		t.Fatal("raw stub: no deadline")
	}
}

func TestTheCallersDeadlineWins(t *testing.T) {
	f, addr := startFake(t)
	c := dial(t, addr, gpusched.WithTimeout(2*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Allocate(ctx, &v1.AllocateRequest{}); err != nil {
		t.Fatal(err)
	}
	if has, remaining, _ := f.seen(); !has || remaining < 50*time.Second {
		t.Fatalf("server saw deadline=%v remaining=%v, want about 1m (the caller's)", has, remaining)
	}
}

func TestDefaultTimeoutIsThirtySecondsAndZeroDisablesIt(t *testing.T) {
	f, addr := startFake(t)
	c := dial(t, addr)
	if _, err := c.Allocate(context.Background(), &v1.AllocateRequest{}); err != nil {
		t.Fatal(err)
	}
	if has, remaining, _ := f.seen(); !has || remaining > gpusched.DefaultTimeout || remaining < gpusched.DefaultTimeout-5*time.Second {
		t.Fatalf("server saw deadline=%v remaining=%v, want about %v", has, remaining, gpusched.DefaultTimeout)
	}
	c = dial(t, addr, gpusched.WithTimeout(0))
	if _, err := c.Allocate(context.Background(), &v1.AllocateRequest{}); err != nil {
		t.Fatal(err)
	}
	if has, _, _ := f.seen(); has {
		t.Fatal("WithTimeout(0): the server saw a deadline")
	}
}

func TestErrorCarriesTheStatusDetails(t *testing.T) {
	f, addr := startFake(t)
	c := dial(t, addr)

	st, err := status.New(codes.InvalidArgument, "invalid argument: bad weights").WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: `workload.kubernetes.annotations["hami.io/device-scoring-weights"]`, Description: "not an integer", Reason: "INVALID_SCORING_WEIGHTS"},
			{Field: "nodes[1].name", Description: "duplicate", Reason: "DUPLICATE_ID"},
		},
	}, &errdetails.ErrorInfo{Reason: "INVALID_SCORING_WEIGHTS", Domain: "gpusched.io", Metadata: map[string]string{"violationCount": "2"}})
	if err != nil {
		t.Fatal(err)
	}
	f.err = st.Err()
	_, err = c.Allocate(context.Background(), &v1.AllocateRequest{})
	var e *gpusched.Error
	if !errors.As(err, &e) {
		t.Fatalf("%T %v is not *gpusched.Error", err, err)
	}
	if e.Code != codes.InvalidArgument || !gpusched.IsInvalidArgument(err) || gpusched.Code(err) != codes.InvalidArgument {
		t.Fatalf("code %v", e.Code)
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatal("status.Code does not see through *Error")
	}
	want := []gpusched.FieldViolation{
		{Field: `workload.kubernetes.annotations["hami.io/device-scoring-weights"]`, Description: "not an integer", Reason: "INVALID_SCORING_WEIGHTS"},
		{Field: "nodes[1].name", Description: "duplicate", Reason: "DUPLICATE_ID"},
	}
	if got := gpusched.FieldViolations(err); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("violations %v", got)
	}
	if e.Reason() != "INVALID_SCORING_WEIGHTS" || e.ErrorInfo.Domain != gpusched.ErrorDomain || e.ErrorInfo.Metadata["violationCount"] != "2" {
		t.Fatalf("error info %+v", e.ErrorInfo)
	}
	if got := e.ViolationsOf(v1.ViolationReason_VIOLATION_REASON_DUPLICATE_ID); len(got) != 1 || got[0].Field != "nodes[1].name" {
		t.Fatalf("ViolationsOf(DUPLICATE_ID): %v", got)
	}
	if k := e.FieldViolations[0].Kind(); k != v1.ViolationReason_VIOLATION_REASON_INVALID_SCORING_WEIGHTS {
		t.Fatalf("Kind(): %v", k)
	}
	if gpusched.ViolationReasonOf("NOT_A_REASON") != v1.ViolationReason_VIOLATION_REASON_UNSPECIFIED ||
		gpusched.ViolationReasonOf("") != v1.ViolationReason_VIOLATION_REASON_UNSPECIFIED {
		t.Fatal("ViolationReasonOf of an unknown reason")
	}
	for n := range v1.ViolationReason_name {
		k := v1.ViolationReason(n)
		if gpusched.ViolationReasonOf(gpusched.ViolationReasonString(k)) != k {
			t.Fatalf("reason %v does not round-trip", k)
		}
	}
	if v, ok := e.Violation(gpusched.AnnotationDeviceScoringWeights); !ok || v.Description != "not an integer" {
		t.Fatalf("Violation(): %v %v", v, ok)
	}
	if _, ok := e.Violation("nope"); ok {
		t.Fatal("Violation(nope) found something")
	}
	if got := e.Fields(); len(got) != 2 || got[1] != "nodes[1].name" {
		t.Fatalf("Fields(): %v", got)
	}
	if msg := err.Error(); !strings.Contains(msg, "INVALID_ARGUMENT") || !strings.Contains(msg, "nodes[1].name: duplicate") {
		t.Fatalf("Error(): %s", msg)
	}
	if !errors.Is(err, &gpusched.Error{Code: codes.InvalidArgument}) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("errors.Is")
	}

	// RESOURCE_EXHAUSTED with a quota failure, and a busy server with a retry delay.
	st, _ = status.New(codes.ResourceExhausted, "request too large").WithDetails(&errdetails.QuotaFailure{
		Violations: []*errdetails.QuotaFailure_Violation{{Subject: "limits.max_nodes", Description: "3 nodes > 2"}},
	})
	f.err = st.Err()
	_, err = c.Allocate(context.Background(), &v1.AllocateRequest{})
	e = gpusched.FromError(err)
	if !gpusched.IsResourceExhausted(err) || len(e.QuotaViolations) != 1 || e.QuotaViolations[0].Subject != "limits.max_nodes" {
		t.Fatalf("quota: %+v", e)
	}
	st, _ = status.New(codes.Unavailable, "server is shutting down").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(100 * time.Millisecond)})
	f.err = st.Err()
	_, err = c.NormalizeInventory(context.Background(), &v1.NormalizeInventoryRequest{})
	if e = gpusched.FromError(err); !gpusched.IsUnavailable(err) || e.RetryDelay != 100*time.Millisecond {
		t.Fatalf("retry: %+v", e)
	}

	// No details at all.
	f.err = status.Error(codes.Internal, "boom")
	_, err = c.Allocate(context.Background(), &v1.AllocateRequest{})
	if e = gpusched.FromError(err); e.Code != codes.Internal || e.FieldViolations != nil || e.Message != "boom" {
		t.Fatalf("plain: %+v", e)
	}
}

func TestErrorHelpersOnOtherErrors(t *testing.T) {
	if gpusched.Code(nil) != codes.OK || gpusched.FromError(nil) != nil || gpusched.FieldViolations(nil) != nil {
		t.Fatal("nil")
	}
	plain := errors.New("not grpc")
	if gpusched.Code(plain) != codes.Unknown || gpusched.IsInvalidArgument(plain) {
		t.Fatal("plain error")
	}
	e := &gpusched.Error{Code: codes.DeadlineExceeded, Message: "late"}
	wrapped := errors.Join(errors.New("context"), e)
	if !gpusched.IsDeadlineExceeded(wrapped) || !errors.Is(wrapped, context.DeadlineExceeded) {
		t.Fatal("wrapped *Error")
	}
	if status.Code(e) != codes.DeadlineExceeded {
		t.Fatal("GRPCStatus of a hand-made *Error")
	}
	if gpusched.CodeName(codes.Canceled) != "CANCELLED" || gpusched.CodeName(codes.InvalidArgument) != "INVALID_ARGUMENT" {
		t.Fatal("CodeName")
	}
}

func TestClientSideDeadlineIsDeadlineExceeded(t *testing.T) {
	_, addr := startFake(t)
	c := dial(t, addr, gpusched.WithTimeout(time.Nanosecond))
	_, err := c.Allocate(context.Background(), &v1.AllocateRequest{})
	if !gpusched.IsDeadlineExceeded(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Allocate(ctx, &v1.AllocateRequest{})
	if gpusched.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestOpenTelemetryPropagatesTheTraceContext(t *testing.T) {
	f, addr := startFake(t)
	c := dial(t, addr, gpusched.WithOpenTelemetry(otelgrpc.WithPropagators(propagation.TraceContext{})))
	traceID := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    traceID,
		SpanID:     trace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	if _, err := c.Allocate(ctx, &v1.AllocateRequest{}); err != nil {
		t.Fatal(err)
	}
	_, _, md := f.seen()
	tp := md.Get("traceparent")
	if len(tp) != 1 || !strings.Contains(tp[0], traceID.String()) {
		t.Fatalf("traceparent %q, want trace id %s", tp, traceID)
	}
	// Without the option nothing is injected.
	c = dial(t, addr)
	if _, err := c.Allocate(ctx, &v1.AllocateRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, _, md := f.seen(); len(md.Get("traceparent")) != 0 {
		t.Fatal("traceparent without WithOpenTelemetry")
	}
}

func TestWithBlockFailsWhenNothingListens(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if c, err := gpusched.Dial(ctx, addr, gpusched.WithBlock()); err == nil {
		_ = c.Close()
		t.Fatal("Dial with WithBlock succeeded with nothing listening")
	}
	// Lazily, Dial succeeds and the call fails UNAVAILABLE.
	c := dial(t, addr, gpusched.WithTimeout(2*time.Second))
	if _, err := c.Allocate(context.Background(), &v1.AllocateRequest{}); !gpusched.IsUnavailable(err) {
		t.Fatalf("got %v", err)
	}
}

func TestWithBlockConnects(t *testing.T) {
	_, addr := startFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := gpusched.Dial(ctx, addr, gpusched.WithBlock())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
}

func TestOptionErrors(t *testing.T) {
	ctx := context.Background()
	for name, opt := range map[string]gpusched.Option{
		"negative timeout": gpusched.WithTimeout(-time.Second),
		"zero message":     gpusched.WithMaxMessageBytes(0),
		"nil tls":          gpusched.WithTLSConfig(nil),
		"cert without key": gpusched.WithTLSFiles("", "cert.pem", ""),
		"missing CA file":  gpusched.WithTLSFiles("/nonexistent/ca.pem", "", ""),
	} {
		if c, err := gpusched.Dial(ctx, "127.0.0.1:1", opt); err == nil {
			_ = c.Close()
			t.Errorf("%s: Dial succeeded", name)
		}
	}
}

func TestMaxMessageBytes(t *testing.T) {
	_, addr := startFake(t)
	c := dial(t, addr, gpusched.WithMaxMessageBytes(1024))
	big := &v1.AllocateRequest{RestrictToNodeNames: []string{strings.Repeat("x", 4096)}}
	if _, err := c.Allocate(context.Background(), big); !gpusched.IsResourceExhausted(err) {
		t.Fatalf("got %v", err)
	}
}
