package lockclient

import (
	"context"
	"crypto/tls"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// go-redis logs through one process-wide logger, on stderr by default: a
// failed dial prints "connection pool: failed to dial ..." there before the
// caller sees the error. lockclient's requests and dials are recognised
// and their lines sent to the client's logger at debug level instead; the
// error returned already says what went wrong.

// nodeLogKey marks the contexts of lockclient's requests with the logger of
// their client.
type nodeLogKey struct{}

var routeOnce sync.Once

// routeRedisLog installs redisLog as go-redis's logger, once per process.
func routeRedisLog() {
	routeOnce.Do(func() {
		redis.SetLogger(redisLog{stderr: log.New(os.Stderr, "redis: ", log.LstdFlags)})
	})
}

// redisLog sends a go-redis line to a lockclient logger when the line is
// about a lockclient request (its context carries nodeLogKey) or dial (its
// error is one a lockclient dialer returned), and every other line to
// stderr, as go-redis's default logger does.
type redisLog struct{ stderr *log.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	l, _ := ctx.Value(nodeLogKey{}).(*slog.Logger)
	if l == nil {
		l = recentDialFailures.take(msg)
	}
	if l != nil {
		l.Debug("go-redis", "line", msg)
		return
	}
	r.stderr.Print(msg)
}

// recentDialFailures remembers the errors of lockclient's failed dials
// until go-redis logs them: go-redis dials on a context of its own, so the
// error text is what ties its line to the client.
var recentDialFailures = &dialFailures{}

type dialFailures struct {
	mu      sync.Mutex
	entries []dialFailure // oldest first, at most maxDialFailures
}

type dialFailure struct {
	err string
	log *slog.Logger
}

const maxDialFailures = 256

func (d *dialFailures) note(err string, l *slog.Logger) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.entries) == maxDialFailures {
		d.entries = append(d.entries[:0], d.entries[1:]...)
	}
	d.entries = append(d.entries, dialFailure{err, l})
}

// take returns the logger of the failed dial msg reports, if any.
func (d *dialFailures) take(msg string) *slog.Logger {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := len(d.entries) - 1; i >= 0; i-- {
		if strings.HasSuffix(msg, d.entries[i].err) {
			l := d.entries[i].log
			d.entries = append(d.entries[:i], d.entries[i+1:]...)
			return l
		}
	}
	return nil
}

// dialer connects as go-redis's default dialer does (TLS when the options
// ask for it), on the caller's context, and notes its failures for
// redisLog.
func dialer(ro *redis.Options, l *slog.Logger) func(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := &net.Dialer{Timeout: ro.DialTimeout}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var (
			c   net.Conn
			err error
		)
		if ro.TLSConfig != nil {
			// Each connection notes whether the server asked for a client
			// certificate none was given for (see certConn).
			asked := new(atomic.Bool)
			td := &tls.Dialer{NetDialer: nd, Config: certNoting(ro.TLSConfig, asked)}
			if c, err = td.DialContext(ctx, network, addr); err == nil {
				c = &certConn{Conn: c.(*tls.Conn), asked: asked}
			}
		} else {
			c, err = nd.DialContext(ctx, network, addr)
		}
		if err != nil {
			recentDialFailures.note(err.Error(), l)
		}
		return c, err
	}
}
