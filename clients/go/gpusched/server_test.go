package gpusched_test

// The live tests start a real gpusched-server binary on 127.0.0.1 port 0 and parse the address
// from the first stdout line ("gpusched-server listening grpc=ADDR metrics=ADDR").
//
// Binary: $GPUSCHED_SERVER_BIN, else $CARGO_TARGET_DIR/debug/gpusched-server when
// CARGO_TARGET_DIR is set (relative to the repository root when relative), else
// ../../target/debug/gpusched-server relative to clients/go. A missing binary fails every live
// test, unless GPUSCHED_ALLOW_SKIP=1, which skips them (and the examples) instead.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/clients/go/gpusched"
)

var (
	// serverAddr is the address of the gpusched-server shared by the tests and examples.
	serverAddr string
	// serverBin is the binary, and serverMissing why it cannot be used ("" when it can).
	serverBin     string
	serverMissing string
)

func TestMain(m *testing.M) {
	flag.Parse()
	serverBin, serverMissing = findServer()
	var shared *server
	if serverMissing == "" {
		var err error
		shared, err = startServer(nil, nil)
		if err != nil {
			serverMissing = err.Error()
		} else {
			serverAddr = shared.addr
		}
	}
	if serverMissing != "" {
		verb := "FAIL"
		if allowSkip() {
			verb = "SKIP"
		}
		fmt.Fprintf(os.Stderr, "gpusched live tests: %s: %s\n", verb, serverMissing)
		// Examples cannot skip themselves: leave them out rather than report a wrong output.
		skip := "^Example"
		if f := flag.Lookup("test.skip"); f != nil && f.Value.String() != "" {
			skip = f.Value.String() + "|" + skip
		}
		_ = flag.Set("test.skip", skip)
	}
	code := m.Run()
	if shared != nil {
		shared.stop()
	}
	os.Exit(code)
}

func allowSkip() bool { return os.Getenv("GPUSCHED_ALLOW_SKIP") == "1" }

// needServer skips (GPUSCHED_ALLOW_SKIP=1) or fails the test when there is no server binary.
func needServer(t testing.TB) {
	t.Helper()
	if serverMissing == "" {
		return
	}
	if allowSkip() {
		t.Skipf("no gpusched-server (GPUSCHED_ALLOW_SKIP=1): %s", serverMissing)
	}
	t.Fatalf("no gpusched-server: %s (set GPUSCHED_SERVER_BIN, build it with `cargo build -p gpusched-service`, or set GPUSCHED_ALLOW_SKIP=1 to skip)", serverMissing)
}

// clientsGoDir is clients/go (the directory of go.mod).
func clientsGoDir() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return filepath.Join(dir, "..")
		}
	}
}

func repoRoot() string { return filepath.Join(clientsGoDir(), "..", "..") }

func findServer() (bin, missing string) {
	switch {
	case os.Getenv("GPUSCHED_SERVER_BIN") != "":
		bin = os.Getenv("GPUSCHED_SERVER_BIN")
	case os.Getenv("CARGO_TARGET_DIR") != "":
		target := os.Getenv("CARGO_TARGET_DIR")
		if !filepath.IsAbs(target) {
			target = filepath.Join(repoRoot(), target)
		}
		bin = filepath.Join(target, "debug", "gpusched-server")
	default:
		bin = filepath.Join(clientsGoDir(), "..", "..", "target", "debug", "gpusched-server")
	}
	bin = filepath.Clean(bin)
	st, err := os.Stat(bin)
	switch {
	case err != nil:
		return bin, fmt.Sprintf("server binary %s: %v", bin, err)
	case st.IsDir() || st.Mode()&0o111 == 0:
		return bin, fmt.Sprintf("server binary %s is not an executable file", bin)
	}
	return bin, ""
}

// server is one running gpusched-server process.
type server struct {
	addr    string
	metrics string // host:port of the metrics listener
	cmd     *exec.Cmd
	stderr  *lockedBuffer
	done    chan struct{}
	once    sync.Once
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var (
	grpcAddrRE    = regexp.MustCompile(`grpc=(\S+)`)
	metricsAddrRE = regexp.MustCompile(`metrics=(\S+)`)
)

// startServer starts the binary on 127.0.0.1:0 with extra flags and environment variables
// (e.g. GPUSCHED_LIMITS__REQUEST_TIMEOUT=1ns). GPUSCHED_* variables of the test's own
// environment are not passed on, so the server runs its embedded default configuration. A
// "--listen" in args replaces the default 127.0.0.1:0 (e.g. to restart a server at its address).
func startServer(args, env []string) (*server, error) {
	if serverMissing != "" && serverBin == "" {
		return nil, errors.New(serverMissing)
	}
	argv := []string{"--metrics-listen", "127.0.0.1:0", "--log-level", "warn"}
	if !slices.Contains(args, "--listen") {
		argv = append([]string{"--listen", "127.0.0.1:0"}, argv...)
	}
	argv = append(argv, args...)
	cmd := exec.Command(serverBin, argv...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPUSCHED_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", serverBin, err)
	}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()

	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, r) // keep the pipe drained
	}()
	select {
	case line := <-lines:
		m := grpcAddrRE.FindStringSubmatch(line)
		if m == nil {
			s.stop()
			return nil, fmt.Errorf("%s %s: no grpc= in first stdout line %q; stderr:\n%s", serverBin, strings.Join(argv, " "), line, s.stderr.String())
		}
		s.addr = m[1]
		if m := metricsAddrRE.FindStringSubmatch(line); m != nil {
			s.metrics = m[1]
		}
		return s, nil
	case <-time.After(60 * time.Second):
		s.stop()
		return nil, fmt.Errorf("%s did not print its address within 60s; stderr:\n%s", serverBin, s.stderr.String())
	}
}

// stop sends SIGTERM (graceful shutdown) and kills the process if it has not exited in 10s.
func (s *server) stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
}

// startTestServer starts a dedicated server for one test, stopped at the end of the test.
func startTestServer(t *testing.T, args, env []string) *server {
	t.Helper()
	needServer(t)
	s, err := startServer(args, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("server stderr:\n%s", s.stderr.String())
		}
	})
	return s
}

// dial connects to addr (the shared server by default) and closes the client at the end of
// the test.
func dial(t *testing.T, addr string, opts ...gpusched.Option) *gpusched.Client {
	t.Helper()
	if addr == "" {
		needServer(t)
		addr = serverAddr
	}
	c, err := gpusched.Dial(context.Background(), addr, opts...)
	if err != nil {
		t.Fatalf("Dial(%s): %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
