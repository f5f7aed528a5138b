package proxy

import (
	"log/slog"
	"net"
	"testing"
)

// TestCancelKeys: the client's key is the upstream's process ID and a
// secret of the proxy's, as long as the upstream's; a CancelRequest finds
// a session only with both, and two sessions that share a process ID (the
// server reused it while the proxy still wound down the first) stay apart.
func TestCancelKeys(t *testing.T) {
	p, err := New(Config{Upstream: "127.0.0.1:1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := net.Pipe()
	s1, s2, s3 := newSession(p, a), newSession(p, a), newSession(p, a)
	s1.upPID, s1.upSecret = 7, []byte{1, 2, 3, 4}
	s2.upPID, s2.upSecret = 7, []byte{5, 6, 7, 8}
	s3.upPID, s3.upSecret = 9, make([]byte, 32) // protocol 3.2: longer secrets
	for _, s := range []*session{s1, s2, s3} {
		p.registerKey(s)
		if len(s.secret) != len(s.upSecret) || string(s.secret) == string(s.upSecret) {
			t.Fatalf("client secret %x for upstream secret %x", s.secret, s.upSecret)
		}
	}
	for _, c := range []struct {
		pid    uint32
		secret []byte
		want   *session
	}{
		{7, s1.secret, s1}, {7, s2.secret, s2}, {9, s3.secret, s3},
		{7, s1.upSecret, nil}, {9, s1.secret, nil}, {7, s1.secret[:3], nil}, {8, s1.secret, nil},
	} {
		if got := p.sessionByKey(c.pid, c.secret); got != c.want {
			t.Errorf("sessionByKey(%d, %x) = %p, want %p", c.pid, c.secret, got, c.want)
		}
	}
	p.mu.Lock()
	p.removeKey(s1)
	p.mu.Unlock()
	if p.sessionByKey(7, s1.secret) != nil || p.sessionByKey(7, s2.secret) != s2 {
		t.Fatal("removing one session of a process ID lost the other or kept it")
	}
	p.mu.Lock()
	p.removeKey(s2)
	_, left := p.keys[7]
	p.mu.Unlock()
	if left {
		t.Fatal("an empty entry stays behind")
	}
}
