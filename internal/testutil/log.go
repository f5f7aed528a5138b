package testutil

import (
	"log/slog"
	"strings"
	"testing"
)

// Logger returns a slog.Logger that writes through t.Log, so output appears
// only for failing tests (or with -v).
func Logger(t testing.TB) *slog.Logger {
	return LoggerAt(t, slog.LevelDebug)
}

// LoggerAt is Logger for records at level and above: for servers started
// beside a suite whose own output is what a failure must show.
func LoggerAt(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: level}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
