package tokenservice_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
	"github.com/fencegate/fencegate/tokensign"
	"github.com/jackc/pgx/v5/pgconn"
)

func signingKeys(t testing.TB, lines ...string) *tokensign.Keyring {
	t.Helper()
	r, err := tokensign.ParseKeys(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var (
	proofKeyOld = "old " + strings.Repeat("5a", 32)
	proofKeyNew = "new " + strings.Repeat("a5", 32)
)

func signedCluster(t testing.TB, keys *tokensign.Keyring, opts ...tokenservicetest.Option) *tokenservicetest.Cluster {
	t.Helper()
	return tokenservicetest.StartCluster(t, 3, append(opts, tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.SigningKeys = keys }))...)
}

func clusterID(t testing.TB, cl *tokenclient.Client) string {
	t.Helper()
	// The first leader records the cluster id just after its election.
	var id string
	testutil.WaitFor(t, 30*time.Second, "the cluster id", func() error {
		st, err := cl.Status(context.Background())
		if err != nil {
			return err
		}
		if st.ClusterID == "" {
			return errors.New("not recorded yet")
		}
		id = st.ClusterID
		return nil
	})
	return id
}

// TestProofsFromEveryNode: every token a signing cluster hands out, from
// the leader or a follower, alone or in a coalesced batch, carries a proof
// that verifies for its cluster, resource and token; a cluster without keys
// hands out none.
func TestProofsFromEveryNode(t *testing.T) {
	t.Parallel()
	keys := signingKeys(t, proofKeyNew, proofKeyOld)
	c := signedCluster(t, keys)
	cid := clusterID(t, c.Client(t))
	for i := range c.Len() {
		// A client pinned to one node: followers forward the allocation and
		// sign the answer themselves.
		cl := c.ClientFor(t, []string{c.APIURL(i)}, tokenclient.WithFollowLeader(false))
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		for w := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := fmt.Sprintf("orders/%d", w)
				tok, err := cl.Next(context.Background(), res)
				if err != nil {
					errs <- err
					return
				}
				if !strings.HasPrefix(tok.Proof, "new.") {
					errs <- fmt.Errorf("node %d: proof %q not under the first key", i, tok.Proof)
					return
				}
				if err := keys.Verify(cid, res, tok.Value, tok.Proof); err != nil {
					errs <- fmt.Errorf("node %d: %w", i, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	plain := tokenservicetest.StartCluster(t, 3)
	tok, err := plain.Client(t).Next(context.Background(), "x")
	if err != nil || tok.Proof != "" {
		t.Fatalf("unsigned cluster: %+v, %v", tok, err)
	}
}

// TestProofsInPostgres: tokens of a real signing cluster pass a database
// that requires them; a token minted for another resource, a token of
// another cluster with the same keys, and a token the service never minted
// are refused with FG008 and advance nothing; after a rotation on the
// database (new key first, old kept) old and new proofs pass.
func TestProofsInPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	oldKeys := signingKeys(t, proofKeyOld)
	c := signedCluster(t, oldKeys)
	cl := c.Client(t)
	cid := clusterID(t, cl)
	db := pgfencetest.New(t)
	admin := db.Admin(t)
	if _, err := pgfence.RequireSigned(ctx, admin, cid, oldKeys); err != nil {
		t.Fatal(err)
	}
	app := db.AppConn(t)
	fence := func(res string, tok tokenclient.Token) error {
		_, err := app.Exec(ctx, fencegate.FenceSignedSQL, res, tok.Value, tok.Proof)
		return err
	}
	a, err := cl.Next(ctx, "acct/a")
	if err != nil {
		t.Fatal(err)
	}
	if err := fence("acct/a", a); err != nil {
		t.Fatalf("a real token: %v", err)
	}
	mark := func(res string) int64 {
		var v int64
		if err := admin.QueryRow(ctx, "SELECT coalesce(max(token), 0) FROM fencegate.marks WHERE resource = $1", res).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	b, err := cl.Next(ctx, "acct/b")
	if err != nil {
		t.Fatal(err)
	}
	foreign := signedCluster(t, oldKeys)
	f, err := foreign.Client(t).Next(ctx, "acct/a")
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		name string
		tok  tokenclient.Token
	}{
		{"minted for another resource", b},
		{"another cluster's token", f},
		{"never minted", tokenclient.Token{Value: 1 << 62, Proof: a.Proof}},
	} {
		before := mark("acct/a")
		err := fence("acct/a", x.tok)
		if code := pgCode(err); code != fencegate.CodeBadProof {
			t.Errorf("%s: %v, want SQLSTATE %s", x.name, err, fencegate.CodeBadProof)
		}
		if after := mark("acct/a"); after != before {
			t.Errorf("%s: mark moved from %d to %d", x.name, before, after)
		}
	}
	// The two-argument fence is refused.
	if _, err := app.Exec(ctx, fencegate.FenceSQL, "acct/a", a.Value+1000); pgCode(err) != fencegate.CodeMisuse {
		t.Errorf("two-argument fence: %v", err)
	}
	// Rotation on the database first, then on the token service: tokens
	// signed by either key pass meanwhile.
	rotated := signingKeys(t, proofKeyNew, proofKeyOld)
	if _, err := pgfence.RequireSigned(ctx, admin, cid, rotated); err != nil {
		t.Fatal(err)
	}
	a2, err := cl.Next(ctx, "acct/a")
	if err != nil {
		t.Fatal(err)
	}
	if err := fence("acct/a", a2); err != nil {
		t.Fatalf("old key after rotation: %v", err)
	}
	a3 := tokenclient.Token{Value: a2.Value, Proof: rotated.Sign(cid, "acct/a", a2.Value)}
	if err := fence("acct/a", a3); err != nil {
		t.Fatalf("new key after rotation: %v", err)
	}
}

func pgCode(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code
	}
	return ""
}

// BenchmarkNextProof mints side by side on two 3-node clusters in this
// process, one signing and one not, alternating rounds of 2000 tokens with
// 64 concurrent callers. It reports the median over rounds of tokens/s and
// process CPU per token for each, and the signed/unsigned throughput ratio
// (goal: at least 0.95).
func BenchmarkNextProof(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	type side struct {
		name    string
		clients []*tokenclient.Client
		rate    []float64
		cpu     []float64
	}
	mk := func(name string, keys *tokensign.Keyring) *side {
		c := tokenservicetest.StartCluster(b, 3, tokenservicetest.WithLogger(quiet), tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.SigningKeys = keys }))
		s := &side{name: name}
		for i := range 3 {
			urls := c.APIURLs()
			s.clients = append(s.clients, c.ClientFor(b, append(urls[i:], urls[:i]...)))
		}
		return s
	}
	sides := []*side{mk("unsigned", nil), mk("signed", signingKeys(b, proofKeyNew))}
	const round, conc = 2000, 64
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		for _, s := range sides {
			next := make(chan struct{}, round)
			for range round {
				next <- struct{}{}
			}
			close(next)
			var wg sync.WaitGroup
			cpu0, t0 := cpuTime(), time.Now()
			for w := range conc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cl := s.clients[w%len(s.clients)]
					for range next {
						if _, err := cl.Next(context.Background(), "bench"); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			s.rate = append(s.rate, round/time.Since(t0).Seconds())
			s.cpu = append(s.cpu, float64((cpuTime()-cpu0).Microseconds())/round)
		}
	}
	b.StopTimer()
	med := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	for _, s := range sides {
		b.ReportMetric(med(s.rate), s.name+"-tokens/s")
		b.ReportMetric(med(s.cpu), s.name+"-cpu-us/token")
	}
	b.ReportMetric(med(sides[1].rate)/med(sides[0].rate), "throughput-signed/unsigned")
	b.ReportMetric(0, "ns/op")
}
