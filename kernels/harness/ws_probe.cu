// WARP-SPECIALIZED PRODUCTS, a measurement harness for kernels/df11_ws_gemm.cu: DF11 (the packed form in the library's
// tile order, as the streaming kernels read it) and its BF16 twin (row-major weights by TMA) against cuBLAS, on a
// Qwen3-8B layer's four products (q/k/v stacked 6144x4096, o 4096x4096, gate/up stacked 24576x4096, down 4096x12288;
// N(0, 0.02) weights).
//
//   bash kernels/harness/ws_probe.sh              (builds .gpu/ws/ws_probe and .gpu/ws/run.sh)
//   bash .gpu/ws/run.sh [--iters N] [--rows "9 16 24 32 48 64"] [--ctas N] [--fill] [--max-splits N] [--per-product]
//
// A row count takes the smallest x tile (16, 32, 64 rows) that holds it. Where a product's tiles are fewer than --ctas
// (default: two an SM), K is split into runs of whole groups (512 columns): the most splits that stay within --ctas
// CTAs (at least one; at most --max-splits, default 16), or with --fill the fewest that reach --ctas (more than one
// wave: measured slower for both kernels). Checks, at every row count: DF11 == twin byte for byte and the twin against
// cuBLAS within BF16 rounding, for the layer's products and two more shapes (4024 x 6144: a last tile part past the
// rows; 1030 x 2048, the twin alone: rows not a multiple of 4). Timing: the layer's four products as one CUDA graph,
// us. Figures: docs/PERFORMANCE.md ("Warp-specialized products on the packed form").

#include <cmath>
#include <string>

#include <cudaTypedefs.h>

#include "packed_host.h"
#include "../df11_ws_gemm.cu"

static PFN_cuTensorMapEncodeTiled_v12000 g_encode = nullptr;
// A 2D tensor map of t [outer, inner] (BF16, row-major), boxes of 64 x box_rows, 128-byte swizzle, zero fill.
static WsMap tensor_map(const void* t, int outer, int inner, int box_rows) {
    if (!g_encode) {
        cudaDriverEntryPointQueryResult q;
        CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&g_encode), 12000,
                                            cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || !g_encode) {
            fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
            exit(2);
        }
    }
    static_assert(sizeof(WsMap) == sizeof(CUtensorMap), "WsMap is a CUtensorMap");
    CUtensorMap map;
    const cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer}, strides[1] = {(cuuint64_t)inner * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)box_rows}, elem[2] = {1, 1};
    const CUresult r = g_encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(t), dims, strides, box,
                                elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled: error %d\n", (int)r);
        exit(2);
    }
    WsMap out;
    memcpy(&out, &map, sizeof out);
    return out;
}

// A matrix of N(0, 0.02) BF16 made on the device, copied to the host.
static Member synth_member(const char* name, int rows, int cols, uint64_t seed) {
    Member m;
    m.name = name;
    m.rows = rows;
    m.cols = cols;
    const size_t n = (size_t)rows * cols;
    CK(cudaMalloc(&m.w, 2 * n));
    synth_bf16<<<1024, 256>>>(m.w, n, seed);
    CK(cudaGetLastError());
    m.host.resize(n);
    CK(cudaMemcpy(m.host.data(), m.w, 2 * n, cudaMemcpyDeviceToHost));
    return m;
}

struct Prod {
    Member* m;
    bool timed = true;   // one of the layer's four products (else checked only)
    bool df11 = true;    // a DF11 form to check (else the twin alone, against cuBLAS)
    WsMap wmap;
    uint16_t *y_twin, *y_df11, *y_cublas;
};

static int g_target_ctas = 0, g_max_splits = 16;
static bool g_fit = true;   // at most one wave (splits rounded down); --fill: at least --ctas CTAs (rounded up)
static float* g_partial = nullptr;
static uint32_t* g_counters = nullptr;

static int splits_for(int R, int RT, int N, int K) {
    const int tiles = ((R + RT - 1) / RT) * ((N + WS_BM - 1) / WS_BM), groups = 4 * (K / 2048);
    const int want = g_fit ? g_target_ctas / tiles : (g_target_ctas + tiles - 1) / tiles;
    const int s = std::min(std::min(want, groups), g_max_splits);
    return std::max(s, 1);
}

// The kernels of an x tile.
template <int RT>
struct WsKernels;
template <>
struct WsKernels<16> {
    static constexpr auto df11 = df11_ws_gemm_16;
    static constexpr auto twin = bf16_ws_gemm_16;
};
template <>
struct WsKernels<32> {
    static constexpr auto df11 = df11_ws_gemm_32;
    static constexpr auto twin = bf16_ws_gemm_32;
};
template <>
struct WsKernels<64> {
    static constexpr auto df11 = df11_ws_gemm_64;
    static constexpr auto twin = bf16_ws_gemm_64;
};

