package tokenclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/internal/poll"
	"github.com/fencegate/fencegate/internal/tlsfiles"
	"github.com/fencegate/fencegate/tokenapi"
)

// Client talks to a token service cluster. It sends each request to the
// node that last answered (any node forwards to the leader), moves to the
// leader a node names, fails over to the other nodes, and retries retryable
// failures with exponential backoff and full jitter until the context ends
// or MaxWait passes. It is safe for concurrent use.
type Client struct {
	servers        []string
	hc             *http.Client
	ownTransport   *http.Transport
	log            *slog.Logger
	attemptTimeout time.Duration
	maxWait        time.Duration
	backoffBase    time.Duration
	backoffMax     time.Duration
	followLeader   bool
	coalesce       bool
	tlsConfig      *tls.Config       // WithTLS
	cred           *ClientCredential // WithCredential

	mu        sync.Mutex
	preferred int
	given     []string          // the URLs given to NewClient
	pinned    map[string]string // followed URL -> the leader ID it was followed for
	// normalized is the last leader URL a node named and its
	// NormalizeURL: every answer names the leader, and parsing it again
	// for each token cost as much as a tenth of a batched call.
	normalized [2]string

	// Coalescing state, per node URL: callers waiting to be sent, and
	// whether a sender is running (at most one request in flight per node).
	queueMu sync.Mutex
	queued  map[string][]*pendingToken
	sending map[string]bool

	// Every goroutine the client starts (one sender per node with callers
	// queued) runs under ctx and is counted in senders; Close cancels ctx
	// and waits for them.
	ctx     context.Context
	cancel  context.CancelFunc
	senders sync.WaitGroup
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithHTTPClient makes the client use hc. The default is a client of its own
// that keeps up to 256 idle connections per node.
func WithHTTPClient(hc *http.Client) ClientOption { return func(c *Client) { c.hc = hc } }

// WithAttemptTimeout bounds one request to one node. The default is 3s.
func WithAttemptTimeout(d time.Duration) ClientOption {
	return func(c *Client) { c.attemptTimeout = d }
}

// WithMaxWait bounds how long one call keeps retrying when its context has
// no earlier deadline. The default is 30s.
func WithMaxWait(d time.Duration) ClientOption { return func(c *Client) { c.maxWait = d } }

// WithBackoff sets the first and the largest pause between rounds of
// retries; each pause is drawn uniformly below min(max, base·2^round). The
// defaults are 20ms and 1s.
func WithBackoff(base, max time.Duration) ClientOption {
	return func(c *Client) { c.backoffBase, c.backoffMax = base, max }
}

// WithFollowLeader makes the client send later calls straight to the leader
// a node names in its answer, skipping the forwarding hop (a URL not given to
// NewClient is then added). The default is true; false keeps each call on the
// given nodes, which tests use to spread load over followers.
func WithFollowLeader(on bool) ClientOption { return func(c *Client) { c.followLeader = on } }

// WithCoalescing makes concurrent Next/NextToken calls on this client that
// arrive while a token request to a node is in flight wait and go out
// together as one batch request ({"resources":[...]}) once it returns; a
// lone call still uses the single form, sent on the caller's goroutine. A call only joins a request not yet
// sent, so its token is still minted after the call started. The default is
// true; false sends one HTTP request per call.
func WithCoalescing(on bool) ClientOption { return func(c *Client) { c.coalesce = on } }

// WithTLS makes the client speak TLS with cfg (LoadClientTLS builds one
// from files: the cluster CA and, optionally, the client's certificate).
// Server addresses given as HOST:PORT then mean https://HOST:PORT, and
// NewClient refuses one given as http:// (ErrPlainURL). It has no effect
// on the connections of WithHTTPClient, whose transport carries its own TLS
// settings (a transport with a CA or a certificate refuses http:// too).
// The default is none: plain HTTP.
func WithTLS(cfg *tls.Config) ClientOption { return func(c *Client) { c.tlsConfig = cfg } }

// WithCredential makes the client identify itself with a bearer credential
// (LoadClientCredential reads one from a file). The client sends it only
// over https, or over plain HTTP to a loopback address. The default is none.
func WithCredential(cred ClientCredential) ClientOption {
	return func(c *Client) { c.cred = &cred }
}

// WithLogger sets the client's logger. The default is
// slog.Default().With("component", "tokenservice-client").
func WithLogger(l *slog.Logger) ClientOption { return func(c *Client) { c.log = l } }

// NewClient returns a client for the nodes at servers, given as base URLs
// ("http://127.0.0.1:7101") or HOST:PORT.
func NewClient(servers []string, opts ...ClientOption) (*Client, error) {
	c := &Client{
		attemptTimeout: 3 * time.Second,
		maxWait:        30 * time.Second,
		backoffBase:    20 * time.Millisecond,
		backoffMax:     time.Second,
		followLeader:   true,
		coalesce:       true,
		queued:         map[string][]*pendingToken{},
		sending:        map[string]bool{},
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	for _, o := range opts {
		o(c)
	}
	for _, s := range servers {
		u, err := NormalizeURL(s)
		if err != nil {
			return nil, fmt.Errorf("tokenservice: server address: %w", err)
		}
		if c.usesTLS() {
			if !strings.Contains(s, "://") {
				u = "https" + strings.TrimPrefix(u, "http")
			} else if strings.HasPrefix(u, "http://") {
				return nil, fmt.Errorf("%w: %s", ErrPlainURL, s)
			}
		}
		if err := c.credentialSafe(u); err != nil {
			return nil, err
		}
		if !slices.Contains(c.servers, u) {
			c.servers = append(c.servers, u)
		}
	}
	c.given = slices.Clone(c.servers)
	if len(c.servers) == 0 {
		return nil, fmt.Errorf("%w; give the API URL of at least one node, e.g. http://127.0.0.1:7101", ErrNoServers)
	}
	if c.log == nil {
		c.log = slog.Default().With("component", "tokenservice-client")
	}
	if c.hc == nil {
		c.ownTransport = &http.Transport{
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
			TLSClientConfig:     c.tlsConfig,
		}
		c.hc = &http.Client{Transport: c.ownTransport}
	}
	return c, nil
}

// Servers returns the node URLs the client uses.
func (c *Client) Servers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.servers)
}

