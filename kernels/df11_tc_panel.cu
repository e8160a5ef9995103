// PANEL tensor-core products: df11_tc_panel_* (DF11, a member in the TILE ORDER whose sub-steps are whole 2048-element
// chunks, or stacked such members, as df11_tc_stream.cu takes them) and bf16_tc_panel_*, their BF16 twin, for 8 to 64
// rows of x. They follow THE TC SUMMATION CONTRACT of df11_tc.cu unchanged (same items, same mma order, same partial
// sums added in the same order), so they are bit-identical to the other tensor-core kernels. Written for this project.
//
// Why (docs/PERFORMANCE.md, 2026-11-27): in df11_tc_stream.cu the 8 warps of a CTA take the items of one row group, so
// they read different columns of x, and every row group reads all of x again: at 16-64 rows of x that is 1.0-3.4 GB of
// L2-to-SM traffic a Qwen3-8B layer against 0.27 GB of DF11 weights. Here a CTA's TASK is one item j of a PANEL of 8
// row groups: warp w takes row group 8 panel + w, all 8 warps read the same columns of x at about the same time, and x
// comes from L1 once for all of them. The columns of a row group are split over tasks (items), so even a 4096-row
// product has panels x items_per_group tasks for the GPU's CTAs.
//
// SUMS ACROSS CTAS. A task's warp writes its item's partial sums (P + Q, tc_store_item) to global memory, at item index
// G * ipg + j, then counts the item on the row group's counter. The warp that counts a row group's last item adds its
// items' sums in item order (the contract), rounds them to BF16, writes y and sets the counter back to zero for the
// next launch (a CUDA graph replays the same counters). The counters are zero before a launch (the host's buffer,
// zeroed when created) and after it.
//
// PIPELINE, DECODE, ESCAPES: df11_tc_stream.cu's (stages of TS_DEPTH per warp, cp.async; df11_tc_stream.cuh). A warp's
// sequence of sub-steps: tasks blockIdx.x, + gridDim.x, ...; in each, the `steps` sub-steps of its item.
//
// HOST GUARANTEES (crates/df11-candle/src/cuda/forms/packed/tc.rs): those of df11_tc_stream.cu, and: partial holds rows8 * ipg * nb
// * 8 floats (rows8 = the row groups times 8), counters holds the row groups' counters, zero; 256 threads; dynamic
// shared memory 8 * TS_DEPTH stages.

#include <stdint.h>
#include <cuda_bf16.h>
#include "df11_tc_stream.cuh"

// A position in a warp's sequence of sub-steps: the task, the sub-step of its item, and where the sub-step reads.
struct TpPos {
    int task, s;
    bool live;             // the warp's row group of the task exists (and the task does)
    int cg;                // the sub-step's place in its row group: 8 k + m (chunk k, sub-step m)
    uint32_t chunk;        // DF11: its chunk of the unit
    long long at;          // twin: the lane's first weight's offset in the matrix
    int width;             // twin: the chunk's columns
    bool row_in;           // twin: the lane's row is a row of the matrix (else its stage is zero-filled)
};

// X STAGE: rows 0 .. nb - 1 of x at a sub-step's 256 columns (2048 k + 256 i + 32 m + 0 .. 31, passes i = 0 .. 7),
// TP_X_ROW bytes a row; the 16-byte unit u = 4 i + t (pass i, lane quad t: columns 2048 k + 256 i + 32 m + 8 t ..)
// of row b at unit u ^ 4 (b & 1), so the rows g and g + 1 of one 8-lane phase of a 128-bit load hit different banks.
#define TP_X_ROW 512

