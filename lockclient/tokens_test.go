package lockclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/tokentest"
)

// TestMutualExclusionTokens: 50 goroutines contend for one resource with
// real tokens from a 3-node token cluster; never two inside at once, and
// the tokens strictly increase in the order the lock was held.
func TestMutualExclusionTokens(t *testing.T) {
	cluster := tokentest.StartCluster(t, 3)
	tokens := cluster.Client(t)
	for _, tc := range []struct {
		name  string
		redis func(*testing.T) *testRedis
	}{
		{"single", sharedRedis},
		{"redlock5", func(t *testing.T) *testRedis { return startMasters(t, 5) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := tc.redis(t)
			c := tr.client(t, tokens, WithTTL(10*time.Second))
			order := contend(t, c, "mutex-"+tc.name, 50)
			if got := len(order); got != 50 {
				t.Fatalf("holds=%d, want 50", got)
			}
			for i := 1; i < len(order); i++ {
				if order[i] <= order[i-1] {
					t.Fatalf("token #%d=%d after #%d=%d: not strictly increasing in hold order: %v",
						i, order[i], i-1, order[i-1], order)
				}
			}
		})
	}
}

// TestTokenAfterGrantThenConfirm: a holder whose lock is lost between the
// grant and the confirmation never gets a Lock (the token it minted is
// discarded), so the next holder's token is the larger one.
func TestTokenAfterGrantThenConfirm(t *testing.T) {
	cluster := tokentest.StartCluster(t, 3)
	tr := sharedRedis(t)
	// The token source deletes the key while the token is being minted,
	// as an expiry during a long pause there would.
	stealing := &stealingSource{TokenSource: cluster.Client(t), del: func(ctx context.Context) error {
		return tr.clients[0].Del(ctx, tr.prefix+"r").Err()
	}}
	c := tr.client(t, stealing, WithRetry(NoRetry()))
	_, err := c.TryAcquire(ctxT(t), "r")
	var nae *NotAcquiredError
	if !errors.As(err, &nae) || len(nae.Taken) != 1 {
		t.Fatalf("TryAcquire with the lock lost before confirmation: %v, want a *NotAcquiredError with the node in Taken", err)
	}
	if stealing.last == 0 {
		t.Fatal("no token minted")
	}
	next := mustAcquire(t, tr.client(t, cluster.Client(t)), "r")
	defer next.Release(context.Background())
	if next.Token() <= stealing.last {
		t.Fatalf("next holder's token %d <= discarded token %d", next.Token(), stealing.last)
	}
}

type stealingSource struct {
	TokenSource
	del  func(context.Context) error
	last int64
}

func (s *stealingSource) NextToken(ctx context.Context, resource string) (int64, error) {
	tok, err := s.TokenSource.NextToken(ctx, resource)
	s.last = tok
	if err == nil {
		err = s.del(ctx)
	}
	return tok, err
}

// TestRedlockRestartDoubleGrant: three of five masters restart without
// persistence while A holds the lock; B is granted the same lock (the double
// grant Redlock's restart caveat warns of) with a larger token, and A's
// refresh finds the lock lost.
func TestRedlockRestartDoubleGrant(t *testing.T) {
	cluster := tokentest.StartCluster(t, 3)
	tokens := cluster.Client(t)
	tr := startMasters(t, 5)
	c := tr.client(t, tokens, WithTTL(30*time.Second), WithRetry(NoRetry()))
	a := mustAcquire(t, c, "acct")
	for _, s := range tr.servers[:3] {
		s.Kill()
		s.Start()
	}
	b, err := c.TryAcquire(ctxT(t), "acct")
	if err != nil {
		t.Fatalf("B's TryAcquire after 3 masters restarted: %v", err)
	}
	defer b.Release(context.Background())
	select {
	case <-a.Done():
		t.Fatal("A already knows it lost the lock; the double grant is invisible to it until it refreshes")
	default:
	}
	if b.Token() <= a.Token() {
		t.Fatalf("B's token %d <= A's %d", b.Token(), a.Token())
	}
	if err := a.Refresh(ctxT(t)); !errors.Is(err, ErrLockLost) {
		t.Fatalf("A.Refresh after the double grant: %v, want ErrLockLost", err)
	}
}