func (c *Client) numServers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.servers)
}

// Close ends the requests the client has in flight for coalesced callers,
// waits for the goroutines that send them, and releases the client's idle
// connections. Calls made after Close fail.
func (c *Client) Close() error {
	c.queueMu.Lock() // no sender starts after this
	c.cancel()
	c.queueMu.Unlock()
	c.senders.Wait()
	if c.ownTransport != nil {
		c.ownTransport.CloseIdleConnections()
	}
	return nil
}

// NextToken returns a new fencing token for resource.
func (c *Client) NextToken(ctx context.Context, resource string) (int64, error) {
	t, err := c.Next(ctx, resource)
	return t.Value, err
}

// Next returns a new fencing token for resource, greater than every token
// any node returned before this call started.
func (c *Client) Next(ctx context.Context, resource string) (Token, error) {
	if err := tokenapi.ValidateResource(resource); err != nil {
		return Token{}, err
	}
	// The name of the call is needed only for an error: formatting it
	// for every token cost more than a tenth of the client's CPU.
	what := func() string { return fmt.Sprintf("next token for %q", resource) }
	if c.coalesce {
		var tok Token
		err := c.retry(ctx, what, func(ctx context.Context, srv string) (leaderHint, error) {
			t, leader, err := c.tryCoalesced(ctx, srv, resource)
			tok = t
			return leader, err
		})
		return tok, err
	}
	body := singleBody(resource)
	var resp tokenapi.TokenResponse
	err := c.do(ctx, http.MethodPost, "/v1/tokens", body, &resp, what())
	if err != nil {
		return Token{}, err
	}
	return Token{Resource: resp.Resource, Value: resp.Token, Proof: resp.Proof, Term: resp.Term, Index: resp.Index, Leader: resp.Leader}, nil
}

// Status returns the cluster status as seen by the first node that answers.
func (c *Client) Status(ctx context.Context) (tokenapi.Status, error) {
	var st tokenapi.Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &st, "read status")
	return st, err
}

// do sends the request, failing over and retrying, and decodes a 200 answer into out.
func (c *Client) do(ctx context.Context, method, path string, body []byte, out any, what string) error {
	return c.retry(ctx, func() string { return what }, func(ctx context.Context, srv string) (leaderHint, error) {
		return c.try(ctx, srv, method, path, body, out)
	})
}

