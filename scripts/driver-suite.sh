#!/usr/bin/env bash
# driver-suite.sh runs a real PostgreSQL driver's own test suite, unchanged,
# twice: once straight against PostgreSQL and once through `fencegate proxy`,
# and compares the outcome of every test. The proxy claims to be transparent
# (the client receives the bytes the server sent, the backend process ID
# included; only the cancel secret is replaced and cancels reach the right
# backend), so the two runs must pass, fail and skip exactly the same tests.
# The driver is jackc/pgx/v5 at the version this module requires; see
# docs/drivers.md for what is checked and the last measured result.
#
#   scripts/driver-suite.sh                      pgx's whole suite (./...)
#   scripts/driver-suite.sh -run TestConnect     trailing arguments go to `go test`
#   DRIVER_SUITE_PKGS='. ./pgconn' scripts/driver-suite.sh
#
# Environment (defaults in brackets):
#   DRIVER_SUITE_PG_ADDR  PostgreSQL host:port, trust auth for TCP [127.0.0.1:5432]
#   DRIVER_SUITE_PG_MAJOR a PostgreSQL major (14 to 18): run against a throwaway
#                         server of it, from scripts/postgres-versions.sh's pinned
#                         binaries, instead of DRIVER_SUITE_PG_ADDR [unset]
#   DRIVER_SUITE_PG_USER  a superuser, as pgx's suite logs in as one [postgres]
#   DRIVER_SUITE_DB       database created for the run and dropped after [drv_pgx_test]
#   DRIVER_SUITE_PKGS     pgx packages to test, relative to its module root [./...]
#   DRIVER_SUITE_DIR      where pgx's source is copied; a fixed path lets the
#                         second and later runs reuse Go's build cache
#                         [${TMPDIR:-/tmp}/fencegate-driver-suite]
#   DRIVER_SUITE_FENCEGATE  a fencegate binary to check (it installs the schema
#                         and runs the proxy) instead of one built from this
#                         tree, e.g. a release or an older commit [built]
#
# It needs go, psql and jq. It exits 0 when both runs have the same outcome
# for every test, 1 on any difference, 2 when it could not run (or no test
# passed even directly).
set -euo pipefail
export LC_ALL=C # one collation for sort and join

log() { echo "driver-suite: $*" >&2; }
die() {
	echo "driver-suite: $*" >&2
	exit 2
}

root=$(cd "$(dirname "$0")/.." && pwd)
pg_addr=${DRIVER_SUITE_PG_ADDR:-127.0.0.1:5432}
if [[ -n ${DRIVER_SUITE_PG_MAJOR:-} ]]; then
	# shellcheck source=scripts/pgserver.sh
	. "$root/scripts/pgserver.sh"
	pg_bin=$("$root/scripts/postgres-versions.sh" path "$DRIVER_SUITE_PG_MAJOR") || die "no PostgreSQL $DRIVER_SUITE_PG_MAJOR"
	trap pg_stop EXIT # until cleanup takes over
	pg_start "$pg_bin" || die "PostgreSQL $DRIVER_SUITE_PG_MAJOR: $pg_error"
	pg_addr=127.0.0.1:$pg_port
	log "PostgreSQL $("$pg_bin/postgres" --version | awk '{print $NF}') on $pg_addr"
