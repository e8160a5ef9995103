// Causal attention of a prompt over the KV cache in place, flash-attention style (tensor cores, online
// softmax): the eager pass's attention on CUDA in BF16. Written for this project.
//
// WHAT. Rows r = 0 .. R-1 of a prompt batch, each `seq` tokens at positions start .. start + seq - 1, row r in
// cache slot first_slot + r. Token i of row r is q[(r * seq + i), h, :] ([R * seq, H, D] BF16, contiguous, its
// keys and values already in the cache: qk_norm_rope_kv). Query at position p attends to the keys at positions
// [lo, p] of its slot, lo = max(0, p + 1 - window) with a sliding window, else 0. Output out[(r * seq + i),
// h * D + c] ([R * seq, H * D], heads merged).
//
// ARITHMETIC, as transformers' eager attention where it rounds: s = bf16(bf16(q.k) * scale) (q.k summed in f32
// by the tensor cores), optionally s = cap * tanh(s / cap) in f32; then softmax in f32, online over key tiles
// (running max and sum, rescaled), the probabilities rounded to BF16 for the weighted sum of values (f32
// accumulation), divided by the f32 row sum at the end and rounded once to BF16. A DF11 model and its BF16
// original run the same kernel, so they stay bit-identical; against the eager matmul path the results agree
// to BF16 rounding (tests: step_kernels' prefill test against an f32 formula).
//
// WORK. CTA (M block, kv head, row): M rows m = token * G + j (j < G = H / KV, the query heads of the kv head),
// PA_BM = 64 per CTA, 16 per warp: the query heads of one kv head share every key and value tile they load
// (GQA). Key tiles of BN positions from the CTA's lowest visible key to its last query's position: K and V
// tiles to shared memory (16-byte rows swizzled by row & 7, so ldmatrix is conflict-free), S = Q K^T with
// mma.sync.m16n8k16 (Q and K fragments by ldmatrix), the mask and online softmax in registers, O += P V
// (P from the S accumulators as A fragments, V by ldmatrix.trans). Head dims are zero-padded to DP (64, 128
// or 256); key positions outside [lowest visible, last query] are zero-filled in shared memory, so cache
// memory that no visible position covers is never read.
//
// HOST GUARANTEES: sm_80 or newer; D % 8 == 0, 8 <= D <= DP; H % KV == 0; first_slot + R <= slots_n;
// start + seq <= cap; q, kv, out 16-byte aligned; dynamic shared memory (PA_BM + 2 * BN) * DP * 2 bytes.

#include <stdint.h>
#include <cuda_bf16.h>

#define PA_WARPS 4
#define PA_THREADS (32 * PA_WARPS)
#define PA_BM (16 * PA_WARPS)

__device__ __forceinline__ float pa_bf16r(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Two floats as a BF16 pair, `lo` in the low half (the element with the lower index).
__device__ __forceinline__ uint32_t pa_pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// Element offset of 16-byte chunk `chunk` of row `row` in a [rows][DP] BF16 tile, chunks swizzled by row & 7.
template <int DP>
__device__ __forceinline__ int pa_at(int row, int chunk) {
    return row * DP + ((chunk ^ (row & 7)) << 3);
}

__device__ __forceinline__ void pa_ldsm4(uint32_t (&r)[4], const __nv_bfloat16* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
    __trap();
#endif
}

__device__ __forceinline__ void pa_ldsm4_t(uint32_t (&r)[4], const __nv_bfloat16* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
    __trap();
#endif
}

// d += a * b, one m16n8k16 tile (BF16 in, f32 accumulate).
__device__ __forceinline__ void pa_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();
#endif
}

// One score of the lane: scaled, capped, masked (key position kp against the row's query position qp and
// lowest visible key lo).
__device__ __forceinline__ float pa_score(float dot, float scale, float softcap, int kp, int qp, int lo) {
    float s = pa_bf16r(pa_bf16r(dot) * scale);
    if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
    return kp > qp || kp < lo ? -INFINITY : s;
}

