#!/usr/bin/env bash
# fuzz.sh runs every Go fuzz target in the module for the given time each.
set -euo pipefail
t=${1:-10s}
cd "$(dirname "$0")/.."
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' || true); do
		echo "fuzz $pkg $f for $t"
		go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg"
	done
done
