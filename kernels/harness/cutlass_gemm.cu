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
//
// Usage: cutlass_gemm [--shapes qkv,o,gate_up,down] [--rows 1,8,16,32,64,128,512,4096]
//                     [--configs SUB,...] [--skip SUB,...] [--splits 0,4|none] [--iters N]
//                     [--reps N] [--exact] [--no-graph] [--seed N] [--timeout S] [--list]
// Exit status: 0 when every result passed its checks, 1 when one did not, 2 on a fatal error.

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

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

// ---------------------------------------------------------------------------------------------
// What the CUTLASS translation units offer to main.
// ---------------------------------------------------------------------------------------------
using bf16_bits = uint16_t;

struct GemmProblem {
  int n = 0, k = 0, rows = 0;
  std::vector<const void*> weights;  // identical copies of W, launched in turn
  const void* x = nullptr;
  void* y = nullptr;
  int sm_count = 0;
  int splits = 1;  // StreamK only: 1 = the scheduler's heuristic, > 1 = split-K into that many
};

struct GemmConfig {
  virtual ~GemmConfig() {}
  // Builds one CUTLASS operator per weight copy. Returns "" or why the configuration is skipped.
  virtual std::string prepare(const GemmProblem& p, cudaStream_t stream) = 0;
  virtual cudaError_t launch(int copy, cudaStream_t stream) = 0;
  virtual void release() = 0;
  virtual std::string describe() const = 0;  // threads, shared memory, stages
};

#define CG_DECLARE(name, S, TM, TN, TK, CM, SCHED) std::unique_ptr<GemmConfig> make_##name();
CG_CONFIGS_ALL(CG_DECLARE)

// ---------------------------------------------------------------------------------------------
// The CUTLASS side.
// ---------------------------------------------------------------------------------------------
#if CG_PART_ALL || CG_PART > 0

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/util/packed_stride.hpp"

namespace cg {
using namespace cute;

struct WS {
  using Main = cutlass::gemm::KernelTmaWarpSpecialized;
  using Epi = cutlass::epilogue::TmaWarpSpecialized;
};
struct PP {
  using Main = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epi = cutlass::epilogue::TmaWarpSpecialized;
};
struct COOP {
  using Main = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epi = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
using SchedDefault = void;
using SchedPersistent = cutlass::gemm::PersistentScheduler;
using SchedStreamK = cutlass::gemm::StreamKScheduler;

template <class Schedule, int TM, int TN, int TK, int CM, class Scheduler>
struct CutlassGemm final : GemmConfig {
  using Element = cutlass::bfloat16_t;
  static constexpr int kAlign = 8;  // 16 bytes: what TMA needs
  using TileShape = Shape<Int<TM>, Int<TN>, Int<TK>>;
  using ClusterShape = Shape<Int<CM>, _1, _1>;
  // A = W [n, k] K-major ("RowMajor" M x K); B = X [rows, k] K-major ("ColumnMajor" K x N);
  // D = Y^T [n, rows] column-major. No source C: D = acc (alpha 1, beta 0).
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::ColumnMajor;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      void, LayoutD, kAlign, Element, LayoutD, kAlign, typename Schedule::Epi,
      cutlass::epilogue::fusion::LinearCombination<Element, float, void, float>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA, kAlign, Element,
      LayoutB, kAlign, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      typename Schedule::Main>::CollectiveOp;
  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static constexpr bool kStreamK = std::is_same_v<Scheduler, SchedStreamK>;

  std::vector<Gemm> ops;
  std::vector<typename Gemm::Arguments> arguments;
  std::vector<void*> workspaces;

  std::string describe() const override {
    char s[160];
    snprintf(s, sizeof s, "%u threads, %d B shared, %d stages", unsigned(Kernel::MaxThreadsPerBlock),
             int(Kernel::SharedStorageSize), int(Mainloop::DispatchPolicy::Stages));
    return s;
  }

  std::string prepare(const GemmProblem& p, cudaStream_t stream) override {
    release();
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideC = typename Kernel::StrideC;
    using StrideD = typename Kernel::StrideD;
    auto sa = cutlass::make_cute_packed_stride(StrideA{}, make_shape(p.n, p.k, 1));
    auto sb = cutlass::make_cute_packed_stride(StrideB{}, make_shape(p.rows, p.k, 1));
    auto sc = cutlass::make_cute_packed_stride(StrideC{}, make_shape(p.n, p.rows, 1));
    auto sd = cutlass::make_cute_packed_stride(StrideD{}, make_shape(p.n, p.rows, 1));
    cutlass::KernelHardwareInfo hw;
    cudaGetDevice(&hw.device_id);
    hw.sm_count = p.sm_count;
    ops.resize(p.weights.size());
    for (size_t c = 0; c < p.weights.size(); ++c) {
      typename Gemm::Arguments args{
          cutlass::gemm::GemmUniversalMode::kGemm,
          {p.n, p.rows, p.k, 1},
          {static_cast<Element const*>(p.weights[c]), sa, static_cast<Element const*>(p.x), sb},
          {{}, nullptr, sc, static_cast<Element*>(p.y), sd},
          hw};
      args.epilogue.thread.alpha = 1.0f;
      args.epilogue.thread.beta = 0.0f;
      if constexpr (kStreamK) {
        using Decomposition = cutlass::gemm::kernel::detail::DecompositionMode;
        if (p.splits > 1) {
          args.scheduler.splits = p.splits;
          args.scheduler.decomposition_mode = Decomposition::SplitK;
        }
      }
      cutlass::Status st = Gemm::can_implement(args);
      if (st != cutlass::Status::kSuccess) {
        release();
        return std::string("can_implement: ") + cutlassGetStatusString(st);
      }
      size_t ws_bytes = Gemm::get_workspace_size(args);
      void* ws = nullptr;
      if (ws_bytes > 0) {
        cudaError_t e = cudaMalloc(&ws, ws_bytes);
        if (e != cudaSuccess) {
          release();
          return std::string("workspace cudaMalloc: ") + cudaGetErrorString(e);
        }
      }
      workspaces.push_back(ws);
      arguments.push_back(args);
      st = ops[c].initialize(args, ws, stream);
      if (st != cutlass::Status::kSuccess) {
        cudaError_t e = cudaGetLastError();
        release();
        return std::string("initialize: ") + cutlassGetStatusString(st) + " (" +
               cudaGetErrorString(e) + ")";
      }
    }
    return "";
  }

