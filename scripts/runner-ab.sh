#!/usr/bin/env bash
# `bench --runner` of two host binaries side by side: for each of Direct, the
# pass-through guest and the starting harness, binary A then binary B, PAIRS
# times, each run in its own checkout (so each builds its own starting
# harness and guest) with its own store under $OUT. Prints each run's host
# CPU, hooks and waiting-floor lines; the full outputs stay in $OUT.
#
#   scripts/runner-ab.sh BIN_A CHECKOUT_A BIN_B CHECKOUT_B [PAIRS]
#
# e.g. an older commit's release build against this tree's:
#   git clone -q . /tmp/a && git -C /tmp/a checkout -q a02caf6
#   (cd /tmp/a && cargo build --release --bin ecdysis-host)
#   scripts/runner-ab.sh /tmp/a/target/release/ecdysis-host /tmp/a target/release/ecdysis-host .
# An old checkout needs the τ² data too: ln -s "$PWD/.ecdysis/data" /tmp/a/.ecdysis/data
set -uo pipefail
if [ $# -lt 4 ]; then
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
OUT=${OUT:-/tmp/runner-ab}
PAIRS=${5:-3}
mkdir -p "$OUT"
side() {
    local name=$1 bin dir
    bin=$(realpath "$2") || { echo "no binary $2" >&2; exit 2; }
    dir=$(realpath "$3") || { echo "no checkout $3" >&2; exit 2; }
    local tag=${4//\//_}
    echo "== pair $pair $name $4 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd "$dir" && "$bin" --store "$OUT/store-$name" bench --runner --harness "$4") \
        > "$OUT/$pair-$name-$tag.txt" 2>&1 || { cat "$OUT/$pair-$name-$tag.txt"; exit 1; }
    grep -E "host CPU|of which|waiting floor|^wall " "$OUT/$pair-$name-$tag.txt"
}
for pair in $(seq 1 "$PAIRS"); do
    for harness in none guests/direct harness-template; do
        side a "$1" "$2" "$harness"
        side b "$3" "$4" "$harness"
    done
done
