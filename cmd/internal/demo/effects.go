package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/devstack"
	"github.com/fencegate/fencegate/cmd/internal/timeline"
	"github.com/fencegate/fencegate/internal/payprovider"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/relay"
	"github.com/jackc/pgx/v5"
)

// EffectsConfig configures the payment-provider demo.
type EffectsConfig struct {
	// Binary is the fencegate executable run as the relay in the crash
	// scene. The default is this process's own executable.
	Binary string
	// TTL is the lock's time to live. The default is 1s.
	TTL time.Duration
	// Postgres and Redis are as in Config.
	Postgres, Redis string
	// Out receives the story and the verdict. The default is io.Discard.
	Out io.Writer
	// Logger gets progress logs; ServiceLogger the services'. The defaults
	// are slog.Default() and a discarding logger.
	Logger, ServiceLogger *slog.Logger
	// Picture is the SVG timeline written. The default is
	// DefaultEffectsPicture.
	Picture string
}

// DefaultEffectsPicture is where the payment-provider scene draws its
// timelines unless told otherwise: in the dev data directory.
var DefaultEffectsPicture = filepath.Join(devstack.DefaultDataDir, "effects.svg")

// EffectsResult is what the payment-provider demo observed.
type EffectsResult struct {
	// Direct, Fenced and Crash are the three scenes as timelines: (a) the
	// holders call the provider themselves, (b) they record effects, (c)
	// the relay is killed mid-delivery.
	Direct, Fenced, Crash *timeline.Timeline
	// Picture is the absolute path of the SVG written.
	Picture string
	// DirectCharges is how many charges the provider made when both holders
	// called it themselves, each with its own idempotency key.
	DirectCharges int
	// StaleSQLState is the SQLSTATE the stalled holder's fenced
	// transaction failed with when it tried to record its charge as an
	// effect ("" if it was not refused).
	StaleSQLState string
	// EffectCharges is how many charges the provider made with effects.
	EffectCharges int
	// CrashRequests and CrashCharges are the provider's requests and
	// charges for the effect whose relay was killed between the provider's
	// answer and its own record, then restarted.
	CrashRequests, CrashCharges int
}

// OK reports the demo's verdict: without fencing two charges, with effects
// one, the stale holder refused with FG001, and one charge after the crash.
func (r *EffectsResult) OK() bool {
	return r.DirectCharges == 2 && r.EffectCharges == 1 && r.StaleSQLState == "FG001" && r.CrashCharges == 1 && r.CrashRequests >= 2
}

// ErrDoubleCharge is returned by Effects when the effects did not keep the
// card to one charge.
var ErrDoubleCharge = errors.New("demo: the card was charged more than once with effects")

