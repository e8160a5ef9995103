// TEAM tensor-core products: df11_tc_team_* over a member in the TILE ORDER whose sub-steps are whole 2048-element
// chunks of the packed form (or stacked such members: the matrices df11_tc_stream.cu takes), and bf16_tc_team_*, their
// BF16 twin, for any [rows, cols] BF16 matrix with cols % 2048 == 0. Both follow THE TC SUMMATION CONTRACT of
// df11_tc.cu unchanged (same items, same mma.sync instructions on the same operands, item partials P + Q added in item
// order from 0.0f), so they are bit-identical to every other tensor-core kernel and to each other. Written for this
// project.
//
// Why (docs/PERFORMANCE.md, sessions 16-20): in the streaming and panel kernels every warp decodes its own weights and
// multiplies them by x rows it loads itself. Above 8 rows that costs twice: a warp holds the accumulators of every
// 16-row m-tile of x for its row group, and x is read once per row group (streaming) or staged and rebuilt into A
// fragments per warp (panel). Here a CTA is a TEAM of two kinds of warps:
//  - DECODERS (DF11: packed exponents + sign_mantissa -> BF16, the streaming kernels' stages and decode; twin: plain
//    cp.async copies) write each sub-step of a TILE of R row groups ONCE into a ring of shared-memory SLOTS, in the
//    order the mma takes them: slot[r][pass i][lane] = lane's four BF16 pairs of pass i of row group r (its B
//    fragments for P and Q), so a multiplier reads them with one conflict-free 128-bit load. The sub-step's x columns
//    (all nb rows) go into the slot beside them by cp.async, issued before the decode so that it hides their latency.
//  - MULTIPLIERS: Q warps per 16 rows of x (an m-tile), each taking R / Q of the row groups, read their fragments and
//    x from the slot and keep the tile's sums in registers: the item partials P + Q of each row group, added in item
//    order as every sub-step block ends. No partial sums cross warps or CTAs: a tile is all the columns of its row
//    groups. Several multipliers spread the mma over the SM's four tensor cores.
// A weight is decoded once for all rows of x; decoding and multiplying overlap across warps (the slots in flight)
// instead of inside one warp's instruction stream.
//
// SLOTS AND BARRIERS. The CTA's sub-steps are numbered n = (its tile iteration) * nsub + cg (cg = 8 k + m: chunk k,
// sub-step m of every row group of the tile; nsub = cols / 256). Sub-step n lives in slot n % S: R x TT_SLOT_RG bytes
// of weights, then nb x TT_X_ROW bytes of x (row b's 16-byte unit u = 4 i + t, pass i, lane quad t, at unit
// u ^ 4 (b & 1): the rows g, g + 1 of one 8-lane phase of a 128-bit load hit different banks). Decoder warp d takes
// row group r = d % R of the sub-steps with n % P == d / R (P = D / R decoders per row group) and copies x's units
// r, r + R, ... FULL(s) (named barrier 1 + s) is reached by the sub-step's R decoders (bar.arrive, after their writes
// and their copies have landed) and the M = C Q multipliers (bar.sync); EMPTY(s) (1 + S + s) by the multipliers once
// they have read the slot (bar.arrive) and the R decoders of the sub-step S later (bar.sync, before they write it
// again). Both count 32 (R + M) threads. Barrier 0 is __syncthreads (the table, at the start). S <= 7.
//
// HOST GUARANTEES (crates/df11-candle/src/cuda/tc/team.rs): sm_80 or newer; blockDim = 32 (D + C Q), D = R P with P
// in {1, 2, 4, 8}, Q in {1, 2, 4} dividing R, C = 1 (LOW, 1 <= nb <= 8) or ceil(nb / 16) (else); P < S <= 7
// and S % P == 0 (a slot's sub-steps all fall to the same decoders: no two decoder groups wait on one EMPTY barrier);
// cols % 2048 == 0, cols <= 2048 * 256; x (and the twin's w) contiguous and 16-byte aligned; DF11: the matrix
// [rows, cols] at base is one whole tiled member or whole stacked tiled members (TsTables), rows % 8 == 0, base % 2048
// == 0, the packed buffers of df11_packed.cuh (escapes padded by 16 bytes); dynamic shared memory tt_smem_bytes
// (below, mirrored by the host); steps in {1, 2, 4, 8} (TcTiling's).

