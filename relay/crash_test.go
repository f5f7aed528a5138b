package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/payprovider"
	"github.com/fencegate/fencegate/internal/testutil"
)

// TestRelayKilled runs real relay processes against a provider that
// answers 503, stalls past the relay's timeout, or charges and then resets
// the connection, while an application commits effects on four resources;
// in each of 100 runs two relays run at once and one of
// them is killed with SIGKILL at a random instant. A last relay then
// delivers what is left and is stopped with SIGTERM, which it drains.
// Every committed effect must be charged exactly once (the same effect
// never reaches the provider under two keys), the provider never charges a
// key twice, and each resource's effects are charged in commit order.
func TestRelayKilled(t *testing.T) {
	bin := testutil.Binary(t)
	s := newStack(t)
	app := s.db.AppConn(t)
	prov := payprovider.Start(payprovider.Faults{Unavailable: 0.15, Stall: 0.05, StallFor: 400 * time.Millisecond, CloseAfterCharge: 0.1})
	defer prov.Close()

	runs := 100
	args := []string{"relay", "--db", s.relayDSN, "--target", "pay=" + prov.URL(), "--timeout", "150ms", "--concurrency", "4",
		"--poll", "20ms", "--min-backoff", "5ms", "--max-backoff", "40ms", "--drain-timeout", "5s"}
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	seq := map[string]int{}
	committed := 0
	commit := func(k int) {
		for range k {
			r := fmt.Sprintf("acct:%d", rand.IntN(4))
			record(t, app, r, int64(committed+1), "pay", map[string]any{"resource": r, "seq": seq[r]})
			seq[r]++
			committed++
		}
	}
	begun := time.Now()
	survivor := start()
	for range runs {
		victim := start()
		commit(3)
		time.Sleep(time.Duration(rand.IntN(120)) * time.Millisecond)
		if rand.IntN(2) == 0 {
			victim, survivor = survivor, victim
		}
		victim.Process.Kill() //nolint:errcheck
		victim.Wait()         //nolint:errcheck
	}
	survivor.Process.Kill() //nolint:errcheck
	survivor.Wait()         //nolint:errcheck
	killed := time.Since(begun)

	// The last relay, on a provider that behaves.
	prov.SetFaults(payprovider.Faults{})
	// The last relay serves /healthz, and is stopped only once it answers:
	// a SIGTERM that came before the process set up its handlers would kill
	// it (when the survivors had already delivered everything, the wait
	// below ends at once).
	lastAddr := testutil.FreeAddr(t)
	last := exec.Command(bin, append(args, "--listen", lastAddr)...)
	if err := last.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the last relay to answer /healthz", func() bool {
		resp, err := http.Get("http://" + lastAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	var once sync.Once
	stopLast := func() {
		once.Do(func() {
			last.Process.Signal(syscall.SIGTERM) //nolint:errcheck
			done := make(chan error, 1)
			go func() { done <- last.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("relay after SIGTERM: %v, want a clean exit", err)
				}
			case <-time.After(20 * time.Second):
				last.Process.Kill() //nolint:errcheck
				t.Errorf("relay did not drain within 20s of SIGTERM")
			}
		})
	}
	defer stopLast()
	testutil.Eventually(t, 60*time.Second, "every committed effect delivered", func() bool {
		return states(t, s.admin)["delivered"] == committed
	})
	stopLast()

	charged := map[string]int{}
	order := map[string][]int{}
	for _, c := range prov.Charges() {
		var body struct {
			Resource string
			Seq      int
		}
		if err := json.Unmarshal(c.Body, &body); err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("%s#%d", body.Resource, body.Seq)
		charged[id]++
		order[body.Resource] = append(order[body.Resource], body.Seq)
	}
	if len(charged) != committed {
		t.Errorf("%d effects charged, %d committed", len(charged), committed)
	}
	for id, n := range charged {
		if n != 1 {
			t.Errorf("effect %s charged %d times (under different keys)", id, n)
		}
	}
	for r, seqs := range order {
		for i, v := range seqs {
			if v != i {
				t.Errorf("%s charged in order %v, want 0..%d", r, seqs, len(seqs)-1)
				break
			}
		}
	}
	var retried int
	if err := s.admin.QueryRow(context.Background(), "SELECT count(*) FROM fencegate.effects WHERE attempts > 1").Scan(&retried); err != nil {
		t.Fatal(err)
	}
	reqs, repeats, overlaps := prov.Stats()
	t.Logf("%d runs with kills in %v: %d effects committed, %d charged; %d requests, %d repeated a charged key, %d effects needed more than one recorded attempt, %d requests arrived while one of their key was in flight (a killed relay's)",
		runs, killed.Round(time.Millisecond), committed, len(charged), reqs, repeats, retried, overlaps)
	if repeats == 0 {
		t.Errorf("no request repeated a charged key: the kills and faults tested nothing")
	}
}
