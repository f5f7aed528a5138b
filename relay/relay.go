// Package relay delivers the effects that fenced transactions committed
// (fencegate.effect, see package pgfence) to the HTTP targets an operator
// listed, each once as far as the target honours Idempotency-Key.
//
// A relay claims due effects with fencegate.effect_claim inside a
// transaction of its own, which holds their row locks while it POSTs them:
// another relay skips locked effects, so no effect is sent by two relays at
// once, and a relay that dies releases its locks with its connection. It
// records each outcome with fencegate.effect_record in that same
// transaction and commits: an outcome is recorded exactly when the commit
// succeeds, and an effect whose outcome was not recorded (the relay was
// killed between the target's answer and the commit) is sent again, with
// the same Idempotency-Key. Only the oldest pending effect of a resource
// is ever claimed, so effects of one resource are delivered in the order
// their transactions committed; different resources go in parallel.
//
// Each request is a POST of the effect's payload (Content-Type:
// application/json) with the headers Idempotency-Key (a random UUID stored
// with the effect: the same on every attempt, unique across databases and
// restores), Fencing-Resource (the resource, percent-encoded as a URL path
// segment), Fencing-Token (the token of the fence that recorded it) and
// Fencing-Effect (the effect's id in its database). A 2xx answer delivers
// the effect; a connection error, a timeout, 408, 429 and 5xx are retried
// with capped exponential backoff and jitter, up to MaxAttempts; any other
// answer fails the effect and keeps the answer for the operator
// ("fencegate effects show|retry|drop"). Redirects are not followed: a
// target is exactly the URL the operator gave.
package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/internal/poll"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Target is one place effects go: the effects whose target is Name are
// POSTed to URL.
type Target struct {
	// Name is the name applications pass to fencegate.effect.
	Name string
	// URL receives the POSTs (http or https).
	URL string
	// Timeout bounds one attempt, from dialing to the end of the answer's
	// head. Default 10s.
	Timeout time.Duration
	// Concurrency is how many effects of this target are in flight at
	// most (each of another resource). Default 8.
	Concurrency int
	// TLS configures https targets (a CA to trust, a client
	// certificate). Nil: the system's roots.
	TLS *tls.Config
}

// Config configures a Relay.
type Config struct {
	// DSN connects to the database: a superuser, or a role that
	// "fencegate schema install --relay ROLE" granted.
	DSN string
	// Targets are the targets this relay delivers to. Effects of other
	// targets stay pending (another relay may know them).
	Targets []Target
	// Poll is how often a worker looks for due effects when no
	// notification woke it (retries that came due, a lost notification).
	// Default 1s.
	Poll time.Duration
	// MinBackoff and MaxBackoff bound the wait before a retry: the n-th
	// retry waits a random time between half and all of
	// min(MaxBackoff, MinBackoff*2^(n-1)), or what the target's
	// Retry-After asks, capped at MaxBackoff. Defaults 1s and 5m.
	MinBackoff, MaxBackoff time.Duration
	// MaxAttempts fails an effect after this many attempts that asked for a
	// retry. 0: never; retry until delivered. Default 0.
	MaxAttempts int
	// Retain deletes delivered and dropped effects this long after they
	// were settled. 0: keep them.
	Retain time.Duration
	// Logger receives what the relay does. Default slog.Default().
	Logger *slog.Logger
	// Metrics, when set, receives the relay's metrics.
	Metrics *Metrics
}

var targetNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// Relay delivers effects. Run it with Run.
type Relay struct {
	cfg     Config
	log     *slog.Logger
	targets []*target
	lastOK  atomicTime // the last good round trip to the database
}

type target struct {
	Target
	url    *url.URL
	client *http.Client
	batch  int
	wake   []chan struct{}
}

