package testutil

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Logger returns a slog.Logger that writes through t.Log, so output appears
// only for failing tests (or with -v).
func Logger(t testing.TB) *slog.Logger {
	return LoggerAt(t, slog.LevelDebug)
}

// LoggerAt is Logger for records at level and above: for servers started
// beside a suite whose own output is what a failure must show.
//
// Records written once the test's cleanups have run are dropped: a
// goroutine of a server the test stopped (hashicorp/raft's transport
// reporting "transport shutdown", say) may still log after the test ended,
// and t.Log then panics the whole package.
func LoggerAt(t testing.TB, level slog.Level) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type tWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// close runs as the test's last cleanup but for those registered before
// the logger: what logs after it is dropped.
func (w *tWriter) close() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}
