package raftstore

import (
	"bytes"
	"context"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// newHCLogger returns an hclog.Logger (what hashicorp/raft logs through) that
// writes every line to logger at the matching slog level.
func newHCLogger(logger *slog.Logger, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:            name,
		Level:           hclog.Info,
		Output:          slogWriter{logger},
		DisableTime:     true,
		IncludeLocation: false,
	})
}

// slogWriter turns hclog text lines ("[WARN]  raft: msg: k=v") into slog
// records.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		s := strings.TrimSpace(string(line))
		level := slog.LevelInfo
		if strings.HasPrefix(s, "[") {
			if i := strings.IndexByte(s, ']'); i > 0 {
				switch s[1:i] {
				case "TRACE", "DEBUG":
					level = slog.LevelDebug
				case "WARN":
					level = slog.LevelWarn
				case "ERROR":
					level = slog.LevelError
				}
				s = strings.TrimSpace(s[i+1:])
			}
		}
		w.l.Log(context.Background(), level, s)
	}
	return len(p), nil
}
