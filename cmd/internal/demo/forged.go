package demo

// The forged-token scene: a database that requires signed tokens refuses a
// token the token service never minted (the largest bigint, with a made-up
// proof), a genuine token of another resource, a genuine token of another
// token cluster under the same keys, and a fence without proof, each
// without moving the resource's mark, while the legitimate holder writes
// before and after them.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/cmd/internal/devstack"
	"github.com/fencegate/fencegate/cmd/internal/timeline"
	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokensign"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrForgedAccepted means a forged, foreign or proofless fence was not
// refused, moved the mark, or a legitimate write did not commit: the scene
// failed to show what it exists to show.
var ErrForgedAccepted = errors.New("demo: a forged or foreign token was not refused, or the legitimate holder could not carry on")

// DefaultForgedPicture is where the forged-token scene draws its timeline
// unless told otherwise.
var DefaultForgedPicture = filepath.Join(devstack.DefaultDataDir, "forged-token.svg")

// ForgedConfig configures the forged-token scene.
type ForgedConfig struct {
	// Postgres is a DSN of a PostgreSQL superuser. The default is to find
	// one as "fencegate dev" does.
	Postgres string
	// Redis is host:port or redis:// URL of the Redis server the holder
	// locks on. The default is to find one as "fencegate dev" does.
	Redis string
	// TTL is the lock's time to live. The default is 5s.
	TTL time.Duration
	// Picture is the SVG file written. The default is DefaultForgedPicture.
	Picture string
	// Out receives the events and the verdict. The default is io.Discard.
	Out io.Writer
	// Logger gets progress logs. The default is slog.Default().
	Logger *slog.Logger
	// ServiceLogger gets the token nodes' logs. The default discards them.
	ServiceLogger *slog.Logger
}

// Attempt is one fence (and write) of the scene.
type Attempt struct {
	Who        string // "holder" or "attacker"
	What       string // what was tried
	Lane       string // its lane in the picture: "holder", or what the attacker tried
	Legitimate bool   // the holder's own token and proof: it must commit
	Token      int64
	Proof      string // "" for the two-argument fence
	OK         bool   // the transaction committed
	SQLState   string // of the error, when it failed
	Message    string
	MarkBefore int64 // the resource's mark before (0: none)
	MarkAfter  int64 // and after
	At         time.Time
}

// Pass reports whether the attempt went as it must: a legitimate write
// committed and advanced the mark to its token; any other attempt refused
// with WantState and the mark unchanged.
func (a *Attempt) Pass() bool {
	if a.Legitimate {
		return a.OK && a.MarkAfter == a.Token
	}
	return !a.OK && a.SQLState == a.WantState() && a.MarkAfter == a.MarkBefore
}

// WantState is the SQLSTATE a refused attempt must get: FG003 for the
// fence without proof, FG008 for a proof that does not verify; "" for a
// legitimate one.
func (a *Attempt) WantState() string {
	switch {
	case a.Legitimate:
		return ""
	case a.Proof == "":
		return fencegate.CodeMisuse
	}
	return fencegate.CodeBadProof
}

// ForgedResult is what the forged-token scene observed.
type ForgedResult struct {
	ClusterID      string // the token cluster the database trusts
	OtherClusterID string // the second cluster, same keys
	Attempts       []Attempt
	Charges        int    // rows in charges for order 42 at the end
	OrderState     string // order 42's state at the end
	Database       string // the scene's database, dropped at the end
	Roles          []string
	Picture        string // absolute path of the SVG written
	Timeline       *timeline.Timeline
}

// Refused reports the scene's verdict: every forged attempt refused with
// its SQLSTATE and no mark moved by one, and both legitimate writes
// committed.
func (r *ForgedResult) Refused() bool {
	legit := 0
	for i := range r.Attempts {
		a := &r.Attempts[i]
		if !a.Pass() {
			return false
		}
		if a.Legitimate {
			legit++
		}
	}
	return legit == 2 && len(r.Attempts) == 6 && r.Charges == 1 && r.OrderState == "shipped"
}

