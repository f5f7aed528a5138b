package tokenservice_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/internal/tokentest"
	"github.com/fencegate/fencegate/tokenservice"
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

// credentials makes bearer credentials: one per name, with the given roles,
// and the node-side file that accepts them.
func credentials(t testing.TB, roles map[string][]tokenservice.Role) (*tokenservice.Credentials, map[string]tokenservice.ClientCredential) {
	t.Helper()
	var lines []string
	out := map[string]tokenservice.ClientCredential{}
	for name, rs := range roles {
		c, err := tokenservice.NewClientCredential(name)
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
	ca := newCA(t, "cluster")
	creds, bearer := credentials(t, map[string][]tokenservice.Role{"app": {tokenservice.RoleClient}})
	c := tokentest.StartCluster(t, 3, tokentest.WithTLS(ca, creds))
	for _, u := range c.APIURLs() {
		if !strings.HasPrefix(u, "https://") {
			t.Fatalf("API URL %s is not https", u)
		}
	}
	certClient := c.Client(t, append(tokentest.ClientTLS(t, ca, "app-cert", tokenservice.RoleClient), tokenservice.WithFollowLeader(false))...)
	bearerClient := c.Client(t, append(tokentest.ClientTLS(t, ca, ""), tokenservice.WithCredential(bearer["app"]), tokenservice.WithFollowLeader(false))...)
	leader := c.Leader(t)
	follower := (leader + 1) % 3
	viaFollower := c.ClientFor(t, []string{c.APIURL(follower)}, append(tokentest.ClientTLS(t, ca, "app-cert", tokenservice.RoleClient), tokenservice.WithFollowLeader(false))...)
	var last int64
	for i, cl := range []*tokenservice.Client{certClient, bearerClient, viaFollower, certClient} {
		toks := mint(t, cl, 20)
		if toks[0] <= last {
			t.Fatalf("client %d: token %d not above %d", i, toks[0], last)
		}
		last = toks[len(toks)-1]
	}
	// A client without an identity is refused, and not retried.
	anon := c.Client(t, tokentest.ClientTLS(t, ca, "")...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := anon.NextToken(ctx, "orders/42")
	if !errors.Is(err, tokenservice.ErrUnauthenticated) || !strings.Contains(err.Error(), "needs role client") {
		t.Fatalf("anonymous NextToken: %v; want ErrUnauthenticated naming role client", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("anonymous NextToken took %v: a 401 must not be retried", time.Since(start))
	}
}