template <int DP, int BN>
__device__ __forceinline__ void prefill_attention(const __nv_bfloat16* __restrict__ q,
                                                  const __nv_bfloat16* __restrict__ kv,
                                                  __nv_bfloat16* __restrict__ out, int seq, int H, int KV, int D,
                                                  int slots_n, int cap, int first_slot, int start, float scale,
                                                  float softcap, int window) {
    extern __shared__ __align__(16) uint8_t pa_smem[];
    __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(pa_smem);   // [PA_BM][DP]
    __nv_bfloat16* ks = qs + PA_BM * DP;                               // [BN][DP]
    __nv_bfloat16* vs = ks + BN * DP;                                  // [BN][DP]
    constexpr int CH = DP / 8;                                         // 16-byte chunks per tile row
    const int G = H / KV, kvh = blockIdx.y, r = blockIdx.z;
    const int mrows = seq * G, m0 = blockIdx.x * PA_BM;
    const int slot = min(first_slot + r, slots_n - 1);                 // the host checks; clamped anyway
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int dch = D >> 3;

    // The CTA's queries (zeros past the prompt and past D).
    for (int i = tid; i < PA_BM * CH; i += PA_THREADS) {
        const int row = i / CH, c = i % CH, m = m0 + row;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (m < mrows && c < dch) {
            const int tok = m / G, hq = kvh * G + m % G;
            v = __ldg(reinterpret_cast<const uint4*>(q + ((long long)(r * seq + tok) * H + hq) * D) + c);
        }
        *reinterpret_cast<uint4*>(qs + pa_at<DP>(row, c)) = v;
    }

    // The lane's two M rows (g and g + 8 of the warp's 16) and their query positions.
    const int mr0 = m0 + warp * 16 + g, mr1 = mr0 + 8;
    const int qp0 = start + min(mr0, mrows - 1) / G, qp1 = start + min(mr1, mrows - 1) / G;
    const int lo0 = window > 0 ? max(0, qp0 + 1 - window) : 0;
    const int lo1 = window > 0 ? max(0, qp1 + 1 - window) : 0;
    // The CTA's keys: from the first query's lowest visible key to the last query's position.
    const int qmin = start + m0 / G, qmax = start + (min(m0 + PA_BM, mrows) - 1) / G;
    const int kmin = window > 0 ? max(0, qmin + 1 - window) : 0;
    const int kend = min(qmax + 1, cap);
    const __nv_bfloat16* kbase = kv + ((long long)slot * KV + kvh) * cap * D;
    const __nv_bfloat16* vbase = kv + ((long long)(slots_n + slot) * KV + kvh) * cap * D;

    float o[DP / 8][4];
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float mx0 = -INFINITY, mx1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

    for (int k0 = (kmin / BN) * BN; k0 < kend; k0 += BN) {
        __syncthreads();                                   // the last tile is consumed (and the queries stored)
        for (int i = tid; i < BN * CH; i += PA_THREADS) {
            const int row = i / CH, c = i % CH, p = k0 + row;
            uint4 kx = make_uint4(0u, 0u, 0u, 0u), vx = kx;
            if (p >= kmin && p < kend && c < dch) {
                kx = __ldg(reinterpret_cast<const uint4*>(kbase + (long long)p * D) + c);
                vx = __ldg(reinterpret_cast<const uint4*>(vbase + (long long)p * D) + c);
            }
            *reinterpret_cast<uint4*>(ks + pa_at<DP>(row, c)) = kx;
            *reinterpret_cast<uint4*>(vs + pa_at<DP>(row, c)) = vx;
        }
        __syncthreads();

        // S = Q K^T over the warp's 16 rows and the tile's BN keys.
        float s[BN / 8][4];
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
            if (16 * kk < D) {                             // block-uniform: the padding is zeros
                uint32_t a[4];
                pa_ldsm4(a, qs + pa_at<DP>(warp * 16 + (lane & 15), 2 * kk + (lane >> 4)));
                const int mi = lane >> 3;
#pragma unroll
                for (int n = 0; n < BN / 8; n += 2) {
                    uint32_t b[4];
                    pa_ldsm4(b, ks + pa_at<DP>(8 * n + 8 * (mi >> 1) + (lane & 7), 2 * kk + (mi & 1)));
                    pa_mma(s[n], a, b[0], b[1]);
                    pa_mma(s[n + 1], a, b[2], b[3]);
                }
            }
        }

        // Scale, cap and mask; the running max of each row (the 4 lanes of a row hold its keys).
        float n0 = mx0, n1 = mx1;
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int kp = k0 + 8 * n + 2 * t + e;
                s[n][e] = pa_score(s[n][e], scale, softcap, kp, qp0, lo0);
                s[n][2 + e] = pa_score(s[n][2 + e], scale, softcap, kp, qp1, lo1);
                n0 = fmaxf(n0, s[n][e]);
                n1 = fmaxf(n1, s[n][2 + e]);
            }
        }
        n0 = fmaxf(n0, __shfl_xor_sync(0xffffffffu, n0, 1));
        n0 = fmaxf(n0, __shfl_xor_sync(0xffffffffu, n0, 2));
        n1 = fmaxf(n1, __shfl_xor_sync(0xffffffffu, n1, 1));
        n1 = fmaxf(n1, __shfl_xor_sync(0xffffffffu, n1, 2));
        // A row with no visible key yet keeps max -inf: its probabilities are 0 (exp(-inf - 0)).
        const float b0 = n0 == -INFINITY ? 0.0f : n0, b1 = n1 == -INFINITY ? 0.0f : n1;
        const float c0 = expf(mx0 - b0), c1 = expf(mx1 - b1);
        mx0 = n0;
        mx1 = n1;
        l0 *= c0;
        l1 *= c1;
