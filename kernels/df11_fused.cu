// DF11 segment kernels: a fused decode + matrix-vector product (small batch), its BF16 twin, and a
// decode-to-global kernel, all driven by a SEGMENT INDEX built on the host at load time; and the fused
// product over PACKED EXPONENTS.
// Written for this project from the format description (docs/df11-format.md); no code from the official decode.cu.
//
// ---------------------------------------------------------------------------------------------------------------
// SEGMENT INDEX. Segment s of a unit is elements [64 s, 64 s + 64). The host (df11-candle, src/segments.rs)
// decodes the unit once at load and records the bit offset of each segment's first code:
//     off(s) = seg_base[s >> 5] + seg_delta[s]         for s in [0, n_segs], off(n_segs) = end of the last code
// (u32 bases per 32 segments + u16 deltas: 0.27 bits per weight). Offsets are exact, so a lane can decode any
// segment alone: no gaps, no output_positions, no prefix scan. The host built them by decoding the same bytes
// the device holds, so they are consistent with the stream; the kernels still clamp every data-dependent index.
//
// DECODE TABLE. 4096 u32 entries indexed by the next 12 bits: bits 0-23 up to three symbols, bits 24-29 the bits
// they use (T), bits 30-31 their count n. n = 0: the first code is longer than 12 bits; the kernel then walks
// the format's LUTs (K rows of 256 bytes, row K-1 = code lengths). Built by the host from the validated LUTs.
//
// WORK. A warp handles an ITEM: one row r of a member matrix [rows, cols] (row-major at unit element `base`)
// and a chunk of at most 2048 of its columns (chunk_width, 2048 from the host), which lies within at most 33
// segments. Lane l decodes the chunk's segments l (and lane 0 also a 33rd): their codes are first copied to
// shared memory with coalesced loads (the stage), their exponents go to 72-byte slots in shared memory. Then
// the warp reads the chunk's exponents, sign_mantissa and x in coalesced 8-element groups and accumulates
// x·w in f32 with fmaf in a fixed order; the BF16 weight never touches global memory. Software pipeline (the
// profile showed warps waiting on global loads): the next item's index is read, and its codes copied to the
// stage with cp.async, while the current item decodes and multiplies; sign_mantissa of the current item is
// loaded before its decode.
//
// PACKED EXPONENTS (df11_packed.cuh; the default device form where it fits): the same GEMV with each lane's
// exponents read from fixed 3-bit codes instead of decoded from the Huffman stream (fp_item, df11_packed.cuh).
//
// MEASURED (H100, Qwen3-8B layer, batch 1; docs/PERFORMANCE.md): Huffman 0.258 ms, packed 0.194 ms for the 7
// matrices vs 0.174 ms for cuBLAS BF16 and 0.184 ms for the twin. Huffman limit (ncu): ~25 instructions per weight,
// issue slots ~55% busy, shared-memory bank conflicts (2.7-way loads, 2.0-way stores), 45% occupancy. Packed: ~0.4
// warp-instructions per weight, about half of them the escapes (an escape in nearly every 256-weight pass).
//
// SUMMATION ORDER (the contract shared by df11_gemv and bf16_gemv, which differ only in where w comes from):
//   lane l sums, for e = 8l, 8l + 256, ... < W, the 8 products of columns e..e+7 in order (fmaf into one f32
//   accumulator per batch row); the 32 lane sums are reduced by xor-shuffles 16, 8, 4, 2, 1; the chunk sums of
//   a row are added in chunk order k = 0, 1, ... starting from 0.0f; the result is rounded to the output dtype.
// So for the same weights both kernels give bit-identical outputs.
//
// HOST GUARANTEES: cols % 8 == 0, base % 8 == 0, every pointer 16-byte aligned except codes (4-byte), luts
// (any), codes padded with zero bytes to n_words >= 1 whole words, K in [2, 18], 1 <= nb <= MAXB, base + rows*cols <= n_elements, tile_rows * nchunks <= FG_MAX_ITEMS,
// dynamic shared memory = fg_smem(K, tile_rows * nchunks, MAXB) (see the Rust side).
// ---------------------------------------------------------------------------------------------------------------

#include <stdint.h>
#include <cuda_bf16.h>
#include "df11_packed.cuh"

