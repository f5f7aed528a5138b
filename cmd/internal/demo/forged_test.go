package demo

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/jackc/pgx/v5"
)

// The verdicts come from the SQLSTATEs PostgreSQL returned and the marks
// read back from fencegate.marks, not from printed text.
func TestForgedToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr, _ := testutil.Redis(t)
	pic := filepath.Join(t.TempDir(), "forged.svg")
	var out strings.Builder
	res, err := ForgedToken(ctx, ForgedConfig{
		Postgres: testutil.PostgresAdminDSN(),
		Redis:    addr,
		Picture:  pic,
		Out:      &out,
		Logger:   testutil.Logger(t),
	})
	t.Log(out.String())
	if err != nil {
		t.Fatalf("ForgedToken: %v", err)
	}
	checkSVG(t, pic)
	if res.ClusterID == "" || res.OtherClusterID == "" || res.ClusterID == res.OtherClusterID {
		t.Errorf("cluster ids %q and %q; want two different ones", res.ClusterID, res.OtherClusterID)
	}
	if len(res.Attempts) != 6 {
		t.Fatalf("%d attempts, want 6: %+v", len(res.Attempts), res.Attempts)
	}
	want := []struct {
		who   string
		legit bool
		state string
	}{{"holder", true, ""}, {"attacker", false, fencegate.CodeBadProof}, {"attacker", false, fencegate.CodeBadProof}, {"attacker", false, fencegate.CodeBadProof},
		{"attacker", false, fencegate.CodeMisuse}, {"holder", true, ""}}
	for i, w := range want {
		a := res.Attempts[i]
		if a.Who != w.who || a.Legitimate != w.legit {
			t.Errorf("attempt %d = %s legit=%v, want %s legit=%v", i+1, a.Who, a.Legitimate, w.who, w.legit)
		}
		if w.legit {
			if !a.OK || a.MarkAfter != a.Token || a.Proof == "" {
				t.Errorf("attempt %d (%s): %+v; want committed with a proof, mark at its token", i+1, a.What, a)
			}
			continue
		}
		if a.OK || a.SQLState != w.state {
			t.Errorf("attempt %d (%s): ok=%v SQLSTATE %q, want refused with %s", i+1, a.What, a.OK, a.SQLState, w.state)
		}
		if a.MarkAfter != a.MarkBefore || a.MarkAfter != res.Attempts[0].Token {
			t.Errorf("attempt %d (%s): mark %d -> %d; want it left at the holder's token %d", i+1, a.What, a.MarkBefore, a.MarkAfter, res.Attempts[0].Token)
		}
		// Each forged token is above the mark: only the proof (or its
		// absence) can refuse it, not the stale-token check.
		if a.Token <= a.MarkBefore {
			t.Errorf("attempt %d (%s): token %d not above the mark %d; the refusal would prove nothing", i+1, a.What, a.Token, a.MarkBefore)
		}
	}
	if a := res.Attempts[1]; a.Token != math.MaxInt64 {
		t.Errorf("the forged token is %d, want the largest bigint", a.Token)
	}
	if res.Attempts[5].Token <= res.Attempts[0].Token {
		t.Errorf("the holder's second token %d is not above its first %d", res.Attempts[5].Token, res.Attempts[0].Token)
	}
	if res.Charges != 1 || res.OrderState != "shipped" {
		t.Errorf("order 42: %d charges, state %q; want 1 charge, shipped", res.Charges, res.OrderState)
	}
	if !res.Refused() {
		t.Errorf("Refused() = false for %+v", res.Attempts)
	}
	if !strings.Contains(out.String(), "Verdict: every forged") {
		t.Errorf("no verdict line in the output")
	}

	// Nothing left behind: the database and both roles are gone.
	conn, err := pgx.Connect(ctx, testutil.PostgresAdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var dbs, roles int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", res.Database).Scan(&dbs); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_roles WHERE rolname = ANY($1)", res.Roles).Scan(&roles); err != nil {
		t.Fatal(err)
	}
	if dbs != 0 || roles != 0 || len(res.Roles) != 2 || res.Database == "" {
		t.Errorf("left behind: %d database(s) named %q, %d of roles %q", dbs, res.Database, roles, res.Roles)
	}
}

// The verdict fails on any single attempt that went wrong, without servers.
func TestForgedVerdict(t *testing.T) {
	good := func() *ForgedResult {
		return &ForgedResult{Charges: 1, OrderState: "shipped", Attempts: []Attempt{
			{Who: "holder", Legitimate: true, Token: 1, Proof: "k.1", OK: true, MarkBefore: 0, MarkAfter: 1},
			{Who: "attacker", Token: math.MaxInt64, Proof: "k.2", SQLState: fencegate.CodeBadProof, MarkBefore: 1, MarkAfter: 1},
			{Who: "attacker", Token: 2, Proof: "k.3", SQLState: fencegate.CodeBadProof, MarkBefore: 1, MarkAfter: 1},
			{Who: "attacker", Token: 1003, Proof: "k.4", SQLState: fencegate.CodeBadProof, MarkBefore: 1, MarkAfter: 1},
			{Who: "attacker", Token: math.MaxInt64, SQLState: fencegate.CodeMisuse, MarkBefore: 1, MarkAfter: 1},
			{Who: "holder", Legitimate: true, Token: 3, Proof: "k.5", OK: true, MarkBefore: 1, MarkAfter: 3},
		}}
	}
	if r := good(); !r.Refused() {
		t.Fatalf("Refused() = false for a good run %+v", r.Attempts)
	}
	for name, spoil := range map[string]func(*ForgedResult){
		"forged token committed":          func(r *ForgedResult) { r.Attempts[1].OK, r.Attempts[1].SQLState = true, "" },
		"mark moved by a refused fence":   func(r *ForgedResult) { r.Attempts[2].MarkAfter = 2 },
		"bad proof refused as stale":      func(r *ForgedResult) { r.Attempts[3].SQLState = fencegate.CodeStaleToken },
		"no-proof fence refused as FG008": func(r *ForgedResult) { r.Attempts[4].SQLState = fencegate.CodeBadProof },
		"holder's second write failed":    func(r *ForgedResult) { r.Attempts[5].OK, r.Attempts[5].SQLState = false, fencegate.CodeStaleToken },
		"holder's write left the mark":    func(r *ForgedResult) { r.Attempts[0].MarkAfter = 0 },
		"an attempt missing":              func(r *ForgedResult) { r.Attempts = r.Attempts[:5] },
		"order charged twice":             func(r *ForgedResult) { r.Charges = 2 },
		"order not shipped":               func(r *ForgedResult) { r.OrderState = "refunded" },
	} {
		r := good()
		spoil(r)
		if r.Refused() {
			t.Errorf("%s: Refused() = true", name)
		}
	}
}