// retry runs attempt against the preferred node, failing over and retrying
// retryable failures with backoff until ctx ends; attempt returns the
// leader API URL the node named, if any.
func (c *Client) retry(ctx context.Context, what func() string, attempt func(ctx context.Context, srv string) (leaderHint, error)) error {
	// MaxWait bounds the call. The first attempt is bounded by the attempt
	// timeout already; when that is within MaxWait, the deadline is set
	// only once the first attempt failed (a context with a deadline per
	// call cost a timer, a fifth of the client's CPU per token).
	var deadline time.Time
	if _, ok := ctx.Deadline(); !ok && c.maxWait > 0 {
		if c.attemptTimeout > 0 && c.attemptTimeout <= c.maxWait {
			deadline = time.Now().Add(c.maxWait)
		} else {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.maxWait)
			defer cancel()
		}
	}
	last := map[string]error{}
	var order []string
	follows := 0 // leader hints followed without a pause since the last sleep
	// Rounds in a row in which every node answered hopelessly (refused the
	// connection, does not exist, or is not a token service), and when the
	// first of them ended.
	hopelessRounds := 0
	var hopelessSince time.Time
	roundHopeless := true
	for n := 0; ; n++ {
		srv := c.pick()
		leader, err := attempt(ctx, srv)
		if err == nil {
			if c.followLeader {
				if u, ok := c.follow(leader); ok {
					srv = u
				}
			}
			c.prefer(srv)
			return nil
		}
		if !deadline.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
			deadline = time.Time{}
		}
		_, seen := last[srv]
		if !seen {
			order = append(order, srv)
		}
		// An attempt cut short by the caller's deadline says less than the
		// node's earlier answer ("no quorum"): keep that one.
		if !seen || ctx.Err() == nil {
			last[srv] = err
		}
		var ae *tokenapi.APIError
		if errors.As(err, &ae) && !ae.Retryable() {
			return fmt.Errorf("tokenservice: %s: %w", what(), err)
		}
		if c.ctx.Err() != nil {
			return fmt.Errorf("tokenservice: %s: %w: the client was closed", what(), tokenapi.ErrUnavailable)
		}
		if ctx.Err() != nil {
			break
		}
		// Two nodes that each name the other as leader (a stale view during
		// an election) must not send the client back and forth without a
		// pause: follow at most one hint per node, then back off.
		if ae != nil && ae.LeaderAPI != "" && ae.LeaderAPI != srv && ae.Code == tokenapi.CodeNotLeader && follows < c.numServers() {
			if u, ok := c.follow(leaderHint{ID: ae.LeaderID, URL: ae.LeaderAPI}); ok {
				follows++
				c.prefer(u)
				continue
			}
		}
		if !hopeless(err) {
			roundHopeless = false
		}
		c.rotate(srv)
		if k := c.numServers(); (n+1)%k == 0 {
			// Two whole rounds in a row in which no node even accepted a
			// connection, or what accepted it is no token service: waiting
			// for the caller's deadline would only hide that. Connections
			// closed without an answer must go on for eofGrace, since a
			// node at its connection cap closes them too.
			if roundHopeless {
				if hopelessRounds++; hopelessRounds == 1 {
					hopelessSince = time.Now()
				}
				if hopelessRounds >= 2 && (!onlyEOF(last) || time.Since(hopelessSince) >= eofGrace) {
					return giveUp(what(), order, last)
				}
			} else {
				hopelessRounds = 0
			}
			roundHopeless = true
			follows = 0
			round := (n + 1) / k
			if !c.sleep(ctx, round) {
				break
			}
		}
	}
	var errs nodeErrors
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	for _, srv := range order {
		errs = append(errs, fmt.Errorf("node %s %s: %w", srv, failureKind(last[srv]), last[srv]))
	}
	return fmt.Errorf("tokenservice: %s: no node could serve it: %w", what(), errs)
}

