// THE DECODE INTO A BF16 BUFFER (decode + cuBLAS: prompts and batches above 16 rows), a measurement harness:
// kernels/df11_packed.cu's df11_decode_packed_tiled (any range) and df11_decode_packed_pieces (whole pieces), on a Qwen3-8B layer's four products (q/k/v
// stacked 6144x4096, o 4096x4096, gate/up stacked 24576x4096, down 4096x12288; N(0, 0.02) weights, the packed form in
// the tile order built on the host), each output checked byte for byte against the weights, then the layer (four
// launches as one CUDA graph) timed next to a device copy of the same BF16 bytes.
//
//   bash kernels/harness/decode_probe.sh          (builds .gpu/decode/decode_probe)
//   decode_probe [--iters N]
//

#include "../df11_packed.cu"
#include "packed_host.h"


// ---------------------------------------------------------------------------------------------------------------

struct DevMember {
    Member* m;
    uint32_t* tables;
    long long* ends;
    int* member_cols;
    uint16_t* out;
};

int main(int argc, char** argv) {
    int iters = 100;
    for (int i = 1; i < argc; ++i)
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    printf("device %s, %d SMs\n", prop.name, sms);
    {
        cudaFuncAttributes fa;
        CK(cudaFuncGetAttributes(&fa, df11_decode_packed_tiled));
        int per_sm = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, df11_decode_packed_tiled, DP_THREADS, 0));
        printf("kernel tiled: %d registers, %zu B local, %d CTAs an SM\n", fa.numRegs, (size_t)fa.localSizeBytes,
               per_sm);
    }
    std::vector<Member> ms = qwen3_layer(0x7654321ull);
    pack_members(ms, [](const Member& m, uint32_t q, int r) {
        return (size_t)tile_original_host(q * 2048u + (uint32_t)r, (uint32_t)m.cols);
    });
    size_t bf16_bytes = 0, df11_bytes = 0;
    std::vector<DevMember> dm(ms.size());
    for (size_t k = 0; k < ms.size(); ++k) {
        Member& m = ms[k];
        bf16_bytes += 2 * (size_t)m.rows * m.cols;
        df11_bytes += m.packed_bytes;
        const uint32_t tabs[2] = {m.t0, m.t1};
        const long long ends[1] = {(long long)m.rows * m.cols};
        const int cols[1] = {m.cols};
        dm[k].m = &m;
        CK(cudaMalloc(&dm[k].tables, 8));
        CK(cudaMemcpy(dm[k].tables, tabs, 8, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&dm[k].ends, 8));
        CK(cudaMemcpy(dm[k].ends, ends, 8, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&dm[k].member_cols, 4));
        CK(cudaMemcpy(dm[k].member_cols, cols, 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&dm[k].out, 2 * (size_t)m.rows * m.cols));
    }
    printf("layer: BF16 %.1f MB, packed DF11 %.1f MB (%.3f)\n", bf16_bytes / 1e6, df11_bytes / 1e6,
           (double)df11_bytes / bf16_bytes);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    auto tiled = [&](DevMember& d) {
        Member& m = *d.m;
        const long long n = (long long)m.rows * m.cols, chunks = (long long)m.n_chunks;
        const int grid = (int)std::min<long long>((chunks + 7) / 8, 4LL * sms);
        df11_decode_packed_tiled<<<grid, DP_THREADS, 0, st>>>(m.codes, m.chunk_escapes, m.lane_starts, m.n_chunks,
                                                              m.escapes, m.n_escapes, d.tables, d.ends, d.member_cols,
                                                              1, m.sm, n, d.out, 0, n, 0, n);
    };
    auto pieces = [&](DevMember& d) {
        Member& m = *d.m;
        const long long n = (long long)m.rows * m.cols;
        const int grid = (int)std::min<long long>(n >> 14, (long long)DP_PIECES_CTAS * sms);
        df11_decode_packed_pieces<<<grid, DP_THREADS, 0, st>>>(m.codes, m.chunk_escapes, m.lane_starts, m.n_chunks,
                                                               m.escapes, m.n_escapes, d.tables, d.ends,
                                                               d.member_cols, 1, m.sm, d.out, 0, n);
    };
    int fails = 0;
    auto check = [&](const char* what, auto&& launch) {
        for (auto& d : dm) {
            const size_t n = (size_t)d.m->rows * d.m->cols;
            CK(cudaMemsetAsync(d.out, 0xff, 2 * n, st));
            launch(d);
            CK(cudaGetLastError());
            std::vector<uint16_t> got(n);
            CK(cudaMemcpyAsync(got.data(), d.out, 2 * n, cudaMemcpyDeviceToHost, st));
            CK(cudaStreamSynchronize(st));
            size_t bad = 0, first = n;
            for (size_t i = 0; i < n; ++i)
                if (got[i] != d.m->host[i]) {
                    if (!bad) first = i;
                    ++bad;
                }
            fails += bad != 0;
            if (bad)
                printf("  check %-6s %-8s: FAIL, %zu of %zu differ, first at %zu: %04x for %04x\n", what, d.m->name,
                       bad, n, first, got[first], d.m->host[first]);
            else
                printf("  check %-6s %-8s: OK (== the weights)\n", what, d.m->name);
        }
    };
    check("tiled", tiled);
    check("pieces", pieces);
    const float t_copy = time_graph(st, iters, [&] {
        for (auto& d : dm)
            CK(cudaMemcpyAsync(d.out, d.m->w, 2 * (size_t)d.m->rows * d.m->cols, cudaMemcpyDeviceToDevice, st));
    });
    const float t_tiled = time_graph(st, iters, [&] { for (auto& d : dm) tiled(d); });
    const float t_pieces = time_graph(st, iters, [&] { for (auto& d : dm) pieces(d); });
    const double traffic = (double)bf16_bytes + df11_bytes;
    printf("layer, us (traffic read + written):\n");
    printf("  device copy of the BF16 bytes %.1f (%.2f TB/s of traffic)\n", t_copy, 2.0 * bf16_bytes / t_copy / 1e6);
    printf("  df11_decode_packed_tiled      %.1f (%.2f TB/s), %.3fx the copy's time\n", t_tiled, traffic / t_tiled / 1e6,
           t_tiled / t_copy);
    printf("  df11_decode_packed_pieces     %.1f (%.2f TB/s), %.3fx the copy's time, %.3fx the general kernel's\n",
           t_pieces, traffic / t_pieces / 1e6, t_pieces / t_copy, t_pieces / t_tiled);
    printf("\n%s (%d failed checks)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