// New checks cfg and returns a relay.
func New(cfg Config) (*Relay, error) {
	if cfg.DSN == "" {
		return nil, errors.New("relay: no database DSN")
	}
	if len(cfg.Targets) == 0 {
		return nil, errors.New("relay: no target; give at least one NAME=URL")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Minute
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = cfg.MinBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Relay{cfg: cfg, log: cfg.Logger}
	seen := map[string]bool{}
	for _, t := range cfg.Targets {
		if !targetNameRE.MatchString(t.Name) {
			return nil, fmt.Errorf("relay: target name %q: use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", t.Name)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("relay: target %s given twice", t.Name)
		}
		seen[t.Name] = true
		u, err := url.Parse(t.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("relay: target %s: %q is not an http:// or https:// URL", t.Name, t.URL)
		}
		if t.Timeout <= 0 {
			t.Timeout = 10 * time.Second
		}
		if t.Concurrency <= 0 {
			t.Concurrency = 8
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = t.TLS
		tr.MaxIdleConnsPerHost = t.Concurrency
		tr.ResponseHeaderTimeout = t.Timeout
		tg := &target{Target: t, url: u, client: &http.Client{
			Transport: tr,
			Timeout:   t.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}}
		// Workers of batchMax effects each: one connection per worker.
		const batchMax = 16
		workers := (t.Concurrency + batchMax - 1) / batchMax
		tg.batch = (t.Concurrency + workers - 1) / workers
		for range workers {
			tg.wake = append(tg.wake, make(chan struct{}, 1))
		}
		r.targets = append(r.targets, tg)
	}
	return r, nil
}

// Run delivers effects until ctx is cancelled, then drains: it claims
// nothing more, lets the effects in flight finish (each within its
// target's timeout), records their outcomes and returns. Cancelling hard
// (a second signal) is the caller's: cancel hard to abandon the in-flight
// effects, which stay pending and are sent again later with the same key.
func (r *Relay) Run(ctx context.Context, hard context.Context) error {
	if hard == nil {
		hard = context.Background()
	}
	var wg sync.WaitGroup
	for _, t := range r.targets {
		for i := range t.wake {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.worker(ctx, hard, t, t.wake[i])
			}()
		}
	}
	wg.Add(1)
	go func() { defer wg.Done(); r.listen(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); r.housekeep(ctx) }()
	r.log.Info("relay running", "targets", len(r.targets))
	<-ctx.Done()
	r.log.Info("relay draining: claiming nothing more, finishing the effects in flight")
	wg.Wait()
	r.log.Info("relay stopped")
	return nil
}

// Healthy reports whether the relay reached the database lately.
func (r *Relay) Healthy() bool {
	last := r.lastOK.Load()
	return !last.IsZero() && time.Since(last) < 3*r.cfg.Poll+10*time.Second
}

func (r *Relay) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(r.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("relay: parse the DSN: %w", err)
	}
	cfg.RuntimeParams["application_name"] = "fencegate relay"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// The relay often runs as a superuser: like every admin session, it
	// resolves no name to an application's function, operator or type.
	if err := pgfence.AdminSession(ctx, conn); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return conn, nil
}

// worker claims and delivers effects of one target on one connection.
func (r *Relay) worker(ctx, hard context.Context, t *target, wake chan struct{}) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	fails := 0
	for ctx.Err() == nil {
		if conn == nil || conn.IsClosed() {
			c, err := r.connect(ctx)
			if err != nil {
				fails++
				r.log.Warn("relay cannot reach the database", "target", t.Name, "err", err)
				poll.Sleep(ctx, backoff(r.cfg.MinBackoff, 10*time.Second, fails))
				continue
			}
			conn = c
		}
		n, err := r.round(ctx, hard, conn, t)
		if err != nil {
			fails++
			if ctx.Err() == nil {
				r.log.Warn("relay round failed", "target", t.Name, "err", err)
			}
			conn.Close(context.Background())
			conn = nil
			poll.Sleep(ctx, backoff(r.cfg.MinBackoff, 10*time.Second, fails))
			continue
		}
		fails = 0
		r.lastOK.Store(time.Now())
		if n > 0 {
			continue
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-time.After(jitter(r.cfg.Poll)):
		}
	}
}