// Effects plays the paused holder against a payment provider (a real HTTP
// server on loopback that honours Idempotency-Key): (a) both holders call
// the provider themselves and the card is charged twice; (b) each records
// the charge as an effect in its fenced transaction, the stalled holder's
// is refused inside PostgreSQL (FG001), and a relay sends the current
// holder's: one charge; (c) a relay process is killed between the
// provider's answer and its own record, and restarted: it sends again with
// the same key, and the provider still charges once.
func Effects(ctx context.Context, cfg EffectsConfig) (*EffectsResult, error) {
	if cfg.TTL <= 0 {
		cfg.TTL = time.Second
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default().With("component", "demo")
	}
	if cfg.ServiceLogger == nil {
		cfg.ServiceLogger = slog.New(slog.DiscardHandler)
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find own executable: %w", err)
		}
		cfg.Binary = exe
	}
	st, err := devstack.StartThrowaway(ctx, devstack.ThrowawayConfig{Prefix: stackPrefix, Postgres: cfg.Postgres, Redis: cfg.Redis,
		Logger: cfg.Logger, ServiceLogger: cfg.ServiceLogger})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	locks, err := DialLocks(st.RedisAddrs(), st.Tokens.URLs, lockclient.WithTTL(cfg.TTL), lockclient.WithKeyPrefix(randomPrefix()))
	if err != nil {
		return nil, err
	}
	defer locks.Close()
	prov := payprovider.Start(payprovider.Faults{})
	defer prov.Close()
	out := cfg.Out
	res := &EffectsResult{}
	say := func(format string, args ...any) { fmt.Fprintf(out, "  "+format+"\n", args...) }

	fmt.Fprintf(out, "A payment provider on %s charges once per Idempotency-Key. Two holders of the lock on order:42 (TTL %v);\nholder 1 stalls past its TTL between taking the lock and charging the card.\n\n", prov.URL(), cfg.TTL)

	// (a) Both call the provider themselves.
	fmt.Fprintln(out, "(a) each holder calls the provider itself, with its own idempotency key")
	res.Direct = timeline.New("(a) each holder calls the payment provider itself, with its own idempotency key", time.Now())
	res.Direct.AddLane(laneHolder1, laneHolder2, laneProvider)
	h1, h2, err := stalledPair(ctx, locks, "order:42", cfg.TTL, say, res.Direct)
	if err != nil {
		return nil, err
	}
	for _, h := range []struct {
		l    *lockclient.Lock
		lane string
		kind timeline.MarkKind
		name string
	}{{h2.l, laneHolder2, timeline.Accepted, "holder 2"}, {h1.l, laneHolder1, timeline.Stale, "holder 1 (stale)"}} {
		if err := postCharge(ctx, prov.URL(), h.l, randomPrefix()); err != nil {
			return nil, err
		}
		now := time.Now()
		res.Direct.Mark(h.lane, h.kind, now, fmt.Sprintf("charges the card with token %d", h.l.Token()))
		res.Direct.Mark(laneProvider, h.kind, now, fmt.Sprintf("charge %d of order 42", len(prov.Charges())))
		say("%s (token %d) charges the card directly", h.name, h.l.Token())
	}
	h1.hold(res.Direct, time.Now())
	h2.release(ctx, res.Direct)
	res.DirectCharges = len(prov.Charges())
	res.Direct.SetCaption(fmt.Sprintf("The provider charged order 42 %s: the stalled holder's call left, and a key of its own could not stop it.", times(res.DirectCharges)))
	say("provider: %d charges for order 42", res.DirectCharges)

	// (b) Effects.
	fmt.Fprintln(out, "\n(b) each holder records the charge as an effect in its fenced transaction (through the gate)")
	before := len(prov.Charges())
	db, err := pgx.Connect(ctx, st.ProxyDSN())
	if err != nil {
		return nil, fmt.Errorf("connect through the gate: %w", err)
	}
	defer db.Close(context.Background())
	res.Fenced = timeline.New("(b) each holder records the charge as an effect in its fenced transaction; a relay delivers it", time.Now())
	res.Fenced.AddLane(laneHolder1, laneHolder2, laneRelay, laneProvider)
	h1, h2, err = stalledPair(ctx, locks, "order:42", cfg.TTL, say, res.Fenced)
	if err != nil {
		return nil, err
	}
	record := func(l *lockclient.Lock) error {
		return l.InTx(ctx, db, func(tx pgx.Tx) error {
			_, err := l.Effect(ctx, tx, "payments", map[string]any{"order": 42, "amount_cents": 4999, "token": l.Token()})
			return err
		})
	}
	if err := record(h2.l); err != nil {
		return nil, fmt.Errorf("holder 2 records its charge: %w", err)
	}
	res.Fenced.Mark(laneHolder2, timeline.Accepted, time.Now(), fmt.Sprintf("effect with token %d committed", h2.l.Token()))
	say("holder 2 (token %d) commits its charge as an effect", h2.l.Token())
	err = record(h1.l)
	var pg interface{ SQLState() string }
	switch {
	case err == nil:
		res.Fenced.Mark(laneHolder1, timeline.Stale, time.Now(), fmt.Sprintf("effect with token %d committed", h1.l.Token()))
		say("holder 1 (token %d) committed an effect too: NOT REFUSED", h1.l.Token())
	case errors.As(err, &pg):
		res.StaleSQLState = pg.SQLState()
		res.Fenced.Mark(laneHolder1, timeline.Rejected, time.Now(), fmt.Sprintf("effect with token %d refused: %s", h1.l.Token(), res.StaleSQLState))
		say("holder 1 (token %d) is refused inside PostgreSQL: %s; its charge never leaves", h1.l.Token(), firstLine(err.Error()))
	default:
		return nil, fmt.Errorf("holder 1 records its charge: %w", err)
	}
	h1.hold(res.Fenced, time.Now())
	h2.release(ctx, res.Fenced)
	r, err := relay.New(relay.Config{DSN: st.DB.AdminDSN, Targets: []relay.Target{{Name: "payments", URL: prov.URL()}}, Poll: 50 * time.Millisecond, Logger: cfg.ServiceLogger})
	if err != nil {
		return nil, err
	}
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	go func() { r.Run(rctx, nil); close(relayDone) }() //nolint:errcheck
	if err := waitFor(ctx, 20*time.Second, func() bool { return len(prov.Charges()) > before }); err != nil {
		stopRelay()
		<-relayDone
		return nil, fmt.Errorf("the relay did not deliver holder 2's effect: %w", err)
	}
	res.Fenced.Mark(laneRelay, timeline.Note, time.Now(), "delivers holder 2's effect")
	res.Fenced.Mark(laneProvider, timeline.Accepted, time.Now(), "charge 1 of order 42")
	time.Sleep(200 * time.Millisecond) // room for a second charge, which must not come
	stopRelay()
	<-relayDone
	res.Fenced.Extend(time.Now())
	res.EffectCharges = len(prov.Charges()) - before
	res.Fenced.SetCaption(fmt.Sprintf("The provider charged order 42 %s: the stalled holder's effect was refused inside PostgreSQL (%s) before it could leave.", times(res.EffectCharges), res.StaleSQLState))
	say("relay: delivers the committed effect; provider: %d charge for order 42", res.EffectCharges)

	// (c) The relay dies between the provider's answer and its record.
	fmt.Fprintln(out, "\n(c) the relay is killed (SIGKILL) right after the provider charged, before it records the outcome")
	res.Crash = timeline.New("(c) the relay is killed (SIGKILL) after the provider charged, before it records the outcome", time.Now())
	res.Crash.AddLane(laneRelay1, laneRelay2, laneProvider)
	l, err := locks.Acquire(ctx, "order:43")
	if err != nil {
		return nil, err
	}
	if err := l.InTx(ctx, db, func(tx pgx.Tx) error {
		_, err := l.Effect(ctx, tx, "payments", map[string]any{"order": 43, "amount_cents": 1250})
		return err
	}); err != nil {
		return nil, err
	}
	l.Release(ctx) //nolint:errcheck
	before = len(prov.Charges())
	reqs0, _, _ := prov.Stats()
	var mu sync.Mutex
	var victim *exec.Cmd
	killed := make(chan struct{})
	var once sync.Once
	prov.SetOnCharge(func(payprovider.Charge) {
		mu.Lock()
		defer mu.Unlock()
		if victim != nil {
			once.Do(func() {
				victim.Process.Kill() //nolint:errcheck
				now := time.Now()
				res.Crash.Mark(laneProvider, timeline.Accepted, now, "charge 1 of order 43")
				res.Crash.Mark(laneRelay1, timeline.Note, now, "SIGKILL before it records the answer")
				close(killed)
			})
		}
	})
	start := func() (*exec.Cmd, error) {
		cmd := exec.CommandContext(ctx, cfg.Binary, "relay", "--db", st.DB.AdminDSN, "--target", "payments="+prov.URL(), "--poll", "50ms", "--min-backoff", "50ms")
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start the relay: %w", err)
		}
		return cmd, nil
	}
	mu.Lock()
	victim, err = start()
	mu.Unlock()
	if err != nil {
		return nil, err
	}

	select {
	case <-killed:
	case <-time.After(20 * time.Second):
		victim.Process.Kill() //nolint:errcheck
		victim.Wait()         //nolint:errcheck
		return nil, errors.New("the relay did not send order 43's effect")
	}
	victim.Wait() //nolint:errcheck
	say("relay 1 sent order 43's charge, the provider charged it, relay 1 died before recording it")
	prov.SetOnCharge(nil)
	again, err := start()
	if err != nil {
		return nil, err
	}

	err = waitFor(ctx, 20*time.Second, func() bool {
		var state string
		c, err := pgx.Connect(ctx, st.DB.AdminDSN)
		if err != nil {
			return false
		}
		defer c.Close(context.Background())
		c.QueryRow(ctx, "SELECT state FROM fencegate.effects WHERE payload->>'order' = '43'").Scan(&state) //nolint:errcheck
		return state == "delivered"
	})
	again.Process.Signal(os.Interrupt) //nolint:errcheck
	again.Wait()                       //nolint:errcheck
	if err != nil {
		return nil, fmt.Errorf("the restarted relay did not deliver order 43's effect: %w", err)
	}
	reqs1, _, _ := prov.Stats()
	res.CrashRequests = reqs1 - reqs0
	res.CrashCharges = len(prov.Charges()) - before
	now := time.Now()
	res.Crash.Mark(laneRelay2, timeline.Note, now, "re-sends with the same Idempotency-Key; records it")
	res.Crash.Mark(laneProvider, timeline.Note, now, "same key: answered again, not charged again")
	res.Crash.SetCaption(fmt.Sprintf("%d requests, order 43 charged %s: a relay that dies between the provider's answer and its record re-sends with the same key.", res.CrashRequests, times(res.CrashCharges)))
	say("relay 2 sent it again with the same Idempotency-Key: %d requests, %d charge for order 43", res.CrashRequests, res.CrashCharges)

	if err := writeEffectsPicture(cfg.Picture, res); err != nil {
		return nil, err
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "picture: %s\n", res.Picture)
	if res.OK() {
		fmt.Fprintln(out, "verdict: without fencing the stalled holder charged the card twice; with effects its charge was refused")
		fmt.Fprintln(out, "inside PostgreSQL (FG001) before it ever left, and a relay killed mid-delivery re-sent with the same key:")
		fmt.Fprintln(out, "one charge per order.")
		return res, nil
	}
	fmt.Fprintf(out, "verdict: FAILED: %+v\n", *res)
	return res, ErrDoubleCharge
}

