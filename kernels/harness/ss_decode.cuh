// THE DECODING PRODUCER of kernels/harness/ss_kernel.cuh (a measurement harness): a producer warp's inputs for one
// chunk of the packed form, and their decode into the chunk's 2048 BF16 in the kernel's block layout (two byte_perm
// lookups and an escape-mask table a pass; or the streaming kernels' decodes, by their escape table or by escape bits).
// SsArgs, the launch's arguments, lives here too.
// Written for this project.
#pragma once
#include <cstdint>

#include "../df11_escape_table.cuh"
#include "../df11_tc_wg.cuh"

// The packed form of every weight block (DF11) or the weight blocks as BF16 (twin), x's blocks, y.
struct SsArgs {
    const uint16_t* wb;   // twin: [N / BM][KB][BM * BK]
    const uint32_t* codes;
    const uint32_t* chunk_escapes;
    const uint8_t* lane_starts;
    const uint8_t* escapes;
    uint32_t n_escapes;   // the escapes buffer's length (padded)
    const uint8_t* sm;
    uint32_t t0, t1;
    const uint16_t* xb;   // [ceil(R / RT)][KB][RT * BK], rows past R zero
    uint16_t* y;          // [R][N]
    float* ws;            // split K (gridDim.z > 1): [splits][R][N] fp32 partial sums, added by ss_reduce
    int R, N, K;
};

// A lane's inputs for one chunk of the packed form (2048 weights, layout order; lane L's pass i is positions
// 256 i + 8 L .. + 7): its 3-bit codes of each pass (at bit 3 (2048 q + 256 i + 8 L)), its sign_mantissa bytes, and
// the first eight of its escapes (in order from the chunk's and lane's start; more are read from global memory).
struct SsIn {
    uint32_t c24[8];
    uint2 s[8];
    uint32_t e_lo, e_hi, esc;
    uint32_t cnt;     // SS_START_AHEAD: the lane's escapes in the chunk (else unset)
    bool in_window;   // e_lo, e_hi hold the escapes (else ss_decode reads them from global memory)
};

// Where lane's escapes of chunk q start (two dependent loads: issued a chunk before ss_load needs them).
__device__ __forceinline__ uint32_t ss_escape_start(const SsArgs& a, uint32_t q, uint32_t lane) {
    return __ldg(a.chunk_escapes + q) + __ldg(a.lane_starts + 32 * q + lane);
}

__device__ __forceinline__ void ss_load(SsIn& in, const SsArgs& a, uint32_t q, uint32_t lane, uint32_t esc) {
    const uint32_t sh = (24u * lane) & 31u, w0 = 192u * q + ((24u * lane) >> 5);
    const uint8_t* smp = a.sm + 2048ull * q + 8 * lane;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        in.c24[i] = __funnelshift_r(__ldg(a.codes + w0 + 24 * i), __ldg(a.codes + w0 + 24 * i + 1), sh);
        in.s[i] = __ldg(reinterpret_cast<const uint2*>(smp + 256 * i));
    }
    // The escapes buffer is padded past its last escape, so three words from any escape's word are inside it.
    const uint32_t* ew = reinterpret_cast<const uint32_t*>(a.escapes) + (esc >> 2);
    const uint32_t x0 = __ldg(ew), x1 = __ldg(ew + 1), x2 = __ldg(ew + 2), b = 8u * (esc & 3u);
    in.e_lo = __funnelshift_r(x0, x1, b);
    in.e_hi = __funnelshift_r(x1, x2, b);
    in.esc = esc;
    in.in_window = true;
}

// Four BF16 from four sign_mantissa bytes s and four exponent bytes e: (s & 0x80) << 8 | e << 7 | (s & 0x7f) each.
__device__ __forceinline__ uint2 ss_join(uint32_t s, uint32_t e) {
    const uint32_t hi = (s & 0x80808080u) | ((e >> 1) & 0x7f7f7f7fu);
    const uint32_t lo = ((e << 7) & 0x80808080u) | (s & 0x7f7f7f7fu);
    return make_uint2(__byte_perm(lo, hi, 0x5140), __byte_perm(lo, hi, 0x7362));
}