#include <stdint.h>
#include <cuda_bf16.h>
#include "df11_tc_stream.cuh"

#define TT_SLOT_RG 4096                 // a row group's sub-step in a slot: 8 passes x 32 lanes x 16 B
#define TT_X_ROW 512                    // a row of x in a slot: the sub-step's 256 columns
#define TT_MAX_SLOTS 7

// Dynamic shared memory: S slots of R row groups and nb rows of x, then (DF11) the decoders' stages, TS_DEPTH of
// TS_STAGE each.
__host__ __device__ constexpr int tt_smem_bytes(int R, int S, int D, int nb, bool twin) {
    return S * (R * TT_SLOT_RG + nb * TT_X_ROW) + (twin ? 0 : D * TS_DEPTH * TS_STAGE);
}

// A decoder's job: its tile iteration, the tile, its sub-step u among the warp's of the tile.
struct TtJob {
    int it, tile, u;
};

// Starts a decoder's copies of its share of sub-step cg's x into the slot's x area (units r, r + R, ... of the nb x
// 32 units); the caller commits them.
__device__ __forceinline__ void tt_stage_x(uint8_t* xs, const __nv_bfloat16* x, int nb, int cols, int cg, int r,
                                           int R) {
    const int lane = (int)(threadIdx.x & 31);
    const __nv_bfloat16* src = x + 2048 * (cg >> 3) + 32 * (cg & 7);
    for (int k = r + R * lane; k < nb * 32; k += 32 * R) {
        const int b = k >> 5, u = k & 31;                        // row, unit 4 i + t
        ts_copy16(xs + b * TT_X_ROW + ((u ^ ((b & 1) << 2)) << 4), src + (long long)b * cols + 256 * (u >> 2) + 8 * (u & 3),
                  16);
    }
}

