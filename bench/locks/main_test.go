package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// TestBenchSmoke runs the whole comparison briefly (one run, tiny windows)
// against real Redis servers and a real token cluster, and checks that the
// table lists every implementation at every concurrency.
func TestBenchSmoke(t *testing.T) {
	testutil.NeedServices(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errs bytes.Buffer
	err := run(ctx, []string{"-runs", "1", "-duration", "200ms", "-c", "1,4", "-masters", "3",
		"-redis", testutil.RedisAddr()}, &out, &errs)
	t.Log(errs.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	table := out.String()
	for _, want := range []string{"bsm/redislock (1 node)", "lockclient 1 node, no token", "redsync (3 masters)",
		"lockclient Redlock 3, no token", "lockclient 1 node + token", "lockclient Redlock 3 + token"} {
		if got := strings.Count(table, want); got != 2 {
			t.Fatalf("%q appears %d times in the table, want 2 (c=1 and c=4):\n%s", want, got, table)
		}
	}
	if strings.Contains(errs.String(), "first error") {
		t.Fatalf("cycles failed:\n%s", errs.String())
	}
}

func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{{"-c", "1,x"}, {"-c", "0"}, {"-runs", "0"}, {"-nope"}} {
		var out, errs bytes.Buffer
		if err := run(context.Background(), args, &out, &errs); err == nil {
			t.Fatalf("run(%q) succeeded, want an error", args)
		}
	}
}
