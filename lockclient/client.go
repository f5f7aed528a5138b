package lockclient

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
	"github.com/redis/go-redis/v9"
)

// TokenSource mints fencing tokens: every call returns a number greater than
// every number returned before, for any resource. The fencegate token
// service's Go client (tokenclient.Client) is one.
type TokenSource interface {
	NextToken(ctx context.Context, resource string) (int64, error)
}

// Client takes locks on one Redis (single-node mode) or on N independent
// Redis masters (Redlock). It is safe for concurrent use.
type Client struct {
	nodes  []*node
	quorum int
	tokens TokenSource
	opts   options
	drift  time.Duration
	owned  []redis.UniversalClient
	log    *slog.Logger
	clk    clock

	// Every goroutine the client starts (node flushers, lock watchdogs)
	// goes through goFunc and is counted in workers; Close waits for them.
	goMu     sync.Mutex
	isClosed bool
	closed   chan struct{} // closed by Close
	workers  sync.WaitGroup
}

// New returns a client over the given Redis masters: one client for
// single-node mode, or N independent masters (3 or 5 typically) for Redlock,
// where a lock needs N/2+1 of them. tokens may be nil: the client then works
// in efficiency mode, where locks carry no fencing token (see the package
// documentation). The caller keeps ownership of the Redis clients, and of
// their configuration: lockclient bounds each request by the node timeout
// and retries whole attempts, so clients with go-redis retries off
// (MaxRetries -1) fit best, and go-redis's process-wide logger stays as the
// caller set it (Dial routes it; see there).
//
// For Redlock the masters must be independent servers (not replicas of one
// another, not one cluster).
func New(nodes []redis.UniversalClient, tokens TokenSource, opts ...Option) (*Client, error) {
	if len(nodes) == 0 {
		return nil, errors.New("lockclient: no Redis nodes given; pass one client (single node) or several independent masters (Redlock)")
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.logger == nil {
		o.logger = slog.Default().With("component", "lockclient")
	}
	c := &Client{
		quorum: len(nodes)/2 + 1,
		tokens: tokens,
		opts:   o,
		drift:  time.Duration(float64(o.ttl)*o.driftFactor) + 2*time.Millisecond,
		log:    o.logger,
		clk:    o.clock,
		closed: make(chan struct{}),
	}
	if c.clk == nil {
		c.clk = systemClock
	}
	for i, rdb := range nodes {
		if rdb == nil {
			return nil, fmt.Errorf("lockclient: Redis node %d is nil", i)
		}
		name := fmt.Sprintf("node%d", i)
		if rc, ok := rdb.(*redis.Client); ok {
			name = rc.Options().Addr
		}
		c.nodes = append(c.nodes, &node{name: name, rdb: rdb, timeout: o.nodeTimeout, spawn: c.goFunc, closed: c.closed,
			base: context.WithValue(context.Background(), nodeLogKey{}, c.log)})
	}
	return c, nil
}

// Close stops the auto-refresh of the locks still held (they expire after
// their TTL), waits until every goroutine the client started has ended
// (requests on the wire end within the node timeout), then closes the Redis
// connections the client opened (Dial).
func (c *Client) Close() error {
	c.goMu.Lock()
	if !c.isClosed {
		c.isClosed = true
		close(c.closed)
	}
	c.goMu.Unlock()
	c.workers.Wait()
	var errs []error
	for _, r := range c.owned {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}

// goFunc runs f on a goroutine that Close waits for. Once the client is
// closed it starts nothing and reports false.
func (c *Client) goFunc(f func()) bool {
	c.goMu.Lock()
	defer c.goMu.Unlock()
	if c.isClosed {
		return false
	}
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		f()
	}()
	return true
}

// Quorum returns how many nodes must grant a lock: N/2+1.
func (c *Client) Quorum() int { return c.quorum }

// Fenced reports whether the client's locks carry fencing tokens (it has a
// TokenSource) rather than working in efficiency mode.
func (c *Client) Fenced() bool { return c.tokens != nil }

func (o *options) validate() error {
	switch {
	case o.ttl < 10*time.Millisecond:
		return fmt.Errorf("lockclient: TTL %v is too short; use at least 10ms", o.ttl)
	case o.nodeTimeout <= 0:
		return fmt.Errorf("lockclient: node timeout %v must be positive", o.nodeTimeout)
	case o.driftFactor < 0 || o.driftFactor >= 0.5:
		return fmt.Errorf("lockclient: drift factor %v must be in [0, 0.5)", o.driftFactor)
	case o.retry == nil:
		return errors.New("lockclient: retry strategy is nil; use NoRetry() to disable retries")
	case o.autoRefresh && o.refreshEvery < 0:
		return fmt.Errorf("lockclient: auto-refresh interval %v must not be negative", o.refreshEvery)
	case o.autoRefresh && o.refreshEvery >= o.ttl:
		return fmt.Errorf("lockclient: auto-refresh interval %v must be shorter than the TTL %v", o.refreshEvery, o.ttl)
	case o.tokenTimeout <= 0:
		return fmt.Errorf("lockclient: token timeout %v must be positive", o.tokenTimeout)
	case o.maxUnreachable < 0:
		return fmt.Errorf("lockclient: unreachable bound %v must not be negative", o.maxUnreachable)
	case o.commitTimeout <= 0:
		return fmt.Errorf("lockclient: commit timeout %v must be positive", o.commitTimeout)
	case o.txRetries < 0:
		return fmt.Errorf("lockclient: transaction retries %d must not be negative; use 0 to turn them off", o.txRetries)
	}
	return nil
}

// Acquire takes the lock on resource, retrying after a random delay (see
// WithRetry) while another client holds it, until it succeeds or ctx ends.
// It returns the lock only after the lock was granted, a fencing token was
// minted and the lock was confirmed still held and extended (see the package
// documentation). When ctx ends the error satisfies errors.Is with ctx's
// error and with ErrNotAcquired.
//
// Acquire does not wait for what retrying cannot bring, whatever ctx says:
// it stops at once when the nodes reject the credentials, the ACL or the
// protocol (errors.Is(err, NodeAuthFailed), NodeNotPermitted,
// NodeBadAnswer), after WithMaxUnreachable when too few nodes can be
// reached, and after WithTokenTimeout when no token comes
// (ErrTokenUnavailable).
func (c *Client) Acquire(ctx context.Context, resource string) (*Lock, error) {
	var (
		timer       *time.Timer
		outageSince time.Time // first attempt of a run that found too few nodes
		tokenBudget = c.opts.tokenTimeout
	)
	for attempt := 1; ; attempt++ {
		started := time.Now()
		l, waited, err := c.tryAcquire(ctx, resource, tokenBudget)
		tokenBudget -= waited
		if err == nil || !errors.Is(err, ErrNotAcquired) {
			return l, err
		}
		if ctx.Err() != nil {
			if !errors.Is(err, ctx.Err()) {
				err = errors.Join(err, ctx.Err())
			}
			return nil, err
		}
		// The retry delay, asked for once, only when there is a next attempt.
		var (
			d         time.Duration
			ok, asked bool
		)
		delay := func() (time.Duration, bool) {
			if !asked {
				d, ok = c.opts.retry.Delay(attempt)
				asked = true
			}
			return d, ok
		}
		var nae *NotAcquiredError
		if errors.As(err, &nae) {
			switch c.diagnose(nae) {
			case attemptHopeless:
				return nil, err
			case attemptOutage:
				if outageSince.IsZero() {
					outageSince = started // the first attempt that found too few nodes
				}
				// The bound counts from that attempt's start, and the call
				// ends when the next attempt would begin past it.
				next, _ := delay()
				if waited := time.Since(outageSince); waited+next >= c.opts.maxUnreachable {
					return nil, fmt.Errorf("lockclient: acquire %q: too few Redis nodes reachable for %v (check that the servers run at the addresses given and that the scheme, redis:// or rediss://, is theirs): %w",
						resource, waited.Round(time.Millisecond), err)
				}
			default:
				outageSince = time.Time{}
			}
			if nae.tokenWait && tokenBudget <= 0 {
				return nil, fmt.Errorf("%w for %q: none within %v (the token timeout) over %s: %w",
					ErrTokenUnavailable, resource, c.opts.tokenTimeout, attempts(attempt), err)
			}
		}
		if d, ok = delay(); !ok {
			return nil, err
		}
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		// Both may be ready at once: a context that ended during the wait
		// ends Acquire with the last attempt's refusal and the cause.
		if ctx.Err() != nil {
			return nil, errors.Join(err, ctx.Err())
		}
	}
}

// What a failed attempt says about the next one.
const (
	attemptBusy     = iota // enough nodes answered: the lock is held elsewhere
	attemptOutage          // too few nodes reachable, or in time: they may come back
	attemptHopeless        // too many nodes reject us: retrying cannot help
)

func (c *Client) diagnose(e *NotAcquiredError) int {
	permanent := 0
	if j, ok := e.NodeErrs.(interface{ Unwrap() []error }); ok {
		for _, err := range j.Unwrap() {
			var ne *NodeError
			if errors.As(err, &ne) && !retryable(ne) {
				permanent++
			}
		}
	}
	n := len(c.nodes)
	switch {
	case permanent > n-c.quorum:
		return attemptHopeless
	case e.tokenWait:
		return attemptBusy // the token budget bounds these
	case n-len(e.Failed) < c.quorum || e.Expired:
		return attemptOutage
	}
	return attemptBusy
}

// TryAcquire makes one attempt to take the lock on resource. When another
// client holds it, the error is a *NotAcquiredError (errors.Is(err,
// ErrNotAcquired)). So it is when the grant's validity passed before a
// token came (Expired, with the TokenSource's error in NodeErrs): the lock
// is gone, another attempt may succeed. When the TokenSource failed, or did
// not answer within WithTokenTimeout, the error matches
// ErrTokenUnavailable.
func (c *Client) TryAcquire(ctx context.Context, resource string) (*Lock, error) {
	l, _, err := c.tryAcquire(ctx, resource, c.opts.tokenTimeout)
	return l, err
}

// tryAcquire makes one attempt, waiting at most tokenBudget for a token; it
// returns how long it waited for one.
func (c *Client) tryAcquire(ctx context.Context, resource string, tokenBudget time.Duration) (*Lock, time.Duration, error) {
	// The one resource-name rule, before anything is sent, with a token
	// source or without (an efficiency lock names its key by it too).
	if err := tokenapi.ValidateResource(resource); err != nil {
		return nil, 0, fmt.Errorf("lockclient: acquire %.64q: %w", resource, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("lockclient: acquire %q: %w", resource, err)
	}
	key := c.opts.keyPrefix + resource
	value := newValue()
	validUntil, err := c.grant(ctx, resource, key, value)
	if err != nil {
		return nil, 0, err
	}
	if c.tokens == nil {
		return c.newLock(resource, key, value, 0, validUntil), 0, nil
	}
	start := time.Now()
	token, proof, err := c.mint(ctx, resource, validUntil, tokenBudget)
	waited := time.Since(start)
	if err != nil {
		c.cleanup(key, value)
		return nil, waited, err
	}
	// Confirm: the key still holds our value on a majority, so nobody else
	// was granted the lock between our grant and the token; extending it
	// gives the caller a full validity to use the token in.
	ext, err := c.extend(ctx, stepConfirm, resource, key, value)
	if err != nil {
		c.cleanup(key, value)
		return nil, waited, err
	}
	l := c.newLock(resource, key, value, token, ext.validUntil)
	l.proof = proof
	return l, waited, nil
}

// errTokenWait is the cause of the token context when lockclient's own
// bound ends the wait.
var errTokenWait = errors.New("lockclient: token wait bound reached")

// mint asks the TokenSource for a token (and its proof, see proof.go),
// waiting at most budget and never past the grant's validity.
func (c *Client) mint(ctx context.Context, resource string, validUntil, budget time.Duration) (int64, string, error) {
	wait := min(budget, validUntil-c.clk.now())
	tctx, cancel := context.WithTimeoutCause(ctx, max(wait, 0), errTokenWait)
	defer cancel()
	token, proof, err := c.nextToken(tctx, resource)
	switch {
	case err == nil && token <= 0:
		return 0, "", fmt.Errorf("%w for %q: the token source returned %d; tokens are positive", ErrTokenUnavailable, resource, token)
	case err == nil:
		return token, proof, nil
	case ctx.Err() != nil:
		if !errors.Is(err, ctx.Err()) {
			err = errors.Join(err, ctx.Err())
		}
		return 0, "", fmt.Errorf("%w for %q: %w", ErrTokenUnavailable, resource, err)
	case c.clk.now() >= validUntil:
		// The grant's validity passed first (a slow token service, or this
		// process paused): the lock is gone either way, and another attempt
		// may succeed.
		return 0, "", &NotAcquiredError{Resource: resource, Expired: true, Nodes: len(c.nodes), Quorum: c.quorum,
			NodeErrs: fmt.Errorf("no token before the grant's validity passed: %w", err), tokenWait: true}
	case context.Cause(tctx) == errTokenWait:
		return 0, "", fmt.Errorf("%w for %q: none within %v (the token timeout): %w",
			ErrTokenUnavailable, resource, c.opts.tokenTimeout, err)
	}
	return 0, "", fmt.Errorf("%w for %q: %w", ErrTokenUnavailable, resource, err)
}

// newValue returns a random 128-bit value identifying one grant.
func newValue() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	return hex.EncodeToString(b[:])
}