// ForgedToken runs the forged-token scene: it starts PostgreSQL (found or
// throwaway), Redis, a 3-node token cluster signing with keys generated for
// the run, and a second, 1-node cluster with the same keys; creates a
// database of its own with the demo tables protected, switched to require
// the first cluster's signed tokens; then plays the six attempts, prints
// them and writes the picture. The error is ErrForgedAccepted when the
// verdict is not Refused.
func ForgedToken(ctx context.Context, cfg ForgedConfig) (*ForgedResult, error) {
	if cfg.TTL <= 0 {
		cfg.TTL = 5 * time.Second
	}
	if cfg.Picture == "" {
		cfg.Picture = DefaultForgedPicture
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
	sc, err := startForgedStack(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer sc.close()
	res := &ForgedResult{ClusterID: sc.clusterID, OtherClusterID: sc.otherClusterID, Database: devstack.DatabaseOf(sc.st.DB.AdminDSN),
		Roles: []string{sc.st.DB.App, sc.st.DB.Owner}}
	printForgedIntro(cfg.Out, &cfg, sc)
	if err := sc.play(ctx, &cfg, res); err != nil {
		return nil, err
	}
	if res.Picture, err = filepath.Abs(cfg.Picture); err != nil {
		return nil, err
	}
	if filepath.Dir(res.Picture) == mustAbs(devstack.DefaultDataDir) {
		if _, err := devstack.PrepareDataDir(devstack.DefaultDataDir); err != nil {
			return nil, err
		}
	}
	if err := writeForgedPicture(res); err != nil {
		return nil, err
	}
	printForgedVerdict(cfg.Out, res)
	if !res.Refused() {
		return res, ErrForgedAccepted
	}
	return res, nil
}

// forgedScene is the running scene: the stack (PostgreSQL, Redis, the
// database and its roles), the two signing token clusters and the keys.
type forgedScene struct {
	st             *devstack.Stack
	otherTokens    *devstack.Tokens
	keys           *tokensign.Keyring
	trusted        []string // API URLs of the cluster the database trusts
	other          []string // of the second cluster
	clusterID      string
	otherClusterID string
}

// startForgedStack starts what the paused-holder stack starts, except that
// its token cluster signs, with a key generated for the run and never
// written down, and that a second, 1-node cluster with the same key runs
// beside it.
func startForgedStack(ctx context.Context, cfg *ForgedConfig) (_ *forgedScene, err error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	keys, err := tokensign.NewKeyring(tokensign.Key{ID: "demo", Secret: secret})
	if err != nil {
		return nil, err
	}
	s, err := devstack.StartThrowaway(ctx, devstack.ThrowawayConfig{Prefix: stackPrefix, Postgres: cfg.Postgres, Redis: cfg.Redis, SigningKeys: keys,
		Logger: cfg.Logger, ServiceLogger: cfg.ServiceLogger})
	if err != nil {
		return nil, err
	}
	sc := &forgedScene{st: s, keys: keys, trusted: s.Tokens.URLs, clusterID: s.Tokens.ClusterID}
	defer func() {
		if err != nil {
			sc.close()
		}
	}()
	sc.otherTokens, err = devstack.StartTokens(ctx, devstack.TokenOptions{DataDir: filepath.Join(s.DataDir, "tokens-other"), Nodes: 1,
		SigningKeys: keys, Logger: cfg.ServiceLogger.With("component", "tokenservice", "cluster", "other")})
	if err != nil {
		return nil, fmt.Errorf("start the other token cluster: %w", err)
	}
	sc.other, sc.otherClusterID = sc.otherTokens.URLs, sc.otherTokens.ClusterID
	if err := resetTables(ctx, s, true); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, s.DB.AdminDSN)
	if err != nil {
		return nil, fmt.Errorf("connect demo database: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := pgfence.RequireSigned(ctx, conn, sc.clusterID, sc.keys); err != nil {
		return nil, fmt.Errorf("require signed tokens in %s: %w", devstack.DatabaseOf(s.DB.AdminDSN), err)
	}
	return sc, nil
}

// close stops the other cluster, then the stack.
func (sc *forgedScene) close() {
	if sc.otherTokens != nil {
		sc.otherTokens.Close()
	}
	sc.st.Close()
}

// markOf reads resource's mark (0 when it has none) as the administrator.
func markOf(ctx context.Context, conn *pgx.Conn) (int64, error) {
	marks, err := pgfence.Marks(ctx, conn, resource)
	if err != nil {
		return 0, err
	}
	if len(marks) == 0 {
		return 0, nil
	}
	return marks[0].Token, nil
}

// play runs the six attempts and reads the order back.
func (sc *forgedScene) play(ctx context.Context, cfg *ForgedConfig, res *ForgedResult) error {
	p := &forgedPlay{ctx: ctx, cfg: cfg, res: res, sc: sc}
	defer p.close()
	if err := p.open(); err != nil {
		return err
	}

	start := time.Now()
	p.tl = timeline.New("forged, foreign and proofless tokens on a database that requires signed tokens", start)
	// One lane per kind of attack: the attacks come milliseconds apart, and
	// their labels would collide on one lane.
	p.tl.AddLane("holder", laneNeverMinted, laneOtherResource, laneOtherCluster, laneNoProof)
	res.Timeline = p.tl

	for _, step := range []func() error{p.holderCharges, p.neverMinted, p.foreignTokens, p.noProof, p.holderShips} {
		if err := step(); err != nil {
			return err
		}
	}

	if err := p.admin.QueryRow(ctx, `SELECT o.state, count(c.id) FROM orders o LEFT JOIN charges c ON c.order_id = o.id
		WHERE o.id = $1 GROUP BY o.id`, orderID).Scan(&res.OrderState, &res.Charges); err != nil {
		return fmt.Errorf("read order %d: %w", orderID, err)
	}
	p.tl.SetCaption(forgedCaption(res))
	return nil
}

// forgedPlay is one play of the scene: its database connections, token
// clients, lock client and timeline.
type forgedPlay struct {
	ctx context.Context
	cfg *ForgedConfig
	res *ForgedResult
	sc  *forgedScene

	admin   *pgx.Conn // the administrator, who reads the marks
	app     *pgx.Conn // the holder's, through the proxy
	direct  *pgx.Conn // the attacker's, straight to PostgreSQL
	trusted *tokenclient.Client
	other   *tokenclient.Client
	lc      *lockclient.Client
	tl      *timeline.Timeline
	closers []func() // run in reverse order by close
}

// open connects to the database and the token clusters and dials the lock.
func (p *forgedPlay) open() error {
	s := p.sc.st
	admin, err := pgx.Connect(p.ctx, s.DB.AdminDSN)
	if err != nil {
		return fmt.Errorf("connect demo database: %w", err)
	}
	p.admin = admin
	p.closers = append(p.closers, func() { admin.Close(context.Background()) })
	// The holder goes through the proxy, as a deployed application does;
	// the attacker skips it and talks to PostgreSQL straight, which
	// verifies the proofs itself.
	for _, c := range []struct {
		conn    **pgx.Conn
		proxied bool
	}{{&p.app, true}, {&p.direct, false}} {
		conn, err := connectApp(p.ctx, s, c.proxied)
		if err != nil {
			return err
		}
		*c.conn = conn
		p.closers = append(p.closers, func() { conn.Close(context.Background()) })
	}
	if p.trusted, err = tokenclient.NewClient(p.sc.trusted); err != nil {
		return err
	}
	p.closers = append(p.closers, func() { _ = p.trusted.Close() })
	if p.other, err = tokenclient.NewClient(p.sc.other); err != nil {
		return err
	}
	p.closers = append(p.closers, func() { _ = p.other.Close() })
	p.lc, err = lockclient.Dial(s.RedisAddrs(), p.trusted, lockclient.WithTTL(p.cfg.TTL),
		lockclient.WithKeyPrefix(pgdb.RandomName("fencegate:demo:")+":lock:"))
	if err != nil {
		return err
	}
	p.closers = append(p.closers, func() { _ = p.lc.Close() })
	return nil
}

// close closes what open opened, last first.
func (p *forgedPlay) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

// record makes attempt a by calling run, reads the mark before and after,
// and adds the attempt to the result, the terminal and the timeline.
func (p *forgedPlay) record(a Attempt, run func() error) error {
	before, err := markOf(p.ctx, p.admin)
	if err != nil {
		return err
	}
	a.MarkBefore = before
	a.At = time.Now()
	err = run()
	a.OK = err == nil
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		a.SQLState, a.Message = pgErr.Code, pgErr.Message
	case err != nil:
		return fmt.Errorf("%s: %w", a.What, err) // not an answer of the fence: the scene cannot judge it
	}
	if a.MarkAfter, err = markOf(p.ctx, p.admin); err != nil {
		return err
	}
	p.res.Attempts = append(p.res.Attempts, a)
	printAttempt(p.cfg.Out, len(p.res.Attempts), &a)
	kind := timeline.Rejected
	switch {
	case a.OK && a.Legitimate:
		kind = timeline.Accepted
	case a.OK:
		kind = timeline.Stale // a forged token got through: the damage the scene exists to rule out
	}
	p.tl.Mark(a.Lane, kind, a.At, attemptLabel(&a))
	return nil
}

// attack runs one fence with the given arguments on the attacker's
// connection, then a write, as a client that holds no lock would.
func (p *forgedPlay) attack(args ...any) func() error {
	return func() error {
		return pgx.BeginFunc(p.ctx, p.direct, func(tx pgx.Tx) error {
			q := fencegate.FenceSignedSQL
			if len(args) == 2 {
				q = fencegate.FenceSQL
			}
			if _, err := tx.Exec(p.ctx, q, args...); err != nil {
				return err
			}
			_, err := tx.Exec(p.ctx, "UPDATE orders SET state = 'refunded' WHERE id = $1", orderID)
			return err
		})
	}
}

// holderCharges is attempt 1: the holder takes the lock and charges the
// order.
func (p *forgedPlay) holderCharges() error {
	ctx := p.ctx
	acquired1 := time.Now()
	l1, err := p.lc.Acquire(ctx, resource)
	if err != nil {
		return fmt.Errorf("the holder takes the lock: %w", err)
	}
	err = p.record(Attempt{Who: "holder", Lane: "holder", What: "the holder fences with its token and proof, charges order 42", Legitimate: true,
		Token: l1.Token(), Proof: l1.Proof()}, func() error {
		return l1.InTx(ctx, p.app, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO charges (order_id, amount_cents, by_client, token) SELECT id, amount_cents, 'holder', $2 FROM orders WHERE id = $1", orderID, l1.Token()); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE orders SET state = 'paid' WHERE id = $1", orderID)
			return err
		})
	})
	if err != nil {
		return err
	}
	releaseAt := time.Now()
	if err := l1.Release(ctx); err != nil {
		return fmt.Errorf("the holder releases the lock: %w", err)
	}
	p.tl.Span("holder", timeline.Hold, acquired1, releaseAt, fmt.Sprintf("token %d", l1.Token()))
	return nil
}

