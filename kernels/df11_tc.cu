// Tensor-core matrix products for small batches: y[b, r] = sum_c x[b, c] * W[r, c] for 1 to 64 rows of x, with W
// either a member of a DF11 unit in the PACKED form (df11_tc_packed_*: the weights are decoded in registers and never
// written to memory) or a dense BF16 matrix (bf16_tc_*: the TWIN). Written for this project.
//
// Why: the CUDA-core kernels of df11_fused.cu convert every weight to f32 and spend one FMA per weight and batch
// row, ~10 instructions per weight at batch 1 and 8x the FMAs at batch 8. Here a lane rebuilds its weights as BF16
// pairs, which are already tensor-core B fragments: two mma.sync.m16n8k16 per eight weights, whatever the batch
// (up to 16 rows per m-tile), so batch 8 costs what batch 1 does.
//
// WORK. Row group G: rows 8G .. 8G + 7 (the mma's n). Chunk k: columns [2048k, min(2048k + 2048, cols)), width W
// (a multiple of 256). Sub-step m (0..7) of a chunk: lane (g, t) (g = lane / 4, t = lane % 4) takes row 8G + g and
// the chunk lane L = 4m + t of the packed form: columns 2048k + 8L + 256i .. + 8, passes i = 0 .. W/256 - 1; so the
// four lanes of a group cover 32 adjacent columns a pass, and the packed form's per-lane escape runs serve as they
// are (fp_item, df11_packed.cuh). ITEM: (G, k, sub-steps sb*S .. sb*S + S - 1), S = `steps` in {1, 2, 4, 8}.
//
// THE TC SUMMATION CONTRACT (shared by df11_tc_packed and bf16_tc, which differ only in where w comes from):
//   per item, two accumulator fragments P and Q per m-tile (rows 16mt .. 16mt + 15 of x), zero at the start; for
//   each sub-step m in order, each pass i in order: one mma.sync.m16n8k16 (bf16 in, f32 accumulate) into P with
//   columns c, c + 1, c + 4, c + 5 of the lane (c = 2048k + 8L + 256i) in its k slots 2t, 2t + 1, 2t + 8, 2t + 9,
//   and one into Q with c + 2, c + 3, c + 6, c + 7 (df11_tc.cuh: tc_step, tc_step_low); rows of W past `rows` are
//   zero. An item's partial sum of an output is P + Q (f32). The items of a row group are then added in item order
//   (k, then sb) starting from 0.0f, and the sum rounded to BF16. (At 8 rows or fewer the streaming kernels keep
//   Q's sums in the m-tile's rows 8-15, the same arithmetic on the same operands.)
// So the same (rows, cols, nb, steps) give bit-identical outputs for the same weights. The host chooses `steps`
// from the shape and nb only (crates/df11-candle/src/cuda/forms/packed/tc.rs).
//
// TILED MEMBERS (tiled != 0; crates/df11-candle/src/cuda/forms/packed/tile_order.rs): the matrix is a whole member stored in the
// tile order, so sub-step (G, k, m) is the W consecutive unit elements from base + 8 cols G + 16384 k + W m and lane
// (g, t) reads their chunk lane 4g + t (the packed form's lane of those elements): the same weights in the same mma
// slots as in row order, so the summation contract, and the twin, do not change.
//
// HOST GUARANTEES: sm_80 or newer; cols % 256 == 0, 2048 * 256 > cols; 1 <= nb <= 16 * MT; x and (twin) w 16-byte
// aligned; packed: base % 256 == 0, the matrix [rows, cols] at base inside one member of the unit (t0, t1 its
// table), the packed buffers those of df11_packed.cuh; tile_groups * items_per_group(cols, steps) * nb * 32 + (packed:
// 16384) bytes of dynamic shared memory.

#include <stdint.h>
#include <cuda_bf16.h>
#include "df11_packed.cuh"
#include "df11_tc.cuh"

