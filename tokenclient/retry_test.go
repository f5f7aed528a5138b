package tokenclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenclient"
)

// TestRetryKeepsNodeAnswerOverDeadline: a node that answered "no quorum"
// and then did not answer before the caller's deadline is reported by its
// answer, not only by the deadline. (CI saw `token next --timeout 1s` say
// only "context deadline exceeded" on a loaded machine.)
func TestRetryKeepsNodeAnswerOverDeadline(t *testing.T) {
	testutil.NeedServices(t)
	var calls atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":"tokenservice: no quorum: node n2 cannot reach a quorum","code":"no_quorum"}`))
			return
		}
		select { // later attempts outlast the caller's deadline
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	c, err := tokenclient.NewClient([]string{srv.URL}, tokenclient.WithBackoff(time.Millisecond, time.Millisecond), tokenclient.WithCoalescing(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.NextToken(ctx, "orders/42")
	if err == nil {
		t.Fatal("NextToken succeeded against a node without quorum")
	}
	if calls.Load() < 2 {
		t.Fatalf("the client made %d attempts; the test needs a retry cut short by the deadline", calls.Load())
	}
	if !strings.Contains(err.Error(), "no quorum") || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Errorf("error %q should give both the node's answer (no quorum) and the deadline", err)
	}
}
