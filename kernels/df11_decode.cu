// DFloat11 (DF11) GPU decoder: one launch decodes one compression unit into BF16 bits.
// Written from the format description (docs/df11-format.md §2-3); no code from the official decode.cu.
//
// ---------------------------------------------------------------------------------------------------------------
// KERNEL   extern "C" __global__ void df11_decode(
//              const uint8_t*  luts,              // [K*256]   K-1 decode rows + 1 code-length row
//              const uint8_t*  codes,             // [n_bytes] encoded_exponent (MSB-first bitstream)
//              const uint8_t*  sign_mantissa,     // [n_elements]
//              const uint32_t* output_positions,  // [n_positions] u32 (decoded from the LE bytes)
//              const uint8_t*  gaps,              // [>= 320*NB] 5-bit MSB-first packed start offsets
//              uint16_t*       out,               // [n_elements] BF16 bits
//              int n_luts,                        // K
//              int n_bytes, int n_elements,
//              int n_positions,                   // NB or NB+1 (a missing last entry means n_elements)
//              uint32_t*       status,            // OR-ed DF11_ERR_* flags; host zeroes it before the launch
//              int block_begin, int block_end,    // decode format blocks [block_begin, block_end) only
//              int out_base)                      // element j goes to out[j - out_base]; out_base % 16 == 0,
//                                                 // out_base <= pos[block_begin]; out holds pos[block_end] - out_base
//
// LAUNCH   NB = ceil(n_bytes / 4096) format blocks. block = 512 threads. grid = any G in [1, block_end - block_begin]: CTA c decodes
//          format blocks block_begin + c, + G, + 2G, ... (persistent; the LUT tables are built once per CTA). Use
//          G = min(NB, num_SMs * resident CTAs per SM) from cuOccupancyMaxActiveBlocksPerMultiprocessor with the
//          dynamic smem below (H100, 40 registers: 3 CTAs/SM -> G = 396). Any stream.
//          Dynamic shared memory, with M = max_b(pos[b+1]-pos[b]) (pos[NB] := n_elements), CAP = (M + 30) & ~15
//          and HDR = 1024*K + 96 + 512*36:
//            direct (RECOMMENDED):  HDR + CAP     (sign_mantissa read from global at copy-out; any arch;
//                                                  real units (K<=6, M~13k) stay under 48 KB: no opt-in)
//            staged (sm_80+):       HDR + 3*CAP   (sign_mantissa double-buffered in shared memory by cp.async;
//                                                  needs MAX_DYNAMIC_SHARED_SIZE_BYTES above 48 KB)
//          e.g. K=6, M=12848: direct 37,536 B, staged 63,264 B. The kernel reads %dynamic_smem_size and stages a
//          format block only when 3 buffers fit, so any size >= HDR + CAP is valid. Whenever the size exceeds
//          48 KB (worst legal unit: K=18, M=32768 -> 69,744 B direct) set MAX_DYNAMIC_SHARED_SIZE_BYTES first.
//          Measured on H100 (Qwen3-8B-sized layer, 192,937,984 weights): direct G=396 0.370 ms = 1044 GB/s of BF16
//          output, staged 0.377 ms, one CTA per format block (G = NB) 0.429 ms; D2D copy of the output 0.263 ms.
//
// HOST GUARANTEES (validated in Rust before any launch; the kernel re-checks the cheap ones):
//   * 2 <= K <= 18; every decode-row (rows 0..K-2) entry v >= 240 points at an existing row 256-v in 1..K-2.
//   * len(gaps) >= 320*NB; len(sign_mantissa) == len(out) == n_elements; n_bytes, n_elements < 2^31.
//   * output_positions: n_positions in {NB, NB+1}, [0] == 0, non-decreasing, last == n_elements.
//   * Alignment: codes 4-byte, sign_mantissa and out 16-byte, output_positions 4-byte (fresh allocations are).
//   * status points at a zeroed u32.
// NOT trusted: the bytes of codes and gaps (nor LUT symbols/lengths). Whatever they hold, every read and write
// stays in bounds, every loop is bounded, writes stay inside [pos[b], pos[b+1]) ∩ [0, n_elements), and
// inconsistencies are reported in *status (the output content is then unspecified).
//
// STATUS FLAGS (0 = decoded and self-consistent):
#define DF11_ERR_COUNT 1u   // a block decoded a number of codes different from its output_positions span
#define DF11_ERR_CODE 2u    // invalid code: LUT chain deeper than 4 levels / bad row, code length 0 or > 32
#define DF11_ERR_CHAIN 4u   // a thread's last code does not end where the next window's gap says it starts
#define DF11_ERR_SMEM 8u    // a block's span does not fit the dynamic shared memory given (block not written)
#define DF11_ERR_ALIGN 16u  // pointer alignment requirement violated (nothing written)
#define DF11_ERR_ARGS 32u   // bad K / grid / blockDim / n_positions / smem < HDR, or decreasing positions
// ---------------------------------------------------------------------------------------------------------------
//
// DESIGN. Same thread <-> 64-bit window mapping and count / scan / place structure as the reference kernel, but:
//  * One 8-bit lookup decodes up to THREE codes: a per-CTA "step table" built from LUT row 0 says which complete
//    codes the next 8 bits hold (LLM exponent codes average ~2.7 bits). The rare longer codes walk per-row entry
//    tables (one lookup per extra byte) instead of the byte LUT + length row.
//  * Each window is decoded ONCE: symbols go to a per-thread 36-byte stage; after the scan each thread copies
//    its run into the block's exponent buffer with 4-byte stores (a thread whose window holds > 34 codes, only
//    possible with 1-bit codes, decodes a second time straight into place).
//  * BF16 assembly happens in the copy-out: 16 elements per thread per step, 16-byte loads of exponents (shared)
//    and sign_mantissa (global, or shared when staged), two 16-byte global stores; no scattered global I/O.
//  * Persistent CTAs: tables built once per CTA; the next block's stream words are loaded into registers and its
//    sign_mantissa is cp.async-prefetched into the other half of a double buffer while this block decodes.
//  * Warp-shuffle scan, two barriers per block.

