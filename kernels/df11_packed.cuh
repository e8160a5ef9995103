// PACKED EXPONENTS: helpers shared by the fused kernel (df11_fused.cu) and the decode kernel (df11_packed.cu).
// Written for this project; the form is made on the host at load time (crates/df11-candle/src/packed.rs):
//   codes:   3 bits per unit element j at bits [3j, 3j+3) of a little-endian word array; 8-group q (elements
//            8q..8q+8) is the 24 bits at 24q, so a lane reads its eight codes with two loads and a funnel shift.
//            Codes 0-6 index the member's table of seven exponents; code 7 escapes.
//   escapes: by chunk of 2048 elements (256 8-groups). 8-group q has LANE q % 32 and PASS (q / 32) % 8 in its chunk
//            q / 256 (a warp walking a 2048-element piece: lane l, pass i -> elements 8l + 256i). A chunk's escaped
//            exponents are listed lane-major, each lane's in pass order: lane L of chunk c starts at
//            chunk_escapes[c] + lane_starts[32c + L]. So a lane finds its escapes from its own codes: no
//            cross-lane prefix sums.
//
// HOST GUARANTEES: the codes buffer holds every 8-group's word pair (plus padding); chunk_escapes has
// ceil(N/2048) + 1 entries, lane_starts 32 per chunk; the escapes buffer (n_escapes bytes) is the list padded
// with zeros to whole words plus 16 bytes, 4-byte aligned; every table maps code 7 to exponent 0 (escaped bytes are ORed in); N < 2^32.
// The kernels still clamp escape reads to n_escapes.

#pragma once
#include <stdint.h>

// Four 3-bit codes (bits 0-11) -> four PRMT selector nibbles (bit 3 of each nibble clear).
__device__ __forceinline__ uint32_t fp_spread(uint32_t c) {
    return (c & 7u) | ((c << 1) & 0x70u) | ((c << 2) & 0x700u) | ((c << 3) & 0x7000u);
}

// The eight codes of 8-group q: 24 bits, code k at bits [3k, 3k+3).
__device__ __forceinline__ uint32_t fp_codes8(const uint32_t* codes, long long q) {
    const long long w = (3 * q) >> 2;
    const uint32_t sh = (uint32_t)((q & 3) * 24) & 31u;
    return __funnelshift_r(__ldg(codes + w), __ldg(codes + w + 1), sh) & 0xffffffu;
}

// One bit (at 3k) per escaped code k of v.
__device__ __forceinline__ uint32_t fp_escape_mask(uint32_t v) { return v & (v >> 1) & (v >> 2) & 0x249249u; }

// A lane's escapes over an ITEM: up to 8 consecutive 8-groups q0, q0 + 32, ... of the lane (passes of one or two
// chunks). They are two runs of the list: run A in q0's chunk (from the lane's start plus its escapes in earlier
// passes of that chunk), run B in the next chunk (from the lane's start there). The first 8 are fetched at once
// (one latency per item) into `held`; later ones (rare) are read when needed.
struct FpLane {
    unsigned long long held;   // escape bytes 0..7 of the item, in order
    uint32_t a, na;            // run A: list index and length
    uint32_t b;                // run B: list index
};

__device__ __forceinline__ uint32_t fp_rank(const FpLane& r, uint32_t t) { return t < r.na ? r.a + t : r.b + (t - r.na); }

// The lane's start in chunk c (lane L), or 0 past the last chunk.
__device__ __forceinline__ uint32_t fp_lane_start(const uint32_t* chunk_escapes, const uint8_t* lane_starts,
                                                  uint32_t n_chunks, uint32_t c, uint32_t L) {
    return c < n_chunks ? __ldg(chunk_escapes + c) + __ldg(lane_starts + 32 * c + L) : 0u;
}