#define FG_WARPS 8
#define FG_THREADS (32 * FG_WARPS)
#define FG_STAGE_WORDS 384     // 1536 bytes of codes per warp: up to 6 bits per weight staged, else read global
#define FG_SLOT 72             // bytes per segment slot: 64 exponents + up to 2 written past the end by a step
#define FG_N1 0x40000000u
#define FG_BAD 0x60000000u     // what an invalid code decodes to: symbol 0, T = 32, n = 1
#define FG_MAX_ITEMS 256
#define FG_SLOTS 33            // a 2048-element chunk not starting on a segment boundary touches 33 segments
#define FG_WARP_BYTES (FG_STAGE_WORDS * 4 + FG_SLOTS * FG_SLOT)

__device__ __forceinline__ uint32_t fg_bswap(uint32_t x) { return __byte_perm(x, 0, 0x0123); }

// Stream word w (little-endian load; fg_bswap makes it big-endian), clamped into the buffer: the host pads
// the device copy of the codes with zero bytes to whole words (n_words), so every load is one plain LDG that
// needs no branch (a branch per load makes the compiler wait for each load in turn).
__device__ __forceinline__ uint32_t fg_raw_word(const uint32_t* words, uint32_t w, uint32_t n_words) {
    return __ldg(words + min(w, n_words - 1));
}

__device__ __forceinline__ uint32_t fg_off(const uint32_t* base, const uint16_t* delta, uint32_t s) {
    return __ldg(base + (s >> 5)) + __ldg(delta + s);
}

// A code longer than 12 bits (x: the next 32 bits): walk the LUT rows, one byte per level.
__device__ __forceinline__ uint32_t fg_slow(uint32_t x, const uint8_t* luts, int K) {
    int row = 0;
#pragma unroll
    for (int lvl = 0; lvl < 4; ++lvl) {
        uint32_t v = luts[row * 256 + ((x >> (24 - 8 * lvl)) & 255u)];
        if (v < 240u) {
            uint32_t len = luts[(K - 1) * 256 + v];
            if (len - 1u > 31u) return FG_BAD;
            return v | (len << 24) | FG_N1;
        }
        row = 256 - (int)v;
        if (row > K - 2) return FG_BAD;
    }
    return FG_BAD;
}

// Decodes `count` (<= 64) codes from bit `bit` of the word source into out[0, count) (+ up to 2 bytes past).
// STAGED: words[] is shared memory holding nw words; otherwise words come from global memory.
template <bool STAGED>
__device__ __forceinline__ void fg_decode_segment(const uint32_t* words, uint32_t nw, const uint32_t* codes,
                                                  uint32_t n_words, uint32_t bit, int count,
                                                  const uint32_t* tab, const uint8_t* luts, int K, uint8_t* out) {
    uint32_t wi = bit >> 5;
    uint32_t sh = bit & 31u;
    auto fetch = [&](uint32_t i) -> uint32_t {
        if (STAGED) return fg_bswap(words[min(i, nw - 1)]);
        return fg_bswap(fg_raw_word(codes, i, n_words));
    };
    uint32_t hi = fetch(wi), lo = fetch(wi + 1);
    int k = 0;
    while (k < count) {
        const uint32_t x = __funnelshift_l(lo, hi, sh);
        uint32_t e = tab[x >> 20];
        if (e < FG_N1) e = fg_slow(x, luts, K);
        out[k] = (uint8_t)e;
        out[k + 1] = (uint8_t)(e >> 8);
        out[k + 2] = (uint8_t)(e >> 16);
        k += (int)(e >> 30);
        sh += (e >> 24) & 63u;
        if (sh >= 32) {
            sh -= 32;
            hi = lo;
            ++wi;
            lo = fetch(wi + 1);
        }
    }
}

__device__ __forceinline__ float fg_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float fg_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// 8 consecutive x values of one batch row as floats.
__device__ __forceinline__ void fg_load_x(const __nv_bfloat16* x, float* v) {
    uint4 q = __ldg(reinterpret_cast<const uint4*>(x));
    v[0] = fg_lo(q.x); v[1] = fg_hi(q.x); v[2] = fg_lo(q.y); v[3] = fg_hi(q.y);
    v[4] = fg_lo(q.z); v[5] = fg_hi(q.z); v[6] = fg_lo(q.w); v[7] = fg_hi(q.w);
}
__device__ __forceinline__ void fg_store(__nv_bfloat16* y, float v) { *y = __float2bfloat16_rn(v); }

