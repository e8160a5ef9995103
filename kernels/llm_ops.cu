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
    launch_dependents();
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
    launch_dependents();
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
    launch_dependents();
    const long long n = rows * inter;
    for (long long i = (long long)blockIdx.x * OPS_THREADS + threadIdx.x; i < n;
         i += (long long)gridDim.x * OPS_THREADS) {
        const long long r = i / inter, c = i - r * inter;
        y[i] = ops_silu_mul(x[2 * inter * r + c], x[2 * inter * r + inter + c]);
    }
}