// Fetches escapes 0..7 of the lane's item: runs A (at a, na escapes) and B (at b).
__device__ __forceinline__ void fp_fetch(FpLane& r, uint32_t total, const uint8_t* escapes, uint32_t n_escapes) {
    r.held = 0;
#pragma unroll
    for (uint32_t t = 0; t < 8; ++t)
        if (t < total) r.held |= (unsigned long long)__ldg(escapes + min(fp_rank(r, t), n_escapes - 1)) << (8 * t);
}

// Fetches escapes 0..7 of a lane whose item lies in one chunk (run A only): three aligned words from its start.
__device__ __forceinline__ void fp_fetch_run(FpLane& r, const uint8_t* escapes, uint32_t n_escapes) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(escapes);
    const uint32_t w = min(r.a >> 2, n_escapes / 4 - 3), sh = 8 * (r.a & 3);
    const uint32_t w0 = __ldg(words + w), w1 = __ldg(words + w + 1), w2 = __ldg(words + w + 2);
    r.held = ((unsigned long long)__funnelshift_r(w1, w2, sh) << 32) | __funnelshift_r(w0, w1, sh);
}

// ORs the escaped exponents of codes v into (lo, hi), whose escaped bytes are 0 (tables map code 7 to 0); t counts
// the lane's escapes so far in the item. The general form: any number of escapes per item.
__device__ __forceinline__ void fp_apply(const FpLane& r, uint32_t& t, uint32_t v, const uint8_t* escapes,
                                         uint32_t n_escapes, uint32_t& lo, uint32_t& hi) {
    uint32_t m = fp_escape_mask(v);
    if (!m) return;
    unsigned long long e = ((unsigned long long)hi << 32) | lo;
    for (; m; m &= m - 1, ++t) {
        const uint32_t y = t < 8u ? (uint32_t)(r.held >> (8 * t)) & 0xffu
                                  : (uint32_t)__ldg(escapes + min(fp_rank(r, t), n_escapes - 1));
        e |= (unsigned long long)y << (((uint32_t)(__ffs(m) - 1) * 86u) >> 5);   // bit 3k -> byte k: 8k
    }
    lo = (uint32_t)e;
    hi = (uint32_t)(e >> 32);
}

// The same when the lane has at most 8 escapes in the item, all in `held`, which this consumes. The first escape of
// the 8 codes is applied without a branch (most 8-groups have none or one); a loop takes the rest.
__device__ __forceinline__ void fp_apply_held(uint32_t v, unsigned long long& held, uint32_t& lo, uint32_t& hi) {
    uint32_t m = fp_escape_mask(v);
    unsigned long long e = ((unsigned long long)hi << 32) | lo;
    const unsigned long long y = m ? (held & 0xffull) : 0ull;
    e |= y << ((((uint32_t)(__ffs(m) - 1) * 86u) >> 5) & 63u);         // bit 3k -> byte k: 8k
    held = m ? held >> 8 : held;
    m &= m - 1;
    while (m) {
        e |= (held & 0xffull) << (((uint32_t)(__ffs(m) - 1) * 86u) >> 5);
        held >>= 8;
        m &= m - 1;
    }
    lo = (uint32_t)e;
    hi = (uint32_t)(e >> 32);
}

// THE TILE ORDER (crates/df11-candle/src/cuda/forms/packed/tile_order.rs): a member [rows, cols] (rows % 8 == 0, cols % 256 == 0)
// may be stored in the order (G, k, m, i, g, t, e) so that a tensor-core sub-step reads W consecutive elements. The
// row-major index of the element at position p (both relative to the member's start; p < rows * cols < 2^32).
__device__ __forceinline__ uint32_t tile_original(uint32_t p, uint32_t cols) {
    const uint32_t group = p / (8u * cols), r0 = p - group * 8u * cols;
    const uint32_t k = r0 >> 14, r1 = r0 & 16383u;
    const uint32_t width = min(2048u, cols - 2048u * k);
    const uint32_t m = width == 2048u ? r1 >> 11 : r1 / width, r = width == 2048u ? r1 & 2047u : r1 - m * width;
    const uint32_t i = r >> 8, g = (r >> 5) & 7u, t = (r >> 3) & 3u, e = r & 7u;
    return (8u * group + g) * cols + 2048u * k + 8u * (4u * m + t) + 256u * i + e;
}

