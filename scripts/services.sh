#!/usr/bin/env bash
# services.sh makes sure what fencegate's tests and demos need is installed and
# running on this machine: PostgreSQL (127.0.0.1:5432, trust auth for local
# TCP), Redis (127.0.0.1:6379, no persistence), and the tools some tests and
# benchmarks drive (pgbench, psql, psycopg2, Node.js with npm, pgbouncer, etcd,
# faketime, and iproute2 and nftables for the three-host rehearsal in network
# namespaces).
# It installs missing Debian packages (root only) and starts stopped services.
# It is idempotent and exits non-zero, saying what is missing, when it cannot
# provide something.
#
#   scripts/services.sh           servers and every test tool (make test)
#   scripts/services.sh servers   PostgreSQL and Redis only (make demo, make dev):
#                                 when both already answer, nothing is
#                                 installed and root is not needed
set -euo pipefail

log() { echo "services: $*" >&2; }
die() { echo "services: $*" >&2; exit 1; }

mode=${1:-all}
case "$mode" in
all | servers) ;;
*) die "unknown mode $mode; use 'servers' or no argument" ;;
esac

# answers HOST PORT: true when something accepts TCP connections there.
answers() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

if [[ $mode == servers ]] && answers 127.0.0.1 5432 && answers 127.0.0.1 6379; then
	log "PostgreSQL and Redis are up"
	exit 0
fi

need_pkgs=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
wanted=(postgresql postgresql-client redis-server redis-tools)
if [[ $mode == all ]]; then
	wanted+=(pgbouncer etcd-server etcd-client python3-psycopg2 python3-redis faketime libfaketime iproute2 nftables nodejs npm)
fi
for p in "${wanted[@]}"; do
	have_pkg "$p" || need_pkgs+=("$p")
done
# A machine may carry the servers outside Debian's packages; only ask for
# packages whose programs are really missing.
filtered=()
for p in "${need_pkgs[@]}"; do
	case "$p" in
	postgresql) command -v pg_ctlcluster >/dev/null || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || filtered+=("$p") ;;
	postgresql-client) command -v psql >/dev/null && command -v pgbench >/dev/null || filtered+=("$p") ;;
	redis-server) command -v redis-server >/dev/null || filtered+=("$p") ;;
	redis-tools) command -v redis-cli >/dev/null || filtered+=("$p") ;;
	iproute2) command -v ip >/dev/null || filtered+=("$p") ;;
	nftables) command -v nft >/dev/null || filtered+=("$p") ;;
	# The Node.js client needs node 18 or later and npm (Debian 12 ships 18).
	nodejs) command -v node >/dev/null || filtered+=("$p") ;;
	npm) command -v npm >/dev/null || filtered+=("$p") ;;
	*) filtered+=("$p") ;;
	esac
done
if ((${#filtered[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		die "missing packages: ${filtered[*]}; install them (apt-get install ${filtered[*]}) or run this script as root"
	fi
	log "installing ${filtered[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq "${filtered[@]}" >/dev/null || die "apt-get install ${filtered[*]} failed"
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
