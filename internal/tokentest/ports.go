package tokentest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/freeport"
)

// StableAddr returns "127.0.0.1:PORT" for a free port outside the kernel's
// ephemeral range. A node that is killed and restarted must get its port
// back; a port from the ephemeral range (what listening on :0 gives) may
// meanwhile be taken as the local end of some outgoing connection, which
// makes the restart fail with "address in use". No port is handed out twice
// in one process: a port is only checked free, not held, so two nodes of one
// cluster could otherwise be given the same one before either listens. And
// each process draws from its own eighth of the range (by process id), so
// that test binaries running side by side rarely draw the same port either:
// a killed node's port is free until it restarts, and another process must
// not take it meanwhile.
func StableAddr(t testing.TB) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				low = v
			}
		}
	}
	const from = 10000
	if low-from < 1000 {
		t.Fatalf("ephemeral port range starts at %d; no room for stable test ports", low)
	}
	span := (low - from) / 8
	base := from + os.Getpid()%8*span
	for range 1000 {
		port := base + rand.IntN(span)
		if !freeport.Claim(port) {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		return addr
	}
	t.Fatalf("no free port between %d and %d", base, base+span)
	return ""
}