template <int MT, bool LOW, bool TWIN>
__device__ __forceinline__ void tc_panel(const FgPacked& pk, const TsTables& tabs, const uint8_t* sign_mantissa,
                                         const uint16_t* wd, const __nv_bfloat16* x, __nv_bfloat16* y, float* partial,
                                         uint32_t* counters, int nb, int rows, int cols, long long base, int steps) {
    // PDL (llm_common.cuh): the kernel after this one may start its CTAs now; they wait for this grid to complete.
    launch_dependents();
    // The twin's weights may be written by the kernel just before it (see df11_tc_stream.cu).
    if (TWIN) grid_dependency_wait();
    extern __shared__ __align__(16) uint8_t tp_smem[];
    constexpr int stage_bytes = TWIN ? TS_TWIN_STAGE : TS_STAGE;
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int ipg = tc_items_per_group(cols, steps);
    const int groups = (rows + 7) / 8, panels = (groups + TC_WARPS - 1) / TC_WARPS, ntasks = panels * ipg;
    const int xslot_bytes = nb * TP_X_ROW;
    uint8_t* xsm = tp_smem;                                     // two x stages, then the warps' rings
    uint8_t* ring = tp_smem + 2 * xslot_bytes + warp * (2 * stage_bytes);
    const uint32_t first_chunk = (uint32_t)(base >> 11);

    // Fills in where position p (task set, s = 0) reads; advance() moves one sub-step on.
    auto locate = [&](TpPos& p) {
        p.live = false;
        if (p.task >= ntasks) return;
        const int panel = p.task / ipg, j = p.task - panel * ipg, G = TC_WARPS * panel + (int)warp;
        p.live = G < groups;
        if (!p.live) return;
        p.cg = j * steps;
        if (TWIN) {
            const int c0 = 2048 * (p.cg >> 3);
            const int row = min(8 * G + (int)g, rows - 1);                           // past the matrix: zeroed
            p.row_in = 8 * G + (int)g < rows;
            p.width = min(2048, cols - c0);
            p.at = (long long)row * cols + c0 + 8 * (4 * (p.cg & 7) + (int)t);
        } else {
            p.chunk = first_chunk + (uint32_t)((G * ipg + j) * steps);
        }
    };
    auto advance = [&](TpPos& p) {
        if (++p.s < steps) {
            ++p.cg;
            p.at += 32;
            ++p.chunk;
            return;
        }
        p.s = 0;
        p.task += gridDim.x;
        locate(p);
    };

    // DF11: lane L's pair of the warp's sub-step 32 b + L (THE ESCAPE RANGES, df11_tc_stream.cuh).
    auto batch = [&](int b, uint32_t& lo, uint32_t& hi) {
        lo = hi = 0;
        if (TWIN) return;
        const int q = 32 * b + (int)lane, nth = q / steps, s = q - nth * steps;
        const long long task = (long long)blockIdx.x + (long long)gridDim.x * nth;
        if (task >= ntasks) return;
        const int panel = (int)task / ipg, j = (int)task - panel * ipg, G = TC_WARPS * panel + (int)warp;
        if (G < groups) {
            const uint32_t c = first_chunk + (uint32_t)((G * ipg + j) * steps + s);
            lo = __ldg(pk.chunk_escapes + c);
            hi = __ldg(pk.chunk_escapes + c + 1);
        }
    };
    TsRanges ranges;
    ts_ranges_start(ranges, batch);
    uint8_t* ring_lane = ring + 16 * lane;
    // Starts the copies of the warp's weights at position p into stage `slot` (none where it is not live).
    auto issue_w = [&](const TpPos& p, int slot) {
        uint32_t esc_lo = 0, esc_hi = 0;
        if (!TWIN) ts_ranges_next(ranges, batch, esc_lo, esc_hi);
        uint8_t* st = ring_lane + slot * stage_bytes;
        if (p.live) {
            if (TWIN) ts_stage_twin(st, wd + p.at, p.width, p.row_in);
            else ts_stage_df11(st, pk, sign_mantissa, p.chunk, esc_lo, esc_hi);
        }
    };
    // Starts the CTA's copies of x at sub-step s of `task` into x stage `slot` (every thread a share).
    auto issue_x = [&](int task, int s, int slot) {
        if (task >= ntasks) return;                             // CTA-uniform
        const int cg = (task % ipg) * steps + s, c0 = 2048 * (cg >> 3), W = min(2048, cols - c0);
        const int col = c0 + 32 * (cg & 7);
        uint8_t* xb = xsm + slot * xslot_bytes;
        for (int e = threadIdx.x; e < nb * 32; e += TC_THREADS) {
            const int b = e >> 5, u = e & 31, i = u >> 2;
            const bool ok = 256 * i < W;                        // the twin's narrower last chunk: not read
            const __nv_bfloat16* src = ok ? x + (long long)b * cols + col + 256 * i + 8 * (u & 3) : x;
            ts_copy16(xb + b * TP_X_ROW + ((u ^ ((b & 1) << 2)) << 4), src, ok ? 16u : 0u);
        }
    };
    // The lane's x rows in a stage: m-tile mt's rows 16 mt + g (a) and + 8 (b), clamped to nb - 1 as tc_x's (those
    // outputs are never stored), at byte xoff[mt][a/b][i & 1] + 64 i for pass i.
    int xoff[MT][2][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = min(16 * mt + 8 * h + (int)g, nb - 1), sw = 64 * (r & 1);
            xoff[mt][h][0] = r * TP_X_ROW + 16 * (int)t + sw;
            xoff[mt][h][1] = r * TP_X_ROW + 16 * (int)t - sw;
        }
    }

    // The table and the first weights, then (x is the kernel before's output) the first x.
    if (!TWIN) ts_stage_table(TC_THREADS);
    TpPos ahead = {(int)blockIdx.x, 0, false, 0, 0u, 0, 0, false};
    locate(ahead);
    issue_w(ahead, 0);
    ts_commit();
    // PDL: everything above reads only the weights; x, the partial sums, the counters and y come after the kernel
    // before this one has completed.
    grid_dependency_wait();
    issue_x(ahead.task, ahead.s, 0);
    ts_commit();
    advance(ahead);

    int cur = 0;                                                // the stage (x and weights) of this sub-step
    for (int task = blockIdx.x; task < ntasks; task += gridDim.x) {
        const int panel = task / ipg, j = task - panel * ipg, G = TC_WARPS * panel + (int)warp;
        const bool live = G < groups;                           // warp-uniform
        TcAcc<MT> acc;
        tc_acc_zero<MT>(acc);
        uint32_t t0 = 0, t1 = 0;
        if (!TWIN) ts_table_of(tabs, G, t0, t1);
        for (int s = 0; s < steps; ++s) {
            ts_wait_group_le<0>();                              // this thread's copies of the sub-step have landed
            // Every thread's: the x stage is whole, and every warp is done with the previous sub-step, whose stages
            // the next copies refill.
            __syncthreads();
            issue_w(ahead, cur ^ 1);
            issue_x(ahead.task, ahead.s, cur ^ 1);
            ts_commit();
            advance(ahead);
            const uint8_t* st = ring + cur * stage_bytes;
            const uint8_t* xb = xsm + cur * xslot_bytes;
            cur ^= 1;
            if (!live) continue;
            const int cg = j * steps + s, W = min(2048, cols - 2048 * (cg >> 3));
            auto mul = [&](int i, const uint32_t(&w)[4]) {
                if constexpr (LOW) {
                    tc_step_low(w, *reinterpret_cast<const uint4*>(xb + xoff[0][0][i & 1] + 64 * i), acc);
                } else {
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        const uint4 xa = *reinterpret_cast<const uint4*>(xb + xoff[mt][0][i & 1] + 64 * i);
                        const uint4 xq = *reinterpret_cast<const uint4*>(xb + xoff[mt][1][i & 1] + 64 * i);
                        tc_mma(acc[0][mt], xa.x, xq.x, xa.z, xq.z, w[0], w[2]);
                        tc_mma(acc[1][mt], xa.y, xq.y, xa.w, xq.w, w[1], w[3]);
                    }
                }
            };
            if (TWIN) ts_twin_passes(st, W, mul);
            else ts_df11_substep(st, t0, t1, pk, mul);
        }
        if (!live) continue;
        // The item's sums, then its count on the row group.
        const long long per_item = (long long)nb * 8;
        tc_store_item<MT, LOW>(acc, partial + ((long long)G * ipg + j) * per_item, nb);
        __threadfence();
        __syncwarp();
        uint32_t last = 0;
        if (lane == 0) last = atomicAdd(counters + G, 1u) == (uint32_t)(ipg - 1);
        if (!__shfl_sync(0xffffffffu, last, 0)) continue;
        // The row group's last item: every item's sums are visible; add them in item order.
        __threadfence();
        const float* q = partial + (long long)G * ipg * per_item;
        for (int o = (int)lane; o < nb * 8; o += 32) {
            const int b = o >> 3, r = 8 * G + (o & 7);
            float sum = 0.0f;
            for (int it = 0; it < ipg; ++it) sum += __ldcg(q + it * per_item + o);
            if (r < rows) y[(long long)b * rows + r] = __float2bfloat16_rn(sum);
        }
        if (lane == 0) counters[G] = 0u;
    }
    ts_wait_group_le<0>();
}