template <int R, bool LOW, bool TWIN>
__device__ __forceinline__ void tc_team(const FgPacked& pk, const TsTables& tabs, const uint8_t* sign_mantissa,
                                        const uint16_t* wd, const __nv_bfloat16* x, __nv_bfloat16* y, int nb,
                                        int rows, int cols, long long base, int steps, int D, int S, int Q) {
    // PDL (llm_common.cuh): the kernel after this one may start its CTAs now; they wait for this grid to complete.
    launch_dependents();
    // x is written by the kernel before this one, and the twin's weights may be (a member decoded for it): every
    // warp waits before it reads them. (The DF11 decoders' first stages, weights only, are issued before.)
    if (TWIN) grid_dependency_wait();
    extern __shared__ __align__(16) uint8_t tt_smem[];
    const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5), g = lane >> 2, t = lane & 3;
    const int M = (int)(blockDim.x >> 5) - D;                        // multiplier warps
    const int nsub = cols >> 8, groups = (rows + 7) >> 3, ntiles = (groups + R - 1) / R;
    const int bar_threads = 32 * (R + M);
    const int FULL = 1, EMPTY = 1 + S;
    uint8_t* ring = tt_smem;
    const int wbytes = R * TT_SLOT_RG, slot_bytes = wbytes + nb * TT_X_ROW;

    if (!TWIN) ts_stage_table((int)blockDim.x);
    ts_commit();

    if (warp < D) {
        // ---------------------------------------------------------------- DECODER
        const int P = D / R, r = warp % R, par = warp / R;
        const int njobs = nsub / P;                                  // the warp's sub-steps of a tile
        auto live = [&](const TtJob& j) { return j.tile < ntiles; };
        auto next = [&](TtJob& j) {
            if (++j.u == njobs) {
                j.u = 0;
                ++j.it;
                j.tile += (int)gridDim.x;
            }
        };
        // Sub-step n of the CTA's sequence, its cg, and the row group of job j.
        auto seq = [&](const TtJob& j) { return j.it * nsub + par + P * j.u; };
        auto cg_of = [&](const TtJob& j) { return par + P * j.u; };
        auto group_of = [&](const TtJob& j) { return j.tile * R + r; };
        if constexpr (TWIN) {
            // The twin's decoders copy the lane's 16-byte pieces of each pass into the slot (ts_stage_twin's
            // layout: pass i at 512 i + 16 lane) and their share of x, two sub-steps in flight: a slot's FULL
            // arrival waits for the sub-step's copies while the next one's fly.
            ts_wait_group_le<0>();
            __syncthreads();
            int prev_slot = -1;
            for (TtJob j = {0, (int)blockIdx.x, 0}; live(j); next(j)) {
                const int n = seq(j), slot = n % S;
                if (n >= S) ts_bar_sync(EMPTY + slot, bar_threads);
                const int G = group_of(j), cg = cg_of(j);
                uint8_t* sl = ring + slot * slot_bytes;
                if (G < groups) {
                    const int row = 8 * G + g;
                    const long long at = (long long)min(row, rows - 1) * cols + 2048 * (cg >> 3) + 32 * (cg & 7) + 8 * t;
                    ts_stage_twin(sl + r * TT_SLOT_RG + 16 * lane, wd + at, 2048, row < rows);
                }
                tt_stage_x(sl + wbytes, x, nb, cols, cg, r, R);
                ts_commit();
                if (prev_slot >= 0) {
                    ts_wait_group_le<1>();
                    __syncwarp();
                    ts_bar_arrive(FULL + prev_slot, bar_threads);
                }
                prev_slot = slot;
            }
            if (prev_slot >= 0) {
                ts_wait_group_le<0>();
                __syncwarp();
                ts_bar_arrive(FULL + prev_slot, bar_threads);
            }
        } else {
            // DF11: the streaming kernels' stages per decoder warp. A job's GROUP of copies is its packed runs (into
            // the warp's stage) and its share of x (into its slot, once the slot is free: EMPTY); the next job's
            // group flies while the warp decodes the current job into its slot, then arrives on FULL. (So a decoder
            // waits on EMPTY for its next slot before it arrives for the current one: with S > P slots the
            // multipliers never need a sub-step the waiting decoders hold back.)
            uint8_t* stages = tt_smem + S * slot_bytes + warp * (TS_DEPTH * TS_STAGE);
            const uint32_t first_chunk = (uint32_t)(base >> 11);
            auto chunk_of = [&](const TtJob& j) { return first_chunk + (uint32_t)(group_of(j) * nsub + cg_of(j)); };
            // THE ESCAPE RANGES (df11_tc_stream.cuh): lane L's pair of the warp's job 32 b + L.
            auto batch = [&](int b, uint32_t& lo, uint32_t& hi) {
                lo = hi = 0;
                const int q = 32 * b + lane, it = q / njobs;
                const TtJob j = {it, (int)blockIdx.x + (int)gridDim.x * it, q - it * njobs};
                if (live(j) && group_of(j) < groups) {
                    const uint32_t c = chunk_of(j);
                    lo = __ldg(pk.chunk_escapes + c);
                    hi = __ldg(pk.chunk_escapes + c + 1);
                }
            };
            TsRanges ranges;
            ts_ranges_start(ranges, batch);
            auto stage_weights = [&](const TtJob& j, int stage) {
                uint32_t lo, hi;
                ts_ranges_next(ranges, batch, lo, hi);
                if (live(j) && group_of(j) < groups)
                    ts_stage_df11(stages + stage * TS_STAGE + 16 * lane, pk, sign_mantissa, chunk_of(j), lo, hi);
            };
            auto stage_x = [&](const TtJob& j) {
                if (!live(j)) return;
                const int n = seq(j);
                if (n >= S) ts_bar_sync(EMPTY + n % S, bar_threads);
                tt_stage_x(ring + (n % S) * slot_bytes + wbytes, x, nb, cols, cg_of(j), r, R);
            };
            TtJob ahead = {0, (int)blockIdx.x, 0};
            stage_weights(ahead, 0);
            // PDL: everything above reads only the weights; x only after the kernel before has completed.
            grid_dependency_wait();
            stage_x(ahead);                                          // seq < P < S: no wait
            ts_commit();
            next(ahead);
            ts_wait_group_le<0>();                                   // the table and the first job
            __syncthreads();                                         // everyone's table copies
            int stage = 0;
            for (TtJob j = {0, (int)blockIdx.x, 0}; live(j); next(j)) {
                stage_weights(ahead, stage ^ 1);
                stage_x(ahead);
                ts_commit();
                next(ahead);
                ts_wait_group_le<1>();                               // this job's group has landed
                __syncwarp();
                const int n = seq(j), slot = n % S, G = group_of(j);
                const uint8_t* st = stages + stage * TS_STAGE;
                stage ^= 1;
                if (G < groups) {
                    uint32_t t0, t1;
                    ts_table_of(tabs, G, t0, t1);
                    uint4* out = reinterpret_cast<uint4*>(ring + slot * slot_bytes + r * TT_SLOT_RG) + lane;
                    ts_df11_substep(st, t0, t1, pk, [&](int i, const uint32_t(&w)[4]) {
                        out[32 * i] = make_uint4(w[0], w[1], w[2], w[3]);
                    });
                }
                __syncwarp();                                        // the stage is read: the next group may refill it
                ts_bar_arrive(FULL + slot, bar_threads);
            }
            ts_wait_group_le<0>();
        }
        return;
    }

    // -------------------------------------------------------------------- MULTIPLIER
    ts_wait_group_le<0>();
    __syncthreads();
    // y: written only after the kernel before has completed (it may still read memory y now takes).
    grid_dependency_wait();
    const int m = warp - D, c = m / Q, rpw = R / Q, r0 = (m - c * Q) * rpw;   // m-tile c, row groups r0 ..
    // The lane's x rows (tc_x's rule: a row past nb reads row nb - 1; those outputs are never stored). LOW: row g
    // only (P's rows g, Q's rows g + 8 of the m-tile, tc_step_low).
    const int ba = 16 * c + g, bb = ba + 8;
    // Row b's unit 4 i + t sits at 64 (i ^ (b & 1)) + 16 t of its row (the slot swizzle): bit 6 of the offset, which
    // nothing else in a slot's address sets (slots and rows are multiples of 512 bytes), flips with b & 1.
    const int ra = min(ba, nb - 1), rb = min(bb, nb - 1);
    const int xa = wbytes + ra * TT_X_ROW + 16 * t, xb = wbytes + rb * TT_X_ROW + 16 * t;
    const int fa = 64 * (ra & 1), fb = 64 * (rb & 1);
    constexpr int E = LOW ? 2 : 4;                                   // outputs a lane holds per row group
    int slot = 0;
    for (int tile = (int)blockIdx.x; tile < ntiles; tile += (int)gridDim.x) {
        float tot[R][E];
        float acc[R][2][4];
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
            for (int e = 0; e < E; ++e) tot[r][e] = 0.0f;
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[r][h][e] = 0.0f;
        }
        const int mine = min(rpw, groups - tile * R - r0);          // warp-uniform; may be <= 0
        for (int cg = 0; cg < nsub; ++cg) {
            ts_bar_sync(FULL + slot, bar_threads);
            const uint8_t* sl = ring + slot * slot_bytes;
            const uint4* wl = reinterpret_cast<const uint4*>(sl + r0 * TT_SLOT_RG) + lane;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const uint4 qa = *reinterpret_cast<const uint4*>(sl + ((xa + 64 * i) ^ fa));
                const uint4 qb = LOW ? qa : *reinterpret_cast<const uint4*>(sl + ((xb + 64 * i) ^ fb));
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (r >= mine) break;
                    const uint4 wv = wl[(r * 8 + i) * 32];
                    if (LOW) {
                        tc_mma(acc[r][0], qa.x, qa.y, qa.z, qa.w, wv.x, wv.z);
                        tc_mma(acc[r][1], qa.x, qa.y, qa.z, qa.w, wv.y, wv.w);
                    } else {
                        tc_mma(acc[r][0], qa.x, qb.x, qa.z, qb.z, wv.x, wv.z);
                        tc_mma(acc[r][1], qa.y, qb.y, qa.w, qb.w, wv.y, wv.w);
                    }
                }
            }
            __syncwarp();
            ts_bar_arrive(EMPTY + slot, bar_threads);
            slot = slot + 1 == S ? 0 : slot + 1;
            if (((cg + 1) & (steps - 1)) == 0) {
                // An item ends: its partial P + Q of each output, added to the tile's sums in item order.
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (LOW) {
                        tot[r][0] += acc[r][0][0] + acc[r][1][2];
                        tot[r][1] += acc[r][0][1] + acc[r][1][3];
                    } else {
#pragma unroll
                        for (int e = 0; e < 4; ++e) tot[r][e] += acc[r][0][e] + acc[r][1][e];
                    }
#pragma unroll
                    for (int h = 0; h < 2; ++h)
#pragma unroll
                        for (int e = 0; e < 4; ++e) acc[r][h][e] = 0.0f;
                }
            }
        }
        // The tile's outputs: lane (g, t) holds W rows 8 G + 2 t, + 1 for x rows ba (and bb).
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r >= mine) break;
            const int row = 8 * (tile * R + r0 + r) + 2 * t;
            auto put = [&](int b, float v0, float v1) {
                if (b >= nb) return;
                if (row < rows) y[(long long)b * rows + row] = __float2bfloat16_rn(v0);
                if (row + 1 < rows) y[(long long)b * rows + row + 1] = __float2bfloat16_rn(v1);
            };
            put(ba, tot[r][0], tot[r][1]);
            if (!LOW) put(bb, tot[r][E - 2], tot[r][E - 1]);
        }
    }
}

