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
//    table and two byte permutes (ts_table below), instead of a per-member lookup and a bit loop per escape.
//
// ESCAPES. A lane's escaped exponents in a sub-step are a run of the list from chunk_escapes[c] + lane_starts[32c + L]
// (df11_packed.cuh), consumed in pass order and element order. FAST (warp-uniform: every lane has at most 8 escapes
// and they lie in the window): the lane's next bytes are held in a 64-bit register, shifted out as they are used.
// SLOW (otherwise; rare: ~0.5% of sub-steps at a 3% escape rate): every pass reloads 8 bytes from global memory at the
// lane's cursor, with the clamped reads of the other packed kernels.
//
// HOST GUARANTEES (crates/df11-candle/src/cuda/tc.rs): sm_80 or newer; 256 threads; cols % 256 == 0, cols <= 2048 *
// 256; 1 <= nb <= 16 * MT (<= 8 for the LOW kernels); x (and the twin's w) 16-byte aligned and contiguous; DF11: the
// member [rows, cols] at base is whole, in the tile order, rows % 8 == 0, cols % 2048 == 0, base % 2048 == 0, its table
// is (t0, t1), and sign_mantissa, codes, lane_starts and escapes start 16-byte aligned (the packed buffers of
// df11_packed.cuh, escapes padded by 16 bytes); dynamic shared memory ts_smem_bytes (below, mirrored by the host).

#include <stdint.h>
#include <cuda_bf16.h>
#include "df11_packed.cuh"
#include "df11_tc.cuh"
#include "llm_common.cuh"

// Stages per warp: TS_DEPTH - 1 sub-steps in flight (another value only by -D for measurements, with
// DF11_TC_STREAM_DEPTH: crates/df11-candle/src/cuda/tc.rs).
#ifndef TS_DEPTH
#define TS_DEPTH 2
#endif
#define TS_ESC_WIN 256                       // bytes of a chunk's escapes staged (from its first, 16-byte aligned)
#define TS_SM 0                              // DF11 stage: sign_mantissa, 2048 B
#define TS_CODES 2048                        //   codes, 768 B
#define TS_LANES (TS_CODES + 768)            //   the chunk's 32 lane starts
#define TS_WIN (TS_LANES + 32)               //   the escape window
#define TS_HEAD (TS_WIN + TS_ESC_WIN)        //   chunk's first escape, window start, chunk's escape count (u32)
#define TS_STAGE (TS_HEAD + 16)              // 3120 B
#define TS_TWIN_STAGE 4096                   // twin stage: 8 passes x 32 lanes x 16 B
#define TS_TABLE_BYTES (8 * 4096)

// THE ESCAPE TABLE, indexed by four codes (12 bits, code k at bits 3k): 4096 words .x, then 4096 words .y. Entry .x:
// bits 0-15 the byte selector that takes each code's exponent from the member's table (t0: codes 0-3, t1: codes 4-7,
// code 7 -> 0), bits 16-23 eight times the number of escaped codes (code 7) among the four. Entry .y: the byte selector
// that keeps byte k of that word for a code below 7 and takes byte r of the held escapes for the r-th escaped code. So
//     exponents = prmt(prmt(t0, t1, .x), held, .y);  held >>= .x >> 16;
// decodes four codes with their escapes. It does not depend on the member: one table serves every launch.
struct __align__(16) TsTable {
    uint32_t e[2 * 4096];
    constexpr TsTable() : e() {
        for (uint32_t i = 0; i < 4096; ++i) {
            uint32_t spread = 0, pick = 0, n = 0;
            for (uint32_t k = 0; k < 4; ++k) {
                const uint32_t c = (i >> (3 * k)) & 7u;
                spread |= c << (4 * k);
                pick |= (c == 7u ? 4u + n++ : k) << (4 * k);
            }
            e[i] = spread | ((8u * n) << 16);
            e[4096 + i] = pick;
        }
    }
};
__device__ const TsTable ts_table;
// Its copy in shared memory (DF11 kernels only: a file-scope array is allocated in the kernels that use it), at a
// fixed address, so a lookup is one LDS with the table's offset as its immediate.
__shared__ __align__(16) uint32_t ts_tab[2 * 4096];

// prmt with a run-time selector (__byte_perm masks each selector nibble with a logic op first; ours never set bit 3
// of a nibble, and prmt reads only the low 16 bits).
__device__ __forceinline__ uint32_t ts_prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

