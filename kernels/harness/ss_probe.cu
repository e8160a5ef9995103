// SHARED-MEMORY DECODE GEMM, a measurement harness (kernels: ss_kernel.cuh): DF11 weights decoded by producer warps
// straight into the shared-memory slots a wgmma GEMM reads (A and B from shared memory), against its twin (the same
// kernel, the BF16 weight blocks bulk-copied into those slots) and cuBLAS, on a Qwen3-8B layer's four products (q/k/v
// stacked 6144x4096, o 4096x4096, gate/up stacked 24576x4096, down 4096x12288; N(0, 0.02) weights).
//
//   bash kernels/harness/ss_probe.sh              (builds .gpu/ss/ss_probe and .gpu/ss/run.sh)
//   bash .gpu/ss/run.sh [--iters N] [--rows "16 32 64 128 512"] [--per-product] [--ctas N] [--max-splits N]
//                       [--min-kb-split N] [--no-arrange] [--no-reduce]
//
// A row count runs the x tiles that hold it: 16, 32 or 64 rows (wgmma n16-n64, each weight decoded once a product),
// 128 and 256 above 128 rows. Where a product's tiles are fewer than --ctas (default: the SMs), K is split to reach it
// (at most --max-splits, default 16; at least --min-kb-split 64-column blocks a split, default 4), each split's fp32
// partial sums stored and added in split order by ss_reduce (DF11 and twin alike, so the same bits). Diagnostics of
// the timings (wrong outputs, after the checks): --no-arrange leaves x's blocks as arranged for the checks (one x tile
// size a row count: 16-128 rows), --no-reduce skips the splits' addition.
// Checks: DF11 == twin byte for byte (the same consumers over the same shared-memory bytes); the twin against cuBLAS
// within BF16 rounding. Timing: the layer's four products as one CUDA graph (x's blocks arranged by a launch before
// each product, and the split-K reduction, counted), us. Variants of the kernel are nvcc flags (ss_kernel.cuh's head):
// SS_BIN=name bash kernels/harness/ss_probe.sh -DSS_CTAS=2 ... builds .gpu/ss/name, run by
// SS_BIN=name bash .gpu/ss/run.sh. (x by TMA and the splits added in the kernel: kernels/df11_ws_gemm.cu.) Figures: docs/PERFORMANCE.md ("A decoding producer for a wgmma
// GEMM").

#include <cmath>
#include <string>

#include "packed_host.h"
#include "ss_kernel.cuh"

// The row-major index of position r of chunk q in the kernel's block order (ss_kernel.cuh, LAYOUT) for K columns.
static size_t ss_source(uint32_t q, int r, int K) {
    const uint32_t KB = (uint32_t)K / SS_BK, blk = q / 4, slab = q % 4, tm = blk / KB, kb = blk % KB;
    const int row = (int)tm * SS_BM + (r >> 7) * 8 + ((r & 63) >> 3);
    const int k = (int)kb * SS_BK + (int)slab * 16 + ((r & 127) >> 6) * 8 + (r & 7);
    return (size_t)row * K + k;
}

struct Prod {
    Member* m;
    uint16_t *wb, *xb, *y_twin, *y_df11, *y_cublas;
};

// Split K: a product's grid of x tiles x weight tiles is cut along K into enough splits to give `g_target_ctas`
// CTAs (at most KB / g_min_kb_split splits; 1 when the tiles alone fill it).
static int g_target_ctas = 0, g_min_kb_split = 4, g_max_splits = 16;
static float* g_ws = nullptr;   // fp32 partial sums of the splits
// Diagnostics of the timed layer (the checks run without them): x's blocks left as the check arranged them
// (--no-arrange), the splits' sums not added (--no-reduce: y not written).
static bool g_skip_arrange = false, g_skip_reduce = false, g_diag_arrange = false, g_diag_reduce = false;
static int splits_for(int R, int RT, int N, int K) {
    const int tiles = ((R + RT - 1) / RT) * (N / SS_BM), KB = K / SS_BK;
    int s = (g_target_ctas + tiles - 1) / tiles;
    s = std::min(std::min(s, KB / g_min_kb_split), g_max_splits);
    return std::max(s, 1);
}

