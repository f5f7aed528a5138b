package tokenservicetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// A test of a program that takes tokens: tokens keep rising while the
// leader is killed and restarted.
func TestStartCluster(t *testing.T) {
	c := tokenservicetest.StartCluster(t, 3)
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first, err := cl.NextToken(ctx, "orders/42")
	if err != nil {
		t.Fatal(err)
	}
	leader := c.Leader(t)
	c.Kill(leader)
	second, err := cl.NextToken(ctx, "orders/42")
	if err != nil {
		t.Fatal(err)
	}
	c.Restart(leader)
	third, err := cl.NextToken(ctx, "orders/42")
	if err != nil {
		t.Fatal(err)
	}
	if !(first < second && second < third) {
		t.Fatalf("tokens %d, %d, %d do not rise", first, second, third)
	}
	if c.Len() != 3 || len(c.APIURLs()) != 3 || c.Node(leader) == nil {
		t.Fatalf("cluster of %d nodes, %d URLs, node %d %v", c.Len(), len(c.APIURLs()), leader, c.Node(leader))
	}
}
