package python_test

import (
	"os"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fencegatetest/clientsuite"
)

// BenchmarkPythonCycle runs bench/cycle.py once: the Python client's whole
// fenced critical section (acquire with a token, lock.transaction with one
// UPDATE of a protected table, release) against the unfenced one (redis-py's
// Lock, or a quorum lock on five masters, then the same UPDATE of an
// unprotected twin table), against a stack of its own: five redis-servers,
// a 3-node token cluster, and a database with both tables. It is a
// benchmark, so it runs only when asked (`make bench-python`); the script
// makes its own rounds and prints its own table:
//
//	go test -run '^$' -bench '^BenchmarkPythonCycle$' -benchtime 1x -v -timeout 30m ./clients/python/
//
// FENCEGATE_PYTHON_BENCH_ARGS passes flags to the script (default
// "--rounds 5 --seconds 3 --workers 16").
func BenchmarkPythonCycle(b *testing.B) {
	t := b
	checkPython(t)

	args := []string{python, "-B", "bench/cycle.py"}
	if a := os.Getenv("FENCEGATE_PYTHON_BENCH_ARGS"); a != "" {
		args = append(args, strings.Fields(a)...)
	}
	clientsuite.RunBench(t, args, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
}