  cudaError_t launch(int copy, cudaStream_t stream) override {
    cutlass::Status st = cutlass::Status::kSuccess;
    if constexpr (kStreamK) {
      // The stream-K / split-K turnstile counters only count up: like CUTLASS's own
      // run(arguments, workspace), clear them (a memset on the stream, when the decomposition
      // uses any) before every launch.
      st = Kernel::initialize_workspace(arguments[size_t(copy)], workspaces[size_t(copy)], stream);
      if (st != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
    }
    st = ops[size_t(copy)].run(stream);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    return st == cutlass::Status::kSuccess ? cudaSuccess : cudaErrorLaunchFailure;
  }

  void release() override {
    for (void* w : workspaces)
      if (w) cudaFree(w);
    workspaces.clear();
    arguments.clear();
    ops.clear();
  }
  ~CutlassGemm() override { release(); }
};
}  // namespace cg

#define CG_DEFINE(name, S, TM, TN, TK, CM, SCHED)                                     \
  std::unique_ptr<GemmConfig> make_##name() {                                         \
    return std::make_unique<cg::CutlassGemm<cg::S, TM, TN, TK, CM, cg::Sched##SCHED>>(); \
  }
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

// ---------------------------------------------------------------------------------------------
// main: data, cuBLAS, checks, timing, report.
// ---------------------------------------------------------------------------------------------
#if CG_PART_ALL || CG_PART == 0

#include <cublas_v2.h>

#include <unistd.h>

#include <thread>

namespace {

// ---- values: a hash of (seed, index), the same on the host and the device ----
__host__ __device__ inline uint32_t mix32(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return uint32_t(x >> 32);
}
__host__ __device__ inline uint16_t f32_to_bf16_rn(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return uint16_t((b >> 16) | 0x40);  // NaN stays NaN
  b += 0x7fffu + ((b >> 16) & 1u);
  return uint16_t(b >> 16);
}
__host__ __device__ inline float bf16_to_f32(uint16_t h) {
  uint32_t b = uint32_t(h) << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}
// Random mode: uniform in [-1, 1), rounded to BF16. Exact mode: j/8 for j in -8..8, so every
// product is a multiple of 1/64 and every partial sum (|sum| <= k <= 2^14) is exact in f32: any
// correct kernel then gives the same bits.
__host__ __device__ inline uint16_t value_bits(uint64_t seed, uint64_t i, bool exact) {
  uint32_t h = mix32(seed * 0x100000001B3ull ^ i);
  float v = exact ? float(int(h % 17u) - 8) * 0.125f
                  : float(int(h >> 8) - (1 << 23)) * (1.0f / float(1 << 23));
  return f32_to_bf16_rn(v);
}

__global__ void fill_kernel(uint16_t* p, size_t count, uint64_t seed, bool exact) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = value_bits(seed, i, exact);
}

float float_of_bits(unsigned int b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}

struct CmpResult {
  unsigned long long bitdiff;  // outputs whose bits differ
  unsigned long long bad;      // outside the tolerance (or NaN)
  unsigned int max_abs;        // float bits (non-negative: integer order = float order)
  unsigned int max_rel;        // over |ref| >= tol_abs
};

__global__ void compare_kernel(const uint16_t* a, const uint16_t* ref, size_t count, float tol_rel,
                               float tol_abs, CmpResult* out) {
  unsigned long long bitdiff = 0, bad = 0;
  float max_abs = 0.f, max_rel = 0.f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    uint16_t ua = a[i], ub = ref[i];
    if (ua == ub) continue;
    ++bitdiff;
    float x = bf16_to_f32(ua), y = bf16_to_f32(ub);
    float d = fabsf(x - y);
    if (!(d <= tol_rel * fabsf(y) + tol_abs)) ++bad;
    if (d != d) d = INFINITY;
    max_abs = fmaxf(max_abs, d);
    if (fabsf(y) >= tol_abs) max_rel = fmaxf(max_rel, d / fabsf(y));
  }
  for (int o = 16; o > 0; o >>= 1) {
    bitdiff += __shfl_xor_sync(0xffffffffu, bitdiff, o);
    bad += __shfl_xor_sync(0xffffffffu, bad, o);
    max_abs = fmaxf(max_abs, __shfl_xor_sync(0xffffffffu, max_abs, o));
    max_rel = fmaxf(max_rel, __shfl_xor_sync(0xffffffffu, max_rel, o));
  }
  if ((threadIdx.x & 31) == 0 && (bitdiff || bad || max_abs > 0.f)) {
    atomicAdd(&out->bitdiff, bitdiff);
    atomicAdd(&out->bad, bad);
    atomicMax(&out->max_abs, __float_as_uint(max_abs));
    atomicMax(&out->max_rel, __float_as_uint(max_rel));
  }
}

