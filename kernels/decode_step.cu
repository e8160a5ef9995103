// The decode step's kernels (df11-llm's graph-captured step, BF16 on CUDA). Written for this project.
//
// Every value that changes from one step to the next (each row's position, its KV-cache slot) is read
// from device memory, so one captured CUDA graph serves every step. Rows of a batch are independent
// sequences at their own positions (ragged batches). Indices that come from device memory are clamped
// (position < cap, slot < slots), so a bad value cannot make a kernel read or write out of bounds.
//
// KV cache of one layer: kv[2][slots][kv_heads][cap][D] BF16 (keys, then values), a sequence owning one
// slot; position p of slot s lives at [., s, h, p, :].
//
// qk_norm_rope_kv_bf16: for each row b and head: q/k RMSNorm over the head (optional), RoPE at position
//     positions[b] on the first R features (R <= D, the rest pass through), then q -> q_out[b, h, :],
//     k and v -> the cache at (slots[b], positions[b]). Arithmetic as the eager path:
//       norm kind 0 (Llama/Qwen):  n = bf16(x * s); y = bf16(w * n)        (s = rsqrt(mean(x^2) + eps), f32)
//       norm kind 1 (Gemma):       y = bf16((x * s) * w)                   (w = 1 + weight, f32)
//       RoPE (bf16 ops, as candle's rope kernel): y1 = x1*c - x2*s; y2 = x1*s + x2*c, each product and
//       sum rounded to BF16.
// flash_decode_bf16_<VEC>_<GT>: attention of one query per row over its cached keys, split over the
//     sequence (flash-decoding). One CTA per (row, kv head, group of <= GT query heads, split): the
//     query heads of a kv head read its keys and values once (GQA). Keys [lo, len) with len =
//     positions[b] + 1 and lo = len - window (sliding window) or 0. Scores as transformers' eager
//     attention: s = bf16(bf16(q.k) * scale), optionally cap*tanh(s/cap), softmax and the weighted sum of
//     values in f32 (online, per split), partial results to a scratch buffer in a fixed order.
// flash_combine_bf16: merges the splits of each (row, head) in a fixed order: out = sum_s e^(m_s-M) acc_s /
//     sum_s e^(m_s-M) l_s, rounded once to BF16, written as [B, H*D] (heads merged); 8 warps share the
//     splits of 32 features.
// add_rms_norm_bf16: r = bf16(r + h) in place, then y = rms_norm(r) with the arithmetic of rms_norm_bf16
//     (llm_ops.cu): the residual add and the next norm in one launch.

#include <stdint.h>
#include <cuda_bf16.h>
#include "llm_common.cuh"

#define STEP_THREADS NORM_THREADS
#define FD_THREADS 128