// effect is one claimed effect.
type effect struct {
	id       int64
	resource string
	token    int64
	target   string
	payload  []byte
	key      string
	attempts int
	created  time.Time
}

// outcome is what one attempt came to.
type outcome struct {
	kind     string // delivered, failed, retry
	status   *int32
	response string
	err      string
	retryAt  *time.Time
}

// round claims up to t.batch effects in one transaction, delivers them in
// parallel, records each outcome and commits. It returns how many it
// claimed.
func (r *Relay) round(ctx, hard context.Context, conn *pgx.Conn, t *target) (int, error) {
	tx, err := conn.Begin(hard)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op after Commit
	rows, err := tx.Query(hard, "SELECT id, resource, token, target, payload::text, idem_key::text, attempts, created_at FROM fencegate.effect_claim($1::text[], $2::integer)", []string{t.Name}, t.batch)
	if err != nil {
		return 0, err
	}
	effs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (effect, error) {
		var e effect
		var payload string
		err := row.Scan(&e.id, &e.resource, &e.token, &e.target, &payload, &e.key, &e.attempts, &e.created)
		e.payload = []byte(payload)
		return e, err
	})
	if err != nil {
		return 0, err
	}
	if len(effs) == 0 {
		return 0, tx.Commit(hard)
	}
	outs := make([]outcome, len(effs))
	var wg sync.WaitGroup
	for i := range effs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = r.deliver(hard, t, effs[i])
		}()
	}
	wg.Wait()
	// The outcomes go in one round trip (a pipeline), then COMMIT.
	var b pgx.Batch
	for i, e := range effs {
		o := outs[i]
		if o.kind == "retry" && r.cfg.MaxAttempts > 0 && e.attempts+1 >= r.cfg.MaxAttempts {
			o.kind = "failed"
			o.err = fmt.Sprintf("gave up after %d attempts: %s", e.attempts+1, o.err)
		}
		if o.kind == "retry" && o.retryAt == nil {
			at := time.Now().Add(backoff(r.cfg.MinBackoff, r.cfg.MaxBackoff, e.attempts+1))
			o.retryAt = &at
		}
		outs[i] = o
		b.Queue("SELECT fencegate.effect_record($1, $2, $3, $4, $5, $6)", e.id, o.kind, o.status, nullIfEmpty(o.response), nullIfEmpty(o.err), o.retryAt)
	}
	if err := tx.SendBatch(hard, &b).Close(); err != nil {
		return len(effs), err
	}
	if err := tx.Commit(hard); err != nil {
		return len(effs), err
	}
	for i, e := range effs {
		r.cfg.Metrics.settled(e, outs[i])
		lvl := slog.LevelDebug
		if outs[i].kind != "delivered" {
			lvl = slog.LevelInfo
		}
		r.log.Log(ctx, lvl, "effect "+outs[i].kind, "id", e.id, "resource", e.resource, "token", e.token, "target", e.target, "attempt", e.attempts+1, "err", outs[i].err)
	}
	return len(effs), nil
}

// deliver makes one attempt of e.
func (r *Relay) deliver(ctx context.Context, t *target, e effect) outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url.String(), strings.NewReader(string(e.payload)))
	if err != nil {
		return outcome{kind: "failed", err: err.Error()}
	}
	SetHeaders(req.Header, e.key, e.resource, e.token)
	req.Header.Set("Fencing-Effect", strconv.FormatInt(e.id, 10))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "fencegate-relay")
	resp, err := t.client.Do(req)
	if err != nil {
		return outcome{kind: "retry", err: oneLine(err.Error())}
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) //nolint:errcheck // draining for reuse only
	resp.Body.Close()
	st := int32(resp.StatusCode)
	o := outcome{status: &st, response: strings.ToValidUTF8(string(body), "?")}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		o.kind = "delivered"
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode >= 500:
		o.kind = "retry"
		o.err = "HTTP " + strconv.Itoa(resp.StatusCode)
		if s := resp.Header.Get("Retry-After"); s != "" {
			if sec, err := strconv.Atoi(s); err == nil && sec >= 0 {
				d := min(time.Duration(sec)*time.Second, r.cfg.MaxBackoff)
				at := time.Now().Add(d)
				o.retryAt = &at
			}
		}
	default:
		o.kind = "failed"
		o.err = "HTTP " + strconv.Itoa(resp.StatusCode)
	}
	return o
}

