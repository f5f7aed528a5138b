package lockclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
)

func TestRetryStrategies(t *testing.T) {
	for _, tc := range []struct {
		name     string
		r        RetryStrategy
		attempt  int
		min, max time.Duration
		ok       bool
	}{
		{"none", NoRetry(), 1, 0, 0, false},
		{"fixed", FixedRetry(100 * time.Millisecond), 7, 50 * time.Millisecond, 100 * time.Millisecond, true},
		{"exp first", ExponentialRetry(10*time.Millisecond, time.Second), 1, 5 * time.Millisecond, 10 * time.Millisecond, true},
		{"exp third", ExponentialRetry(10*time.Millisecond, time.Second), 3, 20 * time.Millisecond, 40 * time.Millisecond, true},
		{"exp capped", ExponentialRetry(10*time.Millisecond, 50*time.Millisecond), 30, 25 * time.Millisecond, 50 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 100 {
				d, ok := tc.r.Delay(tc.attempt)
				if ok != tc.ok {
					t.Fatalf("Delay(%d) ok=%v, want %v", tc.attempt, ok, tc.ok)
				}
				if ok && (d < tc.min || d > tc.max) {
					t.Fatalf("Delay(%d)=%v, want within [%v, %v]", tc.attempt, d, tc.min, tc.max)
				}
			}
		})
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	nodes := []redis.UniversalClient{rdb}
	for _, tc := range []struct {
		name  string
		nodes []redis.UniversalClient
		opts  []Option
		want  string
	}{
		{"no nodes", nil, nil, "no Redis nodes"},
		{"nil node", []redis.UniversalClient{nil}, nil, "is nil"},
		{"short TTL", nodes, []Option{WithTTL(time.Millisecond)}, "too short"},
		{"zero node timeout", nodes, []Option{WithNodeTimeout(0)}, "must be positive"},
		{"drift", nodes, []Option{WithDriftFactor(0.7)}, "drift factor"},
		{"nil retry", nodes, []Option{WithRetry(nil)}, "NoRetry"},
		{"refresh too slow", nodes, []Option{WithTTL(time.Second), WithAutoRefresh(2 * time.Second)}, "shorter than the TTL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.nodes, nil, tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	c, err := New([]redis.UniversalClient{rdb, rdb, rdb, rdb, rdb}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Quorum(), 3; got != want {
		t.Fatalf("Quorum()=%d, want %d", got, want)
	}
}

func TestNotAcquiredError(t *testing.T) {
	nodeErr := newNodeError("b:6379", context.DeadlineExceeded)
	err := error(&NotAcquiredError{Resource: "r", Granted: []string{"a:6379"}, Taken: []string{"c:6379"},
		Failed: []string{"b:6379"}, Nodes: 3, Quorum: 2, NodeErrs: errors.Join(nodeErr)})
	if !errors.Is(err, ErrNotAcquired) {
		t.Fatal("errors.Is(err, ErrNotAcquired) = false")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("the node's error is not reachable")
	}
	var ne *NodeError
	if !errors.As(err, &ne) || ne.Node != "b:6379" {
		t.Fatalf("errors.As NodeError: %v", ne)
	}
	if !errors.Is(err, NodeUnreachable) || errors.Is(err, NodeAuthFailed) {
		t.Fatal("the node error's kind is not reachable, or the wrong one is")
	}
	want := `lockclient: lock "r" not acquired: 1 of 3 nodes granted, 2 needed; refused (held by another client) on c:6379; failed on b:6379: b:6379: unreachable: context deadline exceeded`
	if got := err.Error(); got != want {
		t.Fatalf("Error()=%q\nwant     %q", got, want)
	}
}

func TestFenceErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		code string
		want error
	}{
		{fencegate.CodeStaleToken, ErrStaleToken},
		{fencegate.CodeUnfenced, ErrUnfenced},
		{fencegate.CodeMisuse, ErrFenceMisuse},
		{fencegate.CodeFenceTimeout, ErrFenceTimeout},
		{fencegate.CodeSchemaInvalid, ErrSchemaInvalid},
		{fencegate.CodeProtectedDDL, ErrProtectedDDL},
		{fencegate.CodePrivilegedRole, ErrPrivilegedRole},
	} {
		t.Run(tc.code, func(t *testing.T) {
			pgErr := &pgconn.PgError{Code: tc.code, Message: "fencegate: rejected"}
			err := fenceError(fmt.Errorf("exec: %w", pgErr))
			if !errors.Is(err, tc.want) {
				t.Fatalf("%v does not match %v", err, tc.want)
			}
			var got *pgconn.PgError
			if !errors.As(err, &got) || got.Code != tc.code {
				t.Fatalf("PgError not reachable through %v", err)
			}
		})
	}
	if err := fenceError(fenceError(&pgconn.PgError{Code: fencegate.CodeStaleToken})); !strings.HasPrefix(err.Error(), ErrStaleToken.Error()+": ") ||
		strings.Count(err.Error(), ErrStaleToken.Error()) != 1 {
		t.Fatalf("fenceError twice: %q, want the sentinel once", err)
	}
	other := &pgconn.PgError{Code: "23505"}
	if err := fenceError(other); errors.Is(err, ErrStaleToken) || err != error(other) {
		t.Fatalf("fenceError(23505)=%v, want it unchanged", err)
	}
}

