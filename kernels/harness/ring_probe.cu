// DECODE THROUGH L2, a measurement harness: decode + cuBLAS for 16 rows and more without the BF16 weights ever
// reaching HBM. Each product's weight is decoded a slice of rows at a time (df11_decode_packed_pieces over a row
// range) into a ring of two slots small enough to stay in L2, and cuBLAS multiplies each slice into its columns of y
// from there. On a Qwen3-8B layer's four products (q/k/v stacked 6144x4096, o 4096x4096, gate/up stacked
// 24576x4096, down 4096x12288; N(0, 0.02) weights, the packed form in the tile order):
//
//   bash kernels/harness/ring_probe.sh            (builds .gpu/ring/ring_probe and .gpu/ring/run.sh)
//   bash .gpu/ring/run.sh [--iters N] [--persist] [--rows "16 32 64 512"] [--slice-mb "4 8 16 32"]
//
// Per rows, the layer (four products, each pass one CUDA graph) in us:
//   cublas        cuBLAS on the BF16 weights, one call a product (our BF16 path today)
//   dec+cublas    the whole product decoded into a buffer, then cuBLAS (our DF11 path today)
// and per slice size:
//   bf16 sliced   cuBLAS on the BF16 weights one slice at a time (what a BF16 twin of the ring would cost)
//   decode ring   the decodes alone, into the ring
//   gemm ring     the slice products alone, from the ring
//   serial        decode, product, decode, ... on one stream
//   overlap       decodes on a second stream, a slice ahead of the products
// Checks: every first slice decoded into the ring == the weights; y by the ring (overlap) == y by cuBLAS on the
// BF16 slices, byte for byte; and whether the sliced y equals the unsliced one (cuBLAS may pick another kernel).
// --persist marks the ring as persisting in L2 (an access policy window on both streams).

#include <string>

#include "../df11_packed.cu"
#include "packed_host.h"

struct Prod {
    Member* m;
    uint32_t* tables;
    long long* ends;
    int* cols;
    uint16_t* y;   // [rows, m->rows]
};

