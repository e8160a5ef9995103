// The machinery the CUTLASS GEMM benchmarks (cutlass_gemm.cu, cutlass_mixed.cu) share: input
// values, the weight types' fill and conversion kernels, the watchdog, options, timing (CUDA
// graphs, median of batches), cuBLAS, and the checks. Included by each benchmark's main
// translation unit (CG_PART / CM_PART 0) only; cutlass_bench_run.cuh drives it.
#pragma once

#include "cutlass_bench_api.cuh"

#include <cublas_v2.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace cb {

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

// Data modes. Random: uniform in [-1, 1), rounded to BF16. Exact: j/8 for j in -8..8, so every
// product is a multiple of 1/64 and every partial sum (|sum| <= k <= 2^14) is exact in f32.
// Integer: X in -4..4, W an integer of its type's range (u8 0..255, s8 -128..127, s4 -8..7,
// BF16 -128..127), so |partial sum| <= 12288 * 255 * 4 < 2^24 is an exact f32 integer. In the
// exact and integer modes any correct kernel gives the same bits.
enum class DataMode : int { kRandom, kExact, kInteger };
inline bool bit_exact(DataMode m) { return m != DataMode::kRandom; }

__host__ __device__ inline uint32_t hash_at(uint64_t seed, uint64_t i) {
  return mix32(seed * 0x100000001B3ull ^ i);
}
// W's integer value (integer mode) in its type.
__host__ __device__ inline int int_weight(WType t, uint32_t h) {
  switch (t) {
    case WType::kU8: return int(h % 256u);
    case WType::kS4: return int(h % 16u) - 8;
    default: return int(h % 256u) - 128;  // s8, bf16
  }
}
// A BF16 element (X, or BF16 W) as f32.
__host__ __device__ inline float bf16_value(uint64_t seed, uint64_t i, DataMode m, bool is_x) {
  uint32_t h = hash_at(seed, i);
  switch (m) {
    case DataMode::kExact: return float(int(h % 17u) - 8) * 0.125f;
    case DataMode::kInteger: return float(is_x ? int(h % 9u) - 4 : int_weight(WType::kBf16, h));
    default: return bf16_to_f32(f32_to_bf16_rn(float(int(h >> 8) - (1 << 23)) * (1.0f / float(1 << 23))));
  }
}
// W[i] as the GEMM sees it (narrow types: integer mode only).
inline double weight_value(WType t, uint64_t seed, uint64_t i, DataMode m) {
  if (wtype_storage(t) == WType::kBf16) return bf16_value(seed, i, m, false);
  return int_weight(t, hash_at(seed, i));
}

__global__ void fill_bf16_kernel(uint16_t* p, size_t count, uint64_t seed, DataMode m, bool is_x) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = f32_to_bf16_rn(bf16_value(seed, i, m, is_x));
}
// Narrow W: one byte per element (u8, s8) or two (s4: element 2j in the low nibble of byte j,
// as cutlass::int4b_t arrays pack them).
__global__ void fill_narrow_kernel(uint8_t* p, size_t bytes, uint64_t seed, WType t) {
  for (size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x; j < bytes;
       j += size_t(gridDim.x) * blockDim.x) {
    if (t == WType::kS4) {
      int lo = int_weight(t, hash_at(seed, 2 * j)), hi = int_weight(t, hash_at(seed, 2 * j + 1));
      p[j] = uint8_t((lo & 15) | ((hi & 15) << 4));
    } else {
      p[j] = uint8_t(int_weight(t, hash_at(seed, j)));
    }
  }
}
// Narrow W to BF16 (exact for these integers): the reference weights cuBLAS multiplies.
__global__ void widen_kernel(const uint8_t* w, size_t count, WType t, uint16_t* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    int v;
    if (t == WType::kS4) v = int(int8_t(uint8_t(w[i / 2] >> ((i & 1) * 4)) << 4)) >> 4;
    else if (t == WType::kS8) v = int8_t(w[i]);
    else v = w[i];
    out[i] = f32_to_bf16_rn(float(v));
  }
}