// Where one sub-step of a warp reads: the packed item (unit element j0, the lane's chunk lane Lp in it: row order, the
// row's chunk and L; tile order, the sub-step's run and the lane), the twin's weight offset, the x lane L (columns
// c0 + 8L + 256i), the chunk width W (0: no such sub-step, nothing is loaded) and whether its row group exists
// (warp-uniform).
struct TcAt {
    uint32_t j0;
    uint32_t Lp;
    long long woff;
    uint32_t L;
    int c0;
    int W;
    bool live;
};

// The packed codes of the warp's next sub-step load while this one computes: the next in the warp's whole sequence,
// across items and tiles. (Measured on an H100 and not kept: two accumulator chains, the next sub-step's
// sign_mantissa or twin weights loaded ahead at 2 CTAs per SM, 4 or 8 sub-steps per item; docs/PERFORMANCE.md.)
template <int MT, bool TWIN>
__device__ __forceinline__ void tc_gemv(const FgPacked& pk, const uint8_t* sign_mantissa, const uint16_t* wdense,
                                        const __nv_bfloat16* x, __nv_bfloat16* y, int nb, int rows, int cols,
                                        long long base, int tile_groups, int steps, bool tiled) {
    extern __shared__ __align__(16) uint8_t tc_smem[];
    uint32_t* tab = reinterpret_cast<uint32_t*>(tc_smem);
    float* partial = reinterpret_cast<float*>(tc_smem + (TWIN ? 0 : TC_TABLE_BYTES));
    if (!TWIN) {
        fp_fill_table(tab, pk, TC_THREADS);
        __syncthreads();
    }
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int nsb = 8 / steps, ipg = tc_items_per_group(cols, steps), items = tile_groups * ipg;
    const int groups = (rows + 7) / 8, ntiles = (groups + tile_groups - 1) / tile_groups;
    // Both forms are aligned to the packed form's 2048-element chunks in every row, or none is (warp-uniform).
    const bool aligned = cols % 2048 == 0 && base % 2048 == 0;
    auto at = [&](int tile, int item, int s) {
        const int G = tile * tile_groups + item / ipg, k = (item % ipg) / nsb, sb = item % nsb;
        TcAt a;
        a.live = tile < ntiles && G < groups;
        const int row = 8 * G + (int)g;
        const long long rl = !a.live ? 0 : row < rows ? row : rows - 1;   // past the matrix: in bounds, zeroed
        const int c0 = a.live ? 2048 * k : 0;
        a.c0 = c0;
        a.W = a.live ? min(2048, cols - c0) : 0;
        a.woff = rl * cols + c0;
        a.L = 4u * (uint32_t)(sb * steps + s) + t;
        if (tiled) {
            a.j0 = (uint32_t)(base + 8LL * cols * (a.live ? G : 0) + 16384LL * k + (long long)a.W * (sb * steps + s));
            a.Lp = lane;
        } else {
            a.j0 = (uint32_t)(base + rl * cols + c0);
            a.Lp = a.L;
        }
        return a;
    };
    // The same warp's next sub-step of the item: four chunk lanes on (row order), the next run (tile order).
    auto advance = [&](TcAt& a) {
        a.L += 4;
        if (tiled) a.j0 += (uint32_t)a.W;
        else a.Lp += 4;
    };
    auto load_twin = [&](const TcAt& a, uint4 (&q)[8]) {
#pragma unroll
        for (int i = 0; i < 8; ++i)
            q[i] = 256 * i < a.W ? __ldg(reinterpret_cast<const uint4*>(wdense + a.woff + 8 * a.L + 256 * i))
                                 : make_uint4(0u, 0u, 0u, 0u);
    };
    FpPre pre = {};
    auto prefetch = [&](const TcAt& a) {
        if (!TWIN) pre = fp_prefetch(pk, a.j0, a.W, a.Lp);
    };
    prefetch(at(blockIdx.x, warp, 0));
    for (int tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        for (int item = warp; item < items; item += TC_WARPS) {
            const int G = tile * tile_groups + item / ipg;
            const bool valid = 8 * G + (int)g < rows;
            TcAcc<MT> acc;
            tc_acc_zero<MT>(acc);
            TcAt here;
            for (int s = 0; s < steps; ++s, advance(here)) {
                if (s == 0) here = at(tile, item, 0);
                // The warp's next sub-step: this item's next (4 chunk lanes on), else its next item, else its first
                // of the next tile.
                TcAt next = here;
                advance(next);
                if (s + 1 >= steps) next = item + TC_WARPS < items ? at(tile, item + TC_WARPS, 0)
                                                                   : at(tile + gridDim.x, warp, 0);
                const FpPre cur = pre;
                uint4 q[8];
                if (TWIN) load_twin(here, q);
                prefetch(next);
                if (!here.live) continue;                       // warp-uniform
                const uint32_t L = here.L;
                const TcX<MT> xs = tc_x<MT>(x, cols, nb, here.c0 + 8 * (int)L);
                auto mul = [&](int i, const uint32_t(&w)[4]) {
                    uint32_t v[4];
#pragma unroll
                    for (int e = 0; e < 4; ++e) v[e] = valid ? w[e] : 0u;
                    tc_step<MT>(v, xs, i, acc);
                };
                if (TWIN) {
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        if (256 * i >= here.W) break;           // warp-uniform: W % 256 == 0
                        const uint32_t w[4] = {q[i].x, q[i].y, q[i].z, q[i].w};
                        mul(i, w);
                    }
                } else {
                    if (aligned) fp_item<true>(tab, pk, sign_mantissa, here.j0, 2048, here.Lp, cur, mul);
                    else fp_item<false>(tab, pk, sign_mantissa, here.j0, here.W, here.Lp, cur, mul);
                }
            }
            tc_store_item<MT>(acc, partial + (long long)item * nb * 8, nb);
        }
        __syncthreads();
        // Each output of the tile: its row group's items in order.
        for (int i = threadIdx.x; i < tile_groups * 8 * nb; i += TC_THREADS) {
            const int rr = i / nb, b = i % nb, r = tile * tile_groups * 8 + rr;
            if (r < rows) {
                const float* p = partial + (long long)(rr / 8) * ipg * nb * 8 + b * 8 + (rr % 8);
                float sum = 0.0f;
                for (int it = 0; it < ipg; ++it) sum += p[(long long)it * nb * 8];
                y[(long long)b * rows + r] = __float2bfloat16_rn(sum);
            }
        }
        __syncthreads();
    }
}

