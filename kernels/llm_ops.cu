// Small fused ops for the models' forward pass on CUDA (used by df11-llm), one launch where candle needs
// several. Written for this project.
//
// rms_norm_bf16: transformers' RMSNorm for BF16 activations in one kernel:
//     y[r, i] = bf16( w[i] * bf16( x[r, i] * rsqrt(mean_i x[r, i]^2 + eps) ) )
// with the mean in f32 (candle: to_dtype(f32), rms_norm, to_dtype(bf16), broadcast_mul: four launches).
// One block of 256 threads per row; the sum of squares is reduced in a fixed order, so the result does not
// depend on timing. Host guarantees: x, w, y contiguous BF16; w and every row of x hold n elements.

#include <stdint.h>
#include <cuda_bf16.h>
#include "llm_common.cuh"

#define OPS_THREADS 256

extern "C" __global__ void __launch_bounds__(OPS_THREADS)
rms_norm_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
              __nv_bfloat16* __restrict__ y, int n, float eps) {
    pdl_begin();
    __shared__ float part[OPS_THREADS / 32];
    const long long r = blockIdx.x;
    // Not ADD: rms_norm_row only reads its first argument.
    rms_norm_row<false>(const_cast<__nv_bfloat16*>(x + r * n), nullptr, w, y + r * n, n, eps, part);
}

// Block-wide reductions over OPS_THREADS threads in a fixed order (deterministic).
__device__ __forceinline__ float ops_block_max(float v, float* part) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
    __syncthreads();                                   // part may still be read by a previous reduction
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = part[0];
#pragma unroll
    for (int i = 1; i < OPS_THREADS / 32; ++i) m = fmaxf(m, part[i]);
    return m;
}
__device__ __forceinline__ float ops_block_sum(float v, float* part) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < OPS_THREADS / 32; ++i) s += part[i];
    return s;
}

// softmax_scaled_bf16: attention probabilities from BF16 scores without a mask, in one kernel:
//     y[r, i] = bf16( softmax_i( f32( bf16(x[r, i] * scale) ) ) )
// (candle: affine, to_dtype(f32), softmax_last_dim, to_dtype(bf16): four launches). One block per row.
extern "C" __global__ void __launch_bounds__(OPS_THREADS)
softmax_scaled_bf16(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y, int n, float scale) {
    pdl_begin();
    __shared__ float part[OPS_THREADS / 32];
    const long long r = blockIdx.x;
    const __nv_bfloat16* xr = x + r * n;
    __nv_bfloat16* yr = y + r * n;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += OPS_THREADS)
        m = fmaxf(m, __bfloat162float(__float2bfloat16_rn(__bfloat162float(xr[i]) * scale)));
    m = ops_block_max(m, part);
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += OPS_THREADS)
        s += __expf(__bfloat162float(__float2bfloat16_rn(__bfloat162float(xr[i]) * scale)) - m);
    const float inv = 1.0f / ops_block_sum(s, part);
    for (int i = threadIdx.x; i < n; i += OPS_THREADS) {
        const float v = __bfloat162float(__float2bfloat16_rn(__bfloat162float(xr[i]) * scale));
        yr[i] = __float2bfloat16_rn(__expf(v - m) * inv);
    }
}

// The gated MLP's activation of one value: bf16( bf16(silu(g)) * u ), silu in f32. Both kernels below use it, so their
// outputs are the same bits.
__device__ __forceinline__ __nv_bfloat16 ops_silu_mul(__nv_bfloat16 g, __nv_bfloat16 u) {
    const float gv = __bfloat162float(g);
    const __nv_bfloat16 act = __float2bfloat16_rn(gv / (1.0f + __expf(-gv)));
    return __float2bfloat16_rn(__bfloat162float(act) * __bfloat162float(u));
}

// silu_mul_bf16: the activation in one kernel (candle: silu, mul: two launches). Elementwise over n values.
extern "C" __global__ void __launch_bounds__(OPS_THREADS)
silu_mul_bf16(const __nv_bfloat16* __restrict__ g, const __nv_bfloat16* __restrict__ u,
              __nv_bfloat16* __restrict__ y, long long n) {
    pdl_begin();
    for (long long i = (long long)blockIdx.x * OPS_THREADS + threadIdx.x; i < n;
         i += (long long)gridDim.x * OPS_THREADS) {
        y[i] = ops_silu_mul(g[i], u[i]);
    }
}

// silu_mul_halves_bf16: the same for a stacked gate/up output x [rows, 2 * inter] (gate the first half of each row,
// up the second): y [rows, inter], no copy of the halves first.
extern "C" __global__ void __launch_bounds__(OPS_THREADS)
silu_mul_halves_bf16(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y, long long rows,
                     long long inter) {
    pdl_begin();
    const long long n = rows * inter;
    for (long long i = (long long)blockIdx.x * OPS_THREADS + threadIdx.x; i < n;
         i += (long long)gridDim.x * OPS_THREADS) {
        const long long r = i / inter, c = i - r * inter;
        y[i] = ops_silu_mul(x[2 * inter * r + c], x[2 * inter * r + inter + c]);
    }
}

