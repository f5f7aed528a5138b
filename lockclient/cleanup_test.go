package lockclient

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/redis/go-redis/v9"
)

// resentSet makes a SET NX look refused although it succeeded: it sends
// the command twice and reports the second answer, as a client library
// that resends a command whose reply was lost does. The key then holds
// the caller's own value, and the node says "refused".
type resentSet struct{}

func (resentSet) DialHook(next redis.DialHook) redis.DialHook { return next }

func (resentSet) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "set" {
			_ = next(ctx, redis.NewStatusCmd(ctx, cmd.Args()...)) // the reply that was lost
		}
		return next(ctx, cmd)
	}
}

func (resentSet) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// lateSet makes a node answer SET after the node timeout: the SET is
// applied, the answer comes too late to count.
type lateSet struct{ d time.Duration }

func (lateSet) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h lateSet) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "set" {
			time.Sleep(h.d)
		}
		return err
	}
}

func (lateSet) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestCleanupEverywhere: a failed attempt deletes its key on every node
// where it may be: on one that answered "refused" because a resent SET
// found the key the first one set, and on one whose answer came after the
// node timeout; a key another client holds stays.
func TestCleanupEverywhere(t *testing.T) {
	t.Run("single node, reply lost and SET resent", func(t *testing.T) {
		tr := sharedRedis(t)
		tr.clients[0].(*redis.Client).AddHook(resentSet{})
		c := tr.client(t, nil, WithTTL(30*time.Second), WithRetry(NoRetry()))
		_, err := c.TryAcquire(ctxT(t), "resent")
		var nae *NotAcquiredError
		if !errors.As(err, &nae) || len(nae.Taken) != 1 {
			t.Fatalf("TryAcquire: %v, want a refusal", err)
		}
		if v := tr.values(t, "resent"); v[0] != "" {
			t.Fatalf("the caller's own key %q stays after the failed attempt", v[0])
		}
	})

	t.Run("redlock: held, resent, late, granted", func(t *testing.T) {
		tr := startMasters(t, 4)
		const nodeTimeout = 200 * time.Millisecond
		ctx := ctxT(t)
		if err := tr.clients[0].Set(ctx, tr.prefix+"mixed", "another client", 30*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		tr.clients[1].(*redis.Client).AddHook(resentSet{})
		tr.clients[2].(*redis.Client).AddHook(lateSet{d: 3 * nodeTimeout})
		c := tr.client(t, nil, WithTTL(30*time.Second), WithRetry(NoRetry()), WithNodeTimeout(nodeTimeout))
		_, err := c.TryAcquire(ctx, "mixed")
		var nae *NotAcquiredError
		if !errors.As(err, &nae) {
			t.Fatalf("TryAcquire: %v, want a *NotAcquiredError", err)
		}
		t.Logf("TryAcquire: %v", err)
		// Two refusals make a quorum of 3 out of 4 impossible: the attempt
		// may end before the other two answer.
		if len(nae.Taken) != 2 {
			t.Fatalf("taken %v, want the 2 refusing nodes", nae.Taken)
		}
		testutil.WaitFor(t, 10*time.Second, "the attempt's keys to go (the TTL is 30s)", func() error {
			v := tr.values(t, "mixed")
			if v[0] != "another client" {
				return fmt.Errorf("the other client's key was touched: %q", v[0])
			}
			for i, s := range v[1:] {
				if s != "" {
					return fmt.Errorf("node %d still holds %q", i+1, s)
				}
			}
			return nil
		})
	})
}
