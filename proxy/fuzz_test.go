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
	s.clientWriter, s.clientFrames, s.clientRef = newBuffered(cc, p.cfg.MaxMessageSize)
	s.upstreamWriter, s.upstreamFrames, s.upstreamRef = newBuffered(uc, 1<<30)
	s.track.init('I')
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
		cat(frame('P', "\x00COPY t FROM STDIN\x00\x00\x00"), frame('B', "\x00\x00\x00\x00\x00\x00\x00\x00"), frame('E', "\x00\x00\x00\x00\x00"), frame('S', ""), frame('d', "1\n"), frame('c', ""), frame('S', "")),
		cat(frame('P', "\x00bad\x00\x00\x00"), frame('E', "\x00\x00\x00\x00\x00"), frame('Q', "SELECT 1\x00"), frame('S', "")),
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
		_ = s.upstreamWriter.Flush()
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
		cat(frame('T', "\x00\x01fence\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x14\x00\x08\xff\xff\xff\xff\x00\x00"), frame('D', "\x00\x01\x00\x00\x00\x0234"), frame('C', "SELECT 1\x00"), frame('Z', "I")),
		cat(frame('1', ""), frame('2', ""), frame('n', ""), frame('G', "\x00\x00\x00"), frame('C', "COPY 1\x00"), frame('Z', "I")),
		cat(frame('A', "\x00\x00\x00\x01ch\x00x\x00"), frame('G', "\x00\x00\x00"), frame('C', "COPY 1\x00")),
		{'Z', 0, 0, 0, 4},
		{'E', 0x80, 0, 0, 0},
	}
}

// FuzzBackendFraming feeds arbitrary upstream bytes to the backend pump,
// after a frontend stream that leaves requests of every kind outstanding:
// it must never panic and must only ever send whole frames to the client,
// byte for byte what the upstream sent.
func FuzzBackendFraming(f *testing.F) {
	for _, s := range backendSeeds() {
		f.Add(s, uint8(0))
		f.Add(s, uint8(3))
	}
	seeds := frontendSeeds()
	f.Fuzz(func(t *testing.T, in []byte, front uint8) {
		s, cc, _ := memSession(t, seeds[int(front)%len(seeds)], in)
		_ = s.frontendPump()
		s.backendPump()
		<-s.backendDone
		out := cc.w.Bytes()
		checkFrames(t, out)
		// Everything but the proxy's own closing error is the upstream's.
		if i := bytes.LastIndex(out, []byte("C08006\x00")); i >= 0 {
			out = out[:bytes.LastIndexByte(out[:i], 'E')]
		}
		if !bytes.HasPrefix(in, out) {
			t.Fatalf("the client got bytes the upstream did not send")
		}
	})
}

// FuzzStartupMessage feeds arbitrary bytes to parseStartup as the body of
// a StartupMessage: it must never panic; a packet it accepts names each
// key once (a repeated key is refused: the server would take the last),
// names a user and a database, and encodes back to exactly the bytes the
// client sent, which is what the upstream receives.
func FuzzStartupMessage(f *testing.F) {
	for _, s := range []string{
		"user\x00app\x00database\x00db\x00\x00",
		"user\x00app\x00database\x00db\x00user\x00postgres\x00\x00",
		"user\x00app\x00replication\x00off\x00replication\x00database\x00\x00",
		"user\x00app\x00options\x00-c role=app\x00options\x00-c search_path=evil\x00\x00",
		"user\x00app\x00replication\x00Of\x00\x00",
		"user\x00\x00\x00",
		"user\x00app\x00\x00trailing",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sp, err := parseStartup(3<<16, b)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, k := range sp.keys {
			if seen[k] {
				t.Fatalf("key %q accepted twice", k)
			}
			seen[k] = true
		}
		if sp.get("user") == "" || sp.database() == "" {
			t.Fatalf("accepted without a user or database: %q", b)
		}
		if got := sp.encode()[8:]; !bytes.Equal(got, b) {
			t.Fatalf("re-encoded as %q, sent %q", got, b)
		}
		_ = sp.wantsReplication()
	})
}

// TestParseBool pins parseBool to PostgreSQL's parse_bool, which reads the
// replication key of a StartupMessage (TestGateReadsReplicationAsTheServerDoes
// checks the proxy against the server itself).
func TestParseBool(t *testing.T) {
	for _, c := range []struct {
		in    string
		v, ok bool
	}{
		{"true", true, true}, {"T", true, true}, {"tRu", true, true}, {"truee", false, false},
		{"false", false, true}, {"f", false, true}, {"FALSE", false, true}, {"falsey", false, false},
		{"yes", true, true}, {"y", true, true}, {"no", false, true}, {"N", false, true}, {"non", false, false},
		{"on", true, true}, {"ON", true, true}, {"o", false, false}, {"of", false, true}, {"OFF", false, true}, {"offf", false, false},
		{"1", true, true}, {"0", false, true}, {"01", false, false}, {"10", false, false},
		{"", false, false}, {" off", false, false}, {"off ", false, false}, {"database", false, false},
		{"\u017f", false, false}, {"fal\u017fe", false, false},
	} {
		v, ok := parseBool(c.in)
		if v != c.v || ok != c.ok {
			t.Errorf("parseBool(%q) = %v, %v; want %v, %v", c.in, v, ok, c.v, c.ok)
		}
	}
}