fi
pg_host=${pg_addr%:*}
pg_port=${pg_addr##*:}
pg_user=${DRIVER_SUITE_PG_USER:-postgres}
db=${DRIVER_SUITE_DB:-drv_pgx_test}
pkgs=${DRIVER_SUITE_PKGS:-./...}
dir=${DRIVER_SUITE_DIR:-${TMPDIR:-/tmp}/fencegate-driver-suite}
owner=${db}_fg_owner # NOLOGIN owner of schema fencegate in $db, dropped after

for tool in go psql jq; do
	command -v "$tool" >/dev/null || die "needs $tool on PATH"
done
[[ $db =~ ^[a-z_][a-z0-9_]*$ ]] || die "DRIVER_SUITE_DB must be a plain lower-case identifier, not $db"

admin() { psql -X -q -v ON_ERROR_STOP=1 -h "$pg_host" -p "$pg_port" -U "$pg_user" -d "${1:-postgres}" "${@:2}"; }
admin postgres -Atc 'SELECT 1' >/dev/null || die "cannot log in to PostgreSQL at $pg_addr as $pg_user (trust auth expected)"

proxy_pid=
created_owner=
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n $proxy_pid ]] && kill -0 "$proxy_pid" 2>/dev/null; then
		kill -TERM "$proxy_pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$proxy_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$proxy_pid" 2>/dev/null || true
	fi
	# A test interrupted mid-run may leave sessions in the database.
	admin postgres -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '$db' AND pid <> pg_backend_pid()" >/dev/null 2>&1 || true
	admin postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || log "could not drop database $db"
	if [[ -n $created_owner ]]; then
		admin postgres -c "DROP ROLE IF EXISTS $owner" >/dev/null 2>&1 || log "could not drop role $owner"
	fi
	[[ -z ${DRIVER_SUITE_PG_MAJOR:-} ]] || pg_stop
	exit "$rc"
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT
trap 'log terminated; exit 143' TERM

mkdir -p "$dir"
export GOWORK=off GOFLAGS=-mod=mod

fg=${DRIVER_SUITE_FENCEGATE:-}
if [[ -z $fg ]]; then
	log "building fencegate"
	fg=$dir/fencegate
	(cd "$root" && go build -o "$fg" ./cmd/fencegate)
fi
[[ -x $fg ]] || die "DRIVER_SUITE_FENCEGATE=$fg is not an executable"

pgx_version=$(cd "$root" && go list -m -f '{{.Version}}' github.com/jackc/pgx/v5)
(cd "$root" && go mod download github.com/jackc/pgx/v5)
pgx_src=$(cd "$root" && go list -m -f '{{.Dir}}' github.com/jackc/pgx/v5)
[[ -d $pgx_src ]] || die "pgx $pgx_version is not in the module cache"
pgx=$dir/pgx-$pgx_version
rm -rf "$pgx"
cp -R "$pgx_src" "$pgx"
chmod -R u+w "$pgx"
log "pgx $pgx_version copied to $pgx"

# The database pgx's CONTRIBUTING.md asks for (the password and TLS users of
# testsetup/ are not created: their tests skip when their variables are
# unset, in both runs), plus schema fencegate: the proxy's gate refuses
# sessions of a database without a sound one (FG005).
if [[ -n $(admin postgres -Atc "SELECT 1 FROM pg_database WHERE datname = '$db'") ]]; then
	log "dropping database $db left by an earlier run"
	admin postgres -c "DROP DATABASE $db WITH (FORCE)" >/dev/null
fi
admin postgres -c "CREATE DATABASE $db" >/dev/null
admin "$db" -c 'CREATE EXTENSION hstore' -c 'CREATE EXTENSION ltree' -c 'CREATE DOMAIN uint64 AS numeric(20,0)' >/dev/null
created_owner=1 # this script's own name: one left by a killed run goes too
"$fg" schema install --db "postgres://$pg_user@$pg_addr/$db?sslmode=disable" --owner "$owner" >/dev/null

free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 20000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	die "found no free port"
}
proxy_port=$(free_port)
"$fg" proxy --listen "127.0.0.1:$proxy_port" \
	--upstream "postgres://$pg_addr?sslmode=disable" \
	--allow-privileged-roles >"$dir/proxy.log" 2>&1 &
