package tokenservice_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/tokentest"
)

func TestSmoke(t *testing.T) {
	c := tokentest.StartCluster(t, 3)
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var last int64
	for i := 0; i < 5; i++ {
		tok, err := cl.Next(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		if tok.Value <= last {
			t.Fatalf("token %d after %d", tok.Value, last)
		}
		last = tok.Value
		t.Logf("%+v", tok)
	}
	st, err := cl.Status(ctx)
	t.Logf("%+v %v", st, err)
}
