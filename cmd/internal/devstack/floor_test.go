package devstack_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/devstack"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// A token cluster newer than the database's marks (dev --reset, a cluster
// rebuilt from nothing) is raised above the highest mark, so that its first
// token fences; a second call changes nothing.
func TestRaiseAboveMarks(t *testing.T) {
	db := pgfencetest.New(t)
	db.Exec(t, "SELECT fencegate.fence('order:42', 100000000)")
	db.Exec(t, "SELECT fencegate.fence('order:7', 12)")
	c := tokenservicetest.StartCluster(t, 3)

	f, err := devstack.RaiseAboveMarks(context.Background(), db.DSN, c.APIURLs())
	if err != nil {
		t.Fatal(err)
	}
	if f.Highest != 100000000 || !f.Raised() || f.After < 100000000 {
		t.Fatalf("floor %+v: want the highest mark 100000000 (above any range the new leader reserved) and the counter raised to it", f)
	}
	t.Log(f)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok, err := c.Client(t).Next(ctx, "order:42")
	if err != nil {
		t.Fatal(err)
	}
	conn := db.Admin(t)
	if _, err := conn.Exec(ctx, "SELECT fencegate.fence('order:42', $1)", tok.Value); err != nil {
		t.Fatalf("fence with the first token after the raise (%d): %v", tok.Value, err)
	}
	again, err := devstack.RaiseAboveMarks(context.Background(), db.DSN, c.APIURLs())
	if err != nil || again.Raised() {
		t.Fatalf("second raise: %+v, %v; want nothing raised", again, err)
	}
}
