package node_test

import (
	"os"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fencegatetest/clientsuite"
)

// BenchmarkNodeVsRedlock runs bench/locks.mjs once, the Node.js client against the npm
// redlock package, and its fenced cycle (straight to PostgreSQL and through
// the gate) against the unfenced cycle of npm redlock and the same UPDATE on
// an unprotected twin table, against a stack of its own: five
// redis-servers, a 3-node token cluster, and a database with protected
// tables and the twin behind the gate. It is a
// benchmark, so it runs only when asked (`make bench-node`); the script
// makes its own rounds and prints its own table:
//
//	go test -run '^$' -bench '^BenchmarkNodeVsRedlock$' -benchtime 1x -v -timeout 30m ./clients/node/
//
// FENCEGATE_NODE_BENCH_ARGS passes flags to the script (default
// "--rounds 5 --seconds 3").
func BenchmarkNodeVsRedlock(b *testing.B) {
	t := b
	checkNode(t)
	installModules(t)

	args := []string{"node", "bench/locks.mjs"}
	if a := os.Getenv("FENCEGATE_NODE_BENCH_ARGS"); a != "" {
		args = append(args, strings.Fields(a)...)
	}
	clientsuite.RunBench(t, args)
}
