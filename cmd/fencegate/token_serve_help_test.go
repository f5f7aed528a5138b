package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"strings"
	"testing"
)

// --dial-via is the fault campaign's: token serve accepts it, but its help
// does not show it.
func TestTokenServeHidesDialVia(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"token", "serve", "--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("token serve --help: exit %d\n%s", code, stderr.String())
	}
	if out := stderr.String() + stdout.String(); strings.Contains(out, "dial-via") || !strings.Contains(out, "-data-dir") {
		t.Errorf("token serve --help shows --dial-via, or no flags:\n%s", out)
	}
	fs := flag.NewFlagSet("fencegate token serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := tokenServeFlags(fs)
	if err := fs.Parse([]string{"--dial-via", "127.0.0.1:7202=127.0.0.1:9202"}); err != nil || o.via != "127.0.0.1:7202=127.0.0.1:9202" {
		t.Errorf("--dial-via not accepted: %v, %q", err, o.via)
	}
}
