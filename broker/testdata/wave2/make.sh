#!/bin/sh
# make.sh writes the wave-2 fixture (data/, okiba.backup, expect.json next to this script)
# with the code of the commit checked out: checkpoint version 4, queue snapshot version 6,
# export format 1. broker.TestOpenWave2Fixture reads it.
#
# Written once and committed: run it again only to repair the fixture itself, never to
# make the test pass after a format change (that needs a migration).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$here" rev-parse --show-toplevel)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/okiba-wave2.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && go run ./broker/testdata/wave2/gen -commit "$(git rev-parse HEAD)" -out "$tmp/out")
rm -rf "$here/data" "$here/okiba.backup" "$here/expect.json"
cp -R "$tmp/out/data" "$here/data"
cp "$tmp/out/okiba.backup" "$tmp/out/expect.json" "$here/"
echo "wrote the wave-2 fixture in $here"
