#!/usr/bin/env bash
# Run the version-sensitive test suites against every supported PostgreSQL major.
#
#   scripts/pg-matrix.sh [MAJOR...]        default: every supported major
#   scripts/pg-matrix.sh --except-default  every supported major but the default
#                                          server's (FENCEGATE_TEST_PG, else
#                                          127.0.0.1:5432), which `go test ./...`
#                                          has just run everything on: make test
#   PG_MATRIX_PACKAGES="./pgfence/..."     which packages (default below)
#   PG_MATRIX_RUN='TestX|TestY'            passed to go test -run
#   PG_MATRIX_SKIP='TestZ'                 passed to go test -skip (default below)
#   PG_MATRIX_JOBS=2                       majors tested at once
#
# For each major it takes the pinned server binaries (scripts/postgres-versions.sh),
# initializes a throwaway cluster in a temporary directory, starts it on a free
# loopback port (as user postgres when run as root: initdb refuses root), runs
# the packages with FENCEGATE_TEST_PG pointing at it and FENCEGATE_TEST_PGBIN at
# its binaries (for the tests that start servers of their own), then stops the
# server and removes the directory. A major that cannot be installed or started
# fails the run; none is skipped. Each major's log is kept in
# $PG_MATRIX_LOGS (default a temporary directory) and summarized at the end.
#
# What runs where, and why: the tests whose outcome rests on PostgreSQL's
# catalogs, privileges, executor and wire protocol run on every major: all of
# pgfence (install, upgrade, protect, the fence, prune, signing, health,
# inventory, the attack suites), proxy but for its own mechanics (the gate's
# admission and repair, the bypass and contract suites, psql, psycopg2, pgx,
# PgBouncer, SCRAM, cancel, frames compared with the server's), and
# cmd/fencegate's schema and marks commands. The proxy's mechanics (see
# default_skip) and the rest of the suite (Raft, tokens, Redis locks, clients,
# demos) run once, in `go test ./...`, on the default server: they use
# PostgreSQL only through the same fence, whose SQL the matrix has proven.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH=$PATH:/usr/local/go/bin

die() { echo "pg-matrix: $*" >&2; exit 1; }

packages=${PG_MATRIX_PACKAGES:-./pgfence/... ./proxy/...}
# Tests of the proxy's own mechanics, whose outcome does not depend on the
# server's major (frame parsing, the request tracker, raw sockets, TLS to
# clients, drain and shutdown, metrics, two proxy processes, pgbench load,
# the race of its pumps when a client says Terminate, over 300 sessions),
# run once, on the default server; PG_MATRIX_SKIP= (empty) runs them too.
default_skip='^(TestTwoProxyProcesses|TestPgbench|TestRawConn.*|TestTracker.*|TestIsFenceRow|TestFrameBody|TestMetrics|TestGracefulShutdown|TestDrainAfterTrickyExchanges|TestHealthDraining|TestReadyProbeWantsPostgreSQL|TestClientTLS.*|TestCancelKeys|TestHostileInput|TestValidate.*|TestNewFillsDefaults|TestParseBool|TestProxyDrainBehindPgBouncer|TestTerminateGetsNoAnswer)$'
skip=${PG_MATRIX_SKIP-$default_skip}
# The schema commands of the binary, beside them.
cmd_run='^Test(SchemaCommands|SchemaNoSecretInErrors|Marks.*|SignedTokensCommands)$'
except_default=
if [ "${1:-}" = --except-default ]; then
	except_default=1
	shift
