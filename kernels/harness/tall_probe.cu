// TALL-CHUNK PRODUCTS, a measurement harness: a DF11 tensor-core product for 16-64 rows of x whose every sub-step is
// a 64-row x 32-column chunk of the weight (instead of the streaming kernel's 8 x 256), so a warp loads x's 32 columns
// once and multiplies them by eight row groups: x is read once per 64 weight rows instead of once per 8. Its BF16 twin
// is the same kernel reading row-major BF16. Standalone (its own packer, cuBLAS beside it):
//
//   bash kernels/harness/tall_probe.sh            (builds .gpu/tall/tall_probe)
//   tall_probe [--iters N] ROWS...                (default 16 32 64)
//
// For each ROWS: the four products of a Qwen3-8B layer (q/k/v stacked 6144x4096, o 4096x4096, gate/up stacked
// 24576x4096, down 4096x12288; N(0, 0.02) weights), DF11 == twin checked byte for byte at every grid, the twin against
// cuBLAS (within BF16 rounding), then the layer (the launches captured as one CUDA graph, programmatic dependent
// launches between them) timed for cuBLAS and both kernels at grids of 1, 2 and 3 CTAs an SM, then each product alone.
// Variants for measurements (-D...): TP_DEPTH (stages a warp, default 2), TP_WARPS (warps a CTA, default 8), and the
// diagnostics TP_NO_MMA, TP_NO_COPY, TP_EMPTY, TP_TWIN_CONTIG (wrong sums: their checks fail).
//
// THE TALL ORDER: chunk q = (G, c) of a member [rows, cols] (rows % 64 == 0, cols % 32 == 0) is rows 64G .. 64G + 63,
// columns 32c .. 32c + 31, at chunk index G * (cols / 32) + c; position 256 i + 8 L + e of a chunk (pass i, lane
// L = 4 g + t, element e) is element (64G + 8i + g, 32c + 8t + e). The packed form over it is df11_packed.cuh's
// (codes, escapes per chunk lane-major in pass order, lane starts), so the streaming kernels' stage and decode
// (df11_tc_stream.cuh) apply unchanged; only what a pass's weights multiply differs.
//
// SUMMATION (the same for DF11 and the twin, so they agree bit for bit): output (x row b, weight row r) of a chunk
// is two mma.sync m16n8k16 (k halves in the order of tc_step) into the warp's accumulator for (pass, m-tile); a warp
// sums its chunks of a piece in order (stream-K below: a piece is a warp's columns of one tile); tall_reduce adds a
// tile's pieces in CTA order.

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "packed_host.h"
#include "tall_kernel.cuh"

// ---------------------------------------------------------------------------------------------------------------
// Host: weights, the packed form in the tall order, launches, checks, timing.

static int g_sms = 132;

static size_t smem_bytes(bool twin, int nb) {
    const int mt = nb <= 16 ? 1 : nb <= 32 ? 2 : 4;
    return (size_t)TP_WARPS * TP_DEPTH * ((twin ? TS_TWIN_STAGE : TS_STAGE) + 1024 * mt);
}

static void launch_tall(const Member& m, bool twin, const __nv_bfloat16* x, __nv_bfloat16* y, float* partial, int nb,
                        int grid, cudaStream_t st) {
    TallArgs a;
    a.pk = {m.codes, m.chunk_escapes, m.lane_starts, m.n_chunks, m.escapes, m.n_escapes, m.t0, m.t1};
    a.sign_mantissa = m.sm;
    a.w = m.w;
    a.x = x;
    a.y = y;
    a.partial = partial;
    a.nb = nb;
    a.rows = m.rows;
    a.cols = m.cols;
    const long long block_chunks = (long long)((m.rows / 64 + TP_WARPS - 1) / TP_WARPS) * (m.cols / 32);
    grid = (int)std::min<long long>(grid, block_chunks / 2);
    const int mt = nb <= 16 ? 1 : nb <= 32 ? 2 : 4;
    void (*k)(TallArgs) = nullptr;
    if (mt == 1) k = twin ? tall_twin_1 : tall_df11_1;
    if (mt == 2) k = twin ? tall_twin_2 : tall_df11_2;
    if (mt == 4) k = twin ? tall_twin_4 : tall_df11_4;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(TP_THREADS);
    cfg.dynamicSmemBytes = smem_bytes(twin, nb);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, k, a));
    cudaLaunchConfig_t rc = cfg;
    rc.gridDim = dim3((32 * 32 * mt + 255) / 256, m.rows / 64);
    rc.blockDim = dim3(256);
    rc.dynamicSmemBytes = 0;
    CK(cudaLaunchKernelEx(&rc, tall_reduce, (const float*)partial, y, nb, m.rows, m.cols, grid, mt));
}