proxy_pid=$!
for _ in $(seq 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$proxy_port") 2>/dev/null && break
	kill -0 "$proxy_pid" 2>/dev/null || { cat "$dir/proxy.log" >&2; die "the proxy exited"; }
	sleep 0.1
done
psql -X -Atc 'SELECT 1' "postgres://$pg_user@127.0.0.1:$proxy_port/$db?sslmode=disable" >/dev/null ||
	{ tail -20 "$dir/proxy.log" >&2; die "cannot log in through the proxy on 127.0.0.1:$proxy_port"; }
log "proxy (pid $proxy_pid) on 127.0.0.1:$proxy_port"

# run NAME ADDR: pgx's suite against ADDR, its go test -json stream in
# $dir/NAME.json and one "package test<TAB>outcome" line per test in
# $dir/NAME.tsv. A package that fails without a failing test (build error,
# panic, timeout) is a line "package (package)<TAB>fail"; a test that started
# and never ended (its package died) is "noresult". Subtests named after a
# t.TempDir() path (TestX123456789/001/...) differ from run to run: the random
# part is replaced by "*/NNN/".
run() {
	local name=$1 addr=$2 dsn start
	shift 2
	dsn="host=${addr%:*} port=${addr##*:} user=$pg_user dbname=$db sslmode=disable"
	log "running pgx's tests ($pkgs) $name: $dsn"
	start=$(date +%s)
	# -p 1: one package at a time, as two packages' tests sharing the
	# database at once could interfere differently in the two runs.
	(cd "$pgx" && env -u PGHOST -u PGPORT -u PGUSER -u PGDATABASE -u PGPASSWORD -u PGSSLMODE -u PGSERVICE \
		PGX_TEST_DATABASE="$dsn" PGX_TEST_TCP_CONN_STRING="$dsn" \
		go test -json -count=1 -p 1 -timeout 5m "$@" $pkgs >"$dir/$name.json" 2>"$dir/$name.stderr") || true
	eval "${name}_secs=$(($(date +%s) - start))"
	jq -rR 'fromjson? | select(.Action == "run" or .Action == "pass" or .Action == "fail" or .Action == "skip")
		| [.Package, (.Test // "(package)" | gsub("[0-9]{6,}/[0-9]{3}/"; "*/NNN/")), .Action] | @tsv' "$dir/$name.json" |
		awk -F'\t' '{k = $1 " " $2; if ($3 == "run") { if (!(k in o)) o[k] = "noresult" } else o[k] = $3}
			END {for (k in o) if (!(k ~ / \(package\)$/ && o[k] != "fail")) print k "\t" o[k]}' |
		sort >"$dir/$name.tsv"
}
# count NAME OUTCOME: how many tests of run NAME had OUTCOME ("package"
# counts the packages that failed as a whole).
count() {
	if [[ $2 == package ]]; then
		awk -F'\t' '$1 ~ / \(package\)$/' "$dir/$1.tsv" | wc -l | tr -d ' '
	else
		awk -F'\t' -v o="$2" '$2 == o && $1 !~ / \(package\)$/' "$dir/$1.tsv" | wc -l | tr -d ' '
	fi
}
summary() {
	local secs=${1}_secs
	echo "$(count "$1" pass) passed, $(count "$1" fail) failed, $(count "$1" skip) skipped, $(count "$1" noresult) without result, $(count "$1" package) packages failed (${!secs}s)"
}

run direct "$pg_addr" "$@"
run gate "127.0.0.1:$proxy_port" "$@"
kill -0 "$proxy_pid" 2>/dev/null || log "the proxy died during the run (see $dir/proxy.log)"

join -t $'\t' -a 1 -a 2 -e missing -o 0,1.2,2.2 "$dir/direct.tsv" "$dir/gate.tsv" |
	awk -F'\t' '$2 != $3' >"$dir/differences.tsv"

echo "pgx $pgx_version, packages $pkgs"
echo "direct:           $(summary direct)"
echo "through the gate: $(summary gate)"
if [[ ! -s $dir/differences.tsv ]]; then
	echo "differences: none"
else
	echo "differences: $(wc -l <"$dir/differences.tsv" | tr -d ' ') (test, direct, through the gate)"
	sed 's/^/  /' "$dir/differences.tsv"
fi
if [[ $(count direct fail)$(count direct package) != 00 ]]; then
	echo "failing in both runs (the same outcome direct and through the gate):"
	join -t $'\t' <(awk -F'\t' '$2 == "fail"' "$dir/direct.tsv") <(awk -F'\t' '$2 == "fail"' "$dir/gate.tsv") | cut -f1 | sed 's/^/  /'
fi
echo "outputs: $dir/{direct,gate}.json, $dir/proxy.log"
[[ ! -s $dir/differences.tsv ]] || exit 1
# Two runs that both failed to start pgx's tests would not differ either.
[[ $(count direct pass) != 0 ]] || die "no test passed, not even directly: see $dir/direct.json and $dir/direct.stderr"