// THE SUMMATION CONTRACT's inner step, shared by every weight source: adds the 8 products of one lane's columns
// (weights w as four BF16 pairs, x from xb + b * cols for batch row b) to acc[b], in column order, with fmaf.
template <int MAXB, typename XT>
__device__ __forceinline__ void fg_accumulate8(const uint32_t (&w)[4], const XT* xb, int cols, int nb, float* acc) {
#pragma unroll
    for (int b = 0; b < MAXB; ++b) {
        if (MAXB == 1 || b < nb) {                                // the host gives 1 <= nb <= MAXB
            float v[8];
            fg_load_x(xb + (long long)b * cols, v);
            float a = acc[b];
            a = fmaf(fg_lo(w[0]), v[0], a);
            a = fmaf(fg_hi(w[0]), v[1], a);
            a = fmaf(fg_lo(w[1]), v[2], a);
            a = fmaf(fg_hi(w[1]), v[3], a);
            a = fmaf(fg_lo(w[2]), v[4], a);
            a = fmaf(fg_hi(w[2]), v[5], a);
            a = fmaf(fg_lo(w[3]), v[6], a);
            a = fmaf(fg_hi(w[3]), v[7], a);
            acc[b] = a;
        }
    }
}

struct FgShared {
    uint32_t* tab;      // [4096]
    uint8_t* luts;      // [K*256]
    uint32_t* stage;    // this warp's [FG_STAGE_WORDS]
    uint8_t* exps;      // this warp's [32 * FG_SLOT]
    float* partial;     // [items * MAXB]
};

extern __shared__ __align__(16) uint8_t fg_dynamic_smem[];
__device__ __forceinline__ uint8_t* fg_smem() { return fg_dynamic_smem; }

__device__ __forceinline__ size_t fg_luts_bytes(int K) { return ((size_t)K * 256 + 15) & ~(size_t)15; }

// Loads the tables and carves the shared memory (layout mirrored by the host's `smem_bytes`): tables,
// then per warp its stage and exponent slots, then the partial sums. The twin has only the partial sums.
__device__ __forceinline__ FgShared fg_setup(uint8_t* smem, const uint32_t* table, const uint8_t* luts, int K,
                                             bool twin) {
    FgShared s;
    const uint32_t t = threadIdx.x, warp = t >> 5;
    if (twin) {                                       // the twin needs only the partial sums
        s.tab = nullptr, s.luts = nullptr, s.stage = nullptr, s.exps = nullptr;
        s.partial = reinterpret_cast<float*>(smem);
        return s;
    }
    s.tab = reinterpret_cast<uint32_t*>(smem);
    s.luts = smem + 16384;
    uint8_t* w = s.luts + fg_luts_bytes(K);
    s.stage = reinterpret_cast<uint32_t*>(w + warp * FG_WARP_BYTES);
    s.exps = reinterpret_cast<uint8_t*>(s.stage + FG_STAGE_WORDS);
    s.partial = reinterpret_cast<float*>(w + FG_WARPS * FG_WARP_BYTES);
    for (uint32_t i = t; i < 1024; i += FG_THREADS)
        reinterpret_cast<uint4*>(s.tab)[i] = __ldg(reinterpret_cast<const uint4*>(table) + i);
    for (uint32_t i = t; i < (uint32_t)K * 256; i += FG_THREADS) s.luts[i] = __ldg(luts + i);
    __syncthreads();
    return s;
}

// PACKED mode: the member's code table (t0: codes 0-3, t1: codes 4-7) expanded to 4096 entries, one per four codes
// (12 bits), each four exponent bytes; then the partial sums.

__device__ __forceinline__ FgShared fg_setup_packed(uint8_t* smem, const FgPacked& pk) {
    FgShared s;
    s.tab = reinterpret_cast<uint32_t*>(smem);
    s.luts = nullptr, s.stage = nullptr, s.exps = nullptr;
    s.partial = reinterpret_cast<float*>(smem + 16384);
    fp_fill_table(s.tab, pk, FG_THREADS);
    __syncthreads();
    return s;
}

// What a warp needs to know of a chunk (unit elements [j0, j0 + W), W <= 2048: at most 33 segments) before
// decoding it. Filling it only issues loads; nothing waits for them until the fields are used, so the next
// chunk's index can be read while this one decodes.
struct FgChunk {
    uint32_t s0;      // first segment
    int nsegs;        // segments covering the chunk
    uint32_t w0;      // first stream word of the chunk's codes
    uint32_t need;    // words to stage (FG_STAGE_WORDS + 1: too many, decode from global memory)
    uint32_t bit;     // this lane's segment's first bit (lanes < nsegs)
};