int main(int argc, char** argv) {
    int iters = 200;
    std::vector<int> rows_list;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else rows_list.push_back(atoi(argv[i]));
    }
    if (rows_list.empty()) rows_list = {16, 32, 64};
    for (int nb : rows_list)
        if (nb < 1 || nb > 64) {
            fprintf(stderr, "rows must be 1..64\n");
            return 2;
        }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    g_sms = prop.multiProcessorCount;
    printf("device %s, %d SMs, TP_DEPTH %d\n", prop.name, g_sms, TP_DEPTH);
    for (int mt : {1, 2, 4})
        for (bool twin : {false, true}) {
            void (*k)(TallArgs) = mt == 1 ? (twin ? tall_twin_1 : tall_df11_1)
                                  : mt == 2 ? (twin ? tall_twin_2 : tall_df11_2)
                                            : (twin ? tall_twin_4 : tall_df11_4);
            if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes(twin, 16 * mt)) !=
                cudaSuccess) {
                (void)cudaGetLastError();
                printf("kernel MT=%d %s: %zu bytes of shared memory do not fit (rows above %d not run)\n", mt,
                       twin ? "twin" : "df11", smem_bytes(twin, 16 * mt), 8 * mt);
                continue;
            }
            cudaFuncAttributes fa;
            CK(cudaFuncGetAttributes(&fa, k));
            int per_sm = 0;
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, TP_THREADS, smem_bytes(twin, 16 * mt)));
            printf("kernel MT=%d %s: %d registers, %zu B local, %d CTAs an SM\n", mt, twin ? "twin" : "df11",
                   fa.numRegs, (size_t)fa.localSizeBytes, per_sm);
        }

    std::vector<Member> ms = qwen3_layer(0x1234567ull);
    // THE TALL ORDER: position 256 i + 8 L + e of chunk (G, c) is element (64G + 8i + g, 32c + 8t + e).
    pack_members(ms, [](const Member& m, uint32_t q, int r) {
        const int cpr = m.cols / 32, G = q / cpr, c = q % cpr, i = r >> 8, L = (r >> 3) & 31, e = r & 7;
        return (size_t)(64 * G + 8 * i + (L >> 2)) * m.cols + 32 * c + 8 * (L & 3) + e;
    });
    size_t bf16_bytes = 0, df11_bytes = 0;
    for (auto& m : ms) {
        bf16_bytes += 2 * (size_t)m.rows * m.cols;
        df11_bytes += m.packed_bytes;
        printf("%s %dx%d: packed %.3f bits a weight, %u escapes (%.2f%%)\n", m.name, m.rows, m.cols,
               8.0 * m.packed_bytes / ((double)m.rows * m.cols), m.n_escaped,
               100.0 * m.n_escaped / ((double)m.rows * m.cols));
    }
    printf("layer: BF16 %.1f MB, packed DF11 %.1f MB (%.3f)\n", bf16_bytes / 1e6, df11_bytes / 1e6,
           (double)df11_bytes / bf16_bytes);

    const int max_nb = 64, max_cols = 12288, max_rows = 24576;
    __nv_bfloat16 *x, *y_ref, *y_a, *y_b;
    CK(cudaMalloc(&x, 2 * (size_t)max_nb * max_cols));
    synth_bf16<<<256, 256>>>(reinterpret_cast<uint16_t*>(x), (size_t)max_nb * max_cols, 0xabcdefull);
    CK(cudaMalloc(&y_ref, 2 * (size_t)max_nb * max_rows));
    CK(cudaMalloc(&y_a, 2 * (size_t)max_nb * max_rows));
    CK(cudaMalloc(&y_b, 2 * (size_t)max_nb * max_rows));
    float* partial;
    CK(cudaMalloc(&partial, 4 * (size_t)64 * max_nb * TP_WARPS * 2 * 3 * g_sms));   // two pieces a warp
    cublasHandle_t h;
    CB(cublasCreate(&h));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CB(cublasSetStream(h, st));
    int fails = 0;
    const int grids[] = {g_sms, 2 * g_sms, 3 * g_sms};

    for (int nb : rows_list) {
        printf("\nrows %d\n", nb);
        // Checks: DF11 == twin byte for byte at every policy; the twin against cuBLAS.
        for (auto& m : ms) {
            const size_t out = (size_t)nb * m.rows;
            cublas_product(h, m, x, y_ref, nb);
            std::vector<uint16_t> ref(out), da(out), tb(out);
            CK(cudaMemcpyAsync(ref.data(), y_ref, 2 * out, cudaMemcpyDeviceToHost, st));
            for (int s : grids) {
                CK(cudaMemsetAsync(y_a, 0xff, 2 * out, st));
                CK(cudaMemsetAsync(y_b, 0xff, 2 * out, st));
                launch_tall(m, false, x, y_a, partial, nb, s, st);
                launch_tall(m, true, x, y_b, partial, nb, s, st);
                CK(cudaGetLastError());
                CK(cudaMemcpyAsync(da.data(), y_a, 2 * out, cudaMemcpyDeviceToHost, st));
                CK(cudaMemcpyAsync(tb.data(), y_b, 2 * out, cudaMemcpyDeviceToHost, st));
                CK(cudaStreamSynchronize(st));
                size_t diff = 0;
                for (size_t i = 0; i < out; ++i) diff += da[i] != tb[i];
                double worst = 0, scale = 0;
                for (size_t i = 0; i < out; ++i) scale = std::max(scale, (double)fabsf(bf16_to_f(ref[i])));
                for (size_t i = 0; i < out; ++i)
                    worst = std::max(worst, (double)fabsf(bf16_to_f(tb[i]) - bf16_to_f(ref[i])));
                const bool ok = diff == 0 && worst <= 0.02 * scale;
                fails += !ok;
                printf("  check %-8s grid %3d: DF11 vs twin %zu of %zu differ; twin vs cuBLAS max |d| %.3g "
                       "(outputs up to %.3g) %s\n",
                       m.name, s, diff, out, worst, scale, ok ? "OK" : "FAIL");
            }
        }
        // Timing: the layer's four products as one graph.
        const float t_cublas = time_graph(st, iters, [&] {
            for (auto& m : ms) cublas_product(h, m, x, y_ref, nb);
        });
        printf("  layer cuBLAS %.1f us\n", t_cublas);
        for (int grid : grids) {
            float tt[2];
            for (int twin = 0; twin < 2; ++twin)
                tt[twin] = time_graph(st, iters, [&] {
                    for (auto& m : ms) launch_tall(m, twin, x, y_a, partial, nb, grid, st);
                });
            printf("  layer tall, grid %4d CTAs: DF11 %.1f us, twin %.1f us; DF11/twin %.3fx, DF11/cuBLAS %.3fx, "
                   "twin/cuBLAS %.3fx\n",
                   grid, tt[0], tt[1], tt[1] / tt[0], t_cublas / tt[0], t_cublas / tt[1]);
        }
        // Each product alone (weights partly in L2 for the small ones: indicative only).
        for (auto& m : ms) {
            const float c = time_graph(st, iters, [&] { cublas_product(h, m, x, y_ref, nb); });
            float best[2] = {1e30f, 1e30f};
            int bs[2] = {0, 0};
            for (int s : grids)
                for (int twin = 0; twin < 2; ++twin) {
                    const float v = time_graph(st, iters, [&] { launch_tall(m, twin, x, y_a, partial, nb, s, st); });
                    if (v < best[twin]) best[twin] = v, bs[twin] = s;
                }
            printf("  %-8s cuBLAS %.1f us, DF11 %.1f (grid %d), twin %.1f (grid %d)\n", m.name, c, best[0], bs[0],
                   best[1], bs[1]);
        }
    }
    printf("\n%s (%d failed checks)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
