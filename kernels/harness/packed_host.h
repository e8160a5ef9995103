// Host pieces of the product harnesses (tall_probe.cu, decode_probe.cu, ring_probe.cu, ss_probe.cu, ws_probe.cu):
// synthetic BF16 weights, the packed form built on the host in any storage order, the cuBLAS reference product and
// the check against it, CUDA graphs timed. Written for this project.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#define CK(x)                                                                                                   \
    do {                                                                                                        \
        cudaError_t e_ = (x);                                                                                   \
        if (e_ != cudaSuccess) {                                                                                \
            fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x);    \
            exit(2);                                                                                            \
        }                                                                                                       \
    } while (0)

#define CB(x)                                                                                                   \
    do {                                                                                                        \
        cublasStatus_t s_ = (x);                                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                      \
            fprintf(stderr, "cuBLAS error %d at %s:%d\n", (int)s_, __FILE__, __LINE__);                         \
            exit(2);                                                                                            \
        }                                                                                                       \
    } while (0)

// A command-line list of integers ("16 32 64" or "16,32,64").
static std::vector<int> parse_list(const char* s) {
    std::vector<int> v;
    for (const char* p = s; *p;) {
        v.push_back(atoi(p));
        while (*p && *p != ' ' && *p != ',') ++p;
        while (*p == ' ' || *p == ',') ++p;
    }
    return v;
}

// N(0, 0.02) BF16 values, a hash of the index and seed through Box-Muller.
__global__ void synth_bf16(uint16_t* w, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        const float u1 = ((uint32_t)z + 1.0f) * 2.3283064e-10f, u2 = (uint32_t)(z >> 32) * 2.3283064e-10f;
        const float v = 0.02f * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
        w[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    }
}

struct Member {
    const char* name;
    int rows, cols;
    std::vector<uint16_t> host;
    uint16_t* w = nullptr;   // device, row-major
    // packed, device
    uint32_t *codes = nullptr, *chunk_escapes = nullptr;
    uint8_t *lane_starts = nullptr, *escapes = nullptr, *sm = nullptr;
    uint32_t n_chunks = 0, n_escapes = 0, n_escaped = 0, t0 = 0, t1 = 0;   // n_escaped: the list's length
    size_t packed_bytes = 0;
};

// The packed form of m.host (df11_packed.cuh's form, what the library's packer builds,
// crates/df11-candle/src/cuda/forms/packed/pack.rs) over positions in the order `source` gives: position r of chunk q
// holds row-major element source(q, r).
template <class Source>
static void pack_member(Member& m, Source&& source) {
    const size_t n = (size_t)m.rows * m.cols;
    m.n_chunks = (uint32_t)(n / 2048);
    uint64_t hist[256] = {};
    for (size_t j = 0; j < n; ++j) ++hist[(m.host[j] >> 7) & 0xff];
    int order[256];
    for (int i = 0; i < 256; ++i) order[i] = i;
    std::stable_sort(order, order + 256, [&](int x, int y) { return hist[x] > hist[y]; });
    uint8_t code_of[256];
    memset(code_of, 7, sizeof code_of);
    uint8_t table[8] = {0};
    for (int k = 0; k < 7; ++k) {
        table[k] = (uint8_t)order[k];
        if (hist[order[k]]) code_of[order[k]] = (uint8_t)k;
    }
    m.t0 = table[0] | table[1] << 8 | table[2] << 16 | (uint32_t)table[3] << 24;
    m.t1 = table[4] | table[5] << 8 | table[6] << 16;
    std::vector<uint32_t> codes((3 * n + 31) / 32 + 8, 0u);
    std::vector<uint8_t> sm(n), lane_starts(32 * (size_t)m.n_chunks), escapes;
    std::vector<uint32_t> chunk_escapes(m.n_chunks + 1);
    std::vector<uint8_t> lane_esc[32];
    for (uint32_t q = 0; q < m.n_chunks; ++q) {
        for (auto& v : lane_esc) v.clear();
        for (int r = 0; r < 2048; ++r) {
            const int L = (r >> 3) & 31;
            const uint16_t v = m.host[source(q, r)];
            const uint8_t ex = (v >> 7) & 0xff;
            const size_t p = (size_t)q * 2048 + r;
            sm[p] = (uint8_t)(((v >> 8) & 0x80) | (v & 0x7f));
            const uint32_t code = code_of[ex];
            const size_t bit = 3 * p;
            codes[bit >> 5] |= code << (bit & 31);
            if ((bit & 31) > 29) codes[(bit >> 5) + 1] |= code >> (32 - (bit & 31));
            if (code == 7) lane_esc[L].push_back(ex);
        }
        chunk_escapes[q] = (uint32_t)escapes.size();
        uint32_t at = 0;
        for (int L = 0; L < 32; ++L) {
            if (at > 255) {
                fprintf(stderr, "%s: chunk %u has more than 255 escapes before lane %d\n", m.name, q, L);
                exit(2);
            }
            lane_starts[32 * (size_t)q + L] = (uint8_t)at;
            escapes.insert(escapes.end(), lane_esc[L].begin(), lane_esc[L].end());
            at += (uint32_t)lane_esc[L].size();
        }
    }
    chunk_escapes[m.n_chunks] = (uint32_t)escapes.size();
    m.n_escaped = (uint32_t)escapes.size();
    // The kernels take n_escapes as the padded buffer's length (as the library passes it): their clamped reads of
    // three words stay inside the buffer and never move a lane's window.
    escapes.resize(((escapes.size() + 3) & ~(size_t)3) + 16, 0);
    m.n_escapes = (uint32_t)escapes.size();
    CK(cudaMalloc(&m.codes, codes.size() * 4));
    CK(cudaMemcpy(m.codes, codes.data(), codes.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&m.chunk_escapes, chunk_escapes.size() * 4));
    CK(cudaMemcpy(m.chunk_escapes, chunk_escapes.data(), chunk_escapes.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&m.lane_starts, lane_starts.size()));
    CK(cudaMemcpy(m.lane_starts, lane_starts.data(), lane_starts.size(), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&m.escapes, escapes.size()));
    CK(cudaMemcpy(m.escapes, escapes.data(), escapes.size(), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&m.sm, sm.size()));
    CK(cudaMemcpy(m.sm, sm.data(), sm.size(), cudaMemcpyHostToDevice));
    m.packed_bytes = codes.size() * 4 + chunk_escapes.size() * 4 + lane_starts.size() + escapes.size() + sm.size();
}

