// THE ESCAPE TABLE of the packed form's codes (df11_packed.cuh): eight codes with their escapes -> eight exponents in
// a few instructions. Used by the streaming, panel and warpgroup tensor-core kernels (df11_tc_stream.cuh). (The tiled
// decode kernel of df11_packed.cu decoding through it, the table copied into each CTA, measured slower than its own
// arithmetic decode: 0.252 against 0.234 ms of decode a Qwen3-8B layer, H200, docs/PERFORMANCE.md, 2026-11-28; not
// profiled.) Written for this project.

#pragma once
#include <stdint.h>
#include "df11_packed.cuh"

#define TS_TABLE_BYTES (4 * (4096 + 16))   // the table's bytes (mirrored by the host: tc/stream.rs)

// THE ESCAPE TABLE, indexed by four codes (12 bits, code k at bits 3k): 4096 words .x, then 16 words .y. Entry .x:
// bits 0-15 the byte selector that takes each code's exponent from the member's table (t0: codes 0-3, t1: codes 4-7,
// code 7 -> 0), bits 16-19 the mask of the escaped codes (code 7) among the four, bits 24-31 eight times their number.
// Entry .y[mask]: the byte selector that keeps byte k of that word for a code below 7 and takes byte r of the held
// escapes for the r-th escaped code (it depends on the mask alone: 16 words, where a .y per four codes took 16 KB
// and a lane's lookups could conflict; a third CTA an SM, which the smaller table allows, measured slower). So
//     exponents = prmt(prmt(t0, t1, .x), held, .y[(.x >> 16) & 15]);  held >>= .x >> 24;
// decodes four codes with their escapes. It does not depend on the member: one table serves every launch. The
// kernels keep t0, t1 and held with every byte rotated (fg_rot, df11_packed.cuh: a byte permute moves bytes whole, so
// the exponents come out rotated) and fuse them with fg_fuse4_rot.
struct __align__(16) TsTable {
    uint32_t e[4096 + 16];
    constexpr TsTable() : e() {
        for (uint32_t i = 0; i < 4096; ++i) {
            uint32_t spread = 0, mask = 0, n = 0;
            for (uint32_t k = 0; k < 4; ++k) {
                const uint32_t c = (i >> (3 * k)) & 7u;
                spread |= c << (4 * k);
                if (c == 7u) {
                    mask |= 1u << k;
                    ++n;
                }
            }
            e[i] = spread | (mask << 16) | ((8u * n) << 24);
        }
        for (uint32_t mask = 0; mask < 16; ++mask) {
            uint32_t pick = 0, n = 0;
            for (uint32_t k = 0; k < 4; ++k) pick |= ((mask >> k) & 1u ? 4u + n++ : k) << (4 * k);
            e[4096 + mask] = pick;
        }
    }
};
__device__ const TsTable ts_table;
// Its copy in shared memory (a file-scope array is allocated only in the kernels that use it), at a fixed address, so
// a lookup is one LDS with the table's offset as its immediate. Each CTA copies it in first (ts_stage_table).
__shared__ __align__(16) uint32_t ts_tab[4096 + 16];

// THE ESCAPE-BITS TABLE (the streaming kernels above 8 rows of x: ts_decode8_bits): 1024 words indexed by the escape
// bits of four codes (bit 3k set: code k is 7): bits 0-15 the byte selector that keeps byte k of a word for a code below
// 7 and takes byte 4 + r (byte r of the held escapes) for the r-th escaped code, bits 24-31 eight times their number.
// Most lookups are of word 0 (no escape among the four), so a warp's lookups are broadcasts, where the 4096-word table's
// are spread over the banks.
struct __align__(16) TsBitsTable {
    uint32_t e[1024];
    constexpr TsBitsTable() : e() {
        for (uint32_t m = 0; m < 1024; ++m) {
            uint32_t sel = 0, n = 0;
            for (uint32_t k = 0; k < 4; ++k) sel |= ((m >> (3 * k)) & 1u ? 4u + n++ : k) << (4 * k);
            e[m] = sel | ((8u * n) << 24);
        }
    }
};
__device__ const TsBitsTable ts_bits_table;
__shared__ __align__(16) uint32_t ts_bits[1024];
#define TS_BITS_TABLE_BYTES 4096