__device__ __forceinline__ void ts_copy16(void* dst, const void* src, uint32_t src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    // L2::128B: L2 fetches the whole 128-byte line of each copy (the twin at 1-8 rows: 0.184 -> 0.174 ms a
    // Qwen3-8B layer at 1 row, 0.206 -> 0.188 at 8; DF11 unchanged; 256B was slower at 8 rows; H100).
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes)
                 : "memory");
#else
    __trap();   // the host never launches these kernels below sm_80
#endif
}

__device__ __forceinline__ void ts_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most N of the thread's copy groups are pending (the older ones have landed).
template <int N>
__device__ __forceinline__ void ts_wait_group_le() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Named barriers (ids 1..): the partial-sum hand-off between a tile's warps and its reducer (tc_stream).
__device__ __forceinline__ void ts_bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void ts_bar_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Eight escape bytes from list index `at`, read from global memory (clamped as fp_fetch_run's).
__device__ __forceinline__ unsigned long long ts_fetch8(const FgPacked& pk, uint32_t at) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(pk.escapes);
    const uint32_t w = min(at >> 2, pk.n_escapes / 4 - 3), sh = 8 * (at & 3);
    const uint32_t w0 = __ldg(words + w), w1 = __ldg(words + w + 1), w2 = __ldg(words + w + 2);
    return ((unsigned long long)__funnelshift_r(w1, w2, sh) << 32) | __funnelshift_r(w0, w1, sh);
}

// One pass's two mma per m-tile. LOW (8 rows of x or fewer): x was loaded into xr before the sub-step's stage was
// awaited (its latency then overlaps the wait: 0.163 -> 0.157 ms a Qwen3-8B layer at 1 row, 0.201 -> 0.189 at 8,
// H100, docs/PERFORMANCE.md); the products of tc_step's, Q's in the m-tile's rows g + 8 instead of g (an mma computes
// every row alike: tc_exact checks LOW against df11_tc.cu bit for bit), so the same sums. Above 8 rows the 16-row
// m-tiles would need 64 more registers: tc_step loads x pass by pass.
template <int MT, bool LOW>
__device__ __forceinline__ void ts_mul(const uint32_t (&w)[4], const TcX<MT>& xs, const uint4 (&xr)[8], int i,
                                       TcAcc<MT>& acc) {
    if constexpr (LOW) {
        tc_step_low(w, xr[i], acc);
    } else {
        tc_step<MT, LOW>(w, xs, i, acc);
    }
}

// One DF11 sub-step from its stage st: for each pass, the lane's 8 codes -> exponents with escapes (ts_table) -> BF16
// pairs -> two mma per m-tile. FAST: `held` holds the lane's escapes; SLOW: they are read at `cursor` every pass.
template <int MT, bool LOW, bool SLOW>
__device__ __forceinline__ void ts_passes(const uint8_t* st, uint32_t t0, uint32_t t1, unsigned long long held,
                                          uint32_t cursor, const FgPacked& pk, const TcX<MT>& xs,
                                          const uint4 (&xr)[8], TcAcc<MT>& acc) {
    const uint32_t lane = threadIdx.x & 31;
    // The lane's 8-group of pass i is the 24 bits at byte 3 (lane + 32 i) of the codes.
    const uint32_t* cw = reinterpret_cast<const uint32_t*>(st + TS_CODES);
    const uint32_t w0 = (3 * lane) >> 2, sh = ((lane & 3) * 24) & 31;
    const uint2* smv = reinterpret_cast<const uint2*>(st + TS_SM);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const uint32_t v = __funnelshift_r(cw[w0 + 24 * i], cw[w0 + 24 * i + 1], sh);
        // .x for every four codes; .y only by the lanes with an escape among them (~10% of lanes): a predicated-off
        // lane takes no part in the bank conflicts of random lookups. (One 8-byte lookup of both: 3.6-way conflicts,
        // 58% of the kernel's shared-load wavefronts; 0.157 -> 0.152 ms a Qwen3-8B layer at 1 row, H100.)
        uint2 a, b;
        a.x = ts_tab[v & 0xfffu];
        b.x = ts_tab[(v >> 12) & 0xfffu];
        a.y = (a.x >> 16) ? ts_tab[4096 + (v & 0xfffu)] : 0x3210u;            // 0x3210: keep the four bytes
        b.y = (b.x >> 16) ? ts_tab[4096 + ((v >> 12) & 0xfffu)] : 0x3210u;
        if (SLOW) held = ts_fetch8(pk, cursor);
        const uint32_t elo = ts_prmt(ts_prmt(t0, t1, a.x), (uint32_t)held, a.y);
        held >>= a.x >> 16;
        const uint32_t ehi = ts_prmt(ts_prmt(t0, t1, b.x), (uint32_t)held, b.y);
        held >>= b.x >> 16;
        if (SLOW) cursor += ((a.x >> 16) + (b.x >> 16)) >> 3;
        const uint2 sm = smv[lane + 32 * i];
        uint32_t w[4];
        fg_fuse4(sm.x, elo, w[0], w[1]);
        fg_fuse4(sm.y, ehi, w[2], w[3]);
        ts_mul<MT, LOW>(w, xs, xr, i, acc);
    }
}

