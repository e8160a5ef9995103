// The CUTLASS GEMM benchmarks' driver: options, data, the cuBLAS baseline and references, the
// configurations' checks and timing, and the report. A benchmark's main translation unit
// defines its configuration table and calls cb::run_bench (cutlass_gemm.cu, cutlass_mixed.cu).
#pragma once

#include "cutlass_bench.cuh"

namespace cb {

struct BenchSpec {
  const char* prog;  // the binary's name, for usage
  const ConfigInfo* configs;
  size_t count;
  std::vector<int> default_rows;
  // Mixed-input benchmark: integer data (bit-exact), one reference per weight type (cuBLAS on the
  // weights widened to BF16), weight bandwidth columns, results grouped by weight type.
  bool mixed = false;
};

struct LayerShape {
  const char* name;
  int n, k;
};
const LayerShape kShapes[] = {
    {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 24576, 4096}, {"down", 4096, 12288}};

inline void usage(const BenchSpec& spec) {
  std::string rows;
  for (int r : spec.default_rows) rows += (rows.empty() ? "" : ",") + std::to_string(r);
  printf(
      "usage: %s [options]\n"
      "  --shapes LIST    of qkv,o,gate_up,down (Qwen3-8B: 6144x4096, 4096x4096, 24576x4096,\n"
      "                   4096x12288; n x k)\n"
      "  --rows LIST      rows of X (default %s)\n"
      "  --configs LIST   only configurations whose name contains one of these\n"
      "  --skip LIST      leave out configurations whose name contains one of these\n"
      "  --splits LIST    split-K variants of the stream-K configurations, besides the stream-K\n"
      "                   heuristic: a count (NAME/splitN), or 0 = SMs / output tiles, capped at\n"
      "                   the K tiles, when that is > 1 (NAME/splitA; default 0; 'none')\n"
      "  --iters N        launches per timed batch (default 100), --reps N batches (default 7)\n"
      "%s"
      "  --no-graph       time plain stream launches instead of a CUDA graph of the batch\n"
      "  --seed N, --timeout S (per step, default 60), --list (configurations and exit)\n",
      spec.prog, rows.c_str(),
      spec.mixed ? "  (data: always integers, every output checked bit for bit)\n"
                 : "  --exact          inputs whose products and sums are exact in f32: every output must\n"
                   "                   match cuBLAS and the reference bit for bit\n");
}

inline bool parse(const BenchSpec& spec, int argc, char** argv, Options& o) {
  o.rows = spec.default_rows;
  o.mode = spec.mixed ? DataMode::kInteger : DataMode::kRandom;
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
    else if (a == "--exact") {
      if (!spec.mixed) o.mode = DataMode::kExact;  // (mixed: always integers, already exact)
    }
    else if (a == "--no-graph") o.graph = false;
    else if (a == "--list") o.list = true;
    else if (a == "--help" || a == "-h") {
      usage(spec);
      exit(0);
    } else {
      printf("unknown option %s\n", a.c_str());
      usage(spec);
      return false;
    }
  }
  if (o.rows.empty()) {
    printf("no rows\n");
    return false;
  }
  for (int r : o.rows)
    if (r < 1) {
      printf("rows must be >= 1\n");
      return false;
    }
  return true;
}

struct Row {
  std::string name;
  WType t;
  double us = -1;
};

// One weight type's data for a shape: `copies` identical copies of W (> 200 MB in all, so a
// pass over them does not fit the L2) and, for a narrow type, W widened to BF16 (the reference).
struct TypeData {
  WType t;
  size_t bytes = 0;  // per copy
  std::vector<void*> copies;
  void* wide = nullptr;
};

inline size_t weight_bytes(WType t, const LayerShape& sh) {
  return size_t(sh.n) * sh.k * size_t(wtype_bits(t)) / 8;
}

inline TypeData make_weights(WType t, const LayerShape& sh, const Options& o, cudaStream_t s) {
  TypeData d;
  d.t = t;
  d.bytes = weight_bytes(t, sh);
  const size_t elems = size_t(sh.n) * sh.k, want = 200u << 20;
  d.copies.resize(std::max<size_t>(1, (want + d.bytes - 1) / d.bytes), nullptr);
  for (auto& p : d.copies) CUDA_OR_DIE(cudaMalloc(&p, d.bytes));
  if (t == WType::kBf16) {
    fill_bf16_kernel<<<1024, 256, 0, s>>>(static_cast<uint16_t*>(d.copies[0]), elems, o.seed,
                                          o.mode, false);
  } else {
    fill_narrow_kernel<<<1024, 256, 0, s>>>(static_cast<uint8_t*>(d.copies[0]), d.bytes, o.seed, t);
    CUDA_OR_DIE(cudaMalloc(&d.wide, elems * 2));
    widen_kernel<<<1024, 256, 0, s>>>(static_cast<uint8_t*>(d.copies[0]), elems, t,
                                      static_cast<uint16_t*>(d.wide));
  }
  for (size_t c = 1; c < d.copies.size(); ++c)
    CUDA_OR_DIE(cudaMemcpyAsync(d.copies[c], d.copies[0], d.bytes, cudaMemcpyDeviceToDevice, s));
  CUDA_OR_DIE(cudaStreamSynchronize(s));
  return d;
}
inline void free_weights(TypeData& d) {
  for (auto p : d.copies) cudaFree(p);
  if (d.wide) cudaFree(d.wide);
  d.copies.clear();
  d.wide = nullptr;
}

