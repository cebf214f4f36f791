package gpusched_test

// A server that predates node_refs: it reads only nodes (the references are an unknown field to
// it) and sets no gpusched-node-refs header. The Client must never send it references.

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/gpusched/gpusched/clients/go/gpusched"
	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

// oldServer drops node_refs, counts requests that carried any, and asks the real server with
// whole nodes (through a Client with references off, so no header is passed on).
type oldServer struct {
	v1.UnimplementedPlacementServiceServer
	behind    *gpusched.Client
	refsSeen  atomic.Int32
	nodesSeen atomic.Int32
}

func (o *oldServer) Allocate(ctx context.Context, req *v1.AllocateRequest) (*v1.AllocateResponse, error) {
	if len(req.GetNodeRefs()) > 0 {
		o.refsSeen.Add(1)
	}
	if len(req.GetNodes()) > 0 {
		o.nodesSeen.Add(1)
	}
	r := proto.Clone(req).(*v1.AllocateRequest)
	r.NodeRefs = nil
	return o.behind.PlacementService().Allocate(ctx, r)
}

func TestOldServerWithoutTheHeaderGetsWholeNodes(t *testing.T) {
	old := &oldServer{behind: dial(t, "", gpusched.WithByReference(false))}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	v1.RegisterPlacementServiceServer(s, old)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)

	client := dial(t, lis.Addr().String())
	whole := dial(t, "", gpusched.WithByReference(false))
	ctx := context.Background()
	var nodes []*v1.Node
	for i := range 6 {
		nodes = append(nodes, node(fmt.Sprintf("go-old-%02d", i), 4, 40960))
	}
	pod := gpusched.NewPod("default", "p").Container("c0", gpusched.GPULimits(1).MemMiB(10000)).Build()
	for round := range 4 {
		want, err := whole.Allocate(ctx, &v1.AllocateRequest{Nodes: nodes, Workload: pod})
		if err != nil {
			t.Fatal(err)
		}
		got, err := client.Allocate(ctx, &v1.AllocateRequest{Nodes: nodes, Workload: pod})
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) || !got.GetResult().GetPlaced() {
			t.Fatalf("round %d: through the old server %v, want %v", round, got, want)
		}
		book(nodes, got.GetResult())
	}
	if n := old.refsSeen.Load(); n != 0 {
		t.Fatalf("the old server was sent node_refs %d times", n)
	}
	if n := old.nodesSeen.Load(); n != 4 {
		t.Fatalf("the old server got nodes %d times, want 4", n)
	}
	if client.ServerReadsRefs() || client.AcknowledgedParts() != 0 {
		t.Fatalf("ServerReadsRefs %v, acknowledged %d", client.ServerReadsRefs(), client.AcknowledgedParts())
	}
	// The real server sets the header: a Client of it switches after its first answer.
	direct := dial(t, "")
	if direct.ServerReadsRefs() {
		t.Fatal("ServerReadsRefs before any answer")
	}
	if _, err := direct.Allocate(ctx, &v1.AllocateRequest{Nodes: nodes, Workload: pod}); err != nil {
		t.Fatal(err)
	}
	if !direct.ServerReadsRefs() {
		t.Fatal("the real server's header was not seen")
	}
}
