package netns_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/netns"
)

// New wires hosts that reach each other; Cut drops packets between two of
// them only, Heal restores them; Close leaves nothing behind.
func TestNetCutHealClose(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespaces: not in -short")
	}
	n, err := netns.New("a", "b", "c")
	if err != nil {
		t.Fatalf("create network (the test runs as root with ip and nft installed): %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			n.Close()
		}
	})
	a, b, c := n.Host("a"), n.Host("b"), n.Host("c")
	ln, err := n.Listen(b, b.IP+":7000")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte("hi"))
			conn.Close()
		}
	}()
	reach := func(from *netns.Host) error {
		dial, err := n.Dialer(from)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		conn, err := dial(ctx, "tcp", b.IP+":7000")
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 2)
		_, err = conn.Read(buf)
		return err
	}
	if err := reach(a); err != nil {
		t.Fatalf("a cannot reach b: %v", err)
	}
	// Nothing of the network is in the test's own namespace.
	if out, _ := exec.Command("ip", "-o", "addr", "show").Output(); strings.Contains(string(out), b.IP) {
		t.Fatalf("the test's namespace has the network's address %s:\n%s", b.IP, out)
	}
	if err := n.Cut(a, b); err != nil {
		t.Fatal(err)
	}
	if err := reach(a); err == nil {
		t.Fatal("a reaches b after Cut(a, b)")
	}
	if err := reach(c); err != nil {
		t.Fatalf("c cannot reach b after Cut(a, b): %v", err)
	}
	if rules, _ := n.Rules(a); !strings.Contains(rules, "drop") {
		t.Fatalf("a's ruleset has no drop rule:\n%s", rules)
	}
	if err := n.Heal(a); err != nil {
		t.Fatal(err)
	}
	if err := reach(a); err != nil {
		t.Fatalf("a cannot reach b after Heal: %v", err)
	}
	prefix := n.Prefix()
	closed = true
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if left, err := netns.Leftovers(prefix); err != nil || len(left) > 0 {
		t.Fatalf("left behind: %v %v", left, err)
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), prefix) {
		t.Fatalf("ip netns list still shows %s:\n%s", prefix, out)
	}
}
