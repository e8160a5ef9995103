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

// Stages per warp: TS_DEPTH - 1 sub-steps in flight (another value only by -D for measurements, with
// DF11_TC_STREAM_DEPTH: crates/df11-candle/src/cuda/tc.rs).
#ifndef TS_DEPTH
#define TS_DEPTH 2
#endif
// THE STAGE of a slice (R row groups, below): for each of its R chunks the slice's P = 8 / R passes of sign_mantissa
// (256 P bytes each, from 0) and of codes (96 P bytes each, from TS_CODES); the first slice of a sub-step also stages,
// per chunk, its 32 lane starts, a window of its escapes (TS_WIN bytes from its first, 16-byte aligned) and a head
// (first escape, window start, escape count). The twin's stage is R x P passes x 32 lanes x 16 B = 4 KB.
template <int R>
struct TsLayout {
    static constexpr int P = 8 / R;                         // passes a slice
    static constexpr int WIN = R == 4 ? 128 : 256;          // escape window per chunk
    static constexpr int CODES = 2048;
    static constexpr int LANES = CODES + 768;
    static constexpr int WINS = LANES + 32 * R;
    static constexpr int HEAD = WINS + WIN * R;
    static constexpr int STAGE = HEAD + 16 * R;             // 3120 (R 1), 3424 (R 2), 3520 (R 4): tc.rs mirrors
};
#define TS_TWIN_STAGE 4096
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

// ROW GROUPS AT ONCE (R = 1, 2 or 4). Above a few rows of x the product is bound by x, not by the weights: every
// sub-step reads nb x 256 columns of x for 8 weight rows (at 8 rows of x, more bytes than the sub-step's weights, from
// L2: session 12's 0.183 ms against 0.153 at 4 rows). A warp therefore multiplies R ITEMS at once: the items at the
// same columns of R consecutive row groups, sub-step by sub-step, each pass's x operand loaded once and used for R
// chunks. A sub-step's R chunks are staged as R SLICES (passes 0..P-1 of each chunk, then P..2P-1, ...), so a stage
// stays near one chunk's bytes and two CTAs still fit an SM. Each item keeps its own accumulators and its mma order:
// the sums are those of R = 1 (THE TC SUMMATION CONTRACT is about items, not about which warp computes them).

// Whether the slice's x operands are loaded into registers before its stage is awaited (their latency then overlaps
// the wait: 0.163 -> 0.157 ms a Qwen3-8B layer at 1 row, 0.201 -> 0.189 at 8, H100): where they take at most 32
// registers; else each pass loads them (tc_step's loads).
#ifndef XAHEAD_ON
#define XAHEAD_ON 1
#endif
template <int MT, bool LOW, int R>
struct TsX {
    static constexpr int P = 8 / R;
    static constexpr bool PRE = LOW || 8 * MT * P <= 32;
    static constexpr int N = LOW ? P : (PRE ? 2 * MT * P : 1);
    // Loaded a slice AHEAD (with the stage of the next slice) where two sets take at most 32 registers: the loads then
    // have a whole slice to land. (Only with the 2-stage ring, where the next stage is the next slice.)
    static constexpr bool AHEAD = PRE && N <= 4 && TS_DEPTH == 2 && XAHEAD_ON;
    uint4 v[N];
};

// Loads the slice's x operands (passes pass0 .. pass0 + P - 1 at column `col` of the sub-step; zero past nb and past
// the chunk's W columns).
template <int MT, bool LOW, int R>
__device__ __forceinline__ void ts_x_load(TsX<MT, LOW, R>& xr, const __nv_bfloat16* x, int cols, int nb, int col,
                                          int pass0, int W) {
    constexpr int P = TsX<MT, LOW, R>::P;
    if (!TsX<MT, LOW, R>::PRE) return;
    const int g = (int)((threadIdx.x & 31) >> 2);
#pragma unroll
    for (int h = 0; h < (LOW ? 1 : 2 * MT); ++h) {
        const int row = LOW ? g : 16 * (h >> 1) + 8 * (h & 1) + g;
        const uint4* xp = reinterpret_cast<const uint4*>(x + (long long)row * cols + col) + 32 * pass0;
#pragma unroll
        for (int i = 0; i < P; ++i)
            xr.v[h * P + i] = row < nb && 256 * (pass0 + i) < W ? __ldg(xp + 32 * i) : make_uint4(0u, 0u, 0u, 0u);
    }
}

