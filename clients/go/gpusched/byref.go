package gpusched

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

// Nodes by reference (NodeRef): the Client splits each node into its inventory (the node with
// its cards' usage cleared) and its usage (NodeUsage), serializes both once and names them by
// SHA-256 digest. A part the server acknowledged (a successful call carried it inline) goes as
// its digest alone; a part the server reports missing (FAILED_PRECONDITION with a
// google.rpc.PreconditionFailure of type MISSING) is resent inline, once per missing digest.
// The server never needs to remember anything for a correct answer. On top of it, long
// candidate lists go as changes to a node set (nodeset.go). WithByReference(false) turns both
// off.

const (
	maxKnown = 1 << 20
	maxMemo  = 1 << 17
)

type partKey struct {
	hash [32]byte
	size uint64
}

func keyOf(b []byte) partKey { return partKey{hash: sha256.Sum256(b), size: uint64(len(b))} }

// Subject is the PreconditionFailure subject of a digest: sha256/<hex>/<size>.
func (k partKey) subject() string {
	return "sha256/" + hex.EncodeToString(k.hash[:]) + "/" + strconv.FormatUint(k.size, 10)
}

func parseSubject(s string) (partKey, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] != "sha256" || len(parts[1]) != 64 {
		return partKey{}, false
	}
	h, err := hex.DecodeString(parts[1])
	if err != nil {
		return partKey{}, false
	}
	size, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil {
		return partKey{}, false
	}
	var k partKey
	copy(k.hash[:], h)
	k.size = size
	return k, true
}

func (k partKey) digest() *v1.Digest {
	h := k.hash
	return &v1.Digest{Hash: h[:], SizeBytes: k.size}
}

// preparedNode is a node serialized and digested once.
type preparedNode struct {
	node      *v1.Node // a copy of the node as prepared
	inventory []byte
	invKey    partKey
	usage     []byte
	usageKey  *partKey
}

func prepareNode(n *v1.Node) (*preparedNode, error) {
	inv := proto.Clone(n).(*v1.Node)
	usage := &v1.NodeUsage{}
	for _, c := range inv.GetCards() {
		if u := c.GetUsage(); u != nil {
			if u.GetUsedSlots() != 0 || u.GetUsedMemMib() != 0 || u.GetUsedCores() != 0 {
				usage.Cards = append(usage.Cards, &v1.CardUsageEntry{CardId: c.GetId(), Usage: u})
			}
			c.Usage = nil
		}
	}
	det := proto.MarshalOptions{Deterministic: true}
	ib, err := det.Marshal(inv)
	if err != nil {
		return nil, fmt.Errorf("gpusched: encoding node %q: %w", n.GetName(), err)
	}
	p := &preparedNode{node: proto.Clone(n).(*v1.Node), inventory: ib, invKey: keyOf(ib)}
	if len(usage.Cards) > 0 {
		ub, err := det.Marshal(usage)
		if err != nil {
			return nil, fmt.Errorf("gpusched: encoding usage of node %q: %w", n.GetName(), err)
		}
		k := keyOf(ub)
		p.usage, p.usageKey = ub, &k
	}
	return p, nil
}

func (p *preparedNode) ref(byDigest func(partKey) bool) *v1.NodeRef {
	r := &v1.NodeRef{InventoryDigest: p.invKey.digest()}
	if !byDigest(p.invKey) {
		r.Inventory = p.inventory
	}
	if p.usageKey != nil {
		r.UsageDigest = p.usageKey.digest()
		if !byDigest(*p.usageKey) {
			r.Usage = p.usage
		}
	}
	return r
}

// byRef is the per-Client state of the automatic mode.
type byRef struct {
	mu    sync.Mutex
	known map[partKey]struct{}
	memo  map[string]*preparedNode
	// readsRefs: a PlacementService answer on this Client carried NodeRefsHeader; until then
	// nodes go whole (a server that predates node_refs would ignore them).
	readsRefs atomic.Bool
	// readsSets: an answer carried NodeSetsHeader; until then no node set is named.
	readsSets atomic.Bool
	// base is the last candidate list sent in full and kept by the server as a node set.
	base *nodeBase
}

// NodeRefsHeader is the response metadata a server that reads node_refs sets on every
// PlacementService answer. With WithByReference (the default) the Client sends nodes whole
// until it has seen it, then by reference.
const NodeRefsHeader = "gpusched-node-refs"

// serverReadsRefs: send nodes by reference on this call (nil: the mode is off).
func (b *byRef) serverReadsRefs() bool { return b != nil && b.readsRefs.Load() }

// noteHeader is a unary interceptor: a PlacementService answer (or error) carrying
// NodeRefsHeader switches references on, one carrying NodeSetsHeader node sets.
func (b *byRef) noteHeader(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if b == nil || (b.readsRefs.Load() && b.readsSets.Load()) || !strings.HasPrefix(method, "/gpusched.v1.PlacementService/") {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	var header, trailer metadata.MD
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&header), grpc.Trailer(&trailer))...)
	if len(header.Get(NodeRefsHeader)) > 0 || len(trailer.Get(NodeRefsHeader)) > 0 {
		b.readsRefs.Store(true)
	}
	if len(header.Get(NodeSetsHeader)) > 0 || len(trailer.Get(NodeSetsHeader)) > 0 {
		b.readsSets.Store(true)
	}
	return err
}

// ServerReadsRefs reports whether the server has shown (NodeRefsHeader) that it reads nodes by
// reference; until then nodes go whole even with WithByReference on.
func (c *Client) ServerReadsRefs() bool { return c.byref.serverReadsRefs() }