fi
majors=("$@")
if [ ${#majors[@]} -eq 0 ]; then
	list=$(scripts/postgres-versions.sh majors) || die "cannot list the supported majors"
	mapfile -t majors <<<"$list"
fi
if [ -n "$except_default" ]; then
	default_dsn=${FENCEGATE_TEST_PG:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
	default_num=$(psql -X -Atc 'SHOW server_version_num' "$default_dsn") ||
		die "cannot ask the default server ($default_dsn) for its version; start it (scripts/services.sh) or set FENCEGATE_TEST_PG"
	default_major=$((default_num / 10000))
	kept=()
	for m in "${majors[@]}"; do [ "$m" = "$default_major" ] || kept+=("$m"); done
	echo "pg-matrix: PostgreSQL $default_major is the default server's, run by go test ./...; here: ${kept[*]}"
	majors=("${kept[@]}")
fi
[ ${#majors[@]} -gt 0 ] || die "no PostgreSQL major to test"
logs=${PG_MATRIX_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/fencegate-matrix.XXXXXX")}
mkdir -p "$logs"


# shellcheck source=scripts/pgserver.sh
. scripts/pgserver.sh
owner=$(id -un)
[ "$(id -u)" != 0 ] || owner=postgres

# run_major MAJOR: in a subshell of its own: start a throwaway server of that
# major, run the packages against it, stop it and remove its directory.
# Writes $logs/MAJOR.json (go test -json), MAJOR.stderr, MAJOR.result (one
# line) and MAJOR.version; its exit status is the tests'.
run_major() (
	m=$1
	trap pg_stop EXIT
	trap 'exit 130' INT TERM
	fail() { echo "FAIL PostgreSQL $m: $*" >"$logs/$m.result"; echo "pg-matrix: PostgreSQL $m: $*" >&2; exit 1; }

	bin=$(scripts/postgres-versions.sh path "$m") || fail "cannot install its binaries"
	version=$("$bin/postgres" --version | awk '{print $NF}')
	echo "$version" >"$logs/$m.version"
	pg_start "$bin" || fail "$pg_error"
	dsn=$pg_dsn
	echo "=== PostgreSQL $version: $dsn, as $owner"
	start=$(date +%s)
	args=(-count=1 -timeout 20m)
	[ -z "${PG_MATRIX_RUN:-}" ] || args+=(-run "$PG_MATRIX_RUN")
	[ -z "$skip" ] || args+=(-skip "$skip")
	rc=0
	export FENCEGATE_TEST_PG=$dsn FENCEGATE_TEST_PGBIN=$bin
	# shellcheck disable=SC2086
	go test -json "${args[@]}" $packages >"$logs/$m.json" 2>"$logs/$m.stderr" &
	tests=$!
	go test -json -count=1 -timeout 10m -run "${PG_MATRIX_RUN:-$cmd_run}" ./cmd/fencegate/ \
		>"$logs/$m.cmd.json" 2>>"$logs/$m.stderr" || rc=$?
	wait "$tests" || rc=$?
	cat "$logs/$m.cmd.json" >>"$logs/$m.json"
	secs=$(($(date +%s) - start))
	if [ "$rc" = 0 ]; then
		echo "ok   PostgreSQL $version  $secs s" >"$logs/$m.result"
	else
		echo "FAIL PostgreSQL $version  $secs s  (output: $logs/$m.log)" >"$logs/$m.result"
		jq -rR 'fromjson? | select(.Action == "output") | .Output' "$logs/$m.json" >"$logs/$m.log" || true
		{
			echo "--- PostgreSQL $version: what failed"
			grep -E '^(\s*--- FAIL|FAIL|panic:)' "$logs/$m.log" | head -40 || true
			tail -5 "$logs/$m.stderr" || true
		} >&2
	fi
	cat "$logs/$m.result"
	exit "$rc"
)

# Run PG_MATRIX_JOBS majors at a time (default 2: on two cores one major's
# suites leave about half of the machine idle, waiting on its server).
jobs=${PG_MATRIX_JOBS:-2}
pids=()
for m in "${majors[@]}"; do
	rm -f "$logs/$m.result" "$logs/$m.version"
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
	run_major "$m" &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done

echo "=== PostgreSQL matrix ($packages ./cmd/fencegate/)"
failed=0
for m in "${majors[@]}"; do
	[ -f "$logs/$m.result" ] || echo "FAIL PostgreSQL $m: no result" >"$logs/$m.result"
	cat "$logs/$m.result"
	case $(cat "$logs/$m.result") in ok*) ;; *) failed=1 ;; esac
done
# One row per major, one column per area: passed/run top-level tests of that
# area on that major (skipped ones are not counted as run).
python3 - "$logs" "${majors[@]}" <<'PY'
import json, re, sys
logs, majors = sys.argv[1], sys.argv[2:]
areas = [
    ("install", r"^Test(Install|ConcurrentFirstInstalls|ApplicationCannotHoldTheInstallersLock|SchemaCommands|Refuses)"),
    ("guard-ddl", r"^TestGuard"),
    ("upgrade", r"^TestUpgrade"),
    ("protect", r"^Test(Protect|Unprotect)"),
    ("fence", r"^Test(Fence|WritePaths|NullResource|PgxBasicFence|ConcurrentFences|SetMark|MarkHolders|LockHolders)"),
    ("prune", r"^Test(Prune|ProxyPrunes)"),
    ("signed", r"^Test(Sign|RequireSigned|MalformedProof)"),
    ("health", r"^Test(Health|Inventory|Lookalikes|QueriesIgnore)"),
    ("gate", r"^Test(Gate|Admin|PrivilegeQuery|ReplicationConnections|CheckServerVersion)"),
    ("attacks", r"(Attack|Bypass|Route|Hostile|ApplyWorker|Planted|^TestVersions)"),
]
versions = {}
for m in majors:
    try:
        versions[m] = open(f"{logs}/{m}.version").read().strip()
    except FileNotFoundError:
        pass
print("| PostgreSQL | " + " | ".join(a for a, _ in areas) + " | all |")
print("|---" * (len(areas) + 2) + "|")
for m in majors:
    final = {}
    try:
        for line in open(f"{logs}/{m}.json"):
            try:
                e = json.loads(line)
            except ValueError:
                continue
            t = e.get("Test", "")
            if t and "/" not in t and e.get("Action") in ("pass", "fail", "skip"):
                final[(e["Package"], t)] = e["Action"]
    except FileNotFoundError:
        pass
    cells = []
    for _, rx in areas + [("all", r".")]:
        got = [a for (p, t), a in final.items() if re.search(rx, t)]
        run = [a for a in got if a != "skip"]
        ok = sum(a == "pass" for a in run)
        cells.append("-" if not run else (f"ok {ok}" if ok == len(run) else f"FAIL {len(run) - ok}/{len(run)}"))
    print(f"| {versions.get(m, m)} | " + " | ".join(cells) + " |")
PY
if [ "$failed" = 0 ]; then
	echo "${#majors[@]} passed, 0 failed"
else
	n=0; for m in "${majors[@]}"; do case $(cat "$logs/$m.result") in ok*) n=$((n + 1)) ;; esac; done
	echo "$n passed, $((${#majors[@]} - n)) failed"
	exit 1
fi