// The escape table (shared memory, 256 entries, ss_escape_table): for the escape mask b of a pass (bit e: element
// e's code is 7), x = a byte_perm selector whose nibble e is the number of escapes before element e (its byte in the
// lane's escape window), y and z = byte masks of the escaped elements 0..3 and 4..7, w = the escapes in the pass.
__device__ __forceinline__ void ss_escape_table(uint4* table, int tid, int threads) {
    for (int b = tid; b < 256; b += threads) {
        uint32_t sel = 0, lo = 0, hi = 0, n = 0;
        for (int e = 0; e < 8; ++e)
            if (b >> e & 1) {
                sel |= n << (4 * e);
                (e < 4 ? lo : hi) |= 0xffu << (8 * (e & 3));
                ++n;
            }
        table[b] = make_uint4(sel, lo, hi, n);
    }
}

// Decodes a lane's chunk (ss_load's inputs) into dst (the chunk's 2048 BF16 in layout order): a pass's eight
// exponents by two byte_perm lookups of the table, its escapes (codes 7) by two byte_perm lookups of the lane's
// escape window at the places the escape table gives, then joined with their bytes. A lane with more escapes in the
// chunk than its window holds (8) takes them one by one from global memory.
__device__ __forceinline__ void ss_decode(const SsIn& in, const SsArgs& a, const uint4* esc_table, uint16_t* dst,
                                          uint32_t lane) {
#ifdef SS_NO_DECODE   // diagnostic: the inputs stored as they are (wrong weights)
#pragma unroll
    for (int i = 0; i < 8; ++i)
        *reinterpret_cast<uint4*>(dst + 256 * i + 8 * lane) = make_uint4(in.c24[i], in.s[i].x, in.s[i].y, in.e_lo);
    return;
#endif
    uint32_t n_esc = 0, n_pass[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        n_pass[i] = __popc(in.c24[i] & (in.c24[i] >> 1) & (in.c24[i] >> 2) & 0x249249u);
        n_esc += n_pass[i];
    }
    // Where each pass's escapes start in the window: from the codes' counts, so the passes do not wait on each other's
    // table lookups (shifting the window pass by pass by the table's count chained all eight: 3-4% slower).
    uint32_t before = 0;
    uint64_t w = (uint64_t)in.e_hi << 32 | in.e_lo;
    uint32_t esc = in.esc;
    const bool window = n_esc <= 8 && in.in_window;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const uint32_t c = in.c24[i] & 0xffffffu, sel = ts_nibbles(c);
        uint32_t e_lo = __byte_perm(a.t0, a.t1, sel & 0xffffu), e_hi = __byte_perm(a.t0, a.t1, sel >> 16);
#ifndef SS_NO_ESCAPES
        // Escaped elements: nibbles 0111, gathered into an 8-bit mask.
        uint32_t m = sel & (sel >> 1) & (sel >> 2) & 0x11111111u;
        m = (m | (m >> 3)) & 0x03030303u;
        m = (m | (m >> 6)) & 0x000f000fu;
        m = (m | (m >> 12)) & 0xffu;
        if (window) {
            const uint4 t = esc_table[m];
            const uint64_t wi = w >> (8 * min(before, 7u));   // before == 8: no escape left in this pass
            const uint32_t lo = (uint32_t)wi, hi = (uint32_t)(wi >> 32);
            e_lo = (e_lo & ~t.y) | (__byte_perm(lo, hi, t.x & 0xffffu) & t.y);
            e_hi = (e_hi & ~t.z) | (__byte_perm(lo, hi, t.x >> 16) & t.z);
        } else {
            for (int e = 0; e < 8; ++e)
                if (m >> e & 1) {
                    const uint32_t ex = a.escapes[esc++], sh = 8 * (e & 3);
                    if (e < 4) e_lo = (e_lo & ~(0xffu << sh)) | (ex << sh);
                    else e_hi = (e_hi & ~(0xffu << sh)) | (ex << sh);
                }
        }
        before += n_pass[i];
#endif
        const uint2 lo = ss_join(in.s[i].x, e_lo), hi = ss_join(in.s[i].y, e_hi);
        *reinterpret_cast<uint4*>(dst + 256 * i + 8 * lane) = make_uint4(lo.x, lo.y, hi.x, hi.y);
    }
}

