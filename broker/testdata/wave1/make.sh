#!/bin/sh
# make.sh writes the wave-1 data-directory fixture (data/, crashed/, expect.json next to
# this script) with the broker as it was before the reshape: it checks out that commit in
# a temporary git worktree, copies gen/main.go into it, runs it there, and removes the
# worktree. broker.TestOpenWave1Fixture reads the result.
#
# The fixture is written once and committed. Running this again gives the same state with
# a new receipt secret (so new receipts and secret bytes): only do it to repair the
# fixture itself, never to make the test pass after a format change.
set -eu

commit=c959ff6 # the last commit before the reshape of queue, broker and server

here=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$here" rev-parse --show-toplevel)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/okiba-wave1.XXXXXX")
cleanup() {
	git -C "$root" worktree remove --force "$tmp/src" 2>/dev/null || true
	git -C "$root" worktree prune
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

git -C "$root" worktree add --quiet --detach "$tmp/src" "$commit"
mkdir -p "$tmp/src/broker/testdata/wave1/gen"
cp "$here/gen/main.go" "$tmp/src/broker/testdata/wave1/gen/main.go"
full=$(git -C "$tmp/src" rev-parse HEAD)
(cd "$tmp/src" && go run ./broker/testdata/wave1/gen -commit "$full" -out "$tmp/out")

rm -rf "$here/data" "$here/crashed" "$here/expect.json"
cp -R "$tmp/out/data" "$tmp/out/crashed" "$here/"
cp "$tmp/out/expect.json" "$here/expect.json"
echo "wrote $here/data, $here/crashed and $here/expect.json with the broker of $full"
