package netfault

import (
	"bytes"
	"io"
	"net"
	"net/url"
	"sync"
)

// CutPoint is where a PGCutter breaks the link it relays, relative to a trigger: a
// simple-query or Parse message from the client holding a word.
type CutPoint int

const (
	CutBefore      CutPoint = iota // the trigger is never forwarded
	CutAfterServer                 // forwarded; the server's answer is dropped
	CutAfterAnswer                 // forwarded and answered; then the link breaks
)

func (p CutPoint) String() string {
	return [...]string{"before COMMIT was sent", "after COMMIT reached the server", "after the answer"}[p]
}

// PGCutter is a TCP relay in front of a PostgreSQL server that, once armed,
// breaks the first connection whose client sends the trigger word, at the
// point asked for. It reads the client's stream as PostgreSQL frames, so
// the trigger is matched in a Query ('Q') or Parse ('P') message only.
type PGCutter struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	word   []byte
	point  CutPoint
	fired  chan struct{}
}

// NewPGCutter listens on a free loopback port and relays each connection
// to target (host:port of a PostgreSQL server, or of the gate). Close
// stops it.
func NewPGCutter(target string) (*PGCutter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &PGCutter{ln: ln, target: target}
	go c.accept()
	return c, nil
}

// Addr is the address to connect to instead of the target.
func (c *PGCutter) Addr() string { return c.ln.Addr().String() }

// Close stops accepting connections.
func (c *PGCutter) Close() error { return c.ln.Close() }

// DSN returns dsn with its host replaced by the cutter's address.
func (c *PGCutter) DSN(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	u.Host = c.Addr()
	return u.String(), nil
}

// Arm makes the next connection that sends word break at point.
// The channel returned is closed once the link was broken.
func (c *PGCutter) Arm(word string, point CutPoint) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.word, c.point, c.fired = bytes.ToLower([]byte(word)), point, make(chan struct{})
	return c.fired
}

// take returns the armed trigger if msg holds it, and disarms.
func (c *PGCutter) take(typ byte, msg []byte) (CutPoint, chan struct{}, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.word == nil || (typ != 'Q' && typ != 'P') || !bytes.Contains(bytes.ToLower(msg), c.word) {
		return 0, nil, false
	}
	c.word = nil
	return c.point, c.fired, true
}

func (c *PGCutter) accept() {
	for {
		cl, err := c.ln.Accept()
		if err != nil {
			return
		}
		go c.serve(cl)
	}
}

func (c *PGCutter) serve(cl net.Conn) {
	defer cl.Close()
	up, err := net.Dial("tcp", c.target)
	if err != nil {
		return
	}
	defer up.Close()
	var mu sync.Mutex
	mode := -1 // after a trigger: what to do with the server's answer
	var fired chan struct{}
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				mu.Lock()
				m := mode
				mu.Unlock()
				switch CutPoint(m) {
				case CutAfterServer:
					// The server answered: it committed. Nothing of the
					// answer reaches the client.
					cl.Close()
					up.Close()
					close(fired)
					return
				case CutAfterAnswer:
					cl.Write(buf[:n])
					if bytes.IndexByte(buf[:n], 'Z') >= 0 {
						cl.Close()
						up.Close()
						close(fired)
						return
					}
				default:
					if _, err := cl.Write(buf[:n]); err != nil {
						return
					}
				}
			}
			if err != nil {
				cl.Close()
				return
			}
		}
	}()
	// The client's side: the startup message (no type byte), then frames.
	var hdr [4]byte
	if _, err := io.ReadFull(cl, hdr[:]); err != nil {
		return
	}
	n := int(uint32(hdr[0])<<24 | uint32(hdr[1])<<16 | uint32(hdr[2])<<8 | uint32(hdr[3]))
	body := make([]byte, n-4)
	if _, err := io.ReadFull(cl, body); err != nil {
		return
	}
	if _, err := up.Write(append(hdr[:], body...)); err != nil {
		return
	}
	if n == 8 { // SSLRequest or GSSENCRequest: refused by the server, a startup follows
		return
	}
	for {
		var h [5]byte
		if _, err := io.ReadFull(cl, h[:]); err != nil {
			return
		}
		l := int(uint32(h[1])<<24 | uint32(h[2])<<16 | uint32(h[3])<<8 | uint32(h[4]))
		msg := make([]byte, l-4)
		if _, err := io.ReadFull(cl, msg); err != nil {
			return
		}
		if p, f, ok := c.take(h[0], msg); ok {
			if p == CutBefore {
				close(f)
				return
			}
			mu.Lock()
			mode, fired = int(p), f
			mu.Unlock()
		}
		if _, err := up.Write(append(h[:], msg...)); err != nil {
			return
		}
	}
}
