// One shape at one row count, for the CUTLASS GEMM benchmarks' driver (cutlass_bench_run.cuh):
// cuBLAS (the baseline, timed on BF16 weights, and a negative control), then, per weight type,
// the reference (cuBLAS's BF16 output, or for a narrow type cuBLAS on W widened to BF16) and
// every selected configuration of that type: a checked run, then the timing.
#pragma once

#include "cutlass_bench_run.cuh"

namespace cb {

inline int run_shape_rows(const BenchSpec& spec, const Options& o, const LayerShape& sh, int rows,
                          const std::vector<WType>& types, const std::vector<TypeData>& data,
                          void* x, void* y, void* yref, void* yref2, cublasHandle_t handle,
                          int sms, CmpResult* d_cmp, cudaStream_t stream, std::vector<Row>& res) {
  int failures = 0;
  const bool exact = bit_exact(o.mode);
  const size_t ycount = size_t(rows) * sh.n;
  const double xy_bytes = 2.0 * rows * sh.k + 2.0 * rows * sh.n;
  const double flops = 2.0 * sh.n * double(sh.k) * rows;
  const TypeData& bf = data[int(WType::kBf16)];
  // A result line; W TB/s (weights only) in the mixed benchmark.
  auto print_line = [&](const std::string& label, double us, double wbytes, double speed,
                        const char* ma, const char* mr, const char* diff, const std::string& tail) {
    char wbw[16] = "";
    if (spec.mixed) snprintf(wbw, sizeof wbw, " %6.2f", wbytes / us * 1e-6);
    printf("%-28s %9.2f %6.2f%s %7.1f %6.2f  %-9s %-9s %-15s %s\n", label.c_str(), us,
           (wbytes + xy_bytes) / us * 1e-6, wbw, flops / us * 1e-6, speed, ma, mr, diff,
           tail.c_str());
  };
  printf("\n== %s  n=%d k=%d rows=%d  (W %.1f MB x %d copies)\n", sh.name, sh.n, sh.k, rows,
         bf.bytes / 1e6, int(bf.copies.size()));
  printf("%-28s %9s %6s%s %7s %6s  %-9s %-9s %-15s %s\n", "config", "us", "TB/s",
         spec.mixed ? " W TB/s" : "", "TFLOP/s", "speed", "max_abs", "max_rel", "bit-diff",
         "check");
  Samples smp = make_samples(sh.n, sh.k, rows, o.seed, o.mode, WType::kBf16);
  GemmProblem prob;
  prob.n = sh.n;
  prob.k = sh.k;
  prob.rows = rows;
  prob.x = x;
  prob.y = y;
  prob.sm_count = sms;

  // cuBLAS: the baseline and the BF16 weights' reference.
  CublasCtx cb{handle, sh.n, sh.k, rows, {}, x, yref};
  for (auto p : bf.copies) cb.w.push_back(p);
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
    int bad = check_samples(static_cast<uint16_t*>(yref), smp, exact, stream);
    Timing t = time_launches(cublas_launch, &cb, int(bf.copies.size()), o, stream,
                             std::string(sh.name) + ": cuBLAS");
    if (!t.error.empty()) {
      printf("%-28s error: %s\n", "cublas", t.error.c_str());
      check_context_or_die("cuBLAS");
      ++failures;
    } else {
      cublas_us = t.us;
      print_line("cublas", t.us, double(bf.bytes), 1.0, "-", "-", "-",
                 std::string("ref ") + (bad ? "FAIL" : "ok") + (t.graph ? "" : " (no graph)"));
      if (bad) {
        printf("  cuBLAS: %d of %zu sampled outputs off the reference\n", bad, smp.idx.size());
        ++failures;
      }
    }
  }
  res.push_back({"cublas", WType::kBf16, cublas_us});
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
    CmpResult cmp = compare(y, yref, ycount, exact, d_cmp, stream);
    int bad_ref = check_samples(static_cast<uint16_t*>(y), smp, exact, stream);
    bool flagged = e == cudaSuccess && cmp.bad > 0 && bad_ref > 0;
    printf("%-28s flagged %llu/%zu outputs vs cuBLAS, %d/%zu samples vs ref: %s\n",
           "control (cuBLAS, k-64)", cmp.bad, ycount, bad_ref, smp.idx.size(),
           flagged ? "ok" : "FAIL (the checks cannot fail?)");
    if (!flagged) ++failures;
  }

  for (WType wt : types) {
    const TypeData& d = data[int(wtype_storage(wt))];
    const void* ref = yref;
    bool ref_ok = cublas_us > 0;
    Samples smp_t;
    Samples* s = &smp;
    if (spec.mixed)
      printf("-- %s weights: %d bits, %.1f MB x %d copies\n", wtype_name(wt), wtype_bits(wt),
             d.bytes / 1e6, int(d.copies.size()));
    if (d.wide) {
      // The reference for a narrow type: cuBLAS on W widened to BF16 (exact for its integers).
      smp_t = make_samples(sh.n, sh.k, rows, o.seed, o.mode, wt);
      s = &smp_t;
      CublasCtx cr{handle, sh.n, sh.k, rows, {d.wide}, x, yref2};
      arm(o.timeout, std::string(sh.name) + ": cuBLAS reference for " + wtype_name(wt));
      cudaMemsetAsync(yref2, 0xff, ycount * 2, stream);
      cudaError_t e = cublas_launch(&cr, 0, stream);
      if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
      disarm();
      std::string label = std::string("cublas(") + wtype_name(wt) + "->bf16)";
      if (e != cudaSuccess) {
        printf("%-28s error: %s\n", label.c_str(), cudaGetErrorString(e));
        check_context_or_die(label.c_str());
        ++failures;
        ref_ok = false;
      } else {
        int bad = check_samples(static_cast<uint16_t*>(yref2), smp_t, exact, stream);
        printf("%-28s reference: %d/%zu samples off the float64 sum: %s\n", label.c_str(), bad,
               smp_t.idx.size(), bad ? "FAIL" : "ok");
        if (bad) ++failures;
        ref_ok = true;
      }
      ref = yref2;
    }
    prob.weights.assign(d.copies.begin(), d.copies.end());
    const int copies = int(d.copies.size());

    for (size_t cidx = 0; cidx < spec.count; ++cidx) {
      const ConfigInfo& ci = spec.configs[cidx];
      if (ci.wtype != wt || !selected(ci.name, o)) continue;
      // (requested, resolved) split counts; (1, 1): the configuration as built.
      std::vector<std::pair<int, int>> variants{{1, 1}};
      if (std::string(ci.scheduler) == "StreamK") {
        const long long tiles =
            (long long)((sh.n + ci.tm - 1) / ci.tm) * ((rows + ci.tn - 1) / ci.tn);
        const int ktiles = (sh.k + ci.tk - 1) / ci.tk;
        for (int sp : o.splits) {
          int v = sp > 0 ? sp : int(std::min<long long>(sms / std::max(1LL, tiles), ktiles));
          if (v > 1) variants.push_back({sp, v});
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
        CmpResult cmp = compare(y, ref, ycount, exact, d_cmp, stream);
        int bad_ref = check_samples(static_cast<uint16_t*>(y), *s, exact, stream);
        bool vs_cublas_ok = !ref_ok || cmp.bad == 0;
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
        print_line(label, t.us, double(d.bytes), cublas_us > 0 ? cublas_us / t.us : 0.0, ma, mr,
                   diff, check + note + (t.graph ? "" : " (no graph)"));
        if (!vs_cublas_ok || bad_ref) {
          ++failures;
        } else {
          res.push_back({label, wt, t.us});  // only checked results count for "best"
        }
      }
    }
    // Best CUTLASS result of this weight type, shape and row count.
    const Row* best = nullptr;
    for (auto& r : res)
      if (r.name != "cublas" && r.t == wt && r.us > 0 && (!best || r.us < best->us)) best = &r;
    if (best && cublas_us > 0) {
      if (spec.mixed)
        printf("best %s: %s %.2f us, %.2fx cuBLAS, W %.2f TB/s\n", wtype_name(wt),
               best->name.c_str(), best->us, cublas_us / best->us, d.bytes / best->us * 1e-6);
      else
        printf("best: %s %.2f us, %.2fx cuBLAS\n", best->name.c_str(), best->us,
               cublas_us / best->us);
    }
    if (s != &smp) free_samples(smp_t);
  }
  free_samples(smp);
  return failures;
}

}  // namespace cb
