package lockclient

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenclient"
)

// silentServer accepts TCP connections and never answers on them.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(done)
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// With the default options and a context without deadline, Acquire gives
// up within the token timeout (5s) when the token server accepts TCP and
// never answers, and at once when the address is not a token service at
// all (a web page): the real tokenclient, not a stub.
func TestAcquireGivesUpOnSilentOrWrongTokenServer(t *testing.T) {
	tr := sharedRedis(t)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte("<html>not here</html>"))
	}))
	defer page.Close()
	for _, tc := range []struct {
		name  string
		url   string
		limit time.Duration
		is    error
	}{
		{"silent", silentServer(t), 7 * time.Second, ErrTokenUnavailable},
		{"web page", page.URL, 2 * time.Second, tokenclient.ErrNotTokenService},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tokens, err := tokenclient.NewClient([]string{tc.url}, tokenclient.WithLogger(testutil.Logger(t)))
			if err != nil {
				t.Fatal(err)
			}
			defer tokens.Close()
			c := tr.client(t, tokens)
			start := time.Now()
			err = acquireWithin(t, context.Background(), c, "giveup-"+tc.name)
			took := time.Since(start)
			t.Logf("after %v: %v", took.Round(time.Millisecond), err)
			if !errors.Is(err, ErrTokenUnavailable) || !errors.Is(err, tc.is) {
				t.Fatalf("Acquire: %v; want ErrTokenUnavailable and %v", err, tc.is)
			}
			if took > tc.limit {
				t.Fatalf("Acquire took %v; want at most %v", took, tc.limit)
			}
			if v := tr.values(t, "giveup-"+tc.name); v[0] != "" {
				t.Fatalf("lock key left behind: %q", v)
			}
		})
	}
}