// neverMinted is attempt 2: a token never minted, the largest bigint, with
// a made-up proof under the database's own key id.
func (p *forgedPlay) neverMinted() error {
	fake := make([]byte, tokensign.MACBytes)
	if _, err := rand.Read(fake); err != nil {
		return err
	}
	forged := p.sc.keys.SigningKeyID() + "." + hex.EncodeToString(fake)
	return p.record(Attempt{Who: "attacker", Lane: laneNeverMinted, What: "a token never minted (the largest bigint) with a made-up proof",
		Token: math.MaxInt64, Proof: forged}, p.attack(resource, int64(math.MaxInt64), forged))
}

// foreignTokens is attempts 3 and 4: a genuine token and proof minted for
// another resource, then a genuine token of the second cluster (same keys,
// another cluster id), its counter raised above the first's so that only
// the proof can refuse it.
func (p *forgedPlay) foreignTokens() error {
	ctx := p.ctx
	tok, err := p.trusted.Next(ctx, "order:43")
	if err != nil {
		return fmt.Errorf("mint a token for order:43: %w", err)
	}
	if err := p.record(Attempt{Who: "attacker", Lane: laneOtherResource, What: "a genuine token and proof minted for order:43, used on order:42",
		Token: tok.Value, Proof: tok.Proof}, p.attack(resource, tok.Value, tok.Proof)); err != nil {
		return err
	}

	if _, err := p.other.RaiseCounter(ctx, tok.Value+1000); err != nil {
		return fmt.Errorf("raise the second cluster's counter: %w", err)
	}
	foreign, err := p.other.Next(ctx, resource)
	if err != nil {
		return fmt.Errorf("mint a token on the second cluster: %w", err)
	}
	return p.record(Attempt{Who: "attacker", Lane: laneOtherCluster, What: fmt.Sprintf("a genuine token and proof of another cluster (%s), same keys", p.sc.otherClusterID),
		Token: foreign.Value, Proof: foreign.Proof}, p.attack(resource, foreign.Value, foreign.Proof))
}

