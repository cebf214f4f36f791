package gpusched_test

// The shared request/response vectors of proto/testdata (format: proto/testdata/README.md),
// sent to the live server through the Client.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/gpusched/gpusched/clients/go/gpusched"
	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

type vector struct {
	Description string          `json:"description"`
	Method      string          `json:"method"`
	Request     json.RawMessage `json:"request"`
	Response    json.RawMessage `json:"response"`
	Error       *struct {
		Code            string                    `json:"code"`
		FieldViolations []gpusched.FieldViolation `json:"fieldViolations"`
		ErrorInfo       *gpusched.ErrorInfo       `json:"errorInfo"`
		MissingDigests  []string                  `json:"missingDigests"`
	} `json:"error"`
}

// exchange is a sequence of calls replayed in order on one server (proto/testdata/exchanges).
type exchange struct {
	Description string   `json:"description"`
	Steps       []vector `json:"steps"`
}

// rpc is one method of the API: fresh request and response messages, and the Client call.
type rpc struct {
	newRequest  func() proto.Message
	newResponse func() proto.Message
	call        func(ctx context.Context, c *gpusched.Client, req proto.Message) (proto.Message, error)
}

func method[Req, Resp proto.Message](newReq func() Req, newResp func() Resp, call func(*gpusched.Client, context.Context, Req) (Resp, error)) rpc {
	return rpc{
		newRequest:  func() proto.Message { return newReq() },
		newResponse: func() proto.Message { return newResp() },
		call: func(ctx context.Context, c *gpusched.Client, req proto.Message) (proto.Message, error) {
			return call(c, ctx, req.(Req))
		},
	}
}

var rpcs = map[string]rpc{
	"/gpusched.v1.PlacementService/Filter": method(
		func() *v1.FilterRequest { return &v1.FilterRequest{} }, func() *v1.FilterResponse { return &v1.FilterResponse{} },
		func(c *gpusched.Client, ctx context.Context, r *v1.FilterRequest) (*v1.FilterResponse, error) {
			return c.Filter(ctx, r)
		}),
	"/gpusched.v1.PlacementService/Score": method(
		func() *v1.ScoreRequest { return &v1.ScoreRequest{} }, func() *v1.ScoreResponse { return &v1.ScoreResponse{} },
		func(c *gpusched.Client, ctx context.Context, r *v1.ScoreRequest) (*v1.ScoreResponse, error) {
			return c.Score(ctx, r)
		}),
	"/gpusched.v1.PlacementService/Allocate": method(
		func() *v1.AllocateRequest { return &v1.AllocateRequest{} }, func() *v1.AllocateResponse { return &v1.AllocateResponse{} },
		func(c *gpusched.Client, ctx context.Context, r *v1.AllocateRequest) (*v1.AllocateResponse, error) {
			return c.Allocate(ctx, r)
		}),
	"/gpusched.v1.PlacementService/AllocateBatch": method(
		func() *v1.AllocateBatchRequest { return &v1.AllocateBatchRequest{} },
		func() *v1.AllocateBatchResponse { return &v1.AllocateBatchResponse{} },
		func(c *gpusched.Client, ctx context.Context, r *v1.AllocateBatchRequest) (*v1.AllocateBatchResponse, error) {
			return c.AllocateBatch(ctx, r)
		}),
	"/gpusched.v1.PlacementService/ValidateWorkload": method(
		func() *v1.ValidateWorkloadRequest { return &v1.ValidateWorkloadRequest{} },
		func() *v1.ValidateWorkloadResponse { return &v1.ValidateWorkloadResponse{} },
		func(c *gpusched.Client, ctx context.Context, r *v1.ValidateWorkloadRequest) (*v1.ValidateWorkloadResponse, error) {
			return c.ValidateWorkload(ctx, r)
		}),
	"/gpusched.v1.PlacementService/Preempt": method(
		func() *v1.PreemptRequest { return &v1.PreemptRequest{} },
		func() *v1.PreemptResponse { return &v1.PreemptResponse{} },
		func(c *gpusched.Client, ctx context.Context, r *v1.PreemptRequest) (*v1.PreemptResponse, error) {
			return c.Preempt(ctx, r)
		}),
	"/gpusched.v1.InventoryService/NormalizeInventory": method(
		func() *v1.NormalizeInventoryRequest { return &v1.NormalizeInventoryRequest{} },
		func() *v1.NormalizeInventoryResponse { return &v1.NormalizeInventoryResponse{} },
		func(c *gpusched.Client, ctx context.Context, r *v1.NormalizeInventoryRequest) (*v1.NormalizeInventoryResponse, error) {
			return c.NormalizeInventory(ctx, r)
		}),
}