__device__ __forceinline__ float bf16r(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// ---------------------------------------------------------------------------------------------------
// qk_norm_rope_kv_bf16. Grid (B, H + 2*KV); block 32 threads (one warp per row and head); dynamic
// shared memory D floats. Row b of q is read at q + b*q_stride (+ head*D), likewise k and v: the three
// may be views into one fused qkv output. q_w, k_w: f32 [D] (null: no norm).
extern "C" __global__ void __launch_bounds__(32)
qk_norm_rope_kv_bf16(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                     const __nv_bfloat16* __restrict__ v, long long q_stride, long long k_stride,
                     long long v_stride,
                     const float* __restrict__ q_w, const float* __restrict__ k_w, int norm_kind, float eps,
                     const __nv_bfloat16* __restrict__ cos_t, const __nv_bfloat16* __restrict__ sin_t,
                     int table_rows, int rot,
                     const uint32_t* __restrict__ positions, const uint32_t* __restrict__ slots,
                     __nv_bfloat16* __restrict__ q_out, __nv_bfloat16* __restrict__ kv,
                     int H, int KV, int D, int slots_n, int cap) {
    extern __shared__ float row[];
    pdl_begin();
    const int b = blockIdx.x;
    const int head = blockIdx.y;
    const int lane = threadIdx.x;
    uint32_t pos = positions[b];
    if (pos >= (uint32_t)cap) pos = cap - 1;
    uint32_t slot = slots[b];
    if (slot >= (uint32_t)slots_n) slot = slots_n - 1;
    uint32_t trow = pos < (uint32_t)table_rows ? pos : table_rows - 1;

    const bool is_q = head < H;
    const bool is_k = !is_q && head < H + KV;
    const __nv_bfloat16* src;
    __nv_bfloat16* dst;
    const float* w;
    const size_t layer_half = (size_t)slots_n * KV * cap * D;   // keys, then values
    if (is_q) {
        src = q + (long long)b * q_stride + (long long)head * D;
        dst = q_out + ((size_t)b * H + head) * D;
        w = q_w;
    } else {
        const int h = is_k ? head - H : head - H - KV;
        src = is_k ? k + (long long)b * k_stride + (long long)h * D
                   : v + (long long)b * v_stride + (long long)h * D;
        dst = kv + (is_k ? 0 : layer_half) + (((size_t)slot * KV + h) * cap + pos) * D;
        w = is_k ? k_w : nullptr;
    }
    if (!is_q && !is_k) {                                      // values: copied as they are
        for (int i = lane; i < D; i += 32) dst[i] = src[i];
        return;
    }
    float ss = 0.0f;
    for (int i = lane; i < D; i += 32) {
        const float x = __bfloat162float(src[i]);
        row[i] = x;
        ss = fmaf(x, x, ss);
    }
    __syncwarp();
    if (w != nullptr) {
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, d);
        const float s = rsqrtf(ss / (float)D + eps);
        for (int i = lane; i < D; i += 32) {
            row[i] = norm_kind == 0 ? bf16r(w[i] * bf16r(row[i] * s)) : bf16r(row[i] * s * w[i]);
        }
        __syncwarp();
    }
    const int half = rot / 2;
    const __nv_bfloat16* c = cos_t + (size_t)trow * half;
    const __nv_bfloat16* sn = sin_t + (size_t)trow * half;
    for (int i = lane; i < half; i += 32) {
        const __nv_bfloat16 x1 = __float2bfloat16_rn(row[i]);
        const __nv_bfloat16 x2 = __float2bfloat16_rn(row[i + half]);
        dst[i] = x1 * c[i] - x2 * sn[i];
        dst[i + half] = x1 * sn[i] + x2 * c[i];
    }
    for (int i = rot + lane; i < D; i += 32) dst[i] = __float2bfloat16_rn(row[i]);
}

// ---------------------------------------------------------------------------------------------------
// flash_decode. Grid (B * KV * gchunks, splits); block FD_THREADS. A key group of TPK threads (TPK =
// power of two >= D/VEC) holds one key; each thread VEC features of it (16-byte loads for VEC 8).
// Threads past D hold zeros. partial_o f32 [B, H, splits, D]; partial_ml f32 [B, H, splits, 2].
template <int VEC, int GT>
__device__ __forceinline__ void load_vec(const __nv_bfloat16* p, bool active, float* out) {
    if (!active) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) out[e] = 0.0f;
        return;
    }
    if (VEC == 8) {
        const uint4 raw = *reinterpret_cast<const uint4*>(p);
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 f = __bfloat1622float2(h[e]);
            out[2 * e] = f.x;
            out[2 * e + 1] = f.y;
        }
    } else {
        const __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(p);
        const float2 f = __bfloat1622float2(h);
        out[0] = f.x;
        out[1] = f.y;
    }
}

