#!/usr/bin/env bash
# Kernel iteration, profile (on the GPU machine, after .gpu/tc/run.sh; packed by scripts/gpu-tc.sh):
# stall reasons of the streaming kernels on a Qwen3-8B layer's gate matrix (launch 4 of each kind
# in tc_probe), and the DF11 kernel's SASS-level counters as CSV under $OUT (the folder logs go
# to; default /tmp/df11-tc). BATCH=N: x rows.
B=/tmp/df11-tc-bin
[ -x $B/tc_probe ] || { mkdir -p $B; xz -dc .gpu/tc/bins.tar.xz | tar xf - -C $B; chmod +x $B/*; }
OUT=${OUT:-/tmp/df11-tc}
cd crates/df11-candle || exit 1
M=""
for r in barrier long_scoreboard short_scoreboard math_pipe_throttle wait mio_throttle lg_throttle \
    not_selected selected dispatch_stall branch_resolving no_instruction imc_miss; do
  M="$M,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
done
M="smsp__inst_executed.sum,gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second$M"
for k in df11 bf16; do
  ncu --clock-control none --metrics "$M" -k regex:${k}_tc_stream --launch-skip 4 -c 1 \
    $B/tc_probe 0 0 "${BATCH:-1}" > "$OUT/stall_$k.txt" 2>&1
  echo "== $k"; grep -E "smsp__|gpu__|sm__" "$OUT/stall_$k.txt" | awk '{print $1, $NF}' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
done
ncu --clock-control none --section SourceCounters --page source --print-source sass --csv \
  -k regex:df11_tc_stream --launch-skip 4 -c 1 $B/tc_probe 0 0 "${BATCH:-1}" > "$OUT/src_df11.csv" 2>/dev/null