// noProof is attempt 5: the two-argument fence, without proof.
func (p *forgedPlay) noProof() error {
	return p.record(Attempt{Who: "attacker", Lane: laneNoProof, What: "the two-argument fence, without proof (the largest bigint)",
		Token: math.MaxInt64}, p.attack(resource, int64(math.MaxInt64)))
}

// holderShips is attempt 6: the holder takes the lock again and carries on.
func (p *forgedPlay) holderShips() error {
	ctx := p.ctx
	acquired2 := time.Now()
	l2, err := p.lc.Acquire(ctx, resource)
	if err != nil {
		return fmt.Errorf("the holder takes the lock again: %w", err)
	}
	err = p.record(Attempt{Who: "holder", Lane: "holder", What: "the holder takes the lock again, fences with its next token, ships order 42", Legitimate: true,
		Token: l2.Token(), Proof: l2.Proof()}, func() error {
		return l2.InTx(ctx, p.app, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE orders SET state = 'shipped' WHERE id = $1 AND state = 'paid'", orderID)
			return err
		})
	})
	if err != nil {
		return err
	}
	released2 := time.Now()
	if err := l2.Release(ctx); err != nil {
		return fmt.Errorf("the holder releases the lock: %w", err)
	}
	p.tl.Span("holder", timeline.Hold, acquired2, released2, fmt.Sprintf("token %d", l2.Token()))
	p.tl.Extend(released2)
	return nil
}