#include <stdint.h>

#ifndef DF11_MIN_BLOCKS        // CTAs per SM the register allocation aims for (sm_80+): 4 -> <= 32 registers
                               // (H100, Qwen3-8B layer: 1058 GB/s, vs 1021 GB/s with 3 -> <= 40 registers)
#define DF11_MIN_BLOCKS 4
#endif

#ifndef DF11_STAGED            // 1: stage sign_mantissa in shared memory (cp.async) for blocks that fit a third of
#define DF11_STAGED 0          // it. Off: on a Qwen3-8B-shaped model, launches mixing staged and direct blocks gave
#endif                         // run-to-run different (sometimes NaN) weights; direct-only runs are exact and as fast.

#define DF11_THREADS 512
#define DF11_BLOCK_BYTES 4096
#define DF11_SEG 36            // stage bytes per thread: 9 words (odd), so a warp's same-index stores spread banks
#define DF11_SEG_CAP 34        // codes a thread may stage: a step stores <= 3 symbols from index <= 33 < 36
#define DF11_HDR(K) (1024 * (K) + 96 + DF11_THREADS * DF11_SEG)

// Table entries (u32). Complete: bits 0-7/8-15/16-23 = symbols 1..3, bits 24-29 = bits consumed T (1..32),
// bits 30-31 = symbol count n (1..3), so (e >> 24) == T + 64*n is added straight onto the loop state
// st = p + 64*count (p = bit position < 64). Incomplete (n = 0): a pointer, i.e. the table index where the entry
// row for the next byte starts, or DF11_E_ERR.
#define DF11_E_N1 0x40000000u
#define DF11_E_ERR 0x00010000u
#define DF11_E_BAD 0x60000000u  // what an invalid code decodes to: symbol 0, T = 32, n = 1

// Helpers marked DF11_HD also compile for the host: the harness runs the very same table build, window decode
// and compaction on a CPU (df11_harness --cpu) as a check that needs no GPU.
#define DF11_HD __host__ __device__ __forceinline__

DF11_HD uint32_t df11_funnel_l(uint32_t lo, uint32_t hi, uint32_t sh) {  // top 32 bits of (hi:lo) << (sh & 31)
#ifdef __CUDA_ARCH__
    return __funnelshift_l(lo, hi, sh);
#else
    return (uint32_t)(((((uint64_t)hi << 32) | lo) << (sh & 31)) >> 32);
#endif
}

DF11_HD uint32_t df11_prmt(uint32_t lo, uint32_t hi, uint32_t sel) {      // __byte_perm, selectors 0..7 only
#ifdef __CUDA_ARCH__
    return __byte_perm(lo, hi, sel);
#else
    uint64_t v = ((uint64_t)hi << 32) | lo;
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) r |= (uint32_t)((v >> (8 * ((sel >> (4 * i)) & 7))) & 255) << (8 * i);
    return r;