template <int RT>
static void launch(const Prod& p, const uint16_t* x, int R, bool df11, cudaStream_t st) {
    const Member& m = *p.m;
    const int K = m.cols, N = m.rows, S = splits_for(R, RT, N, K);
    const WsMap xmap = tensor_map(x, R, K, RT);
    dim3 grid((R + RT - 1) / RT, (N + WS_BM - 1) / WS_BM, S);
    __nv_bfloat16* y = reinterpret_cast<__nv_bfloat16*>(df11 ? p.y_df11 : p.y_twin);
    if (df11)
        WsKernels<RT>::df11<<<grid, WS_THREADS, ws_smem_bytes(RT), st>>>(
            m.codes, m.chunk_escapes, m.lane_starts, m.n_chunks, m.escapes, m.n_escapes, m.t0, m.t1, m.t0, m.t1, m.t0,
            m.t1, 1 << 30, 1 << 30, m.sm, xmap, y, g_partial, g_counters, R, N, K, 0ll);
    else
        WsKernels<RT>::twin<<<grid, WS_THREADS, ws_smem_bytes(RT, true), st>>>(p.wmap, xmap, y, g_partial, g_counters, R, N, K);
}

int main(int argc, char** argv) {
    int iters = 30;
    bool per_product = false;
    std::vector<int> rows_list = {9, 16, 24, 32, 48, 64};
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows_list = parse_list(argv[++i]);
        else if (!strcmp(argv[i], "--per-product")) per_product = true;
        else if (!strcmp(argv[i], "--fill")) g_fit = false;
        else if (!strcmp(argv[i], "--ctas") && i + 1 < argc) g_target_ctas = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-splits") && i + 1 < argc) g_max_splits = atoi(argv[++i]);
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    if (g_target_ctas == 0) g_target_ctas = 2 * prop.multiProcessorCount;
    printf("split K to reach %d CTAs a product (at most %d splits)\n", g_target_ctas, g_max_splits);
    // Each kernel's shared memory, and the CTAs an SM it gets with it (the kernels are written for two).
    auto prepare = [](const void* f, const char* name, int smem) {
        CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        int ctas = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, f, WS_THREADS, smem));
        printf("%s: %d B dynamic shared memory, %d CTAs an SM%s\n", name, smem, ctas, ctas == 2 ? "" : " (not two!)");
    };
    prepare((const void*)df11_ws_gemm_16, "df11_ws_gemm_16", ws_smem_bytes(16));
    prepare((const void*)df11_ws_gemm_32, "df11_ws_gemm_32", ws_smem_bytes(32));
    prepare((const void*)df11_ws_gemm_64, "df11_ws_gemm_64", ws_smem_bytes(64));
    prepare((const void*)bf16_ws_gemm_16, "bf16_ws_gemm_16", ws_smem_bytes(16, true));
    prepare((const void*)bf16_ws_gemm_32, "bf16_ws_gemm_32", ws_smem_bytes(32, true));
    prepare((const void*)bf16_ws_gemm_64, "bf16_ws_gemm_64", ws_smem_bytes(64, true));
    {
        cudaFuncAttributes fa, fb;
        CK(cudaFuncGetAttributes(&fa, df11_ws_gemm_64));
        CK(cudaFuncGetAttributes(&fb, bf16_ws_gemm_64));
        printf("ws_gemm 64: DF11 %d registers, %zu B local; twin %d registers, %zu B local\n", fa.numRegs,
               (size_t)fa.localSizeBytes, fb.numRegs, (size_t)fb.localSizeBytes);
    }
    // The layer's four products, then two checked only: rows that leave a last 128-row tile part empty (DF11 and
    // twin), and rows that are not a multiple of 4 (the twin alone: the tile order needs rows % 8 == 0).
    std::vector<Member> ms = qwen3_layer(0x7654321ull);
    ms.push_back(synth_member("ragged", 4024, 6144, 0x5151ull));
    ms.push_back(synth_member("odd", 1030, 2048, 0x5252ull));
    std::vector<Member> packed(ms.begin(), ms.end() - 1);
    pack_members(packed, [](const Member& m, uint32_t q, int r) {
        return (size_t)tile_original_host(2048u * q + (uint32_t)r, (uint32_t)m.cols);
    });
    for (size_t k = 0; k + 1 < ms.size(); ++k) ms[k] = std::move(packed[k]);
    const int max_rows = *std::max_element(rows_list.begin(), rows_list.end());
    std::vector<Prod> ps(ms.size());
    for (size_t k = 0; k < ms.size(); ++k) {
        Prod& p = ps[k];
        p.m = &ms[k];
        p.timed = k < 4;
        p.df11 = k + 1 < ms.size();
        p.wmap = tensor_map(ms[k].w, ms[k].rows, ms[k].cols, WS_BM);
        for (uint16_t** y : {&p.y_twin, &p.y_df11, &p.y_cublas}) CK(cudaMalloc(y, 2 * (size_t)max_rows * ms[k].rows));
    }
    CK(cudaMalloc(&g_partial, 4 * (size_t)g_max_splits * max_rows * 24576));
    const size_t max_tiles = (size_t)((max_rows + 15) / 16) * (24576 / WS_BM);
    CK(cudaMalloc(&g_counters, 4 * max_tiles));
    CK(cudaMemset(g_counters, 0, 4 * max_tiles));
    uint16_t* x;
    CK(cudaMalloc(&x, 2 * (size_t)max_rows * 12288));
    synth_bf16<<<256, 256>>>(x, (size_t)max_rows * 12288, 0x1234ull);
    CK(cudaGetLastError());
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const cublasHandle_t hb = cublas_on(st);
    int fails = 0;
    printf("\nper layer, us (4 products, one graph): twin / DF11 against cuBLAS\n");
    for (const int R : rows_list) {
        if (R < 1 || R > 64) {
            printf("%d rows: outside 1-64, skipped\n", R);
            continue;
        }
        const int RT = R <= 16 ? 16 : R <= 32 ? 32 : 64;
        auto run = [&](const Prod& p, bool df11) {
            if (RT == 16) launch<16>(p, x, R, df11, st);
            else if (RT == 32) launch<32>(p, x, R, df11, st);
            else launch<64>(p, x, R, df11, st);
        };
        auto cublas = [&](const Prod& p) {
            cublas_product(hb, *p.m, x, p.y_cublas, R);
        };
        std::string checks;
        for (auto& p : ps) {
            const size_t n = (size_t)R * p.m->rows;
            CK(cudaMemsetAsync(p.y_twin, 0xff, 2 * n, st));
            CK(cudaMemsetAsync(p.y_df11, 0xee, 2 * n, st));
            cublas(p);
            run(p, false);
            if (p.df11) run(p, true);
            CK(cudaGetLastError());
            std::vector<uint16_t> yt(n), yd(n), yc(n);
            CK(cudaMemcpyAsync(yt.data(), p.y_twin, 2 * n, cudaMemcpyDeviceToHost, st));
            CK(cudaMemcpyAsync(yd.data(), p.y_df11, 2 * n, cudaMemcpyDeviceToHost, st));
            CK(cudaMemcpyAsync(yc.data(), p.y_cublas, 2 * n, cudaMemcpyDeviceToHost, st));
            CK(cudaStreamSynchronize(st));
            const bool same = !p.df11 || memcmp(yt.data(), yd.data(), 2 * n) == 0;
            double worst, scale;
            const bool close = close_to(yt.data(), yc.data(), n, worst, scale);
            fails += !same + !close;
            if (!same || !close)
                checks += std::string(" ") + p.m->name + (same ? "" : ": DF11 != twin") +
                          (close ? "" : ": twin far from cuBLAS (" + std::to_string(worst) + " of " +
                                            std::to_string(scale) + ")");
        }
        const float tc = time_graph(st, iters, [&] { for (auto& p : ps) if (p.timed) cublas(p); });
        const float tt = time_graph(st, iters, [&] { for (auto& p : ps) if (p.timed) run(p, false); });
        const float td = time_graph(st, iters, [&] { for (auto& p : ps) if (p.timed) run(p, true); });
        printf("%3d rows (RT %2d): cuBLAS %6.1f  twin %6.1f (%.3fx cuBLAS)  DF11 %6.1f (%.3fx cuBLAS, %.3fx twin)  %s\n", R,
               RT, tc, tt, tc / tt, td, tc / td, tt / td, checks.empty() ? "(DF11 == twin, twin ~ cuBLAS)" : checks.c_str());
#ifdef WS_DIAG_TIMES
        // Where the warps wait (one launch of each product and kernel, summed over warps, in 10^6 cycles).
        for (auto& p : ps)
            for (bool df11 : {false, true}) {
                if (!p.timed) continue;
                unsigned long long zero[4] = {}, c[4];
                CK(cudaMemcpyToSymbol(ws_diag_cycles, zero, sizeof zero));
                run(p, df11);
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpyFromSymbol(c, ws_diag_cycles, sizeof c));
                printf("      %-8s %s: producers wait %8.1f of %8.1f, consumers wait %8.1f of %8.1f (Mcycles)\n", p.m->name,
                       df11 ? "DF11" : "twin", c[0] / 1e6, c[2] / 1e6, c[1] / 1e6, c[3] / 1e6);
            }
#endif
        if (per_product)
            for (auto& p : ps) {
                if (!p.timed) continue;
                const float c = time_graph(st, iters, [&] { cublas(p); });
                const float t1 = time_graph(st, iters, [&] { run(p, false); });
                const float d1 = time_graph(st, iters, [&] { run(p, true); });
                printf("      %-8s cuBLAS %6.1f  twin %6.1f  DF11 %6.1f  (%d splits)\n", p.m->name, c, t1, d1,
                       splits_for(R, RT, p.m->rows, p.m->cols));
            }
    }
    printf("\n%s (%d failed checks)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
