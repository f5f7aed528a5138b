package proxy_test

import (
	"io"
	"testing"
	"time"

	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5/pgproto3"
)

// A client that sends Terminate is told nothing more. PostgreSQL closes its
// end when it reads the Terminate; the proxy must not report that close to
// the client as a lost server (FATAL 08006), which node-postgres raises as
// an error on a pooled connection it was closing, and which an application
// without an error listener dies of. The race is between the proxy's two
// pumps, so the test closes many sessions.
func TestTerminateGetsNoAnswer(t *testing.T) {
	fx := newFixture(t)
	proxied := proxytest.Start(t, fx.direct)
	for i := range 300 {
		w := dialWire(t, proxied)
		w.send(&pgproto3.Terminate{})
		_ = w.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(w.r)
		w.c.Close()
		if len(b) > 0 {
			t.Fatalf("session %d: after Terminate the proxy sent %q (%v); want the connection closed without a word", i, b, err)
		}
	}
}