#define TT_PACKED_ARGS                                                                                               \
    const uint32_t *codes, const uint32_t *chunk_escapes, const uint8_t *lane_starts, uint32_t n_chunks,             \
        const uint8_t *escapes, uint32_t n_escapes, uint32_t t0, uint32_t t1, uint32_t t0b, uint32_t t1b,           \
        uint32_t t0c, uint32_t t1c, int g1, int g2, const uint8_t *sign_mantissa, const __nv_bfloat16 *x,           \
        __nv_bfloat16 *y, int nb, int rows, int cols, long long base, int steps, int decoders, int slots,            \
        int per_tile
#define TT_TWIN_ARGS                                                                                                 \
    const uint16_t *w, const __nv_bfloat16 *x, __nv_bfloat16 *y, int nb, int rows, int cols, int steps,             \
        int decoders, int slots, int per_tile

// One CTA per SM (the DF11 kernels' table, stages and slots fill most of its shared memory); at most 16 warps.
// NAME: R (row groups a tile) and low (1-8 rows of x) or m (9-128 rows, per_tile (Q) multipliers per 16).
#define TT_INSTANTIATE(NAME, R, LOW)                                                                                 \
    extern "C" __global__ void __launch_bounds__(512, 1) df11_tc_team_##NAME(TT_PACKED_ARGS) {                      \
        const FgPacked pk = {codes, chunk_escapes, lane_starts, n_chunks, escapes, n_escapes, t0, t1};              \
        const TsTables tabs = {t0, t1, t0b, t1b, t0c, t1c, g1, g2};                                                  \
        tc_team<R, LOW, false>(pk, tabs, sign_mantissa, nullptr, x, y, nb, rows, cols, base, steps, decoders,      \
                               slots, per_tile);                                                                     \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(512, 1) bf16_tc_team_##NAME(TT_TWIN_ARGS) {                        \
        const FgPacked pk = {};                                                                                      \
        const TsTables tabs = {};                                                                                    \
        tc_team<R, LOW, true>(pk, tabs, nullptr, w, x, y, nb, rows, cols, 0, steps, decoders, slots, per_tile);     \
    }

TT_INSTANTIATE(2_low, 2, true)
TT_INSTANTIATE(2_m, 2, false)
TT_INSTANTIATE(4_low, 4, true)
TT_INSTANTIATE(4_m, 4, false)