__global__ void gather_kernel(const uint16_t* y, const long long* idx, int count, uint16_t* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) out[i] = y[idx[i]];
}

// ---- errors and the watchdog ----
std::atomic<long long> g_deadline_ms{0};  // 0: idle
char g_phase[256] = "start";

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
void arm(int seconds, const std::string& phase) {
  snprintf(g_phase, sizeof g_phase, "%s", phase.c_str());
  g_deadline_ms = now_ms() + 1000LL * seconds;
}
void disarm() { g_deadline_ms = 0; }
void watchdog() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    long long d = g_deadline_ms;
    if (d && now_ms() > d) {
      fprintf(stdout, "\nFATAL: no progress past the time limit in: %s (a hung kernel?)\n", g_phase);
      fflush(stdout);
      _exit(2);
    }
  }
}

// Called after a CUDA error: if a trivial operation still works the error was not sticky and the
// run continues; otherwise the context is lost and the process stops.
void check_context_or_die(const char* where) {
  cudaDeviceSynchronize();
  cudaGetLastError();
  void* probe = nullptr;
  cudaError_t e = cudaMalloc(&probe, 256);
  if (e == cudaSuccess) e = cudaMemset(probe, 0, 256);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (probe) cudaFree(probe);
  if (e != cudaSuccess) {
    printf("\nFATAL: the CUDA context is lost after an error in %s (%s); stopping. Rerun without "
           "it (--skip).\n", where, cudaGetErrorString(e));
    fflush(stdout);
    _exit(2);
  }
}

#define CUDA_OR_DIE(call)                                                                   \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      printf("FATAL: %s: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
      exit(2);                                                                              \
    }                                                                                       \
  } while (0)

// ---- options ----
struct LayerShape {
  const char* name;
  int n, k;
};
const LayerShape kShapes[] = {
    {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 24576, 4096}, {"down", 4096, 12288}};

struct Options {
  std::vector<std::string> shapes{"qkv", "o", "gate_up", "down"};
  std::vector<int> rows{1, 8, 16, 32, 64, 128, 512, 4096};
  std::vector<std::string> include, skip;
  std::vector<int> splits{0};  // 0: automatic split count
  int iters = 100, reps = 7, timeout = 60;
  bool exact = false, graph = true, list = false;
  uint64_t seed = 1;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

void usage() {
  printf(
      "usage: cutlass_gemm [options]\n"
      "  --shapes LIST    of qkv,o,gate_up,down (Qwen3-8B: 6144x4096, 4096x4096, 24576x4096,\n"
      "                   4096x12288; n x k)\n"
      "  --rows LIST      rows of X (default 1,8,16,32,64,128,512,4096)\n"
      "  --configs LIST   only configurations whose name contains one of these\n"
      "  --skip LIST      leave out configurations whose name contains one of these\n"
      "  --splits LIST    split-K variants of the stream-K configurations, besides the stream-K\n"
      "                   heuristic: a count (NAME/splitN), or 0 = SMs / output tiles, capped at\n"
      "                   the K tiles, when that is > 1 (NAME/splitA; default 0; 'none')\n"
      "  --iters N        launches per timed batch (default 100), --reps N batches (default 7)\n"
      "  --exact          inputs whose products and sums are exact in f32: every output must\n"
      "                   match cuBLAS and the reference bit for bit\n"
      "  --no-graph       time plain stream launches instead of a CUDA graph of the batch\n"
      "  --seed N, --timeout S (per step, default 60), --list (configurations and exit)\n");
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        printf("missing value for %s\n", a.c_str());
        exit(2);
      }
      return argv[++i];
    };
    auto ints = [&](const std::string& s) {
      std::vector<int> v;
      for (auto& t : split_list(s)) v.push_back(atoi(t.c_str()));
      return v;
    };
    if (a == "--shapes") o.shapes = split_list(next());
    else if (a == "--rows") o.rows = ints(next());
    else if (a == "--configs") o.include = split_list(next());
    else if (a == "--skip") o.skip = split_list(next());
    else if (a == "--splits") {
      std::string s = next();
      o.splits = s == "none" ? std::vector<int>{} : ints(s);
    } else if (a == "--iters") o.iters = std::max(1, atoi(next().c_str()));
    else if (a == "--reps") o.reps = std::max(1, atoi(next().c_str()));
    else if (a == "--timeout") o.timeout = std::max(1, atoi(next().c_str()));
    else if (a == "--seed") o.seed = strtoull(next().c_str(), nullptr, 10);
    else if (a == "--exact") o.exact = true;
    else if (a == "--no-graph") o.graph = false;
    else if (a == "--list") o.list = true;
    else if (a == "--help" || a == "-h") {
      usage();
      exit(0);
    } else {
      printf("unknown option %s\n", a.c_str());
      usage();
      return false;
    }
  }
  for (int r : o.rows)
    if (r < 1) {
      printf("rows must be >= 1\n");
      return false;
    }
  return true;
}

