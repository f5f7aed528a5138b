package tokenclient

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
)

// giveUpWithin calls Next under a context without deadline (so the
// client's own 30s bound applies) and checks that it gives up within
// limit, with ErrNotTokenService, on one line that says each of want and
// holds no HTML.
func giveUpWithin(t *testing.T, limit time.Duration, urls []string, want ...string) {
	t.Helper()
	c, err := NewClient(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Next(context.Background(), "order:42")
	took := time.Since(start)
	if !errors.Is(err, ErrNotTokenService) || !errors.Is(err, tokenapi.ErrUnavailable) {
		t.Fatalf("Next against %v: %v; want ErrNotTokenService (and tokenapi.ErrUnavailable)", urls, err)
	}
	if took > limit {
		t.Errorf("Next against %v gave up after %v; want within %v", urls, took, limit)
	}
	msg := err.Error()
	if strings.ContainsAny(msg, "\n<") {
		t.Errorf("error is not one line without markup: %q", msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %q", msg, w)
		}
	}
	t.Logf("after %v: %s", took.Round(time.Millisecond), msg)
}

// Against PostgreSQL's and Redis's ports the client gives up within
// seconds: they close the connection on an HTTP request.
func TestGiveUpOnOtherProtocols(t *testing.T) {
	u, err := url.Parse(testutil.PostgresAdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := testutil.Redis(t)
	for _, srv := range []string{"http://" + u.Host, "https://" + u.Host, "http://" + addr} {
		giveUpWithin(t, 5*time.Second, []string{srv}, srv, "closed the connection without an HTTP answer", "check the server URLs")
	}
}

// Against a web server that is not the token API (an HTML error page, a
// 404, another JSON API) the client gives up at once, without the page.
func TestGiveUpOnWebServers(t *testing.T) {
	testutil.NeedServices(t)
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusNotImplemented)
		w.Write([]byte("<!DOCTYPE HTML>\n<html><body><h1>Error response</h1></body></html>\n"))
	}))
	defer html.Close()
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	otherJSON := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}))
	defer otherJSON.Close()
	giveUpWithin(t, 2*time.Second, []string{html.URL}, "answered HTTP 501 text/html, not the token API's JSON", "check the server URLs")
	giveUpWithin(t, 2*time.Second, []string{notFound.URL}, "answered HTTP 404")
	giveUpWithin(t, 2*time.Second, []string{otherJSON.URL}, "answered HTTP 200 JSON without a token")
	// Mixed with a node where nothing listens: both are named.
	closed := closedNodeURLs(t, 1)[0]
	giveUpWithin(t, 2*time.Second, []string{html.URL, closed}, html.URL, closed+" refused the connection")
}

// A TLS cluster addressed without its CA, or with http://, and a plain
// node addressed with https://: the client gives up at once and says
// which setting to change.
func TestGiveUpOnTLSMismatch(t *testing.T) {
	testutil.NeedServices(t)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("a request got through a TLS handshake the client should have refused")
	}))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	defer tlsSrv.Close()
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	giveUpWithin(t, 2*time.Second, []string{tlsSrv.URL}, "does not trust", "--tls-ca")
	giveUpWithin(t, 2*time.Second, []string{"http://" + tlsSrv.Listener.Addr().String()}, "plain-HTTP request to a TLS port", "write https://")
	giveUpWithin(t, 2*time.Second, []string{"https://" + plain.Listener.Addr().String()}, "does not speak TLS", "write http://")
}

// What a token node does when it is briefly unable to serve is not
// mistaken for "not a token service": a node that closes connections
// without an answer for a moment (at its connection cap) is retried, and
// a proxy's 503 page keeps the client trying until its deadline.
func TestGiveUpSparesBusyNodes(t *testing.T) {
	testutil.NeedServices(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	busyUntil := time.Now().Add(400 * time.Millisecond)
	var closed atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"resource":"order:42","token":7,"term":1,"index":2,"leader":"n1"}`))
	})}
	go srv.Serve(&closingListener{Listener: ln, until: busyUntil, closed: &closed})
	defer srv.Close()
	c, err := NewClient([]string{"http://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tok, err := c.Next(context.Background(), "order:42")
	if err != nil || tok.Value != 7 || closed.Load() < 2 {
		t.Fatalf("Next against a node that closed %d connections for 400ms: %d, %v; want token 7 after retries", closed.Load(), tok.Value, err)
	}

	proxy503 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("<html>503 Service Temporarily Unavailable</html>"))
	}))
	defer proxy503.Close()
	p, err := NewClient([]string{proxy503.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := failDeadline(t, 700*time.Millisecond)
	if _, err := p.Next(ctx, "order:42"); ctx.Err() == nil || errors.Is(err, ErrNotTokenService) {
		t.Fatalf("Next behind a proxy answering 503: %v before the deadline; want retries until it", err)
	}
}

// closingListener closes every connection it accepts until a time, as a
// token node at its connection cap does, then hands them on.
type closingListener struct {
	net.Listener
	until  time.Time
	closed *atomic.Int32
}

func (l *closingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || time.Now().After(l.until) {
			return c, err
		}
		l.closed.Add(1)
		c.Close()
	}
}
