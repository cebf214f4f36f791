package gpusched_test

// Nodes by reference through the Client against a real gpusched-server.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	_ "google.golang.org/grpc/balancer/leastrequest" // least_request_experimental
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
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

// scrape reads the server's /metrics: each sample's value by its series ("name{labels}").
func scrape(t *testing.T, s *server) map[string]float64 {
	t.Helper()
	if s.metrics == "" {
		t.Fatal("the server printed no metrics address")
	}
	resp, err := http.Get("http://" + s.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// metric is one series of a scrape; a series the server does not export fails the test.
func metric(t *testing.T, m map[string]float64, series string) float64 {
	t.Helper()
	v, ok := m[series]
	if !ok {
		t.Fatalf("no metric %s", series)
	}
	return v
}

const (
	setInserts = "gpusched_node_sets_inserts_total"
	setHits    = "gpusched_node_sets_hits_total"
	setMisses  = "gpusched_node_sets_misses_total"
	invInserts = `gpusched_node_cache_inserts_total{part="inventory"}`
	invHits    = `gpusched_node_cache_hits_total{part="inventory"}`
	invMisses  = `gpusched_node_cache_misses_total{part="inventory"}`
)

func cluster(prefix string, n int) []*v1.Node {
	var nodes []*v1.Node
	for i := range n {
		nodes = append(nodes, node(fmt.Sprintf("%s-%02d", prefix, i), 4, 40960))
	}
	return nodes
}

func smallPod() *v1.Workload {
	return gpusched.NewPod("default", "p").Container("c0", gpusched.GPULimits(1).MemMiB(10000)).Build()
}

// allocateBoth allocates through client and through whole (nodes whole), checks that the answers
// are the same, and books the placement on nodes.
func allocateBoth(t *testing.T, client, whole *gpusched.Client, nodes []*v1.Node, opts ...grpc.CallOption) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want, err := whole.Allocate(ctx, &v1.AllocateRequest{Nodes: nodes, Workload: smallPod()}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := client.Allocate(ctx, &v1.AllocateRequest{Nodes: nodes, Workload: smallPod()}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) || !got.GetResult().GetPlaced() {
		t.Fatalf("by reference %v, whole %v", got, want)
	}
	book(nodes, got.GetResult())
}

func TestLiveNodeSetsSendChangesOnlyAfterTheSecondCall(t *testing.T) {
	srv := startTestServer(t, nil, nil)
	client := dial(t, srv.addr)
	whole := dial(t, srv.addr, gpusched.WithByReference(false))
	nodes := cluster("go-sets", 20)
	for range 10 {
		allocateBoth(t, client, whole, nodes)
	}
	m := scrape(t, srv)
	// The first call whole (the server's headers not yet seen), the second by reference inline
	// and kept as a node set, then each call names that set and sends only the node whose usage
	// changed: one inventory hit (and one new usage part) per call.
	if got := metric(t, m, invInserts); got != 20 {
		t.Errorf("inventories converted %v times, want 20", got)
	}
	if got := metric(t, m, invMisses); got != 0 {
		t.Errorf("inventory misses %v", got)
	}
	if got := metric(t, m, setInserts); got != 1 {
		t.Errorf("sets kept %v, want 1", got)
	}
	if got := metric(t, m, setHits); got != 8 {
		t.Errorf("set hits %v, want 8 (the eight later calls sent changes only)", got)
	}
	if got := metric(t, m, invHits); got != 8 {
		t.Errorf("inventory hits %v, want 8 (one changed node per call)", got)
	}
	if b := client.NodeSetBase(); !strings.HasPrefix(b, "sha256/") || !strings.HasSuffix(b, "/1280") {
		t.Errorf("NodeSetBase %q, want sha256/<hex>/1280 (64 bytes per node)", b)
	}
	// Off: no node sets either.
	if b := whole.NodeSetBase(); b != "" {
		t.Errorf("WithByReference(false) has a base %q", b)
	}
	// Filter, Score and AllocateBatch send changes to the same set, and answer as whole nodes.
	ctx := context.Background()
	f, err := client.Filter(ctx, &v1.FilterRequest{Nodes: nodes, Workload: smallPod()})
	fw, errw := whole.Filter(ctx, &v1.FilterRequest{Nodes: nodes, Workload: smallPod()})
	if err != nil || errw != nil || !proto.Equal(f, fw) {
		t.Fatalf("Filter: %v %v", err, errw)
	}
	sc, err := client.Score(ctx, &v1.ScoreRequest{Nodes: nodes, Workload: smallPod()})
	scw, errw := whole.Score(ctx, &v1.ScoreRequest{Nodes: nodes, Workload: smallPod()})
	if err != nil || errw != nil || !proto.Equal(sc, scw) {
		t.Fatalf("Score: %v %v", err, errw)
	}
	batch := &v1.AllocateBatchRequest{Nodes: nodes, Workloads: []*v1.Workload{smallPod(), smallPod()}, ReturnUpdatedNodes: true}
	b, err := client.AllocateBatch(ctx, batch)
	bw, errw := whole.AllocateBatch(ctx, batch)
	if err != nil || errw != nil || !proto.Equal(b, bw) {
		t.Fatalf("AllocateBatch: %v %v", err, errw)
	}
	if got := metric(t, scrape(t, srv), setHits); got != 11 {
		t.Fatalf("set hits %v after Filter, Score, AllocateBatch, want 11", got)
	}
	// A bad node among the changes is named as the caller's nodes[i].
	bad := slices.Clone(nodes)
	bad[13] = proto.Clone(nodes[13]).(*v1.Node)
	bad[13].Cards[2].Health = v1.CardHealth_CARD_HEALTH_UNSPECIFIED
	_, err = client.Allocate(ctx, &v1.AllocateRequest{Nodes: bad, Workload: smallPod()})
	if !gpusched.IsInvalidArgument(err) {
		t.Fatalf("want INVALID_ARGUMENT, got %v", err)
	}
	if f := gpusched.FromError(err).Fields(); len(f) != 1 || f[0] != "nodes[13].cards[2].health" {
		t.Fatalf("fields %q, want nodes[13].cards[2].health", f)
	}
	if got := metric(t, scrape(t, srv), setHits); got != 12 {
		t.Fatalf("set hits %v: the bad node did not go as a change to the set", got)
	}
	// A name twice goes in full: the server's answer is the one to whole nodes.
	dup := append(slices.Clone(nodes), nodes[4])
	_, want := whole.Allocate(ctx, &v1.AllocateRequest{Nodes: dup, Workload: smallPod()})
	_, err = client.Allocate(ctx, &v1.AllocateRequest{Nodes: dup, Workload: smallPod()})
	t.Logf("whole: %v\nby reference: %v", want, err)
	if !gpusched.IsInvalidArgument(want) || !slices.Equal(gpusched.FromError(err).Fields(), gpusched.FromError(want).Fields()) {
		t.Fatalf("a name twice: by reference %v, whole %v", err, want)
	}
}

func TestLiveNodeSetLostInARestartIsResentTransparently(t *testing.T) {
	first := startTestServer(t, nil, nil)
	addr := first.addr
	client := dial(t, addr)
	nodes := cluster("go-restart", 20)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Whole (the headers not yet seen), by reference inline and kept as a set, a change to it.
	for range 3 {
		r, err := client.Allocate(ctx, &v1.AllocateRequest{Nodes: nodes, Workload: smallPod()})
		if err != nil {
			t.Fatal(err)
		}
		book(nodes, r.GetResult())
	}
	if n := client.AcknowledgedParts(); n < 20 {
		t.Fatalf("acknowledged %d parts", n)
	}
	before := client.NodeSetBase()
	if before == "" {
		t.Fatal("no node set kept")
	}
	first.stop()
	second := startTestServer(t, []string{"--listen", addr}, nil)
	whole := dial(t, addr, gpusched.WithByReference(false))
	// The client still names its set: the new server answers FAILED_PRECONDITION naming it
	// (and the parts of the changed node), the client sends everything by reference (missing
	// again), then inline; the caller sees an answer.
	allocateBoth(t, client, whole, nodes, grpc.WaitForReady(true))
	m := scrape(t, second)
	if got := metric(t, m, setMisses); got != 1 {
		t.Errorf("set misses %v, want 1 (the lost set was noticed)", got)
	}
	if got := metric(t, m, invMisses); got < 20 {
		t.Errorf("inventory misses %v, want >= 20 (the lost parts were noticed)", got)
	}
	if got := metric(t, m, setInserts); got != 1 {
		t.Errorf("sets kept %v, want 1 (the set was kept again)", got)
	}
	if b := client.NodeSetBase(); b == "" || b == before {
		t.Errorf("NodeSetBase %q after the restart (before %q)", b, before)
	}
	allocateBoth(t, client, whole, nodes)
	if got := metric(t, scrape(t, second), setHits); got != 1 {
		t.Errorf("set hits %v, want 1 (changes only again)", got)
	}
}

// refsOnlyServer reads node_refs (and says so with NodeRefsHeader) but predates node sets: it
// sets no NodeSetsHeader. It counts requests that named a node set and passes the rest to the
// real server.
type refsOnlyServer struct {
	v1.UnimplementedPlacementServiceServer
	behind  v1.PlacementServiceClient
	setSeen atomic.Int32
}

func (o *refsOnlyServer) Allocate(ctx context.Context, req *v1.AllocateRequest) (*v1.AllocateResponse, error) {
	if req.GetNodeSet() != nil {
		o.setSeen.Add(1)
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(gpusched.NodeRefsHeader, "1"))
	return o.behind.Allocate(ctx, req)
}

func TestLiveNodeSetsOnlyForAServerThatSaysItReadsThem(t *testing.T) {
	refsOnly := &refsOnlyServer{behind: dial(t, "", gpusched.WithByReference(false)).PlacementService()}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	v1.RegisterPlacementServiceServer(s, refsOnly)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	client := dial(t, lis.Addr().String())
	whole := dial(t, "", gpusched.WithByReference(false))
	nodes := cluster("go-refs-only", 20)
	for range 5 {
		allocateBoth(t, client, whole, nodes)
	}
	if !client.ServerReadsRefs() || client.AcknowledgedParts() < 20 {
		t.Fatalf("ServerReadsRefs %v, acknowledged %d: references were not used", client.ServerReadsRefs(), client.AcknowledgedParts())
	}
	if n := refsOnly.setSeen.Load(); n != 0 || client.NodeSetBase() != "" {
		t.Fatalf("a server without %s was sent node_set %d times (base %q)", gpusched.NodeSetsHeader, n, client.NodeSetBase())
	}
}

func TestLiveNodeSetOfTheCallerGoesAsItIs(t *testing.T) {
	client := dial(t, "")
	ctx := context.Background()
	nodes := cluster("go-own-set", 20)
	// The headers seen and a set of the Client's own kept: it would name that set.
	for range 2 {
		if _, err := client.Allocate(ctx, &v1.AllocateRequest{Nodes: nodes, Workload: smallPod()}); err != nil {
			t.Fatal(err)
		}
	}
	if client.NodeSetBase() == "" {
		t.Fatal("no set kept")
	}
	lost := &v1.Digest{Hash: make([]byte, 32), SizeBytes: 64}
	_, err := client.Allocate(ctx, &v1.AllocateRequest{Nodes: nodes, Workload: smallPod(), NodeSet: &v1.NodeSetRef{Base: lost}})
	e := gpusched.FromError(err)
	want := "nodeset/sha256/" + strings.Repeat("0", 64) + "/64"
	if e == nil || e.Code != codes.FailedPrecondition || !slices.Contains(e.MissingDigests, want) {
		t.Fatalf("want FAILED_PRECONDITION naming %s (the caller's own node_set), got %v", want, err)
	}
}

// Two replicas behind one address, picked at random per call (power of two choices, as the
// Rust client's balanced channel): each warms on its own, keeps its own set and answers changes.
func TestLiveNodeSetsWithReplicasBehindOneAddress(t *testing.T) {
	r1 := startTestServer(t, nil, nil)
	r2 := startTestServer(t, nil, nil)
	res := manual.NewBuilderWithScheme("gpusched-replicas")
	res.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: r1.addr}, {Addr: r2.addr}}})
	client := dial(t, "gpusched-replicas:///both", gpusched.WithDialOptions(
		grpc.WithResolvers(res),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"least_request_experimental":{"choiceCount":2}}]}`),
	))
	whole := dial(t, r1.addr, gpusched.WithByReference(false))
	nodes := cluster("go-replicas", 20)
	// Enough calls that each replica is picked for a change to the set it holds (a replica
	// misses all of those with odds of about 2^-20).
	for range 100 {
		allocateBoth(t, client, whole, nodes, grpc.WaitForReady(true))
	}
	for i, r := range []*server{r1, r2} {
		m := scrape(t, r)
		t.Logf("replica %d: sets kept %v hit %v missed %v, inventories converted %v", i+1,
			m[setInserts], m[setHits], m[setMisses], m[invInserts])
		if got := metric(t, m, invInserts); got < 20 {
			t.Errorf("replica %d converted %v inventories, want >= 20 (each warms on its own)", i+1, got)
		}
		if metric(t, m, setInserts) < 1 || metric(t, m, setHits) < 1 {
			t.Errorf("replica %d kept %v sets and answered %v changes, want >= 1 each", i+1, m[setInserts], m[setHits])
		}
	}
}

// TestLiveTruncatedMissingListSendsEverythingInlineOnce: after a restart the new server misses
// 60+ parts but lists at most 20 (and a MORE entry); the client sends every part inline at once
// instead of paging through the list, so each inventory misses exactly once.
func TestLiveTruncatedMissingListSendsEverythingInlineOnce(t *testing.T) {
	first := startTestServer(t, nil, nil)
	addr := first.addr
	client := dial(t, addr)
	nodes := cluster("go-more", 60)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for range 2 {
		r, err := client.Allocate(ctx, &v1.AllocateRequest{Nodes: nodes, Workload: smallPod()})
		if err != nil {
			t.Fatal(err)
		}
		book(nodes, r.GetResult())
	}
	first.stop()
	second := startTestServer(t, []string{"--listen", addr}, nil)
	whole := dial(t, addr, gpusched.WithByReference(false))
	allocateBoth(t, client, whole, nodes, grpc.WaitForReady(true))
	if got := metric(t, scrape(t, second), invMisses); got != 60 {
		t.Errorf("inventory misses %v, want 60 (each once, not once per listed page)", got)
	}
}
