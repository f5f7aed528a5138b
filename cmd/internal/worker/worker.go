// Package worker is the protocol between fencegate and the worker processes
// it starts from its own binary: the demo's clients, the lost-updates
// demo's workers and the fault campaign's workload clients.
//
// A worker runs as "fencegate worker KIND" (Args). It reads its
// configuration, JSON, from the environment variable ConfigEnv (Env,
// ReadConfig); a secret such as a database password travels in a variable
// of its own (PGPASSWORD), never in the configuration. It reports Events on
// its stdout, one JSON object per line (Writer, Decode); the parent may
// answer with lines on its stdin.
package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// The kinds of worker.
const (
	DemoClient   = "demo-client"   // a client of the paused-holder demo
	LostUpdates  = "lost-updates"  // a worker of the lost-updates demo
	FaultsClient = "faults-client" // a workload client of the fault campaign
)

// Kinds lists the kinds of worker.
var Kinds = []string{DemoClient, LostUpdates, FaultsClient}

// Command is the hidden fencegate subcommand that runs a worker.
const Command = "worker"

// ConfigEnv is the environment variable that carries a worker's
// configuration as JSON.
const ConfigEnv = "FENCEGATE_WORKER"

// Args is the command line, after the program name, of a worker of kind.
func Args(kind string) []string { return []string{Command, kind} }

// Env returns the environment entry that passes cfg to a worker.
func Env(cfg any) (string, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("encode worker configuration: %w", err)
	}
	return ConfigEnv + "=" + string(raw), nil
}

// ReadConfig decodes this process's worker configuration into cfg.
func ReadConfig(cfg any) error {
	raw := os.Getenv(ConfigEnv)
	if raw == "" {
		return errors.New("worker: " + ConfigEnv + " is not set; workers are started by fencegate itself")
	}
	if err := json.Unmarshal([]byte(raw), cfg); err != nil {
		return fmt.Errorf("worker: bad %s: %w", ConfigEnv, err)
	}
	return nil
}

// Event is one line a worker reports. Kind says what happened; which other
// fields are set depends on the kind of worker and of event.
type Event struct {
	// Time is when it happened, in nanoseconds: CLOCK_MONOTONIC for the
	// fault campaign, Unix time for the lost-updates demo; the demo's
	// clients leave it unset (the demo stamps events as they arrive).
	Time     int64  `json:"t"`
	Client   string `json:"client"`
	Kind     string `json:"kind"`
	Op       int64  `json:"op,omitempty"`
	Resource string `json:"resource,omitempty"`
	Token    int64  `json:"token,omitempty"`
	Value    int64  `json:"value,omitempty"`
	// Work is, on the fault campaign's acquire-ok, how long (ns) the
	// client will work before its transaction begins.
	Work      int64  `json:"work,omitempty"`
	Fault     string `json:"fault,omitempty"`
	Target    string `json:"target,omitempty"`
	Detail    string `json:"detail,omitempty"`
	Err       string `json:"err,omitempty"`
	Attempt   int    `json:"att,omitempty"`      // the worker's how-many-th try
	OK        bool   `json:"ok,omitempty"`       // a write committed
	SQLState  string `json:"sqlstate,omitempty"` // of a failed write
	State     string `json:"state,omitempty"`    // an order's state, as read
	Held      bool   `json:"held,omitempty"`     // the lease looked valid
	TTLMillis int64  `json:"ttl_ms,omitempty"`
}

// Writer writes events as JSON lines; it is safe for concurrent use.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Send writes e as one line.
func (w *Writer) Send(e Event) error {
	b, err := Encode(e)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.w.Write(b); err != nil {
		return fmt.Errorf("write event: %w", err)
	}
	return nil
}

// Encode renders e as one line, newline included.
func Encode(e Event) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode event: %w", err)
	}
	return append(b, '\n'), nil
}

// Decode parses one line a worker wrote; ok is false when the line is not
// an event (a worker's stdout may carry other output).
func Decode(line []byte) (e Event, ok bool) {
	if json.Unmarshal(line, &e) != nil || e.Kind == "" {
		return Event{}, false
	}
	return e, true
}