// connectApp connects to the demo database as the application role,
// through the proxy when proxied, else straight to PostgreSQL.
func connectApp(ctx context.Context, s *devstack.Stack, proxied bool) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(appDSN(s, proxied))
	if err != nil {
		return nil, fmt.Errorf("demo database DSN: %w", err)
	}
	cc.Password = s.DB.AppPassword
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connect demo database as %s: %w", s.DB.App, err)
	}
	return conn, nil
}

// The attacker's lanes in the picture.
const (
	laneNeverMinted   = "never minted"
	laneOtherResource = "other resource"
	laneOtherCluster  = "other cluster"
	laneNoProof       = "no proof"
)

func attemptLabel(a *Attempt) string {
	if a.OK {
		return fmt.Sprintf("%s: committed, mark %d -> %d", shortTok(a.Token), a.MarkBefore, a.MarkAfter)
	}
	return fmt.Sprintf("%s: refused %s, mark stays %d", shortTok(a.Token), a.SQLState, a.MarkAfter)
}

func shortTok(t int64) string {
	if t == math.MaxInt64 {
		return "token 2^63-1"
	}
	return fmt.Sprintf("token %d", t)
}

func forgedCaption(r *ForgedResult) string {
	refused := 0
	for _, a := range r.Attempts {
		if !a.Legitimate && a.Pass() {
			refused++
		}
	}
	charged := fmt.Sprintf("%d times", r.Charges)
	if r.Charges == 1 {
		charged = "once"
	}
	return fmt.Sprintf("%d of 4 forged or foreign fences refused, mark unchanged; order 42 charged %s, now %s.",
		refused, charged, r.OrderState)
}

