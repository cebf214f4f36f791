package gpusched

// The node set rules of nodeset.go without a server: when a call goes in full, kept, or as
// changes, and the set digest against the shared exchange.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

func testNodes(t *testing.T, n int) []*v1.Node {
	t.Helper()
	var nodes []*v1.Node
	for i := range n {
		name := fmt.Sprintf("n%03d", i)
		nodes = append(nodes, &v1.Node{Name: name, Cards: []*v1.Card{{Id: name + "-0", Slots: 10, TotalMemMib: 1000}}})
	}
	return nodes
}

func busy(n *v1.Node, slots uint32) {
	n.Cards[0].Usage = &v1.CardUsage{UsedSlots: slots}
}

func prepared(t *testing.T, b *byRef, nodes []*v1.Node) []*preparedNode {
	t.Helper()
	p, err := b.prepare(nodes)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPlanRules(t *testing.T) {
	b := newByRef()
	nodes := testNodes(t, 64) // budget max(8, 64/8) = 8
	if p := b.plan(prepared(t, b, nodes)); p.keep || p.base != nil {
		t.Fatalf("before the header: %+v, want full without keep", p)
	}
	b.readsSets.Store(true)
	if p := b.plan(prepared(t, b, nodes[:minSetNodes-1])); p.keep || p.base != nil {
		t.Fatalf("%d nodes: %+v, want full without keep", minSetNodes-1, p)
	}
	if p := b.plan(prepared(t, b, nodes)); !p.keep || p.base != nil {
		t.Fatalf("no base yet: %+v, want full with keep", p)
	}
	b.kept(prepared(t, b, nodes))

	same := b.plan(prepared(t, b, nodes))
	if same.base == nil || len(same.changed) != 0 || len(same.removed) != 0 {
		t.Fatalf("unchanged: %+v, want an empty change", same)
	}
	// Changed usage, a new node and removed nodes; within the budget.
	next := slices.Clone(nodes)
	next[5] = &v1.Node{Name: "n005", Cards: []*v1.Card{{Id: "n005-0", Slots: 10, TotalMemMib: 1000}}}
	busy(next[5], 1)
	next = append(next[:10], next[12:]...) // without n010, n011
	next = append(next, testNodes(t, 65)[64])
	p := b.plan(prepared(t, b, next))
	if p.base == nil || !slices.Equal(p.changed, []int{5, len(next) - 1}) || !slices.Equal(p.removed, []string{"n010", "n011"}) {
		t.Fatalf("changes: %+v", p)
	}
	set, refs := p.request(b, prepared(t, b, next), nil)
	if set.GetKeep() || set.GetBase() == nil || len(refs) != 2 || p.position(1) != len(next)-1 {
		t.Fatalf("request %v with %d refs", set, len(refs))
	}
	// Over the budget: in full, kept again.
	over := slices.Clone(nodes)
	for i := range 9 {
		over[i] = &v1.Node{Name: nodes[i].GetName(), Cards: []*v1.Card{{Id: "x", Slots: 10, TotalMemMib: 1000}}}
	}
	if p := b.plan(prepared(t, b, over)); !p.keep || p.base != nil {
		t.Fatalf("9 changed of 64: %+v, want full with keep", p)
	}
	if p := b.plan(prepared(t, b, nodes[:55])); !p.keep || p.base != nil {
		t.Fatalf("9 removed of 64: %+v, want full with keep", p)
	}
	mixed := over[4:] // n004..n008 changed, n000..n003 removed
	if p := b.plan(prepared(t, b, mixed)); !p.keep || p.base != nil {
		t.Fatalf("5 changed and 4 removed of 64: %+v, want full with keep", p)
	}
	// A name twice goes in full (the server names the duplicate).
	dup := append(slices.Clone(nodes), nodes[3])
	if p := b.plan(prepared(t, b, dup)); !p.keep || p.base != nil {
		t.Fatalf("a name twice: %+v, want full with keep", p)
	}
	// A base reported missing is dropped; another key leaves it.
	key := b.base.key
	b.dropBase(partKey{})
	if b.base == nil {
		t.Fatal("dropped for another key")
	}
	b.dropBase(key)
	if b.base != nil {
		t.Fatal("not dropped")
	}
}

func TestFieldsMapBackToTheCallersPositions(t *testing.T) {
	same := func(j int) int { return j }
	for _, c := range []struct {
		in, want string
		pos      func(int) int
	}{
		{"node_refs[2].inventory.cards[0].health", "nodes[2].cards[0].health", same},
		{"node_refs[2].inventory", "nodes[2]", same},
		{"node_refs[2].inventory_digest", "nodes[2]", same},
		{"workload.x", "workload.x", same},
		{"node_refs[1].usage", "nodes[6].usage", func(j int) int { return j + 5 }},
		{"node_refs[0].inventory.cards[1].id", "nodes[41].cards[1].id", plan{base: &nodeBase{}, changed: []int{41}}.position},
	} {
		if got := fieldBack(c.in, c.pos); got != c.want {
			t.Errorf("fieldBack(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// The set digest of the shared exchange's kept references is the base its next step names.
func TestSetKeyAgreesWithTheSharedExchange(t *testing.T) {
	_, here, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "..", "..", "proto", "testdata", "exchanges", "by-reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var x struct {
		Steps []struct {
			Request json.RawMessage `json:"request"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(raw, &x); err != nil {
		t.Fatal(err)
	}
	checked := false
	for i := 0; i+1 < len(x.Steps); i++ {
		var keep, next v1.AllocateRequest
		if err := protojson.Unmarshal(x.Steps[i].Request, &keep); err != nil {
			t.Fatal(err)
		}
		if !keep.GetNodeSet().GetKeep() {
			continue
		}
		if err := protojson.Unmarshal(x.Steps[i+1].Request, &next); err != nil {
			t.Fatal(err)
		}
		var nodes []*preparedNode
		for _, r := range keep.GetNodeRefs() {
			p := &preparedNode{}
			copy(p.invKey.hash[:], r.GetInventoryDigest().GetHash())
			if u := r.GetUsageDigest(); u != nil {
				k := partKey{size: u.GetSizeBytes()}
				copy(k.hash[:], u.GetHash())
				p.usageKey = &k
			}
			nodes = append(nodes, p)
		}
		k := setKey(nodes)
		base := next.GetNodeSet().GetBase()
		if !slices.Equal(k.hash[:], base.GetHash()) || k.size != base.GetSizeBytes() {
			t.Fatalf("set key %s, the exchange names %x/%d", k.subject(), base.GetHash(), base.GetSizeBytes())
		}
		checked = true
	}
	if !checked {
		t.Fatal("no kept set in the exchange")
	}
}
