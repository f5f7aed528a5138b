package proxy

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Codes of the untyped startup-phase packets.
const (
	codeCancel     = 80877102
	codeSSL        = 80877103
	codeGSSEnc     = 80877104
	maxStartupSize = 10000 // as PostgreSQL's MAX_STARTUP_PACKET_LENGTH
	maxSecret      = 256   // the longest cancel secret protocol 3.2 allows
	startupTimeout = 30 * time.Second
	bufSize        = 32 << 10
)

// startupParams is a decoded StartupMessage.
type startupParams struct {
	version uint32
	keys    []string
	values  []string
}

// get returns the value of key k ("" when absent). parseStartup refuses a
// key given twice, so there is one value to return.
func (sp *startupParams) get(k string) string {
	for i, key := range sp.keys {
		if key == k {
			return sp.values[i]
		}
	}
	return ""
}

// has reports whether the startup packet carries key k.
func (sp *startupParams) has(k string) bool { return slices.Contains(sp.keys, k) }

// database returns the database PostgreSQL connects the session to: the
// database key, or the user name when it is missing or empty, as the
// server's ProcessStartupPacket does. The server also cuts both names to
// NAMEDATALEN-1 bytes (63 in a default build); the proxy does not, so two
// names it keeps apart may reach one database, never the other way round:
// a cache keyed on this name can only miss, never mix up two databases,
// whatever NAMEDATALEN the server was built with.
func (sp *startupParams) database() string {
	if d := sp.get("database"); d != "" {
		return d
	}
	return sp.get("user")
}

// wantsReplication reports whether PostgreSQL would make a session with
// these parameters a walsender: a replication key whose value is
// "database" or that parse_bool reads as true, or one it cannot read at
// all (the server then refuses the session itself). Only a value the
// server reads as false is an ordinary session.
func (sp *startupParams) wantsReplication() bool {
	if !sp.has("replication") {
		return false
	}
	v, ok := parseBool(sp.get("replication"))
	return !ok || v
}