__device__ __forceinline__ FgChunk fg_chunk_index(long long j0, long long W, const uint32_t* seg_base,
                                                  const uint16_t* seg_delta) {
    const uint32_t lane = threadIdx.x & 31;
    FgChunk c;
    c.s0 = (uint32_t)(j0 >> 6);
    const uint32_t s_end = (uint32_t)((j0 + W + 63) >> 6);
    c.nsegs = (int)min(s_end - c.s0, (uint32_t)FG_SLOTS);
    const uint32_t b0 = fg_off(seg_base, seg_delta, c.s0), b1 = fg_off(seg_base, seg_delta, c.s0 + c.nsegs);
    c.w0 = b0 >> 5;
    c.need = min(((b1 + 31) >> 5) - c.w0 + 2, (uint32_t)FG_STAGE_WORDS + 1);
    c.bit = (int)lane < c.nsegs ? fg_off(seg_base, seg_delta, c.s0 + lane) : 0u;
    return c;
}

// Starts copying the chunk's codes into the warp's stage (raw little-endian words; the decoder swaps them).
// On sm_80+ with cp.async, so the copy runs while the warp does other work; fg_decode_chunk waits for it.
__device__ __forceinline__ void fg_stage_issue(const FgShared& s, const FgChunk& c, const uint32_t* codes,
                                               uint32_t n_words) {
    const uint32_t lane = threadIdx.x & 31;
    if (c.need > FG_STAGE_WORDS) return;                             // warp-uniform
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    for (uint32_t i = lane; i < c.need; i += 32) {
        const uint32_t d = (uint32_t)__cvta_generic_to_shared(s.stage + i);
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d),
                     "l"(codes + min(c.w0 + i, n_words - 1)));
    }
    asm volatile("cp.async.commit_group;\n" ::);
#else
    // All loads first, then the stores: the words are in flight together, not one latency each.
    uint32_t v[FG_STAGE_WORDS / 32];
#pragma unroll
    for (int q = 0; q < FG_STAGE_WORDS / 32; ++q)
        if (lane + 32 * q < c.need) v[q] = fg_raw_word(codes, c.w0 + lane + 32 * q, n_words);
#pragma unroll
    for (int q = 0; q < FG_STAGE_WORDS / 32; ++q)
        if (lane + 32 * q < c.need) s.stage[lane + 32 * q] = v[q];
#endif
}

// Decodes chunk c (staged by fg_stage_issue) into the warp's exponent slots: unit element j lands at
// exps[((j - 64 s0) >> 6) * FG_SLOT + (j & 63)]. On return the stage may be refilled.
__device__ __forceinline__ void fg_decode_chunk(const FgShared& s, const FgChunk& c, const uint32_t* codes,
                                                uint32_t n_words, const uint32_t* seg_base,
                                                const uint16_t* seg_delta, long long n_elements, int K) {
    const uint32_t lane = threadIdx.x & 31;
    const bool staged = c.need <= FG_STAGE_WORDS;                    // warp-uniform
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (staged) asm volatile("cp.async.wait_all;\n" ::);
#endif
    __syncwarp();
    for (int i = lane; i < c.nsegs; i += 32) {
        const uint32_t seg = c.s0 + i;
        const int count = (int)min(64LL, n_elements - 64LL * seg);
        const uint32_t bit = i < 32 ? c.bit : fg_off(seg_base, seg_delta, seg);
        uint8_t* out = s.exps + i * FG_SLOT;
        if (staged)
            fg_decode_segment<true>(s.stage, c.need, codes, n_words, bit - 32u * c.w0, count, s.tab, s.luts, K,
                                    out);
        else
            fg_decode_segment<false>(nullptr, 0, codes, n_words, bit, count, s.tab, s.luts, K, out);
    }
    __syncwarp();
}

