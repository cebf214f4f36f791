#!/usr/bin/env bash
# Runs gpusched's fuzz targets (fuzz/, cargo-fuzz over libFuzzer) for a bounded time each and
# prints each target's executions. Installs cargo-fuzz from crates.io into
# ${GPUSCHED_CACHE:-$HOME/.cache/gpusched}/cargo-fuzz once; corpora grow in
# $GPUSCHED_CACHE/fuzz-corpus/<target> between runs. Works on the stable toolchain
# (RUSTC_BOOTSTRAP=1 for the flags cargo-fuzz passes; no sanitizer: the fuzzed crates forbid
# unsafe code), or on nightly when FUZZ_TOOLCHAIN=nightly (then FUZZ_SANITIZER may be address).
#
#   scripts/fuzz.sh                          every target, FUZZ_SECONDS (60) each
#   scripts/fuzz.sh proto_requests           one target
#   FUZZ_SECONDS=14400 scripts/fuzz.sh annotations     by hand, for hours
#
# A crash stops the run with the input in fuzz/artifacts/<target>/; replay it with
#   cargo fuzz run --fuzz-dir fuzz -s none <target> fuzz/artifacts/<target>/<file>
set -euo pipefail
cd "$(dirname "$0")/.."
export GPUSCHED_CACHE="${GPUSCHED_CACHE:-$HOME/.cache/gpusched}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$GPUSCHED_CACHE/target}"
export CARGO_INCREMENTAL=0
seconds="${FUZZ_SECONDS:-60}"
sanitizer="${FUZZ_SANITIZER:-none}"
toolchain="${FUZZ_TOOLCHAIN:-}"
version=0.13.2
root="$GPUSCHED_CACHE/cargo-fuzz"
if ! "$root/bin/cargo-fuzz" --version 2>/dev/null | grep -q " $version\$"; then
  cargo install cargo-fuzz --version "$version" --locked --root "$root"
fi
export PATH="$root/bin:$PATH"
[ -n "$toolchain" ] || export RUSTC_BOOTSTRAP=1
plus=()
[ -z "$toolchain" ] || plus=("+$toolchain")

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=()
  for f in fuzz/fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi
summary=()
for t in "${targets[@]}"; do
  corpus="$GPUSCHED_CACHE/fuzz-corpus/$t"
  mkdir -p "$corpus"
  echo "=== fuzz $t: ${seconds}s ==="
  log="$(mktemp)"
  set +e
  cargo "${plus[@]}" fuzz run --fuzz-dir fuzz -s "$sanitizer" "$t" "$corpus" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -dict=fuzz/gpusched.dict -print_final_stats=1 2>&1 | tee "$log" |
    grep --line-buffered -E "INITED|DONE|pulse|panicked|ERROR|SUMMARY|Test unit written|stat::number"
  status="${PIPESTATUS[0]}"
  set -e
  execs="$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1)"
  rm -f "$log"
  if [ "$status" -ne 0 ]; then
    echo "fuzz $t: FAILED (exit $status); the input is in fuzz/artifacts/$t/" >&2
    exit 1
  fi
  summary+=("$t: ${execs:-?} executions in ${seconds}s, no crash")
done
printf '%s\n' "${summary[@]}"