template <int VEC, int GT>
__device__ void flash_decode(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kv,
                             const uint32_t* __restrict__ positions, const uint32_t* __restrict__ slots,
                             int H, int KV, int D, int slots_n, int cap, int gchunks, float scale,
                             float softcap, int window, float* __restrict__ partial_o,
                             float* __restrict__ partial_ml) {
    constexpr int MAXW = FD_THREADS;                 // shared scratch sized for the worst case
    __shared__ float sm_ml[MAXW][GT][2];
    __shared__ float sm_f[MAXW][GT];                 // the key groups' merge factors
    __shared__ float sm_mm[GT];
    extern __shared__ float sm_acc[];                // [KPI][GT][D]
    const int splits = gridDim.y;
    const int split = blockIdx.y;
    const int bkg = blockIdx.x;
    const int b = bkg / (KV * gchunks);
    const int kvh = (bkg / gchunks) % KV;
    const int gc = bkg % gchunks;
    const int G = H / KV;
    const int g0 = gc * GT;
    const int gn = min(GT, G - g0);

    int tpk = 1;
    while (tpk * VEC < D) tpk <<= 1;
    const int kpi = FD_THREADS / tpk;                // keys per iteration
    const int kg = threadIdx.x / tpk;
    const int lt = threadIdx.x % tpk;
    const int d0 = lt * VEC;
    const bool active = d0 < D;

    uint32_t pos = positions[b];
    if (pos >= (uint32_t)cap) pos = cap - 1;
    uint32_t slot = slots[b];
    if (slot >= (uint32_t)slots_n) slot = slots_n - 1;
    const int len = (int)pos + 1;
    const int lo = window > 0 ? max(0, len - window) : 0;
    const int n = len - lo;
    const int chunk = (n + splits - 1) / splits;
    const int start = lo + split * chunk;
    const int end = min(len, start + chunk);

    float qr[GT][VEC];
#pragma unroll
    for (int g = 0; g < GT; ++g) {
        const int h = kvh * G + g0 + g;
        load_vec<VEC, GT>(q + ((size_t)b * H + h) * D + d0, active && g < gn, qr[g]);
    }
    float m[GT], l[GT], acc[GT][VEC];
#pragma unroll
    for (int g = 0; g < GT; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[g][e] = 0.0f;
    }
    const size_t layer_half = (size_t)slots_n * KV * cap * D;
    const __nv_bfloat16* kbase = kv + ((size_t)slot * KV + kvh) * cap * D;
    const __nv_bfloat16* vbase = kbase + layer_half;
    for (int j0 = start; j0 < end; j0 += 2 * kpi) {
        // Two keys per group per iteration: both loads in flight before the first use.
        float kr[2][VEC], vr[2][VEC];
        bool has[2];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int j = j0 + u * kpi + kg;
            has[u] = j < end;
            load_vec<VEC, GT>(kbase + (size_t)j * D + d0, active && has[u], kr[u]);
            load_vec<VEC, GT>(vbase + (size_t)j * D + d0, active && has[u], vr[u]);
        }
        // The two keys' scores, then one online-softmax update per head for both (3 exponentials, not 4).
        float sc[2][GT];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
#pragma unroll
            for (int g = 0; g < GT; ++g) {
                float dot = 0.0f;
#pragma unroll
                for (int e = 0; e < VEC; ++e) dot = fmaf(qr[g][e], kr[u][e], dot);
                // Every thread of the warp runs this (tpk is uniform); xor offsets < tpk stay in the group.
                for (int off = tpk >> 1; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
                float s = bf16r(bf16r(dot) * scale);
                if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
                sc[u][g] = has[u] ? s : -INFINITY;
            }
        }
#pragma unroll
        for (int g = 0; g < GT; ++g) {
            const float m_new = fmaxf(m[g], fmaxf(sc[0][g], sc[1][g]));
            if (g >= gn || m_new == -INFINITY) continue;           // no key yet (or a padding head)
            const float corr = expf(m[g] - m_new);
            const float p0 = has[0] ? expf(sc[0][g] - m_new) : 0.0f;
            const float p1 = has[1] ? expf(sc[1][g] - m_new) : 0.0f;
            l[g] = l[g] * corr + p0 + p1;
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc[g][e] = fmaf(p1, vr[1][e], fmaf(p0, vr[0][e], acc[g][e] * corr));
            m[g] = m_new;
        }
    }
    // Merge the key groups of this CTA in group order, then write the split's partial result.
    if (lt == 0) {
#pragma unroll
        for (int g = 0; g < GT; ++g) {
            sm_ml[kg][g][0] = m[g];
            sm_ml[kg][g][1] = l[g];
        }
    }
    if (active) {
#pragma unroll
        for (int g = 0; g < GT; ++g)
#pragma unroll
            for (int e = 0; e < VEC; ++e)
                if (d0 + e < D) sm_acc[((size_t)kg * GT + g) * D + d0 + e] = acc[g][e];
    }
    // Each head's maximum over the key groups and each group's factor e^(m_k - M) (0 where the head saw no key),
    // once per CTA; then every output sums its groups' values in group order.
    __syncthreads();
    for (int i = threadIdx.x; i < gn * kpi; i += FD_THREADS) {
        const int g = i / kpi, k = i - g * kpi;
        float mm = -INFINITY;
        for (int j = 0; j < kpi; ++j) mm = fmaxf(mm, sm_ml[j][g][0]);
        sm_f[k][g] = mm == -INFINITY ? 0.0f : expf(sm_ml[k][g][0] - mm);
        if (k == 0) sm_mm[g] = mm;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < gn * D; idx += FD_THREADS) {
        const int g = idx / D;
        const int d = idx - g * D;
        float aa = 0.0f;
        for (int k = 0; k < kpi; ++k) aa = fmaf(sm_acc[((size_t)k * GT + g) * D + d], sm_f[k][g], aa);
        const int h = kvh * G + g0 + g;
        const size_t p = ((size_t)b * H + h) * splits + split;
        partial_o[p * D + d] = aa;
        if (d == 0) {
            float ll = 0.0f;
            for (int k = 0; k < kpi; ++k) ll = fmaf(sm_ml[k][g][1], sm_f[k][g], ll);
            partial_ml[2 * p] = sm_mm[g];
            partial_ml[2 * p + 1] = ll;
        }
    }
}