// 4 (sign_mantissa, exponent) byte pairs -> 4 BF16 (two u32 words, little-endian u16 lanes). Each half is one lop3
// (a bit select under 0x80808080: the compiler otherwise spends two logic ops on it), then two byte permutes.
__device__ __forceinline__ uint32_t fg_select80(uint32_t a, uint32_t b) {   // bits of b under 0x80808080, else a
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xD8;" : "=r"(r) : "r"(a), "r"(b), "r"(0x80808080u));
    return r;
}
__device__ __forceinline__ void fg_fuse4(uint32_t s, uint32_t e, uint32_t& lo, uint32_t& hi) {
    const uint32_t H = fg_select80(e >> 1, s);          // sign, exponent bits 7..1
    const uint32_t L = fg_select80(s, e << 7);          // exponent bit 0, mantissa
    lo = __byte_perm(L, H, 0x5140);
    hi = __byte_perm(L, H, 0x7362);
}

// Each byte of e rotated right by one bit (exponent bits 7..1 in bits 6..0, bit 0 in bit 7): the form fg_fuse4_rot
// takes. A kernel that decodes many weights per exponent word it loads (the member's table, a lane's held escapes)
// rotates those once, and each four weights then cost two bit selects and two permutes instead of six instructions
// (the streaming kernels' pass loop, docs/PERFORMANCE.md, 2026-11-28).
__device__ __forceinline__ uint32_t fg_rot(uint32_t e) { return fg_select80(e >> 1, e << 7); }
__device__ __forceinline__ unsigned long long fg_rot64(unsigned long long e) {
    return ((unsigned long long)fg_rot((uint32_t)(e >> 32)) << 32) | fg_rot((uint32_t)e);
}
// fg_fuse4 with the exponent bytes rotated (fg_rot): the same four BF16.
__device__ __forceinline__ void fg_fuse4_rot(uint32_t s, uint32_t r, uint32_t& lo, uint32_t& hi) {
    const uint32_t H = fg_select80(r, s);               // sign, exponent bits 7..1
    const uint32_t L = fg_select80(s, r);               // exponent bit 0, mantissa
    lo = __byte_perm(L, H, 0x5140);
    hi = __byte_perm(L, H, 0x7362);
}

// A unit in the packed form, as the product kernels (df11_fused.cu, df11_tc.cu) take it; t0, t1: the member's table
// (codes 0-3 and 4-7 as little-endian words).
struct FgPacked {
    const uint32_t* codes;
    const uint32_t* chunk_escapes;
    const uint8_t* lane_starts;
    uint32_t n_chunks;
    const uint8_t* escapes;
    uint32_t n_escapes;
    uint32_t t0, t1;
};

// Fills tab[4096] (shared memory) with the member's exponents of every four codes (12 bits -> four bytes);
// `threads` threads of the CTA take part. The caller synchronizes.
__device__ __forceinline__ void fp_fill_table(uint32_t* tab, const FgPacked& pk, uint32_t threads) {
    for (uint32_t i = threadIdx.x; i < 4096; i += threads) tab[i] = __byte_perm(pk.t0, pk.t1, fp_spread(i));
}

// A LANE'S ITEM: chunk lane L of the 2048-element piece of a row starting at unit element j0 (W <= 2048 of its
// elements): 8-groups j0/8 + L + 32 i, i.e. elements j0 + 8L + 256 i .. + 8, for the passes i with 8L + 256 i < W.
// What such an item needs first, loaded one item ahead (software pipeline): its codes for the 8 passes and its escape
// starts in the item's chunk and the next. Lanes past the item get empty codes.
struct FpPre {
    uint32_t v[8];
    uint32_t a, b;
};

