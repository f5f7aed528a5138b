package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fencegate/fencegate"
)

// A workload is one pgbench mode measured on every system.
type workload struct {
	name string
	desc string
	// mode is pgbench's query protocol: simple or extended.
	mode string
	// args are the pgbench options shared by every system besides -M.
	args []string
	// fenced workloads run fencedScript, the same on every system.
	fenced bool
	// unfenced workloads write to tables that are not protected (pgbench's
	// own), with no fence: the gate admits the application role and
	// PostgreSQL checks nothing.
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

// fencedTable is the protected table the fenced workloads write: a copy of
// the accounts the pgbench clients own, protected with the resource
// expression 'acct:' || aid.
const fencedTable = "fenced_accounts"

// fencedScript is the fenced write a lock holder sends, on every path:
// fencegate.FenceSQL with the account's resource and the holder's token,
// then the write, which PostgreSQL checks against the fence.
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
var fencedScript = `-- Client k holds the locks of accounts k*100+1..k*100+100 with token 1e9+k.
\set aid 1 + :client_id * 100 + random(0, 99)
\set delta random(-5000, 5000)
\set tok 1000000000 + :client_id
BEGIN;
` + fenceCall + `
UPDATE ` + fencedTable + ` SET abalance = abalance + :delta WHERE aid = :aid;
COMMIT;
`

// fenceCall is fencegate.FenceSQL with pgbench's variables for its
// parameters.
var fenceCall = strings.NewReplacer("$1", "'acct:' || :aid", "$2", ":tok").Replace(fencegate.FenceSQL) + ";"

// scripts holds the path of the fenced workload's script file.
type scripts struct {
	fenced string
}

// writeScripts writes the fenced script into dir.
func writeScripts(dir string) (scripts, error) {
	s := scripts{fenced: filepath.Join(dir, "fenced.sql")}
	if err := os.WriteFile(s.fenced, []byte(fencedScript), 0o644); err != nil {
		return s, fmt.Errorf("write pgbench script: %w", err)
	}
	return s, nil
}

// pgbenchArgs returns the pgbench options of w (the same on every system).
func (w workload) pgbenchArgs(s scripts) []string {
	args := append([]string{"-M", w.mode}, w.args...)
	if !w.fenced {
		return args
	}
	return append(args, "-f", s.fenced)
}
