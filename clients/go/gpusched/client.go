package gpusched

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

// Client calls a gpusched-server. It is safe for concurrent use; create one per server and
// share it. Every method returns the generated response message, or an *Error.
type Client struct {
	conn      *grpc.ClientConn
	placement v1.PlacementServiceClient
	inventory v1.InventoryServiceClient
	byref     *byRef // nil: nodes always go whole
}

// Dial creates a Client for addr ("host:port"; any grpc.NewClient target works too). By default
// the connection is plaintext and made lazily on the first call; ctx is only used with
// WithBlock, to bound the wait for a ready connection.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	ti := timeoutInterceptor{timeout: cfg.timeout}
	var byref *byRef
	if cfg.byReference {
		byref = newByRef()
	}
	dial := []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(ti.unary, byref.noteHeader),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(cfg.maxMessage),
			grpc.MaxCallSendMsgSize(cfg.maxMessage),
		),
	}
	if cfg.usesTLS() {
		tlsCfg, err := cfg.buildTLS()
		if err != nil {
			return nil, err
		}
		dial = append(dial, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	} else {
		dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if cfg.otel {
		dial = append(dial, grpc.WithStatsHandler(otelgrpc.NewClientHandler(cfg.otelOpts...)))
	}
	dial = append(dial, cfg.dialOpts...)

	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, fmt.Errorf("gpusched: %w", err)
	}
	c := &Client{
		conn:      conn,
		placement: v1.NewPlacementServiceClient(conn),
		inventory: v1.NewInventoryServiceClient(conn),
	}
	c.byref = byref
	if cfg.block {
		if err := waitReady(ctx, conn); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("gpusched: connecting to %s: %w", addr, err)
		}
	}
	return c, nil
}

// waitReady connects and waits until the connection is READY or ctx is done.
func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	conn.Connect()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.Shutdown:
			return fmt.Errorf("connection shut down")
		case connectivity.Idle:
			conn.Connect()
		}
		if !conn.WaitForStateChange(ctx, s) {
			return fmt.Errorf("%w (last state %s)", ctx.Err(), s)
		}
	}
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Conn is the underlying connection (with the default deadline and telemetry of the Client),
// e.g. for the health service.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// PlacementService is the generated stub on the Client's connection: it returns gRPC status
// errors, not *Error.
func (c *Client) PlacementService() v1.PlacementServiceClient { return c.placement }

// InventoryService is the generated stub on the Client's connection.
func (c *Client) InventoryService() v1.InventoryServiceClient { return c.inventory }

// Filter returns which candidate nodes can host the workload, and why the others cannot.
func (c *Client) Filter(ctx context.Context, req *v1.FilterRequest, opts ...grpc.CallOption) (*v1.FilterResponse, error) {
	if c.byref.serverReadsRefs() && len(req.GetNodeRefs()) == 0 && len(req.GetNodes()) > 0 && req.GetNodeSet() == nil {
		return withNodes(ctx, c.byref, req.GetNodes(), func(ctx context.Context, set *v1.NodeSetRef, refs []*v1.NodeRef) (*v1.FilterResponse, error) {
			r := &v1.FilterRequest{Workload: req.GetWorkload(), Options: req.GetOptions(), NodeRefs: refs, NodeSet: set}
			return c.placement.Filter(ctx, r, opts...)
		})
	}
	resp, err := c.placement.Filter(ctx, req, opts...)
	return resp, wrap(err)
}

// Score returns the node scores of the nodes that can host the workload, most preferred first.
func (c *Client) Score(ctx context.Context, req *v1.ScoreRequest, opts ...grpc.CallOption) (*v1.ScoreResponse, error) {
	if c.byref.serverReadsRefs() && len(req.GetNodeRefs()) == 0 && len(req.GetNodes()) > 0 && req.GetNodeSet() == nil {
		return withNodes(ctx, c.byref, req.GetNodes(), func(ctx context.Context, set *v1.NodeSetRef, refs []*v1.NodeRef) (*v1.ScoreResponse, error) {
			r := &v1.ScoreRequest{Workload: req.GetWorkload(), Options: req.GetOptions(), NodeRefs: refs, NodeSet: set}
			return c.placement.Score(ctx, r, opts...)
		})
	}
	resp, err := c.placement.Score(ctx, req, opts...)
	return resp, wrap(err)
}

