package devstack

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenclient"
)

func TestStartTokens(t *testing.T) {
	testutil.NeedServices(t)
	ctx := context.Background()
	toks, err := StartTokens(ctx, TokenOptions{DataDir: t.TempDir(), Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer toks.Close()
	c, err := tokenclient.NewClient(toks.URLs)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.NextToken(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.NextToken(ctx, "r")
	if err != nil || b <= a {
		t.Fatalf("NextToken after %d = %d, %v; want larger", a, b, err)
	}
}
