package gpusched_test

// The README examples, run by `go test` against the live server (serverAddr is the address of
// the gpusched-server that TestMain started; in your code, the address of yours).

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/gpusched/gpusched/clients/go/gpusched"
	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

// a100 is an A100 card of a node, with the usage of the workloads already placed on it.
func a100(node string, index uint32, memMiB uint64, usage *v1.CardUsage) *v1.Card {
	model := "NVIDIA-A100-SXM4-40GB"
	if memMiB > 40960 {
		model = "NVIDIA-A100-SXM4-80GB"
	}
	return &v1.Card{
		Id:          fmt.Sprintf("GPU-%s-%d", node, index),
		Index:       index,
		Type:        model,
		Slots:       10,
		TotalMemMib: memMiB,
		TotalCores:  100,
		Health:      v1.CardHealth_CARD_HEALTH_HEALTHY,
		Usage:       usage,
	}
}

// Allocate a pod-like workload (annotations + container limits) on two nodes.
func ExampleClient_Allocate() {
	ctx := context.Background()
	client, err := gpusched.Dial(ctx, serverAddr, gpusched.WithTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	nodes := []*v1.Node{
		// node-a: two 40 GB cards, the first one already half busy
		{Name: "node-a", Cards: []*v1.Card{
			a100("node-a", 0, 40960, &v1.CardUsage{UsedSlots: 2, UsedMemMib: 20000, UsedCores: 50}),
			a100("node-a", 1, 40960, nil),
		}},
		// node-b: four idle 80 GB cards
		{Name: "node-b", Cards: []*v1.Card{
			a100("node-b", 0, 81920, nil), a100("node-b", 1, 81920, nil),
			a100("node-b", 2, 81920, nil), a100("node-b", 3, 81920, nil),
		}},
	}
	pod := gpusched.NewPod("ml", "trainer-0").
		Annotate(gpusched.AnnotationNodeSchedulerPolicy, "binpack"). // fill nodes up
		Annotate(gpusched.AnnotationGPUSchedulerPolicy, "spread").   // but spread over the cards of a node
		Container("trainer", gpusched.GPULimits(2).MemMiB(16000).Cores(30)).
		Build()

	resp, err := client.Allocate(ctx, &v1.AllocateRequest{Nodes: nodes, Workload: pod})
	if err != nil {
		log.Fatal(err)
	}
	r := resp.GetResult()
	fmt.Printf("placed=%v on %s (score %.2f, policy %s)\n",
		r.GetPlaced(), r.GetNodeName(), r.GetNodeScore().GetRawScore(), r.GetEffectivePolicy().GetGpuPolicyText())
	for _, c := range r.GetContainers() {
		for _, card := range c.GetCards() {
			fmt.Printf("  %s: %s (index %d) %d MiB, %d%% cores\n",
				c.GetContainerName(), card.GetCardId(), card.GetCardIndex(), card.GetMemMib(), card.GetCoresPercent())
		}
	}
	// Output:
	// placed=true on node-a (score 13.85, policy spread)
	//   trainer: GPU-node-a-1 (index 1) 16000 MiB, 30% cores
	//   trainer: GPU-node-a-0 (index 0) 16000 MiB, 30% cores
}

// Read why nodes cannot host a workload: typed reasons with card counts, HAMi's text, and
// whether freeing capacity could ever help.
func ExampleClient_Allocate_rejectionReasons() {
	ctx := context.Background()
	client, err := gpusched.Dial(ctx, serverAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	halfFull := &v1.CardUsage{UsedSlots: 1, UsedMemMib: 40000}
	unhealthy := a100("node-b", 0, 81920, nil)
	unhealthy.Health = v1.CardHealth_CARD_HEALTH_UNHEALTHY
	nodes := []*v1.Node{
		// 40 GB cards: too small for 50,000 MiB, now and forever
		{Name: "node-a", Cards: []*v1.Card{a100("node-a", 0, 40960, nil), a100("node-a", 1, 40960, nil)}},
		// 80 GB cards: one unhealthy, the others half full right now
		{Name: "node-b", Cards: []*v1.Card{
			unhealthy,
			a100("node-b", 1, 81920, halfFull), a100("node-b", 2, 81920, halfFull), a100("node-b", 3, 81920, halfFull),
		}},
	}
	pod := gpusched.NewPod("", "big").Container("main", gpusched.GPULimits(2).MemMiB(50000)).Build()

	resp, err := client.Allocate(ctx, &v1.AllocateRequest{Nodes: nodes, Workload: pod})
	if err != nil {
		log.Fatal(err)
	}
	r := resp.GetResult()
	fmt.Printf("placed=%v (%d feasible nodes)\n", r.GetPlaced(), r.GetFeasibleNodeCount())
	for _, f := range r.GetFailedNodes() {
		hint := "may fit once cards free up"
		if f.GetUnresolvable() {
			hint = "never fits"
		}
		fmt.Printf("  %s: %s [%s; container %q]\n", f.GetNodeName(), f.GetMessage(), hint, f.GetContainerName())
		for _, reason := range f.GetReasons() {
			fmt.Printf("    %s (%s) on %d card(s)\n", reason.GetReason(), reason.GetName(), reason.GetCount())
		}
	}
	// Output:
	// placed=false (0 feasible nodes)
	//   node-a: 2/2 CardInsufficientMemory [never fits; container "main"]
	//     REASON_CARD_INSUFFICIENT_MEMORY (CardInsufficientMemory) on 2 card(s)
	//   node-b: 1/4 CardNotHealth, 3/4 CardInsufficientMemory [may fit once cards free up; container "main"]
	//     REASON_CARD_NOT_HEALTH (CardNotHealth) on 1 card(s)
	//     REASON_CARD_INSUFFICIENT_MEMORY (CardInsufficientMemory) on 3 card(s)
}

// Handle an invalid annotation: the server answers INVALID_ARGUMENT with field violations
// (google.rpc.BadRequest) naming the annotation; ValidateWorkload reports the same problems in
// its answer, e.g. for an admission check.
func ExampleError() {
	ctx := context.Background()
	client, err := gpusched.Dial(ctx, serverAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	pod := gpusched.NewPod("", "typo").
		Annotate(gpusched.AnnotationDeviceScoringWeights, "slot=1,core=high,memory=1"). // "high" is no integer
		Container("main", gpusched.GPULimits(1)).
		Build()
	nodes := []*v1.Node{{Name: "node-a", Cards: []*v1.Card{a100("node-a", 0, 40960, nil)}}}

	_, err = client.Allocate(ctx, &v1.AllocateRequest{Nodes: nodes, Workload: pod})
	var e *gpusched.Error
	if errors.As(err, &e) && gpusched.IsInvalidArgument(err) {
		fmt.Println("rejected:", gpusched.CodeName(e.Code))
		for _, v := range e.FieldViolations {
			fmt.Printf("  %s %s: %s\n", v.Reason, v.Field, v.Description)
		}
		// Branch on the reason, not on the field path (annotation names are configurable).
		if bad := e.ViolationsOf(v1.ViolationReason_VIOLATION_REASON_INVALID_SCORING_WEIGHTS); len(bad) > 0 {
			fmt.Println("  fix the scoring weights named in:", bad[0].Field)
		}
	}

	check, err := client.ValidateWorkload(ctx, &v1.ValidateWorkloadRequest{Workload: pod})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("ValidateWorkload: valid=%v\n", check.GetValid())
	for _, v := range check.GetViolations() {
		fmt.Printf("  %s %s: %s\n", v.GetReason(), v.GetField(), v.GetDescription())
	}
	// Output:
	// rejected: INVALID_ARGUMENT
	//   INVALID_SCORING_WEIGHTS workload.kubernetes.annotations["hami.io/device-scoring-weights"]: invalid hami.io/device-scoring-weights "slot=1,core=high,memory=1": expected slot=<int>,core=<int>,memory=<int>: core weight "high" is not a base-10 integer in range
	//   fix the scoring weights named in: workload.kubernetes.annotations["hami.io/device-scoring-weights"]
	// ValidateWorkload: valid=false
	//   VIOLATION_REASON_INVALID_SCORING_WEIGHTS workload.kubernetes.annotations["hami.io/device-scoring-weights"]: invalid hami.io/device-scoring-weights "slot=1,core=high,memory=1": expected slot=<int>,core=<int>,memory=<int>: core weight "high" is not a base-10 integer in range
}
