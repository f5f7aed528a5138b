package tokenclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
)

// nothingListens reports whether err says that no process accepts
// connections at the node's address: the connection was refused, or the
// host name does not exist. A timeout is not such an answer (the node may be
// slow or the network partitioned), and neither is any answer the node gave.
func nothingListens(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns) && dns.IsNotFound
}

// failureKind names, in a word or two, why one node did not serve a
// request, so that a person reading the error tells a stopped node from an
// unreachable one, a TLS or credential problem, or a node that answered
// something the client could not use.
func failureKind(err error) string {
	var ae *tokenapi.APIError
	var bad *badAnswer
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var recordErr tls.RecordHeaderError
	var netErr net.Error
	switch {
	case err == nil:
		return "served"
	case errors.As(err, &bad):
		if bad.tls {
			return "(TLS failed)"
		}
		return "(bad answer)"
	case errors.As(err, &ae):
		switch ae.Code {
		case tokenapi.CodeUnauthenticated, tokenapi.CodeForbidden:
			return "(authentication failed)"
		case tokenapi.CodeNoQuorum, tokenapi.CodeNotLeader:
			return "(answered: no leader)"
		}
		return "(answered " + ae.Code + ")"
	case errors.Is(err, tokenapi.ErrInternal):
		return "(bad answer)"
	case nothingListens(err):
		return "(refused: nothing listens)"
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr), errors.As(err, &recordErr):
		return "(TLS failed)"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "(unreachable: timed out)"
	}
	return "(unreachable)"
}

// ErrNotTokenService means that something answered at a node's address,
// but not as a fencegate token service: a web page, another protocol
// (PostgreSQL, Redis), plain HTTP where TLS was expected or the other way
// round, or a certificate the client does not trust. It wraps
// tokenapi.ErrUnavailable. The client returns it within about a second, once every
// node answered so, instead of retrying until its deadline: retrying cannot
// help, the address or the TLS settings must change.
var ErrNotTokenService = fmt.Errorf("%w: not a fencegate token service", tokenapi.ErrUnavailable)

// badAnswer is a node's answer that shows it is not a token service the
// client can use: what it answered, and what to do.
type badAnswer struct {
	what string // what the node did, e.g. "answered HTTP 501 text/html"
	fix  string // what to do
	// eof: the node closed the connection without an answer. A token node
	// at its connection cap does that too, so the client keeps trying a
	// little longer before it believes it.
	eof bool
	tls bool  // a TLS failure (certificate not trusted, no TLS)
	err error // the transport's error, if any
}

func (b *badAnswer) Error() string {
	return fmt.Sprintf("%v: %s", ErrNotTokenService, b.what)
}

func (b *badAnswer) Unwrap() []error {
	if b.err != nil {
		return []error{ErrNotTokenService, b.err}
	}
	return []error{ErrNotTokenService}
}

// Fixes a badAnswer names.
const (
	fixURL    = "check the server URLs: each must be a token node's API address, e.g. http://127.0.0.1:7101"
	fixCA     = "give the client the cluster's CA (fencegate: --tls-ca FILE; Go: WithTLS(LoadClientTLS(...)))"
	fixHTTPS  = "that port speaks TLS: write https:// and give the cluster's CA (fencegate: --tls-ca FILE)"
	fixPlain  = "write http://, or the port where the node serves TLS"
	eofReason = "closed the connection without an HTTP answer (PostgreSQL, Redis or another server listens there, or a token node at its connection cap)"
)

// transportBadAnswer returns the badAnswer a failed round trip shows, nil
// when the failure says nothing about what listens (a timeout, a refused
// connection, a cancelled context).
func transportBadAnswer(err error) *badAnswer {
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var recordErr tls.RecordHeaderError
	switch {
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr), errors.As(err, &invalid):
		return &badAnswer{what: "presents a TLS certificate this client does not trust (" + tlsReason(err) + ")", fix: fixCA, tls: true, err: err}
	case errors.As(err, &recordErr), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return &badAnswer{what: "does not speak TLS (it answered the TLS handshake with something else)", fix: fixPlain, tls: true, err: err}
	case strings.Contains(err.Error(), "malformed HTTP"):
		return &badAnswer{what: "answered something that is not HTTP", fix: fixURL, err: err}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		return &badAnswer{what: eofReason, fix: fixURL, eof: true, err: err}
	}
	return nil
}