func TestInTxWithoutToken(t *testing.T) {
	l := &Lock{resource: "r"}
	if err := l.InTx(context.Background(), nil, nil); !errors.Is(err, ErrNoToken) {
		t.Fatalf("InTx without a token: %v, want ErrNoToken", err)
	}
}

// TestNotAcquiredWords: the error says which step failed and what the nodes
// answered. A node that refuses the confirmation after the token (or a
// refresh) answers that the key is gone or holds another value, which it
// also answers when it never held this grant: the words claim no more. A
// majority that answered yes after the validity reads as such for every
// step; a context that ended first is not reported as a lapsed validity.
func TestNotAcquiredWords(t *testing.T) {
	c := &Client{quorum: 2, nodes: []*node{{name: "a:6379"}, {name: "b:6379"}, {name: "c:6379"}}}
	answers := func(ok, refused int, ctxErr error) *tally {
		t := &tally{state: make([]uint8, 3), wrote: make([]bool, 3), ctxErr: ctxErr}
		for i := range ok {
			t.state[i], t.ok = stateOK, t.ok+1
		}
		for i := ok; i < ok+refused; i++ {
			t.state[i], t.no = stateRefused, t.no+1
		}
		return t
	}
	for _, tc := range []struct {
		name string
		step uint8
		t    *tally
		want string
	}{
		{"grant refused", stepGrant, answers(1, 2, nil),
			`lockclient: lock "r" not acquired: 1 of 3 nodes granted, 2 needed; refused (held by another client) on b:6379, c:6379`},
		{"grant too late", stepGrant, answers(2, 0, nil),
			`lockclient: lock "r" not acquired: 2 of 3 nodes granted, 2 needed, but only after the validity had passed`},
		{"confirmation refused", stepConfirm, answers(1, 2, nil),
			`lockclient: lock "r" not acquired: granted, but confirmed after the token on 1 of 3 nodes, 2 needed; refused (the key is gone or holds another value) on b:6379, c:6379`},
		{"confirmation too late", stepConfirm, answers(3, 0, nil),
			`lockclient: lock "r" not acquired: granted, but confirmed after the token on 3 of 3 nodes, 2 needed, but only after the validity had passed`},
		{"refresh refused", stepRefresh, answers(0, 3, nil),
			`lockclient: lock "r" not extended: 0 of 3 nodes extended it, 2 needed; refused (the key is gone or holds another value) on a:6379, b:6379, c:6379`},
		{"context ended", stepConfirm, answers(2, 0, context.Canceled),
			`lockclient: lock "r" not acquired: granted, but confirmed after the token on 2 of 3 nodes, 2 needed` + "\ncontext canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.notAcquired("r", tc.step, tc.t)
			if got := err.Error(); got != tc.want {
				t.Fatalf("Error()=%q\nwant     %q", got, tc.want)
			}
			var nae *NotAcquiredError
			if !errors.As(err, &nae) || nae.Expired != strings.Contains(tc.want, "validity had passed") {
				t.Fatalf("Expired=%v for %q", nae.Expired, err)
			}
		})
	}
}