#endif
}

// No boundary of LUT row 0 strictly inside [a, a + 2^pos) (a is 2^pos-aligned, 1 <= pos <= 7): every way of
// completing the unknown low `pos` bits of the index gives the same entry, so a symbol read there is exactly
// what a sequential decoder (which sees the real bits) reads.
DF11_HD bool row0_uniform(const uint32_t* mask, uint32_t a, uint32_t pos) {
    uint32_t size = 1u << pos;
    if (size <= 32) {
        uint32_t m = (size == 32 ? 0xffffffffu : ((1u << size) - 1u)) << (a & 31);
        return (mask[a >> 5] & m & ~(1u << (a & 31))) == 0;
    }
    uint32_t acc = mask[a >> 5] & ~1u;
    for (uint32_t w = 1; w < size / 32; ++w) acc |= mask[(a >> 5) + w];
    return acc == 0;
}

// Entry for byte v of LUT row `row`: one complete code (T = its full length), a pointer, or an error.
DF11_HD uint32_t row_entry(const uint8_t* luts, int K, int row, uint32_t v) {
    uint32_t s = luts[row * 256 + v];
    if (s >= 240) {
        uint32_t r = 256 - s;
        return (int)r <= K - 2 ? 512 + 256 * (r - 1) : DF11_E_ERR;
    }
    uint32_t l = luts[(K - 1) * 256 + s];
    return l - 1u > 31u ? DF11_E_ERR : s | (l << 24) | DF11_E_N1;
}

// Row-0 step entry for the next 8 bits v, with at most nmax symbols. Symbols 2 and 3 are taken only if the code
// fits in the bits left and row 0 is uniform over the unknown low bits, so a step always equals what the
// byte-wise sequential decode does with the same LUT, whatever the LUT holds (leaked / EOF-filled entries too).
DF11_HD uint32_t step_entry(const uint8_t* luts, const uint32_t* mask, int K, uint32_t v, uint32_t nmax) {
    uint32_t e = row_entry(luts, K, 0, v);
    uint32_t used = (e >> 24) & 63, cnt = 1, syms = e & 255;
    if (e < DF11_E_N1 || used > 8) return e;
    const uint8_t* lenrow = luts + (K - 1) * 256;
    while (cnt < nmax && used < 8) {
        uint32_t a = (v << used) & 255, s = luts[a];
        if (s >= 240) break;
        uint32_t l = lenrow[s];
        if (l == 0 || l > 8 - used || !row0_uniform(mask, a, used)) break;
        syms |= s << (8 * cnt);
        used += l;
        ++cnt;
    }
    return syms | (used << 24) | (cnt << 30);
}

// A code longer than 8 bits (or a broken one): follow pointer entries with the next stream bytes of x.
DF11_HD uint32_t slow_code(uint32_t e, uint32_t x, const uint32_t* tab, uint32_t& err) {
#pragma unroll
    for (int lvl = 1; lvl < 4; ++lvl) {
        if (e >= DF11_E_N1 || (e & DF11_E_ERR)) break;
        e = tab[e + ((x >> (24 - 8 * lvl)) & 255)];
    }
    if (e < DF11_E_N1) { err |= DF11_ERR_CODE; e = DF11_E_BAD; }  // a bad code still consumes 32 bits
    return e;
}

// One loop step at bit p = st & 31 of the pair hi:lo. MODE 0: count only. 1: store symbols at dst[count..].
// 2: store only below klim. 3: the stage (see below).
template <int MODE>
DF11_HD uint32_t step(uint32_t st, uint32_t hi, uint32_t lo, const uint32_t* tab, const uint32_t* tab0,
                      uint8_t* dst, uint32_t klim, uint32_t& err) {
    uint32_t x = df11_funnel_l(lo, hi, st);
    uint32_t e = tab0[x >> 24];
    if (e < DF11_E_N1) e = slow_code(e, x, tab, err);
    if (MODE != 0) {
        // MODE 3 clamps the index instead of branching: only a thread with > klim+1 codes (redone later) can
        // reach the clamp, and its garbage stays inside its own segment.
        uint32_t k = MODE == 3 ? min(st >> 6, klim - 1) : st >> 6;
        if (MODE == 1 || MODE == 3) {
            dst[k] = (uint8_t)e;
            if (e >= 0x80000000u) dst[k + 1] = (uint8_t)(e >> 8);
            if (e >= 0xC0000000u) dst[k + 2] = (uint8_t)(e >> 16);
        } else if (MODE == 2) {
            if (k < klim) dst[k] = (uint8_t)e;
            if (e >= 0x80000000u && k + 1 < klim) dst[k + 1] = (uint8_t)(e >> 8);
            if (e >= 0xC0000000u && k + 2 < klim) dst[k + 2] = (uint8_t)(e >> 16);
        }
    }
    return st + (e >> 24);
}

