#!/usr/bin/env bash
# The service's synchronous pipeline on fixed inputs (server/service/examples/pipeline_check.rs),
# for refactorings that must not change decisions or cost:
#   scripts/pipeline-check.sh answers   one SHA-256 per fixed request's answer (compare with diff)
#   scripts/pipeline-check.sh callgrind instructions per 1,000-node Allocate (valgrind callgrind:
#                                       the difference of 11 and 1 decisions, over 10)
# Release build in $CARGO_TARGET_DIR (default target/).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p gpusched-service --example pipeline_check
bin="$target/release/examples/pipeline_check"
case "${1:-}" in
answers)
    "$bin" answers
    ;;
callgrind)
    out="$(mktemp -d)"
    trap 'rm -rf "$out"' EXIT
    count() {
        valgrind --tool=callgrind --callgrind-out-file="$out/cg.$1" "$bin" allocate "$1" \
            >/dev/null 2>"$out/log.$1"
        grep -E '^(summary|totals):' "$out/cg.$1" | head -1 | awk '{print $2}'
    }
    one="$(count 1)"
    eleven="$(count 11)"
    echo "instructions: 1 decision $one, 11 decisions $eleven"
    echo "per 1,000-node Allocate: $(( (eleven - one) / 10 ))"
    ;;
*)
    echo "usage: $0 answers | callgrind" >&2
    exit 2
    ;;
esac
