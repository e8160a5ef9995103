// Pieces shared by the tensor-core product kernels (df11_tc.cu: row order and the tile order; df11_tc_stream.cu: the
// streaming kernels over the tile order and their twin): the mma, the lane's x operand, the items of a row group.
// THE TC SUMMATION CONTRACT they all follow is stated in df11_tc.cu.

#pragma once
#include <stdint.h>
#include <cuda_bf16.h>

#define TC_WARPS 8
#define TC_THREADS (32 * TC_WARPS)
#define TC_TABLE_BYTES 16384

// D += A * B for one m16n8k16 tile: a = four A registers (rows g / g + 8, k slots 2t.. / 2t + 8..), b0, b1 the B
// registers (k slots 2t.. and 2t + 8.., column g).
__device__ __forceinline__ void tc_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __trap();   // the host never launches these kernels below sm_80
#endif
}

// The lane's x rows in one sub-step: rows 16mt + g and 16mt + g + 8 of x (g = lane / 4) from the sub-step's first
// column of the lane. A row past nb reads row nb - 1 instead: the mma's output rows past nb are never stored (every
// kernel checks ba, bb < nb), and its rows are independent, so the loads need no predicate or zeroing (LOW: rows
// 8.. are zero operands and never loaded).
template <int MT>
struct TcX {
    const uint4* a[MT];
    const uint4* b[MT];
};

// LOW: nb <= 8, so rows 8 .. 15 of the m-tile are zero and never loaded.
template <int MT, bool LOW = false>
__device__ __forceinline__ TcX<MT> tc_x(const __nv_bfloat16* x, int cols, int nb, int col) {
    const int g = (int)((threadIdx.x & 31) >> 2);
    TcX<MT> r;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int ba = 16 * mt + g, bb = ba + 8;
        r.a[mt] = reinterpret_cast<const uint4*>(x + (long long)min(ba, nb - 1) * cols + col);
        r.b[mt] = reinterpret_cast<const uint4*>(x + (long long)min(bb, nb - 1) * cols + col);
    }
    return r;
}

// The eight weights w (four BF16 pairs, columns c .. c + 7 of pass i) of the lane's row times the lane's x rows at the
// same columns, added to acc.
template <int MT, bool LOW = false>
__device__ __forceinline__ void tc_step(const uint32_t (&w)[4], const TcX<MT>& xs, int i, float (&acc)[MT][4]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const uint4 xa = __ldg(xs.a[mt] + 32 * i);              // 256 columns a pass: 32 uint4
        const uint4 xb = LOW ? make_uint4(0u, 0u, 0u, 0u) : __ldg(xs.b[mt] + 32 * i);
        tc_mma(acc[mt], xa.x, xb.x, xa.y, xb.y, w[0], w[1]);
        tc_mma(acc[mt], xa.z, xb.z, xa.w, xb.w, w[2], w[3]);
    }
}

// Items of a row group: chunks times sub-step blocks.
__device__ __forceinline__ int tc_items_per_group(int cols, int steps) { return ((cols + 2047) / 2048) * (8 / steps); }
