package tokenservice_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/history"
	"github.com/fencegate/fencegate/tokenclient"
)

// campaignFaults are the faults of the token campaign, pause-leader three
// times (the case the confirmation round exists for: a leader stopped with
// its reserved range in memory, resumed while a new leader hands out
// larger tokens).
var campaignFaults = []string{"pause-leader", "pause-leader", "pause-leader", "pause-follower", "kill-leader", "kill-all"}

// A fault campaign on the token service alone: three `fencegate token
// serve` processes on the read-index path, clients pinned to each node and
// one that follows the leader, and for 8 s random faults from
// campaignFaults; every run's history must be linearizable (porcupine) and
// pass the real-time check. FENCEGATE_TOKEN_CAMPAIGN_RUNS sets the number
// of runs (default 2), each on fresh processes with its own seed.
func TestTokenFaultCampaign(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs processes under faults for seconds")
	}
	runs := 2
	if v := os.Getenv("FENCEGATE_TOKEN_CAMPAIGN_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FENCEGATE_TOKEN_CAMPAIGN_RUNS=%q: give a number of runs, at least 1", v)
		}
		runs = n
	}
	var mu sync.Mutex
	total := map[string]int{}
	ops, failed := 0, 0
	for r := range runs {
		seed := uint64(r + 1)
		ok := t.Run(fmt.Sprintf("seed-%03d", seed), func(t *testing.T) {
			counts, n := campaignRun(t, seed)
			mu.Lock()
			defer mu.Unlock()
			for f, c := range counts {
				total[f] += c
			}
			ops += n
		})
		if !ok {
			failed++
		}
	}
	var fs []string
	for f, c := range total {
		fs = append(fs, fmt.Sprintf("%s x%d", f, c))
	}
	sort.Strings(fs)
	t.Logf("token campaign: %d runs, %d with a failed check; %d operations; faults %s", runs, failed, ops, strings.Join(fs, ", "))
}

// campaignRun is one run; it returns the faults injected and the number of
// operations checked.
func campaignRun(t *testing.T, seed uint64) (map[string]int, int) {
	procs, urls := startProcCluster(t, 3)
	var clients []*tokenclient.Client
	for _, us := range append([][]string{urls}, [][]string{{urls[0]}, {urls[1]}, {urls[2]}}...) {
		opts := []tokenclient.ClientOption{tokenclient.WithMaxWait(2 * time.Second), tokenclient.WithAttemptTimeout(time.Second)}
		if len(us) == 1 {
			opts = append(opts, tokenclient.WithFollowLeader(false))
		}
		cl, err := tokenclient.NewClient(us, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		clients = append(clients, cl)
	}
	l := startLoad(clients, 16)
	rng := rand.New(rand.NewPCG(seed, 0x70c3))
	counts := map[string]int{}
	stop := func(p *proc, hold time.Duration) {
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(hold)
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		f := campaignFaults[rng.IntN(len(campaignFaults))]
		counts[f]++
		leader := procLeader(t, clients[1:])
		hold := time.Duration(400+rng.IntN(1100)) * time.Millisecond
		switch f {
		case "pause-leader":
			stop(procs[leader], hold)
		case "pause-follower":
			stop(procs[(leader+1+rng.IntN(2))%3], hold)
		case "kill-leader":
			procs[leader].kill()
			time.Sleep(hold / 2)
			procs[leader].start()
		case "kill-all":
			var wg sync.WaitGroup
			for _, p := range procs {
				wg.Add(1)
				go func() { defer wg.Done(); p.kill() }()
			}
			wg.Wait()
			launchAll(t, procs)
		}
	}
	l.waitProgress(t, 50, "after the faults")
	ops := l.finish()
	history.Check(t, ops)
	t.Logf("seed %d: faults %v; %d operations checked", seed, counts, len(ops))
	return counts, len(ops)
}