// argmax_chunks_{bf16,f32} + argmax_pick: for each row of x [rows, n], the index of its largest value as torch.argmax
// picks it (the greedy token): NaN above every number, -0 equal to +0, the first index among equal values. Each value
// maps to an integer key ordered as the values (argmax_key); (key, -index) is a total order, packed into one u64 that
// compares the same way (argmax_pack: 0 = no value), so any order of merging gives the same index. Two launches: CTA
// (c, r) of argmax_chunks_* merges the ARGMAX_CHUNK values [c * ARGMAX_CHUNK, ...) of row r into best[r * chunks + c];
// one warp per row of argmax_pick merges a row's chunks and writes the index. (One CTA per row ran at 18 us for
// Qwen3's 151,936 logits, bound by one SM's instruction issue; candle's argmax took ~130 us; H100.)
// Host guarantees: x contiguous, rows * n values, 1 <= n < 2^32; best holds rows * chunks u64 (chunks = ceil(n /
// ARGMAX_CHUNK)); out holds rows u32.
#define ARGMAX_THREADS 256
#define ARGMAX_CHUNK 4096

__device__ __forceinline__ uint32_t argmax_key(uint32_t f32bits) {
    if ((f32bits & 0x7fffffffu) > 0x7f800000u) return 0xffffffffu;          // NaN: above everything
    if (f32bits == 0x80000000u) f32bits = 0u;                                // -0 == +0
    // Sign-magnitude to an unsigned order: negatives reversed below 2^31, positives above.
    return (f32bits & 0x80000000u) ? ~f32bits : f32bits | 0x80000000u;
}
// Larger is better: the key, then the smaller index. Every value's key is at least 0x007fffff (-inf's), so a packed
// value is never 0, which stands for "no value".
__device__ __forceinline__ unsigned long long argmax_pack(uint32_t key, uint32_t index) {
    return ((unsigned long long)key << 32) | (unsigned long long)(0xffffffffu - index);
}
__device__ __forceinline__ unsigned long long argmax_warp_max(unsigned long long v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        const unsigned long long o = __shfl_xor_sync(0xffffffffu, v, d);
        v = o > v ? o : v;
    }
    return v;
}

template <bool BF16>
__device__ __forceinline__ void argmax_chunks(const void* __restrict__ x, unsigned long long* __restrict__ best,
                                              long long n) {
    __shared__ unsigned long long part[ARGMAX_THREADS / 32];
    const long long r = blockIdx.y;
    const long long c0 = (long long)blockIdx.x * ARGMAX_CHUNK;
    const long long c1 = min(n, c0 + ARGMAX_CHUNK);
    const int t = threadIdx.x;
    unsigned long long v = 0;
    if (BF16) {
        const uint16_t* row = reinterpret_cast<const uint16_t*>(x) + r * n;
        if (n % 8 == 0 && (reinterpret_cast<uintptr_t>(row) & 15) == 0) {
            // ARGMAX_CHUNK / 8 = 512 pieces of 8 values: two a thread, both loads in flight first.
            uint4 q[ARGMAX_CHUNK / 8 / ARGMAX_THREADS];
#pragma unroll
            for (int u = 0; u < ARGMAX_CHUNK / 8 / ARGMAX_THREADS; ++u) {
                const long long e = c0 + 8 * (t + u * ARGMAX_THREADS);
                q[u] = e < c1 ? __ldg(reinterpret_cast<const uint4*>(row + e)) : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < ARGMAX_CHUNK / 8 / ARGMAX_THREADS; ++u) {
                const long long e = c0 + 8 * (t + u * ARGMAX_THREADS);
                if (e >= c1) continue;
                const uint32_t w[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const unsigned long long a = argmax_pack(argmax_key(w[k] << 16), (uint32_t)(e + 2 * k));
                    const unsigned long long b = argmax_pack(argmax_key(w[k] & 0xffff0000u), (uint32_t)(e + 2 * k + 1));
                    v = a > v ? a : v;
                    v = b > v ? b : v;
                }
            }
        } else {
            for (long long i = c0 + t; i < c1; i += ARGMAX_THREADS) {
                const unsigned long long a = argmax_pack(argmax_key((uint32_t)row[i] << 16), (uint32_t)i);
                v = a > v ? a : v;
            }
        }
    } else {
        const uint32_t* row = reinterpret_cast<const uint32_t*>(x) + r * n;
        for (long long i = c0 + t; i < c1; i += ARGMAX_THREADS) {
            const unsigned long long a = argmax_pack(argmax_key(__ldg(row + i)), (uint32_t)i);
            v = a > v ? a : v;
        }
    }
    v = argmax_warp_max(v);
    if ((t & 31) == 0) part[t >> 5] = v;
    __syncthreads();
    if (t < 32) {
        v = t < ARGMAX_THREADS / 32 ? part[t] : 0ull;
        v = argmax_warp_max(v);
        if (t == 0) best[r * gridDim.x + blockIdx.x] = v;
    }
}

extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS)
argmax_chunks_bf16(const __nv_bfloat16* __restrict__ x, unsigned long long* __restrict__ best, long long n) {
    pdl_begin();
    argmax_chunks<true>(x, best, n);
}
extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS)
argmax_chunks_f32(const float* __restrict__ x, unsigned long long* __restrict__ best, long long n) {
    pdl_begin();
    argmax_chunks<false>(x, best, n);
}
// One warp per row: the best of the row's `chunks` entries; its index (0 if the row had no value).
extern "C" __global__ void __launch_bounds__(32)
argmax_pick(const unsigned long long* __restrict__ best, uint32_t* __restrict__ out, int chunks) {
    pdl_begin();
    const long long r = blockIdx.x;
    unsigned long long v = 0;
    for (int c = threadIdx.x; c < chunks; c += 32) {
        const unsigned long long o = best[r * chunks + c];
        v = o > v ? o : v;
    }
    v = argmax_warp_max(v);
    if (threadIdx.x == 0) out[r] = v == 0 ? 0u : 0xffffffffu - (uint32_t)v;
}
