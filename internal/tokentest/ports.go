package tokentest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// StableAddr returns "127.0.0.1:PORT" for a free port outside the kernel's
// ephemeral range. A node that is killed and restarted must get its port
// back; a port from the ephemeral range (what listening on :0 gives) may
// meanwhile be taken as the local end of some outgoing connection, which
// makes the restart fail with "address in use".
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
	for range 1000 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(from+rand.IntN(low-from)))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		return addr
	}
	t.Fatalf("no free port between %d and %d", from, low)
	return ""
}