// Pass i of the slice (pass pass0 + i of the sub-step): the x operand of m-tile mt (rows 16 mt + g and + 8).
template <int MT, bool LOW, int R>
__device__ __forceinline__ void ts_x_pass(const TsX<MT, LOW, R>& xr, const TcX<MT>& xs, int pass0, int i,
                                          uint4 (&xa)[MT], uint4 (&xb)[MT]) {
    constexpr int P = TsX<MT, LOW, R>::P;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        if (TsX<MT, LOW, R>::PRE) {
            xa[mt] = xr.v[(LOW ? 0 : 2 * mt) * P + i];
            xb[mt] = LOW ? make_uint4(0u, 0u, 0u, 0u) : xr.v[(2 * mt + 1) * P + i];
        } else {
            xa[mt] = xs.a[mt] ? __ldg(xs.a[mt] + 32 * (pass0 + i)) : make_uint4(0u, 0u, 0u, 0u);
            xb[mt] = xs.b[mt] ? __ldg(xs.b[mt] + 32 * (pass0 + i)) : make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

// The eight weights w of the lane's row times the pass's x operands, added to acc (LOW: rows 8..15 of the m-tile are
// zero operands, as tc_step's).
template <int MT, bool LOW>
__device__ __forceinline__ void ts_mma(const uint32_t (&w)[4], const uint4 (&xa)[MT], const uint4 (&xb)[MT],
                                       float (&acc)[MT][4]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        if (LOW) {
            tc_mma(acc[mt], xa[mt].x, 0u, xa[mt].y, 0u, w[0], w[1]);
            tc_mma(acc[mt], xa[mt].z, 0u, xa[mt].w, 0u, w[2], w[3]);
        } else {
            tc_mma(acc[mt], xa[mt].x, xb[mt].x, xa[mt].y, xb[mt].y, w[0], w[1]);
            tc_mma(acc[mt], xa[mt].z, xb[mt].z, xa[mt].w, xb[mt].w, w[2], w[3]);
        }
    }
}

// One DF11 slice from its stage st: for each pass, x's operands once, then for each of the `live` chunks the lane's
// 8 codes -> exponents with escapes (ts_table) -> BF16 pairs -> two mma per m-tile. FAST: held[j] holds the lane's
// escapes of chunk j (carried from slice to slice); SLOW: they are read at cursor[j] every pass.
template <int MT, bool LOW, bool SLOW, int R>
__device__ __forceinline__ void ts_slice(const uint8_t* st, const uint32_t (&t0)[R], const uint32_t (&t1)[R],
                                         unsigned long long (&held)[R], uint32_t (&cursor)[R], const FgPacked& pk,
                                         const TcX<MT>& xs, const TsX<MT, LOW, R>& xr, int pass0,
                                         float (&acc)[R][MT][4]) {
    using L = TsLayout<R>;
    constexpr int P = L::P;
    const uint32_t lane = threadIdx.x & 31;
    // The lane's 8-group of pass i is the 24 bits at byte 3 (lane + 32 i) of the chunk's slice of codes.
    const uint32_t w0 = (3 * lane) >> 2, sh = ((lane & 3) * 24) & 31;
#pragma unroll
    for (int i = 0; i < P; ++i) {
        uint4 xa[MT], xb[MT];
        ts_x_pass<MT, LOW, R>(xr, xs, pass0, i, xa, xb);
        // Every chunk, live or not: a branch in this loop keeps the compiler from issuing a pass's shared loads
        // ahead (measured at R = 1: 0.172 ms a Qwen3-8B layer at 1 row with it, 0.159 without). A chunk past the matrix (only in the last
        // R-item of a matrix) decodes whatever its stage holds, with no escapes (held 0; SLOW reads are clamped),
        // into sums nobody writes.
#pragma unroll
        for (int j = 0; j < R; ++j) {
            const uint32_t* cw = reinterpret_cast<const uint32_t*>(st + L::CODES + 96 * P * j);
            const uint2* smv = reinterpret_cast<const uint2*>(st + 256 * P * j);
            const uint32_t v = __funnelshift_r(cw[w0 + 24 * i], cw[w0 + 24 * i + 1], sh);
            // .x for every four codes; .y only by the lanes with an escape among them (~10% of lanes): a predicated-off
            // lane takes no part in the bank conflicts of random lookups. (One 8-byte lookup of both: 3.6-way
            // conflicts, 58% of the kernel's shared-load wavefronts; 0.157 -> 0.152 ms a Qwen3-8B layer at 1 row.)
            uint2 a, b;
            a.x = ts_tab[v & 0xfffu];
            b.x = ts_tab[(v >> 12) & 0xfffu];
            a.y = (a.x >> 16) ? ts_tab[4096 + (v & 0xfffu)] : 0x3210u;        // 0x3210: keep the four bytes
            b.y = (b.x >> 16) ? ts_tab[4096 + ((v >> 12) & 0xfffu)] : 0x3210u;
            unsigned long long e = SLOW ? ts_fetch8(pk, cursor[j]) : held[j];
            const uint32_t elo = ts_prmt(ts_prmt(t0[j], t1[j], a.x), (uint32_t)e, a.y);
            e >>= a.x >> 16;
            const uint32_t ehi = ts_prmt(ts_prmt(t0[j], t1[j], b.x), (uint32_t)e, b.y);
            e >>= b.x >> 16;
            if (SLOW) {
                cursor[j] += ((a.x >> 16) + (b.x >> 16)) >> 3;
            } else {
                held[j] = e;
            }
            const uint2 sm = smv[lane + 32 * i];
            uint32_t w[4];
            fg_fuse4(sm.x, elo, w[0], w[1]);
            fg_fuse4(sm.y, ehi, w[2], w[3]);
            ts_mma<MT, LOW>(w, xa, xb, acc[j]);
        }
    }
}

// The twin's slice from its stage st (chunk j's pass i: the lane's 16 bytes at 512 (P j + i); rows past the matrix
// were staged as zeros; a chunk past the last row group multiplies whatever its stage holds into sums nobody writes);
// W: the chunk's columns. No branch between the passes of a whole chunk (the loads then go ahead of the mma).
template <int MT, bool LOW, int R>
__device__ __forceinline__ void ts_twin_slice(const uint8_t* st, int W, const TcX<MT>& xs, const TsX<MT, LOW, R>& xr,
                                              int pass0, float (&acc)[R][MT][4]) {
    constexpr int P = TsLayout<R>::P;
    const uint32_t lane = threadIdx.x & 31;
    const uint4* q = reinterpret_cast<const uint4*>(st);
    auto pass = [&](int i) {
        uint4 xa[MT], xb[MT];
        ts_x_pass<MT, LOW, R>(xr, xs, pass0, i, xa, xb);
#pragma unroll
        for (int j = 0; j < R; ++j) {
            const uint4 v = q[32 * (P * j + i) + lane];
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
            ts_mma<MT, LOW>(w, xa, xb, acc[j]);
        }
    };
    if (W == 2048) {                                            // warp-uniform
#pragma unroll
        for (int i = 0; i < P; ++i) pass(i);
    } else {
#pragma unroll
        for (int i = 0; i < P; ++i) {
            if (256 * (pass0 + i) >= W) break;                  // warp-uniform: W % 256 == 0
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

// A position in a warp's sequence of slices: tile, R-item of the tile (ri), sub-step s, slice h.
struct TsPos {
    int tile, ri, s, h;
    int G0;                // the R-item's first row group (of the matrix)
    int live;              // its row groups in the matrix (0: past the warp's sequence or past the last row group)
    int cg;                // the sub-step's place in its row group: 8 k + m (chunk k, sub-step m)
    uint32_t chunk;        // DF11: the first row group's chunk of the sub-step (row group G0 + j: + j * cols / 256)
    int colpart;           // twin: the lane's first column of the sub-step
    int width;             // twin: W, the chunk's columns
};

// Dynamic shared memory of a launch: `nslots` slots of partial sums (16-byte aligned each), then the warps' stages
// (the DF11 kernels' table is ts_tab, static), TsLayout<R>::STAGE (DF11) or TS_TWIN_STAGE (twin) bytes each.
__device__ __forceinline__ int ts_partial_bytes(int tile_groups, int ipg, int nb) {
    return (tile_groups * ipg * nb * 32 + 15) & ~15;
}

// nslots (1, 2 or 4): how many tiles' partial sums a CTA keeps (its warps run up to nslots - 1 tiles apart).
// tile_groups % R == 0 (the host's plan).
template <int MT, bool LOW, bool TWIN, int R>
__device__ __forceinline__ void tc_stream(const FgPacked& pk, const TsTables& tabs, const uint8_t* sign_mantissa,
                                          const uint16_t* wd, const __nv_bfloat16* x, __nv_bfloat16* y, int nb,
                                          int rows, int cols, long long base, int tile_groups, int steps, int nslots) {
    using L = TsLayout<R>;
    constexpr int P = L::P;
    constexpr int NW = L::WIN / 16;                             // window pieces a chunk
    extern __shared__ __align__(16) uint8_t ts_smem[];
    constexpr int stage_bytes = TWIN ? TS_TWIN_STAGE : L::STAGE;
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int ipg = tc_items_per_group(cols, steps), items = tile_groups * ipg, ritems = items / R;
    const int groups = (rows + 7) / 8, ntiles = (groups + tile_groups - 1) / tile_groups;
    const int slot_floats = ts_partial_bytes(tile_groups, ipg, nb) / 4;
    float* partial = reinterpret_cast<float*>(ts_smem);
    uint8_t* ring = ts_smem + 4 * slot_floats * nslots + warp * (TS_DEPTH * stage_bytes);
    // DF11: with whole chunks a row group's cols / 256 chunks are its items' sub-steps in order, so sub-step s of item
    // index I is chunk first_chunk + I * steps + s, and row group G + 1's chunk at the same columns is cols / 256 on.
    const uint32_t first_chunk = (uint32_t)(base >> 11), group_chunks = (uint32_t)(cols >> 8);

    // Fills in where position p (tile, ri set; s = h = 0) reads; then advance() moves one slice on.
    auto locate = [&](TsPos& p) {
        const int gb = p.ri / ipg, in_group = p.ri - gb * ipg;
        p.G0 = p.tile * tile_groups + gb * R;
        p.live = p.tile < ntiles && p.ri < ritems ? max(0, min(R, groups - p.G0)) : 0;
        p.cg = in_group * steps;
        p.chunk = first_chunk + (uint32_t)((p.G0 * ipg + in_group) * steps);
        const int c0 = 2048 * (p.cg >> 3);
        p.width = min(2048, cols - c0);
        p.colpart = c0 + 8 * (4 * (p.cg & 7) + (int)t);
    };
    auto advance = [&](TsPos& p) {
        if (++p.h < R) return;
        p.h = 0;
        if (++p.s < steps) {
            ++p.cg;
            p.colpart += 32;
            ++p.chunk;
            return;
        }
        p.s = 0;
        p.ri += TC_WARPS;
        if (p.ri >= ritems) {
            p.ri = (int)warp;
            p.tile += gridDim.x;
        }
        locate(p);
    };

    // DF11: the escape ranges of the warp's chunks, 32 at a time: lane L holds chunk_escapes[c], [c + 1] of the
    // warp's chunk 32 b + L (batch b; chunk j of its sub-step q is number R q + j), loaded a batch ahead; issue()
    // takes them with shuffles. (Read one sub-step ahead instead, the loads were not back in time: long-scoreboard
    // stalls, docs/PERFORMANCE.md.)
    const int per_tile = (ritems - (int)warp + TC_WARPS - 1) / TC_WARPS;   // the warp's R-items in a tile
    auto batch = [&](int b, uint32_t& lo, uint32_t& hi) {
        lo = hi = 0;
        if (TWIN || per_tile <= 0) return;
        const int e = 32 * b + (int)lane, q = e / R, j = e - q * R;
        const int nth = q / steps, s = q - nth * steps;
        const int tile = (int)blockIdx.x + (int)gridDim.x * (nth / per_tile);
        const int ri = (int)warp + TC_WARPS * (nth % per_tile), gb = ri / ipg, in_group = ri - gb * ipg;
        const int G = tile * tile_groups + gb * R + j;
        if (tile < ntiles && G < groups) {
            const uint32_t c = first_chunk + (uint32_t)((G * ipg + in_group) * steps + s);
            lo = __ldg(pk.chunk_escapes + c);
            hi = __ldg(pk.chunk_escapes + c + 1);
        }
    };
    uint32_t cur_lo, cur_hi, nxt_lo, nxt_hi;
    batch(0, cur_lo, cur_hi);
    batch(1, nxt_lo, nxt_hi);
    int q_issue = 0;                                            // the warp's sub-steps issued so far (DF11)

    // Starts the copies of position p into stage `slot` (none past the sequence) and commits them as one group.
    auto issue = [&](const TsPos& p, int slot) {
        uint8_t* st = ring + slot * stage_bytes;
        if (TWIN) {
#pragma unroll
            for (int j = 0; j < R; ++j) {
                if (j >= p.live) break;
                const int row = 8 * (p.G0 + j) + (int)g;
                const uint32_t bytes = row < rows ? 16u : 0u;                    // 0: the piece is zero-filled
                const uint16_t* src = wd + (long long)min(row, rows - 1) * cols + p.colpart + 256 * P * p.h;
#pragma unroll
                for (int i = 0; i < P; ++i)
                    if (256 * (P * p.h + i) < p.width) ts_copy16(st + 512 * (P * j + i) + 16 * lane, src + 256 * i, bytes);
            }
            ts_commit();
            return;
        }
        // The lane's chunk for the window and the head: j = lane / NW.
        const int jw = (int)lane / NW;
        uint32_t esc_lo = 0, esc_hi = 0;
        if (p.h == 0) {
            if (q_issue > 0 && ((q_issue * R) & 31) == 0) {
                cur_lo = nxt_lo;
                cur_hi = nxt_hi;
                batch(((q_issue * R) >> 5) + 1, nxt_lo, nxt_hi);
            }
            const int src = (q_issue * R + min(jw, R - 1)) & 31;
            esc_lo = __shfl_sync(0xffffffffu, cur_lo, src);
            esc_hi = __shfl_sync(0xffffffffu, cur_hi, src);
            ++q_issue;
        }
        if (p.live > 0) {
            // sign_mantissa: piece k = lane + 32 q of the slice is chunk k / (16 P)'s piece k % (16 P).
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int k = (int)lane + 32 * q, j = k / (16 * P), off = k - j * 16 * P;
                if (j < p.live) {
                    const uint32_t c = p.chunk + (uint32_t)j * group_chunks;
                    ts_copy16(st + 16 * k, sign_mantissa + ((size_t)c << 11) + 256 * P * p.h + 16 * off, 16);
                }
            }
            // codes: 48 pieces, piece k of chunk k / (6 P).
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int k = (int)lane + 32 * q, j = k / (6 * P), off = k - j * 6 * P;
                if (k < 48 && j < p.live) {
                    const uint32_t c = p.chunk + (uint32_t)j * group_chunks;
                    ts_copy16(st + L::CODES + 16 * k,
                              reinterpret_cast<const uint8_t*>(pk.codes) + (size_t)c * 768 + 96 * P * p.h + 16 * off,
                              16);
                }
            }
            if (p.h == 0) {
                if ((int)lane < 2 * R && (int)lane / 2 < p.live) {
                    const uint32_t c = p.chunk + (uint32_t)(lane / 2) * group_chunks;
                    ts_copy16(st + L::LANES + 16 * lane, pk.lane_starts + 32 * (size_t)c + 16 * (lane & 1), 16);
                }
                if (jw < R && jw < p.live) {
                    const uint32_t k = lane - (uint32_t)jw * NW;
                    const uint32_t win0 = esc_lo & ~15u;
                    const uint32_t pieces = min((uint32_t)NW, (max(esc_hi, win0) - win0 + 15) / 16);
                    if (k < pieces) {
                        const uint32_t at = win0 + 16 * k;
                        const bool in = at < pk.n_escapes;
                        ts_copy16(st + L::WINS + L::WIN * jw + 16 * k, pk.escapes + (in ? at : 0u),
                                  in ? min(16u, pk.n_escapes - at) : 0u);
                    }
                    if (k == 0) {
                        *reinterpret_cast<uint4*>(st + L::HEAD + 16 * jw) =
                            make_uint4(esc_lo, win0, esc_hi - esc_lo, 0u);
                    }
                }
            }
        }
        ts_commit();
    };

    // The table's copy (DF11) in its own group, the first TS_DEPTH - 1 slices' copies, then the table awaited while
    // they fly.
    if (!TWIN) {
        for (int i = threadIdx.x; i < TS_TABLE_BYTES / 16; i += TC_THREADS) {
            ts_copy16(&ts_tab[4 * i], &ts_table.e[4 * i], 16);
        }
    }
    ts_commit();
    TsPos ahead = {(int)blockIdx.x, (int)warp, 0, 0, 0, 0, 0, 0u, 0, 0};
    locate(ahead);
    // AHEAD: the x operands of the slice at p (zeros past the sequence).
    using Xr = TsX<MT, LOW, R>;
    auto x_of = [&](const TsPos& p, Xr& xr) {
        const int col = 2048 * (p.cg >> 3) + 32 * (p.cg & 7) + 8 * (int)t;
        ts_x_load<MT, LOW, R>(xr, x, cols, p.live > 0 ? nb : 0, col, P * p.h, p.width);
    };
    Xr xnext;
    if (Xr::AHEAD) x_of(ahead, xnext);
#pragma unroll 1
    for (int d = 0; d < TS_DEPTH - 1; ++d) {
        issue(ahead, d);
        advance(ahead);
    }
    ts_wait_group_le<TS_DEPTH - 1>();                           // the table's group
    __syncthreads();

    // PARTIAL SUMS. Tile iteration n's items write their sums into slot n % nslots; the tile's REDUCER (warp n % part)
    // waits on barrier FULL(slot) for every warp's sums, adds them per output in item order and releases the slot on
    // FREE(slot, parity) for tile iteration n + nslots, whose other warps wait on it before writing. So warps wait
    // only for a tile nslots back, not for each other at every tile. Warps past `part` (a tile with fewer than 8
    // R-items) take no part. Barrier ids: 0 __syncthreads, FULL 1 .. nslots, FREE after them (2 parities x nslots).
    const int part = min(TC_WARPS, ritems), threads = 32 * part;
    const int FULL = 1, FREE = 1 + nslots;
    int slot = 0;
    int n = 0;
    for (int tile = blockIdx.x; (int)warp < part && tile < ntiles; tile += gridDim.x, ++n) {
        const int ps = n % nslots, reducer = n % part, parity = (n / nslots) & 1;
        float* psum = partial + ps * slot_floats;
        if (n >= nslots && (int)warp != (n - nslots) % part) ts_bar_sync(FREE + nslots * parity + ps, threads);
        for (int ri = warp; ri < ritems; ri += TC_WARPS) {
            const int gb = ri / ipg, in_group = ri - gb * ipg;
            const int G0 = tile * tile_groups + gb * R, live = max(0, min(R, groups - G0));
            float acc[R][MT][4];
            uint32_t t0[R], t1[R];
#pragma unroll
            for (int j = 0; j < R; ++j) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) acc[j][mt][0] = acc[j][mt][1] = acc[j][mt][2] = acc[j][mt][3] = 0.0f;
                // Chunk j's member's exponent table (warp-uniform).
                const int G = G0 + j;
                const bool in_a = G < tabs.g1, in_b = G < tabs.g2;
                t0[j] = in_a ? tabs.t0a : in_b ? tabs.t0b : tabs.t0c;
                t1[j] = in_a ? tabs.t1a : in_b ? tabs.t1b : tabs.t1c;
            }
            for (int s = 0; s < steps; ++s) {
                // The sub-step (k, m) of the row group: x columns 2048 k + 8 (4 m + t) + 256 i.
                const int cg = in_group * steps + s;
                const int col = 2048 * (cg >> 3) + 32 * (cg & 7) + 8 * (int)t;
                const int W = min(2048, cols - 2048 * (cg >> 3));   // the twin's last chunk may be narrower
                unsigned long long held[R];
                uint32_t cursor[R];
                bool fast = true;
#pragma unroll
                for (int h = 0; h < R; ++h) {
                    __syncwarp();                               // every lane is done with the slot refilled now
                    Xr xr;
                    if (Xr::AHEAD) {
                        xr = xnext;
                        x_of(ahead, xnext);                     // the next slice's, with its stage
                    } else {
                        ts_x_load<MT, LOW, R>(xr, x, cols, nb, col, P * h, W);
                    }
                    issue(ahead, slot == 0 ? TS_DEPTH - 1 : slot - 1);
                    advance(ahead);
                    ts_wait_group_le<TS_DEPTH - 1>();           // the oldest stage has landed
                    __syncwarp();                               // the stage's bytes, copied by every lane, are here
                    const uint8_t* st = ring + slot * stage_bytes;
                    slot = slot + 1 == TS_DEPTH ? 0 : slot + 1;
                    if (live == 0) continue;                    // warp-uniform: past the last row group
                    const TcX<MT> xs = tc_x<MT, LOW>(x, cols, nb, col);
                    if (TWIN) {
                        ts_twin_slice<MT, LOW, R>(st, W, xs, xr, P * h, acc);
                        continue;
                    }
                    if (h == 0) {
                        // Each chunk's escapes: FAST where every lane's run of every chunk lies in its window.
                        bool fits = true;
#pragma unroll
                        for (int j = 0; j < R; ++j) {
                            held[j] = 0;
                            cursor[j] = 0;
                            if (j >= live) continue;
                            const uint4 head = *reinterpret_cast<const uint4*>(st + L::HEAD + 16 * j);
                            const uint32_t first = head.x, win0 = head.y, total = head.z;
                            const uint8_t* ls8 = st + L::LANES + 32 * j;
                            const uint32_t ls = ls8[lane], le = lane < 31 ? ls8[lane + 1] : total;
                            const uint32_t start = first + ls, cnt = le - ls, local = start - win0;
                            cursor[j] = start;
                            if (cnt <= 8u && local <= L::WIN - cnt) {
                                const uint32_t* ew = reinterpret_cast<const uint32_t*>(st + L::WINS + L::WIN * j);
                                const uint32_t q = local >> 2, sh = 8 * (local & 3);
                                const uint32_t e0 = ew[q], e1 = ew[q + 1], e2 = ew[q + 2];
                                held[j] = ((unsigned long long)__funnelshift_r(e1, e2, sh) << 32) |
                                          __funnelshift_r(e0, e1, sh);
                            } else {
                                fits = false;
                            }
                        }
                        fast = __all_sync(0xffffffffu, fits);
                    }
                    if (fast) {
                        ts_slice<MT, LOW, false, R>(st, t0, t1, held, cursor, pk, xs, xr, P * h, acc);
                    } else {
                        ts_slice<MT, LOW, true, R>(st, t0, t1, held, cursor, pk, xs, xr, P * h, acc);
                    }
                }
            }
            // The items' sums: lane (g, t) holds x rows 16mt + g (+ 8) and W rows 8G + 2t, 8G + 2t + 1.
#pragma unroll
            for (int j = 0; j < R; ++j) {
                if (j >= live) break;
                float* p = psum + (long long)((gb * R + j) * ipg + in_group) * nb * 8;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const int ba = 16 * mt + (int)g, bb = ba + 8;
                    if (ba < nb) { p[ba * 8 + 2 * t] = acc[j][mt][0]; p[ba * 8 + 2 * t + 1] = acc[j][mt][1]; }
                    if (bb < nb) { p[bb * 8 + 2 * t] = acc[j][mt][2]; p[bb * 8 + 2 * t + 1] = acc[j][mt][3]; }
                }
            }
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

// 2 CTAs per SM where the shared memory allows (the host's grid follows, tc.rs). NAME: 8 (MT 1, nb <= 8), 1 (MT 1),
// 2 (MT 2); R: row groups at once.
#define TS_INSTANTIATE(NAME, MT, LOW, R)                                                                             \
    extern "C" __global__ void __launch_bounds__(TC_THREADS, 2) df11_tc_stream_##NAME##_r##R(TS_PACKED_ARGS) {      \
        const FgPacked pk = {codes, chunk_escapes, lane_starts, n_chunks, escapes, n_escapes, t0, t1};              \
        const TsTables tabs = {t0, t1, t0b, t1b, t0c, t1c, g1, g2};                                                  \
        tc_stream<MT, LOW, false, R>(pk, tabs, sign_mantissa, nullptr, x, y, nb, rows, cols, base, tile_groups,     \
                                     steps, nslots);                                                                 \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(TC_THREADS, 2) bf16_tc_stream_##NAME##_r##R(TS_TWIN_ARGS) {        \
        const FgPacked pk = {};                                                                                      \
        const TsTables tabs = {};                                                                                    \
        tc_stream<MT, LOW, true, R>(pk, tabs, nullptr, w, x, y, nb, rows, cols, 0, tile_groups, steps, nslots);     \
    }

TS_INSTANTIATE(8, 1, true, 1)
TS_INSTANTIATE(8, 1, true, 2)
TS_INSTANTIATE(8, 1, true, 4)
TS_INSTANTIATE(1, 1, false, 1)
TS_INSTANTIATE(1, 1, false, 2)
TS_INSTANTIATE(1, 1, false, 4)
TS_INSTANTIATE(2, 2, false, 1)
TS_INSTANTIATE(2, 2, false, 2)
TS_INSTANTIATE(2, 2, false, 4)
