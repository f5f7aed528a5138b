#!/usr/bin/env bash
# together.sh CMD...: run each shell command at once, then print each one's
# output whole, in the order given, and fail when any failed. For steps of
# `make test` that leave a core idle (the bench module's callgrind smoke
# test runs one single-threaded process for about a minute) beside others.
set -uo pipefail
dir=$(mktemp -d "${TMPDIR:-/tmp}/fencegate-together.XXXXXX")
trap 'rm -rf "$dir"' EXIT
# On INT or TERM, stop the commands' process trees (each command runs in a
# process group of its own) and leave.
trap 'for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done; exit 130' INT TERM
set -m
pids=()
for i in $(seq 1 $#); do
	cmd=${!i}
	bash -c "$cmd" >"$dir/$i.out" 2>&1 &
	pids+=($!)
done
failed=0
for i in $(seq 1 $#); do
	cmd=${!i}
	rc=0
	wait "${pids[$((i - 1))]}" || rc=$?
	echo "=== $cmd"
	cat "$dir/$i.out"
	if [ "$rc" != 0 ]; then
		echo "=== FAIL (exit $rc): $cmd"
		failed=1
	fi
done
exit "$failed"