func newByRef() *byRef {
	return &byRef{known: map[partKey]struct{}{}, memo: map[string]*preparedNode{}}
}

// prepare reuses the prepared form of a node that did not change since the last call.
func (b *byRef) prepare(nodes []*v1.Node) ([]*preparedNode, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.memo) > maxMemo {
		b.memo = map[string]*preparedNode{}
	}
	out := make([]*preparedNode, len(nodes))
	for i, n := range nodes {
		// Compared by content: callers update their nodes in place.
		if p, ok := b.memo[n.GetName()]; ok && proto.Equal(p.node, n) {
			out[i] = p
			continue
		}
		p, err := prepareNode(n)
		if err != nil {
			return nil, err
		}
		b.memo[n.GetName()] = p
		out[i] = p
	}
	return out, nil
}

func (b *byRef) refs(nodes []*preparedNode, forceInline map[partKey]bool) []*v1.NodeRef {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*v1.NodeRef, len(nodes))
	for i, p := range nodes {
		out[i] = p.ref(func(k partKey) bool {
			_, ok := b.known[k]
			return ok && !forceInline[k]
		})
	}
	return out
}

func (b *byRef) acknowledge(nodes []*preparedNode) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.known)+2*len(nodes) > maxKnown {
		b.known = map[partKey]struct{}{}
	}
	for _, p := range nodes {
		b.known[p.invKey] = struct{}{}
		if p.usageKey != nil {
			b.known[*p.usageKey] = struct{}{}
		}
	}
}

func (b *byRef) forget(keys []partKey) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		delete(b.known, k)
	}
}

// AcknowledgedParts is the number of node parts (inventories, usages) the server acknowledged on
// this Client (0 when nodes go whole).
func (c *Client) AcknowledgedParts() int {
	if c.byref == nil {
		return 0
	}
	c.byref.mu.Lock()
	defer c.byref.mu.Unlock()
	return len(c.byref.known)
}

// fieldBack names node_refs[j].inventory... fields after nodes[i], where reference j was the
// caller's node i = position(j).
func fieldBack(f string, position func(int) int) string {
	rest, ok := strings.CutPrefix(f, "node_refs[")
	if !ok {
		return f
	}
	num, tail, ok := strings.Cut(rest, "]")
	if !ok {
		return f
	}
	switch {
	case strings.HasPrefix(tail, ".inventory_digest"):
		tail = ""
	case strings.HasPrefix(tail, ".inventory"):
		tail = strings.TrimPrefix(tail, ".inventory")
	}
	j, err := strconv.Atoi(num)
	if err != nil {
		return f
	}
	return "nodes[" + strconv.Itoa(position(j)) + "]" + tail
}

// withNodes sends nodes by reference, as changes to a kept node set when that pays: call is
// invoked with the node_set field and the references to send. Parts reported missing are resent
// inline once each; a base reported missing is dropped and the candidates go in full (kept) once.
// Field violations are named after the caller's nodes[i].
func withNodes[R any](ctx context.Context, b *byRef, nodes []*v1.Node, call func(context.Context, *v1.NodeSetRef, []*v1.NodeRef) (R, error)) (R, error) {
	var zero R
	prepared, err := b.prepare(nodes)
	if err != nil {
		return zero, err
	}
	force := map[partKey]bool{}
	p := b.plan(prepared)
	for {
		set, refs := p.request(b, prepared, force)
		resp, err := call(ctx, set, refs)
		if err == nil {
			b.acknowledge(p.sent(prepared))
			if p.keep {
				b.kept(prepared)
			}
			return resp, nil
		}
		e := FromError(err)
		if e.Code == codes.FailedPrecondition {
			var missing []partKey
			baseMissing := false
			again := false
			for _, s := range e.MissingDigests {
				if rest, ok := strings.CutPrefix(s, setSubjectPrefix); ok {
					if k, ok := parseSubject(rest); ok && p.base != nil && k == p.base.key {
						baseMissing = true
					}
					continue
				}
				if k, ok := parseSubject(s); ok {
					missing = append(missing, k)
					again = again || force[k]
				}
			}
			b.forget(missing)
			if baseMissing {
				// The replica does not hold the set: everything in full, kept again (once: a
				// full plan names no base).
				b.dropBase(p.base.key)
				p = plan{keep: true}
				continue
			}
			if e.MissingMore {
				// Only some missing parts listed: every part inline, once.
				var every []partKey
				for _, n := range prepared {
					every = append(every, n.invKey)
					if n.usageKey != nil {
						every = append(every, *n.usageKey)
					}
				}
				all := true
				for _, k := range every {
					all = all && force[k]
				}
				if all {
					return zero, e
				}
				b.forget(every)
				for _, k := range every {
					force[k] = true
				}
				continue
			}
			// Resend each missing part inline once; a part missing again after it went inline
			// (impossible with a conforming server) ends the call.
			if len(missing) == 0 || again {
				return zero, e
			}
			for _, k := range missing {
				force[k] = true
			}
			continue
		}
		back := func(f string) string { return fieldBack(f, p.position) }
		for i := range e.FieldViolations {
			e.FieldViolations[i].Field = back(e.FieldViolations[i].Field)
		}
		for i := range e.QuotaViolations {
			e.QuotaViolations[i].Subject = back(e.QuotaViolations[i].Subject)
		}
		if e.ErrorInfo != nil {
			if f, ok := e.ErrorInfo.Metadata["field"]; ok {
				e.ErrorInfo.Metadata["field"] = back(f)
			}
		}
		return zero, e
	}
}