// TestRPCTableCoversTheServices keeps the table above in step with the generated services.
func TestRPCTableCoversTheServices(t *testing.T) {
	var want, got []string
	for _, sd := range []grpc.ServiceDesc{v1.PlacementService_ServiceDesc, v1.InventoryService_ServiceDesc} {
		for _, m := range sd.Methods {
			want = append(want, "/"+sd.ServiceName+"/"+m.MethodName)
		}
	}
	for k := range rpcs {
		got = append(got, k)
	}
	sort.Strings(want)
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Fatalf("rpc table %v, services %v", got, want)
	}
}

func testdataDir() string {
	if d := os.Getenv("GPUSCHED_TESTDATA"); d != "" {
		return d
	}
	return filepath.Join(repoRoot(), "proto", "testdata")
}

func TestVectors(t *testing.T) {
	dir := testdataDir()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	t.Logf("%d vector file(s) in %s", len(files), dir)
	if len(files) == 0 {
		return
	}
	client := dial(t, "")
	ran := 0
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			runVector(t, client, f)
		})
		ran++
	}
	t.Logf("ran %d vector(s)", ran)
}

func runVector(t *testing.T, client *gpusched.Client, path string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v vector
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	runStep(t, client, v)
}

// TestExchanges replays proto/testdata/exchanges/*.json (e.g. nodes by reference: a miss, the
// parts inline, then by digest) on the suite's server, each step in order (an exchange's nodes
// appear in no other vector).
func TestExchanges(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testdataDir(), "exchanges", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	if len(files) == 0 {
		return
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var x exchange
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&x); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			client := dial(t, "")
			for _, v := range x.Steps {
				runStep(t, client, v)
			}
		})
	}
}

func runStep(t *testing.T, client *gpusched.Client, v vector) {
	t.Helper()
	r, ok := rpcs[v.Method]
	if !ok {
		t.Fatalf("unknown method %q", v.Method)
	}
	if (v.Response != nil) == (v.Error != nil) {
		t.Fatalf("exactly one of response and error must be present")
	}
	req := r.newRequest()
	if err := protojson.Unmarshal(v.Request, req); err != nil {
		t.Fatalf("request: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := r.call(ctx, client, req)

	if v.Error != nil {
		wantCode, ok := parseCode(v.Error.Code)
		if !ok {
			t.Fatalf("unknown error code %q", v.Error.Code)
		}
		if err == nil {
			t.Fatalf("%s: want %s, got an answer:\n%s", v.Description, v.Error.Code, protojson.Format(got))
		}
		e := gpusched.FromError(err)
		if e.Code != wantCode {
			t.Fatalf("%s: code %s, want %s (%v)", v.Description, gpusched.CodeName(e.Code), v.Error.Code, err)
		}
		if !slices.Equal(e.FieldViolations, v.Error.FieldViolations) {
			t.Fatalf("%s: field violations\n got  %+v\n want %+v", v.Description, e.FieldViolations, v.Error.FieldViolations)
		}
		if !reflect.DeepEqual(e.ErrorInfo, v.Error.ErrorInfo) {
			t.Fatalf("%s: error info\n got  %+v\n want %+v", v.Description, e.ErrorInfo, v.Error.ErrorInfo)
		}
		missing := slices.Clone(e.MissingDigests)
		sort.Strings(missing)
		if !slices.Equal(missing, v.Error.MissingDigests) {
			t.Fatalf("%s: missing digests\n got  %q\n want %q", v.Description, missing, v.Error.MissingDigests)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", v.Description, err)
	}
	want := r.newResponse()
	if err := protojson.Unmarshal(v.Response, want); err != nil {
		t.Fatalf("response: %v", err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("%s: answer differs (-want +got):\n%s", v.Description, cmp.Diff(want, got, protocmp.Transform()))
	}
}

// parseCode reads a canonical code name ("INVALID_ARGUMENT").
func parseCode(name string) (codes.Code, bool) {
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(`"` + name + `"`)); err != nil {
		return 0, false
	}
	return c, gpusched.CodeName(c) == name
}