// tlsReason is the last part of a TLS verification error: "x509:
// certificate signed by unknown authority".
func tlsReason(err error) string {
	s := err.Error()
	if i := strings.Index(s, "x509: "); i >= 0 {
		return s[i:]
	}
	return s
}

// answerBadAnswer returns the badAnswer an HTTP answer shows: a status and
// body that are not the token API's JSON. A 502, 503 or 504 without the
// API's JSON may come from a proxy in front of a node that restarts: not
// such an answer.
func answerBadAnswer(status int, header http.Header, body []byte) *badAnswer {
	switch status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return nil
	}
	ct := header.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	what := fmt.Sprintf("answered HTTP %d", status)
	if ct != "" {
		what += " " + ct
	}
	if status == http.StatusBadRequest && bytes.Contains(body, []byte("HTTPS server")) {
		return &badAnswer{what: what + " (a plain-HTTP request to a TLS port)", fix: fixHTTPS}
	}
	what += ", not the token API's JSON"
	if status == http.StatusNotFound {
		what += " (not a token node, or one too old for this request)"
	}
	return &badAnswer{what: what, fix: fixURL}
}

// hopeless reports whether err shows that retrying this node cannot help
// until something changes: nothing listens there, or what listens is not a
// token service the client can use.
func hopeless(err error) bool {
	var b *badAnswer
	return nothingListens(err) || errors.As(err, &b)
}

// onlyEOF reports whether every bad answer in errs closed the connection
// without an answer.
func onlyEOF(errs map[string]error) bool {
	seen := false
	for _, err := range errs {
		var b *badAnswer
		if errors.As(err, &b) {
			if !b.eof {
				return false
			}
			seen = true
		}
	}
	return seen
}

// eofGrace is how long every node must keep closing connections without an
// answer before the client believes that no token service listens there.
const eofGrace = time.Second

// hopelessError is the error of a call that gave up because every node
// answered hopelessly: what each answered and what to do, on one line.
type hopelessError struct {
	msg  string
	errs []error
}

func (e *hopelessError) Error() string   { return e.msg }
func (e *hopelessError) Unwrap() []error { return e.errs }

// giveUp builds the error of a call that gave up because every node's
// last answer was hopeless: ErrNotRunning when nothing listens anywhere,
// else ErrNotTokenService naming what each node answered and the fixes.
func giveUp(what string, order []string, last map[string]error) error {
	allAbsent := true
	for _, srv := range order {
		if !nothingListens(last[srv]) {
			allAbsent = false
		}
	}
	if allAbsent {
		return fmt.Errorf("%s: %w at %s (every node refused the connection or does not exist): "+
			"start the token service (fencegate dev, or fencegate token serve on each node) or check the server URLs",
			what, ErrNotRunning, strings.Join(order, ", "))
	}
	var parts, fixes []string
	errs := []error{ErrNotTokenService}
	for _, srv := range order {
		err := last[srv]
		errs = append(errs, err)
		fix := fixURL
		var b *badAnswer
		switch {
		case errors.As(err, &b):
			parts = append(parts, srv+" "+b.what)
			fix = b.fix
		case nothingListens(err):
			parts = append(parts, srv+" refused the connection (nothing listens)")
		default:
			parts = append(parts, srv+" "+strings.Trim(failureKind(err), "()"))
		}
		if !slices.Contains(fixes, fix) {
			fixes = append(fixes, fix)
		}
	}
	return &hopelessError{
		msg:  fmt.Sprintf("tokenservice: %s: no fencegate token service answers: %s; %s", what, strings.Join(parts, "; "), strings.Join(fixes, "; ")),
		errs: errs,
	}
}

// isAPIError reports whether body is the token API's error form: JSON with
// a "code".
func isAPIError(body []byte) bool {
	var e tokenapi.ErrorResponse
	return json.Unmarshal(body, &e) == nil && e.Code != ""
}

// plausible reports whether a decoded 200 answer can come from the token
// API: a token answer holds tokens above 0. Another JSON API's answer
// decodes into zeros.
func plausible(out any) bool {
	switch v := out.(type) {
	case *tokenapi.TokenResponse:
		return v.Token > 0
	case *tokenapi.BatchResponse:
		for _, t := range v.Tokens {
			if t.Token <= 0 {
				return false
			}
		}
		return len(v.Tokens) > 0
	}
	return true
}
