// CUTLASS 3.x (sm90, TMA warp-specialized) BF16 GEMMs against cuBLAS, in df11-candle's orientation
// and Qwen3-8B's per-layer shapes.
//
// Problem: Y[rows, n] = X[rows, k] . W[n, k]^T; BF16 in, f32 accumulation, BF16 out; W row-major
// [n, k], X row-major [rows, k], Y row-major [rows, n]. The weights sit on the GEMM's M side:
// D[n, rows] = W[n, k] . X^T, A = W (K-major), B = X (K-major), D column-major (that is Y
// row-major). cuBLAS runs the same product (cublasGemmEx, op(A) = T, op(B) = N, compute 32F,
// default algorithm, 32 MiB workspace).
//
// Every CUTLASS configuration is one line of the tables below (CG_CONFIGS_1..3). Each table is
// its own translation unit when built with -DCG_PART=1..3 (-DCG_PART=0: main and cuBLAS only);
// without CG_PART, one translation unit holds everything (one nvcc for all the configurations:
// slower, and more memory than the ~6 GB a part takes). See kernels/harness/cutlass_gemm.sh.
// The GEMM template is cutlass_sm90.cuh; the driver (data, cuBLAS, checks, timing, report)
// cutlass_bench_run.cuh, shared with cutlass_mixed.cu.
//
// Usage: cutlass_gemm [--shapes qkv,o,gate_up,down] [--rows 1,8,16,32,64,128,512,4096]
//                     [--configs SUB,...] [--skip SUB,...] [--splits 0,4|none] [--iters N]
//                     [--reps N] [--exact] [--no-graph] [--seed N] [--timeout S] [--list]
// Exit status: 0 when every result passed its checks, 1 when one did not, 2 on a fatal error.

#include "cutlass_bench_api.cuh"

#if !defined(CG_PART)
#define CG_PART_ALL 1
#define CG_PART -1
#else
#define CG_PART_ALL 0
#endif

// ---------------------------------------------------------------------------------------------
// The configurations. X(name, schedule, tile M, tile N, tile K, cluster M, tile scheduler)
//   schedule: WS    KernelTmaWarpSpecialized (one consumer warpgroup, not persistent)
//             PP    KernelTmaWarpSpecializedPingpong (two consumer warpgroups, a tile each, persistent)
//             COOP  KernelTmaWarpSpecializedCooperative (two consumer warpgroups share a tile, M >= 128)
//   scheduler: Default (the schedule's own), Persistent, StreamK (cooperative only; also runs as
//             split-K, see --splits)
// The mainloop's stage count is the builder's automatic one (shared memory less the epilogue's).
// ---------------------------------------------------------------------------------------------
#define CG_CONFIGS_1(X)                                          \
  X(ws_64x16x128_c1,        WS,   64,  16, 128, 1, Default)      \
  X(pp_64x16x128_c1,        PP,   64,  16, 128, 1, Persistent)   \
  X(coop_128x16x64_c1_sk,   COOP, 128, 16, 64,  1, StreamK)      \
  X(coop_128x16x128_c1_sk,  COOP, 128, 16, 128, 1, StreamK)      \
  X(coop_128x16x128_c2_sk,  COOP, 128, 16, 128, 2, StreamK)
#define CG_CONFIGS_2(X)                                          \
  X(pp_64x32x128_c1,        PP,   64,  32, 128, 1, Persistent)   \
  X(coop_128x32x128_c1_sk,  COOP, 128, 32, 128, 1, StreamK)      \
  X(pp_64x64x64_c1,         PP,   64,  64, 64,  1, Persistent)   \
  X(coop_128x64x64_c1_sk,   COOP, 128, 64, 64,  1, StreamK)
#define CG_CONFIGS_3(X)                                          \
  X(coop_128x128x64_c1,     COOP, 128, 128, 64, 1, Persistent)   \
  X(pp_128x128x64_c1,       PP,   128, 128, 64, 1, Persistent)   \
  X(coop_128x128x64_c2_sk,  COOP, 128, 128, 64, 2, StreamK)      \
  X(coop_128x256x64_c1_sk,  COOP, 128, 256, 64, 1, StreamK)      \
  X(coop_128x256x64_c2,     COOP, 128, 256, 64, 2, Persistent)
#define CG_CONFIGS_ALL(X) CG_CONFIGS_1(X) CG_CONFIGS_2(X) CG_CONFIGS_3(X)

#define CG_DECLARE(name, S, TM, TN, TK, CM, SCHED) std::unique_ptr<GemmConfig> make_##name();
CG_CONFIGS_ALL(CG_DECLARE)

// ---- the CUTLASS side: one translation unit per table ----
#if CG_PART_ALL || CG_PART > 0
#include "cutlass_sm90.cuh"
#define CG_DEFINE(name, S, TM, TN, TK, CM, SCHED) CB_DEFINE(name, bf16, S, TM, TN, TK, CM, SCHED)
#if CG_PART_ALL || CG_PART == 1
CG_CONFIGS_1(CG_DEFINE)
#endif
#if CG_PART_ALL || CG_PART == 2
CG_CONFIGS_2(CG_DEFINE)
#endif
#if CG_PART_ALL || CG_PART == 3
CG_CONFIGS_3(CG_DEFINE)
#endif
#endif  // the CUTLASS side

// ---- main ----
#if CG_PART_ALL || CG_PART == 0
#include "cutlass_bench_run.cuh"

#define CG_REGISTER(name, S, TM, TN, TK, CM, SCHED) \
  {#name, WType::kBf16, #S, TM, TN, TK, CM, #SCHED, &make_##name},
static const ConfigInfo kConfigs[] = {CG_CONFIGS_ALL(CG_REGISTER)};

int main(int argc, char** argv) {
  cb::BenchSpec spec;
  spec.prog = "cutlass_gemm";
  spec.configs = kConfigs;
  spec.count = sizeof kConfigs / sizeof kConfigs[0];
  spec.default_rows = {1, 8, 16, 32, 64, 128, 512, 4096};
  spec.mixed = false;
  return cb::run_bench(spec, argc, argv);
}
#endif  // main
