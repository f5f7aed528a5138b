package lockclient

import (
	"crypto/tls"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Option configures a Client.
type Option func(*options)

type options struct {
	ttl            time.Duration
	nodeTimeout    time.Duration
	driftFactor    float64
	retry          RetryStrategy
	autoRefresh    bool
	refreshEvery   time.Duration
	keyPrefix      string
	logger         *slog.Logger
	tokenTimeout   time.Duration
	maxUnreachable time.Duration
	commitTimeout  time.Duration
	txRetries      int
	tlsConfig      *tls.Config
	clock          clock // tests jump it; systemClock otherwise
}

func defaultOptions() options {
	return options{
		ttl:            10 * time.Second,
		nodeTimeout:    100 * time.Millisecond,
		driftFactor:    0.01,
		retry:          ExponentialRetry(5*time.Millisecond, 250*time.Millisecond),
		keyPrefix:      "fencegate:lock:",
		tokenTimeout:   5 * time.Second,
		maxUnreachable: 2 * time.Second,
		commitTimeout:  5 * time.Second,
		txRetries:      5,
	}
}

// WithTTL sets how long a lock lives on Redis before it expires unless
// refreshed. The default is 10s.
func WithTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithNodeTimeout bounds every request to one Redis node; a node that has
// not answered by then counts as failed. Keep it small compared with the TTL
// (Redlock suggests 5–50ms for a 10s TTL). The default is 100ms.
func WithNodeTimeout(d time.Duration) Option { return func(o *options) { o.nodeTimeout = d } }

// WithDriftFactor sets the clock drift allowance: validity = TTL − elapsed −
// (TTL×factor + 2ms). The default is 0.01.
func WithDriftFactor(f float64) Option { return func(o *options) { o.driftFactor = f } }

// WithRetry sets how Acquire waits between attempts. The default is
// ExponentialRetry(5ms, 250ms). TryAcquire never retries.
func WithRetry(r RetryStrategy) Option { return func(o *options) { o.retry = r } }

// WithAutoRefresh turns on the watchdog: every held lock is extended every
// `every` (TTL/3 when every is 0) until released. When an extension is
// refused by a majority, or no extension succeeds before the validity
// passes, the lock's Done channel closes at once. The default is off.
func WithAutoRefresh(every time.Duration) Option {
	return func(o *options) { o.autoRefresh, o.refreshEvery = true, every }
}

// WithKeyPrefix sets the prefix of the Redis keys: a lock on resource r is
// the key prefix+r. The default is "fencegate:lock:".
func WithKeyPrefix(p string) Option { return func(o *options) { o.keyPrefix = p } }

// WithTokenTimeout bounds how long Acquire (over all its attempts) and
// TryAcquire wait for the TokenSource to mint tokens, whatever the deadline
// of their context (a context without one included); then the lock is
// released and the error matches ErrTokenUnavailable. One wait also ends
// when the grant's validity passes (a token that comes later could not be
// confirmed): the attempt fails as not acquired, and Acquire tries again
// within the bound. The default is 5s.
func WithTokenTimeout(d time.Duration) Option { return func(o *options) { o.tokenTimeout = d } }

// WithMaxUnreachable bounds how long Acquire keeps retrying while too few
// nodes can be reached to grant the lock (connection refused or broken, no
// answer within the node timeout), whatever the deadline of its context.
// Time spent waiting for a lock another client holds does not count: that
// wait lasts until the context ends or the retry strategy stops. Failures
// no retry can mend (authentication, ACL, a bad answer) end Acquire at the
// first attempt. The default is 2s; 0 gives up at the first attempt that
// found too few nodes.
func WithMaxUnreachable(d time.Duration) Option { return func(o *options) { o.maxUnreachable = d } }

// WithCommitTimeout bounds the COMMIT (and the ROLLBACK) that InTx sends.
// They are sent under a context of their own, not the caller's: once the
// fence holds the resource's row lock no other holder can write, so
// finishing the commit after the lease ended is safe, and cancelling it
// midway would only make its outcome unknown. When the bound passes (or
// the connection fails) during COMMIT, InTx returns ErrCommitUnknown. The
// default is 5s.
func WithCommitTimeout(d time.Duration) Option { return func(o *options) { o.commitTimeout = d } }

// WithTxRetries sets how many times InTx runs a transaction again after a
// serialization failure (SQLSTATE 40001), a deadlock (40P01) or a fence
// timeout (FG004), each time only while the lease is still valid; then it
// returns an error matching ErrSerialization (ErrFenceTimeout when the last
// attempt timed out at the fence). fn runs once per attempt. 0 turns
// retries off. The default is 5.
func WithTxRetries(n int) Option { return func(o *options) { o.txRetries = n } }

// WithRedisTLS sets the TLS configuration Dial uses for rediss:// nodes:
// root CAs for a private certificate authority, client certificates for
// servers started with tls-auth-clients. Dial clones it per node and sets
// ServerName from the node's host when it is empty. With it set, Dial
// refuses an address that would not use TLS (host:port, redis://), so that
// a forgotten "s" does not send the password in clear. The default is the
// system's roots, no client certificate.
func WithRedisTLS(cfg *tls.Config) Option { return func(o *options) { o.tlsConfig = cfg } }

// WithLogger sets the logger. The default is slog.Default() with
// component=lockclient.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// RetryStrategy decides how long Acquire waits before its next attempt.
// Delay returns the wait before attempt number attempt (1 for the first
// retry) and false to stop retrying.
type RetryStrategy interface {
	Delay(attempt int) (time.Duration, bool)
}

type retryFunc func(int) (time.Duration, bool)

func (f retryFunc) Delay(attempt int) (time.Duration, bool) { return f(attempt) }

// NoRetry makes Acquire give up after its first attempt, as TryAcquire does.
func NoRetry() RetryStrategy {
	return retryFunc(func(int) (time.Duration, bool) { return 0, false })
}

// FixedRetry waits a random time in [d/2, d] between attempts (the jitter
// keeps competing clients from retrying in lockstep, as Redlock asks).
func FixedRetry(d time.Duration) RetryStrategy {
	return retryFunc(func(int) (time.Duration, bool) { return jitter(d), true })
}

// ExponentialRetry waits a random time in [d/2, d] where d doubles from min
// with every attempt, up to max.
func ExponentialRetry(min, max time.Duration) RetryStrategy {
	return retryFunc(func(attempt int) (time.Duration, bool) {
		d := min
		for i := 1; i < attempt && d < max; i++ {
			d *= 2
		}
		if d > max {
			d = max
		}
		return jitter(d), true
	})
}

func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(d-half)+1))
}
