# shellcheck shell=bash
# Sourced, not run: a throwaway PostgreSQL cluster of any major, for the
# version matrix (pg-matrix.sh) and the driver suite (driver-suite.sh).
#
#   pg_start BIN_DIR   initdb in a temporary directory, start on a free
#                      loopback port; sets pg_dsn, pg_port, pg_dir, pg_pid
#                      (returns 1 with pg_error set when it cannot)
#   pg_stop            stop the server and remove its directory (idempotent)
#
# As root the server runs as user postgres (initdb refuses root), through
# setpriv, which execs: pg_pid is the server's own, so pg_stop stops the
# server itself, not a wrapper that might leave it orphaned.

pg_dsn="" pg_port="" pg_dir="" pg_pid="" pg_error=""

_pg_runas=()
if [ "$(id -u)" = 0 ]; then
	_pg_runas=(setpriv --reuid=postgres --regid=postgres --init-groups)
fi

pg_start() {
	local bin=$1 try
	pg_error=""
	if [ ${#_pg_runas[@]} -gt 0 ] && ! id postgres >/dev/null 2>&1; then
		pg_error="running as root needs user postgres to run PostgreSQL as (apt-get install postgresql, or useradd postgres)"
		return 1
	fi
	pg_dir=$(mktemp -d "${TMPDIR:-/tmp}/fencegate-pg.XXXXXX")
	chmod 755 "$pg_dir"
	[ ${#_pg_runas[@]} -eq 0 ] || chown postgres: "$pg_dir"
	if ! "${_pg_runas[@]}" "$bin/initdb" -D "$pg_dir/data" -U postgres --auth=trust -E UTF8 \
		--no-sync >"$pg_dir/initdb.log" 2>&1; then
		pg_error="initdb: $(tail -3 "$pg_dir/initdb.log" | tr '\n' ' ')"
		return 1
	fi
	for try in 1 2 3 4 5; do
		pg_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
		"${_pg_runas[@]}" "$bin/postgres" -D "$pg_dir/data" -p "$pg_port" \
			-c listen_addresses=127.0.0.1 -c unix_socket_directories= -c fsync=off \
			-c max_connections=300 >>"$pg_dir/server.log" 2>&1 &
		pg_pid=$!
		for _ in $(seq 1 300); do
			kill -0 "$pg_pid" 2>/dev/null || break
			if grep -q 'ready to accept connections' "$pg_dir/server.log" 2>/dev/null; then
				pg_dsn="postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable"
				return 0
			fi
			sleep 0.1
		done
		kill -KILL "$pg_pid" 2>/dev/null || true
		wait "$pg_pid" 2>/dev/null || true
		pg_pid=""
	done
	pg_error="the server did not start: $(tail -5 "$pg_dir/server.log" | tr '\n' ' ')"
	return 1
}

pg_stop() {
	if [ -n "$pg_pid" ]; then
		kill -INT "$pg_pid" 2>/dev/null || true
		for _ in $(seq 1 200); do kill -0 "$pg_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pg_pid" 2>/dev/null || true
		wait "$pg_pid" 2>/dev/null || true
		pg_pid=""
	fi
	[ -z "$pg_dir" ] || rm -rf "$pg_dir"
	pg_dir="" pg_dsn=""
}