// The lanes of the payment-provider scenes.
const (
	laneHolder1  = "holder 1"
	laneHolder2  = "holder 2"
	laneRelay    = "relay"
	laneRelay1   = "relay 1"
	laneRelay2   = "relay 2"
	laneProvider = "provider"
)

// holder is a lock of the scene and when its holder took it.
type holder struct {
	l    *lockclient.Lock
	lane string
	from time.Time
}

// release releases the lock and draws the hold and the lease up to now.
func (h holder) release(ctx context.Context, tl *timeline.Timeline) {
	h.l.Release(ctx) //nolint:errcheck
	now := time.Now()
	h.hold(tl, now)
	tl.Span(h.lane, timeline.Lease, h.from, now, "")
}

// hold draws the time the holder believed it held the lock, until to.
func (h holder) hold(tl *timeline.Timeline, to time.Time) {
	tl.Span(h.lane, timeline.Hold, h.from, to, fmt.Sprintf("token %d", h.l.Token()))
}

// stalledPair has holder 1 take the lock on resource and stall past its
// TTL, then holder 2 take it; it returns both and draws their leases on tl.
func stalledPair(ctx context.Context, locks *Locks, resource string, ttl time.Duration, say func(string, ...any), tl *timeline.Timeline) (h1, h2 holder, err error) {
	l1, err := locks.Acquire(ctx, resource)
	if err != nil {
		return h1, h2, err
	}
	h1 = holder{l: l1, lane: laneHolder1, from: time.Now()}
	say("holder 1 takes the lock: token %d; it still holds it: %v; then it stalls (a GC pause)", l1.Token(), held(l1))
	select {
	case <-l1.Done():
	case <-time.After(ttl + 5*time.Second):
		return h1, h2, errors.New("holder 1's lease did not end")
	}
	expired := time.Now()
	tl.Span(laneHolder1, timeline.Lease, h1.from, expired, "")
	tl.Mark(laneHolder1, timeline.Expiry, expired, fmt.Sprintf("lease expired (TTL %v) while it stalls", ttl))
	l2, err := locks.Acquire(ctx, resource)
	if err != nil {
		return h1, h2, err
	}
	h2 = holder{l: l2, lane: laneHolder2, from: time.Now()}
	say("holder 1's lease ends while it stalls; holder 2 takes the lock: token %d", l2.Token())
	return h1, h2, nil
}