#pragma unroll
        for (int n = 0; n < DP / 8; ++n) {
            o[n][0] *= c0;
            o[n][1] *= c0;
            o[n][2] *= c1;
            o[n][3] *= c1;
        }
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
            s[n][0] = expf(s[n][0] - b0);
            s[n][1] = expf(s[n][1] - b0);
            s[n][2] = expf(s[n][2] - b1);
            s[n][3] = expf(s[n][3] - b1);
            l0 += s[n][0] + s[n][1];
            l1 += s[n][2] + s[n][3];
        }

        // O += P V: P's 16 keys j as an A fragment (the S accumulators of key tiles 2j, 2j + 1).
#pragma unroll
        for (int j = 0; j < BN / 16; ++j) {
            const uint32_t a[4] = {pa_pack(s[2 * j][0], s[2 * j][1]), pa_pack(s[2 * j][2], s[2 * j][3]),
                                   pa_pack(s[2 * j + 1][0], s[2 * j + 1][1]),
                                   pa_pack(s[2 * j + 1][2], s[2 * j + 1][3])};
            const int mi = lane >> 3;
#pragma unroll
            for (int n = 0; n < DP / 8; n += 2) {
                if (8 * n < D) {                           // block-uniform
                    uint32_t b[4];
                    pa_ldsm4_t(b, vs + pa_at<DP>(16 * j + 8 * (mi & 1) + (lane & 7), n + (mi >> 1)));
                    pa_mma(o[n], a, b[0], b[1]);
                    pa_mma(o[n + 1], a, b[2], b[3]);
                }
            }
        }
    }

    // Row sums over the 4 lanes of a row, then out = O / l.
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int m = half ? mr1 : mr0;
        const float l = half ? l1 : l0;
        if (m < mrows) {
            const int tok = m / G, hq = kvh * G + m % G;
            __nv_bfloat16* dst = out + ((long long)(r * seq + tok) * H + hq) * D;
#pragma unroll
            for (int n = 0; n < DP / 8; ++n) {
                const int c = 8 * n + 2 * t;
                if (c < D) {
                    const float x0 = l > 0.0f ? o[n][2 * half] / l : 0.0f;
                    const float x1 = l > 0.0f ? o[n][2 * half + 1] / l : 0.0f;
                    *reinterpret_cast<uint32_t*>(dst + c) = pa_pack(x0, x1);
                }
            }
        }
    }
}

#define PA_ARGS                                                                                                    \
    const __nv_bfloat16 *__restrict__ q, const __nv_bfloat16 *__restrict__ kv, __nv_bfloat16 *__restrict__ out,  \
        int seq, int H, int KV, int D, int slots_n, int cap, int first_slot, int start, float scale,             \
        float softcap, int window
#define PA_INSTANTIATE(DP, BN)                                                                                     \
    extern "C" __global__ void __launch_bounds__(PA_THREADS) prefill_attention_bf16_##DP(PA_ARGS) {                \
        prefill_attention<DP, BN>(q, kv, out, seq, H, KV, D, slots_n, cap, first_slot, start, scale, softcap,      \
                                  window);                                                                         \
    }

PA_INSTANTIATE(64, 64)
PA_INSTANTIATE(128, 64)
PA_INSTANTIATE(256, 32)
