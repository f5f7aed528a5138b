package tokenservice_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// A leader cut off from its peers while a token request is in flight
// appends the request's entry and loses its leadership before committing
// it. The no_quorum answer must not say nothing was written: a later leader
// may commit that entry. (A node that knows no leader writes nothing, and
// says so.) On the read-index path the cut-off leader's confirmation round
// fails instead, and the answer says that no token was handed out.
func TestNoQuorumMessageAfterLeadershipLost(t *testing.T) {
	t.Parallel()
	t.Run("commit per batch", func(t *testing.T) { testNoQuorumMessage(t, true) })
	t.Run("read index", func(t *testing.T) { testNoQuorumMessage(t, false) })
}

func testNoQuorumMessage(t *testing.T, commitPerBatch bool) {
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.CommitPerBatch = commitPerBatch }))
	tokenservicetest.Mint(t, c.Client(t), 3)
	var msgs []string
	for attempt := 0; attempt < 5; attempt++ {
		leader := c.Leader(t)
		c.Cut(leader)
		// The request reaches the leader before its lease runs out (150ms).
		resp, err := http.Post(c.APIURL(leader)+"/v1/tokens", "application/json", strings.NewReader(`{"resource":"r"}`))
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error, Code string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		c.Heal(leader)
		if resp.StatusCode != http.StatusServiceUnavailable || e.Code != "no_quorum" {
			t.Fatalf("token request to a leader cut off = %d %+v; want 503 no_quorum", resp.StatusCode, e)
		}
		msgs = append(msgs, e.Error)
		if !commitPerBatch && strings.Contains(e.Error, "could not confirm") {
			if !strings.Contains(e.Error, "no token was handed out") {
				t.Fatalf("failed round answered %q; want it to say no token was handed out", e.Error)
			}
			t.Logf("leader cut off answers: %s", e.Error)
			return
		}
		if strings.Contains(e.Error, "lost its leadership") {
			if !strings.Contains(e.Error, "may still be committed") || strings.Contains(e.Error, "no entry was written") {
				t.Fatalf("leadership lost mid-commit answered %q; want it to say the entry may still commit", e.Error)
			}
			t.Logf("leader cut off mid-commit answers: %s", e.Error)
			return
		}
		if !strings.Contains(e.Error, "no entry was written") {
			t.Fatalf("no_quorum answer %q says neither that no entry was written nor that one may commit", e.Error)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the cut-off leader never answered with its leadership lost mid-commit; answers: %q", msgs)
}
