package gpusched_test

// Nodes by reference through the Client against a real gpusched-server.

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/gpusched/gpusched/clients/go/gpusched"
	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

// book records the placement on the nodes, as a scheduler's view would.
func book(nodes []*v1.Node, r *v1.AllocationResult) {
	for _, n := range nodes {
		if n.GetName() != r.GetNodeName() {
			continue
		}
		for _, ct := range r.GetContainers() {
			for _, a := range ct.GetCards() {
				for _, c := range n.GetCards() {
					if c.GetId() == a.GetCardId() {
						if c.Usage == nil {
							c.Usage = &v1.CardUsage{}
						}
						c.Usage.UsedSlots++
						c.Usage.UsedMemMib += a.GetMemMib()
						c.Usage.UsedCores += a.GetCoresPercent()
					}
				}
			}
		}
	}
}

func TestLiveByReferenceAnswersLikeWholeNodes(t *testing.T) {
	byRef := dial(t, "")
	whole := dial(t, "", gpusched.WithByReference(false))
	ctx := context.Background()
	var nodes []*v1.Node
	for i := range 12 {
		nodes = append(nodes, node(fmt.Sprintf("go-byref-%02d", i), 4, 40960))
	}
	pod := gpusched.NewPod("default", "p").Container("c0", gpusched.GPULimits(1).MemMiB(10000)).Build()
	for round := range 8 {
		want, err := whole.Allocate(ctx, &v1.AllocateRequest{Nodes: nodes, Workload: pod})
		if err != nil {
			t.Fatal(err)
		}
		got, err := byRef.Allocate(ctx, &v1.AllocateRequest{Nodes: nodes, Workload: pod})
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("round %d: by reference %v, whole %v", round, got, want)
		}
		book(nodes, got.GetResult())
	}
	if n := byRef.AcknowledgedParts(); n < 12 {
		t.Fatalf("acknowledged parts %d, want at least the 12 inventories", n)
	}
	if n := whole.AcknowledgedParts(); n != 0 {
		t.Fatalf("WithByReference(false) acknowledged %d parts", n)
	}
	// A node error names nodes[i], as with whole nodes.
	bad := proto.Clone(nodes[0]).(*v1.Node)
	bad.Cards[0].Health = v1.CardHealth_CARD_HEALTH_UNSPECIFIED
	_, err := byRef.Allocate(ctx, &v1.AllocateRequest{Nodes: []*v1.Node{nodes[1], bad}, Workload: pod})
	if !gpusched.IsInvalidArgument(err) {
		t.Fatalf("want INVALID_ARGUMENT, got %v", err)
	}
	if f := gpusched.FromError(err).Fields(); len(f) != 1 || f[0] != "nodes[1].cards[0].health" {
		t.Fatalf("fields %q", f)
	}
}