int main(int argc, char** argv) {
    int iters = 50;
    bool persist = false;
    std::vector<int> rows_list = {16, 32, 64, 512}, slice_mb = {4, 8, 16, 32};
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--persist")) persist = true;
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows_list = parse_list(argv[++i]);
        else if (!strcmp(argv[i], "--slice-mb") && i + 1 < argc) slice_mb = parse_list(argv[++i]);
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    printf("device %s, %d SMs, L2 %.1f MB, persisting L2 max %.1f MB\n", prop.name, sms, prop.l2CacheSize / 1e6,
           prop.persistingL2CacheMaxSize / 1e6);
    std::vector<Member> ms = qwen3_layer(0x7654321ull);
    pack_members(ms, [](const Member& m, uint32_t q, int r) {
        return (size_t)tile_original_host(q * 2048u + (uint32_t)r, (uint32_t)m.cols);
    });
    const int max_rows = *std::max_element(rows_list.begin(), rows_list.end());
    const int max_mb = *std::max_element(slice_mb.begin(), slice_mb.end());
    size_t max_w = 0;
    int max_k = 0;
    std::vector<Prod> ps(ms.size());
    for (size_t k = 0; k < ms.size(); ++k) {
        Member& m = ms[k];
        const uint32_t tabs[2] = {m.t0, m.t1};
        const long long ends[1] = {(long long)m.rows * m.cols};
        const int cols[1] = {m.cols};
        ps[k].m = &m;
        CK(cudaMalloc(&ps[k].tables, 8));
        CK(cudaMemcpy(ps[k].tables, tabs, 8, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&ps[k].ends, 8));
        CK(cudaMemcpy(ps[k].ends, ends, 8, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&ps[k].cols, 4));
        CK(cudaMemcpy(ps[k].cols, cols, 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&ps[k].y, 2 * (size_t)max_rows * m.rows));
        max_w = std::max(max_w, (size_t)m.rows * m.cols);
        max_k = std::max(max_k, m.cols);
    }
    uint16_t *full, *ring, *x, *y_check;
    CK(cudaMalloc(&full, 2 * max_w));
    const size_t slot_bytes = (size_t)max_mb << 20;
    CK(cudaMalloc(&ring, 2 * slot_bytes));
    CK(cudaMalloc(&x, 2 * (size_t)max_rows * max_k));
    synth_bf16<<<256, 256>>>(x, (size_t)max_rows * max_k, 0x1234ull);
    CK(cudaGetLastError());
    size_t max_y = 0;
    for (auto& p : ps) max_y = std::max(max_y, (size_t)max_rows * p.m->rows);
    CK(cudaMalloc(&y_check, 2 * max_y));

    cudaStream_t sa, sb;
    CK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
    if (persist) {
        CK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize,
                              std::min<size_t>(2 * slot_bytes, (size_t)prop.persistingL2CacheMaxSize)));
        cudaStreamAttrValue a = {};
        a.accessPolicyWindow.base_ptr = ring;
        a.accessPolicyWindow.num_bytes = std::min<size_t>(2 * slot_bytes, (size_t)prop.accessPolicyMaxWindowSize);
        a.accessPolicyWindow.hitRatio = 1.0f;
        a.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
        a.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
        CK(cudaStreamSetAttribute(sa, cudaStreamAttributeAccessPolicyWindow, &a));
        CK(cudaStreamSetAttribute(sb, cudaStreamAttributeAccessPolicyWindow, &a));
        printf("ring persisting in L2 (%.1f MB window)\n", a.accessPolicyWindow.num_bytes / 1e6);
    }
    cublasHandle_t h;
    CB(cublasCreate(&h));
    void* ws;
    CK(cudaMalloc(&ws, 32 << 20));
    CB(cublasSetWorkspace(h, ws, 32 << 20));
    std::vector<cudaEvent_t> evs(4096);
    for (auto& e : evs) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

    auto decode = [&](const Prod& p, long long r0, long long r1, uint16_t* out, cudaStream_t s) {
        const Member& m = *p.m;
        const long long begin = r0 * m.cols, end = r1 * m.cols;
        const int grid = (int)std::min<long long>((end - begin) >> 14, (long long)DP_PIECES_CTAS * sms);
        df11_decode_packed_pieces<<<grid, DP_THREADS, 0, s>>>(m.codes, m.chunk_escapes, m.lane_starts, m.n_chunks,
                                                             m.escapes, m.n_escapes, p.tables, p.ends, p.cols, 1,
                                                             m.sm, out, begin, end);
    };
    int fails = 0;
    for (const int M : rows_list) {
        // y[:, r0 .. r0 + n] = x w^T, w [n, k] row-major (cuBLAS column-major: y^T = w x^T).
        auto gemm = [&](const uint16_t* w, int n, int k, uint16_t* y, int ldy, cudaStream_t s) {
            const float one = 1.0f, zero = 0.0f;
            CB(cublasSetStream(h, s));
            CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, M, k, &one, w, CUDA_R_16BF, k, x, CUDA_R_16BF, k, &zero, y,
                            CUDA_R_16BF, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        };
        printf("\n== %d rows\n", M);
        const float t_cublas = time_graph(sa, iters, [&] {
            for (auto& p : ps) gemm(p.m->w, p.m->rows, p.m->cols, p.y, p.m->rows, sa);
        });
        const float t_dec_full = time_graph(sa, iters, [&] {
            for (auto& p : ps) {
                decode(p, 0, p.m->rows, full, sa);
                gemm(full, p.m->rows, p.m->cols, p.y, p.m->rows, sa);
            }
        });
        printf("  cublas %.1f us, dec+cublas %.1f us (%.3fx)\n", t_cublas, t_dec_full, t_cublas / t_dec_full);
        // The unsliced y of every product, for the comparison below.
        std::vector<std::vector<uint16_t>> y_full(ps.size());
        for (size_t k = 0; k < ps.size(); ++k) {
            const Prod& p = ps[k];
            gemm(p.m->w, p.m->rows, p.m->cols, p.y, p.m->rows, sa);
            y_full[k].resize((size_t)M * p.m->rows);
            CK(cudaMemcpyAsync(y_full[k].data(), p.y, 2 * y_full[k].size(), cudaMemcpyDeviceToHost, sa));
        }
        CK(cudaStreamSynchronize(sa));
        printf("  %5s %9s %9s %9s %9s %9s %9s  %s\n", "MB", "bf16 sl", "dec ring", "gemm ring", "serial", "overlap",
               "vs cublas", "checks");
        for (const int mb : slice_mb) {
            // Slices of whole 128-row blocks, about `mb` MB of BF16 each.
            auto slice_rows = [&](const Prod& p) {
                long long r = ((long long)mb << 20) / (2LL * p.m->cols) / 128 * 128;
                return std::max(128LL, r);
            };
            auto for_slices = [&](auto&& f) {
                int i = 0;
                for (auto& p : ps) {
                    const long long R = slice_rows(p);
                    for (long long r0 = 0; r0 < p.m->rows; r0 += R, ++i) f(p, r0, std::min<long long>(r0 + R, p.m->rows), i);
                }
            };
            auto slot = [&](int i) { return ring + (size_t)(i & 1) * (slot_bytes / 2); };
            auto ring_gemm = [&](const Prod& p, long long r0, long long r1, int i, cudaStream_t s) {
                gemm(slot(i), (int)(r1 - r0), p.m->cols, p.y + r0, p.m->rows, s);
            };
            const float t_bf16 = time_graph(sa, iters, [&] {
                for_slices([&](const Prod& p, long long r0, long long r1, int) {
                    gemm(p.m->w + r0 * p.m->cols, (int)(r1 - r0), p.m->cols, p.y + r0, p.m->rows, sa);
                });
            });
            const float t_dec = time_graph(sa, iters, [&] {
                for_slices([&](const Prod& p, long long r0, long long r1, int i) { decode(p, r0, r1, slot(i), sa); });
            });
            const float t_gemm = time_graph(sa, iters, [&] {
                for_slices([&](const Prod& p, long long r0, long long r1, int i) { ring_gemm(p, r0, r1, i, sa); });
            });
            const float t_serial = time_graph(sa, iters, [&] {
                for_slices([&](const Prod& p, long long r0, long long r1, int i) {
                    decode(p, r0, r1, slot(i), sa);
                    ring_gemm(p, r0, r1, i, sa);
                });
            });
            auto overlap = [&] {
                CK(cudaEventRecord(evs[0], sa));
                CK(cudaStreamWaitEvent(sb, evs[0], 0));
                int n = 0;
                for_slices([&](const Prod& p, long long r0, long long r1, int i) {
                    cudaEvent_t dec = evs[1 + 2 * i], done = evs[2 + 2 * i];
                    if (i >= 2) CK(cudaStreamWaitEvent(sb, evs[2 + 2 * (i - 2)], 0));   // the slot's last product
                    decode(p, r0, r1, slot(i), sb);
                    CK(cudaEventRecord(dec, sb));
                    CK(cudaStreamWaitEvent(sa, dec, 0));
                    ring_gemm(p, r0, r1, i, sa);
                    CK(cudaEventRecord(done, sa));
                    n = i + 1;
                });
                CK(cudaEventRecord(evs[2 * n + 1], sb));
                CK(cudaStreamWaitEvent(sa, evs[2 * n + 1], 0));
            };
            const float t_over = time_graph(sa, iters, overlap);
            // Checks: the first slice of each product decoded == the weights; y by the ring == y by BF16 slices.
            std::string checks;
            int bad_dec = 0;
            for (auto& p : ps) {
                const long long R = std::min<long long>(slice_rows(p), p.m->rows);
                const size_t n = (size_t)R * p.m->cols;
                CK(cudaMemsetAsync(ring, 0xff, 2 * n, sa));
                decode(p, 0, R, ring, sa);
                CK(cudaGetLastError());
                std::vector<uint16_t> got(n);
                CK(cudaMemcpyAsync(got.data(), ring, 2 * n, cudaMemcpyDeviceToHost, sa));
                CK(cudaStreamSynchronize(sa));
                bad_dec += memcmp(got.data(), p.m->host.data(), 2 * n) != 0;
            }
            overlap();
            CK(cudaStreamSynchronize(sa));
            std::vector<std::vector<uint16_t>> y_ring(ps.size());
            for (size_t k = 0; k < ps.size(); ++k) {
                y_ring[k].resize((size_t)M * ps[k].m->rows);
                CK(cudaMemcpy(y_ring[k].data(), ps[k].y, 2 * y_ring[k].size(), cudaMemcpyDeviceToHost));
            }
            for_slices([&](const Prod& p, long long r0, long long r1, int) {
                gemm(p.m->w + r0 * p.m->cols, (int)(r1 - r0), p.m->cols, p.y + r0, p.m->rows, sa);
            });
            CK(cudaStreamSynchronize(sa));
            int bad_twin = 0, differ_full = 0;
            for (size_t k = 0; k < ps.size(); ++k) {
                std::vector<uint16_t> y(y_ring[k].size());
                CK(cudaMemcpy(y.data(), ps[k].y, 2 * y.size(), cudaMemcpyDeviceToHost));
                bad_twin += memcmp(y.data(), y_ring[k].data(), 2 * y.size()) != 0;
                differ_full += memcmp(y.data(), y_full[k].data(), 2 * y.size()) != 0;
            }
            fails += bad_dec + bad_twin;
            checks = std::string(bad_dec ? "DECODE FAIL" : "decode ok") + (bad_twin ? ", RING != SLICES" : ", ring == slices") +
                     ", sliced " + (differ_full ? std::to_string(differ_full) + "/4 products != unsliced" : "== unsliced");
            printf("  %5d %9.1f %9.1f %9.1f %9.1f %9.1f %9.3f  %s\n", mb, t_bf16, t_dec, t_gemm, t_serial, t_over,
                   t_cublas / t_over, checks.c_str());
        }
    }
    printf("\n%s (%d failed checks)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
