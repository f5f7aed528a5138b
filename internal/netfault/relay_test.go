package netfault

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// echoServer accepts connections on loopback and echoes each line.
func echoServer(t *testing.T) string {
	t.Helper()
	return testutil.Serve(t, func(c net.Conn) {
		defer c.Close()
		s := bufio.NewScanner(c)
		for s.Scan() {
			if _, err := c.Write(append(s.Bytes(), '\n')); err != nil {
				return
			}
		}
	})
}

func roundTrip(c net.Conn, msg string, timeout time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return line, err
}

func TestRelayCutHealResetDelay(t *testing.T) {
	r, err := NewRelay("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "a", 2*time.Second); err != nil || got != "a\n" {
		t.Fatalf("roundTrip(a) = %q, %v; want a", got, err)
	}

	r.Cut()
	if got, err := roundTrip(c, "b", 200*time.Millisecond); err == nil {
		t.Fatalf("roundTrip through a cut link = %q, want a timeout", got)
	}
	r.Heal()
	c2, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := roundTrip(c2, "c", 2*time.Second); err != nil || got != "c\n" {
		t.Fatalf("roundTrip(c) after heal = %q, %v", got, err)
	}

	r.SetDelay(50 * time.Millisecond)
	start := time.Now()
	if got, err := roundTrip(c2, "d", 2*time.Second); err != nil || got != "d\n" {
		t.Fatalf("roundTrip(d) = %q, %v", got, err)
	}
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Fatalf("delayed round trip took %v, want >= 100ms (two delayed hops)", el)
	}
	r.SetDelay(0)

	r.Reset()
	c2.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := bufio.NewReader(c2).ReadString('\n'); err == nil {
		t.Fatal("read after Reset succeeded, want closed connection")
	}
}