// ---- the configuration registry ----
struct ConfigInfo {
  const char* name;
  const char* schedule;
  int tm, tn, tk, cm;
  const char* scheduler;
  std::unique_ptr<GemmConfig> (*make)();
};
#define CG_REGISTER(name, S, TM, TN, TK, CM, SCHED) {#name, #S, TM, TN, TK, CM, #SCHED, &make_##name},
const ConfigInfo kConfigs[] = {CG_CONFIGS_ALL(CG_REGISTER)};

bool selected(const std::string& name, const Options& o) {
  auto has = [&](const std::vector<std::string>& l) {
    for (auto& s : l)
      if (name.find(s) != std::string::npos) return true;
    return false;
  };
  if (!o.include.empty() && !has(o.include)) return false;
  return !has(o.skip);
}

// ---- timing: `reps` batches of `iters` launches (copies in turn), median per launch, in us ----
typedef cudaError_t (*LaunchFn)(void* ctx, int copy, cudaStream_t s);

struct Timing {
  double us = -1;
  int iters = 0;  // launches per batch
  bool graph = false;
  std::string error;
};

Timing time_launches(LaunchFn fn, void* ctx, int copies, const Options& o, cudaStream_t s,
                     const std::string& what) {
  Timing t;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  // Warm-up: every copy once (at least 3 launches), timed roughly to size the batches.
  arm(o.timeout, what + ": warm-up");
  const int warm = std::max(copies, 3);
  cudaError_t e = fn(ctx, 0, s);
  cudaEventRecord(e0, s);
  for (int i = 1; i <= warm && e == cudaSuccess; ++i) e = fn(ctx, i % copies, s);
  cudaEventRecord(e1, s);
  cudaError_t se = cudaStreamSynchronize(s);
  if (e == cudaSuccess) e = se;
  if (e != cudaSuccess) {
    t.error = std::string("warm-up: ") + cudaGetErrorString(e);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return t;
  }
  float warm_ms = 0;
  cudaEventElapsedTime(&warm_ms, e0, e1);
  // At most --iters launches, and about 100 ms a batch (at least 10 launches).
  const double est_us = std::max(1e-3, 1000.0 * warm_ms / warm);
  t.iters = int(std::max(10.0, std::min(double(o.iters), 1e5 / est_us)));
  cudaGraphExec_t exec = nullptr;
  if (o.graph) {
    cudaGraph_t graph = nullptr;
    bool ok = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    for (int i = 0; ok && i < t.iters; ++i) ok = fn(ctx, i % copies, s) == cudaSuccess;
    cudaError_t end = cudaStreamEndCapture(s, &graph);
    ok = ok && end == cudaSuccess && graph &&
         cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    if (graph) cudaGraphDestroy(graph);
    if (!ok) {
      if (exec) cudaGraphExecDestroy(exec);
      exec = nullptr;
      cudaGetLastError();  // capture failures are not sticky; fall back to plain launches
    }
  }
  t.graph = exec != nullptr;
  std::vector<double> per;
  for (int r = -1; r < o.reps; ++r) {  // r = -1: one untimed batch
    arm(o.timeout, what + ": timing");
    cudaEventRecord(e0, s);
    if (exec) {
      e = cudaGraphLaunch(exec, s);
    } else {
      for (int i = 0; i < t.iters && e == cudaSuccess; ++i) e = fn(ctx, i % copies, s);
    }
    cudaEventRecord(e1, s);
    se = cudaEventSynchronize(e1);
    if (e == cudaSuccess) e = se;
    if (e != cudaSuccess) {
      t.error = std::string("timed run: ") + cudaGetErrorString(e);
      break;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (r >= 0) per.push_back(1000.0 * ms / t.iters);
  }
  disarm();
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (exec) cudaGraphExecDestroy(exec);
  if (t.error.empty() && !per.empty()) {
    std::sort(per.begin(), per.end());
    t.us = per[per.size() / 2];
  }
  return t;
}

// ---- cuBLAS ----
struct CublasCtx {
  cublasHandle_t h;
  int n, k, rows;
  std::vector<const void*> w;
  const void* x;
  void* y;
};
cudaError_t cublas_launch(void* c, int copy, cudaStream_t s) {
  auto* b = static_cast<CublasCtx*>(c);
  const float one = 1.f, zero = 0.f;
  (void)s;  // the handle's stream is set once, before its workspace (cublasSetStream resets it)
  // Column-major view: D[n, rows] = op(W)[n, k] . X^T[k, rows], W stored as [k, n] (lda = k).
  cublasStatus_t st = cublasGemmEx(b->h, CUBLAS_OP_T, CUBLAS_OP_N, b->n, b->rows, b->k, &one,
                                   b->w[size_t(copy)], CUDA_R_16BF, b->k, b->x, CUDA_R_16BF, b->k,
                                   &zero, b->y, CUDA_R_16BF, b->n, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT);
  return st == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

struct CutlassCtx {
  GemmConfig* cfg;
};
cudaError_t cutlass_launch(void* c, int copy, cudaStream_t s) {
  return static_cast<CutlassCtx*>(c)->cfg->launch(copy, s);
}

// ---- checks ----
struct Samples {
  std::vector<long long> idx;  // into Y[rows, n]
  std::vector<double> ref;     // float64 sums
  std::vector<double> mag;     // sum of |products|
  long long* d_idx = nullptr;
  uint16_t* d_out = nullptr;
};

Samples make_samples(int n, int k, int rows, uint64_t seed, bool exact) {
  Samples s;
  std::vector<std::pair<int, int>> at{{0, 0}, {n - 1, rows - 1}, {n - 1, 0}, {0, rows - 1}};
  for (int i = 0; i < 60; ++i) {
    uint32_t h = mix32(seed * 7919 + i);
    at.push_back({int(h % uint32_t(n)), int(mix32(h) % uint32_t(rows))});
  }
  for (auto [col, r] : at) {
    double sum = 0, mag = 0;
    for (int c = 0; c < k; ++c) {
      double w = bf16_to_f32(value_bits(seed, uint64_t(col) * k + c, exact));
      double x = bf16_to_f32(value_bits(seed + 1000, uint64_t(r) * k + c, exact));
      sum += w * x;
      mag += fabs(w * x);
    }
    s.idx.push_back((long long)r * n + col);
    s.ref.push_back(sum);
    s.mag.push_back(mag);
  }
  CUDA_OR_DIE(cudaMalloc(&s.d_idx, s.idx.size() * sizeof(long long)));
  CUDA_OR_DIE(cudaMalloc(&s.d_out, s.idx.size() * sizeof(uint16_t)));
  CUDA_OR_DIE(cudaMemcpy(s.d_idx, s.idx.data(), s.idx.size() * sizeof(long long),
                         cudaMemcpyHostToDevice));
  return s;
}
void free_samples(Samples& s) {
  cudaFree(s.d_idx);
  cudaFree(s.d_out);
}

// Tolerances (random mode): 2^-6 relative (two BF16 steps) plus 1e-2 absolute against cuBLAS;
// against the float64 reference also 1e-5 of the sum of |products| (f32 accumulation).
const float kTolRel = 1.0f / 64, kTolAbs = 1e-2f;

// Returns the number of sampled outputs outside the tolerance (exact mode: not bit-identical to
// the float64 sum rounded to BF16).
int check_samples(const uint16_t* y, Samples& s, bool exact, cudaStream_t st) {
  int cnt = int(s.idx.size());
  gather_kernel<<<(cnt + 127) / 128, 128, 0, st>>>(y, s.d_idx, cnt, s.d_out);
  std::vector<uint16_t> got(size_t(cnt), 0);
  if (cudaMemcpyAsync(got.data(), s.d_out, size_t(cnt) * 2, cudaMemcpyDeviceToHost, st) !=
          cudaSuccess ||
      cudaStreamSynchronize(st) != cudaSuccess)
    return cnt;
  int bad = 0;
  for (int i = 0; i < cnt; ++i) {
    double v = bf16_to_f32(got[size_t(i)]);
    if (exact) {
      if (got[size_t(i)] != f32_to_bf16_rn(float(s.ref[size_t(i)]))) ++bad;
    } else if (!(fabs(v - s.ref[size_t(i)]) <=
                 kTolRel * fabs(s.ref[size_t(i)]) + kTolAbs + 1e-5 * s.mag[size_t(i)])) {
      ++bad;
    }
  }
  return bad;
}

CmpResult compare(const void* y, const void* yref, size_t count, bool exact, CmpResult* d_cmp,
                  cudaStream_t stream) {
  CmpResult cmp{};
  cudaMemsetAsync(d_cmp, 0, sizeof cmp, stream);
  compare_kernel<<<unsigned(std::min<size_t>(1024, (count + 255) / 256)), 256, 0, stream>>>(
      static_cast<const uint16_t*>(y), static_cast<const uint16_t*>(yref), count,
      exact ? 0.f : kTolRel, exact ? 0.f : kTolAbs, d_cmp);
  cudaMemcpyAsync(&cmp, d_cmp, sizeof cmp, cudaMemcpyDeviceToHost, stream);
  if (cudaStreamSynchronize(stream) != cudaSuccess) cmp.bad = cmp.bitdiff = ~0ull;
  return cmp;
}

struct Row {
  std::string name;
  double us = -1;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 2;
  setvbuf(stdout, nullptr, _IOLBF, 0);

  if (o.list) {
    printf("%-24s %-5s %-14s %-8s %-11s %s\n", "config", "sched", "tile MxNxK", "cluster",
           "scheduler", "kernel");
    for (auto& c : kConfigs) {
      char tile[32], cl[16];
      snprintf(tile, sizeof tile, "%dx%dx%d", c.tm, c.tn, c.tk);
      snprintf(cl, sizeof cl, "%dx1x1", c.cm);
      printf("%-24s %-5s %-14s %-8s %-11s %s\n", c.name, c.schedule, tile, cl, c.scheduler,
             c.make()->describe().c_str());
    }
    return 0;
  }

  std::thread(watchdog).detach();
  arm(o.timeout, "device setup");
  int dev = 0, sms = 0, major = 0, minor = 0;
  CUDA_OR_DIE(cudaGetDevice(&dev));
  CUDA_OR_DIE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_OR_DIE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_OR_DIE(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  cudaDeviceProp prop;
  CUDA_OR_DIE(cudaGetDeviceProperties(&prop, dev));
  int cublas_ver = 0;
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    printf("FATAL: cublasCreate failed\n");
    return 2;
  }
  cublasGetVersion(handle, &cublas_ver);
  void* cublas_ws = nullptr;
  const size_t kCublasWs = 32u << 20;
  CUDA_OR_DIE(cudaMalloc(&cublas_ws, kCublasWs));
  cudaStream_t stream;
  CUDA_OR_DIE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (cublasSetStream(handle, stream) != CUBLAS_STATUS_SUCCESS ||
      cublasSetWorkspace(handle, cublas_ws, kCublasWs) != CUBLAS_STATUS_SUCCESS) {
    printf("FATAL: cublasSetStream / cublasSetWorkspace failed\n");
    return 2;
  }

  disarm();

  printf("device: %s (sm_%d%d, %d SMs, L2 %d MB), cuBLAS %d, %s data, %s, batches of up to "
         "%d launches (~100 ms), median of %d\n",
         prop.name, major, minor, sms, prop.l2CacheSize >> 20, cublas_ver,
         o.exact ? "exact" : "random", o.graph ? "CUDA graph" : "stream launches", o.iters, o.reps);
  if (major != 9 || minor != 0)
    printf("warning: the CUTLASS kernels are sm_90a code; this device is sm_%d%d\n", major, minor);
  printf("speed = cuBLAS time / this time (> 1: faster than cuBLAS). TB/s counts W + X + Y once.\n"
         "checks: vs cuBLAS, all outputs (max abs, max rel over |y| >= %.0e, bit-different "
         "count); ref: %s\n",
         double(kTolAbs),
         o.exact ? "64 sampled outputs against the float64 sum, bit for bit"
                 : "64 sampled outputs against a float64 sum");

  std::vector<const LayerShape*> shapes;
  for (auto& name : o.shapes) {
    const LayerShape* f = nullptr;
    for (auto& s : kShapes)
      if (name == s.name) f = &s;
    if (!f) {
      printf("unknown shape %s\n", name.c_str());
      return 2;
    }
    shapes.push_back(f);
  }

  // results[rows index][shape index] -> rows (cuBLAS first)
  std::vector<std::vector<std::vector<Row>>> results(
      o.rows.size(), std::vector<std::vector<Row>>(shapes.size()));
  int failures = 0;
  int max_rows = *std::max_element(o.rows.begin(), o.rows.end());
  CmpResult* d_cmp = nullptr;
  CUDA_OR_DIE(cudaMalloc(&d_cmp, sizeof(CmpResult)));

  for (size_t si = 0; si < shapes.size(); ++si) {
    const LayerShape& sh = *shapes[si];
    const size_t wbytes = size_t(sh.n) * sh.k * 2;
    // Enough identical copies that one pass over them (> 200 MB) does not fit the L2.
    const int copies = int(std::max<size_t>(1, (200u << 20) / wbytes + ((200u << 20) % wbytes != 0)));
    arm(o.timeout, std::string(sh.name) + ": allocation");
    std::vector<void*> w(size_t(copies), nullptr);
    void *x = nullptr, *y = nullptr, *yref = nullptr;
    for (auto& p : w) CUDA_OR_DIE(cudaMalloc(&p, wbytes));
    CUDA_OR_DIE(cudaMalloc(&x, size_t(max_rows) * sh.k * 2));
    CUDA_OR_DIE(cudaMalloc(&y, size_t(max_rows) * sh.n * 2));
    CUDA_OR_DIE(cudaMalloc(&yref, size_t(max_rows) * sh.n * 2));
    fill_kernel<<<1024, 256, 0, stream>>>(static_cast<uint16_t*>(w[0]), size_t(sh.n) * sh.k,
                                          o.seed, o.exact);
    for (int c = 1; c < copies; ++c)
      CUDA_OR_DIE(cudaMemcpyAsync(w[size_t(c)], w[0], wbytes, cudaMemcpyDeviceToDevice, stream));
    fill_kernel<<<1024, 256, 0, stream>>>(static_cast<uint16_t*>(x), size_t(max_rows) * sh.k,
                                          o.seed + 1000, o.exact);
    CUDA_OR_DIE(cudaStreamSynchronize(stream));
    disarm();

    for (size_t ri = 0; ri < o.rows.size(); ++ri) {
      const int rows = o.rows[ri];
      const size_t ycount = size_t(rows) * sh.n;
      const double bytes = double(wbytes) + 2.0 * rows * sh.k + 2.0 * rows * sh.n;
      const double flops = 2.0 * sh.n * double(sh.k) * rows;
      auto& res = results[ri][si];
      printf("\n== %s  n=%d k=%d rows=%d  (W %.1f MB x %d copies)\n", sh.name, sh.n, sh.k, rows,
             wbytes / 1e6, copies);
      printf("%-28s %9s %6s %7s %6s  %-9s %-9s %-15s %s\n", "config", "us", "TB/s", "TFLOP/s",
             "speed", "max_abs", "max_rel", "bit-diff", "check");
      Samples smp = make_samples(sh.n, sh.k, rows, o.seed, o.exact);
      GemmProblem prob;
      prob.n = sh.n;
      prob.k = sh.k;
      prob.rows = rows;
      for (auto p : w) prob.weights.push_back(p);
      prob.x = x;
      prob.y = y;
      prob.sm_count = sms;

      // cuBLAS: the baseline and the comparison's reference.
      CublasCtx cb{handle, sh.n, sh.k, rows, prob.weights, x, yref};
      arm(o.timeout, std::string(sh.name) + ": cuBLAS check run");
      cudaMemsetAsync(yref, 0xff, ycount * 2, stream);
      cudaError_t ce = cublas_launch(&cb, 0, stream);
      if (ce == cudaSuccess) ce = cudaStreamSynchronize(stream);
      disarm();
      double cublas_us = -1;
      if (ce != cudaSuccess) {
        printf("%-28s error: %s\n", "cublas", cudaGetErrorString(ce));
        check_context_or_die("cuBLAS");
        ++failures;
      } else {
        int bad = check_samples(static_cast<uint16_t*>(yref), smp, o.exact, stream);
        Timing t = time_launches(cublas_launch, &cb, copies, o, stream,
                                 std::string(sh.name) + ": cuBLAS");
        if (!t.error.empty()) {
          printf("%-28s error: %s\n", "cublas", t.error.c_str());
          check_context_or_die("cuBLAS");
          ++failures;
        } else {
          cublas_us = t.us;
          printf("%-28s %9.2f %6.2f %7.1f %6.2f  %-9s %-9s %-15s ref %s%s\n", "cublas", t.us,
                 bytes / t.us * 1e-6, flops / t.us * 1e-6, 1.0, "-", "-", "-",
                 bad ? "FAIL" : "ok", t.graph ? "" : " (no graph)");
          if (bad) {
            printf("  cuBLAS: %d of %zu sampled outputs off the reference\n", bad,
                   smp.idx.size());
            ++failures;
          }
        }
      }
      res.push_back({"cublas", cublas_us});
      if (cublas_us > 0) {
        // Negative control: cuBLAS over the first k - 64 columns only (a kernel that drops a K
        // tile) must be flagged by both checks.
        CublasCtx ctl = cb;
        ctl.k = sh.k - 64;
        ctl.y = y;
        arm(o.timeout, std::string(sh.name) + ": negative control");
        cudaError_t e = cublas_launch(&ctl, 0, stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
        disarm();
        CmpResult cmp = compare(y, yref, ycount, o.exact, d_cmp, stream);
        int bad_ref = check_samples(static_cast<uint16_t*>(y), smp, o.exact, stream);
        bool flagged = e == cudaSuccess && cmp.bad > 0 && bad_ref > 0;
        printf("%-28s flagged %llu/%zu outputs vs cuBLAS, %d/%zu samples vs ref: %s\n",
               "control (cuBLAS, k-64)", cmp.bad, ycount, bad_ref, smp.idx.size(),
               flagged ? "ok" : "FAIL (the checks cannot fail?)");
        if (!flagged) ++failures;
      }

      for (auto& ci : kConfigs) {
        if (!selected(ci.name, o)) continue;
        // (requested, resolved) split counts; (1, 1): the configuration as built.
        std::vector<std::pair<int, int>> variants{{1, 1}};
        if (std::string(ci.scheduler) == "StreamK") {
          const long long tiles =
              (long long)((sh.n + ci.tm - 1) / ci.tm) * ((rows + ci.tn - 1) / ci.tn);
          const int ktiles = (sh.k + ci.tk - 1) / ci.tk;
          for (int s : o.splits) {
            int v = s > 0 ? s : int(std::min<long long>(sms / std::max(1LL, tiles), ktiles));
            if (v > 1) variants.push_back({s, v});
          }
        }
        std::unique_ptr<GemmConfig> cfg = ci.make();
        for (auto [req, v] : variants) {
          std::string label = ci.name;
          if (v > 1) label += "/split" + (req > 0 ? std::to_string(req) : std::string("A"));
          std::string note = req == 0 && v > 1 ? " [" + std::to_string(v) + " splits]" : "";
          prob.splits = v;
          std::string what = std::string(sh.name) + " rows=" + std::to_string(rows) + " " + label;
          arm(o.timeout, what + ": prepare");
          std::string why = cfg->prepare(prob, stream);
          cudaError_t pe = cudaStreamSynchronize(stream);
          disarm();
          if (!why.empty() || pe != cudaSuccess) {
            printf("%-28s skipped: %s\n", label.c_str(),
                   why.empty() ? cudaGetErrorString(pe) : why.c_str());
            cudaGetLastError();
            check_context_or_die(label.c_str());
            cfg->release();
            continue;
          }
          // One checked run into a poisoned Y, then the timing.
          arm(o.timeout, what + ": check run");
          cudaMemsetAsync(y, 0xff, ycount * 2, stream);
          cudaError_t e = cfg->launch(0, stream);
          if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
          disarm();
          if (e != cudaSuccess) {
            printf("%-28s error: %s\n", label.c_str(), cudaGetErrorString(e));
            check_context_or_die(label.c_str());
            cfg->release();
            ++failures;
            continue;
          }
          CmpResult cmp = compare(y, yref, ycount, o.exact, d_cmp, stream);
          int bad_ref = check_samples(static_cast<uint16_t*>(y), smp, o.exact, stream);
          bool vs_cublas_ok = cublas_us < 0 || cmp.bad == 0;
          CutlassCtx cc{cfg.get()};
          Timing t = time_launches(cutlass_launch, &cc, copies, o, stream, what);
          cfg->release();
          if (!t.error.empty()) {
            printf("%-28s error: %s\n", label.c_str(), t.error.c_str());
            check_context_or_die(label.c_str());
            ++failures;
            continue;
          }
          char diff[32], ma[16], mr[16];
          snprintf(diff, sizeof diff, "%llu/%zu", cmp.bitdiff, ycount);
          snprintf(ma, sizeof ma, "%.3g", double(float_of_bits(cmp.max_abs)));
          snprintf(mr, sizeof mr, "%.3g", double(float_of_bits(cmp.max_rel)));
          std::string check = std::string(vs_cublas_ok ? "ok" : "FAIL(cuBLAS)") +
                              (bad_ref ? " FAIL(ref " + std::to_string(bad_ref) + ")" : "");
          printf("%-28s %9.2f %6.2f %7.1f %6.2f  %-9s %-9s %-15s %s%s%s\n", label.c_str(), t.us,
                 bytes / t.us * 1e-6, flops / t.us * 1e-6, cublas_us > 0 ? cublas_us / t.us : 0.0,
                 ma, mr, diff, check.c_str(), note.c_str(), t.graph ? "" : " (no graph)");
          if (!vs_cublas_ok || bad_ref) {
            ++failures;
          } else {
            res.push_back({label, t.us});  // only checked results count for "best"
          }
        }
      }
      // Best CUTLASS result of this shape and row count.
      const Row* best = nullptr;
      for (size_t i = 1; i < res.size(); ++i)
        if (res[i].us > 0 && (!best || res[i].us < best->us)) best = &res[i];
      if (best && cublas_us > 0)
        printf("best: %s %.2f us, %.2fx cuBLAS\n", best->name.c_str(), best->us,
               cublas_us / best->us);
      free_samples(smp);
    }
    for (auto p : w) cudaFree(p);
    cudaFree(x);
    cudaFree(y);
    cudaFree(yref);
  }

  // Per-layer sums: cuBLAS, the best single configuration (the same one for every shape), and
  // the best configuration per shape.
  printf("\n== per-layer sum over %zu shapes (", shapes.size());
  for (size_t si = 0; si < shapes.size(); ++si) printf("%s%s", si ? "+" : "", shapes[si]->name);
  printf("), us; speed = cuBLAS sum / sum\n");
  printf("SUM %6s %10s | %-28s %10s %6s | %10s %6s\n", "rows", "cublas", "best single config",
         "sum", "speed", "per-shape", "speed");
  for (size_t ri = 0; ri < o.rows.size(); ++ri) {
    double cub = 0, per_shape = 0;
    bool cub_ok = true, per_ok = true;
    for (size_t si = 0; si < shapes.size(); ++si) {
      auto& res = results[ri][si];
      if (res.empty() || res[0].us <= 0) cub_ok = false;
      else cub += res[0].us;
      double b = -1;
      for (size_t i = 1; i < res.size(); ++i)
        if (res[i].us > 0 && (b < 0 || res[i].us < b)) b = res[i].us;
      if (b < 0) per_ok = false;
      else per_shape += b;
    }
    // Single configuration: present (checked) in every shape.
    std::string best_name = "-";
    double best_sum = -1;
    if (!shapes.empty()) {
      for (auto& cand : results[ri][0]) {
        if (cand.name == "cublas") continue;
        double sum = 0;
        bool all = true;
        for (size_t si = 0; si < shapes.size() && all; ++si) {
          bool found = false;
          for (auto& r : results[ri][si])
            if (r.name == cand.name && r.us > 0) {
              sum += r.us;
              found = true;
            }
          all = found;
        }
        if (all && (best_sum < 0 || sum < best_sum)) {
          best_sum = sum;
          best_name = cand.name;
        }
      }
    }
    char c1[16] = "-", c2[16] = "-", c3[16] = "-", c4[16] = "-", c5[16] = "-";
    if (cub_ok) snprintf(c1, sizeof c1, "%.2f", cub);
    if (best_sum > 0) snprintf(c2, sizeof c2, "%.2f", best_sum);
    if (best_sum > 0 && cub_ok) snprintf(c3, sizeof c3, "%.2f", cub / best_sum);
    if (per_ok) snprintf(c4, sizeof c4, "%.2f", per_shape);
    if (per_ok && cub_ok) snprintf(c5, sizeof c5, "%.2f", cub / per_shape);
    printf("SUM %6d %10s | %-28s %10s %6s | %10s %6s\n", o.rows[ri], c1, best_name.c_str(), c2,
           c3, c4, c5);
  }
  printf("\n%s: %d failed result(s)\n", failures ? "FAIL" : "PASS", failures);
  cublasDestroy(handle);
  cudaFree(cublas_ws);
  cudaFree(d_cmp);
  return failures ? 1 : 0;
}

#endif  // main