// try sends one request to one node; on success it returns the leader the
// node named, if any.
func (c *Client) try(ctx context.Context, srv, method, path string, body []byte, out any) (leaderHint, error) {
	ctx, cancel := context.WithTimeout(ctx, c.attemptTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, srv+path, rd)
	if err != nil {
		return leaderHint{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.cred != nil {
		// A node may name a leader URL the caller never gave: check each.
		if err := c.credentialSafe(srv); err != nil {
			return leaderHint{}, err
		}
		req.Header.Set("Authorization", c.cred.header())
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			if b := transportBadAnswer(err); b != nil {
				return leaderHint{}, b
			}
		}
		return leaderHint{}, fmt.Errorf("%w: %w", tokenapi.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if err := c.checkPinned(srv, resp); err != nil {
		return leaderHint{}, err
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return leaderHint{}, fmt.Errorf("%w: read answer: %w", tokenapi.ErrUnavailable, err)
	}
	if resp.StatusCode != http.StatusOK {
		if !isAPIError(data) {
			if b := answerBadAnswer(resp.StatusCode, resp.Header, data); b != nil {
				return leaderHint{}, b
			}
		}
		return leaderHint{}, tokenapi.DecodeError(resp.StatusCode, data)
	}
	leader := leaderHint{ID: resp.Header.Get(tokenapi.LeaderIDHeader), URL: resp.Header.Get(tokenapi.LeaderHeader)}
	if out == nil {
		return leader, nil
	}
	if err := decodeAnswer(data, out); err != nil {
		b := answerBadAnswer(resp.StatusCode, resp.Header, data)
		b.err = err
		return leaderHint{}, b
	}
	if !plausible(out) {
		return leaderHint{}, &badAnswer{what: "answered HTTP 200 JSON without a token", fix: fixURL}
	}
	return leader, nil
}

func (c *Client) pick() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[c.preferred]
}

// prefer makes srv the first node tried; a URL not in the list is added.
func (c *Client) prefer(srv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.servers, srv)
	if i < 0 {
		c.servers = append(c.servers, srv)
		i = len(c.servers) - 1
	}
	c.preferred = i
}

// rotate moves away from srv after it failed.
func (c *Client) rotate(srv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.servers[c.preferred] == srv {
		c.preferred = (c.preferred + 1) % len(c.servers)
	}
}

// sleep waits a jittered exponential backoff; false if ctx ended first.
func (c *Client) sleep(ctx context.Context, round int) bool {
	d := c.backoffBase << min(round, 16)
	if d > c.backoffMax || d <= 0 {
		d = c.backoffMax
	}
	return poll.Sleep(ctx, time.Duration(rand.Int64N(int64(d))+1))
}

// nodeErrors is errors.Join on one line: what each node answered, joined
// by "; ". errors.Is and errors.As see every one of them.
type nodeErrors []error

func (e nodeErrors) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (e nodeErrors) Unwrap() []error { return e }

// errCredentialInClear is returned instead of sending a bearer credential
// over plain HTTP to another host.
var errCredentialInClear = errors.New("tokenservice: refusing to send a bearer credential over plain HTTP to another host")

// credentialSafe reports whether the credential may be sent to url: over
// https, or over http to a loopback address.
func (c *Client) credentialSafe(url string) error {
	if c.cred == nil || strings.HasPrefix(url, "https://") || tlsfiles.IsLoopback(url) {
		return nil
	}
	return &tokenapi.APIError{Status: 0, Code: tokenapi.CodeBadRequest, Message: fmt.Sprintf("%v: %s; use https:// addresses and the cluster CA", errCredentialInClear, url)}
}

// leaderHint is the leader a node named in its answer.
type leaderHint struct{ ID, URL string }

// follow returns the URL of the leader a node named, if the client may
// follow it. Over TLS a URL the caller did not give is followed only with
// the leader's ID, and is pinned to it: whoever answers there must present
// that node's certificate. So a member address recorded by mistake or by
// an attacker cannot lead the client to another node, even one holding a
// genuine peer certificate.
func (c *Client) follow(h leaderHint) (string, bool) {
	if h.URL == "" {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.normalized[1]
	if c.normalized[0] != h.URL {
		n, err := NormalizeURL(h.URL)
		if err != nil {
			return "", false
		}
		if rest, ok := strings.CutPrefix(n, "http://"); ok && c.usesTLS() {
			n = "https://" + rest // a client over TLS never follows into plain HTTP
		}
		c.normalized, u = [2]string{h.URL, n}, n
	}
	if slices.Contains(c.given, u) {
		return u, true
	}
	if strings.HasPrefix(u, "https://") {
		if h.ID == "" {
			return "", false
		}
		if c.pinned == nil {
			c.pinned = map[string]string{}
		}
		c.pinned[u] = h.ID
	}
	return u, true
}

// checkPinned refuses an answer from a followed URL that does not come from
// the node it was followed for.
func (c *Client) checkPinned(srv string, resp *http.Response) error {
	c.mu.Lock()
	want, ok := c.pinned[srv]
	c.mu.Unlock()
	if !ok {
		return nil
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		return fmt.Errorf("%w: %s, followed as leader %s, answered without TLS; refused", tokenapi.ErrUnavailable, srv, want)
	}
	if got := resp.TLS.PeerCertificates[0].Subject.CommonName; got != want {
		return fmt.Errorf("%w: %s, followed as leader %s, answered as %q; refused", tokenapi.ErrUnavailable, srv, want, got)
	}
	return nil
}