// Eight escape bytes from list index `at`, read from global memory (the slow path of a lane with more than 8).
__device__ __forceinline__ unsigned long long ss_fetch8(const SsArgs& a, uint32_t at) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(a.escapes);
    const uint32_t w = min(at >> 2, a.n_escapes / 4 - 3), sh = 8 * (at & 3);
    const uint32_t w0 = __ldg(words + w), w1 = __ldg(words + w + 1), w2 = __ldg(words + w + 2);
    return ((unsigned long long)__funnelshift_r(w1, w2, sh) << 32) | __funnelshift_r(w0, w1, sh);
}

#if defined(SS_TS_DECODE) || defined(SS_HYBRID_DECODE)
// The streaming kernels' decodes (df11_escape_table.cuh), joined to their sign_mantissa bytes with the exponents kept
// rotated (fg_fuse4_rot; t0r, t1r: the member's table, rotated). SS_TS_DECODE: ts_decode8, four codes with their
// escapes by two lookups of the 16 KB escape table (ts_tab). SS_HYBRID_DECODE (BITS): ts_decode8_bits, the exponents
// by byte permutes of the codes spread into nibbles, the escapes' selector from the 1024-word ts_bits by their bits.
#ifdef SS_HYBRID_DECODE
constexpr bool SS_BITS = true;
#else
constexpr bool SS_BITS = false;
#endif
template <bool SLOW, bool BITS>
__device__ __forceinline__ void ss_passes_table(const SsIn& in, const SsArgs& a, uint32_t t0r, uint32_t t1r,
                                                uint16_t* dst, uint32_t lane) {
    unsigned long long held = fg_rot64((unsigned long long)in.e_hi << 32 | in.e_lo);
    uint32_t cursor = in.esc;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        if (SLOW) held = fg_rot64(ss_fetch8(a, cursor));
        uint32_t elo, ehi, w[4];
#ifdef SS_NO_ESCAPES   // diagnostic (wrong weights; with SS_TS_DECODE): the exponents by the table's .x alone
        const uint32_t v = in.c24[i] & 0xffffffu, used = 0;
        elo = ts_prmt(t0r, t1r, ts_tab[v & 0xfffu]);
        ehi = ts_prmt(t0r, t1r, ts_tab[v >> 12]);
#else
        const uint32_t used = BITS ? ts_decode8_bits(in.c24[i], t0r, t1r, held, elo, ehi)
                                   : ts_decode8(in.c24[i] & 0xffffffu, t0r, t1r, held, elo, ehi);
#endif
        if (SLOW) cursor += used;
        fg_fuse4_rot(in.s[i].x, elo, w[0], w[1]);
        fg_fuse4_rot(in.s[i].y, ehi, w[2], w[3]);
        *reinterpret_cast<uint4*>(dst + 256 * i + 8 * lane) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}
__device__ __forceinline__ void ss_decode_table(const SsIn& in, const SsArgs& a, uint32_t t0r, uint32_t t1r,
                                                uint16_t* dst, uint32_t lane) {
#ifdef SS_START_AHEAD
    const uint32_t n_esc = in.cnt;
#else
    uint32_t n_esc = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) n_esc += __popc(in.c24[i] & (in.c24[i] >> 1) & (in.c24[i] >> 2) & 0x249249u);
#endif
    if (__all_sync(0xffffffffu, n_esc <= 8 && in.in_window)) ss_passes_table<false, SS_BITS>(in, a, t0r, t1r, dst, lane);
    else ss_passes_table<true, SS_BITS>(in, a, t0r, t1r, dst, lane);
}
#endif