// The twin's sub-step from its stage st (the lane's 16 bytes of each pass; rows past the matrix were staged as zeros);
// W: the chunk's columns.
template <int MT, bool LOW>
__device__ __forceinline__ void ts_twin_passes(const uint8_t* st, int W, const TcX<MT>& xs, const uint4 (&xr)[8],
                                               TcAcc<MT>& acc) {
    const uint32_t lane = threadIdx.x & 31;
    const uint4* q = reinterpret_cast<const uint4*>(st);
    auto pass = [&](int i) {
        const uint4 v = q[lane + 32 * i];
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        ts_mul<MT, LOW>(w, xs, xr, i, acc);
    };
    if (W == 2048) {                                            // warp-uniform: no exit between the passes
#pragma unroll
        for (int i = 0; i < 8; ++i) pass(i);
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            if (256 * i >= W) break;                            // warp-uniform: W % 256 == 0
            pass(i);
        }
    }
}

// STACKED MEMBERS (DF11): up to three consecutive tiled members of a unit with the same columns, multiplied in one
// launch as the matrix of their rows (q/k/v, gate/up). The tile order of each member is row-group major, so the stacked
// matrix's chunks follow each other as one member's would; only the exponent table changes, at row groups g1 and g2
// (t[0] for row groups below g1, t[1] below g2, t[2] from there). One member: g1 = g2 = its row groups.
struct TsTables {
    uint32_t t0a, t1a, t0b, t1b, t0c, t1c;
    int g1, g2;
};

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

    // DF11: the escape ranges of the warp's sub-steps, 32 at a time: lane L holds chunk_escapes[c], [c + 1] of the
    // warp's sub-step 32 j + L (batch j), loaded a batch ahead; issue() takes them with shuffles. (Read one sub-step
    // ahead instead, the loads were not back in time: long-scoreboard stalls, docs/PERFORMANCE.md.)
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
    uint32_t cur_lo, cur_hi, nxt_lo, nxt_hi;
    batch(0, cur_lo, cur_hi);
    batch(1, nxt_lo, nxt_hi);
    int q_issue = 0;                                            // the warp's sub-steps issued so far

    // Per lane: where its 16-byte pieces go in a stage and come from.
    uint8_t* ring_lane = ring + 16 * lane;
    const uint8_t* sm_lane = sign_mantissa + 16 * lane;
    const uint8_t* codes_lane = reinterpret_cast<const uint8_t*>(pk.codes) + 16 * lane;
    // Starts the copies of position p into stage `slot` (none past the sequence) and commits them as one group.
    auto issue = [&](const TsPos& p, int slot) {
        uint32_t esc_lo = 0, esc_hi = 0;
        if (!TWIN) {
            if (q_issue > 0 && (q_issue & 31) == 0) {
                cur_lo = nxt_lo;
                cur_hi = nxt_hi;
                batch((q_issue >> 5) + 1, nxt_lo, nxt_hi);
            }
            esc_lo = __shfl_sync(0xffffffffu, cur_lo, q_issue & 31);
            esc_hi = __shfl_sync(0xffffffffu, cur_hi, q_issue & 31);
        }
        ++q_issue;
        uint8_t* st = ring_lane + slot * stage_bytes;
        if (p.live) {
            if (TWIN) {
                const uint16_t* src = wd + p.at;
                const uint32_t bytes = p.row_in ? 16u : 0u;              // 0: the piece is zero-filled
                if (p.width == 2048) {
#pragma unroll
                    for (int i = 0; i < 8; ++i) ts_copy16(st + 512 * i, src + 256 * i, bytes);
                } else {
#pragma unroll
                    for (int i = 0; i < 8; ++i)
                        if (256 * i < p.width) ts_copy16(st + 512 * i, src + 256 * i, bytes);
                }
            } else {
                const uint8_t* gsm = sm_lane + ((size_t)p.chunk << 11);
#pragma unroll
                for (int q = 0; q < 4; ++q) ts_copy16(st + TS_SM + 512 * q, gsm + 512 * q, 16);
                const uint8_t* gc = codes_lane + (size_t)p.chunk * 768;
                ts_copy16(st + TS_CODES, gc, 16);
                if (lane < 16) ts_copy16(st + TS_CODES + 512, gc + 512, 16);
                if (lane < 2) ts_copy16(st + TS_LANES, pk.lane_starts + 32 * (size_t)p.chunk + 16 * lane, 16);
                const uint32_t win0 = esc_lo & ~15u;
                const uint32_t pieces = min((uint32_t)(TS_ESC_WIN / 16), (max(esc_hi, win0) - win0 + 15) / 16);
                if (lane < pieces) {
                    const uint32_t at = win0 + 16 * lane;
                    const bool in = at < pk.n_escapes;
                    ts_copy16(st + TS_WIN, pk.escapes + (in ? at : 0u), in ? min(16u, pk.n_escapes - at) : 0u);
                }
                if (lane == 0) {
                    *reinterpret_cast<uint4*>(st + TS_HEAD) = make_uint4(esc_lo, win0, esc_hi - esc_lo, 0u);
                }
            }
        }
        ts_commit();
    };

    // The table's copy (DF11) in its own group, the first TS_DEPTH - 1 sub-steps' copies, then the table awaited while
    // they fly.
    if (!TWIN) {
        for (int i = threadIdx.x; i < TS_TABLE_BYTES / 16; i += TC_THREADS) {
            ts_copy16(&ts_tab[4 * i], &ts_table.e[4 * i], 16);
        }
    }
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
    // crates/df11-candle/src/cuda/pdl.rs): everything above reads only the weights (the DF11 kernels' packed buffers,
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
            const bool in_a = G < tabs.g1, in_b = G < tabs.g2;
            const uint32_t t0 = in_a ? tabs.t0a : in_b ? tabs.t0b : tabs.t0c;
            const uint32_t t1 = in_a ? tabs.t1a : in_b ? tabs.t1b : tabs.t1c;
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
                if (TWIN) {
                    ts_twin_passes<MT, LOW>(st, min(2048, cols - 2048 * (cg >> 3)), xs, xr, acc);
                } else {
                    const uint4 head = *reinterpret_cast<const uint4*>(st + TS_HEAD);
                    const uint32_t first = head.x, win0 = head.y, total = head.z;
                    const uint32_t ls = st[TS_LANES + lane], le = lane < 31 ? st[TS_LANES + lane + 1] : total;
                    const uint32_t start = first + ls, cnt = le - ls, local = start - win0;
                    const bool fits = cnt <= 8u && local <= TS_ESC_WIN - cnt;
                    if (__all_sync(0xffffffffu, fits)) {
                        const uint32_t* ew = reinterpret_cast<const uint32_t*>(st + TS_WIN);
                        const uint32_t q = local >> 2, sh = 8 * (local & 3);
                        const uint32_t e0 = ew[q], e1 = ew[q + 1], e2 = ew[q + 2];
                        const unsigned long long held =
                            ((unsigned long long)__funnelshift_r(e1, e2, sh) << 32) | __funnelshift_r(e0, e1, sh);
                        ts_passes<MT, LOW, false>(st, t0, t1, held, 0, pk, xs, xr, acc);
                    } else {
                        ts_passes<MT, LOW, true>(st, t0, t1, 0, start, pk, xs, xr, acc);
                    }
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

// 2 CTAs per SM where the shared memory allows (the host's grid follows, tc.rs). NAME: 8 (MT 1, nb <= 8), 1, 2, 4.
#define TS_INSTANTIATE(NAME, MT, LOW)                                                                                \
    extern "C" __global__ void __launch_bounds__(TC_THREADS, 2) df11_tc_stream_##NAME(TS_PACKED_ARGS) {             \
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
