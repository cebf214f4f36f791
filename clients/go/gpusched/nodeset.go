package gpusched

import (
	"crypto/sha256"
	"sort"

	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

// Node sets (NodeSetRef), done for the caller on top of nodes by reference: once the server has
// shown it reads them (NodeSetsHeader), a candidate list of at least minSetNodes nodes is sent in
// full with keep, and after that call succeeded the next calls name that set as their base and
// send only the nodes that changed (and the names of base nodes that are no longer candidates),
// as long as those changes stay within the budget (one in eight of the base, at least 8). A base
// the server does not hold (restart, another replica, eviction) is answered FAILED_PRECONDITION
// naming nodeset/<digest>: the Client drops it and sends the candidates in full once more, kept
// again. WithByReference(false) turns node sets off too.

// NodeSetsHeader is the response metadata a server that reads node_set (NodeSetRef) sets on
// every PlacementService answer; until the Client has seen it, it names no node set.
const NodeSetsHeader = "gpusched-node-sets"

// minSetNodes is the smallest candidate list sent as a node set (smaller ones gain nothing).
const minSetNodes = 16

// setSubjectPrefix prefixes the PreconditionFailure subject of a missing node set:
// nodeset/sha256/<hex>/<size>.
const setSubjectPrefix = "nodeset/"

// setBudget is how many changed and removed nodes a call may send against a base of n nodes
// before it goes in full (kept as the new base) instead.
func setBudget(n int) int { return max(8, n/8) }

// partKeys are the digests of one node's parts (usage nil: no card in use).
type partKeys struct {
	inv   partKey
	usage partKey
	busy  bool
}

func keysOf(p *preparedNode) partKeys {
	k := partKeys{inv: p.invKey}
	if p.usageKey != nil {
		k.usage, k.busy = *p.usageKey, true
	}
	return k
}

// nodeBase is a node set the server kept for this Client: its digest and each node's parts.
type nodeBase struct {
	key   partKey
	nodes map[string]partKeys
}

// setKey is the digest of a node set kept from references to nodes in this order (see
// NodeSetRef in types.proto): SHA-256 over each node's inventory hash and usage hash (32 zero
// bytes without usage); size 64 per node.
func setKey(nodes []*preparedNode) partKey {
	h := sha256.New()
	var zero [32]byte
	for _, p := range nodes {
		h.Write(p.invKey.hash[:])
		if p.usageKey != nil {
			h.Write(p.usageKey.hash[:])
		} else {
			h.Write(zero[:])
		}
	}
	var k partKey
	copy(k.hash[:], h.Sum(nil))
	k.size = 64 * uint64(len(nodes))
	return k
}

// plan is how the candidates of one call go: in full (keep: kept as a set), or as changes
// against base (the caller's nodes at positions changed, and removed base names).
type plan struct {
	keep    bool
	base    *nodeBase
	changed []int
	removed []string
}

var fullPlan = plan{}

// position is the caller's node position of reference j of this plan's request.
func (p plan) position(j int) int {
	if p.base == nil || j < 0 || j >= len(p.changed) {
		return j
	}
	return p.changed[j]
}

// plan chooses how to send nodes: as changes to the kept set when few changed, else in full
// (kept as a set when the server reads sets and the list is long enough).
func (b *byRef) plan(nodes []*preparedNode) plan {
	if !b.readsSets.Load() || len(nodes) < minSetNodes {
		return fullPlan
	}
	b.mu.Lock()
	base := b.base
	b.mu.Unlock()
	if base == nil {
		return plan{keep: true}
	}
	budget := setBudget(len(base.nodes))
	var changed []int
	names := make(map[string]struct{}, len(nodes))
	for i, p := range nodes {
		if _, dup := names[p.node.GetName()]; dup {
			// A name twice is the server's INVALID_ARGUMENT to give, on the full list.
			return plan{keep: true}
		}
		names[p.node.GetName()] = struct{}{}
		if k, ok := base.nodes[p.node.GetName()]; !ok || k != keysOf(p) {
			changed = append(changed, i)
			if len(changed) > budget {
				return plan{keep: true}
			}
		}
	}
	var removed []string
	for name := range base.nodes {
		if _, ok := names[name]; !ok {
			removed = append(removed, name)
		}
	}
	if len(changed)+len(removed) > budget {
		return plan{keep: true}
	}
	sort.Strings(removed)
	return plan{base: base, changed: changed, removed: removed}
}

// request is the node_set field and the references of this plan's request.
func (p plan) request(b *byRef, nodes []*preparedNode, forceInline map[partKey]bool) (*v1.NodeSetRef, []*v1.NodeRef) {
	switch {
	case p.base != nil:
		sent := make([]*preparedNode, len(p.changed))
		for j, i := range p.changed {
			sent[j] = nodes[i]
		}
		return &v1.NodeSetRef{Base: p.base.key.digest(), RemovedNodeNames: p.removed}, b.refs(sent, forceInline)
	case p.keep:
		return &v1.NodeSetRef{Keep: true}, b.refs(nodes, forceInline)
	default:
		return nil, b.refs(nodes, forceInline)
	}
}

// sent is what this plan's request carried: the nodes the server now holds the parts of.
func (p plan) sent(nodes []*preparedNode) []*preparedNode {
	if p.base == nil {
		return nodes
	}
	out := make([]*preparedNode, len(p.changed))
	for j, i := range p.changed {
		out[j] = nodes[i]
	}
	return out
}

// kept records, after a successful call in full with keep, that nodes are the server's set.
func (b *byRef) kept(nodes []*preparedNode) {
	base := &nodeBase{key: setKey(nodes), nodes: make(map[string]partKeys, len(nodes))}
	for _, p := range nodes {
		base.nodes[p.node.GetName()] = keysOf(p)
	}
	b.mu.Lock()
	b.base = base
	b.mu.Unlock()
}

// dropBase forgets the kept set key (FAILED_PRECONDITION named it: the replica does not hold it).
func (b *byRef) dropBase(key partKey) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.base != nil && b.base.key == key {
		b.base = nil
	}
}

// NodeSetBase is the digest (sha256/<hex>/<size>) of the node set this Client names as the base
// of its calls, "" when none (tests, diagnostics).
func (c *Client) NodeSetBase() string {
	if c.byref == nil {
		return ""
	}
	c.byref.mu.Lock()
	defer c.byref.mu.Unlock()
	if c.byref.base == nil {
		return ""
	}
	return c.byref.base.key.subject()
}
