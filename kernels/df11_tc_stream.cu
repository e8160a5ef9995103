// STREAMING tensor-core products: df11_tc_stream_* over a member in the TILE ORDER whose every sub-step is one whole
// 2048-element chunk of the packed form (cols % 2048 == 0, base % 2048 == 0), and bf16_tc_stream_*, their BF16 twin,
// for any matrix the tensor-core kernels take. Both follow THE TC SUMMATION CONTRACT of df11_tc.cu unchanged (same
// items, same mma order, same partial sums), so they are bit-identical to df11_tc.cu's kernels and to each other.
// Written for this project.
//
// Why (docs/PERFORMANCE.md): df11_tc.cu's DF11 kernel spends ~1,100 warp instructions per 2048 weights (0.575 a
// weight) and waits a full memory latency on every sub-step (long-scoreboard stalls dominate). Here:
//  - PIPELINE. Each warp walks its sequence of sub-steps (items warp, warp + 8, ... of each tile; tiles blockIdx.x,
//    + gridDim.x, ...) and keeps TS_DEPTH - 1 of them in flight with cp.async into a ring of shared-memory stages:
//    the sub-step's sign_mantissa (2048 B), codes (768 B), lane escape starts (32 B) and a window of its escapes (up
//    to TS_ESC_WIN bytes from the chunk's first, 16-byte aligned); the twin's stage is the sub-step's BF16 weights
//    (4 KB). Nothing of a sub-step but x (which stays in L1) is read from global memory while it computes.
//  - DECODE. Four codes become four exponents, escapes patched in, with one 8-byte lookup of a member-independent
//    table and two byte permutes (ts_table below), instead of a per-member lookup and a bit loop per escape. Above 8
//    rows of x (the kernels that are not LOW) the exponents come from byte permutes of the codes spread into nibbles
//    and only the escapes from a table, indexed by their bits (ts_decode8_bits: 10% faster there, 4% slower at 1 row).
//
// ESCAPES. A lane's escaped exponents in a sub-step are a run of the list from chunk_escapes[c] + lane_starts[32c + L]
// (df11_packed.cuh), consumed in pass order and element order. FAST (warp-uniform: every lane has at most 8 escapes
// and they lie in the window): the lane's next bytes are held in a 64-bit register, shifted out as they are used.
// SLOW (otherwise; rare: ~0.5% of sub-steps at a 3% escape rate): every pass reloads 8 bytes from global memory at the
// lane's cursor, with the clamped reads of the other packed kernels.
//
// HOST GUARANTEES (crates/df11-candle/src/cuda/forms/packed/tc.rs): sm_80 or newer; 256 threads; cols % 256 == 0, cols <= 2048 *
// 256; 1 <= nb <= 16 * MT (<= 8 for the LOW kernels); x (and the twin's w) 16-byte aligned and contiguous; DF11: the
// member [rows, cols] at base is whole, in the tile order, rows % 8 == 0, cols % 2048 == 0, base % 2048 == 0, its table
// is (t0, t1), and sign_mantissa, codes, lane_starts and escapes start 16-byte aligned (the packed buffers of
// df11_packed.cuh, escapes padded by 16 bytes); dynamic shared memory ts_smem_bytes (below, mirrored by the host).

#include <stdint.h>
#include <cuda_bf16.h>
#include "df11_tc_stream.cuh"


// A position in a warp's sequence of sub-steps: tile, item of the tile, sub-step of the item, and the item's index in
// the matrix (tile * items + item; its row group is index / items_per_group).
struct TsPos {
    int tile, item, s, index;
    bool live;             // a sub-step of the matrix (not past the warp's sequence)
    int cg;                // the sub-step's place in its row group: 8 k + m (chunk k, sub-step m)
    uint32_t chunk;        // DF11: its chunk of the unit
    long long at;          // twin: the lane's first weight's offset in the matrix
    int width;             // twin: W, the chunk's columns
    bool row_in;           // twin: the lane's row is a row of the matrix (else its stage is zero-filled)
};

// Dynamic shared memory of a launch: `nslots` slots of partial sums (16-byte aligned each), then the warps' stages
// (the DF11 kernels' table is ts_tab, static), TS_STAGE (DF11) or TS_TWIN_STAGE (twin) bytes each.
__device__ __forceinline__ int ts_partial_bytes(int tile_groups, int ipg, int nb) {
    return (tile_groups * ipg * nb * 32 + 15) & ~15;
}