#define FLASH_DECODE(VEC, GT)                                                                              \
    extern "C" __global__ void __launch_bounds__(FD_THREADS) flash_decode_bf16_##VEC##_##GT(                \
        const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kv,                         \
        const uint32_t* __restrict__ positions, const uint32_t* __restrict__ slots, int H, int KV, int D,  \
        int slots_n, int cap, int gchunks, float scale, float softcap, int window,                          \
        float* __restrict__ partial_o, float* __restrict__ partial_ml) {                                   \
        pdl_begin();                                                                                        \
        flash_decode<VEC, GT>(q, kv, positions, slots, H, KV, D, slots_n, cap, gchunks, scale, softcap,    \
                              window, partial_o, partial_ml);                                               \
    }
FLASH_DECODE(8, 1)
FLASH_DECODE(8, 2)
FLASH_DECODE(8, 4)
FLASH_DECODE(8, 8)
FLASH_DECODE(2, 1)
FLASH_DECODE(2, 2)
FLASH_DECODE(2, 4)
FLASH_DECODE(2, 8)

// flash_combine_bf16. Grid (B*H, ceil(D/32)); block COMBINE_THREADS (8 warps); out [B, H*D] BF16.
// Lane l of each warp owns feature 32*blockIdx.y + l; warp w merges splits w, w+8, ...; the 8 warps'
// sums are then added in warp order. Every CTA finds the same maximum M first. Fixed order throughout:
// the same inputs give the same bits.
#define COMBINE_THREADS 256
extern "C" __global__ void __launch_bounds__(COMBINE_THREADS)
flash_combine_bf16(const float* __restrict__ partial_o, const float* __restrict__ partial_ml, int splits,
                   int D, __nv_bfloat16* __restrict__ out) {
    pdl_begin();
    constexpr int WARPS = COMBINE_THREADS / 32;
    __shared__ float sm_l[WARPS], sm_a[WARPS][32];
    const size_t bh = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int d = blockIdx.y * 32 + lane;
    const float* ml = partial_ml + bh * splits * 2;
    float mm = -INFINITY;
    for (int s = lane; s < splits; s += 32) mm = fmaxf(mm, ml[2 * s]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, off));
    float ll = 0.0f, aa = 0.0f;
    if (mm != -INFINITY) {
        for (int s = warp; s < splits; s += WARPS) {
            const float f = expf(ml[2 * s] - mm);
            ll = fmaf(ml[2 * s + 1], f, ll);
            if (d < D) aa = fmaf(partial_o[(bh * splits + s) * D + d], f, aa);
        }
    }
    sm_a[warp][lane] = aa;
    if (lane == 0) sm_l[warp] = ll;
    __syncthreads();
    if (warp == 0 && d < D) {
        float l = 0.0f, a = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            l += sm_l[w];
            a += sm_a[w][lane];
        }
        out[bh * D + d] = __float2bfloat16_rn(l > 0.0f ? a / l : 0.0f);
    }
}

// ---------------------------------------------------------------------------------------------------
// add_rms_norm_bf16. One block of STEP_THREADS per row: r[row] = bf16(r + h) (in place), y = norm(r).
extern "C" __global__ void __launch_bounds__(STEP_THREADS)
add_rms_norm_bf16(__nv_bfloat16* __restrict__ r, const __nv_bfloat16* __restrict__ h,
                  const __nv_bfloat16* __restrict__ w, __nv_bfloat16* __restrict__ y, int n, float eps) {
    pdl_begin();
    __shared__ float part[STEP_THREADS / 32];
    const long long row = blockIdx.x;
    rms_norm_row<true>(r + row * n, h + row * n, w, y + row * n, n, eps, part);
}
