package gpusched_test

// The Client against a real gpusched-server.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gpusched/gpusched/clients/go/gpusched"
	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

func card(id string, index uint32, memMiB uint64) *v1.Card {
	return &v1.Card{
		Id:          id,
		Index:       index,
		Type:        "NVIDIA-A100-SXM4-40GB",
		Slots:       10,
		TotalMemMib: memMiB,
		TotalCores:  100,
		Health:      v1.CardHealth_CARD_HEALTH_HEALTHY,
		Mode:        v1.CardMode_CARD_MODE_HAMI_CORE,
	}
}

func node(name string, cards int, memMiB uint64) *v1.Node {
	n := &v1.Node{Name: name}
	for i := range cards {
		n.Cards = append(n.Cards, card(fmt.Sprintf("%s-gpu%d", name, i), uint32(i), memMiB))
	}
	return n
}

func oneGPU() *v1.Workload {
	return gpusched.NewPod("default", "pod").Container("c0", gpusched.GPULimits(1)).Build()
}

func TestLiveAllocateFilterScoreBatch(t *testing.T) {
	c := dial(t, "")
	ctx := context.Background()

	r, err := c.Allocate(ctx, &v1.AllocateRequest{Nodes: []*v1.Node{node("a", 1, 8000), node("b", 2, 8000)}, Workload: oneGPU()})
	if err != nil {
		t.Fatal(err)
	}
	res := r.GetResult()
	if !res.GetPlaced() || !res.GetRequestsGpu() || res.GetFeasibleNodeCount() != 2 || len(res.GetContainers()) != 1 {
		t.Fatalf("allocate: %v", res)
	}
	if res.GetEffectivePolicy().GetScoringWeights().GetSlot() != 1 {
		t.Fatalf("effective policy: %v", res.GetEffectivePolicy())
	}

	big := gpusched.NewPod("default", "big").Container("c0", gpusched.GPULimits(2).MemMiB(100)).Build()
	f, err := c.Filter(ctx, &v1.FilterRequest{Nodes: []*v1.Node{node("small", 1, 8000), node("ok", 2, 8000)}, Workload: big})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.GetFeasibleNodeNames(); len(got) != 1 || got[0] != "ok" {
		t.Fatalf("feasible %v", got)
	}
	if fn := f.GetFailedNodes(); len(fn) != 1 || fn[0].GetNodeName() != "small" || fn[0].GetMessage() != "NodeInsufficientDevice" || !fn[0].GetUnresolvable() {
		t.Fatalf("failed %v", fn)
	}

	busy := node("busy", 2, 8000)
	busy.Cards[0].Usage = &v1.CardUsage{UsedSlots: 3, UsedMemMib: 4000, UsedCores: 30}
	s, err := c.Score(ctx, &v1.ScoreRequest{
		Nodes:    []*v1.Node{node("idle", 2, 8000), busy},
		Workload: gpusched.NewPod("", "p").Container("c0", gpusched.GPULimits(1).MemMiB(100)).Build(),
		Options:  &v1.PlacementOptions{DefaultNodePolicy: v1.NodePolicy_NODE_POLICY_SPREAD},
	})
	if err != nil {
		t.Fatal(err)
	}
	if sc := s.GetScores(); len(sc) != 2 || sc[0].GetNodeName() != "idle" || sc[0].GetNormalizedScore() != 100 || sc[1].GetNormalizedScore() != 0 {
		t.Fatalf("scores %v", sc)
	}

	b, err := c.AllocateBatch(ctx, &v1.AllocateBatchRequest{
		Nodes:              []*v1.Node{node("n", 2, 8000)},
		Workloads:          []*v1.Workload{oneGPU(), oneGPU(), oneGPU()},
		AllOrNothing:       true,
		ReturnUpdatedNodes: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if b.GetAllPlaced() || len(b.GetResults()) != 3 || !b.GetResults()[0].GetRolledBack() || b.GetResults()[2].GetRolledBack() {
		t.Fatalf("batch %v", b)
	}
}

func TestLiveNothingFitsIsAnAnswer(t *testing.T) {
	c := dial(t, "")
	w := gpusched.NewPod("", "p").Container("c0", gpusched.GPULimits(1).MemMiB(9000)).Build()
	r, err := c.Allocate(context.Background(), &v1.AllocateRequest{Nodes: []*v1.Node{node("a", 1, 8000)}, Workload: w})
	if err != nil {
		t.Fatal(err)
	}
	res := r.GetResult()
	if res.GetPlaced() || len(res.GetFailedNodes()) != 1 {
		t.Fatalf("%v", res)
	}
	fn := res.GetFailedNodes()[0]
	if fn.GetMessage() != "1/1 CardInsufficientMemory" || !fn.GetUnresolvable() ||
		fn.GetReasons()[0].GetReason() != v1.Reason_REASON_CARD_INSUFFICIENT_MEMORY || fn.GetReasons()[0].GetCount() != 1 {
		t.Fatalf("%v", fn)
	}
}

func TestLiveInvalidAnnotationIsATypedError(t *testing.T) {
	c := dial(t, "")
	w := gpusched.NewPod("", "p").
		Annotate(gpusched.AnnotationDeviceScoringWeights, "slot=1,core=1").
		Container("c0", gpusched.GPULimits(1)).
		Build()
	for name, call := range map[string]func() error{
		"Allocate": func() error {
			_, err := c.Allocate(context.Background(), &v1.AllocateRequest{Nodes: []*v1.Node{node("a", 1, 8000)}, Workload: w})
			return err
		},
		"Filter": func() error {
			_, err := c.Filter(context.Background(), &v1.FilterRequest{Nodes: []*v1.Node{node("a", 1, 8000)}, Workload: w})
			return err
		},
		"Score": func() error {
			_, err := c.Score(context.Background(), &v1.ScoreRequest{Nodes: []*v1.Node{node("a", 1, 8000)}, Workload: w})
			return err
		},
		"AllocateBatch": func() error {
			_, err := c.AllocateBatch(context.Background(), &v1.AllocateBatchRequest{Nodes: []*v1.Node{node("a", 1, 8000)}, Workloads: []*v1.Workload{w}})
			return err
		},
	} {
		err := call()
		var e *gpusched.Error
		if !errors.As(err, &e) {
			t.Fatalf("%s: %T %v", name, err, err)
		}
		if !gpusched.IsInvalidArgument(err) || e.Code != codes.InvalidArgument {
			t.Fatalf("%s: %v", name, err)
		}
		if len(e.FieldViolations) == 0 {
			t.Fatalf("%s: no field violations in %v", name, err)
		}
		v, ok := e.Violation(gpusched.AnnotationDeviceScoringWeights)
		if !ok || !strings.Contains(v.Field, `annotations["hami.io/device-scoring-weights"]`) || v.Description == "" {
			t.Fatalf("%s: violations %v", name, e.FieldViolations)
		}
	}

	// ValidateWorkload reports the same problem in its answer.
	vr, err := c.ValidateWorkload(context.Background(), &v1.ValidateWorkloadRequest{Workload: w})
	if err != nil {
		t.Fatal(err)
	}
	if vr.GetValid() || len(vr.GetViolations()) == 0 || !strings.Contains(vr.GetViolations()[0].GetField(), gpusched.AnnotationDeviceScoringWeights) {
		t.Fatalf("%v", vr)
	}
	// ... and a missing workload is INVALID_ARGUMENT naming "workload".
	_, err = c.ValidateWorkload(context.Background(), &v1.ValidateWorkloadRequest{})
	if fv := gpusched.FieldViolations(err); !gpusched.IsInvalidArgument(err) || len(fv) == 0 || fv[0].Field != "workload" {
		t.Fatalf("missing workload: %v", err)
	}
}

func TestLiveValidateWorkload(t *testing.T) {
	c := dial(t, "")
	w := gpusched.NewPod("", "p").
		Annotate(gpusched.AnnotationGPUSchedulerPolicy, "mutex").
		Container("c0", gpusched.GPULimits(2).Cores(30)).
		Build()
	r, err := c.ValidateWorkload(context.Background(), &v1.ValidateWorkloadRequest{Workload: w})
	if err != nil {
		t.Fatal(err)
	}
	if !r.GetValid() || !r.GetRequestsGpu() || r.GetEffectivePolicy().GetGpuPolicyText() != "mutex" ||
		len(r.GetContainers()) != 1 || r.GetContainers()[0].GetGpuCount() != 2 || r.GetContainers()[0].GetCoresPercent() != 30 {
		t.Fatalf("%v", r)
	}
}

func TestLiveNormalizeInventory(t *testing.T) {
	c := dial(t, "")
	numa := uint32(1)
	raw := func(uuid, peer string, index uint32, h v1.CardHealth) *v1.RawCard {
		return &v1.RawCard{
			Uuid: uuid, Index: index, ModelName: "NVIDIA H200", TotalMemoryBytes: 143_771_287_552, Numa: &numa,
			Health: h, Links: []*v1.RawLink{{PeerUuid: peer, Kind: v1.LinkKind_LINK_KIND_NVLINK, LinkCount: 18}},
		}
	}
	r, err := c.NormalizeInventory(context.Background(), &v1.NormalizeInventoryRequest{
		NodeName: "n",
		Cards:    []*v1.RawCard{raw("GPU-b", "GPU-a", 1, v1.CardHealth_CARD_HEALTH_UNHEALTHY), raw("GPU-a", "GPU-b", 0, v1.CardHealth_CARD_HEALTH_HEALTHY)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetCards()) != 2 || r.GetCards()[0].GetId() != "GPU-a" || r.GetCards()[0].GetTotalMemMib() != 143_771_287_552>>20 ||
		r.GetCards()[0].GetSlots() != 10 || r.GetCards()[1].GetHealth() != v1.CardHealth_CARD_HEALTH_UNHEALTHY {
		t.Fatalf("%v", r)
	}
	_, err = c.NormalizeInventory(context.Background(), &v1.NormalizeInventoryRequest{
		NodeName: "n",
		Cards:    []*v1.RawCard{raw("GPU-a", "GPU-b", 0, v1.CardHealth_CARD_HEALTH_UNSPECIFIED)},
	})
	if fv := gpusched.FieldViolations(err); !gpusched.IsInvalidArgument(err) || len(fv) == 0 || fv[0].Field != "cards[0].health" {
		t.Fatalf("unset health: %v", err)
	}
}

func TestLiveDeadlines(t *testing.T) {
	req := &v1.AllocateRequest{Nodes: []*v1.Node{node("a", 1, 8000)}, Workload: oneGPU()}

	// The default per-call deadline applies, and a call well within it succeeds.
	c := dial(t, "", gpusched.WithTimeout(10*time.Second))
	if _, err := c.Allocate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	// A default deadline that cannot be met: DEADLINE_EXCEEDED, also as context.DeadlineExceeded.
	late := dial(t, "", gpusched.WithTimeout(time.Nanosecond))
	_, err := late.Allocate(context.Background(), req)
	if !gpusched.IsDeadlineExceeded(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("default deadline: %v", err)
	}
	// The caller's deadline wins over the default one, both ways.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := late.Allocate(ctx, req); err != nil {
		t.Fatalf("caller's longer deadline: %v", err)
	}
	ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := c.Allocate(ctx, req); !gpusched.IsDeadlineExceeded(err) {
		t.Fatalf("caller's past deadline: %v", err)
	}

	// The server's own request timeout: the server answers DEADLINE_EXCEEDED.
	s := startTestServer(t, nil, []string{"GPUSCHED_LIMITS__REQUEST_TIMEOUT=1ns"})
	c = dial(t, s.addr)
	_, err = c.Allocate(context.Background(), req)
	if !gpusched.IsDeadlineExceeded(err) {
		t.Fatalf("server timeout: %v", err)
	}
}

func TestLiveRequestOverALimitIsResourceExhausted(t *testing.T) {
	s := startTestServer(t, nil, []string{"GPUSCHED_LIMITS__MAX_NODES=2"})
	c := dial(t, s.addr)
	_, err := c.Allocate(context.Background(), &v1.AllocateRequest{
		Nodes:    []*v1.Node{node("a", 1, 1), node("b", 1, 1), node("c", 1, 1)},
		Workload: oneGPU(),
	})
	if !gpusched.IsResourceExhausted(err) || !strings.Contains(err.Error(), "limits.max_nodes") {
		t.Fatalf("%v", err)
	}
	if e := gpusched.FromError(err); len(e.QuotaViolations) == 0 {
		t.Fatalf("no quota violations: %+v", e)
	}
}

func TestLiveOpenTelemetryAndHealth(t *testing.T) {
	c := dial(t, "", gpusched.WithOpenTelemetry())
	if _, err := c.Allocate(context.Background(), &v1.AllocateRequest{Nodes: []*v1.Node{node("a", 1, 8000)}, Workload: oneGPU()}); err != nil {
		t.Fatal(err)
	}
	h, err := healthpb.NewHealthClient(c.Conn()).Check(context.Background(), &healthpb.HealthCheckRequest{Service: v1.PlacementService_ServiceDesc.ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	if h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v", h.GetStatus())
	}
}

func TestLiveWithBlock(t *testing.T) {
	needServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := gpusched.Dial(ctx, serverAddr, gpusched.WithBlock())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
}
