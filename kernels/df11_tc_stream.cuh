// The streaming tensor-core kernels' shared pieces (df11_tc_stream.cu: a CTA's warps on the items of a tile;
// df11_tc_panel.cu: a CTA's warps on the same columns of different row groups): the stage layout and its copies, the
// member-independent escape table, a DF11 or twin sub-step's passes from its stage. THE TC SUMMATION CONTRACT they
// follow is stated in df11_tc.cu; the stage pipeline and escapes are described in df11_tc_stream.cu.

#pragma once
#include <stdint.h>
#include <cuda_bf16.h>
#include "df11_packed.cuh"
#include "df11_tc.cuh"
#include "llm_common.cuh"
#include "df11_escape_table.cuh"
// Stages per warp: TS_DEPTH - 1 sub-steps in flight (another value only by -D for measurements, with
// DF11_TC_STREAM_DEPTH: crates/df11-candle/src/cuda/forms/packed/tc/stream.rs).
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

// Pass i of a DF11 sub-step from its stage st: the lane's 8 codes -> exponents with escapes (ts_table, or with BITS
// ts_bits: ts_decode8_bits) -> BF16 pairs w. FAST: `held` holds the lane's escapes (shifted out as they are used); SLOW:
// they are read at `cursor` (advanced). t0, t1 and held have their bytes rotated (fg_rot).
template <bool SLOW, bool BITS = false>
__device__ __forceinline__ void ts_decode_pass(const uint8_t* st, int i, uint32_t t0, uint32_t t1,
                                               unsigned long long& held, uint32_t& cursor, const FgPacked& pk,
                                               uint32_t (&w)[4]) {
    const uint32_t lane = threadIdx.x & 31;
#ifdef TS_NO_DECODE   // diagnostic (wrong sums): the stage's sign bytes with one exponent, no code read or lookup
    {
        const uint2 sm = reinterpret_cast<const uint2*>(st + TS_SM)[lane + 32 * i];
        fg_fuse4_rot(sm.x, t0, w[0], w[1]);
        fg_fuse4_rot(sm.y, t1, w[2], w[3]);
        return;
    }
#endif
    // The lane's 8-group of pass i is the 24 bits at byte 3 (lane + 32 i) of the codes.
    const uint32_t* cw = reinterpret_cast<const uint32_t*>(st + TS_CODES);
    const uint32_t w0 = (3 * lane) >> 2, sh = ((lane & 3) * 24) & 31;
    const uint2* smv = reinterpret_cast<const uint2*>(st + TS_SM);
    const uint32_t v = __funnelshift_r(cw[w0 + 24 * i], cw[w0 + 24 * i + 1], sh);
    if (SLOW) held = fg_rot64(ts_fetch8(pk, cursor));
    uint32_t elo, ehi;
    const uint32_t consumed =
        BITS ? ts_decode8_bits(v, t0, t1, held, elo, ehi) : ts_decode8(v, t0, t1, held, elo, ehi);
    if (SLOW) cursor += consumed;
    const uint2 sm = smv[lane + 32 * i];
    fg_fuse4_rot(sm.x, elo, w[0], w[1]);
    fg_fuse4_rot(sm.y, ehi, w[2], w[3]);
}

// One DF11 sub-step from its stage st: mul(i, w) for each pass i's weights (ts_decode_pass).
template <bool SLOW, bool BITS, class Mul>
__device__ __forceinline__ void ts_passes(const uint8_t* st, uint32_t t0, uint32_t t1, unsigned long long held,
                                          uint32_t cursor, const FgPacked& pk, Mul&& mul) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        uint32_t w[4];
        ts_decode_pass<SLOW, BITS>(st, i, t0, t1, held, cursor, pk, w);
        mul(i, w);
    }
}

