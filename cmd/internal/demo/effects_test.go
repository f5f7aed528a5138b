package demo

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// TestEffectsDemo: the verdicts come from the provider's charges and the
// SQLSTATE the stale holder's transaction got, not from printed text.
func TestEffectsDemo(t *testing.T) {
	bin := testutil.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr, _ := testutil.Redis(t)
	pic := filepath.Join(t.TempDir(), "effects.svg")
	res, err := Effects(ctx, EffectsConfig{Binary: bin, Postgres: testutil.PostgresAdminDSN(), Redis: addr, Out: testWriter{t}, Logger: testutil.Logger(t), Picture: pic})
	if err != nil {
		t.Fatalf("Effects: %v", err)
	}
	if res.DirectCharges != 2 {
		t.Errorf("without effects: %d charges, want 2 (the stalled holder charges again)", res.DirectCharges)
	}
	if res.StaleSQLState != "FG001" || res.EffectCharges != 1 {
		t.Errorf("with effects: stale holder got %q, %d charges; want FG001, 1", res.StaleSQLState, res.EffectCharges)
	}
	if res.CrashRequests < 2 || res.CrashCharges != 1 {
		t.Errorf("relay killed mid-delivery: %d requests, %d charges; want at least 2 requests and 1 charge", res.CrashRequests, res.CrashCharges)
	}
	// The picture draws what happened: the stale holder's charge landing
	// in (a), its effect refused in (b), the relay's death in (c).
	svg, err := os.ReadFile(pic)
	if err != nil || res.Picture != pic {
		t.Fatalf("picture %q (want %q): %v", res.Picture, pic, err)
	}
	for _, want := range []string{"stale write landed", "refused: FG001", "SIGKILL before it records the answer", "same key: answered again, not charged again"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("picture lacks %q", want)
		}
	}
}
