package main

import (
	"bytes"
	"context"
	"flag"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// token floor --age D prints the counter as it was at least D ago, alone
// on one line (with -v the checkpoint's time too), below every token taken
// after that; a missing or bad --age is a usage error.
func TestTokenFloor(t *testing.T) {
	defer raftstore.SetCheckpointIntervalForTest(50 * time.Millisecond)()
	// Small reservations: a checkpoint is recorded only with an entry that
	// moves the counter, and 5 tokens would otherwise come from one range.
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.ReserveSize = 2 }))
	servers := strings.Join(c.APIURLs(), ",")
	cl := c.Client(t)
	floorCmd := func(t *testing.T, code int, args ...string) (string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if got := run(context.Background(), append([]string{"token", "floor", "--servers", servers}, args...), &stdout, &stderr); got != code {
			t.Fatalf("%v: exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", args, got, code, stdout.String(), stderr.String())
		}
		return stdout.String(), stderr.String()
	}
	if out, _ := floorCmd(t, 0, "--age", "1h"); out != "0\n" {
		t.Fatalf("floor on a new cluster: %q, want 0", out)
	}
	var before []int64
	for range 5 {
		tok, err := cl.NextToken(context.Background(), "orders/42")
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, tok)
		time.Sleep(80 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	out, _ := floorCmd(t, 0, "--age", "200ms")
	floor, err := strconv.ParseInt(strings.TrimSuffix(out, "\n"), 10, 64)
	if err != nil || strings.Count(out, "\n") != 1 {
		t.Fatalf("floor printed %q; want one number on one line", out)
	}
	if floor <= before[0] {
		t.Fatalf("floor for 200ms = %d; want above %d, taken a second before", floor, before[0])
	}
	tok, err := cl.NextToken(context.Background(), "orders/42")
	if err != nil {
		t.Fatal(err)
	}
	if tok <= floor {
		t.Fatalf("token %d, taken after the floor was read, is not above it (%d)", tok, floor)
	}
	out, _ = floorCmd(t, 0, "--age", "0s", "-v")
	if fields := strings.Fields(out); len(fields) < 4 || !strings.Contains(out, "checkpoint of 20") || !strings.Contains(out, "answered by n") {
		t.Fatalf("floor -v printed %q; want the floor and the checkpoint's time", out)
	}
	if out, _ := floorCmd(t, 0, "--age", "30d"); out != "0\n" {
		t.Fatalf("floor for 30 days on a new cluster: %q, want 0", out)
	}
	for _, args := range [][]string{{}, {"--age", "-1m"}, {"--age", "soon"}, {"--age", "1h", "extra"}} {
		out, stderr := floorCmd(t, 2, args...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if out != "" || !strings.Contains(lines[len(lines)-1], "fencegate") {
			t.Errorf("%v: stdout %q, stderr %q; want a usage error", args, out, stderr)
		}
	}
}

// token floor takes the TLS and credential flags of the other token
// subcommands, explained the same way.
func TestTokenFloorSharesTLSFlags(t *testing.T) {
	a, b := flag.NewFlagSet("floor", flag.ContinueOnError), flag.NewFlagSet("status", flag.ContinueOnError)
	tokenFloorFlags(a)
	tokenStatusFlags(b)
	for _, f := range []string{"servers", "timeout", "tls-ca", "tls-cert", "tls-key", "credentials-file"} {
		fa, fb := a.Lookup(f), b.Lookup(f)
		if fa == nil || fb == nil || fa.Usage != fb.Usage {
			t.Errorf("--%s: floor %v, status %v", f, fa, fb)
		}
	}
}
