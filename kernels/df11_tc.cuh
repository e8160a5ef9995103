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

// An item's accumulators: two fragments per m-tile, P (acc[0]) and Q (acc[1]). A pass's eight weights w (four BF16
// pairs: columns c, c + 1 | c + 2, c + 3 | c + 4, c + 5 | c + 6, c + 7) go half to each: P takes w[0], w[2] with x's
// columns c, c + 1, c + 4, c + 5 in its k slots, Q takes w[1], w[3] with c + 2, c + 3, c + 6, c + 7. Why two: at 8 rows
// or fewer (LOW) a lane's x quad (c .. c + 7 of one row) is then the A operand of both mma as it was loaded, with no
// register moves: P's rows g hold x's columns c, c + 1, c + 4, c + 5 and Q's rows g + 8 its columns c + 2, c + 3,
// c + 6, c + 7 (rows 8-15 of an m-tile are never stored at LOW, so what the other rows compute does not matter).
// Before, one fragment took x as {x.x, 0, x.y, 0}: ~7 moves a pass, 14% of the DF11 kernel's pass loop (SASS).
template <int MT>
using TcAcc = float[2][MT][4];

template <int MT>
__device__ __forceinline__ void tc_acc_zero(TcAcc<MT>& acc) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) acc[h][mt][0] = acc[h][mt][1] = acc[h][mt][2] = acc[h][mt][3] = 0.0f;
}

// The eight weights w of pass i of the lane's row times the lane's x rows at the same columns, added to acc (above
// 8 rows: x rows 16mt + g in the A rows g, rows 16mt + g + 8 in the rows g + 8, of both fragments).
template <int MT, bool LOW = false>
__device__ __forceinline__ void tc_step(const uint32_t (&w)[4], const TcX<MT>& xs, int i, TcAcc<MT>& acc) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const uint4 xa = __ldg(xs.a[mt] + 32 * i);              // 256 columns a pass: 32 uint4
        const uint4 xb = LOW ? make_uint4(0u, 0u, 0u, 0u) : __ldg(xs.b[mt] + 32 * i);
        tc_mma(acc[0][mt], xa.x, xb.x, xa.z, xb.z, w[0], w[2]);
        tc_mma(acc[1][mt], xa.y, xb.y, xa.w, xb.w, w[1], w[3]);
    }
}

// LOW (8 rows of x or fewer): the same products from the lane's x quad xq (columns c .. c + 7 of x row g) as it was
// loaded: P's rows g get x.x, x.z; Q's rows g + 8 get x.y, x.w.
__device__ __forceinline__ void tc_step_low(const uint32_t (&w)[4], const uint4& xq, TcAcc<1>& acc) {
    tc_mma(acc[0][0], xq.x, xq.y, xq.z, xq.w, w[0], w[2]);
    tc_mma(acc[1][0], xq.x, xq.y, xq.z, xq.w, w[1], w[3]);
}

// The item's sums into p (nb x 8 floats: x row b, W row 8G + r at p[8b + r]): lane (g, t) holds x rows 16mt + g
// (+ 8) and W rows 8G + 2t, 8G + 2t + 1; each output is P + Q of its row (LOW: P's row g, Q's row g + 8).
template <int MT, bool LOW = false>
__device__ __forceinline__ void tc_store_item(const TcAcc<MT>& acc, float* p, int nb) {
    const int g = (int)((threadIdx.x & 31) >> 2), t = (int)(threadIdx.x & 3);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int ba = 16 * mt + g, bb = ba + 8;
        if (LOW) {
            if (ba < nb) {
                p[ba * 8 + 2 * t] = acc[0][0][0] + acc[1][0][2];
                p[ba * 8 + 2 * t + 1] = acc[0][0][1] + acc[1][0][3];
            }
        } else {
            if (ba < nb) {
                p[ba * 8 + 2 * t] = acc[0][mt][0] + acc[1][mt][0];
                p[ba * 8 + 2 * t + 1] = acc[0][mt][1] + acc[1][mt][1];
            }
            if (bb < nb) {
                p[bb * 8 + 2 * t] = acc[0][mt][2] + acc[1][mt][2];
                p[bb * 8 + 2 * t + 1] = acc[0][mt][3] + acc[1][mt][3];
            }
        }
    }
}

// Items of a row group: chunks times sub-step blocks.
__device__ __forceinline__ int tc_items_per_group(int cols, int steps) { return ((cols + 2047) / 2048) * (8 / steps); }