// The twin's sub-step from its stage st (the lane's 16 bytes of each pass; rows past the matrix were staged as zeros):
// mul(i, w) for each pass i; W: the chunk's columns.
template <class Mul>
__device__ __forceinline__ void ts_twin_passes(const uint8_t* st, int W, Mul&& mul) {
    const uint32_t lane = threadIdx.x & 31;
    const uint4* q = reinterpret_cast<const uint4*>(st);
    auto pass = [&](int i) {
        const uint4 v = q[lane + 32 * i];
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        mul(i, w);
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

// Starts the lane's copies of DF11 sub-step `chunk` of the unit into its stage; st_lane = the stage + 16 lane,
// [esc_lo, esc_hi) the chunk's range of the escape list (chunk_escapes). The caller commits them.
__device__ __forceinline__ void ts_stage_df11(uint8_t* st_lane, const FgPacked& pk, const uint8_t* sign_mantissa,
                                              uint32_t chunk, uint32_t esc_lo, uint32_t esc_hi) {
    const uint32_t lane = threadIdx.x & 31;
    const uint8_t* gsm = sign_mantissa + 16 * lane + ((size_t)chunk << 11);
#pragma unroll
    for (int q = 0; q < 4; ++q) ts_copy16(st_lane + TS_SM + 512 * q, gsm + 512 * q, 16);
    const uint8_t* gc = reinterpret_cast<const uint8_t*>(pk.codes) + 16 * lane + (size_t)chunk * 768;
    ts_copy16(st_lane + TS_CODES, gc, 16);
    if (lane < 16) ts_copy16(st_lane + TS_CODES + 512, gc + 512, 16);
    if (lane < 2) ts_copy16(st_lane + TS_LANES, pk.lane_starts + 32 * (size_t)chunk + 16 * lane, 16);
    const uint32_t win0 = esc_lo & ~15u;
    const uint32_t pieces = min((uint32_t)(TS_ESC_WIN / 16), (max(esc_hi, win0) - win0 + 15) / 16);
    if (lane < pieces) {
        const uint32_t at = win0 + 16 * lane;
        const bool in = at < pk.n_escapes;
        ts_copy16(st_lane + TS_WIN, pk.escapes + (in ? at : 0u), in ? min(16u, pk.n_escapes - at) : 0u);
    }
    if (lane == 0) {
        *reinterpret_cast<uint4*>(st_lane + TS_HEAD) = make_uint4(esc_lo, win0, esc_hi - esc_lo, 0u);
    }
}

// Starts the lane's copies of a twin sub-step into its stage (st_lane = the stage + 16 lane): the lane's 16 bytes of
// each pass from src (its first weight), `width` the chunk's columns; row_in false: zero-filled (a row past the
// matrix). The caller commits them.
__device__ __forceinline__ void ts_stage_twin(uint8_t* st_lane, const uint16_t* src, int width, bool row_in) {
    const uint32_t bytes = row_in ? 16u : 0u;                   // 0: the piece is zero-filled
    if (width == 2048) {
#pragma unroll
        for (int i = 0; i < 8; ++i) ts_copy16(st_lane + 512 * i, src + 256 * i, bytes);
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i)
            if (256 * i < width) ts_copy16(st_lane + 512 * i, src + 256 * i, bytes);
    }
}

// One DF11 sub-step from its landed stage st (the whole stage): the lane's escapes held in a register where every
// lane's fit (FAST), else read from global memory pass by pass (SLOW). BITS: the decode by ts_decode8_bits (the CTA
// staged ts_bits: ts_stage_table<true>).
template <bool BITS = false, class Mul>
__device__ __forceinline__ void ts_df11_substep(const uint8_t* st, uint32_t t0, uint32_t t1, const FgPacked& pk,
                                                Mul&& mul) {
    const uint32_t lane = threadIdx.x & 31;
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
            fg_rot64(((unsigned long long)__funnelshift_r(e1, e2, sh) << 32) | __funnelshift_r(e0, e1, sh));
        ts_passes<false, BITS>(st, t0, t1, held, 0, pk, mul);
    } else {
        ts_passes<true, BITS>(st, t0, t1, 0, start, pk, mul);
    }
}

// The exponent table of row group G of a stacked matrix (warp-uniform), its bytes rotated (fg_rot).
__device__ __forceinline__ void ts_table_of(const TsTables& tabs, int G, uint32_t& t0, uint32_t& t1) {
    const bool in_a = G < tabs.g1, in_b = G < tabs.g2;
    t0 = fg_rot(in_a ? tabs.t0a : in_b ? tabs.t0b : tabs.t0c);
    t1 = fg_rot(in_a ? tabs.t1a : in_b ? tabs.t1b : tabs.t1c);
}

// The escape table's copy into ts_tab (BITS: the escape-bits table's into ts_bits) by the CTA's `threads` threads
// (the caller commits it).
template <bool BITS = false>
__device__ __forceinline__ void ts_stage_table(int threads) {
    if (BITS) {
        for (int i = threadIdx.x; i < TS_BITS_TABLE_BYTES / 16; i += threads)
            ts_copy16(&ts_bits[4 * i], &ts_bits_table.e[4 * i], 16);
    } else {
        for (int i = threadIdx.x; i < TS_TABLE_BYTES / 16; i += threads)
            ts_copy16(&ts_tab[4 * i], &ts_table.e[4 * i], 16);
    }
}

// THE ESCAPE RANGES of a warp's DF11 sub-steps, 32 at a time: lane L holds chunk_escapes[c], [c + 1] of the warp's
// sub-step 32 j + L (batch j), loaded a batch ahead; ts_ranges_next takes them in order with shuffles. (Read one
// sub-step ahead instead, the loads were not back in time: long-scoreboard stalls, docs/PERFORMANCE.md.)
// batch(j, lo, hi) loads lane L's pair of batch j (0, 0 past the warp's sequence).
struct TsRanges {
    uint32_t cur_lo, cur_hi, nxt_lo, nxt_hi;
    int issued;                                                 // the warp's sub-steps taken so far
};

template <class Batch>
__device__ __forceinline__ void ts_ranges_start(TsRanges& r, Batch&& batch) {
    batch(0, r.cur_lo, r.cur_hi);
    batch(1, r.nxt_lo, r.nxt_hi);
    r.issued = 0;
}

// The escape range [lo, hi) of the warp's next sub-step (warp-uniform call).
template <class Batch>
__device__ __forceinline__ void ts_ranges_next(TsRanges& r, Batch&& batch, uint32_t& lo, uint32_t& hi) {
    if (r.issued > 0 && (r.issued & 31) == 0) {
        r.cur_lo = r.nxt_lo;
        r.cur_hi = r.nxt_hi;
        batch((r.issued >> 5) + 1, r.nxt_lo, r.nxt_hi);
    }
    lo = __shfl_sync(0xffffffffu, r.cur_lo, r.issued & 31);
    hi = __shfl_sync(0xffffffffu, r.cur_hi, r.issued & 31);
    ++r.issued;
}