// Decode every code that starts in [gap, 64) of the window w0:w1 (w2 = the next window's first 32 bits, so a
// code starting late can finish). Returns st: count = st >> 6, end bit = (st & 63) + 32. Multi-symbol steps
// are used while all three possible symbol starts lie before bit 64 (p <= 56); single-symbol ones (tab + 256)
// for the last few bits, so no symbol of the next window is ever taken.
template <int MODE>
DF11_HD uint32_t run_window(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t gap, const uint32_t* tab,
                            uint8_t* dst, uint32_t klim, uint32_t& err) {
    uint32_t st = gap;
    while (!(st & 32)) st = step<MODE>(st, w0, w1, tab, tab, dst, klim, err);
    st -= 32;                                            // now relative to w1
    while ((st & 63) <= 24) st = step<MODE>(st, w1, w2, tab, tab, dst, klim, err);
    while (!(st & 32)) st = step<MODE>(st, w1, w2, tab, tab + 256, dst, klim, err);
    return st;
}

// buf[d, d+m) = seg[0, m) (seg 4-byte aligned, m <= 34). Words of buf shared with the neighbouring threads'
// runs are written bytewise, the rest with aligned 4-byte stores.
DF11_HD void copy_run(uint8_t* buf, uint32_t d, const uint8_t* seg, uint32_t m) {
    uint32_t e = d + m, wa = (d + 3) & ~3u, wb = e & ~3u;
    if (wa >= wb) {
        for (uint32_t i = 0; i < m; ++i) buf[d + i] = seg[i];
        return;
    }
    for (uint32_t i = d; i < wa; ++i) buf[i] = seg[i - d];
    for (uint32_t i = wb; i < e; ++i) buf[i] = seg[i - d];
    const uint32_t* sw = reinterpret_cast<const uint32_t*>(seg);
    const uint32_t sel = 0x3210u + 0x1111u * (wa - d);    // bytes s..s+3 of (hi:lo), s = wa - d in 0..3
    uint32_t lo = sw[0];
    for (uint32_t j = 0; wa + 4 * j < wb; ++j) {
        uint32_t hi = sw[j + 1];
        *reinterpret_cast<uint32_t*>(buf + wa + 4 * j) = df11_prmt(lo, hi, sel);
        lo = hi;
    }
}

// 4 (sign_mantissa, exponent) byte pairs -> 4 BF16 (two u32 words, little-endian u16 lanes).
__device__ __forceinline__ void fuse4(uint32_t s, uint32_t e, uint32_t& lo, uint32_t& hi) {
    uint32_t H = (s & 0x80808080u) | ((e >> 1) & 0x7f7f7f7fu);
    uint32_t L = (s & 0x7f7f7f7fu) | ((e << 7) & 0x80808080u);
    lo = __byte_perm(L, H, 0x5140);
    hi = __byte_perm(L, H, 0x7362);
}

__device__ __forceinline__ uint16_t fuse1(uint32_t s, uint32_t e) {
    return (uint16_t)(((s & 0x80u) << 8) | (e << 7) | (s & 0x7fu));
}

__device__ __forceinline__ uint32_t bswap32(uint32_t x) { return __byte_perm(x, 0, 0x0123); }

// 4 stream bytes at `off` (multiple of 4) as a big-endian word; bytes at or past n_bytes read as 0.
__device__ __forceinline__ uint32_t load_be32(const uint8_t* codes, long long off, int n_bytes) {
    if (off + 4 <= n_bytes) return bswap32(__ldg(reinterpret_cast<const uint32_t*>(codes + off)));
    uint32_t w = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) w = (w << 8) | (off + i < n_bytes ? (uint32_t)__ldg(codes + off + i) : 0u);
    return w;
}

