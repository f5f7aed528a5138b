package lockclient

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// Where a cutter breaks the link it relays, relative to a trigger: a
// simple-query or Parse message from the client holding a word.
type cutPoint int

const (
	cutBefore      cutPoint = iota // the trigger is never forwarded
	cutAfterServer                 // forwarded; the server's answer is dropped
	cutAfterAnswer                 // forwarded and answered; then the link breaks
)

func (p cutPoint) String() string {
	return [...]string{"before COMMIT was sent", "after COMMIT reached the server", "after the answer"}[p]
}

// cutter is a TCP relay in front of a PostgreSQL server that, once armed,
// breaks the first connection whose client sends the trigger word, at the
// point asked for. It reads the client's stream as PostgreSQL frames, so
// the trigger is matched in a Query ('Q') or Parse ('P') message only.
type cutter struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	word   []byte
	point  cutPoint
	fired  chan struct{}
}

func newCutter(t *testing.T, dsn string) (*cutter, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{ln: ln, target: u.Host}
	t.Cleanup(func() { ln.Close() })
	go c.accept()
	u.Host = ln.Addr().String()
	return c, u.String()
}

// arm makes the next connection that sends word break at point.
func (c *cutter) arm(word string, point cutPoint) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.word, c.point, c.fired = bytes.ToLower([]byte(word)), point, make(chan struct{})
	return c.fired
}

// take returns the armed trigger if msg holds it, and disarms.
func (c *cutter) take(typ byte, msg []byte) (cutPoint, chan struct{}, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.word == nil || (typ != 'Q' && typ != 'P') || !bytes.Contains(bytes.ToLower(msg), c.word) {
		return 0, nil, false
	}
	c.word = nil
	return c.point, c.fired, true
}

func (c *cutter) accept() {
	for {
		cl, err := c.ln.Accept()
		if err != nil {
			return
		}
		go c.serve(cl)
	}
}

func (c *cutter) serve(cl net.Conn) {
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
				switch cutPoint(m) {
				case cutAfterServer:
					// The server answered: it committed. Nothing of the
					// answer reaches the client.
					cl.Close()
					up.Close()
					close(fired)
					return
				case cutAfterAnswer:
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
			if p == cutBefore {
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

// testCommitOutcome cuts the link at each point around COMMIT, straight to
// PostgreSQL and between the gate and PostgreSQL, and checks InTx's verdict
// against the row: a link cut before COMMIT was sent is a plain failure
// (nothing committed); after COMMIT reached the server it is
// ErrCommitUnknown (it committed) — through the gate too, where the gate
// answers the in-flight COMMIT with its own FATAL 08006, which InTx took
// for PostgreSQL's answer and reported as a plain failure before; after the
// answer InTx returns nil.
func testCommitOutcome(t *testing.T, cluster *tokenservicetest.Cluster) {
	f := fencedDB(t)
	tr := sharedRedis(t)
	c := tr.client(t, cluster.Client(t))
	straight, straightDSN := newCutter(t, f.app)
	gateCut, gateUpDSN := newCutter(t, f.app)
	gateDSN := proxytest.Start(t, gateUpDSN)
	n := 0
	for _, path := range []struct {
		name string
		cut  *cutter
		dsn  string
	}{{"straight", straight, straightDSN}, {"through the gate", gateCut, gateDSN}} {
		for _, point := range []cutPoint{cutBefore, cutAfterServer, cutAfterAnswer} {
			t.Run(fmt.Sprintf("%s, %s", path.name, point), func(t *testing.T) {
				n++
				db := connect(t, path.dsn)
				l := mustAcquire(t, c, fmt.Sprintf("outcome-%d-%s", n, testutil.RandomName("")))
				defer l.Release(ctxT(t))
				word := "commit"
				if point == cutBefore {
					word = "insert into ledger"
				}
				fired := path.cut.arm(word, point)
				err := l.InTx(l.Context(), db, insertAs("w", l))
				<-fired
				landed := hasRow(t, f.direct, "w", l.Token())
				t.Logf("InTx: %v; row committed: %v", err, landed)
				switch point {
				case cutBefore:
					if err == nil || errors.Is(err, ErrCommitUnknown) || landed {
						t.Fatalf("InTx = %v, committed %v; want a plain failure and no row", err, landed)
					}
				case cutAfterServer:
					if !errors.Is(err, ErrCommitUnknown) || !landed {
						t.Fatalf("InTx = %v, committed %v; want ErrCommitUnknown and the row", err, landed)
					}
				case cutAfterAnswer:
					if err != nil || !landed {
						t.Fatalf("InTx = %v, committed %v; want nil and the row", err, landed)
					}
				}
			})
		}
	}
}
