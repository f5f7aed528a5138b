package main

import (
	"context"
	"net"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
)

func TestDialVia(t *testing.T) {
	testutil.NeedServices(t)
	if d, err := dialVia(""); d != nil || err != nil {
		t.Fatalf("dialVia(\"\") = %v, %v; want nil, nil", d != nil, err)
	}
	if _, err := dialVia("127.0.0.1:1"); err == nil {
		t.Fatal("dialVia without =VIA succeeded")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// 192.0.2.1 (TEST-NET-1) is unreachable: only the mapping gets there.
	dial, err := dialVia("192.0.2.1:7202=" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := dial(context.Background(), "tcp", "192.0.2.1:7202")
	if err != nil {
		t.Fatalf("dial through the mapping: %v", err)
	}
	c.Close()
}
