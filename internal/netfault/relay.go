// Package netfault is a TCP relay for fault injection in tests: put a Relay
// between two real endpoints on loopback, then cut, heal, reset or slow the
// link while the test runs.
//
// A cut link is a black hole, as a network partition is: bytes in flight and
// new bytes are dropped, new connections are accepted but carry nothing, and
// peers find out only through their own timeouts. Reset closes every
// connection instead, as a crashed peer's kernel would.
package netfault

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Relay forwards TCP connections from its listen address to a target address.
type Relay struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	cut   bool
	delay time.Duration
	conns map[net.Conn]struct{}
	done  bool
	wg    sync.WaitGroup
}

// NewRelay listens on listenAddr (use "127.0.0.1:0" for a free port) and
// forwards each accepted connection to target.
func NewRelay(listenAddr, target string) (*Relay, error) {
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, err
	}
	r := &Relay{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr returns the address clients should dial instead of the target.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Target returns the address the relay forwards to.
func (r *Relay) Target() string { return r.target }

// Cut turns the link into a black hole until Heal: nothing is forwarded in
// either direction, on existing or new connections.
func (r *Relay) Cut() {
	r.mu.Lock()
	r.cut = true
	r.mu.Unlock()
}

// Heal ends a Cut. Connections opened during the cut start forwarding too;
// bytes dropped during the cut stay lost (their senders must recover, as TCP
// users of a partitioned network do, by timing out and reconnecting).
func (r *Relay) Heal() {
	r.mu.Lock()
	r.cut = false
	r.mu.Unlock()
}

// Reset closes every open connection; new ones are still accepted.
func (r *Relay) Reset() {
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
}

// SetDelay makes every chunk of bytes wait d before it is forwarded, in both
// directions. Zero removes the delay.
func (r *Relay) SetDelay(d time.Duration) {
	r.mu.Lock()
	r.delay = d
	r.mu.Unlock()
}

// Close stops listening, closes every connection and waits for the relay's
// goroutines to end.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.done = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	err := r.ln.Close()
	r.wg.Wait()
	return err
}

func (r *Relay) state() (cut bool, delay time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cut, r.delay
}

func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		c.Close()
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		if !r.track(c) {
			return
		}
		r.wg.Add(1)
		go r.serve(c)
	}
}

func (r *Relay) serve(client net.Conn) {
	defer r.wg.Done()
	defer r.untrack(client)
	upstream, err := net.DialTimeout("tcp", r.target, 5*time.Second)
	if err != nil {
		return
	}
	if !r.track(upstream) {
		return
	}
	defer r.untrack(upstream)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.pipe(upstream, client) }()
	go func() { defer wg.Done(); r.pipe(client, upstream) }()
	wg.Wait()
}

// pipe copies src to dst chunk by chunk, dropping chunks while the link is
// cut and delaying them when a delay is set. It closes both ends when either
// fails, so the other direction ends too.
func (r *Relay) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			cut, delay := r.state()
			if delay > 0 {
				time.Sleep(delay)
				cut, _ = r.state()
			}
			if !cut {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}
