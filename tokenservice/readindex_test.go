package tokenservice_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// On the read-index path (the default) the leader's status shows the range
// it hands tokens out of and its rounds, `fencegate token status` prints
// them, and its metrics count rounds and reservations; a follower holds no
// range. No round may fail: the round timeout is raised from 1 s to 30 s so
// that a loaded machine (this suite runs beside others) cannot fail one
// that a healthy cluster would not.
func TestReadIndexStatusAndMetrics(t *testing.T) {
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) {
		cfg.RoundTimeout = 30 * time.Second
	}))
	leader := c.Leader(t)
	follower := (leader + 1) % 3
	toks := tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(follower)}, tokenclient.WithFollowLeader(false)), 20)
	tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(leader)}), 10)

	st := c.Node(leader).LocalStatus()
	ri := st.ReadIndex
	if ri == nil || ri.Range == nil || ri.Rounds < 1 || ri.Reservations < 1 {
		t.Fatalf("leader's read-index status = %+v", ri)
	}
	if ri.Range.Next <= toks[len(toks)-1] || ri.Range.Last != st.LastToken || ri.Range.Term != st.Term {
		t.Fatalf("leader's range %+v: want it above the tokens handed out (%d), up to the counter %d, in term %d",
			ri.Range, toks[len(toks)-1], st.LastToken, st.Term)
	}
	if fs := c.Node(follower).LocalStatus().ReadIndex; fs == nil || fs.Range != nil {
		t.Fatalf("follower's read-index status = %+v; want no range", fs)
	}

	lm := scrape(t, c.APIURL(leader))
	for series, min := range map[string]float64{
		"fencegate_token_rounds_total":        1,
		"fencegate_token_reservations_total":  1,
		"fencegate_token_reserved_left":       1,
		"fencegate_token_round_seconds_total": 0,
		"fencegate_token_reserved_total":      30,
		"fencegate_token_handed_out_total":    10,
	} {
		if got, ok := lm[series]; !ok || got < min {
			t.Errorf("%s = %v (present %v), want at least %v", series, got, ok, min)
		}
	}
	// The leader reserves whole ranges: the counter advanced further than
	// the 30 tokens handed out, by the range still left.
	if lm["fencegate_token_reserved_total"] < 30+lm["fencegate_token_reserved_left"] {
		t.Errorf("fencegate_token_reserved_total = %v; want at least the 30 tokens handed out plus the %v left in the range",
			lm["fencegate_token_reserved_total"], lm["fencegate_token_reserved_left"])
	}
	checkDeprecatedMinted(t, c.APIURL(leader), lm)
	if got, ok := lm["fencegate_token_round_failures_total"]; !ok || got != 0 {
		t.Errorf("fencegate_token_round_failures_total = %v (present %v), want 0", got, ok)
	}
	// A late answer (a loaded machine) may make a round hedge.
	if got, ok := lm["fencegate_token_round_hedges_total"]; !ok || got > lm["fencegate_token_rounds_total"] {
		t.Errorf("fencegate_token_round_hedges_total = %v (present %v), want at most the %v rounds", got, ok, lm["fencegate_token_rounds_total"])
	}

	code, stdout, stderr := runCLI(t, "token", "status", "--servers", c.APIURL(follower))
	if code != 0 || !strings.Contains(stdout, "tokens: read-index; range in use") || !strings.Contains(stdout, "rounds/s") {
		t.Fatalf("token status: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("token status:\n%s", stdout)
}

// The read-index settings refuse bad values with one line naming the flag.
func TestReadIndexFlagsBadInput(t *testing.T) {
	for _, tc := range []struct {
		flag, value string
	}{
		{"--reserve-size", "0"},
		{"--reserve-size", "2000000000"},
		{"--round-timeout", "0s"},
	} {
		code, stdout, stderr := runCLI(t, "token", "serve", "--id", "n1", "--data-dir", t.TempDir(), tc.flag, tc.value)
		if code != 2 || stdout != "" {
			t.Errorf("token serve %s %s: exit %d, stdout %q; want a usage error", tc.flag, tc.value, code, stdout)
		}
		oneLine(t, stderr, tc.flag)
	}
}