// prmt with a run-time selector (__byte_perm masks each selector nibble with a logic op first; ours never set bit 3
// of a nibble, and prmt reads only the low 16 bits).
__device__ __forceinline__ uint32_t ts_prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

// Eight codes v (24 bits, code k at bits 3k) -> their exponents (lo: codes 0-3, hi: 4-7), every byte rotated (fg_rot)
// as t0, t1 and `held` are: the member's table rotated and the lane's next escapes, rotated, from byte 0 of `held`,
// which this consumes. Returns how many escapes it took. .x for every four codes, then .y by its escape mask (16
// words: conflict-free; .y[0] = 0x3210 keeps the four bytes). (One 8-byte lookup of both from 4096 pairs: 3.6-way
// bank conflicts; 0.157 -> 0.152 ms a Qwen3-8B layer at 1 row when split, H100.)
__device__ __forceinline__ uint32_t ts_decode8(uint32_t v, uint32_t t0, uint32_t t1, unsigned long long& held,
                                               uint32_t& lo, uint32_t& hi) {
    const uint32_t ax = ts_tab[v & 0xfffu], bx = ts_tab[(v >> 12) & 0xfffu];
    const uint32_t ay = ts_tab[4096 + ((ax >> 16) & 15u)], by = ts_tab[4096 + ((bx >> 16) & 15u)];
    lo = ts_prmt(ts_prmt(t0, t1, ax), (uint32_t)held, ay);
    held >>= ax >> 24;
    hi = ts_prmt(ts_prmt(t0, t1, bx), (uint32_t)held, by);
    held >>= bx >> 24;
    return ((ax >> 24) + (bx >> 24)) >> 3;
}

// Eight codes of 3 bits (bits 0-23) spread into eight selector nibbles of the member's table (bit 3 of each clear).
// (Host too: kernels/harness/escape_bits_check.cu checks it.)
__host__ __device__ __forceinline__ uint32_t ts_nibbles(uint32_t c) {
    c = (c & 0xfffu) | ((c & 0xfff000u) << 4);
    c = (c & 0x003f003fu) | ((c & 0x0fc00fc0u) << 2);
    return (c & 0x07070707u) | ((c & 0x38383838u) << 1);
}

// ts_decode8's result by arithmetic and the escape-bits table (ts_bits): the exponents by two byte permutes of the
// member's table with the codes spread into selector nibbles, then each four codes' escapes by a byte permute of
// `held` whose selector is looked up by their escape bits. The same exponents, the same escapes consumed. Measured
// against ts_decode8 in the streaming kernel on an H200 (Qwen3-8B layer, CUDA graph): 0.168 against 0.187 ms at 16
// rows, the same at 8 rows, 0.116 against 0.112 at 1 row (docs/PERFORMANCE.md), so the kernels take it above 8 rows.
__device__ __forceinline__ uint32_t ts_decode8_bits(uint32_t v, uint32_t t0, uint32_t t1, unsigned long long& held,
                                                    uint32_t& lo, uint32_t& hi) {
    const uint32_t sel = ts_nibbles(v), esc = v & (v >> 1) & (v >> 2);
    const uint32_t ylo = ts_bits[esc & 0x249u], yhi = ts_bits[(esc >> 12) & 0x249u];
    lo = ts_prmt(ts_prmt(t0, t1, sel), (uint32_t)held, ylo);
    held >>= ylo >> 24;
    hi = ts_prmt(ts_prmt(t0, t1, sel >> 16), (uint32_t)held, yhi);
    held >>= yhi >> 24;
    return ((ylo >> 24) + (yhi >> 24)) >> 3;
}