// Per-layer sums: cuBLAS, the best single configuration (the same one for every shape), and the
// best configuration per shape, over the results of weight type t (all of them: !by_type).
inline void print_sums(const Options& o, const std::vector<const LayerShape*>& shapes,
                       const std::vector<std::vector<std::vector<Row>>>& results, bool by_type,
                       WType t) {
  auto mine = [&](const Row& r) { return r.name != "cublas" && (!by_type || r.t == t); };
  double wbytes = 0;
  for (auto* sh : shapes) wbytes += double(weight_bytes(t, *sh));
  for (size_t ri = 0; ri < o.rows.size(); ++ri) {
    double cub = 0, per_shape = 0;
    bool cub_ok = true, per_ok = true;
    for (size_t si = 0; si < shapes.size(); ++si) {
      auto& res = results[ri][si];
      if (res.empty() || res[0].us <= 0) cub_ok = false;
      else cub += res[0].us;
      double b = -1;
      for (auto& r : res)
        if (mine(r) && r.us > 0 && (b < 0 || r.us < b)) b = r.us;
      if (b < 0) per_ok = false;
      else per_shape += b;
    }
    // Single configuration: present (checked) in every shape.
    std::string best_name = "-";
    double best_sum = -1;
    if (!shapes.empty()) {
      for (auto& cand : results[ri][0]) {
        if (!mine(cand)) continue;
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
    char c1[16] = "-", c2[16] = "-", c3[16] = "-", c4[16] = "-", c5[16] = "-", c6[16] = "-";
    if (cub_ok) snprintf(c1, sizeof c1, "%.2f", cub);
    if (best_sum > 0) snprintf(c2, sizeof c2, "%.2f", best_sum);
    if (best_sum > 0 && cub_ok) snprintf(c3, sizeof c3, "%.2f", cub / best_sum);
    if (per_ok) snprintf(c4, sizeof c4, "%.2f", per_shape);
    if (per_ok && cub_ok) snprintf(c5, sizeof c5, "%.2f", cub / per_shape);
    if (per_ok) snprintf(c6, sizeof c6, "%.2f", wbytes / per_shape * 1e-6);
    if (by_type)
      printf("SUM %6d %10s | %-6s %-28s %10s %6s | %10s %6s %7s\n", o.rows[ri], c1,
             wtype_name(t), best_name.c_str(), c2, c3, c4, c5, c6);
    else
      printf("SUM %6d %10s | %-28s %10s %6s | %10s %6s\n", o.rows[ri], c1, best_name.c_str(), c2,
             c3, c4, c5);
  }
}

// One shape at one row count: cuBLAS, the references, every selected configuration (defined in
// cutlass_bench_shape.cuh). Returns the number of failed results.
inline int run_shape_rows(const BenchSpec& spec, const Options& o, const LayerShape& sh, int rows,
                   const std::vector<WType>& types, const std::vector<TypeData>& data,
                   void* x, void* y, void* yref, void* yref2, cublasHandle_t handle, int sms,
                   CmpResult* d_cmp, cudaStream_t stream, std::vector<Row>& res);

inline int run_bench(const BenchSpec& spec, int argc, char** argv) {
  Options o;
  if (!parse(spec, argc, argv, o)) return 2;
  setvbuf(stdout, nullptr, _IOLBF, 0);

  if (o.list) {
    // (The BF16 benchmark's configurations are all BF16: no weight-type column.)
    if (spec.mixed)
      printf("%-26s %-6s %-5s %-14s %-8s %-11s %s\n", "config", "W", "sched", "tile MxNxK",
             "cluster", "scheduler", "kernel");
    else
      printf("%-24s %-5s %-14s %-8s %-11s %s\n", "config", "sched", "tile MxNxK", "cluster",
             "scheduler", "kernel");
    for (size_t i = 0; i < spec.count; ++i) {
      const ConfigInfo& c = spec.configs[i];
      char tile[32], cl[16];
      snprintf(tile, sizeof tile, "%dx%dx%d", c.tm, c.tn, c.tk);
      snprintf(cl, sizeof cl, "%dx1x1", c.cm);
      std::string kernel = c.make()->describe();
      if (spec.mixed)
        printf("%-26s %-6s %-5s %-14s %-8s %-11s %s\n", c.name, wtype_name(c.wtype), c.schedule,
               tile, cl, c.scheduler, kernel.c_str());
      else
        printf("%-24s %-5s %-14s %-8s %-11s %s\n", c.name, c.schedule, tile, cl, c.scheduler,
               kernel.c_str());
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

  const char* data = o.mode == DataMode::kExact     ? "exact"
                     : o.mode == DataMode::kInteger ? "integer"
                                                    : "random";
  printf("device: %s (sm_%d%d, %d SMs, L2 %d MB), cuBLAS %d, %s data, %s, batches of up to "
         "%d launches (~100 ms), median of %d\n",
         prop.name, major, minor, sms, prop.l2CacheSize >> 20, cublas_ver, data,
         o.graph ? "CUDA graph" : "stream launches", o.iters, o.reps);
  if (major != 9 || minor != 0)
    printf("warning: the CUTLASS kernels are sm_90a code; this device is sm_%d%d\n", major, minor);
  if (spec.mixed)
    printf("speed = cuBLAS BF16 time / this time (> 1: faster than cuBLAS). TB/s counts W (in its "
           "type) + X + Y once; W TB/s counts W only.\n"
           "checks: vs cuBLAS on W widened to BF16, all outputs bit for bit (max abs, max rel, "
           "bit-different count); ref: 64 sampled outputs against the float64 sum, bit for bit\n");
  else
    printf("speed = cuBLAS time / this time (> 1: faster than cuBLAS). TB/s counts W + X + Y once.\n"
           "checks: vs cuBLAS, all outputs (max abs, max rel over |y| >= %.0e, bit-different "
           "count); ref: %s\n",
           double(kTolAbs),
           o.mode == DataMode::kExact ? "64 sampled outputs against the float64 sum, bit for bit"
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
  // The weight types of the selected configurations, in table order.
  std::vector<WType> types;
  for (size_t i = 0; i < spec.count; ++i)
    if (selected(spec.configs[i].name, o) &&
        std::find(types.begin(), types.end(), spec.configs[i].wtype) == types.end())
      types.push_back(spec.configs[i].wtype);

  // results[rows index][shape index] -> rows (cuBLAS first)
  std::vector<std::vector<std::vector<Row>>> results(
      o.rows.size(), std::vector<std::vector<Row>>(shapes.size()));
  int failures = 0;
  int max_rows = *std::max_element(o.rows.begin(), o.rows.end());
  CmpResult* d_cmp = nullptr;
  CUDA_OR_DIE(cudaMalloc(&d_cmp, sizeof(CmpResult)));

  for (size_t si = 0; si < shapes.size(); ++si) {
    const LayerShape& sh = *shapes[si];
    arm(o.timeout, std::string(sh.name) + ": allocation");
    // BF16 weights always (cuBLAS), then each narrow storage type the configurations use.
    std::vector<TypeData> data_by_type(kWTypes);
    data_by_type[int(WType::kBf16)] = make_weights(WType::kBf16, sh, o, stream);
    for (WType t : types) {
      WType st = wtype_storage(t);
      if (data_by_type[int(st)].copies.empty()) data_by_type[int(st)] = make_weights(st, sh, o, stream);
    }
    void *x = nullptr, *y = nullptr, *yref = nullptr, *yref2 = nullptr;
    CUDA_OR_DIE(cudaMalloc(&x, size_t(max_rows) * sh.k * 2));
    CUDA_OR_DIE(cudaMalloc(&y, size_t(max_rows) * sh.n * 2));
    CUDA_OR_DIE(cudaMalloc(&yref, size_t(max_rows) * sh.n * 2));
    CUDA_OR_DIE(cudaMalloc(&yref2, size_t(max_rows) * sh.n * 2));
    fill_bf16_kernel<<<1024, 256, 0, stream>>>(static_cast<uint16_t*>(x), size_t(max_rows) * sh.k,
                                               o.seed + 1000, o.mode, true);
    CUDA_OR_DIE(cudaStreamSynchronize(stream));
    disarm();

    for (size_t ri = 0; ri < o.rows.size(); ++ri)
      failures += run_shape_rows(spec, o, sh, o.rows[ri], types, data_by_type, x, y, yref, yref2,
                                 handle, sms, d_cmp, stream, results[ri][si]);
    for (auto& d : data_by_type) free_weights(d);
    cudaFree(x);
    cudaFree(y);
    cudaFree(yref);
    cudaFree(yref2);
  }

  printf("\n== per-layer sum over %zu shapes (", shapes.size());
  for (size_t si = 0; si < shapes.size(); ++si) printf("%s%s", si ? "+" : "", shapes[si]->name);
  printf("), us; speed = cuBLAS sum / sum\n");
  if (spec.mixed) {
    printf("SUM %6s %10s | %-6s %-28s %10s %6s | %10s %6s %7s\n", "rows", "cublas", "W",
           "best single config", "sum", "speed", "per-shape", "speed", "W TB/s");
    for (WType t : types) print_sums(o, shapes, results, true, t);
  } else {
    printf("SUM %6s %10s | %-28s %10s %6s | %10s %6s\n", "rows", "cublas", "best single config",
           "sum", "speed", "per-shape", "speed");
    print_sums(o, shapes, results, false, WType::kBf16);
  }
  printf("\n%s: %d failed result(s)\n", failures ? "FAIL" : "PASS", failures);
  cublasDestroy(handle);
  cudaFree(cublas_ws);
  cudaFree(d_cmp);
  return failures ? 1 : 0;
}

}  // namespace cb

#include "cutlass_bench_shape.cuh"
