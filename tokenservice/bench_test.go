package tokenservice_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// BenchmarkNext measures tokens through the HTTP API of a 3-node cluster on
// loopback (fsync on), with c concurrent callers spread over the nodes.
// It reports tokens/s and the p50/p99 latency of one call.
func BenchmarkNext(b *testing.B) { benchNext(b, nil, nil) }

// BenchmarkNextTLS is BenchmarkNext with TLS on the API, mutual TLS on
// Raft and between nodes, and a client certificate.
func BenchmarkNextTLS(b *testing.B) {
	ca := newCA(b, "bench")
	benchNext(b, []tokenservicetest.Option{tokenservicetest.WithCA(ca, nil)}, tokenservicetest.ClientTLS(b, ca, "bench", tokenapi.RoleClient))
}

// benchRaftTimeoutEnv, when set to a duration, is the Raft heartbeat and
// election timeout of the benchmarks' nodes (the lease is half of it). An
// instruction counter such as valgrind runs the process tens of times
// slower; with the test timeouts (200ms) its nodes would hold elections,
// and the count would measure those.
const benchRaftTimeoutEnv = "FENCEGATE_BENCH_RAFT_TIMEOUT"

func benchNext(b *testing.B, opts []tokenservicetest.Option, clientOpts []tokenclient.ClientOption) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if v := os.Getenv(benchRaftTimeoutEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("%s=%q: want a positive duration such as 10s", benchRaftTimeoutEnv, v)
		}
		opts = append(opts, tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) {
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = d, d, d/2
			cfg.TransportTimeout, cfg.ForwardTimeout, cfg.RoundTimeout = 4*d, 4*d, 4*d
		}))
	}
	c := tokenservicetest.StartCluster(b, 3, append(opts, tokenservicetest.WithLogger(quiet))...)
	// Each client knows all nodes, starting with a different one, and
	// follows the leader (the default).
	var clients []*tokenclient.Client
	for i := range 3 {
		urls := c.APIURLs()
		clients = append(clients, c.ClientFor(b, append(urls[i:], urls[:i]...), clientOpts...))
	}
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("c=%d", conc), func(b *testing.B) {
			var (
				mu   sync.Mutex
				lats []time.Duration
				next = make(chan struct{}, b.N)
				wg   sync.WaitGroup
			)
			for range b.N {
				next <- struct{}{}
			}
			close(next)
			idx0 := c.Node(c.Leader(b)).LocalStatus().LastIndex
			cpu0 := cpuTime()
			b.ResetTimer()
			for w := range conc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cl := clients[w%len(clients)]
					var mine []time.Duration
					for range next {
						t0 := time.Now()
						if _, err := cl.NextToken(context.Background(), "bench"); err != nil {
							b.Error(err)
							return
						}
						mine = append(mine, time.Since(t0))
					}
					mu.Lock()
					lats = append(lats, mine...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			b.StopTimer()
			// CPU of the whole process (three nodes and the clients) per
			// token: throughput on a shared VM follows the neighbours, CPU
			// per token much less.
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/token")
			entries := c.Node(c.Leader(b)).LocalStatus().LastIndex - idx0
			b.ReportMetric(float64(b.N)/float64(max(entries, 1)), "tokens/entry")
			slices.Sort(lats)
			if len(lats) > 0 {
				b.ReportMetric(float64(len(lats))/b.Elapsed().Seconds(), "tokens/s")
				b.ReportMetric(float64(lats[len(lats)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds())/1000, "p99-ms")
			}
		})
	}
}

// cpuTime returns the user and system CPU time of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