// ---- Fused GEMV: y[b, r] = sum_c x[b, c] * W[r, c], W = member at unit element `base`. SRC says where W comes
// from: FG_HUFF (Huffman stream + segment index), FG_PACKED (packed exponents) or FG_DENSE (BF16 weights: the twin).
// A warp takes items warp, warp + 8, ... of each tile its CTA handles. For the Huffman source the next item's index
// is read and its codes copied to the stage while the current item decodes and multiplies (software pipeline).
#define FG_HUFF 0
#define FG_PACKED 1
#define FG_DENSE 2
template <int MAXB, int SRC, typename XT>
__device__ __forceinline__ void fg_gemv(const uint32_t* table, const uint8_t* luts, int K, const uint32_t* codes,
                                        uint32_t n_words, const uint32_t* seg_base, const uint16_t* seg_delta,
                                        const FgPacked& pk, const uint8_t* sign_mantissa, long long n_elements,
                                        const uint16_t* wdense, const XT* x, XT* y, int nb, int rows, int cols,
                                        long long base, int tile_rows, int chunk_width) {
    constexpr bool TWIN = SRC == FG_DENSE, HUFF = SRC == FG_HUFF, PACKED = SRC == FG_PACKED;
    const FgShared s = PACKED ? fg_setup_packed(fg_smem(), pk) : fg_setup(fg_smem(), table, luts, K, TWIN);
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nchunks = (cols + chunk_width - 1) / chunk_width;
    const int items = tile_rows * nchunks;
    const int ntiles = (rows + tile_rows - 1) / tile_rows;
    // Unit element of item (tile, item)'s first column, and its width; W = 0: no such item.
    auto locate = [&](int tile, int item, long long& j0, long long& W) {
        const int r = tile * tile_rows + item / nchunks, k = item % nchunks;
        W = (tile < ntiles && item < items && r < rows) ? min((long long)chunk_width, (long long)cols - (long long)k * chunk_width) : 0;
        j0 = base + (long long)r * cols + (long long)k * chunk_width;
    };
    FgChunk cur = {};
    FpPre pcur = {};
    if (PACKED) {
        long long j0, W;
        locate(blockIdx.x, warp, j0, W);
        pcur = fp_prefetch(pk, (uint32_t)j0, (int)W, lane);
    }
    if (HUFF) {
        long long j0, W;
        locate(blockIdx.x, warp, j0, W);
        if (W > 0) {
            cur = fg_chunk_index(j0, W, seg_base, seg_delta);
            fg_stage_issue(s, cur, codes, n_words);
        }
    }
    for (int tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const int r0 = tile * tile_rows;
        for (int item = warp; item < items; item += FG_WARPS) {
            const int r = r0 + item / nchunks, k = item % nchunks;
            float acc[MAXB];
#pragma unroll
            for (int b = 0; b < MAXB; ++b) acc[b] = 0.0f;
            long long j0, W;
            locate(tile, item, j0, W);
            const long long c0 = (long long)k * chunk_width;
            // The next item of this warp, and its index (loads in flight during this item).
            FgChunk nxt = {};
            long long nj0 = 0, nW = 0;
            if (!TWIN) {
                if (item + FG_WARPS < items) locate(tile, item + FG_WARPS, nj0, nW);
                else locate(tile + gridDim.x, warp, nj0, nW);
                if (HUFF && nW > 0) nxt = fg_chunk_index(nj0, nW, seg_base, seg_delta);
            }
            FpPre pnxt = {};
            if (PACKED) pnxt = fp_prefetch(pk, (uint32_t)nj0, (int)nW, lane);
            if (W > 0) {
                constexpr int PRE = HUFF && MAXB <= 2 ? 8 : 1;   // sign_mantissa loads issued before the decode
                uint2 smv[PRE];
                if (PRE == 8) {
#pragma unroll
                    for (int i = 0; i < PRE; ++i)
                        if (8 * lane + 256 * i < W)
                            smv[i] = __ldg(reinterpret_cast<const uint2*>(sign_mantissa + j0 + 8 * lane + 256 * i));
                }
                if (HUFF) {
                    fg_decode_chunk(s, cur, codes, n_words, seg_base, seg_delta, n_elements, K);
                    if (nW > 0) fg_stage_issue(s, nxt, codes, n_words);  // the stage is free again
                }
                if (PACKED) {
                    // The lane's x: columns c0 + 8 lane + 256 i of pass i (the summation contract).
                    const XT* xl = x + c0 + 8 * lane;
                    auto add = [&](int i, const uint32_t(&w)[4]) { fg_accumulate8<MAXB>(w, xl + 256 * i, cols, nb, acc); };
                    if (W == 2048 && (j0 & 2047) == 0)
                        fp_item<true>(s.tab, pk, sign_mantissa, (uint32_t)j0, 2048, lane, pcur, add);
                    else
                        fp_item<false>(s.tab, pk, sign_mantissa, (uint32_t)j0, (int)W, lane, pcur, add);
                }
                const long long s0 = cur.s0;
                // Loads in flight, no spills; fully unrolled where smv is used (constant indices: registers).
                constexpr int UNROLL = MAXB <= 2 ? 8 : MAXB == 4 ? 2 : 1;
#pragma unroll UNROLL
                for (int i = 0; i < 8; ++i) {
                    const long long e = 8 * lane + 256 * i;
                    if (PACKED || e >= W) break;                // PACKED: fp_item below
                    uint32_t w[4];
                    if (TWIN) {
                        const uint4 q = __ldg(reinterpret_cast<const uint4*>(wdense + (long long)r * cols + c0 + e));
                        w[0] = q.x; w[1] = q.y; w[2] = q.z; w[3] = q.w;
                    } else {
                        const long long p = j0 + e - 64 * s0;
                        const uint2 ex = *reinterpret_cast<const uint2*>(s.exps + (p >> 6) * FG_SLOT + (p & 63));
                        const uint2 sm = PRE == 8 ? smv[i % PRE]
                                                  : __ldg(reinterpret_cast<const uint2*>(sign_mantissa + j0 + e));
                        fg_fuse4(sm.x, ex.x, w[0], w[1]);
                        fg_fuse4(sm.y, ex.y, w[2], w[3]);
                    }
                    fg_accumulate8<MAXB>(w, x + c0 + e, cols, nb, acc);
                }
                __syncwarp();                                   // exps are rewritten by the next item
            } else if (HUFF && nW > 0) {
                fg_stage_issue(s, nxt, codes, n_words);
            }
            cur = nxt;
            pcur = pnxt;
#pragma unroll
            for (int b = 0; b < MAXB; ++b) {
                float a = acc[b];
#pragma unroll
                for (int d = 16; d > 0; d >>= 1) a += __shfl_xor_sync(0xffffffffu, a, d);
                if (lane == 0) s.partial[item * MAXB + b] = a;
            }
        }
        __syncthreads();
        for (int i = threadIdx.x; i < tile_rows * nb; i += FG_THREADS) {
            const int rr = i / nb, b = i % nb, r = r0 + rr;
            if (r < rows) {
                float sum = 0.0f;
                for (int k = 0; k < nchunks; ++k) sum += s.partial[(rr * nchunks + k) * MAXB + b];
                fg_store(y + (long long)b * rows + r, sum);
            }
        }
        __syncthreads();
    }
}

