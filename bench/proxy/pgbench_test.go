package main

import (
	"errors"
	"testing"
	"time"
)

const pgbench15 = `pgbench (15.20 (Debian 15.20-0+deb12u1))
transaction type: <builtin: select only>
scaling factor: 1
query mode: simple
number of clients: 2
number of threads: 2
maximum number of tries: 1
duration: 1 s
number of transactions actually processed: 19066
number of failed transactions: 0 (0.000%)
latency average = 0.099 ms
initial connection time = 59.057 ms
tps = 20192.627456 (without initial connection time)
`

const pgbench12 = `starting vacuum...end.
transaction type: <builtin: select only>
scaling factor: 10
query mode: prepared
number of clients: 8
number of threads: 8
duration: 5 s
number of transactions actually processed: 54321
latency average = 0.736 ms
tps = 10800.000000 (including connections establishing)
tps = 10864.250000 (excluding connections establishing)
`

const pgbenchFailed = `pgbench (15.20)
number of transactions actually processed: 10/20
number of failed transactions: 3 (13.043%)
latency average = 1.500 ms
tps = 99.5 (without initial connection time)
`

func TestParsePgbench(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		want pgbenchStats
	}{
		{"pgbench 15", pgbench15, pgbenchStats{TPS: 20192.627456, LatencyAvg: 99 * time.Microsecond, Transactions: 19066}},
		{"pgbench 12", pgbench12, pgbenchStats{TPS: 10864.25, LatencyAvg: 736 * time.Microsecond, Transactions: 54321}},
		{"failures", pgbenchFailed, pgbenchStats{TPS: 99.5, LatencyAvg: 1500 * time.Microsecond, Transactions: 10, Failed: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePgbench(tc.out)
			if err != nil {
				t.Fatalf("parsePgbench: %v", err)
			}
			if got != tc.want {
				t.Errorf("parsePgbench=%+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParsePgbenchErrors(t *testing.T) {
	if _, err := parsePgbench("pgbench: error: connection to server failed\n"); !errors.Is(err, errNoTPS) {
		t.Errorf("parsePgbench(no tps)=%v, want errNoTPS", err)
	}
	if _, err := parsePgbench("tps = fast (without initial connection time)\n"); err == nil {
		t.Error("parsePgbench accepted a tps that is not a number")
	}
}