// Gap of global thread g (bits [5g, 5g+5)). Reads the 2nd byte only when the field straddles it (the reference
// always does, one byte past the end for the very last thread).
__device__ __forceinline__ uint32_t read_gap(const uint8_t* gaps, uint32_t g) {
    uint32_t bit = 5u * g, i0 = bit >> 3, o = bit & 7;
    uint32_t v = __ldg(gaps + i0);
    if (o > 3) return (((v << 8) | __ldg(gaps + i0 + 1)) >> (11 - o)) & 31u;
    return (v >> (3 - o)) & 31u;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define DF11_HAS_CP_ASYNC 1
#define DF11_BOUNDS __launch_bounds__(DF11_THREADS, DF11_MIN_BLOCKS)
#else
#define DF11_HAS_CP_ASYNC 0
#define DF11_BOUNDS __launch_bounds__(DF11_THREADS, 1)
#endif

struct Df11Blk {
    uint32_t base, end, abase, need;  // writes out[base, end); buf[k] <-> element abase + k; buf bytes used
    int mode;                         // 1 staged, 2 direct, 0 skip (flag already set in err)
};

__device__ __forceinline__ Df11Blk blk_params(const uint32_t* pos, int n_positions, uint32_t b, uint32_t n,
                                              uint32_t third, uint32_t avail, uint32_t& err) {
    Df11Blk k;
    uint32_t p0 = __ldg(pos + b), p1 = (int)b + 1 < n_positions ? __ldg(pos + b + 1) : n;
    k.base = min(p0, n);
    k.end = min(max(p1, p0), n);
    k.abase = k.base & ~15u;
    k.need = (k.end - k.abase + 15) & ~15u;
    k.mode = (DF11_STAGED && DF11_HAS_CP_ASYNC && k.need <= third) ? 1 : k.need <= avail ? 2 : 0;
    if (p1 < p0) err |= DF11_ERR_ARGS, k.mode = 0;
    else if (!k.mode) err |= DF11_ERR_SMEM;
    return k;
}

__device__ __forceinline__ void prefetch_sm(const Df11Blk& k, const uint8_t* sm, uint32_t n, uint8_t* dst) {
#if DF11_HAS_CP_ASYNC
    for (uint32_t c = threadIdx.x; c < (k.need >> 4); c += DF11_THREADS) {
        uint32_t j0 = k.abase + 16 * c;                               // < end <= n
        if (j0 + 16 <= n) {
            uint32_t d = (uint32_t)__cvta_generic_to_shared(dst + 16 * c);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(sm + j0));
        } else {                                                      // unit's last partial chunk
            for (uint32_t i = 0; i < n - j0; ++i) dst[16 * c + i] = __ldg(sm + j0 + i);
        }
    }
#endif
}

struct Df11Win { uint32_t w0, w1, w2, gap, ngap; };  // w2 / ngap: lane 31 only (others take the next lane's)

__device__ __forceinline__ Df11Win load_win(const uint8_t* codes, const uint8_t* gaps, uint32_t b, int n_bytes,
                                            uint32_t nthreads) {
    Df11Win w;
    uint32_t g = b * DF11_THREADS + threadIdx.x;
    long long off = 8LL * g;
    w.w0 = load_be32(codes, off, n_bytes);
    w.w1 = load_be32(codes, off + 4, n_bytes);
    w.gap = read_gap(gaps, g);
    w.w2 = w.ngap = 0;
    if ((threadIdx.x & 31) == 31) {
        w.w2 = load_be32(codes, off + 8, n_bytes);
        w.ngap = g + 1 < nthreads ? read_gap(gaps, g + 1) : 0;
    }
    return w;
}