template <int RT, int PW>
static void launch(const Prod& p, const uint16_t* x, int R, bool df11, cudaStream_t st) {
    const int K = p.m->cols, N = p.m->rows;
    const size_t units = (size_t)((R + RT - 1) / RT) * (K / SS_BK) * RT * 8;
    if (!g_skip_arrange)
        ss_x_blocks<RT><<<(int)std::min<size_t>((units + 255) / 256, 4096), 256, 0, st>>>(x, p.xb, R, K);
    uint16_t* y = df11 ? p.y_df11 : p.y_twin;
    SsArgs a = {p.wb, p.m->codes, p.m->chunk_escapes, p.m->lane_starts, p.m->escapes, p.m->n_escapes, p.m->sm,
                p.m->t0, p.m->t1,
                p.xb, y, g_ws, R, N, K};
    const int S = splits_for(R, RT, N, K);
    dim3 grid((R + RT - 1) / RT, N / SS_BM, S);
    if (df11)
        ss_gemm<RT, true, PW><<<grid, 128 * (PW + 2), ss_smem_bytes(RT, PW), st>>>(a);
    else
        ss_gemm<RT, false, PW><<<grid, 128 * (PW + 2), ss_smem_bytes(RT, PW), st>>>(a);
    if (S > 1 && !g_skip_reduce) {
        const size_t n = (size_t)R * N;
        ss_reduce<<<(int)std::min<size_t>((n / 4 + 255) / 256, 2048), 256, 0, st>>>(g_ws, y, n, S);
    }
}

// The kernel variants timed: x tile rows and producer warpgroups. A row count runs the variants whose x tile is the
// smallest that holds it (RT 128 and 256 above 128 rows).
struct Variant {
    const char* name;
    int rt;
    void (*run)(const Prod&, const uint16_t*, int, bool, cudaStream_t);
};
static const Variant kVariants[] = {
    {"RT16 PW2", 16, launch<16, 2>},     {"RT32 PW2", 32, launch<32, 2>},     {"RT64 PW2", 64, launch<64, 2>},
#if SS_CTAS == 1   // (two CTAs an SM leave too few registers for the 128 and 256-row tiles)
    {"RT128 PW1", 128, launch<128, 1>}, {"RT256 PW1", 256, launch<256, 1>}, {"RT128 PW2", 128, launch<128, 2>},
    {"RT256 PW2", 256, launch<256, 2>},
#endif
};
static size_t g_smem_max = 0;   // the device's shared memory a CTA may opt in to
static bool runs(const Variant& v, int R) {
    return ss_smem_bytes(v.rt, 2) <= g_smem_max && (R > 128 ? v.rt >= 128 : v.rt >= R && v.rt / 2 < R);
}

template <int RT, int PW>
static void allow_smem() {
    if (ss_smem_bytes(RT, PW) > g_smem_max) return;   // too many stages for this tile: runs() skips it
    CK(cudaFuncSetAttribute(ss_gemm<RT, true, PW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ss_smem_bytes(RT, PW)));
    CK(cudaFuncSetAttribute(ss_gemm<RT, false, PW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ss_smem_bytes(RT, PW)));
}

int main(int argc, char** argv) {
    int iters = 30;
    bool per_product = false;
    std::vector<int> rows_list = {16, 32, 64, 128, 512};
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows_list = parse_list(argv[++i]);
        else if (!strcmp(argv[i], "--per-product")) per_product = true;
        else if (!strcmp(argv[i], "--no-arrange")) g_diag_arrange = true;
        else if (!strcmp(argv[i], "--no-reduce")) g_diag_reduce = true;
        else if (!strcmp(argv[i], "--ctas") && i + 1 < argc) g_target_ctas = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-splits") && i + 1 < argc) g_max_splits = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-kb-split") && i + 1 < argc) g_min_kb_split = atoi(argv[++i]);
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    g_smem_max = prop.sharedMemPerBlockOptin;
    if (g_target_ctas == 0) g_target_ctas = prop.multiProcessorCount;
    printf("split K to reach %d CTAs a product (at most %d splits, at least %d K blocks a split)\n", g_target_ctas,
           g_max_splits, g_min_kb_split);
    allow_smem<16, 2>();
    allow_smem<32, 2>();
    allow_smem<64, 2>();
#if SS_CTAS == 1
    allow_smem<128, 1>();
    allow_smem<256, 1>();
    allow_smem<128, 2>();
    allow_smem<256, 2>();
