#!/usr/bin/env bash
# On the GPU machine (packed by scripts/gpu-ncu.sh): ncu counters and stall reasons of the
# streaming DF11 kernel and its BF16 twin on a Qwen3-8B layer's gate matrix (tc_probe's 4th
# launch of each) at each of ROWS rows of x; one line per kernel and row count.
set -uo pipefail
B=/tmp/df11-ncu-bin
mkdir -p $B
xz -dc .gpu/ncu/tc_probe.xz > $B/tc_probe && chmod +x $B/tc_probe
M=""
for r in barrier long_scoreboard short_scoreboard math_pipe_throttle wait mio_throttle lg_throttle \
    not_selected selected dispatch_stall no_instruction; do
  M="$M,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
done
M="smsp__inst_executed.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed$M"
M="$M,lts__t_sector_hit_rate.pct,l1tex__t_sector_hit_rate.pct,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"
M="$M,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
M="$M,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.per_cycle_active"
for nb in ${ROWS:-1 8 16 32}; do
  for k in df11 bf16; do
    echo "=== $k nb=$nb"
    ncu --clock-control none --metrics "$M" -k regex:${k}_tc_stream --launch-skip 4 -c 1 \
      $B/tc_probe 0 0 "$nb" 2>&1 | grep -E "smsp__|gpu__|dram__|lts__|l1tex__|sm__" \
      | awk '{print $1, $NF}' \
      | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | tr '\n' ' '
    echo
  done
done
