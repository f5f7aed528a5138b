package tokenservice_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// newCA makes a CA for one test.
func newCA(t testing.TB, name string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(name, pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// serverTLS is the TLS configuration of a server presenting a certificate
// of ca named name with role, for 127.0.0.1: an impostor's, in the tests
// that put one where a node should answer.
func serverTLS(t testing.TB, ca *pki.CA, name string, role tokenapi.Role) *tls.Config {
	t.Helper()
	leaf, err := ca.Issue(name, []string{string(role)}, []string{"127.0.0.1"}, pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{leaf.TLSCertificate()}}
}

// credentials makes bearer credentials: one per name, with the given roles,
// and the node-side file that accepts them.
func credentials(t testing.TB, roles map[string][]tokenapi.Role) (*tokenservice.Credentials, map[string]tokenclient.ClientCredential) {
	t.Helper()
	var lines []string
	out := map[string]tokenclient.ClientCredential{}
	for name, rs := range roles {
		c, err := tokenclient.NewClientCredential(name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = c
		lines = append(lines, c.ServerLine(rs...))
	}
	creds, err := tokenservice.ParseCredentials(strings.NewReader(strings.Join(lines, "\n")), "test")
	if err != nil {
		t.Fatal(err)
	}
	return creds, out
}

// A TLS cluster mints through every node, for a certificate client and a
// bearer client alike, and forwards from followers over mutual TLS.
func TestTLSClusterMints(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "cluster")
	creds, bearer := credentials(t, map[string][]tokenapi.Role{"app": {tokenapi.RoleClient}})
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithCA(ca, creds))
	for _, u := range c.APIURLs() {
		if !strings.HasPrefix(u, "https://") {
			t.Fatalf("API URL %s is not https", u)
		}
	}
	certClient := c.Client(t, append(tokenservicetest.ClientTLS(t, ca, "app-cert", tokenapi.RoleClient), tokenclient.WithFollowLeader(false))...)
	bearerClient := c.Client(t, append(tokenservicetest.ClientTLS(t, ca, ""), tokenclient.WithCredential(bearer["app"]), tokenclient.WithFollowLeader(false))...)
	leader := c.Leader(t)
	follower := (leader + 1) % 3
	viaFollower := c.ClientFor(t, []string{c.APIURL(follower)}, append(tokenservicetest.ClientTLS(t, ca, "app-cert", tokenapi.RoleClient), tokenclient.WithFollowLeader(false))...)
	var last int64
	for i, cl := range []*tokenclient.Client{certClient, bearerClient, viaFollower, certClient} {
		toks := tokenservicetest.Mint(t, cl, 20)
		if toks[0] <= last {
			t.Fatalf("client %d: token %d not above %d", i, toks[0], last)
		}
		last = toks[len(toks)-1]
	}
	// A client without an identity is refused, and not retried.
	anon := c.Client(t, tokenservicetest.ClientTLS(t, ca, "")...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := anon.NextToken(ctx, "orders/42")
	if !errors.Is(err, tokenapi.ErrUnauthenticated) || !strings.Contains(err.Error(), "needs role client") {
		t.Fatalf("anonymous NextToken: %v; want tokenapi.ErrUnauthenticated naming role client", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("anonymous NextToken took %v: a 401 must not be retried", time.Since(start))
	}
}

// A cluster founded without TLS and restarted with it keeps working: the
// member table still records http API addresses, and nodes and clients use
// https for them.
func TestPlainClusterRestartedWithTLS(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "cluster")
	var tlsOn atomic.Bool
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) {
		if !tlsOn.Load() {
			return
		}
		leaf, err := ca.Issue(cfg.ID, []string{string(tokenapi.RolePeer)}, []string{"127.0.0.1"}, pki.Options{})
		if err != nil {
			panic(err)
		}
		cfg.TLS = &tokenservice.NodeTLS{CA: ca.Pool(), Cert: leaf.TLSCertificate()}
	}))
	before := tokenservicetest.Mint(t, c.Client(t), 10)
	tlsOn.Store(true)
	for i := range 3 {
		c.Kill(i)
	}
	// At once: a node that holds state starts Raft only once a peer
	// answers it.
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); c.Restart(i) }()
	}
	wg.Wait()
	leader := c.Leader(t)
	for _, m := range c.Node(leader).LocalStatus().Members {
		t.Logf("member table: %s at %s", m.ID, m.APIAddr)
	}
	opts := tokenservicetest.ClientTLS(t, ca, "app", tokenapi.RoleClient)
	var urls []string
	for _, u := range c.APIURLs() {
		urls = append(urls, strings.Replace(u, "http://", "https://", 1))
	}
	follower := (leader + 1) % 3
	viaFollower := c.ClientFor(t, []string{urls[follower]}, append(opts, tokenclient.WithFollowLeader(false))...)
	after := tokenservicetest.Mint(t, viaFollower, 10)
	following := tokenservicetest.Mint(t, c.ClientFor(t, []string{urls[follower]}, opts...), 10)
	if after[0] <= before[len(before)-1] || following[0] <= after[len(after)-1] {
		t.Fatalf("tokens went back: before %v, through the follower %v, following the leader %v", before, after, following)
	}
}
