// Command locks measures lock acquire+release cycles side by side:
// bsm/redislock against lockclient on one Redis, go-redsync/redsync against
// lockclient Redlock on N redis-server masters it starts, and lockclient
// with fencing tokens from a 3-node token cluster (the full cycle: grant,
// token, confirm, release). Each worker locks its own resource, so the
// figures measure the cost of a cycle, not contention.
//
//	go run ./locks [-runs 3] [-duration 3s] [-c 1,64]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate/bench"
	"github.com/fencegate/fencegate/internal/servers"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/redis/go-redis/v9"
)

func main() { bench.Main("bench locks", run) }

type config struct {
	redisAddr string
	masters   int
	runs      int
	duration  time.Duration
	conc      []int
	tokens    bool
	tokenURLs []string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("locks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var concFlag, tokenURLs string
	fs.StringVar(&cfg.redisAddr, "redis", "127.0.0.1:6379", "the single Redis for the one-node comparison")
	fs.IntVar(&cfg.masters, "masters", 5, "number of redis-server masters started for Redlock")
	fs.IntVar(&cfg.runs, "runs", 3, "runs per measurement; the table shows medians")
	fs.DurationVar(&cfg.duration, "duration", 3*time.Second, "length of one run")
	fs.StringVar(&concFlag, "c", "1,64", "comma-separated concurrency levels")
	fs.BoolVar(&cfg.tokens, "tokens", true, "also measure the full cycle with fencing tokens")
	fs.StringVar(&tokenURLs, "token-servers", "", "token service URLs to use instead of starting 3 nodes in-process (default none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, s := range strings.Split(concFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-c %q: want comma-separated positive integers such as 1,64", concFlag)
		}
		cfg.conc = append(cfg.conc, n)
	}
	if cfg.runs < 1 || cfg.masters < 1 || cfg.duration <= 0 {
		return errors.New("-runs, -masters and -duration must be positive")
	}
	if tokenURLs != "" {
		cfg.tokenURLs = strings.Split(tokenURLs, ",")
	}
	return compare(ctx, cfg, stdout, stderr)
}

func compare(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	redis.SetLogger(quietLogger{})
	maxC := slices.Max(cfg.conc)
	fmt.Fprintf(stderr, "starting %d redis-server masters\n", cfg.masters)
	redises, err := servers.StartMasters(ctx, cfg.masters)
	defer func() {
		for _, r := range redises {
			r.Close()
		}
	}()
	if err != nil {
		return err
	}
	var masterAddrs []string
	for _, r := range redises {
		masterAddrs = append(masterAddrs, r.Addr)
	}
	single := newClients([]string{cfg.redisAddr}, maxC)
	masters := newClients(masterAddrs, maxC)
	defer closeAll(single)
	defer closeAll(masters)
	if err := waitPing(ctx, cfg.redisAddr); err != nil {
		return fmt.Errorf("the single Redis: %w (start it, or pass -redis)", err)
	}

	scenarios := []scenario{bsmScenario(single[0])}
	add := func(name, peer string, rdbs []redis.UniversalClient, tokens lockclient.TokenSource) error {
		s, err := lockclientScenario(name, peer, rdbs, tokens)
		if err != nil {
			return err
		}
		scenarios = append(scenarios, s)
		return nil
	}
	if err := add("lockclient 1 node, no token", scenarios[0].name, single, nil); err != nil {
		return err
	}
	rs := redsyncScenario(masters)
	scenarios = append(scenarios, rs)
	if err := add(fmt.Sprintf("lockclient Redlock %d, no token", cfg.masters), rs.name, masters, nil); err != nil {
		return err
	}
	if cfg.tokens {
		tokens, stopTokens, err := tokenSource(ctx, cfg, stderr)
		if err != nil {
			return err
		}
		defer stopTokens()
		if err := add("lockclient 1 node + token", "", single, tokens); err != nil {
			return err
		}
		if err := add(fmt.Sprintf("lockclient Redlock %d + token", cfg.masters), "", masters, tokens); err != nil {
			return err
		}
	}

	// results[scenario][c] holds one result per run.
	results := make([]map[int][]bench.Result, len(scenarios))
	for i := range results {
		results[i] = map[int][]bench.Result{}
	}
	for r := 1; r <= cfg.runs; r++ {
		for _, c := range cfg.conc {
			for i, s := range scenarios {
				res, firstErr := measure(ctx, s, c, cfg.duration, r)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				fmt.Fprintf(stderr, "run %d  c=%-3d %-32s %9.0f cycles/s  p50 %-9v p99 %-9v errors %d\n",
					r, c, s.name, res.PerSec, res.P50, res.P99, res.Errors)
				if firstErr != nil {
					fmt.Fprintf(stderr, "        first error: %v\n", firstErr)
				}
				results[i][c] = append(results[i][c], res)
			}
		}
	}
	printTable(stdout, cfg, scenarios, results)
	return nil
}

func closeAll(cs []redis.UniversalClient) {
	for _, c := range cs {
		c.Close()
	}
}

// measure runs c workers doing cycles for d; each worker locks its own
// resource. The error is the first failed cycle's.
func measure(ctx context.Context, s scenario, c int, d time.Duration, run int) (bench.Result, error) {
	// Warm up connections and scripts without timing.
	resources := make([]string, c)
	for i := range c {
		_ = s.cycle(ctx, fmt.Sprintf("warm:%d", i))
		resources[i] = fmt.Sprintf("r%d:c%d:w%d", run, c, i)
	}
	res, err := bench.RunClosed(ctx, c, d, func(ctx context.Context, w int) error { return s.cycle(ctx, resources[w]) })
	return res, errors.Unwrap(err) // the count RunClosed adds is on the progress line already
}

func printTable(w io.Writer, cfg config, scenarios []scenario, results []map[int][]bench.Result) {
	fmt.Fprintf(w, "\nlock acquire+release cycles, medians of %d runs of %v, each worker on its own resource\n\n", cfg.runs, cfg.duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "implementation\tc\tcycles/s\tp50\tp99\tvs peer\t")
	byName := map[string]int{}
	for i, s := range scenarios {
		byName[s.name] = i
	}
	for _, c := range cfg.conc {
		for i, s := range scenarios {
			m := bench.MedianResult(results[i][c])
			ratio := ""
			if j, ok := byName[s.peer]; ok && s.peer != "" {
				if peer := bench.MedianResult(results[j][c]).PerSec; peer > 0 {
					ratio = fmt.Sprintf("%.2fx", m.PerSec/peer)
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%v\t%v\t%s\t\n", s.name, c, m.PerSec, round(m.P50), round(m.P99), ratio)
		}
	}
	tw.Flush()
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