#define FG_GEMV_ARGS(XT)                                                                                        \
    const uint32_t *table, const uint8_t *luts, int K, const uint32_t *codes, uint32_t n_words,               \
        const uint32_t *seg_base, const uint16_t *seg_delta, const uint8_t *sign_mantissa, long long n_elements, \
        const XT *x, XT *y, int nb, int rows, int cols, long long base, int tile_rows, int chunk_width
#define FG_TWIN_ARGS(XT)                                                                                        \
    const uint16_t *w, const XT *x, XT *y, int nb, int rows, int cols, int tile_rows, int chunk_width
// The packed kernel keeps a whole item's codes and sign_mantissa in registers: 3 CTAs per SM (85 registers), 4 for
// one batch row (64 registers; a few bytes spill, measured faster than 3 CTAs). The host's grid follows.
#define FG_PACKED_MIN_CTAS(MAXB) ((MAXB) == 1 ? 4 : 3)
#define FG_PACKED_ARGS(XT)                                                                                      \
    const uint32_t *codes, const uint32_t *chunk_escapes, const uint8_t *lane_starts, uint32_t n_chunks,       \
        const uint8_t *escapes, uint32_t n_escapes, uint32_t t0, uint32_t t1, const uint8_t *sign_mantissa,   \
        long long n_elements, const XT *x, XT *y, int nb, int rows, int cols, long long base, int tile_rows,   \
        int chunk_width