func printForgedIntro(w io.Writer, cfg *ForgedConfig, sc *forgedScene) {
	s := sc.st
	fmt.Fprintln(w, "Forged, foreign and proofless tokens against a database that requires signed tokens.")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  PostgreSQL   %s (%s), database %s, dropped at the end\n", hostOf(s.Postgres.DSN), s.Postgres.Source, devstack.DatabaseOf(s.DB.AdminDSN))
	fmt.Fprintf(w, "  roles        clients log in as %s; %s (NOLOGIN) owns schema fencegate and the tables\n", s.DB.App, s.DB.Owner)
	fmt.Fprintf(w, "  Redis        %s (%s)\n", s.Redis.Addr, s.Redis.Source)
	fmt.Fprintf(w, "  tokens       cluster %s, 3 nodes, signing with key %q made for this run: %s\n", sc.clusterID, sc.keys.SigningKeyID(), strings.Join(sc.trusted, " "))
	fmt.Fprintf(w, "               cluster %s, 1 node, the same key: %s\n", sc.otherClusterID, strings.Join(sc.other, " "))
	fmt.Fprintf(w, "  proxy        %s -> PostgreSQL: the holder writes through it; the attacker skips it\n", s.ProxyAddr)
	fmt.Fprintf(w, "  database     requires signed tokens of cluster %s (pgfence.RequireSigned, as 'fencegate schema require-signed')\n", sc.clusterID)
	fmt.Fprintf(w, "  lock TTL     %v\n", cfg.TTL)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Order 42's rows belong to resource %q (orders and charges protected). Each attempt fences, then writes.\n", resource)
	fmt.Fprintln(w)
}

func printAttempt(w io.Writer, n int, a *Attempt) {
	result := "committed"
	if !a.OK {
		result = "refused, SQLSTATE " + a.SQLState
	}
	verdict := "as it must"
	if !a.Pass() {
		verdict = "NOT AS IT MUST"
		if !a.Legitimate {
			verdict += fmt.Sprintf(" (want %s, mark unchanged)", a.WantState())
		}
	}
	fmt.Fprintf(w, "%d. %-8s %s\n", n, a.Who, a.What)
	fmt.Fprintf(w, "   %s, proof %s\n", shortTok(a.Token), proofText(a.Proof))
	fmt.Fprintf(w, "   -> %s; mark %d -> %d; %s\n", result, a.MarkBefore, a.MarkAfter, verdict)
	if !a.OK && a.Message != "" {
		fmt.Fprintf(w, "   %s\n", a.Message)
	}
}

func proofText(p string) string {
	if p == "" {
		return "none"
	}
	if len(p) > 24 {
		return p[:24] + "..."
	}
	return p
}

func printForgedVerdict(w io.Writer, r *ForgedResult) {
	fmt.Fprintln(w)
	_ = r.Timeline.WriteText(w, 72, 0, false)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Picture: %s\n", r.Picture)
	if r.Refused() {
		fmt.Fprintln(w, "Verdict: every forged, foreign or proofless fence was refused and moved no mark; the legitimate holder wrote before and after.")
		return
	}
	fmt.Fprintln(w, "Verdict: FAILED: "+forgedCaption(r))
}

func writeForgedPicture(r *ForgedResult) error {
	f, err := os.Create(r.Picture)
	if err != nil {
		return fmt.Errorf("write picture: %w", err)
	}
	if err := timeline.WriteSVG(f, "fencegate: forged and foreign tokens refused", r.Timeline); err != nil {
		f.Close()
		return fmt.Errorf("write picture %s: %w", r.Picture, err)
	}
	return f.Close()
}