// nslots (1, 2 or 4): how many tiles' partial sums a CTA keeps (its warps run up to nslots - 1 tiles apart).
template <int MT, bool LOW, bool TWIN>
__device__ __forceinline__ void tc_stream(const FgPacked& pk, const TsTables& tabs, const uint8_t* sign_mantissa,
                                          const uint16_t* wd, const __nv_bfloat16* x, __nv_bfloat16* y, int nb,
                                          int rows, int cols, long long base, int tile_groups, int steps, int nslots) {
    // PDL (llm_common.cuh): the kernel after this one may start its CTAs now; they wait for this grid to complete.
    launch_dependents();
    // The twin's weights may be written by the kernel just before it (a member decoded for it): were it launched with
    // PDL (the host does not), it would wait for that kernel before its prologue reads them.
    if (TWIN) grid_dependency_wait();
    extern __shared__ __align__(16) uint8_t ts_smem[];
    constexpr int stage_bytes = TWIN ? TS_TWIN_STAGE : TS_STAGE;
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int ipg = tc_items_per_group(cols, steps), items = tile_groups * ipg;
    const int groups = (rows + 7) / 8, ntiles = (groups + tile_groups - 1) / tile_groups;
    const int member_items = groups * ipg;
    const int slot_floats = ts_partial_bytes(tile_groups, ipg, nb) / 4;
    float* partial = reinterpret_cast<float*>(ts_smem);
    uint8_t* ring = ts_smem + 4 * slot_floats * nslots + warp * (TS_DEPTH * stage_bytes);
    // DF11: with whole chunks a row group's cols / 256 chunks are its items' sub-steps in order, so sub-step s of item
    // index I is chunk first_chunk + I * steps + s.
    const uint32_t first_chunk = (uint32_t)(base >> 11);

    // Fills in where position p (tile, item, index set; s = 0) reads; then advance() moves one sub-step on.
    auto locate = [&](TsPos& p) {
        p.live = p.tile < ntiles && p.item < items && p.index < member_items;
        if (!p.live) return;
        const int G = p.index / ipg;
        p.cg = (p.index - G * ipg) * steps;
        if (TWIN) {
            const int c0 = 2048 * (p.cg >> 3);
            const int row = min(8 * G + (int)g, rows - 1);                           // past the matrix: zeroed
            p.row_in = 8 * G + (int)g < rows;
            p.width = min(2048, cols - c0);
            p.at = (long long)row * cols + c0 + 8 * (4 * (p.cg & 7) + (int)t);
        } else {
            p.chunk = first_chunk + (uint32_t)(p.index * steps);
        }
    };
    auto advance = [&](TsPos& p) {
        if (++p.s < steps) {
            ++p.cg;
            p.at += 32;
            ++p.chunk;
            return;
        }
        p.s = 0;
        p.item += TC_WARPS;
        p.index += TC_WARPS;
        if (p.item >= items) {
            p.item = (int)warp;
            p.tile += gridDim.x;
            p.index = p.tile * items + p.item;
        }
        locate(p);
    };

    // DF11: lane L's pair of the warp's sub-step 32 j + L (THE ESCAPE RANGES, df11_tc_stream.cuh).
    const int per_tile = (items - (int)warp + TC_WARPS - 1) / TC_WARPS;   // the warp's items in a tile
    auto batch = [&](int j, uint32_t& lo, uint32_t& hi) {
        lo = hi = 0;
        if (TWIN || per_tile <= 0) return;
        const int q = 32 * j + (int)lane, nth_item = q / steps, s = q - nth_item * steps;
        const int tile = (int)blockIdx.x + (int)gridDim.x * (nth_item / per_tile);
        const int index = tile * items + (int)warp + TC_WARPS * (nth_item % per_tile);
        if (tile < ntiles && index < member_items) {
            const uint32_t c = first_chunk + (uint32_t)(index * steps + s);
            lo = __ldg(pk.chunk_escapes + c);
            hi = __ldg(pk.chunk_escapes + c + 1);
        }
    };
    TsRanges ranges;
    ts_ranges_start(ranges, batch);

    // Per lane: where its 16-byte pieces go in a stage and come from.
    uint8_t* ring_lane = ring + 16 * lane;
#ifdef TS_NO_DRAM
    int copies = 0;
#endif
    // Starts the copies of position p into stage `slot` (none past the sequence) and commits them as one group.
    auto issue = [&](const TsPos& p, int slot) {
        uint32_t esc_lo = 0, esc_hi = 0;
        if (!TWIN) ts_ranges_next(ranges, batch, esc_lo, esc_hi);
        uint8_t* st = ring_lane + slot * stage_bytes;
#ifdef TS_NO_DRAM   // diagnostic (wrong sums): a warp's first TS_DEPTH stages copied, then decoded again and again
        if (p.live && ++copies > TS_DEPTH) {
            ts_commit();
            return;
        }
#endif
        if (p.live) {
            if (TWIN) ts_stage_twin(st, wd + p.at, p.width, p.row_in);
            else ts_stage_df11(st, pk, sign_mantissa, p.chunk, esc_lo, esc_hi);
        }
        ts_commit();
    };

    // The table's copy (DF11) in its own group, the first TS_DEPTH - 1 sub-steps' copies, then the table awaited while
    // they fly.
    if (!TWIN) ts_stage_table<!LOW>(TC_THREADS);
    ts_commit();
    TsPos ahead = {(int)blockIdx.x, (int)warp, 0, (int)blockIdx.x * items + (int)warp, false, 0, 0u, 0, 0, false};
    locate(ahead);
#pragma unroll 1
    for (int d = 0; d < TS_DEPTH - 1; ++d) {
        issue(ahead, d);
        advance(ahead);
    }
    ts_wait_group_le<TS_DEPTH - 1>();                           // the table's group
    // PDL (llm_common.cuh; the host launches these kernels with the attribute on sm_90+,
    // crates/df11-candle/src/cuda/runtime/pdl.rs): everything above reads only the weights (the DF11 kernels' packed buffers,
    // written at load); x is read and y and the partial sums written only after the kernel before this one has
    // completed. Without the attribute this returns at once.
    grid_dependency_wait();
    __syncthreads();

    // PARTIAL SUMS. Tile iteration n's items write their sums into slot n % nslots; the tile's REDUCER (warp n % part)
    // waits on barrier FULL(slot) for every warp's sums, adds them per output in item order and releases the slot on
    // FREE(slot, parity) for tile iteration n + nslots, whose other warps wait on it before writing. So warps wait
    // only for a tile nslots back, not for each other at every tile. Warps past `part` (a tile with fewer than 8
    // items) take no part. Barrier ids: 0 __syncthreads, FULL 1 .. nslots, FREE after them (2 parities x nslots).
    const int part = min(TC_WARPS, items), threads = 32 * part;
    const int FULL = 1, FREE = 1 + nslots;
    int slot = 0;
    // The warp's first item of every tile is `warp`: its item in its row group and its row group in the tile.
    const int first_in_group = (int)warp % ipg, first_group = (int)warp / ipg;
    // Tile iteration n's slot ps = n % nslots, its parity (n / nslots) & 1 and its reducer n % part, kept as counters
    // (runtime divisions here were ~3% of the kernel's instructions at 1 row); `back` = nslots % part, so the reducer
    // of iteration n - nslots is reducer - back (mod part).
    const int back = nslots % part;
    int n = 0, ps = 0, parity = 0, reducer = 0;
    auto next_tile = [&]() {
        ++n;
        reducer = reducer + 1 == part ? 0 : reducer + 1;
        if (++ps == nslots) {
            ps = 0;
            parity ^= 1;
        }
    };
    for (int tile = blockIdx.x; (int)warp < part && tile < ntiles; tile += gridDim.x, next_tile()) {
        float* psum = partial + ps * slot_floats;
        const int freer = reducer - back < 0 ? reducer - back + part : reducer - back;   // iteration n - nslots's
        if (n >= nslots && (int)warp != freer) ts_bar_sync(FREE + nslots * parity + ps, threads);
        int in_group = first_in_group, G = tile * tile_groups + first_group;
        for (int item = warp; item < items; item += TC_WARPS) {
            if (item != (int)warp) {
                for (in_group += TC_WARPS; in_group >= ipg; in_group -= ipg) ++G;
            }
            TcAcc<MT> acc;
            tc_acc_zero<MT>(acc);
            // The item's member's exponent table (warp-uniform).
            uint32_t t0, t1;
            ts_table_of(tabs, G, t0, t1);
            for (int s = 0; s < steps; ++s) {
                __syncwarp();                                   // every lane is done with the slot refilled now
                // LOW: the sub-step's x row g, or row nb - 1 for g >= nb (tc_x's rule: those rows of the mma's output
                // are never stored, and the loads need no predicate or zeroing).
                uint4 xr[8];
                if (LOW) {
                    const int cg = in_group * steps + s;
                    const uint4* xp = reinterpret_cast<const uint4*>(
                        x + (long long)min((int)g, nb - 1) * cols + 2048 * (cg >> 3) + 32 * (cg & 7) + 8 * (int)t);
                    const int W = min(2048, cols - 2048 * (cg >> 3));   // the twin's last chunk may be narrower
#pragma unroll
                    for (int i = 0; i < 8; ++i)                          // DF11: whole chunks, W == 2048
                        xr[i] = !TWIN || 256 * i < W ? __ldg(xp + 32 * i) : make_uint4(0u, 0u, 0u, 0u);
                }
                issue(ahead, slot == 0 ? TS_DEPTH - 1 : slot - 1);
                advance(ahead);
                ts_wait_group_le<TS_DEPTH - 1>();               // the oldest stage has landed
                __syncwarp();                                   // the stage's bytes, copied by every lane, are here
                const uint8_t* st = ring + slot * stage_bytes;
                slot = slot + 1 == TS_DEPTH ? 0 : slot + 1;
                if (G >= groups) continue;                      // warp-uniform: past the last row group
                // The sub-step (k, m) of the row group: x columns 2048 k + 8 (4 m + t) + 256 i.
                const int cg = in_group * steps + s;
                const TcX<MT> xs = tc_x<MT, LOW>(x, cols, nb, 2048 * (cg >> 3) + 32 * (cg & 7) + 8 * (int)t);
                auto mul = [&](int i, const uint32_t(&w)[4]) { ts_mul<MT, LOW>(w, xs, xr, i, acc); };
                if (TWIN) {
                    ts_twin_passes(st, min(2048, cols - 2048 * (cg >> 3)), mul);
                } else {
                    ts_df11_substep<!LOW>(st, t0, t1, pk, mul);
                }
            }
            tc_store_item<MT, LOW>(acc, psum + (long long)item * nb * 8, nb);
        }
        if ((int)warp != reducer) {
            ts_bar_arrive(FULL + ps, threads);
            continue;
        }
        ts_bar_sync(FULL + ps, threads);
        // Each output of the tile: its row group's items in order.
        for (int i = lane; i < tile_groups * 8 * nb; i += 32) {
            const int rr = i / nb, b = i % nb, r = tile * tile_groups * 8 + rr;
            if (r < rows) {
                const float* p = psum + (long long)(rr / 8) * ipg * nb * 8 + b * 8 + (rr % 8);
                float sum = 0.0f;
                for (int it = 0; it < ipg; ++it) sum += p[(long long)it * nb * 8];
                y[(long long)b * rows + r] = __float2bfloat16_rn(sum);
            }
        }
        __syncwarp();
        if (tile + nslots * (int)gridDim.x < ntiles) ts_bar_arrive(FREE + nslots * (parity ^ 1) + ps, threads);
    }
    ts_wait_group_le<0>();
}

