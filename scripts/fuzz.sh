#!/usr/bin/env bash
# The fuzz targets of fuzz/ (libFuzzer through the libfuzzer-sys crate), built with the
# sanitizer-coverage flags cargo-fuzz uses, without needing cargo-fuzz.
#
#     bash scripts/fuzz.sh list                        # the targets
#     bash scripts/fuzz.sh build                       # build every target
#     bash scripts/fuzz.sh smoke [SECONDS]             # each target SECONDS (default 20) from its seeds (CI)
#     bash scripts/fuzz.sh run TARGET [LIBFUZZER ARGS] # one target, its corpus kept in fuzz/corpus/TARGET
#     bash scripts/fuzz.sh replay TARGET FILE...       # run inputs once (a crash, a corpus entry)
#     bash scripts/fuzz.sh seeds                       # regenerate fuzz/seeds from tests/fixtures
#
# A long run: `bash scripts/fuzz.sh run unit_decode -runs=10000000 -max_total_time=1800`. A crash
# stops the run and is written to fuzz/artifacts/TARGET/; fix it, add a regression test to the
# crate's tests, and replay the artifact to check.
#
# Environment:
#   FUZZ_TOOLCHAIN  nightly (default when installed) or stable; stable builds without a sanitizer
#   FUZZ_SANITIZER  address (default on nightly, as cargo-fuzz) or none
#   FUZZ_PROFILE    release (default: optimised) or smoke (dependencies unoptimised: quick to build)
#   FUZZ_JOBS       cargo -j (default 2); CARGO_TARGET_DIR as cargo reads it (default fuzz/target)
# The targets' temporary files go to a folder of their own (DF11_FUZZ_TMP), removed at the end.
set -euo pipefail
orig=$PWD
cd "$(dirname "$0")/../fuzz"

if [ -z "${FUZZ_TOOLCHAIN:-}" ]; then
  if cargo +nightly --version >/dev/null 2>&1; then FUZZ_TOOLCHAIN=nightly; else FUZZ_TOOLCHAIN=stable; fi
fi
toolchain=$FUZZ_TOOLCHAIN
if [ "$toolchain" = nightly ]; then sanitizer=${FUZZ_SANITIZER:-address}; else sanitizer=${FUZZ_SANITIZER:-none}; fi
profile=${FUZZ_PROFILE:-release}
jobs=${FUZZ_JOBS:-2}
triple=$(rustc +"$toolchain" -vV | sed -n 's/^host: //p')
targets=(safetensors_index config unit_decode packed chat_template server_request)

# Builds with the flags cargo-fuzz passes; extra cargo arguments (default: every target).
build() {
  local flags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
  flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters"
  flags+=" -Cllvm-args=-sanitizer-coverage-pc-table"
  flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares"
  flags+=" -Cllvm-args=-sanitizer-coverage-stack-depth"
  flags+=" --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
  [ "$sanitizer" = none ] || flags+=" -Zsanitizer=$sanitizer"
  echo "fuzz: building with $toolchain, sanitizer $sanitizer, profile $profile" >&2
  # --target keeps these flags off build scripts and proc macros, as cargo-fuzz does.
  RUSTFLAGS="$flags" RUSTDOCFLAGS="$flags" cargo +"$toolchain" build --profile "$profile" \
    --target "$triple" -j "$jobs" "${@:---bins}"
}

binary() { echo "${CARGO_TARGET_DIR:-target}/$triple/$profile/$1"; }

# Runs target $1 with libFuzzer arguments $2...; new inputs go to the first corpus folder given.
fuzz() {
  local target=$1
  shift
  local tmp rc=0
  tmp=$(mktemp -d)
  mkdir -p "artifacts/$target"
  DF11_FUZZ_TMP=$tmp ASAN_OPTIONS=${ASAN_OPTIONS:-detect_odr_violation=0} \
    "$(binary "$target")" -artifact_prefix="artifacts/$target/" "$@" || rc=$?
  rm -rf "$tmp"
  return $rc
}

known() {
  local t
  for t in "${targets[@]}"; do [ "$t" = "$1" ] && return 0; done
  echo "fuzz: unknown target '$1' (bash scripts/fuzz.sh list)" >&2
  exit 2
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  list) printf '%s\n' "${targets[@]}" ;;
  build) build ;;
  smoke)
    secs=${1:-20}
    start=$SECONDS
    build
    echo "fuzz smoke: built in $((SECONDS - start)) s"
    for t in "${targets[@]}"; do
      corpus=$(mktemp -d)
      echo "== fuzz smoke: $t (${secs} s from fuzz/seeds/$t)"
      if ! fuzz "$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 "$corpus" "seeds/$t" >"$corpus.log" 2>&1; then
        tail -n 60 "$corpus.log"
        echo "fuzz smoke: $t FAILED (the input is in fuzz/artifacts/$t/)"
        exit 1
      fi
      grep -E '^#[0-9]+[[:space:]]+DONE' "$corpus.log" || true
      rm -rf "$corpus" "$corpus.log"
    done
    echo "fuzz smoke: ${#targets[@]} targets OK ($((SECONDS - start)) s with the build)"
    ;;
  run)
    target=${1:?usage: fuzz.sh run TARGET [LIBFUZZER ARGS]}
    shift
    known "$target"
    build
    mkdir -p "corpus/$target"
    fuzz "$target" -timeout=10 -rss_limit_mb=2048 "$@" "corpus/$target" "seeds/$target"
    ;;
  replay)
    target=${1:?usage: fuzz.sh replay TARGET FILE...}
    shift
    known "$target"
    build
    files=()
    for f in "$@"; do
      case $f in /*) files+=("$f") ;; *) files+=("$orig/$f") ;; esac
    done
    fuzz "$target" "${files[@]}"
    ;;
  seeds)
    # Built like the targets (it reuses their dependencies), run as an ordinary program.
    build --example make_seeds
    "${CARGO_TARGET_DIR:-target}/$triple/$profile/examples/make_seeds" seeds
    ;;
  *)
    sed -n '2,24p' "$0"
    exit 2
    ;;
esac