#define FG_INSTANTIATE(MAXB, XT, SUFFIX)                                                                      \
    extern "C" __global__ void __launch_bounds__(FG_THREADS, 4) df11_gemv_##SUFFIX##_##MAXB(FG_GEMV_ARGS(XT)) {  \
        const FgPacked pk = {};                                                                               \
        fg_gemv<MAXB, FG_HUFF, XT>(table, luts, K, codes, n_words, seg_base, seg_delta, pk, sign_mantissa,    \
                                   n_elements, nullptr, x, y, nb, rows, cols, base, tile_rows, chunk_width);  \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(FG_THREADS, FG_PACKED_MIN_CTAS(MAXB))                        \
        df11_gemv_packed_##SUFFIX##_##MAXB(FG_PACKED_ARGS(XT)) {                                              \
        const FgPacked pk = {codes, chunk_escapes, lane_starts, n_chunks, escapes, n_escapes, t0, t1};                              \
        fg_gemv<MAXB, FG_PACKED, XT>(nullptr, nullptr, 2, nullptr, 0, nullptr, nullptr, pk, sign_mantissa,    \
                                     n_elements, nullptr, x, y, nb, rows, cols, base, tile_rows, chunk_width); \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(FG_THREADS, 4) bf16_gemv_##SUFFIX##_##MAXB(FG_TWIN_ARGS(XT)) {  \
        const FgPacked pk = {};                                                                               \
        fg_gemv<MAXB, FG_DENSE, XT>(nullptr, nullptr, 2, nullptr, 0, nullptr, nullptr, pk, nullptr, 0, w, x,  \
                                    y, nb, rows, cols, 0, tile_rows, chunk_width);                            \
    }

FG_INSTANTIATE(1, __nv_bfloat16, bf16)
FG_INSTANTIATE(2, __nv_bfloat16, bf16)
FG_INSTANTIATE(4, __nv_bfloat16, bf16)
FG_INSTANTIATE(8, __nv_bfloat16, bf16)

// ---- Decode to global: unit elements [begin, end) -> out[j - out_base] as BF16 bits. A warp decodes chunks of
// 32 segments (2048 elements, chunk c = elements [2048 c, 2048 c + 2048) of the unit), then writes them with
// 16-byte stores (element-wise at the range's edges, or everywhere if out_base % 8 != 0).
extern "C" __global__ void __launch_bounds__(FG_THREADS, 4)
df11_decode_segments(const uint32_t* table, const uint8_t* luts, int K, const uint32_t* codes, uint32_t n_words,
                     const uint32_t* seg_base, const uint16_t* seg_delta, const uint8_t* sign_mantissa,
                     long long n_elements, uint16_t* out, long long begin, long long end, long long out_base) {
    const FgShared s = fg_setup(fg_smem(), table, luts, K, false);
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const bool vec = (out_base & 7) == 0;
    const long long c_first = begin >> 11, c_end = (end + 2047) >> 11;
    for (long long c = c_first + (long long)blockIdx.x * FG_WARPS + warp; c < c_end;
         c += (long long)gridDim.x * FG_WARPS) {
        const long long j0 = c << 11, W = min(2048LL, n_elements - j0);
        const FgChunk ch = fg_chunk_index(j0, W, seg_base, seg_delta);
        fg_stage_issue(s, ch, codes, n_words);
        fg_decode_chunk(s, ch, codes, n_words, seg_base, seg_delta, n_elements, K);
        for (long long e = 8 * lane; e < W; e += 256) {
            const long long j = j0 + e;
            if (vec && j >= begin && j + 8 <= end) {
                const uint2 ex = *reinterpret_cast<const uint2*>(s.exps + (e >> 6) * FG_SLOT + (e & 63));
                const uint2 sm = __ldg(reinterpret_cast<const uint2*>(sign_mantissa + j));
                uint4 o;
                fg_fuse4(sm.x, ex.x, o.x, o.y);
                fg_fuse4(sm.y, ex.y, o.z, o.w);
                *reinterpret_cast<uint4*>(out + (j - out_base)) = o;
            } else {
                for (int i = 0; i < 8; ++i) {
                    const long long ji = j + i;
                    if (ji >= begin && ji < end && ji < j0 + W) {
                        const uint32_t ex = s.exps[((e + i) >> 6) * FG_SLOT + ((e + i) & 63)];
                        const uint32_t sm = sign_mantissa[ji];
                        out[ji - out_base] = (uint16_t)(((sm & 0x80u) << 8) | (ex << 7) | (sm & 0x7fu));
                    }
                }
            }
        }
        __syncwarp();
    }
}
