package tokenservice_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// scrape returns the metrics of the node at url, by series as written.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d %v", resp.StatusCode, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// Every node serves Prometheus metrics: what it minted as leader and in how
// many entries of what size, the commit latency, what it forwarded as a
// follower, refusals by reason, leader changes, and Raft's indexes and term.
//
// On the commit path (one entry per batch); TestReadIndexStatusAndMetrics
// covers the read-index path.
func TestMetrics(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.CommitPerBatch = true }))
	leader := c.Leader(t)
	follower := (leader + 1) % 3
	toks := tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(follower)}, tokenclient.WithFollowLeader(false)), 20)
	tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(leader)}), 10)
	if resp, err := http.Post(c.APIURL(follower)+"/v1/tokens", "application/json", strings.NewReader(`{"resource":""}`)); err == nil {
		resp.Body.Close()
	}
	lm, fm := scrape(t, c.APIURL(leader)), scrape(t, c.APIURL(follower))
	for _, tc := range []struct {
		m      map[string]float64
		series string
		min    float64
	}{
		{lm, "fencegate_token_reserved_total", 30},
		{lm, "fencegate_token_entries_total", 1},
		{lm, "fencegate_token_entry_tokens_count", 1},
		{lm, "fencegate_token_commit_seconds_count", 1},
		{lm, "fencegate_token_handed_out_total", 10},
		{lm, "fencegate_token_raft_leader", 1},
		{lm, "fencegate_token_raft_term", 1},
		{lm, "fencegate_token_raft_last_index", 30},
		{lm, "fencegate_token_last_token", float64(toks[len(toks)-1])},
		{lm, "fencegate_token_leader_changes_total", 1},
		{fm, "fencegate_token_forwarded_total", 1},
		{fm, "fencegate_token_forwarded_tokens_sum", 20},
		{fm, "fencegate_token_handed_out_total", 20},
		{fm, `fencegate_token_refused_total{reason="bad_request"}`, 1},
		{fm, "fencegate_token_raft_commit_index", 30},
		{fm, "fencegate_token_leader_changes_total", 1},
	} {
		if got, ok := tc.m[tc.series]; !ok || got < tc.min {
			t.Errorf("%s = %v (present %v), want at least %v", tc.series, got, ok, tc.min)
		}
	}
	if fm["fencegate_token_raft_leader"] != 0 || fm["fencegate_token_reserved_total"] != 0 {
		t.Errorf("follower reports leading or reserving: %v %v", fm["fencegate_token_raft_leader"], fm["fencegate_token_reserved_total"])
	}
	// On the commit path every committed token is handed out.
	if lm["fencegate_token_reserved_total"] != 30 {
		t.Errorf("fencegate_token_reserved_total = %v on the commit path; want the 30 tokens handed out", lm["fencegate_token_reserved_total"])
	}
	checkDeprecatedMinted(t, c.APIURL(leader), lm)
}

// The batch limit holds on the follower's way to the leader while its
// forwarded calls wait on a slow link: every forwarded count is within the
// limit, so the leader never refuses one (it refuses above 1,048,576, and
// a node's limit may not exceed that).
func TestFollowerForwardsWithinBatchLimit(t *testing.T) {
	t.Parallel()
	const limit = 128 // a bucket bound of the histogram
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.MaxBatch = limit }))
	leader := c.Leader(t)
	follower := (leader + 1) % 3
	c.DelayAPI(follower, leader, 50*time.Millisecond)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	body := `{"resources":["a"` + strings.Repeat(`,"a"`, 59) + `]}`
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				// A retryable 503 (a slow forward, or an election, on a
				// loaded machine) is retried for up to 30 s, as a client
				// does; a 400 is the failure sought.
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
					resp, err := http.Post(c.APIURL(follower)+"/v1/tokens", "application/json", strings.NewReader(body))
					if err != nil {
						errs <- err
						return
					}
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						break
					}
					if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
						errs <- fmt.Errorf("batch of 60 through the follower: HTTP %d", resp.StatusCode)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fm := scrape(t, c.APIURL(follower))
	calls, within := fm["fencegate_token_forwarded_tokens_count"], fm[`fencegate_token_forwarded_tokens_bucket{le="128"}`]
	if calls == 0 || calls != within {
		t.Fatalf("%v forwarded calls, %v of them within 128 tokens; want all (limit %d)", calls, within, limit)
	}
	if got := scrape(t, c.APIURL(leader))[`fencegate_token_refused_total{reason="bad_request"}`]; got != 0 {
		t.Fatalf("the leader refused %v forwarded calls", got)
	}
	t.Logf("64x5 batches of 60 through a follower: %v forwarded calls, sum %v tokens", calls, fm["fencegate_token_forwarded_tokens_sum"])
	// A limit above what one forwarded call may carry is refused at start.
	cfgs := foundingConfigs(t, 1)
	cfgs[0].MaxBatch = 1<<20 + 1
	if _, err := tokenservice.Start(context.Background(), cfgs[0]); err == nil || !regexp.MustCompile(`batch limit \d+ is above 1048576`).MatchString(err.Error()) {
		t.Fatalf("MaxBatch above the forwarding limit: %v", err)
	}
}

// checkDeprecatedMinted checks that fencegate_token_minted_total, the old
// name of fencegate_token_reserved_total, is still served with the same
// value, so that dashboards keep working, and that its help says it is
// deprecated and what to use instead.
func checkDeprecatedMinted(t *testing.T, url string, m map[string]float64) {
	t.Helper()
	if old, ok := m["fencegate_token_minted_total"]; !ok || old != m["fencegate_token_reserved_total"] {
		t.Errorf("fencegate_token_minted_total = %v (present %v); want the value of fencegate_token_reserved_total, %v",
			old, ok, m["fencegate_token_reserved_total"])
	}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	help := regexp.MustCompile(`(?m)^# HELP fencegate_token_minted_total (.*)$`).FindSubmatch(b)
	if help == nil || !strings.HasPrefix(string(help[1]), "Deprecated: use fencegate_token_reserved_total") ||
		!strings.Contains(string(help[1]), "fencegate_token_handed_out_total") {
		t.Errorf("help of fencegate_token_minted_total = %q; want it deprecated, naming the reserved and handed-out metrics", help)
	}
}