inline float float_of_bits(unsigned int b) {
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
inline std::atomic<long long> g_deadline_ms{0};  // 0: idle
inline char g_phase[256] = "start";

inline long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline void arm(int seconds, const std::string& phase) {
  snprintf(g_phase, sizeof g_phase, "%s", phase.c_str());
  g_deadline_ms = now_ms() + 1000LL * seconds;
}
inline void disarm() { g_deadline_ms = 0; }
inline void watchdog() {
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
inline void check_context_or_die(const char* where) {
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
struct Options {
  std::vector<std::string> shapes{"qkv", "o", "gate_up", "down"};
  std::vector<int> rows;
  std::vector<std::string> include, skip;
  std::vector<int> splits{0};  // 0: automatic split count
  int iters = 100, reps = 7, timeout = 60;
  bool graph = true, list = false;
  DataMode mode = DataMode::kRandom;
  uint64_t seed = 1;
};

inline std::vector<std::string> split_list(const std::string& s) {
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

inline bool selected(const std::string& name, const Options& o) {
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

inline Timing time_launches(LaunchFn fn, void* ctx, int copies, const Options& o, cudaStream_t s,
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

// ---- cuBLAS (BF16 weights) ----
struct CublasCtx {
  cublasHandle_t h;
  int n, k, rows;
  std::vector<const void*> w;
  const void* x;
  void* y;
};
inline cudaError_t cublas_launch(void* c, int copy, cudaStream_t s) {
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
inline cudaError_t cutlass_launch(void* c, int copy, cudaStream_t s) {
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

// 64 sampled outputs (corners included) of W (type t) times X, summed in float64.
inline Samples make_samples(int n, int k, int rows, uint64_t seed, DataMode m, WType t) {
  Samples s;
  std::vector<std::pair<int, int>> at{{0, 0}, {n - 1, rows - 1}, {n - 1, 0}, {0, rows - 1}};
  for (int i = 0; i < 60; ++i) {
    uint32_t h = mix32(seed * 7919 + i);
    at.push_back({int(h % uint32_t(n)), int(mix32(h) % uint32_t(rows))});
  }
  for (auto [col, r] : at) {
    double sum = 0, mag = 0;
    for (int c = 0; c < k; ++c) {
      double w = weight_value(t, seed, uint64_t(col) * k + c, m);
      double x = bf16_value(seed + 1000, uint64_t(r) * k + c, m, true);
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
inline void free_samples(Samples& s) {
  cudaFree(s.d_idx);
  cudaFree(s.d_out);
  s.d_idx = nullptr;
  s.d_out = nullptr;
}

// Tolerances (random mode): 2^-6 relative (two BF16 steps) plus 1e-2 absolute against cuBLAS;
// against the float64 reference also 1e-5 of the sum of |products| (f32 accumulation).
constexpr float kTolRel = 1.0f / 64, kTolAbs = 1e-2f;

// Returns the number of sampled outputs outside the tolerance (bit-exact modes: not identical to
// the float64 sum rounded to BF16).
inline int check_samples(const uint16_t* y, Samples& s, bool exact, cudaStream_t st) {
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

inline CmpResult compare(const void* y, const void* yref, size_t count, bool exact,
                         CmpResult* d_cmp, cudaStream_t stream) {
  CmpResult cmp{};
  cudaMemsetAsync(d_cmp, 0, sizeof cmp, stream);
  compare_kernel<<<unsigned(std::min<size_t>(1024, (count + 255) / 256)), 256, 0, stream>>>(
      static_cast<const uint16_t*>(y), static_cast<const uint16_t*>(yref), count,
      exact ? 0.f : kTolRel, exact ? 0.f : kTolAbs, d_cmp);
  cudaMemcpyAsync(&cmp, d_cmp, sizeof cmp, cudaMemcpyDeviceToHost, stream);
  if (cudaStreamSynchronize(stream) != cudaSuccess) cmp.bad = cmp.bitdiff = ~0ull;
  return cmp;
}

}  // namespace cb