__device__ __forceinline__ FpPre fp_prefetch(const FgPacked& pk, uint32_t j0, int W, uint32_t L) {
    const uint32_t qb = (j0 >> 3) + L;
    const uint32_t* cw = pk.codes + ((3u * qb) >> 2);
    const uint32_t sh = ((qb & 3u) * 24u) & 31u;
    FpPre p;
#pragma unroll
    for (int i = 0; i < 8; ++i)
        p.v[i] = (int)(8 * L) + 256 * i < W ? __funnelshift_r(__ldg(cw + 24 * i), __ldg(cw + 24 * i + 1), sh) & 0xffffffu
                                             : 0u;
    const uint32_t chunk = qb >> 8, lane = qb & 31u;
    p.a = W > 0 ? fp_lane_start(pk.chunk_escapes, pk.lane_starts, pk.n_chunks, chunk, lane) : 0u;
    p.b = W > 0 && (j0 & 2047u) + (uint32_t)W > 2048u
              ? fp_lane_start(pk.chunk_escapes, pk.lane_starts, pk.n_chunks, chunk + 1, lane)
              : 0u;
    return p;
}

// The weights of a lane's item (see FpPre; p from fp_prefetch) as BF16: for each pass i in order, consume(i, w) with
// w the eight weights as four BF16 pairs. With the codes already loaded the lane counts its escapes and fetches its
// first 8 at once (one memory latency per item), then per pass: table lookups (tab: fp_fill_table), escape patches,
// BF16 rebuild. No lane talks to another. ALIGNED: the item is a whole 2048-element chunk of the unit (j0 % 2048 == 0,
// W == 2048), so L is the chunk's lane and pass i its pass i. Otherwise the passes may start mid-chunk (the lane's
// escapes in earlier passes of that chunk are counted from their codes) and run into the next chunk. The loop over
// passes stops at the first pass past W: warp-uniform when W % 256 == 0 (what df11_tc.cu relies on).
template <bool ALIGNED, typename Consume>
__device__ __forceinline__ void fp_item(const uint32_t* tab, const FgPacked& pk, const uint8_t* sign_mantissa,
                                        uint32_t j0, int W, uint32_t L, const FpPre& p, Consume&& consume) {
    const uint2* smp = reinterpret_cast<const uint2*>(sign_mantissa + j0 + 8 * L);
    uint2 sm[8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
        sm[i] = ALIGNED || (int)(8 * L) + 256 * i < W ? __ldg(smp + 32 * i) : make_uint2(0u, 0u);
    const uint32_t qb = (j0 >> 3) + L;
    FpLane r;
    r.a = p.a;
    r.b = p.b;
    if (!ALIGNED) {
        // Escapes of this lane in the earlier passes of its chunk (they belong to the previous item).
        for (uint32_t k = 1; k <= ((qb >> 5) & 7u); ++k) r.a += __popc(fp_escape_mask(fp_codes8(pk.codes, qb - 32 * k)));
    }
    uint32_t na = 0, nb_ = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const uint32_t n = __popc(fp_escape_mask(p.v[i]));
        if (ALIGNED || ((qb + 32u * i) >> 8) == (qb >> 8)) na += n;
        else nb_ += n;
    }
    r.na = na;
    const uint32_t total = na + nb_;
    if (ALIGNED) fp_fetch_run(r, pk.escapes, pk.n_escapes);
    else fp_fetch(r, total, pk.escapes, pk.n_escapes);
    unsigned long long held = r.held;
    uint32_t t = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        if (!ALIGNED && (int)(8 * L) + 256 * i >= W) break;   // this lane is past the item
        uint32_t lo = tab[p.v[i] & 0xfffu], hi = tab[p.v[i] >> 12];
        if (total <= 8u) fp_apply_held(p.v[i], held, lo, hi);
        else fp_apply(r, t, p.v[i], pk.escapes, pk.n_escapes, lo, hi);
        uint32_t w[4];
        fg_fuse4(sm[i].x, lo, w[0], w[1]);
        fg_fuse4(sm[i].y, hi, w[2], w[3]);
        consume(i, w);
    }
}