// parseBool is PostgreSQL's parse_bool (src/backend/utils/adt/bool.c), the
// function ProcessStartupPacket reads the replication key with: a
// case-insensitive prefix of "true", "false", "yes" or "no", at least
// two letters of "on" or "off", or exactly "1" or "0"; no white space is
// trimmed. ok is false for anything else.
func parseBool(s string) (v, ok bool) {
	// pg_strncasecmp folds ASCII letters only (a byte above 0x7f can
	// never match these words), so no Unicode folding here.
	prefix := func(word string, min int) bool {
		if len(s) < min || len(s) > len(word) {
			return false
		}
		for i := range len(s) {
			c := s[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != word[i] {
				return false
			}
		}
		return true
	}
	switch {
	case prefix("true", 1), prefix("yes", 1), prefix("on", 2), s == "1":
		return true, true
	case prefix("false", 1), prefix("no", 1), prefix("off", 2), s == "0":
		return false, true
	}
	return false, false
}

// readStartupPacket reads one untyped packet straight from c (no
// buffering, so bytes a client pipelines after an SSLRequest stay in the
// socket and are fed to the TLS handshake, which rejects them).
func readStartupPacket(c net.Conn) (code uint32, body []byte, err error) {
	var h [8]byte
	if _, err := io.ReadFull(c, h[:4]); err != nil {
		return 0, nil, err
	}
	n := int32(binary.BigEndian.Uint32(h[:4]))
	if n < 8 || n > maxStartupSize {
		return 0, nil, fmt.Errorf("%w: startup packet length %d (allowed 8..%d)", errProtocol, n, maxStartupSize)
	}
	body = make([]byte, n-4)
	if _, err := io.ReadFull(c, body); err != nil {
		return 0, nil, err
	}
	return binary.BigEndian.Uint32(body[:4]), body[4:], nil
}

// negotiate runs the client's startup phase: SSL and GSS encryption
// requests, cancel requests, and the StartupMessage. It returns the
// (possibly TLS-wrapped) connection and the startup parameters, or nil
// params when the connection carried a cancel request.
func (s *session) negotiate() (net.Conn, *startupParams, error) {
	c := s.client
	tlsDone, gssDone := false, false
	for {
		code, body, err := readStartupPacket(c)
		if err != nil {
			return c, nil, err
		}
		switch {
		case code == codeSSL && len(body) == 0:
			if tlsDone {
				return c, nil, fmt.Errorf("%w: SSLRequest after TLS was set up", errProtocol)
			}
			if s.p.cfg.ClientTLS == nil {
				if _, err := c.Write([]byte{'N'}); err != nil {
					return c, nil, err
				}
				tlsDone = true
				continue
			}
			if _, err := c.Write([]byte{'S'}); err != nil {
				return c, nil, err
			}
			tc := tls.Server(c, s.p.cfg.ClientTLS)
			if err := tc.Handshake(); err != nil {
				return c, nil, fmt.Errorf("client TLS handshake: %w", err)
			}
			c, tlsDone, s.clientTLS = tc, true, true
		case code == codeGSSEnc && len(body) == 0:
			if gssDone || s.clientTLS {
				return c, nil, fmt.Errorf("%w: unexpected GSSENCRequest", errProtocol)
			}
			gssDone = true
			if _, err := c.Write([]byte{'N'}); err != nil {
				return c, nil, err
			}
		case code == codeCancel && len(body) >= 8:
			s.p.forwardCancel(binary.BigEndian.Uint32(body[:4]), body[4:])
			return c, nil, nil
		case code>>16 == 3:
			sp, err := parseStartup(code, body)
			if err != nil {
				return c, nil, err
			}
			return c, sp, nil
		default:
			return c, nil, fmt.Errorf("%w: unsupported startup packet code %d (fencegate speaks protocol 3)", errProtocol, code)
		}
	}
}

// parseStartup decodes a StartupMessage body. It refuses a packet the
// server could read differently from the proxy: a key given twice (the
// server keeps the last), bytes after the terminating NUL, no user.
func parseStartup(version uint32, b []byte) (*startupParams, error) {
	sp := &startupParams{version: version}
	for {
		k, rest, ok := cstring(b)
		if !ok {
			return nil, fmt.Errorf("%w: startup packet not NUL-terminated", errProtocol)
		}
		if len(k) == 0 {
			if len(rest) != 0 {
				return nil, fmt.Errorf("%w: bytes after the startup parameters", errProtocol)
			}
			break
		}
		v, rest2, ok := cstring(rest)
		if !ok {
			return nil, fmt.Errorf("%w: startup parameter %q has no value", errProtocol, k)
		}
		if sp.has(string(k)) {
			// PostgreSQL takes the last one (for user, database, options,
			// replication and every setting); any reading the proxy made
			// of such a packet could differ from the server's.
			return nil, fmt.Errorf("%w: startup parameter %q is given twice; send each parameter once", errProtocol, k)
		}
		sp.keys = append(sp.keys, string(k))
		sp.values = append(sp.values, string(v))
		b = rest2
	}
	if sp.get("user") == "" {
		return nil, fmt.Errorf("%w: no user name in the startup packet", errProtocol)
	}
	return sp, nil
}

// encode returns the StartupMessage, length and version included: the
// bytes the client sent, since parseStartup accepts only packets it reads
// whole.
func (sp *startupParams) encode() []byte {
	msg := make([]byte, 8, 256)
	binary.BigEndian.PutUint32(msg[4:], sp.version)
	for i, k := range sp.keys {
		msg = append(append(append(append(msg, k...), 0), sp.values[i]...), 0)
	}
	msg = append(msg, 0)
	binary.BigEndian.PutUint32(msg[:4], uint32(len(msg)))
	return msg
}

// upstreamStartup sends the client's StartupMessage, as it came, to the
// upstream, relays the authentication exchange and the startup parameters
// to the client, and returns when the upstream is ready for queries (its
// ReadyForQuery is not yet forwarded: the gate runs first).
func (s *session) upstreamStartup(sp *startupParams) error {
	if _, err := s.upstreamWriter.Write(sp.encode()); err != nil {
		return err
	}
	if err := s.upstreamWriter.Flush(); err != nil {
		return err
	}
	for {
		typ, n, err := s.upstreamFrames.peekHeader()
		if err != nil {
			return fmt.Errorf("read upstream startup: %w", err)
		}
		body, err := s.upstreamFrames.body(n)
		if err != nil {
			return fmt.Errorf("read upstream startup: %w", err)
		}
		switch typ {
		case 'R':
			if len(body) < 4 {
				return fmt.Errorf("upstream sent a short authentication message")
			}
			if err := writeMsg(s.clientWriter, typ, body); err != nil {
				return err
			}
			switch binary.BigEndian.Uint32(body) {
			case 3, 5, 7, 9, 10, 11: // a password, GSS, SSPI or SASL answer is due
				if err := s.clientWriter.Flush(); err != nil {
					return err
				}
				if err := s.relayAuthAnswer(); err != nil {
					return err
				}
			}
		case 'K':
			// The client gets the server's process ID, so that
			// pg_backend_pid(), pg_stat_activity, pg_cancel_backend and a
			// NotificationResponse's sender all name its own backend, and
			// a secret of the proxy's own, of the same length: the
			// server's stays with the proxy (see cancel.go).
			var k pgproto3.BackendKeyData
			if err := k.Decode(body); err != nil {
				return fmt.Errorf("decode upstream BackendKeyData: %w", err)
			}
			if len(k.SecretKey) < 4 || len(k.SecretKey) > maxSecret {
				return fmt.Errorf("upstream sent a BackendKeyData with a %d-byte secret (allowed 4..%d)", len(k.SecretKey), maxSecret)
			}
			s.upPID, s.upSecret = k.ProcessID, k.SecretKey
			s.p.registerKey(s)
			kb := make([]byte, 4, 4+len(s.secret))
			binary.BigEndian.PutUint32(kb, s.upPID)
			if err := writeMsg(s.clientWriter, 'K', append(kb, s.secret...)); err != nil {
				return err
			}
		case 'S':
			// The server reports the role it authenticated as
			// session_authorization during startup. A client cannot
			// change it there (the server sets it with a higher priority
			// than startup options and role settings), so it is the role
			// the gate checks and caches its verdict for.
			// Every reported value is kept (what the client was told, see
			// forwardParams); server_version is fixed when the server was
			// built, and no client setting changes it either.
			if name, rest, ok := cstring(body); ok {
				if v, _, ok := cstring(rest); ok {
					if s.params == nil {
						s.params = make(map[string]string)
					}
					s.params[string(name)] = string(v)
					if string(name) == "session_authorization" {
						s.role = string(v)
					}
				}
			}
			if err := writeMsg(s.clientWriter, typ, body); err != nil {
				return err
			}
		case 'E':
			_ = writeMsg(s.clientWriter, typ, body)
			_ = s.clientWriter.Flush()
			return errUpstreamRefused
		case 'Z':
			if len(body) != 1 {
				return fmt.Errorf("upstream sent a bad ReadyForQuery")
			}
			s.startStatus = body[0]
			return nil
		default: // ParameterStatus, NoticeResponse, NegotiateProtocolVersion, ...
			if err := writeMsg(s.clientWriter, typ, body); err != nil {
				return err
			}
		}
	}
}

// relayAuthAnswer forwards the client's one authentication message.
func (s *session) relayAuthAnswer() error {
	typ, n, err := s.clientFrames.peekHeader()
	if err != nil {
		return err
	}
	if typ != 'p' {
		return fmt.Errorf("%w: message type %q during authentication (expected 'p')", errProtocol, typ)
	}
	if err := s.clientFrames.copyTo(s.upstreamWriter, n); err != nil {
		return err
	}
	return s.upstreamWriter.Flush()
}

// newBuffered wraps a connection in the session's buffered reader and writer.
// They reach the connection through the returned connRef, which can switch
// it to thread I/O without losing buffered bytes.
func newBuffered(c net.Conn, max int) (*bufio.Writer, frameReader, *connRef) {
	ref := &connRef{c}
	return bufio.NewWriterSize(ref, bufSize), frameReader{r: bufio.NewReaderSize(ref, bufSize), max: max}, ref
}

// connRef is the connection under a session's buffered reader and writer.
type connRef struct{ net.Conn }
