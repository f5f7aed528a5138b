package lockclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// TestWithTokens runs the tests that need real fencing tokens against one
// 3-node token cluster (in-process, real Raft over TCP): starting a cluster
// for each would cost seconds apiece.
func TestWithTokens(t *testing.T) {
	cluster := tokenservicetest.StartCluster(t, 3)
	for _, tc := range []struct {
		name string
		test func(*testing.T, *tokenservicetest.Cluster)
	}{
		{"MutualExclusion", testMutualExclusionTokens},
		{"TokenDiscardedWhenLostBeforeConfirm", testTokenDiscardedWhenLost},
		{"InTx", testInTx},
		{"PausedHolder", testPausedHolder},
		{"RedlockRestartDoubleGrant", testRedlockRestartDoubleGrant},
		{"CommitInFlight", testCommitInFlight},
		{"CommitOutcome", testCommitOutcome},
		{"KilledBeforeCommit", testKilledBeforeCommit},
		{"LapsedLeaseSaysLockLost", testLapsedLeaseSaysLockLost},
		{"ErrorMap", testErrorMap},
		{"SerializationRetry", testSerializationRetry},
		{"DeadlockRetry", testDeadlockRetry},
		{"FenceTimeoutRetry", testFenceTimeoutRetry},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, cluster) })
	}
}

// testMutualExclusionTokens: 50 goroutines contend for one resource with
// real tokens; never two inside at once, and the tokens strictly increase
// in the order the lock was held.
func testMutualExclusionTokens(t *testing.T, cluster *tokenservicetest.Cluster) {
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

// testTokenDiscardedWhenLost: a holder whose lock is lost between the
// grant and the confirmation never gets a Lock (the token it minted is
// discarded), so the next holder's token is the larger one.
func testTokenDiscardedWhenLost(t *testing.T, cluster *tokenservicetest.Cluster) {
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