// Allocate chooses the node and the cards for one workload. A workload that fits nowhere is an
// answer (Result.Placed false, with per-node reasons), not an error.
func (c *Client) Allocate(ctx context.Context, req *v1.AllocateRequest, opts ...grpc.CallOption) (*v1.AllocateResponse, error) {
	if c.byref.serverReadsRefs() && len(req.GetNodeRefs()) == 0 && len(req.GetNodes()) > 0 && req.GetNodeSet() == nil {
		return withNodes(ctx, c.byref, req.GetNodes(), func(ctx context.Context, set *v1.NodeSetRef, refs []*v1.NodeRef) (*v1.AllocateResponse, error) {
			r := &v1.AllocateRequest{Workload: req.GetWorkload(), Options: req.GetOptions(), RestrictToNodeNames: req.GetRestrictToNodeNames(), NodeRefs: refs, NodeSet: set}
			return c.placement.Allocate(ctx, r, opts...)
		})
	}
	resp, err := c.placement.Allocate(ctx, req, opts...)
	return resp, wrap(err)
}

// AllocateBatch places workloads one after another on the same snapshot.
func (c *Client) AllocateBatch(ctx context.Context, req *v1.AllocateBatchRequest, opts ...grpc.CallOption) (*v1.AllocateBatchResponse, error) {
	if c.byref.serverReadsRefs() && len(req.GetNodeRefs()) == 0 && len(req.GetNodes()) > 0 && req.GetNodeSet() == nil {
		return withNodes(ctx, c.byref, req.GetNodes(), func(ctx context.Context, set *v1.NodeSetRef, refs []*v1.NodeRef) (*v1.AllocateBatchResponse, error) {
			r := &v1.AllocateBatchRequest{Workloads: req.GetWorkloads(), Options: req.GetOptions(), AllOrNothing: req.GetAllOrNothing(), ReturnUpdatedNodes: req.GetReturnUpdatedNodes(), NodeRefs: refs, NodeSet: set}
			return c.placement.AllocateBatch(ctx, r, opts...)
		})
	}
	resp, err := c.placement.AllocateBatch(ctx, req, opts...)
	return resp, wrap(err)
}

// Preempt says which placed workloads must leave which node so that a pending workload of
// higher priority fits, card-exact, and on which node to do it (docs/placement-semantics.md
// section 9). Nothing is evicted: the caller acts on the answer. Nodes go by reference and as
// node-set changes like Allocate.
func (c *Client) Preempt(ctx context.Context, req *v1.PreemptRequest, opts ...grpc.CallOption) (*v1.PreemptResponse, error) {
	if c.byref.serverReadsRefs() && len(req.GetNodeRefs()) == 0 && len(req.GetNodes()) > 0 && req.GetNodeSet() == nil {
		return withNodes(ctx, c.byref, req.GetNodes(), func(ctx context.Context, set *v1.NodeSetRef, refs []*v1.NodeRef) (*v1.PreemptResponse, error) {
			r := &v1.PreemptRequest{Workload: req.GetWorkload(), Options: req.GetOptions(), Priority: req.GetPriority(), Placed: req.GetPlaced(), NodeRefs: refs, NodeSet: set}
			return c.placement.Preempt(ctx, r, opts...)
		})
	}
	resp, err := c.placement.Preempt(ctx, req, opts...)
	return resp, wrap(err)
}

// ValidateWorkload parses and validates a workload without placing it. Problems with the
// workload are reported in the answer (Valid false, Violations), not as an error.
func (c *Client) ValidateWorkload(ctx context.Context, req *v1.ValidateWorkloadRequest, opts ...grpc.CallOption) (*v1.ValidateWorkloadResponse, error) {
	resp, err := c.placement.ValidateWorkload(ctx, req, opts...)
	return resp, wrap(err)
}

// NormalizeInventory turns one node's raw cards into the schedulable card list.
func (c *Client) NormalizeInventory(ctx context.Context, req *v1.NormalizeInventoryRequest, opts ...grpc.CallOption) (*v1.NormalizeInventoryResponse, error) {
	resp, err := c.inventory.NormalizeInventory(ctx, req, opts...)
	return resp, wrap(err)
}

// timeoutInterceptor applies the default deadline to calls whose context has none.
type timeoutInterceptor struct {
	timeout time.Duration
}

func (t timeoutInterceptor) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if _, ok := ctx.Deadline(); !ok && t.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.timeout)
		defer cancel()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}
