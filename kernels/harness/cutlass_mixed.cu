// CUTLASS 3.x sm90 mixed-input GEMMs (narrow weights converted to BF16 in registers) against
// cuBLAS BF16, in df11-candle's orientation and Qwen3-8B's per-layer shapes.
//
// Problem: Y[rows, n] = X[rows, k] . W[n, k]^T with W stored narrow (u8, s8, s4) and X, Y BF16,
// f32 accumulation. The weights sit on the GEMM's M side as the A operand, K-major:
// D[n, rows] = W[n, k] . X^T. CUTLASS's CollectiveBuilder, given A narrower than B, builds the
// mixed-input register-sourced mainloop (sm90_mma_tma_gmma_rs_warpspecialized_mixed_input.hpp)
// in convert-only mode (no scales, no zero points): TMA brings W's tile (narrow) and X's tile to
// shared memory, the consumer warpgroups load W's fragment to registers, convert it to BF16 and
// issue wgmma with A from registers. A is already the narrow operand and K-major, so CUTLASS does
// not swap the operands and the TMA epilogue applies. For reference the table also has BF16
// weights through that same RS mainloop (bf16rs: identity conversion) and through the usual
// shared-memory-sourced mainloop (bf16: the best configurations of cutlass_gemm at 16 and 64
// rows). See cutlass_sm90.cuh.
//
// Data: integers, so that every configuration must match bit for bit: X in -4..4, W in its type's
// range (u8 0..255, s8 -128..127, s4 -8..7, BF16 -128..127). Reference per weight type: cuBLAS on
// W widened to BF16 on the device (exact), plus 64 outputs against a float64 sum on the host.
// Speed is against cuBLAS BF16 (cublasGemmEx on BF16 weights of the same shape).
//
// Tables CM_CONFIGS_1..6 (two configurations each: ~4.5 GB of compiler memory): one translation
// unit each with -DCM_PART=1..6 (-DCM_PART=0: main); without CM_PART, one translation unit holds
// everything (slow, and far more memory). See kernels/harness/cutlass_gemm.sh.
//
// Usage: cutlass_mixed [--shapes qkv,o,gate_up,down] [--rows 16,32,64,128,512,4096]
//                      [--configs SUB,...] [--skip SUB,...] [--splits 0,4|none] [--iters N]
//                      [--reps N] [--no-graph] [--seed N] [--timeout S] [--list]
// Exit status: 0 when every result passed its checks, 1 when one did not, 2 on a fatal error.

#include "cutlass_bench_api.cuh"

#if !defined(CM_PART)
#define CM_PART_ALL 1
#define CM_PART -1
#else
#define CM_PART_ALL 0
#endif

// ---------------------------------------------------------------------------------------------
// The configurations. X(name, weight type, schedule, tile M, tile N, tile K, cluster M, scheduler)
//   weight type: u8 (uint8_t), s8 (int8_t), s4 (cutlass::int4b_t): mixed-input RS, convert-only;
//             bf16rs: BF16 through the same RS mainloop; bf16: BF16, shared-memory-sourced.
//   schedule, scheduler: as in cutlass_gemm.cu (WS, PP, COOP; Default, Persistent, StreamK).
// The RS mainloop needs tile K >= 64 (four wgmma K blocks of 16) and tile M >= 128 for COOP.
// ---------------------------------------------------------------------------------------------
#define CM_CONFIGS_1(X)                                                    \
  X(u8_ws_64x16x128_c1,        u8,     WS,   64,  16,  128, 1, Default)    \
  X(u8_pp_64x16x128_c1,        u8,     PP,   64,  16,  128, 1, Persistent)
#define CM_CONFIGS_2(X)                                                    \
  X(u8_pp_64x32x128_c1,        u8,     PP,   64,  32,  128, 1, Persistent) \
  X(u8_coop_128x16x128_c1_sk,  u8,     COOP, 128, 16,  128, 1, StreamK)
#define CM_CONFIGS_3(X)                                                    \
  X(u8_pp_64x64x64_c1,         u8,     PP,   64,  64,  64,  1, Persistent) \
  X(u8_coop_128x128x64_c1,     u8,     COOP, 128, 128, 64,  1, Persistent)
#define CM_CONFIGS_4(X)                                                    \
  X(u8_coop_128x256x64_c1,     u8,     COOP, 128, 256, 64,  1, Persistent) \
  X(s8_pp_64x16x128_c1,        s8,     PP,   64,  16,  128, 1, Persistent)
#define CM_CONFIGS_5(X)                                                    \
  X(s4_pp_64x16x128_c1,        s4,     PP,   64,  16,  128, 1, Persistent) \
  X(bf16rs_pp_64x16x128_c1,    bf16rs, PP,   64,  16,  128, 1, Persistent)
#define CM_CONFIGS_6(X)                                                    \
  X(bf16_ws_64x16x128_c1,      bf16,   WS,   64,  16,  128, 1, Default)    \
  X(bf16_pp_64x64x64_c1,       bf16,   PP,   64,  64,  64,  1, Persistent)
#define CM_CONFIGS_ALL(X)                                                              \
  CM_CONFIGS_1(X) CM_CONFIGS_2(X) CM_CONFIGS_3(X) CM_CONFIGS_4(X) CM_CONFIGS_5(X) CM_CONFIGS_6(X)

#define CM_DECLARE(name, W, S, TM, TN, TK, CM, SCHED) std::unique_ptr<GemmConfig> make_##name();
CM_CONFIGS_ALL(CM_DECLARE)

// ---- the CUTLASS side: one translation unit per table ----
#if CM_PART_ALL || CM_PART > 0
#include "cutlass_sm90.cuh"
#if CM_PART_ALL || CM_PART == 1
CM_CONFIGS_1(CB_DEFINE)
#endif
#if CM_PART_ALL || CM_PART == 2
CM_CONFIGS_2(CB_DEFINE)
#endif
#if CM_PART_ALL || CM_PART == 3
CM_CONFIGS_3(CB_DEFINE)
#endif
#if CM_PART_ALL || CM_PART == 4
CM_CONFIGS_4(CB_DEFINE)
#endif
#if CM_PART_ALL || CM_PART == 5
CM_CONFIGS_5(CB_DEFINE)
#endif
#if CM_PART_ALL || CM_PART == 6
CM_CONFIGS_6(CB_DEFINE)
#endif
#endif  // the CUTLASS side

// ---- main ----
#if CM_PART_ALL || CM_PART == 0
#include "cutlass_bench_run.cuh"

constexpr WType kW_u8 = WType::kU8, kW_s8 = WType::kS8, kW_s4 = WType::kS4,
                kW_bf16 = WType::kBf16, kW_bf16rs = WType::kBf16Rs;
#define CM_REGISTER(name, W, S, TM, TN, TK, CM, SCHED) \
  {#name, kW_##W, #S, TM, TN, TK, CM, #SCHED, &make_##name},
static const ConfigInfo kConfigs[] = {CM_CONFIGS_ALL(CM_REGISTER)};

int main(int argc, char** argv) {
  cb::BenchSpec spec;
  spec.prog = "cutlass_mixed";
  spec.configs = kConfigs;
  spec.count = sizeof kConfigs / sizeof kConfigs[0];
  spec.default_rows = {16, 32, 64, 128, 512, 4096};
  spec.mixed = true;
  return cb::run_bench(spec, argc, argv);
}
#endif  // main
