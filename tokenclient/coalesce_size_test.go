package tokenclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// Many valid names of 1 KiB at once, each of characters a JSON encoder
// writes as six bytes ("<" is \u003c), and names of control characters:
// every caller gets a token, whatever the others' names weigh. Before, the
// coalescer counted a name's bytes, not its encoded bytes: the batch went
// over the service's 64 KiB body limit and every caller in it got
// bad_request (59 of 60 failed).
func TestCoalescingSplitsByEncodedBytes(t *testing.T) {
	c := tokenservicetest.StartCluster(t, 3)
	var ct countingTransport
	cl := c.Client(t, tokenclient.WithHTTPClient(&http.Client{Transport: &ct}))
	tokenservicetest.Mint(t, cl, 1) // a leader is known
	const callers = 120
	names := make([]string, callers)
	for i := range names {
		fill := "<"
		if i%2 == 1 {
			fill = "\x01"
		}
		tag := fmt.Sprintf("%04d", i)
		names[i] = tag + strings.Repeat(fill, tokenapi.MaxResource-len(tag))
	}
	var wg sync.WaitGroup
	errs := make([]error, callers)
	toks := make([]int64, callers)
	start := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			<-start
			toks[i], errs[i] = cl.NextToken(context.Background(), names[i])
		})
	}
	close(start)
	wg.Wait()
	failed := 0
	seen := map[int64]bool{}
	for i, err := range errs {
		if err != nil {
			failed++
			if failed <= 3 {
				t.Errorf("caller %d: %v", i, err)
			}
			continue
		}
		if seen[toks[i]] {
			t.Errorf("token %d handed out twice", toks[i])
		}
		seen[toks[i]] = true
	}
	t.Logf("%d callers with 1 KiB names: %d failed, %d HTTP requests", callers, failed, ct.n.Load())
	if failed > 0 {
		t.Fatalf("%d of %d callers failed", failed, callers)
	}
}

// A server that refuses every batch as a whole with bad_request (a limit
// the client does not know) and refuses one name on its own: each caller of
// a refused batch is asked for alone and gets its token, and only the
// caller whose own request is refused gets bad_request, once.
func TestCoalescingBatchRefusalRetriedAlone(t *testing.T) {
	var mu sync.Mutex
	var next int64
	singles := map[string]int{}
	gate := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req tokenapi.TokenRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		if len(req.Resources) > 0 {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "batch too large for this server", "code": "bad_request"})
			return
		}
		<-gate // the first single request waits until every caller queued
		mu.Lock()
		singles[req.Resource]++
		next++
		n := next
		mu.Unlock()
		if req.Resource == "refused-alone" {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "not this one", "code": "bad_request"})
			return
		}
		_ = json.NewEncoder(w).Encode(tokenapi.TokenResponse{Resource: req.Resource, Token: n})
	}))
	defer srv.Close()
	cl, err := tokenclient.NewClient([]string{srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	names := []string{"first"}
	for i := range 20 {
		names = append(names, fmt.Sprintf("r%d", i))
	}
	names = append(names, "refused-alone")
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, n := range names {
		wg.Go(func() { _, errs[i] = cl.NextToken(context.Background(), n) })
		if i == 0 {
			time.Sleep(50 * time.Millisecond) // "first" is in flight; the rest queue behind it
		}
	}
	close(gate)
	wg.Wait()
	for i, n := range names {
		switch {
		case n == "refused-alone" && !errors.Is(errs[i], tokenapi.ErrBadRequest):
			t.Errorf("%s: %v; want bad_request", n, errs[i])
		case n != "refused-alone" && errs[i] != nil:
			t.Errorf("%s: %v", n, errs[i])
		}
		if singles[n] != 1 {
			t.Errorf("%s asked for alone %d times; want once", n, singles[n])
		}
	}
}
