package lockclient

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// TestCleanupOnLateMaster: a master paused (SIGSTOP) while an attempt
// writes to it answers nothing within the node timeout, so the attempt
// fails and its release times out too; when the master resumes (SIGCONT)
// it applies the SET it had received. The client must still remove that
// key, long before its TTL. Before, the key lived its whole TTL (seen: the
// test waited 15 s of a 30 s TTL and the key was still there, with one
// master and with three).
func TestCleanupOnLateMaster(t *testing.T) {
	const ttl = 30 * time.Second
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d masters", n), func(t *testing.T) {
			tr := startMasters(t, n)
			ctx := ctxT(t)
			res := "late-" + testutil.RandomName("")
			if n == 3 {
				// Another client holds the lock on master 1, master 2
				// grants, master 0 is paused: no quorum, the attempt fails.
				if err := tr.clients[1].Set(ctx, tr.prefix+res, "another client", ttl).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var addrs []string
			for _, s := range tr.servers {
				addrs = append(addrs, s.Addr())
			}
			c, err := Dial(addrs, nil, WithTTL(ttl), WithKeyPrefix(tr.prefix), WithLogger(testutil.Logger(t)))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Connections are open before the pause, as in a running program.
			if l, err := c.Acquire(ctx, res+"-warm"); err != nil {
				t.Fatal(err)
			} else {
				l.Release(ctx)
			}
			tr.servers[0].Pause()
			actx, cancel := context.WithTimeout(ctx, time.Second)
			_, err = c.Acquire(actx, res)
			cancel()
			var nae *NotAcquiredError
			if !errors.As(err, &nae) {
				tr.servers[0].Resume()
				t.Fatalf("TryAcquire with master 0 paused: %v; want a *NotAcquiredError", err)
			}
			tr.servers[0].Resume()
			testutil.WaitFor(t, ttl/2, "the late master's key to be removed", func() error {
				v := tr.values(t, res)
				if v[0] != "" {
					return fmt.Errorf("master 0 holds %q", v[0])
				}
				if n == 3 && (v[1] != "another client" || v[2] != "") {
					return fmt.Errorf("masters hold %q", v)
				}
				return nil
			})
		})
	}
}
