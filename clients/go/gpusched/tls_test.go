package gpusched_test

// TLS and mutual TLS against the real server, with certificates made in the test.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpusched/gpusched/clients/go/gpusched"
	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

type pki struct {
	dir                   string
	caFile                string
	serverCert, serverKey string
	clientCert, clientKey string
	otherCA               string // a CA that signed nothing the server uses
	caPool                *x509.CertPool
	clientPair            tls.Certificate
}

type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serial int64

func newCert(t *testing.T, tmpl *x509.Certificate, parent *issuer) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	parentCert, parentKey := tmpl, key
	if parent != nil {
		parentCert, parentKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key,
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
}

func newCA(t *testing.T, name string) (*issuer, []byte) {
	cert, key, certPEM, _ := newCert(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}, nil)
	return &issuer{cert, key}, certPEM
}

func makePKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, caPEM := newCA(t, "gpusched test CA")
	_, otherPEM := newCA(t, "unrelated CA")
	_, _, srvPEM, srvKey := newCert(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "gpusched-server"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca)
	_, _, cliPEM, cliKey := newCert(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "gpusched-client"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca)
	p := &pki{
		dir:        dir,
		caFile:     write("ca.pem", caPEM),
		otherCA:    write("other-ca.pem", otherPEM),
		serverCert: write("server.pem", srvPEM),
		serverKey:  write("server-key.pem", srvKey),
		clientCert: write("client.pem", cliPEM),
		clientKey:  write("client-key.pem", cliKey),
		caPool:     x509.NewCertPool(),
	}
	p.caPool.AddCert(ca.cert)
	pair, err := tls.X509KeyPair(cliPEM, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	p.clientPair = pair
	return p
}

func tlsCall(c *gpusched.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Allocate(ctx, &v1.AllocateRequest{Nodes: []*v1.Node{node("a", 1, 8000)}, Workload: oneGPU()})
	return err
}

func TestLiveTLS(t *testing.T) {
	needServer(t)
	p := makePKI(t)
	s := startTestServer(t, []string{"--tls-cert", p.serverCert, "--tls-key", p.serverKey}, nil)

	if err := tlsCall(dial(t, s.addr, gpusched.WithTLSFiles(p.caFile, "", ""))); err != nil {
		t.Fatalf("TLS with the CA file: %v", err)
	}
	if err := tlsCall(dial(t, s.addr, gpusched.WithTLSConfig(&tls.Config{RootCAs: p.caPool, MinVersion: tls.VersionTLS12}))); err != nil {
		t.Fatalf("TLS with a tls.Config: %v", err)
	}
	// The certificate names localhost too.
	if err := tlsCall(dial(t, s.addr, gpusched.WithTLSFiles(p.caFile, "", ""), gpusched.WithServerName("localhost"))); err != nil {
		t.Fatalf("TLS with server name localhost: %v", err)
	}
	if err := tlsCall(dial(t, s.addr, gpusched.WithTLSFiles(p.caFile, "", ""), gpusched.WithServerName("elsewhere.example"))); !gpusched.IsUnavailable(err) {
		t.Fatalf("wrong server name: %v", err)
	}
	if err := tlsCall(dial(t, s.addr, gpusched.WithTLSFiles(p.otherCA, "", ""))); !gpusched.IsUnavailable(err) {
		t.Fatalf("untrusted server certificate: %v", err)
	}
	if err := tlsCall(dial(t, s.addr)); err == nil {
		t.Fatal("plaintext call to a TLS server succeeded")
	}
}

func TestLiveMutualTLS(t *testing.T) {
	needServer(t)
	p := makePKI(t)
	s := startTestServer(t, []string{"--tls-cert", p.serverCert, "--tls-key", p.serverKey, "--tls-client-ca", p.caFile}, nil)

	if err := tlsCall(dial(t, s.addr, gpusched.WithTLSFiles(p.caFile, p.clientCert, p.clientKey))); err != nil {
		t.Fatalf("mTLS with files: %v", err)
	}
	cfg := &tls.Config{RootCAs: p.caPool, Certificates: []tls.Certificate{p.clientPair}, MinVersion: tls.VersionTLS12}
	if err := tlsCall(dial(t, s.addr, gpusched.WithTLSConfig(cfg))); err != nil {
		t.Fatalf("mTLS with a tls.Config: %v", err)
	}
	if err := tlsCall(dial(t, s.addr, gpusched.WithTLSFiles(p.caFile, "", ""))); err == nil {
		t.Fatal("a client without certificate was accepted")
	}
}
