# Sourced by the GPU suite's scripts on the GPU machine (as .gpu/suite/unpack.sh): unpack_suite
# unpacks every pack of the suite (bins.tar.xz, or bins-tests.tar.xz and bins-bench.tar.xz of
# SUITE_SPLIT=1) into the binaries' folder, once per machine and pack, so a machine can be given
# the packs one after the other.
#     unpack_suite [SUITE [BIN]]
unpack_suite() {
  local suite=${1:-.gpu/suite} bin=${2:-/tmp/df11-suite-bin} pack sum mark
  mkdir -p "$bin"
  for pack in "$suite"/bins*.tar.xz; do
    [ -f "$pack" ] || continue
    sum=$(cksum < "$pack")
    mark="$bin/.pack-$(basename "$pack" .tar.xz)"
    [ "$(cat "$mark" 2> /dev/null)" = "$sum" ] && continue
    xz -T0 -dc "$pack" | tar xf - -C "$bin" && chmod +x "$bin"/* && echo "$sum" > "$mark"
  done
}

# The Qwen3-8B-shaped model the end-to-end scripts measure, made once per machine: a BF16 folder
# of N(0, 0.02) weights (synth_model) in WORK/bf16, compressed into WORK/df11 and verified;
# the tools' output in LOG/synth.log and LOG/compress.txt.
#     e2e_model BIN WORK LOG
e2e_model() {
  local bin=$1 work=$2 log=$3 t0 t1 t2
  [ -f "$work/df11/config.json" ] && return 0
  mkdir -p "$work" "$log"
  t0=$(date +%s)
  "$bin/synth_model" --template tests/fixtures/models/qwen3-tiny/bf16 --out "$work/bf16" 2> "$log/synth.log" \
    || { tail "$log/synth.log"; return 1; }
  t1=$(date +%s)
  "$bin/df11" compress "$work/bf16" "$work/df11" 2>/dev/null | tee "$log/compress.txt" || return 1
  t2=$(date +%s)
  "$bin/df11" verify "$work/df11" "$work/bf16" 2>/dev/null | tee -a "$log/compress.txt" || return 1
  echo "synth $((t1 - t0)) s, compress $((t2 - t1)) s" | tee -a "$log/compress.txt"
  du -sh "$work/bf16" "$work/df11" | tee -a "$log/compress.txt"
}
