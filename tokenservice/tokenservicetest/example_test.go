package tokenservicetest_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// A test of a program that takes fencing tokens, as it reads in that
// program's own _test.go file: the tokens of a resource rise across the
// loss of the leader.
func Example() {
	TestOrders := func(t *testing.T) {
		c := tokenservicetest.StartCluster(t, 3)
		cl := c.Client(t)
		ctx := context.Background()
		before, err := cl.NextToken(ctx, "orders/42")
		if err != nil {
			t.Fatal(err)
		}
		c.Kill(c.Leader(t))
		after, err := cl.NextToken(ctx, "orders/42")
		if err != nil {
			t.Fatal(err)
		}
		if after <= before {
			t.Fatalf("token %d after %d", after, before)
		}
	}
	_ = TestOrders
}