static float bf16_to_f(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// y [nb, m.rows] = x [nb, m.cols] m.w^T by cuBLAS (BF16 in and out, fp32 sums, the default algorithm): the
// harnesses' reference product.
static void cublas_product(cublasHandle_t h, const Member& m, const void* x, void* y, int nb) {
    const float one = 1.0f, zero = 0.0f;
    CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m.rows, nb, m.cols, &one, m.w, CUDA_R_16BF, m.cols, x, CUDA_R_16BF,
                    m.cols, &zero, y, CUDA_R_16BF, m.rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// A cuBLAS handle on stream st with a 32 MiB workspace.
static cublasHandle_t cublas_on(cudaStream_t st) {
    cublasHandle_t h;
    CB(cublasCreate(&h));
    CB(cublasSetStream(h, st));
    void* ws;
    CK(cudaMalloc(&ws, 32 << 20));
    CB(cublasSetWorkspace(h, ws, 32 << 20));
    return h;
}

// Whether the n BF16 values y are each within a few BF16 ulps (of ref's largest value) of ref's (a NaN never is);
// worst and scale: the largest difference and ref's largest value.
static bool close_to(const uint16_t* y, const uint16_t* ref, size_t n, double& worst, double& scale) {
    worst = 0;
    scale = 0;
    for (size_t i = 0; i < n; ++i) {
        const double d = fabsf(bf16_to_f(y[i]) - bf16_to_f(ref[i]));
        worst = std::isnan(d) ? INFINITY : std::max(worst, d);
        scale = std::max(scale, (double)fabsf(bf16_to_f(ref[i])));
    }
    return worst <= 1.6e-2 * scale;
}

template <class F>
static float time_graph(cudaStream_t st, int iters, F&& body) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    body();
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 10; ++i) CK(cudaGraphLaunch(exec, st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, st));
    for (int i = 0; i < iters; ++i) CK(cudaGraphLaunch(exec, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return 1000.0f * ms / iters;   // us
}

// tile_original (df11_packed.cuh) on the host: the row-major index of tile-order position p of a member of `cols`.
static uint32_t tile_original_host(uint32_t p, uint32_t cols) {
    const uint32_t group = p / (8u * cols), r0 = p - group * 8u * cols;
    const uint32_t k = r0 >> 14, r1 = r0 & 16383u;
    const uint32_t width = std::min(2048u, cols - 2048u * k);
    const uint32_t m = width == 2048u ? r1 >> 11 : r1 / width, r = width == 2048u ? r1 & 2047u : r1 - m * width;
    const uint32_t i = r >> 8, g = (r >> 5) & 7u, t = (r >> 3) & 3u, e = r & 7u;
    return (8u * group + g) * cols + 2048u * k + 8u * (4u * m + t) + 256u * i + e;
}

// A Qwen3-8B layer's four products as the decode step launches them (q/k/v stacked, o, gate/up stacked, down), N(0,
// 0.02) BF16 made on the device from `seed` and copied to the host.
static std::vector<Member> qwen3_layer(uint64_t seed) {
    std::vector<Member> ms(4);
    ms[0].name = "qkv"; ms[0].rows = 6144; ms[0].cols = 4096;
    ms[1].name = "o"; ms[1].rows = 4096; ms[1].cols = 4096;
    ms[2].name = "gate_up"; ms[2].rows = 24576; ms[2].cols = 4096;
    ms[3].name = "down"; ms[3].rows = 4096; ms[3].cols = 12288;
    for (size_t k = 0; k < ms.size(); ++k) {
        Member& m = ms[k];
        const size_t n = (size_t)m.rows * m.cols;
        CK(cudaMalloc(&m.w, 2 * n));
        synth_bf16<<<1024, 256>>>(m.w, n, seed * (k + 1));
        CK(cudaGetLastError());
        m.host.resize(n);
        CK(cudaMemcpy(m.host.data(), m.w, 2 * n, cudaMemcpyDeviceToHost));
    }
    return ms;
}

// pack_member for every member side by side (a thread each); source(m, q, r) as pack_member's for member m.
template <class Source>
static void pack_members(std::vector<Member>& ms, Source&& source) {
    std::vector<std::thread> th;
    for (auto& m : ms)
        th.emplace_back([&m, &source] { pack_member(m, [&](uint32_t q, int r) { return source(m, q, r); }); });
    for (auto& t : th) t.join();
}
