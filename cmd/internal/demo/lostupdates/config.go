// Package lostupdates is the lock torture test behind "fencegate demo
// lost-updates": K worker processes
// increment one counter N times each, read-modify-write under a Redis lock
// with a short TTL, while a chaos loop freezes random lock holders (SIGSTOP)
// past the TTL and lets them go again (SIGCONT).
//
// The same run is made twice, each in a fresh database and as an application
// role the run creates: straight to PostgreSQL on tables nobody protects,
// and through the fencegate proxy on tables fencegate protects, each
// transaction fenced with the lock's token. The report compares them: how often two workers believed they held the lock at once, how many
// acknowledged increments are missing from the counter (lost updates), and
// how many stale writes the proxy rejected. Through the proxy no update is
// ever lost: the final counter equals the number of accepted increments and
// every rejected one left no trace. A chart of who held the lock over time,
// with the pauses and the rejected writes, is written as SVG.
//
// Run it against "fencegate dev":
//
//	fencegate demo lost-updates
//
// Runs are random; the seed is printed, and --seed replays the same chaos
// schedule.
package lostupdates

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// ErrLost means the run through the proxy lost an update, landed a stale
// write or left a trace of a rejected one: what fencing exists to rule out.
var ErrLost = errors.New("lostupdates: an update was lost through the proxy")

// Config holds the flags.
type Config struct {
	Workers    int
	N          int
	TTL        time.Duration
	Duration   time.Duration
	Prep       time.Duration
	Work       time.Duration
	Pause      time.Duration
	ChaosEvery time.Duration
	Seed       int64
	Mode       string
	Postgres   string
	Proxy      string
	Redis      string
	Tokens     string
	Chart      string
	Keep       bool
	Owner      string // owner role of schema fencegate (default pgfence's)
}

// DefaultConfig returns the defaults: the addresses of "fencegate dev".
func DefaultConfig() Config {
	return Config{
		Workers:    8,
		N:          1000,
		TTL:        200 * time.Millisecond,
		Duration:   10 * time.Second,
		Prep:       2 * time.Millisecond,
		Work:       2 * time.Millisecond,
		ChaosEvery: 300 * time.Millisecond,
		Mode:       "both",
		Postgres:   "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		Proxy:      "127.0.0.1:6432",
		Redis:      "127.0.0.1:6379",
		Tokens:     "http://127.0.0.1:7101,http://127.0.0.1:7102,http://127.0.0.1:7103",
		Chart:      filepath.Join("fencegate-data", "lost-updates.svg"),
	}
}

// Register defines the flags on fs.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.IntVar(&c.Workers, "workers", c.Workers, "K: worker processes")
	fs.IntVar(&c.N, "n", c.N, "N: increments each worker makes, unless -duration ends the run first")
	fs.DurationVar(&c.TTL, "ttl", c.TTL, "lock TTL")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "run length of each mode")
	fs.DurationVar(&c.Prep, "prep", c.Prep, "time between taking the lock and starting the transaction")
	fs.DurationVar(&c.Work, "work", c.Work, "time between a worker's read and its write, inside the transaction")
	fs.DurationVar(&c.Pause, "pause", 0, "how long the chaos loop freezes a worker (default 2×TTL)")
	fs.DurationVar(&c.ChaosEvery, "chaos-every", c.ChaosEvery, "mean time between two freezes")
	fs.Int64Var(&c.Seed, "seed", 0, "seed of the chaos schedule (default: from the clock; printed)")
	fs.StringVar(&c.Mode, "mode", c.Mode, "direct, proxy or both")
	fs.StringVar(&c.Postgres, "postgres", c.Postgres, "PostgreSQL DSN, direct, of an administrator (creates a database and an application role per mode)")
	fs.StringVar(&c.Proxy, "proxy", c.Proxy, "fencegate proxy host:port in front of that PostgreSQL")
	fs.StringVar(&c.Redis, "redis", c.Redis, "Redis host:port, or five comma-separated masters for Redlock")
	fs.StringVar(&c.Tokens, "tokens", c.Tokens, "token service URLs, comma-separated")
	fs.StringVar(&c.Chart, "chart", c.Chart, "SVG chart to write")
	fs.BoolVar(&c.Keep, "keep", false, "keep the run's databases and application roles instead of dropping them (default false)")
}

// Check refuses values the run cannot use and fills in the derived
// defaults (the pause, the seed).
func (c *Config) Check() error {
	switch {
	case c.Workers < 2:
		return errors.New("-workers must be at least 2: a lone worker has no one to conflict with")
	case c.N < 1:
		return errors.New("-n must be at least 1")
	case c.TTL < 10*time.Millisecond:
		return errors.New("-ttl must be at least 10ms")
	case c.Duration <= 0:
		return errors.New("-duration must be positive")
	case c.Mode != "direct" && c.Mode != "proxy" && c.Mode != "both":
		return fmt.Errorf("-mode %q: want direct, proxy or both", c.Mode)
	}
	if c.Pause <= 0 {
		c.Pause = 2 * c.TTL
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()
	}
	return nil
}

func (c *Config) modes() []bool {
	switch c.Mode {
	case "direct":
		return []bool{false}
	case "proxy":
		return []bool{true}
	}
	return []bool{false, true}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