#define TP_PACKED_ARGS                                                                                               \
    const uint32_t *codes, const uint32_t *chunk_escapes, const uint8_t *lane_starts, uint32_t n_chunks,             \
        const uint8_t *escapes, uint32_t n_escapes, uint32_t t0, uint32_t t1, uint32_t t0b, uint32_t t1b,           \
        uint32_t t0c, uint32_t t1c, int g1, int g2, const uint8_t *sign_mantissa, const __nv_bfloat16 *x,           \
        __nv_bfloat16 *y, float *partial, uint32_t *counters, int nb, int rows, int cols, long long base, int steps
#define TP_TWIN_ARGS                                                                                                 \
    const uint16_t *w, const __nv_bfloat16 *x, __nv_bfloat16 *y, float *partial, uint32_t *counters, int nb,        \
        int rows, int cols, int steps

// 2 CTAs per SM up to two m-tiles (32 rows), 1 above (the x stages take the shared memory; the host's grid
// follows, tc_panel.rs).
// NAME: 8 (MT 1, nb <= 8), 1, 2, 4.
#define TP_MIN_CTAS(MT) ((MT) <= 2 ? 2 : 1)
#define TP_INSTANTIATE(NAME, MT, LOW)                                                                                \
    extern "C" __global__ void __launch_bounds__(TC_THREADS, TP_MIN_CTAS(MT)) df11_tc_panel_##NAME(TP_PACKED_ARGS) { \
        const FgPacked pk = {codes, chunk_escapes, lane_starts, n_chunks, escapes, n_escapes, t0, t1};              \
        const TsTables tabs = {t0, t1, t0b, t1b, t0c, t1c, g1, g2};                                                  \
        tc_panel<MT, LOW, false>(pk, tabs, sign_mantissa, nullptr, x, y, partial, counters, nb, rows, cols, base,   \
                                 steps);                                                                             \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(TC_THREADS, TP_MIN_CTAS(MT)) bf16_tc_panel_##NAME(TP_TWIN_ARGS) {  \
        const FgPacked pk = {};                                                                                      \
        const TsTables tabs = {};                                                                                    \
        tc_panel<MT, LOW, true>(pk, tabs, nullptr, w, x, y, partial, counters, nb, rows, cols, 0, steps);           \
    }

TP_INSTANTIATE(8, 1, true)
TP_INSTANTIATE(1, 1, false)
TP_INSTANTIATE(2, 2, false)
TP_INSTANTIATE(4, 4, false)
