package gpusched

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
)

// DefaultTimeout is the per-call deadline a Client applies when the caller's context has none.
const DefaultTimeout = 30 * time.Second

// DefaultMaxMessageBytes is the default send and receive limit of a Client: answers with
// explanations over many nodes exceed gRPC's 4 MiB default. It is above the server's default
// limits.max_message_bytes (16 MiB), which bounds what the server accepts and answers.
const DefaultMaxMessageBytes = 64 << 20

// Option configures Dial.
type Option func(*config) error

type config struct {
	timeout    time.Duration
	maxMessage int
	block      bool

	tlsConfig  *tls.Config
	caFile     string
	certFile   string
	keyFile    string
	serverName string
	tlsFiles   bool

	otel     bool
	otelOpts []otelgrpc.Option

	dialOpts []grpc.DialOption

	byReference bool
}

func defaultConfig() config {
	return config{timeout: DefaultTimeout, maxMessage: DefaultMaxMessageBytes, byReference: true}
}

// WithTimeout sets the deadline applied to a call whose context has none (DefaultTimeout
// otherwise). A context that already has a deadline keeps it, shorter or longer. Zero means
// calls without a context deadline have no deadline at all.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("gpusched: WithTimeout(%v): negative timeout", d)
		}
		c.timeout = d
		return nil
	}
}

// WithMaxMessageBytes sets the send and receive message limit (DefaultMaxMessageBytes otherwise).
func WithMaxMessageBytes(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("gpusched: WithMaxMessageBytes(%d): must be > 0", n)
		}
		c.maxMessage = n
		return nil
	}
}

// WithBlock makes Dial wait until the connection is ready (or the Dial context is done)
// instead of connecting lazily on the first call.
func WithBlock() Option {
	return func(c *config) error {
		c.block = true
		return nil
	}
}

// WithTLSConfig turns TLS on with this configuration (mutual TLS when it carries client
// certificates). The configuration is cloned.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(c *config) error {
		if cfg == nil {
			return errors.New("gpusched: WithTLSConfig(nil)")
		}
		c.tlsConfig = cfg.Clone()
		return nil
	}
}

// WithTLSFiles turns TLS on from PEM files: caFile verifies the server ("" = the system roots);
// certFile and keyFile, when both given, are the client certificate and key for mutual TLS.
// Combined with WithTLSConfig, the files are added to that configuration.
func WithTLSFiles(caFile, certFile, keyFile string) Option {
	return func(c *config) error {
		if (certFile == "") != (keyFile == "") {
			return errors.New("gpusched: WithTLSFiles: give both a client certificate and its key, or neither")
		}
		c.tlsFiles = true
		c.caFile, c.certFile, c.keyFile = caFile, certFile, keyFile
		return nil
	}
}

// WithServerName sets the name the server certificate is verified against (by default the
// host of the address given to Dial). It implies TLS.
func WithServerName(name string) Option {
	return func(c *config) error {
		c.serverName = name
		return nil
	}
}

// WithOpenTelemetry instruments the connection with the otelgrpc client stats handler: each
// call gets a client span and the caller's trace context is propagated to the server (which
// continues the trace). Without options the global TracerProvider, MeterProvider and
// TextMapPropagator are used: set them with otel.SetTracerProvider and
// otel.SetTextMapPropagator, or pass otelgrpc.WithTracerProvider / otelgrpc.WithPropagators.
func WithOpenTelemetry(opts ...otelgrpc.Option) Option {
	return func(c *config) error {
		c.otel = true
		c.otelOpts = append(c.otelOpts, opts...)
		return nil
	}
}

// WithDialOptions adds raw grpc.DialOptions (interceptors, keepalive, a custom dialer...). They
// are applied after the options this package derives, so they win.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) error {
		c.dialOpts = append(c.dialOpts, opts...)
		return nil
	}
}

func (c *config) usesTLS() bool {
	return c.tlsConfig != nil || c.tlsFiles || c.serverName != ""
}

// buildTLS merges WithTLSConfig, WithTLSFiles and WithServerName into one configuration.
func (c *config) buildTLS() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.tlsConfig != nil {
		cfg = c.tlsConfig.Clone()
	}
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return nil, fmt.Errorf("gpusched: reading CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("gpusched: no PEM certificate in CA file %s", c.caFile)
		}
		cfg.RootCAs = pool
	}
	if c.certFile != "" {
		pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			return nil, fmt.Errorf("gpusched: loading client certificate: %w", err)
		}
		cfg.Certificates = append(cfg.Certificates, pair)
	}
	if c.serverName != "" {
		cfg.ServerName = c.serverName
	}
	return cfg, nil
}

// WithByReference turns sending nodes by reference on (the default) or off. On, Filter, Score,
// Allocate and AllocateBatch send each node's inventory and usage as SHA-256 digests once the
// server acknowledged them on this Client, inline otherwise, and resend them inline when the
// server reports them missing (restart, another replica, eviction), and a list of at least 16
// nodes is kept by the server as a node set so that later calls send only the nodes that changed
// (see NodeSetBase); requests that already carry NodeRefs or a NodeSet are sent as they are.
// Off: nodes always go whole, no node sets. On, nodes still go whole until a PlacementService
// answer on this Client carried NodeRefsHeader (a server that reads node_refs), and no node set
// is named before one carried NodeSetsHeader, so an older server is never sent fields it ignores.
func WithByReference(on bool) Option {
	return func(c *config) error {
		c.byReference = on
		return nil
	}
}
