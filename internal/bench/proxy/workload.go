package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A workload is one pgbench mode measured on every system.
type workload struct {
	name string
	desc string
	// mode is pgbench's query protocol: simple or extended.
	mode string
	// args are the pgbench options shared by every system besides -M.
	args []string
	// fenced workloads run fencedScript through the proxy and its twin
	// (the same transaction with the fence's own SQL) on the other paths.
	fenced bool
	// unfenced workloads write without fences; through the proxy they run
	// on a second instance started with --allow-unfenced-writes.
	unfenced bool
}

var workloads = []workload{
	{name: "select-simple", desc: "pgbench -S -M simple", mode: "simple", args: []string{"-S"}},
	{name: "select-extended", desc: "pgbench -S -M extended", mode: "extended", args: []string{"-S"}},
	{name: "fenced-write", desc: "fenced UPDATE -M extended", mode: "extended", fenced: true},
	{name: "fenced-write-simple", desc: "fenced UPDATE -M simple", mode: "simple", fenced: true},
	{name: "nobranch-extended", desc: "pgbench -N -M extended", mode: "extended", args: []string{"-N"}, unfenced: true},
}

func findWorkload(name string) (workload, bool) {
	for _, w := range workloads {
		if w.name == name {
			return w, true
		}
	}
	return workload{}, false
}

// fencedScript is the fenced write a lock holder sends through the proxy.
//
// What it models: a fleet of workers, each holding the locks of its own
// shard of accounts (pgbench client k owns accounts k*100+1 .. k*100+100)
// under one fencing token, and running many short transactions with it,
// each fencing the account it touches before it writes. Equal tokens pass
// (one holder, several transactions), shards do not overlap, so no
// transaction is rejected (no FG001) and the marks of a shard are updated
// in place once the warm-up has created them: the steady state of a real
// fenced workload, where a lock changes hands far less often than its
// holder writes.
const fencedScript = `-- Client k holds the locks of accounts k*100+1..k*100+100 with token 1e9+k.
\set aid 1 + :client_id * 100 + random(0, 99)
\set delta random(-5000, 5000)
\set tok 1000000000 + :client_id
BEGIN;
SELECT fencegate.fence('acct:' || :aid, :tok);
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
COMMIT;
`

// fenceCall is the statement of fencedScript the twin replaces.
const fenceCall = "SELECT fencegate.fence('acct:' || :aid, :tok);"

// twinScript is fencedScript with the fence call replaced by the SQL the
// proxy sends upstream for it (fenceSQL: statements separated by "; ",
// parameters $1 and $2), the way the proxy sends it: in the same flight.
// For the simple protocol the statements become one compound Query
// (pgbench's "\;"); for the extended protocol they are pipelined.
func twinScript(fenceSQL, mode string) string {
	stmts := strings.Split(fenceSQL, "; ")
	for i, st := range stmts {
		st = strings.ReplaceAll(st, "$1", "'acct:' || :aid")
		stmts[i] = strings.ReplaceAll(st, "$2", ":tok")
	}
	var twin string
	if mode == "simple" {
		twin = strings.Join(stmts, "\\; ") + ";"
	} else {
		twin = "\\startpipeline\n" + strings.Join(stmts, ";\n") + ";\n\\endpipeline"
	}
	return strings.Replace(fencedScript, fenceCall, twin, 1)
}

// scripts holds the paths of the fenced workload's script files.
type scripts struct {
	fenced string
	twin   map[string]string // by protocol
}

// writeScripts writes the fenced script and its twins into dir.
func writeScripts(dir, fenceSQL string) (scripts, error) {
	s := scripts{fenced: filepath.Join(dir, "fenced.sql"), twin: map[string]string{}}
	files := map[string]string{s.fenced: fencedScript}
	for _, mode := range []string{"simple", "extended"} {
		s.twin[mode] = filepath.Join(dir, "twin-"+mode+".sql")
		files[s.twin[mode]] = twinScript(fenceSQL, mode)
	}
	for path, text := range files {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return s, fmt.Errorf("write pgbench script: %w", err)
		}
	}
	return s, nil
}

// pgbenchArgs returns the pgbench options of w on the given system.
func (w workload) pgbenchArgs(system string, s scripts) []string {
	args := append([]string{"-M", w.mode}, w.args...)
	if !w.fenced {
		return args
	}
	if system == "fencegate" {
		return append(args, "-f", s.fenced)
	}
	return append(args, "-f", s.twin[w.mode])
}
