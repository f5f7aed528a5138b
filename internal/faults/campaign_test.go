package faults

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// campaign runs cfg with the test's binary, report dir and logger, and
// fails the test unless every check of every run passed.
func campaign(t *testing.T, cfg Config) *Summary {
	t.Helper()
	cfg.Binary = testutil.Binary(t)
	cfg.ReportDir = t.TempDir()
	cfg.PostgreSQL = testutil.PostgresAdminDSN()
	cfg.Logger = testutil.Logger(t)
	var out bytes.Buffer
	cfg.Out = &out
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sum, err := Run(ctx, cfg)
	t.Log("\n" + out.String())
	if sum != nil {
		t.Log(sum.Line())
	}
	if err != nil {
		if sum != nil && len(sum.Reports) > 0 {
			b, _ := os.ReadFile(filepath.Join(sum.Reports[len(sum.Reports)-1].Dir, "result.txt"))
			t.Logf("last run's result.txt:\n%s", b)
		}
		t.Fatalf("campaign: %v", err)
	}
	if sum.StaleAccepted != 0 || sum.TokenViolations != 0 || sum.DoubleHolds == 0 {
		t.Fatalf("campaign summary %q, token violations %d", sum.Line(), sum.TokenViolations)
	}
	for _, r := range sum.Reports {
		for _, f := range []string{"history.jsonl", "tokens.html", "result.txt", "logs/token-n1.log", "logs/client-c1.log"} {
			if _, err := os.Stat(filepath.Join(r.Dir, f)); err != nil {
				t.Errorf("run %d report lacks %s: %v", r.Index, f, err)
			}
		}
	}
	return sum
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

// TestScenarios replays every named regression scenario once. The runs are
// independent stacks, mostly idle, so they run in parallel (-parallel, by
// default GOMAXPROCS, at a time).
func TestScenarios(t *testing.T) {
	t.Parallel()
	for _, name := range ScenarioNames() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			campaign(t, Config{Runs: 1, Seed: 1, Scenario: Scenarios[name]})
		})
	}
}