// Registers: the packed kernel holds a sub-step's codes and sign_mantissa, the next sub-step's codes, and 4 MT
// accumulators: 3 CTAs per SM (80 registers) at MT 1, 2 above (128). The host's grid follows (tc.rs).
#define TC_MIN_CTAS(MT) ((MT) == 1 ? 3 : 2)
#define TC_PACKED_ARGS                                                                                               \
    const uint32_t *codes, const uint32_t *chunk_escapes, const uint8_t *lane_starts, uint32_t n_chunks,             \
        const uint8_t *escapes, uint32_t n_escapes, uint32_t t0, uint32_t t1, const uint8_t *sign_mantissa,         \
        const __nv_bfloat16 *x, __nv_bfloat16 *y, int nb, int rows, int cols, long long base, int tile_groups,      \
        int steps, int tiled
#define TC_TWIN_ARGS                                                                                                 \
    const uint16_t *w, const __nv_bfloat16 *x, __nv_bfloat16 *y, int nb, int rows, int cols, int tile_groups, int steps

#define TC_INSTANTIATE(MT)                                                                                           \
    extern "C" __global__ void __launch_bounds__(TC_THREADS, TC_MIN_CTAS(MT)) df11_tc_packed_##MT(TC_PACKED_ARGS) { \
        const FgPacked pk = {codes, chunk_escapes, lane_starts, n_chunks, escapes, n_escapes, t0, t1};              \
        tc_gemv<MT, false>(pk, sign_mantissa, nullptr, x, y, nb, rows, cols, base, tile_groups, steps, tiled != 0); \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(TC_THREADS, TC_MIN_CTAS(MT)) bf16_tc_##MT(TC_TWIN_ARGS) {          \
        const FgPacked pk = {};                                                                                      \
        tc_gemv<MT, true>(pk, nullptr, w, x, y, nb, rows, cols, 0, tile_groups, steps, false);                      \
    }

TC_INSTANTIATE(1)
TC_INSTANTIATE(2)
TC_INSTANTIATE(4)
