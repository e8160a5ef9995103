// Device helpers shared by llm_ops.cu and decode_step.cu. Written for this project.
#pragma once
#include <cuda_bf16.h>

#define NORM_THREADS 256

// The second half of transformers' RMSNorm for one row, after each thread of a NORM_THREADS block
// has summed the squares of its elements into `ss`: the block sum in a fixed order, then
//     y[i] = bf16( w[i] * bf16( x[i] * rsqrt(sum / n + eps) ) ).
// `part` is NORM_THREADS / 32 floats of shared memory.
__device__ __forceinline__ void rms_norm_finish(float ss, const __nv_bfloat16* __restrict__ x,
                                                const __nv_bfloat16* __restrict__ w,
                                                __nv_bfloat16* __restrict__ y, int n, float eps,
                                                float* part) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, d);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < NORM_THREADS / 32; ++i) total += part[i];
    const float scale = rsqrtf(total / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += NORM_THREADS) {
        const __nv_bfloat16 normed = __float2bfloat16_rn(__bfloat162float(x[i]) * scale);
        y[i] = __float2bfloat16_rn(__bfloat162float(w[i]) * __bfloat162float(normed));
    }
}