// SetHeaders sets the fencing headers of an effect's request:
// Idempotency-Key, Fencing-Resource (percent-encoded as a URL path
// segment, so that any resource name fits in a header) and Fencing-Token.
func SetHeaders(h http.Header, key, resource string, token int64) {
	h.Set("Idempotency-Key", key)
	h.Set("Fencing-Resource", url.PathEscape(resource))
	h.Set("Fencing-Token", strconv.FormatInt(token, 10))
}

// listen wakes the workers of a target when a transaction that recorded an
// effect for it commits (fencegate.effect notifies fencegate_effects).
func (r *Relay) listen(ctx context.Context) {
	fails := 0
	for ctx.Err() == nil {
		conn, err := r.connect(ctx)
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN fencegate_effects")
			for err == nil {
				var n *pgconn.Notification
				n, err = conn.WaitForNotification(ctx)
				if err == nil {
					fails = 0
					r.wake(n.Payload)
				}
			}
			conn.Close(context.Background())
		}
		if ctx.Err() != nil {
			return
		}
		fails++
		poll.Sleep(ctx, backoff(r.cfg.MinBackoff, 10*time.Second, fails))
	}
}

func (r *Relay) wake(targetName string) {
	for _, t := range r.targets {
		if t.Name != targetName {
			continue
		}
		for _, w := range t.wake {
			select {
			case w <- struct{}{}:
			default:
			}
		}
	}
}

// housekeep refreshes the gauges and prunes settled effects past their
// retention.
func (r *Relay) housekeep(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	every := min(r.cfg.Poll*5, 5*time.Second)
	for {
		if conn == nil || conn.IsClosed() {
			conn, _ = r.connect(ctx)
		}
		if conn != nil {
			if err := r.housekeepOnce(ctx, conn); err != nil {
				if ctx.Err() == nil {
					r.log.Warn("relay housekeeping failed", "err", err)
				}
				conn.Close(context.Background())
				conn = nil
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

func (r *Relay) housekeepOnce(ctx context.Context, conn *pgx.Conn) error {
	var pending, failed int64
	var oldest *time.Time
	if err := conn.QueryRow(ctx, "SELECT pending, failed, oldest_pending FROM fencegate.effect_stats()").Scan(&pending, &failed, &oldest); err != nil {
		return err
	}
	r.lastOK.Store(time.Now())
	r.cfg.Metrics.stats(pending, failed, oldest)
	if r.cfg.Retain > 0 {
		for ctx.Err() == nil {
			var n int64
			if err := conn.QueryRow(ctx, "SELECT fencegate.effect_prune($1::interval, 1000)", r.cfg.Retain.String()).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				r.log.Info("relay pruned settled effects", "deleted", n, "retain", r.cfg.Retain)
			}
			if n < 1000 {
				break
			}
		}
	}
	return nil
}

// backoff is the wait before retry n (1, 2, ...): a random time between
// half and all of min(max, base*2^(n-1)).
func backoff(base, maxWait time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < maxWait; i++ {
		d *= 2
	}
	d = min(d, maxWait)
	return d/2 + rand.N(d/2+1)
}

func jitter(d time.Duration) time.Duration { return d*3/4 + rand.N(d/2+1) }

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

type atomicTime struct {
	mu sync.Mutex
	t  time.Time
}

func (a *atomicTime) Store(t time.Time) { a.mu.Lock(); a.t = t; a.mu.Unlock() }
func (a *atomicTime) Load() time.Time   { a.mu.Lock(); defer a.mu.Unlock(); return a.t }