extern "C" __global__ void DF11_BOUNDS
df11_decode(const uint8_t* __restrict__ luts, const uint8_t* __restrict__ codes,
            const uint8_t* __restrict__ sign_mantissa, const uint32_t* __restrict__ output_positions,
            const uint8_t* __restrict__ gaps, uint16_t* __restrict__ out, int n_luts, int n_bytes,
            int n_elements, int n_positions, uint32_t* __restrict__ status, int block_begin, int block_end,
            int out_base) {
    extern __shared__ __align__(16) uint8_t smem[];
    const int K = n_luts;
    const uint32_t t = threadIdx.x, lane = t & 31, warp = t >> 5, G = gridDim.x;
    const uint32_t n = (uint32_t)max(n_elements, 0);
    const uint32_t NB = (uint32_t)(((long long)max(n_bytes, 0) + DF11_BLOCK_BYTES - 1) / DF11_BLOCK_BYTES);
    uint32_t dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));

    // ---- Launch-wide checks: on failure nothing is written.
    uint32_t bad = 0;
    if (K < 2 || K > 18 || n_bytes <= 0 || n_elements < 0 || blockDim.x != DF11_THREADS ||
        (n_positions != (int)NB && n_positions != (int)NB + 1) || dyn < DF11_HDR(K) + 16 ||
        block_begin < 0 || block_end > (int)NB || block_begin >= block_end || G > (uint32_t)(block_end - block_begin) ||
        out_base < 0 || (out_base & 15) || (uint32_t)out_base > __ldg(output_positions + block_begin))
        bad |= DF11_ERR_ARGS;
    if (((uintptr_t)codes & 3) | ((uintptr_t)sign_mantissa & 15) | ((uintptr_t)out & 15) |
        ((uintptr_t)output_positions & 3))
        bad |= DF11_ERR_ALIGN;
    if (bad) { if (t == 0) atomicOr(status, bad); return; }
    // Element j of the unit is written at out[j - out_base] (a block-range decode writes a buffer that starts at
    // out_base = the range's first element rounded down to 16, so vector stores stay 16-byte aligned).
    out -= out_base;

    uint32_t* tab = reinterpret_cast<uint32_t*>(smem);            // [256*K] step tables + pointer-row tables
    uint32_t* mask = tab + 256 * K;                                // [8]  row-0 entry boundaries
    uint32_t* wsum = mask + 8;                                     // [16] per-warp code counts
    uint8_t* seg = smem + 1024 * K + 96 + t * DF11_SEG;            // this thread's stage
    uint8_t* buf = smem + DF11_HDR(K);                             // exponents of the block (+ 2 sm buffers)
    const uint32_t avail = dyn - DF11_HDR(K), third = (avail / 3) & ~15u;

    // ---- Tables, once per CTA: mask (bit i: row-0 entry i differs from entry i-1), then all entries.
    if (t < 256) {
        uint32_t cur = __ldg(luts + t), prev = t ? __ldg(luts + t - 1) : cur;
        uint32_t m = __ballot_sync(0xffffffffu, cur != prev);
        if (lane == 0) mask[warp] = m;
    }
    __syncthreads();
    for (int i = t; i < 256 * K; i += DF11_THREADS)
        tab[i] = i < 512 ? step_entry(luts, mask, K, i & 255, i < 256 ? 3 : 1)
                         : row_entry(luts, K, 1 + ((i - 512) >> 8), i & 255);
    __syncthreads();

    uint32_t err = 0;
    [[maybe_unused]] bool pf = false;                              // this block's sign_mantissa requested
    const uint32_t B1 = (uint32_t)block_end;
    Df11Win nw = load_win(codes, gaps, block_begin + blockIdx.x, n_bytes, NB * DF11_THREADS);
    for (uint32_t b = block_begin + blockIdx.x, it = 0; b < B1; b += G, ++it) {
        const Df11Blk k = blk_params(output_positions, n_positions, b, n, third, avail, err);
        Df11Win w = nw;
        if (b + G < B1) nw = load_win(codes, gaps, b + G, n_bytes, NB * DF11_THREADS);  // lands during this block
        if (!k.mode) { pf = false; continue; }                     // block-uniform
        uint8_t* smc = buf + third * (1 + (it & 1));
#if DF11_HAS_CP_ASYNC
        if (k.mode == 1 && !pf) {
            prefetch_sm(k, sign_mantissa, n, smc);
            asm volatile("cp.async.commit_group;\n" ::);
        }
#endif
        // (all 32 lanes must execute the shuffles: select afterwards, never "lane == 31 ? ... : shfl")
        const uint32_t w2_dn = __shfl_down_sync(0xffffffffu, w.w0, 1);
        const uint32_t gap_dn = __shfl_down_sync(0xffffffffu, w.gap, 1);
        const uint32_t w2 = lane == 31 ? w.w2 : w2_dn, next_gap = lane == 31 ? w.ngap : gap_dn;

        // ---- Decode the window once, symbols to the stage.
        const uint32_t st = run_window<3>(w.w0, w.w1, w2, w.gap, tab, seg, DF11_SEG_CAP, err);
        const uint32_t cnt = st >> 6, overshoot = (st & 63) - 32;

        // ---- Block exclusive scan: warp shuffles, one barrier, every warp scans the 16 warp totals itself.
        uint32_t incl = cnt;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            uint32_t y = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= (uint32_t)d) incl += y;
        }
        if (lane == 31) wsum[warp] = incl;
        __syncthreads();                                           // also: previous copy-out is finished
        uint32_t ws = lane < 16 ? wsum[lane] : 0, wincl = ws;
