package lockclient

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"runtime"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Dial connects to the Redis servers at addrs (one for single-node mode, N
// independent masters for Redlock) and returns a client that owns the
// connections: Close closes them. Each address is host:port or a URL:
//
//	redis://[user:password@]host:port[/db]     plain TCP
//	rediss://[user:password@]host:port[/db]    TLS (see WithRedisTLS)
//	unix://[user:password@]/path/to/socket[?db=N]
//
// as go-redis's ParseURL reads them (a user without a password, or a
// password alone as redis://:password@host, works too; so do go-redis's
// query parameters such as pool_size or client_name, and skip_verify=true,
// for tests only). Each request honours the node timeout and is neither
// retried nor re-dialled by go-redis (a lock attempt is retried as a
// whole), so a master that is down fails at once; the URL parameters that
// would change that (max_retries, dial_timeout, read_timeout,
// write_timeout, pool_timeout) are refused.
//
// No error or log line of the client carries a password: addresses are
// shown as host:port, URLs with the password replaced by "xxxxx".
//
// go-redis logs through a logger of its own, process-wide, on stderr by
// default (a failed dial prints a line there before the caller gets the
// error). Dial replaces it (redis.SetLogger) once per process with one that
// sends the lines about lockclient's own requests and dials to the client's
// logger at debug level (the error returned says what went wrong) and
// writes every other line to stderr as go-redis's default logger does. An
// application that sets a go-redis logger of its own after Dial gets every
// line.
func Dial(addrs []string, tokens TokenSource, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.Default().With("component", "lockclient")
		opts = append(opts, WithLogger(o.logger))
	}
	var rdbs []redis.UniversalClient
	closeAll := func() {
		for _, r := range rdbs {
			r.Close()
		}
	}
	for i, a := range addrs {
		ro, err := redisOptions(a, &o)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("lockclient: Redis address %d (%s): %w", i+1, redactAddr(a), err)
		}
		ro.Dialer = dialer(ro, o.logger)
		rdbs = append(rdbs, redis.NewClient(ro))
	}
	routeRedisLog()
	c, err := New(rdbs, tokens, opts...)
	if err != nil {
		closeAll()
		return nil, err
	}
	c.owned = rdbs
	return c, nil
}

// refusedParams are the go-redis URL parameters that would retry or time
// requests behind lockclient's back.
var refusedParams = []string{"max_retries", "min_retry_backoff", "max_retry_backoff",
	"dial_timeout", "read_timeout", "write_timeout", "pool_timeout"}

// redisOptions turns one address of Dial into go-redis options. Its errors
// never carry the address itself (the caller adds a redacted form).
func redisOptions(addr string, o *options) (*redis.Options, error) {
	var ro *redis.Options
	if strings.Contains(addr, "://") {
		u, err := url.Parse(addr)
		if err != nil {
			// url.Error repeats the whole URL, password included: keep
			// only what is wrong.
			if ue, ok := err.(*url.Error); ok {
				err = ue.Err
			}
			return nil, fmt.Errorf("not a valid URL: %v", scrub(err.Error(), addr))
		}
		for _, p := range refusedParams {
			if u.Query().Has(p) {
				return nil, fmt.Errorf("URL parameter %s is not supported: lockclient bounds every request by the node timeout "+
					"(WithNodeTimeout) and retries whole attempts (WithRetry)", p)
			}
		}
		if ro, err = redis.ParseURL(addr); err != nil {
			return nil, fmt.Errorf("%v; want redis://[user:password@]host:port[/db], rediss://... for TLS, or unix:///path",
				scrub(err.Error(), addr))
		}
		if ro.TLSConfig != nil && o.tlsConfig != nil {
			cfg := o.tlsConfig.Clone()
			if cfg.ServerName == "" {
				cfg.ServerName = ro.TLSConfig.ServerName
			}
			if cfg.MinVersion == 0 {
				cfg.MinVersion = tls.VersionTLS12
			}
			if u.Query().Has("skip_verify") {
				cfg.InsecureSkipVerify = ro.TLSConfig.InsecureSkipVerify
			}
			ro.TLSConfig = cfg
		}
	} else {
		if strings.Contains(addr, "@") {
			return nil, fmt.Errorf("credentials need a URL: redis://user:password@host:port (rediss:// for TLS)")
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("want host:port or a redis://, rediss:// or unix:// URL: %v", err)
		}
		ro = &redis.Options{Addr: addr}
	}
	if o.tlsConfig != nil && ro.TLSConfig == nil {
		return nil, fmt.Errorf("WithRedisTLS is set but this address is plain TCP: use rediss://host:port")
	}
	ro.DialTimeout = o.nodeTimeout
	ro.MaxRetries = -1
	ro.DialerRetries = 1
	ro.ContextTimeoutEnabled = true
	ro.DisableIdentity = true
	if ro.PoolSize == 0 {
		ro.PoolSize = max(16, 4*runtime.GOMAXPROCS(0))
	}
	if ro.PipelinePoolSize == 0 {
		ro.PipelinePoolSize = 4
	}
	return ro, nil
}

// redactAddr returns addr fit for an error or a log line: a URL with its
// password replaced by "xxxxx", even when the URL does not parse.
func redactAddr(addr string) string {
	scheme, rest, ok := strings.Cut(addr, "://")
	if !ok {
		if at := strings.LastIndex(addr, "@"); at >= 0 {
			return "xxxxx@" + addr[at+1:]
		}
		return addr
	}
	if u, err := url.Parse(addr); err == nil {
		return u.Redacted()
	}
	// The authority ends at the first '/', '?' or '#' after the scheme;
	// its user information at the last '@' in it.
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	auth := rest[:end]
	at := strings.LastIndex(auth, "@")
	if at < 0 {
		return addr
	}
	user, _, hasPass := strings.Cut(auth[:at], ":")
	if !hasPass {
		return addr
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

// scrub removes from msg the user information of addr, as written and as
// decoded, so that a parser's message that quotes its input shows no
// password.
func scrub(msg, addr string) string {
	_, rest, ok := strings.Cut(addr, "://")
	if !ok {
		return msg
	}
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return msg
	}
	_, pass, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass || pass == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, pass, "xxxxx")
	if dec, err := url.PathUnescape(pass); err == nil && dec != "" {
		msg = strings.ReplaceAll(msg, dec, "xxxxx")
	}
	return msg
}
