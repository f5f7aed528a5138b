// Package bench holds what the side-by-side benchmark commands share:
// statistics over runs and latency samples (Median, Summarize), aligned
// ratio tables (Table), the common command-line flags (Flags, Parse), the
// main function with its exit statuses (Main), the temporary directory and
// process Group of a run (Workspace), JSON reports (WriteJSON), and
// short-lived helper commands (Command). The server processes a benchmark
// starts run under an internal/proc Group, which puts every child in its
// own process group and stops them all on exit, error or Ctrl-C.
//
// The commands themselves live in the subpackages, run from this directory:
//
//	go run ./tokens      fencegate token cluster vs a 3-node etcd cluster
//	go run ./proxy       pgbench direct vs PgBouncer vs the fencegate proxy
//	go run ./locks       lockclient vs bsm/redislock and go-redsync/redsync
//	go run ./fencebench  a protected table vs its unprotected twin
//	go run ./cycle       the fenced critical section vs the unfenced one
//	go run ./instructions  PostgreSQL's instructions per fenced write vs unfenced (callgrind)
//
// This directory is a Go module of its own, so that the systems the
// commands compare fencegate with (etcd and its gRPC stack, bsm/redislock,
// go-redsync/redsync) stay out of the module graph of fencegate's users. It
// builds against the fencegate module in the parent directory (a replace
// directive), whose internal packages it may import.
//
// DESIGN.md explains how the commands give every side the same treatment.
//
// Benchmarks measure; they assert nothing. Figures taken on a machine that
// is busy with other work are only good for ratios measured in the same run.
package bench