#endif
    {
        cudaFuncAttributes fa, fb;
        CK(cudaFuncGetAttributes(&fa, ss_gemm<64, true, 2>));
        CK(cudaFuncGetAttributes(&fb, ss_gemm<64, false, 2>));
        printf("ss_gemm<64, PW2>: DF11 %d registers, %zu B local; twin %d registers, %zu B local\n", fa.numRegs,
               (size_t)fa.localSizeBytes, fb.numRegs, (size_t)fb.localSizeBytes);
    }
    std::vector<Member> ms = qwen3_layer(0x7654321ull);
    pack_members(ms, [](const Member& m, uint32_t q, int r) { return ss_source(q, r, m.cols); });
    const int max_rows = *std::max_element(rows_list.begin(), rows_list.end());
    std::vector<Prod> ps(ms.size());
    for (size_t k = 0; k < ms.size(); ++k) {
        Member& m = ms[k];
        Prod& p = ps[k];
        p.m = &m;
        const size_t n = (size_t)m.rows * m.cols;
        std::vector<uint16_t> wb(n);
        for (uint32_t q = 0; q < n / 2048; ++q)
            for (int r = 0; r < 2048; ++r) wb[(size_t)q * 2048 + r] = m.host[ss_source(q, r, m.cols)];
        CK(cudaMalloc(&p.wb, 2 * n));
        CK(cudaMemcpy(p.wb, wb.data(), 2 * n, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&p.xb, 2 * (size_t)(max_rows + 255) * m.cols));
        for (uint16_t** y : {&p.y_twin, &p.y_df11, &p.y_cublas}) CK(cudaMalloc(y, 2 * (size_t)max_rows * m.rows));
    }
    size_t ws_floats = 0;
    for (const Prod& p : ps) ws_floats = std::max(ws_floats, (size_t)g_max_splits * (max_rows + 255) * p.m->rows);
    CK(cudaMalloc(&g_ws, 4 * ws_floats));
    uint16_t* x;
    CK(cudaMalloc(&x, 2 * (size_t)max_rows * 12288));
    synth_bf16<<<256, 256>>>(x, (size_t)max_rows * 12288, 0x1234ull);
    CK(cudaGetLastError());
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const cublasHandle_t h = cublas_on(st);
    int fails = 0;
    printf("\nper layer, us (4 products, one graph): twin / DF11 per variant, against cuBLAS\n");
    for (const int R : rows_list) {
        auto cublas = [&](const Prod& p) {
            cublas_product(h, *p.m, x, p.y_cublas, R);
        };
        g_skip_arrange = g_skip_reduce = false;
        std::string checks;
        for (const Variant& v : kVariants) {
            if (!runs(v, R)) continue;
            for (auto& p : ps) {
                cublas(p);
                v.run(p, x, R, false, st);
                v.run(p, x, R, true, st);
                CK(cudaGetLastError());
                const size_t n = (size_t)R * p.m->rows;
                std::vector<uint16_t> yt(n), yd(n), yc(n);
                CK(cudaMemcpyAsync(yt.data(), p.y_twin, 2 * n, cudaMemcpyDeviceToHost, st));
                CK(cudaMemcpyAsync(yd.data(), p.y_df11, 2 * n, cudaMemcpyDeviceToHost, st));
                CK(cudaMemcpyAsync(yc.data(), p.y_cublas, 2 * n, cudaMemcpyDeviceToHost, st));
                CK(cudaStreamSynchronize(st));
                const bool same = memcmp(yt.data(), yd.data(), 2 * n) == 0;
                double worst, scale;
                const bool close = close_to(yt.data(), yc.data(), n, worst, scale);
                fails += !same + !close;
                if (!same || !close)
                    checks += std::string(" ") + p.m->name + "@" + v.name + (same ? "" : ": DF11 != twin") +
                              (close ? "" : ": twin far from cuBLAS (" + std::to_string(worst) + " of " +
                                                std::to_string(scale) + ")");
            }
        }
        g_skip_arrange = g_diag_arrange;   // from here on only timings
        g_skip_reduce = g_diag_reduce;
        const float t_cublas = time_graph(st, iters, [&] { for (auto& p : ps) cublas(p); });
        printf("%5d rows: cuBLAS %7.1f  %s\n", R, t_cublas, checks.empty() ? "(DF11 == twin, twin ~ cuBLAS)" : checks.c_str());
        for (const Variant& v : kVariants) {
            if (!runs(v, R)) continue;
            const float tt = time_graph(st, iters, [&] { for (auto& p : ps) v.run(p, x, R, false, st); });
            const float td = time_graph(st, iters, [&] { for (auto& p : ps) v.run(p, x, R, true, st); });
            printf("     %-10s twin %7.1f (%.3fx cuBLAS)  DF11 %7.1f (%.3fx cuBLAS, %.3fx twin)\n", v.name, tt,
                   t_cublas / tt, td, t_cublas / td, tt / td);
            if (per_product) {
                for (auto& p : ps) {
                    const float c = time_graph(st, iters, [&] { cublas(p); });
                    const float t1 = time_graph(st, iters, [&] { v.run(p, x, R, false, st); });
                    const float d1 = time_graph(st, iters, [&] { v.run(p, x, R, true, st); });
                    printf("          %-8s cuBLAS %7.1f  twin %7.1f  DF11 %7.1f  (%d splits)\n", p.m->name, c, t1, d1,
                           splits_for(R, v.rt, p.m->rows, p.m->cols));
                }
            }
        }
    }
    printf("\n%s (%d failed checks)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
