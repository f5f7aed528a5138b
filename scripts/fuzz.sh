#!/usr/bin/env bash
# fuzz.sh runs every Go fuzz target in the module for the given -fuzztime
# each: a duration (10s) or a count of inputs (20000x). The tests use a
# count: with a duration, Go 1.26's fuzz coordinator can report "context
# deadline exceeded" as a failure when the time runs out on a busy machine
# (golang/go#75804, fixed in Go 1.27); a count has no deadline to race.
set -euo pipefail
t=${1:-10s}
cd "$(dirname "$0")/.."
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' || true); do
		echo "fuzz $pkg $f for $t"
		if ! out=$(go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg" 2>&1); then
			echo "$out"
			exit 1
		fi
		echo "$out" | tail -1
	done
done