#pragma unroll
        for (int d = 1; d < 16; d <<= 1) {
            uint32_t y = __shfl_up_sync(0xffffffffu, wincl, d);
            if (lane >= (uint32_t)d) wincl += y;
        }
        const uint32_t excl = __shfl_sync(0xffffffffu, wincl - ws, warp) + incl - cnt;
        const uint32_t total = __shfl_sync(0xffffffffu, wincl, 15);

        // ---- Consistency checks (never fire on a valid unit). Count: every code starting in this block's
        // 32768 bits is counted once, so a block that does not end the unit must match its span exactly; the
        // last one(s) may also count EOF / padding / look-ahead codes. Chain: if the next window starts a real
        // element, its gap is where this thread's last code ended.
        if (t == 0 && (k.end < n ? total != k.end - k.base : total < k.end - k.base)) err |= DF11_ERR_COUNT;
        if ((t < DF11_THREADS - 1 ? k.base + excl + cnt : k.end) < n && next_gap != overshoot)
            err |= DF11_ERR_CHAIN;

        // ---- Prefetch the next block's sign_mantissa into the other buffer (its last reader, the previous
        // copy-out, finished before the barrier above). Always commit, so "wait_group 1" below means "this
        // block's group has landed".
        pf = false;
        if (k.mode == 1 && b + G < B1) {
            uint32_t e2 = 0;
            const Df11Blk kn = blk_params(output_positions, n_positions, b + G, n, third, avail, e2);
            if (kn.mode == 1) prefetch_sm(kn, sign_mantissa, n, buf + third * (1 + ((it + 1) & 1))), pf = true;
        }
#if DF11_HAS_CP_ASYNC
        asm volatile("cp.async.commit_group;\n" ::);
#endif

        // ---- Place this thread's exponents at their final index (relative to abase), clamped to the block.
        const uint32_t k0 = k.base - k.abase + excl, klim = k.end - k.abase;
        if (cnt <= DF11_SEG_CAP) {
            if (k0 < klim) copy_run(buf, k0, seg, min(cnt, klim - k0));
        } else if (k0 + cnt <= klim) {
            run_window<1>(w.w0, w.w1, w2, w.gap, tab, buf + k0, 0, err);
        } else if (k0 < klim) {
            run_window<2>(w.w0, w.w1, w2, w.gap, tab, buf + k0, klim - k0, err);
        }
#if DF11_HAS_CP_ASYNC
        asm volatile("cp.async.wait_group 1;\n" ::);
#endif
        __syncthreads();

        // ---- Copy-out: 16 elements per thread per iteration, 16-byte shared loads, two 16-byte global stores.
        const bool staged = k.mode == 1;
        for (uint32_t c = t; c < (k.need >> 4); c += DF11_THREADS) {
            const uint32_t o = 16 * c, j0 = k.abase + o;
            if (j0 >= k.base && j0 + 16 <= k.end) {
                const uint4 e4 = *reinterpret_cast<const uint4*>(buf + o);
                const uint4 s4 = staged ? *reinterpret_cast<const uint4*>(smc + o)
                                        : __ldg(reinterpret_cast<const uint4*>(sign_mantissa + j0));
                uint4 o0, o1;
                fuse4(s4.x, e4.x, o0.x, o0.y);
                fuse4(s4.y, e4.y, o0.z, o0.w);
                fuse4(s4.z, e4.z, o1.x, o1.y);
                fuse4(s4.w, e4.w, o1.z, o1.w);
                *reinterpret_cast<uint4*>(out + j0) = o0;
                *reinterpret_cast<uint4*>(out + j0 + 8) = o1;
            } else {                                                // the block's first / last partial chunk
                for (uint32_t i = 0; i < 16; ++i) {
                    const uint32_t j = j0 + i;
                    if (j >= k.base && j < k.end)
                        out[j] = fuse1(staged ? smc[o + i] : __ldg(sign_mantissa + j), buf[o + i]);
                }
            }
        }
    }
    if (err) atomicOr(status, err);
}
