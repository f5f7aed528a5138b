package proxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// memConn is a net.Conn that reads from a fixed input and records writes.
type memConn struct {
	r io.Reader
	w bytes.Buffer
}

func (c *memConn) Read(b []byte) (int, error)         { return c.r.Read(b) }
func (c *memConn) Write(b []byte) (int, error)        { return c.w.Write(b) }
func (c *memConn) Close() error                       { return nil }
func (c *memConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c *memConn) SetDeadline(t time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(t time.Time) error { return nil }

// memSession is a session past startup whose client and upstream are in
// memory.
func memSession(t testing.TB, client, upstream []byte) (*session, *memConn, *memConn) {
	p, err := New(Config{Upstream: "127.0.0.1:1", Logger: slog.New(slog.DiscardHandler), MaxMessageSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	cc := &memConn{r: bytes.NewReader(client)}
	uc := &memConn{r: bytes.NewReader(upstream)}
	s := newSession(p, cc)
	s.up = uc
	s.cw, s.cf, _ = newBuffered(cc, p.cfg.MaxMessageSize)
	s.uw, s.uf, _ = newBuffered(uc, 1<<30)
	s.status.Store('I')
	s.front.init()
	return s, cc, uc
}

// checkFrames fails unless b is a sequence of whole typed messages.
func checkFrames(t *testing.T, b []byte) {
	t.Helper()
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("trailing partial header % x", b)
		}
		n := int(int32(binary.BigEndian.Uint32(b[1:5])))
		if n+1 > len(b) && n+1 > bufSize {
			return // a large message streamed through when the input ended
		}
		if n < 4 || n+1 > len(b) {
			t.Fatalf("frame type %q length %d with %d bytes left", b[0], n, len(b))
		}
		b = b[1+n:]
	}
}

func frame(typ byte, body string) []byte { return appendMsg(nil, typ, []byte(body)) }

func frontendSeeds() [][]byte {
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	return [][]byte{
		frame('Q', "SELECT 1\x00"),
		frame('Q', "BEGIN; SELECT fencegate.fence('order:42', 34); UPDATE orders SET state = 'paid'; COMMIT;\x00"),
		frame('Q', "SELECT fencegate.fence('r', 1)\x00"),
		frame('Q', "SET default_transaction_read_only = off\x00"),
		cat(frame('P', "s1\x00SELECT fencegate.fence($1, $2)\x00\x00\x00"), frame('D', "Ss1\x00"), frame('S', "")),
		cat(frame('B', "\x00s1\x00\x00\x00\x00\x02\x00\x00\x00\x01r\x00\x00\x00\x011\x00\x00"), frame('E', "\x00\x00\x00\x00\x00"), frame('S', "")),
		cat(frame('C', "Ss1\x00"), frame('H', ""), frame('X', "")),
		cat(frame('d', "1\t2\n"), frame('c', ""), frame('f', "oops\x00")),
		{'Q', 0xff, 0xff, 0xff, 0xff},
		{0, 0, 0, 8, 4, 0xd2, 0x16, 0x2f},
	}
}

// FuzzFrontendFraming feeds arbitrary client bytes to the frontend pump:
// it must never panic and must only ever send whole frames upstream.
func FuzzFrontendFraming(f *testing.F) {
	for _, s := range frontendSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		s, _, uc := memSession(t, in, nil)
		_ = s.frontendPump()
		_ = s.uw.Flush()
		checkFrames(t, uc.w.Bytes())
	})
}

func backendSeeds() [][]byte {
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	errBody := func(code string) string { return string(errorBody("ERROR", code, "m", "")) }
	return [][]byte{
		cat(frame('T', "\x00\x01a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x17\x00\x04\xff\xff\xff\xff\x00\x00"), frame('D', "\x00\x01\x00\x00\x00\x011"), frame('C', "SELECT 1\x00"), frame('Z', "I")),
		cat(frame('3', ""), frame('3', ""), frame('1', ""), frame('2', ""), frame('N', "SWARNING\x00\x00"), frame('C', "SET\x00"), frame('Z', "T")),
		cat(frame('E', errBody("25006")), frame('Z', "E")),
		cat(frame('3', ""), frame('E', errBody("25001")), frame('Z', "E")),
		cat(frame('S', "default_transaction_read_only\x00off\x00"), frame('Z', "I")),
		cat(frame('A', "\x00\x00\x00\x01ch\x00x\x00"), frame('G', "\x00\x00\x00"), frame('C', "COPY 1\x00")),
		{'Z', 0, 0, 0, 4},
		{'E', 0x80, 0, 0, 0},
	}
}

// FuzzBackendFraming feeds arbitrary upstream bytes to the backend pump,
// with and without pending injections: it must never panic and must only
// ever send whole frames to the client.
func FuzzBackendFraming(f *testing.F) {
	for _, s := range backendSeeds() {
		f.Add(s, uint8(0))
		f.Add(s, uint8(5))
	}
	f.Fuzz(func(t *testing.T, in []byte, inject uint8) {
		s, cc, _ := memSession(t, nil, in)
		if inject > 0 {
			s.injections.add(injection{at: int(inject % 4), n: injectUnits, kind: injKind(inject % 3), simple: inject&8 != 0})
		}
		s.backendPump()
		<-s.backendDone
		checkFrames(t, cc.w.Bytes())
	})
}

// FuzzScanStatements checks the statement scanner on arbitrary text.
func FuzzScanStatements(f *testing.F) {
	for _, s := range []string{
		"SELECT fencegate.fence('a', 1)", "BEGIN; SELECT fencegate.fence($1, $2); COMMIT",
		"SELECT $x$ ; $x$; SELECT 'it''s;'; -- ;\n SELECT /* /* ; */ */ 1",
		"SELECT E'\\';' ; SELECT \"a;b\"", "CREATE FUNCTION f() BEGIN ATOMIC SELECT 1; END",
		"SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE", "SELECT U&'\\0041'; $1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		stmts, _ := scanStatements(nil, []byte(q))
		prev := 0
		for _, st := range stmts {
			if st.start < prev || st.end < st.start || st.end > len(q) {
				t.Fatalf("statement range [%d,%d) out of order in %q", st.start, st.end, q)
			}
			prev = st.end
		}
	})
}
