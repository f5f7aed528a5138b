package faults

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// campaignResult is what a campaign run by a test produced.
type campaignResult struct {
	sum *Summary
	out string
	err error
}

// runCampaign runs cfg with the test's binary, report dir and logger. It
// makes no assertion, so it may run on any goroutine.
func runCampaign(t *testing.T, cfg Config) campaignResult {
	cfg.Binary = testutil.Binary(t)
	cfg.ReportDir = t.TempDir()
	cfg.PostgreSQL = testutil.PostgresAdminDSN()
	cfg.Logger = testutil.Logger(t)
	var out bytes.Buffer
	cfg.Out = &out
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sum, err := Run(ctx, cfg)
	return campaignResult{sum, out.String(), err}
}

// check fails the test unless every check of every run passed and every
// run wrote its report.
func (r campaignResult) check(t *testing.T) {
	t.Helper()
	t.Log("\n" + r.out)
	if r.err != nil {
		if r.sum != nil && len(r.sum.Reports) > 0 {
			b, _ := os.ReadFile(filepath.Join(r.sum.Reports[len(r.sum.Reports)-1].Dir, "result.txt"))
			t.Logf("last run's result.txt:\n%s", b)
		}
		t.Fatalf("campaign: %v", r.err)
	}
	t.Log(r.sum.Line())
	if r.sum.StaleAccepted != 0 || r.sum.TokenViolations != 0 || r.sum.DoubleHolds == 0 {
		t.Fatalf("campaign summary %q, token violations %d", r.sum.Line(), r.sum.TokenViolations)
	}
	for _, rep := range r.sum.Reports {
		for _, f := range []string{"history.jsonl", "tokens.html", "result.txt", "logs/token-n1.log", "logs/client-c1.log"} {
			if _, err := os.Stat(filepath.Join(rep.Dir, f)); err != nil {
				t.Errorf("run %d report lacks %s: %v", rep.Index, f, err)
			}
		}
	}
}

func campaign(t *testing.T, cfg Config) {
	t.Helper()
	runCampaign(t, cfg).check(t)
}

// TestCampaign is the short campaign CI runs: random schedules from every
// fault, fixed seeds, one Redis master.
func TestCampaign(t *testing.T) {
	t.Parallel()
	campaign(t, Config{Runs: 2, Seed: 1, Duration: 6 * time.Second})
}

// TestCampaignRedlock is the same with Redlock on five Redis masters.
func TestCampaignRedlock(t *testing.T) {
	t.Parallel()
	campaign(t, Config{Runs: 1, Seed: 11, Duration: 6 * time.Second, Redlock: true})
}

// scenarioConcurrency is how many scenario stacks TestScenarios runs at
// once: they are mostly idle processes, so a few share the machine well.
const scenarioConcurrency = 3

// TestScenarios replays every named regression scenario once, a few at a
// time, each on its own stack.
func TestScenarios(t *testing.T) {
	testutil.NeedServices(t)
	t.Parallel()
	names := ScenarioNames()
	results := make([]campaignResult, len(names))
	sem := make(chan struct{}, scenarioConcurrency)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] = runCampaign(t, Config{Runs: 1, Seed: 1, Scenario: Scenarios[name]})
		}()
	}
	wg.Wait()
	for i, name := range names {
		t.Run(name, func(t *testing.T) { results[i].check(t) })
	}
}
