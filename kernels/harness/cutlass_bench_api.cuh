// The interface between the CUTLASS GEMM benchmarks' configuration translation units
// (cutlass_sm90.cuh instantiated by the tables of cutlass_gemm.cu and cutlass_mixed.cu) and their
// driver (cutlass_bench.cuh, cutlass_bench_run.cuh). Included by every translation unit.
//
// Problem: Y[rows, n] = X[rows, k] . W[n, k]^T; f32 accumulation, BF16 X and Y; W row-major
// [n, k] in the configuration's weight type, X row-major [rows, k], Y row-major [rows, n]. The
// weights sit on the GEMM's M side: D[n, rows] = W[n, k] . X^T, A = W (K-major), B = X
// (K-major), D column-major (that is Y row-major).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

// How W is stored (the A operand's element type). kBf16Rs stores BF16 like kBf16 but takes it
// through the register-sourced (RS) mixed-input mainloop with an identity conversion.
enum class WType : int { kBf16 = 0, kU8, kS8, kS4, kBf16Rs };
constexpr int kWTypes = 5;

inline const char* wtype_name(WType t) {
  switch (t) {
    case WType::kBf16: return "bf16";
    case WType::kU8: return "u8";
    case WType::kS8: return "s8";
    case WType::kS4: return "s4";
    case WType::kBf16Rs: return "bf16rs";
  }
  return "?";
}
inline int wtype_bits(WType t) {
  switch (t) {
    case WType::kU8:
    case WType::kS8: return 8;
    case WType::kS4: return 4;
    default: return 16;
  }
}
// The storage behind a type (kBf16Rs shares kBf16's copies).
inline WType wtype_storage(WType t) { return t == WType::kBf16Rs ? WType::kBf16 : t; }

struct GemmProblem {
  int n = 0, k = 0, rows = 0;
  std::vector<const void*> weights;  // identical copies of W (the configuration's type), in turn
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

// One line of a configuration table.
struct ConfigInfo {
  const char* name;
  WType wtype;
  const char* schedule;
  int tm, tn, tk, cm;
  const char* scheduler;
  std::unique_ptr<GemmConfig> (*make)();
};