#define TS_PACKED_ARGS                                                                                               \
    const uint32_t *codes, const uint32_t *chunk_escapes, const uint8_t *lane_starts, uint32_t n_chunks,             \
        const uint8_t *escapes, uint32_t n_escapes, uint32_t t0, uint32_t t1, uint32_t t0b, uint32_t t1b,           \
        uint32_t t0c, uint32_t t1c, int g1, int g2, const uint8_t *sign_mantissa, const __nv_bfloat16 *x,           \
        __nv_bfloat16 *y, int nb, int rows, int cols, long long base, int tile_groups, int steps, int nslots
#define TS_TWIN_ARGS                                                                                                 \
    const uint16_t *w, const __nv_bfloat16 *x, __nv_bfloat16 *y, int nb, int rows, int cols, int tile_groups,       \
        int steps, int nslots

// 2 CTAs per SM where the shared memory allows (the host's grid follows, tc/stream.rs). TS_LOW_CTAS: the DF11 kernel
// of 8 rows or fewer compiled for more, for measurements (3: 80 registers with spills, 0.134 against 0.112 ms a
// Qwen3-8B layer at 1 row, H200, docs/PERFORMANCE.md, 2026-11-28; the host launches what the driver says fits).
#ifndef TS_LOW_CTAS
#define TS_LOW_CTAS 2
#endif
// NAME: 8 (MT 1, nb <= 8), 1, 2, 4.
#define TS_INSTANTIATE(NAME, MT, LOW)                                                                                \
    extern "C" __global__ void __launch_bounds__(TC_THREADS, LOW ? TS_LOW_CTAS : 2) df11_tc_stream_##NAME(TS_PACKED_ARGS) { \
        const FgPacked pk = {codes, chunk_escapes, lane_starts, n_chunks, escapes, n_escapes, t0, t1};              \
        const TsTables tabs = {t0, t1, t0b, t1b, t0c, t1c, g1, g2};                                                  \
        tc_stream<MT, LOW, false>(pk, tabs, sign_mantissa, nullptr, x, y, nb, rows, cols, base, tile_groups, steps, \
                                  nslots);                                                                           \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(TC_THREADS, 2) bf16_tc_stream_##NAME(TS_TWIN_ARGS) {               \
        const FgPacked pk = {};                                                                                      \
        const TsTables tabs = {};                                                                                    \
        tc_stream<MT, LOW, true>(pk, tabs, nullptr, w, x, y, nb, rows, cols, 0, tile_groups, steps, nslots);        \
    }


TS_INSTANTIATE(8, 1, true)
TS_INSTANTIATE(1, 1, false)
TS_INSTANTIATE(2, 2, false)
TS_INSTANTIATE(4, 4, false)
