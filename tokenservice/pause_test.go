package tokenservice_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/history"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenclient"
)

// The leader process is paused (SIGSTOP) under load and resumed, three
// times, while clients pinned to each node keep asking, so requests reach
// the old leader before, during and after its pause. On the read-index
// path a resumed leader still holds its reserved range and, until Raft
// tells it otherwise, believes it leads; its confirmation rounds are what
// keep it from handing out tokens below the new leader's. The history
// must be linearizable (porcupine) and pass the real-time check.
func TestPausedLeaderProcessLinearizable(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("pauses processes for seconds")
	}
	procs, urls := startProcCluster(t, 3)
	var clients []*tokenclient.Client
	for _, u := range urls {
		cl, err := tokenclient.NewClient([]string{u}, tokenclient.WithFollowLeader(false),
			tokenclient.WithMaxWait(2*time.Second), tokenclient.WithAttemptTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		clients = append(clients, cl)
	}
	l := startLoad(clients, 24)
	defer func() {
		// Resume every process, whatever happened, before the cleanup
		// kills them.
		for _, p := range procs {
			if p.cmd != nil {
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
			}
		}
	}()
	for round := range 3 {
		l.waitProgress(t, 200, fmt.Sprintf("before pause %d", round))
		leader := procLeader(t, clients)
		p := procs[leader]
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// The other two elect a leader and serve meanwhile.
		l.waitProgress(t, 100, fmt.Sprintf("while %s is paused", p.name))
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		t.Logf("pause %d: %s paused while the others served, then resumed", round, p.name)
	}
	l.waitProgress(t, 200, "after the last pause")
	ops := l.finish()
	history.Check(t, ops)
	t.Logf("%d operations checked", len(ops))
}

// procLeader returns the index of the node whose own status says it leads.
func procLeader(t *testing.T, clients []*tokenclient.Client) int {
	t.Helper()
	leader := -1
	testutil.WaitFor(t, 20*time.Second, "a leader", func() error {
		for i, cl := range clients {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cl.Status(ctx)
			cancel()
			if err == nil && st.State == "Leader" && st.ReadIndex != nil {
				leader = i
				return nil
			}
		}
		return fmt.Errorf("no node says it leads")
	})
	return leader
}
