// Device helpers shared by llm_ops.cu and decode_step.cu. Written for this project.
#pragma once
#include <stdint.h>
#include <cuda_bf16.h>

#define NORM_THREADS 256

// PROGRAMMATIC DEPENDENT LAUNCH (sm_90+; host: crates/df11-candle/src/cuda/runtime/pdl.rs). The decode step's kernels are
// launched with the PDL attribute where the host can: a kernel's CTAs may then start while the kernel before it still
// runs, once every CTA of that one has called launch_dependents (all of them do so first). grid_dependency_wait()
// returns when the kernel before has completed and its writes are visible: each kernel calls it before it reads or
// writes anything another kernel writes (a product may first read its weights: df11_tc_stream.cu). Without the
// attribute both do nothing; below sm_90 they are not compiled (and the host does not launch with the attribute).
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Both, as the small kernels begin.
__device__ __forceinline__ void pdl_begin() {
    launch_dependents();
    grid_dependency_wait();
}

// The block-wide sum of one float per thread of a NORM_THREADS block, in a fixed order (warp shuffles, then the
// warps' sums in warp order). `part` is NORM_THREADS / 32 floats of shared memory.
__device__ __forceinline__ float norm_block_sum(float ss, float* part) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, d);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < NORM_THREADS / 32; ++i) total += part[i];
    return total;
}

// Eight BF16 (one 16-byte piece) as floats and back.
__device__ __forceinline__ void norm_unpack8(const uint4& u, float (&f)[8]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ uint4 norm_pack8(const float (&f)[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i]));
        const uint32_t hi = __bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i + 1]));
        w[i] = lo | (hi << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// Pieces of 8 a thread keeps in registers on the vector path: rows of up to 8 * NORM_VEC * NORM_THREADS = 16384.
#define NORM_VEC 8

// transformers' RMSNorm of one row of n values (ADD: the residual add first, r = bf16(r + h) in place, then the
// norm of r; else the norm of x = r), for a NORM_THREADS block:
//     y[i] = bf16( w[i] * bf16( x[i] * rsqrt(sum_i x[i]^2 / n + eps) ) ),
// the sum of squares in f32 in a fixed order. VECTOR PATH (n % 8 == 0, n <= 16384, every pointer 16-byte aligned:
// the same for every row, so block-uniform): thread t takes the 8-value pieces t, t + NORM_THREADS, ... with 16-byte
// loads, keeps them in registers (one read of each input), and sums its squares piece by piece in element order.
// Otherwise thread t takes elements t, t + NORM_THREADS, ... one by one and reads x again for y. At batch 1 the
// decode step runs this as one block per norm, two norms a layer: the vector path's loads all fly at once (scalar
// loads and a second pass made the block 9.5 us, ~11% of a Qwen3-8B-shaped decode step, ncu). Both kernels that
// use it (rms_norm_bf16, add_rms_norm_bf16) therefore give the same bits for the same row.
template <bool ADD>
__device__ __forceinline__ void rms_norm_row(__nv_bfloat16* __restrict__ r, const __nv_bfloat16* __restrict__ h,
                                             const __nv_bfloat16* __restrict__ w, __nv_bfloat16* __restrict__ y,
                                             int n, float eps, float* part) {
    const bool vec = (n & 7) == 0 && n <= 8 * NORM_VEC * NORM_THREADS &&
                     ((reinterpret_cast<uintptr_t>(r) | reinterpret_cast<uintptr_t>(h) |
                       reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
    if (vec) {
        const int pieces = n >> 3;
        uint4 xq[NORM_VEC], wq[NORM_VEC];
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < NORM_VEC; ++k) {
            const int c = (int)threadIdx.x + k * NORM_THREADS;
            if (c < pieces) {
                xq[k] = reinterpret_cast<const uint4*>(r)[c];
                wq[k] = __ldg(reinterpret_cast<const uint4*>(w) + c);
                float v[8];
                norm_unpack8(xq[k], v);
                if (ADD) {
                    float b[8];
                    norm_unpack8(reinterpret_cast<const uint4*>(h)[c], b);
#pragma unroll
                    for (int e = 0; e < 8; ++e) v[e] = v[e] + b[e];
                    xq[k] = norm_pack8(v);                      // bf16(r + h)
                    reinterpret_cast<uint4*>(r)[c] = xq[k];
                    norm_unpack8(xq[k], v);
                }
#pragma unroll
                for (int e = 0; e < 8; ++e) ss = fmaf(v[e], v[e], ss);
            }
        }
        const float scale = rsqrtf(norm_block_sum(ss, part) / (float)n + eps);
#pragma unroll
        for (int k = 0; k < NORM_VEC; ++k) {
            const int c = (int)threadIdx.x + k * NORM_THREADS;
            if (c < pieces) {
                float v[8], wf[8], o[8];
                norm_unpack8(xq[k], v);
                norm_unpack8(wq[k], wf);
#pragma unroll
                for (int e = 0; e < 8; ++e) o[e] = wf[e] * __bfloat162float(__float2bfloat16_rn(v[e] * scale));
                reinterpret_cast<uint4*>(y)[c] = norm_pack8(o);
            }
        }
        return;
    }
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += NORM_THREADS) {
        float v = __bfloat162float(r[i]);
        if (ADD) {
            const __nv_bfloat16 sum = __float2bfloat16_rn(v + __bfloat162float(h[i]));
            r[i] = sum;
            v = __bfloat162float(sum);
        }
        ss = fmaf(v, v, ss);
    }
    const float scale = rsqrtf(norm_block_sum(ss, part) / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += NORM_THREADS) {
        const __nv_bfloat16 normed = __float2bfloat16_rn(__bfloat162float(r[i]) * scale);
        y[i] = __float2bfloat16_rn(__bfloat162float(w[i]) * __bfloat162float(normed));
    }
}
