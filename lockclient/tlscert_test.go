package lockclient

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// resettingTLSServer accepts TLS connections that ask for a client
// certificate (without requiring one), completes the handshake, then
// either resets the connection at once (the way a server that requires a
// certificate can look to a TLS 1.3 client whose write meets the closed
// socket before it reads the alert) or, with answerFirst, sends one byte
// first and resets after.
func resettingTLSServer(t *testing.T, pki *testPKI, answerFirst bool) string {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(pki.certFile, pki.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert,
		MinVersion: tls.VersionTLS13}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				tc := tls.Server(c, cfg)
				c.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
				if tc.Handshake() == nil && answerFirst {
					// Wait for the client's request, answer one byte of a
					// reply, then fail.
					buf := make([]byte, 64)
					tc.Read(buf)          //nolint:errcheck
					tc.Write([]byte("+")) //nolint:errcheck
					time.Sleep(50 * time.Millisecond)
				}
				c.(*net.TCPConn).SetLinger(0) //nolint:errcheck
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// TestFirstExchangeResetAfterCertificateRequest: a connection reset on its
// first exchange after the server asked for a client certificate none was
// configured for is an authentication failure that names the missing
// certificate; the same reset with a certificate given, or after the server
// answered, stays a network failure.
func TestFirstExchangeResetAfterCertificateRequest(t *testing.T) {
	testutil.NeedServices(t)
	pki := newTestPKI(t)
	for _, tc := range []struct {
		name        string
		answerFirst bool
		cfg         *tls.Config
		kind        NodeErrorKind
		words       string
	}{
		{"no certificate, reset at once", false, &tls.Config{RootCAs: pki.pool}, NodeAuthFailed, "asked for a TLS client certificate"},
		{"certificate given, reset at once", false, &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}, NodeUnreachable, "unreachable"},
		{"no certificate, reset after an answer", true, &tls.Config{RootCAs: pki.pool}, NodeUnreachable, "unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := resettingTLSServer(t, pki, tc.answerFirst)
			c, err := Dial([]string{"rediss://" + addr}, nil, WithRedisTLS(tc.cfg), WithNodeTimeout(2*time.Second),
				WithRetry(NoRetry()), WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Acquire(context.Background(), "cert")
			t.Logf("%s: %v", tc.name, err)
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("Acquire: %v, want %v (%q)", err, tc.kind, tc.words)
			}
		})
	}
}