// times words a count of charges.
func times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return fmt.Sprintf("%d times", n)
}

// writeEffectsPicture draws the three scenes into path (default
// DefaultEffectsPicture) and sets res.Picture to its absolute path.
func writeEffectsPicture(path string, res *EffectsResult) error {
	if path == "" {
		path = DefaultEffectsPicture
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if filepath.Dir(abs) == mustAbs(devstack.DefaultDataDir) {
		if _, err := devstack.PrepareDataDir(devstack.DefaultDataDir); err != nil {
			return err
		}
	}
	f, err := os.Create(abs)
	if err != nil {
		return fmt.Errorf("write picture: %w", err)
	}
	if err := timeline.WriteSVG(f, "A stalled lock holder and a payment provider, with and without effects", res.Direct, res.Fenced, res.Crash); err != nil {
		f.Close()
		return fmt.Errorf("write picture %s: %w", abs, err)
	}
	res.Picture = abs
	return f.Close()
}

// postCharge is what a holder without effects does: it calls the provider
// itself, with a key of its own request.
func postCharge(ctx context.Context, url string, l *lockclient.Lock, key string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"order": 42, "amount_cents": 4999}`))
	if err != nil {
		return err
	}
	relay.SetHeaders(req.Header, key, l.Resource(), l.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("charge: %w", err)
	}
	resp.Body.Close()
	return nil
}

func waitFor(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %v", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func randomPrefix() string {
	b := make([]byte, 6)
	rand.Read(b) //nolint:errcheck
	return "fgdemo-" + hex.EncodeToString(b) + ":"
}

func firstLine(s string) string { return strings.SplitN(s, "\n", 2)[0] }
