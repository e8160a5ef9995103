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
//              uint32_t*       status)            // OR-ed DF11_ERR_* flags; host zeroes it before the launch
//
// LAUNCH   grid = NB = ceil(n_bytes / 4096) blocks (exactly; checked), block = 512 threads, any stream.
//          Dynamic shared memory (bytes), with M = max_b(pos[b+1]-pos[b]) (pos[NB] := n_elements) and
//          CAP = (M + 30) & ~15   (room for M elements plus the 16-element alignment slack):
//            staged mode (fast, sm_80+):  6752 + 2*CAP   (sign_mantissa is prefetched into shared memory)
//            direct mode (any arch):      6752 + CAP     (sign_mantissa is read from global at copy-out)
//          The kernel reads %dynamic_smem_size and picks staged mode per block when it fits, so the host may
//          pass either size. Real LLM units have M ~ 12-13k -> ~32 KB staged. The worst legal unit (1-bit
//          codes, M = 32768) needs 72.3 KB staged (opt in with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
//          or 39.5 KB direct (no opt-in, fits sm_75's limits too).
//
// HOST GUARANTEES (validated in Rust before any launch; the kernel re-checks the cheap ones):
//   * 2 <= K <= 18; every decode-row (rows 0..K-2) entry v >= 240 points at an existing row 256-v in 1..K-2.
//   * len(gaps) >= 320*NB; len(sign_mantissa) == len(out) == n_elements; n_bytes, n_elements < 2^31.
//   * output_positions: n_positions in {NB, NB+1}, [0] == 0, non-decreasing, last == n_elements.
//   * Alignment: codes 4-byte, sign_mantissa and out 16-byte, output_positions 4-byte (fresh allocations are).
//   * status points at a zeroed u32.
// NOT trusted: the bytes of codes and gaps (and LUT symbols/lengths). Whatever they hold, every read and write
// stays in bounds, every loop is bounded, writes stay inside [pos[b], pos[b+1]) ∩ [0, n_elements), and
// inconsistencies are reported in *status (then the output content is unspecified).
//
// STATUS FLAGS (0 = decoded and self-consistent):
#define DF11_ERR_COUNT 1u   // a block decoded a number of codes different from its output_positions span
#define DF11_ERR_CODE 2u    // invalid code: LUT chain deeper than 4 levels / bad row, code length 0 or > 32
#define DF11_ERR_CHAIN 4u   // a thread's last code does not end where the next window's gap says it starts
#define DF11_ERR_SMEM 8u    // a block's span does not fit the dynamic shared memory given (nothing written)
#define DF11_ERR_ALIGN 16u  // pointer alignment requirement violated (nothing written)
#define DF11_ERR_ARGS 32u   // bad K / grid size / n_positions / blockDim / decreasing positions (nothing written)
// ---------------------------------------------------------------------------------------------------------------
//
// DESIGN (why it is faster than the reference kernel, which re-decodes with per-thread scattered global I/O):
//  * The reference's phase structure is kept (count -> block scan -> decode), but each step of the bit loop
//    decodes up to THREE codes with one shared-memory lookup: a 256-entry "multi-symbol" table built per block
//    from LUT row 0 says which complete codes the next 8 bits hold. Real LLM exponent codes average ~2.7 bits,
//    so a step yields ~2.3 symbols and both passes run at well under half the reference's step count.
//  * Pass 2 writes only the 8-bit exponent into shared memory (1 B/element, so even 32768-element blocks fit
//    under 48 KB). The BF16 assembly happens in the copy-out, 16 elements per thread with 16-byte loads of the
//    exponents and of sign_mantissa and two 16-byte stores: fully coalesced, no per-thread scattered I/O.
//  * sign_mantissa for the block is prefetched with cp.async at the very start, so its DRAM latency hides
//    behind the decode instead of stalling the copy-out.
//  * Warp-shuffle scan with a single barrier instead of a Blelloch tree.

#include <stdint.h>

// Helpers marked DF11_HD also compile for the host, so the harness can run the very same table build and window
// decode on a CPU (kernels/harness --cpu) as a check that needs no GPU.
#define DF11_HD __host__ __device__ __forceinline__

DF11_HD uint32_t df11_funnel_l(uint32_t lo, uint32_t hi, uint32_t sh) {
#ifdef __CUDA_ARCH__
    return __funnelshift_l(lo, hi, sh);
#else
    return (uint32_t)(((((uint64_t)hi << 32) | lo) << (sh & 31)) >> 32);
#endif
}

#ifndef DF11_MIN_BLOCKS        // blocks per SM the register allocation aims for (sm_80+)
#define DF11_MIN_BLOCKS 3
#endif

#define DF11_THREADS 512
#define DF11_BLOCK_BYTES 4096
#define DF11_SMEM_HDR 6752     // tables 2048 + boundary mask 32 + warp sums 64 + raw LUT 18*256 (16-aligned)
#define DF11_TAB_SLOW 0x20000000u

// Table entry layout (u32): bits 0-7 / 8-15 / 16-23 = 1st / 2nd / 3rd symbol, bits 24-27 = total bits T (<=8),
// bit 29 = "slow" (first code longer than 8 bits, or inconsistent LUT: walk the byte LUT chain instead),
// bits 30-31 = symbol count n (1..3). So (e >> 24) == T + 64*n, which is added straight onto the loop state
// st = p + 64*count (p = bit position, < 64), turning "advance and count" into one add.

__device__ __forceinline__ uint32_t bswap32(uint32_t x) { return __byte_perm(x, 0, 0x0123); }

// 4 stream bytes at `off` as a big-endian word; bytes at or past n_bytes read as 0. off is a multiple of 4.
__device__ __forceinline__ uint32_t load_be32(const uint8_t* codes, long long off, int n_bytes) {
    if (off + 4 <= n_bytes) return bswap32(__ldg(reinterpret_cast<const uint32_t*>(codes + off)));
    uint32_t w = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) w = (w << 8) | (off + i < n_bytes ? (uint32_t)__ldg(codes + off + i) : 0u);
    return w;
}

// Gap of global thread g: bits [5g, 5g+5) of the packed array. Touches the 2nd byte only when the field
// straddles it (the reference always reads it, one byte past the end for the very last thread).
__device__ __forceinline__ uint32_t read_gap(const uint8_t* gaps, uint32_t g) {
    uint32_t bit = 5u * g, i0 = bit >> 3, o = bit & 7;
    uint32_t v = __ldg(gaps + i0);
    if (o > 3) return (((v << 8) | __ldg(gaps + i0 + 1)) >> (11 - o)) & 31u;
    return (v >> (3 - o)) & 31u;
}

// No boundary of LUT row 0 strictly inside [a, a + 2^pos) (a is 2^pos-aligned, 1 <= pos <= 7): every way of
// completing the unknown low `pos` bits of the index gives the same entry, so a symbol read there is exactly
// what a sequential decoder (which would see the real bits) reads.
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

// Sequential decode of one code (the rare path): x = next 32 stream bits. Returns a table-style entry with
// n = 1, and the loop-state increment in *inc. Corrupt LUT content cannot stall the loop: a bad code consumes
// 32 bits and raises DF11_ERR_CODE.
DF11_HD uint32_t slow_code(uint32_t x, const uint8_t* lut_s, int K, uint32_t& err,
                                              uint32_t& inc) {
    uint32_t v = lut_s[x >> 24];
#pragma unroll
    for (int lvl = 1; lvl < 4; ++lvl) {
        if (v < 240) break;
        uint32_t r = 256 - v;
        if ((int)r > K - 2) break;                        // cannot happen after host validation
        v = lut_s[r * 256 + ((x >> (24 - 8 * lvl)) & 255)];
    }
    uint32_t len = 0;
    if (v < 240) len = lut_s[(K - 1) * 256 + v]; else v = 0;
    if (len - 1u > 31u) { err |= DF11_ERR_CODE; len = 32; }
    inc = len + 64;
    return v | (1u << 30);
}

// One loop step at bit position p = st & 31 of the 64-bit pair (hi:lo). MODE 0 counts, MODE 1 also stores the
// symbols at dst[count..], MODE 2 stores only below klim (a thread whose range crosses the block's end).
template <int MODE>
DF11_HD uint32_t step(uint32_t st, uint32_t hi, uint32_t lo, const uint32_t* tab,
                                         const uint8_t* lut_s, int K, uint8_t* dst, uint32_t klim,
                                         uint32_t& err) {
    uint32_t x = df11_funnel_l(lo, hi, st);          // uses st & 31 == p
    uint32_t e = tab[x >> 24];
    uint32_t inc = e >> 24;
    if (e & DF11_TAB_SLOW) e = slow_code(x, lut_s, K, err, inc);
    if (MODE != 0) {
        uint32_t k = st >> 6;
        if (MODE == 1) {
            dst[k] = (uint8_t)e;
            if (e >= 0x80000000u) dst[k + 1] = (uint8_t)(e >> 8);
            if (e >= 0xC0000000u) dst[k + 2] = (uint8_t)(e >> 16);
        } else {
            if (k < klim) dst[k] = (uint8_t)e;
            if (e >= 0x80000000u && k + 1 < klim) dst[k + 1] = (uint8_t)(e >> 8);
            if (e >= 0xC0000000u && k + 2 < klim) dst[k + 2] = (uint8_t)(e >> 16);
        }
    }
    return st + inc;
}

// Decode every code that starts in [gap, 64) of the window w0:w1 (w2 = 32 look-ahead bits from the next
// window, so a code starting late can finish). Returns st: count = st >> 6, end bit = (st & 63) + 32.
// The multi-symbol table is used while all three possible symbol starts lie before bit 64 (p <= 56), the
// single-symbol half (tab + 256) for the last few bits, so no symbol of the next window is ever taken.
template <int MODE>
DF11_HD uint32_t run_window(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t gap,
                                               const uint32_t* tab, const uint8_t* lut_s, int K,
                                               uint8_t* dst, uint32_t klim, uint32_t& err) {
    uint32_t st = gap;
    while (!(st & 32)) st = step<MODE>(st, w0, w1, tab, lut_s, K, dst, klim, err);
    st -= 32;                                            // now relative to w1
    while ((st & 63) <= 24) st = step<MODE>(st, w1, w2, tab, lut_s, K, dst, klim, err);
    while (!(st & 32)) st = step<MODE>(st, w1, w2, tab + 256, lut_s, K, dst, klim, err);
    return st;
}

// Step-table entry for 8-bit index v with at most nmax symbols. Symbol 1 sees all 8 real bits. Symbols 2 and 3
// are taken only if the code fits in the bits left and row 0 is uniform over the unknown low bits, so every step
// is exactly what the byte-wise sequential decode does with the same LUT, whatever the LUT holds (leaked or
// EOF-filled entries included). Anything else becomes a "slow" entry.
DF11_HD uint32_t build_entry(uint32_t v, uint32_t nmax, const uint8_t* lut_s, const uint32_t* mask, int K) {
    const uint8_t* lenrow = lut_s + (K - 1) * 256;
    uint32_t s = lut_s[v];
    uint32_t l = s < 240 ? lenrow[s] : 0;
    if (l < 1 || l > 8) return DF11_TAB_SLOW;
    uint32_t used = l, cnt = 1, syms = s;
    while (cnt < nmax && used < 8) {
        uint32_t a = (v << used) & 255;
        uint32_t s2 = lut_s[a];
        if (s2 >= 240) break;
        uint32_t l2 = lenrow[s2];
        if (l2 == 0 || l2 > 8 - used || !row0_uniform(mask, a, used)) break;
        syms |= s2 << (8 * cnt);
        used += l2;
        ++cnt;
    }
    return syms | (used << 24) | (cnt << 30);
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

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define DF11_HAS_CP_ASYNC 1
#define DF11_BOUNDS __launch_bounds__(DF11_THREADS, DF11_MIN_BLOCKS)
#else
#define DF11_HAS_CP_ASYNC 0
#define DF11_BOUNDS __launch_bounds__(DF11_THREADS, 1)
#endif

extern "C" __global__ void DF11_BOUNDS
df11_decode(const uint8_t* __restrict__ luts, const uint8_t* __restrict__ codes,
            const uint8_t* __restrict__ sign_mantissa, const uint32_t* __restrict__ output_positions,
            const uint8_t* __restrict__ gaps, uint16_t* __restrict__ out, int n_luts, int n_bytes,
            int n_elements, int n_positions, uint32_t* __restrict__ status) {
    extern __shared__ __align__(16) uint8_t smem[];
    uint32_t* tab = reinterpret_cast<uint32_t*>(smem);            // [512]: multi-symbol, then single-symbol
    uint32_t* mask = reinterpret_cast<uint32_t*>(smem + 2048);    // [8]: row-0 entry boundaries
    uint32_t* wsum = reinterpret_cast<uint32_t*>(smem + 2080);    // [16]: per-warp code counts
    uint8_t* lut_s = smem + 2144;                                  // raw LUT copy, K*256 <= 4608
    uint8_t* buf = smem + DF11_SMEM_HDR;                           // exponents, then (staged) sign_mantissa

    const uint32_t t = threadIdx.x, lane = t & 31, warp = t >> 5, b = blockIdx.x, nb = gridDim.x;
    const uint32_t g = b * DF11_THREADS + t;
    const int K = n_luts;
    const uint32_t n = (uint32_t)max(n_elements, 0);

    // ---- Block-uniform argument checks: on failure the block writes nothing.
    uint32_t dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    uint32_t bad = 0;
    if (K < 2 || K > 18 || n_bytes <= 0 || n_elements < 0 || blockDim.x != DF11_THREADS ||
        (long long)nb != ((long long)n_bytes + DF11_BLOCK_BYTES - 1) / DF11_BLOCK_BYTES ||
        (n_positions != (int)nb && n_positions != (int)nb + 1) || dyn < DF11_SMEM_HDR + 16)
        bad |= DF11_ERR_ARGS;
    if (((uintptr_t)codes & 3) | ((uintptr_t)sign_mantissa & 15) | ((uintptr_t)out & 15) |
        ((uintptr_t)output_positions & 3))
        bad |= DF11_ERR_ALIGN;
    if (bad) { if (t == 0) atomicOr(status, bad); return; }

    const uint32_t p0 = __ldg(output_positions + b);
    const uint32_t p1 = (int)b + 1 < n_positions ? __ldg(output_positions + b + 1) : n;
    if (p1 < p0) { if (t == 0) atomicOr(status, DF11_ERR_ARGS); return; }
    const uint32_t base = min(p0, n), end = min(p1, n);           // this block writes out[base, end)
    const uint32_t abase = base & ~15u;                             // buf[k] <-> element abase + k
    const uint32_t need = (end - abase + 15) & ~15u;                // buf bytes this block uses
    const uint32_t avail = dyn - DF11_SMEM_HDR;
    const uint32_t half = (avail >> 1) & ~15u;
    const bool staged = DF11_HAS_CP_ASYNC && need <= half;
    if (need > avail) { if (t == 0) atomicOr(status, DF11_ERR_SMEM); return; }
    uint8_t* sm_s = buf + half;                                     // staged sign_mantissa
    const uint32_t nchunks = need >> 4;

    // ---- Prefetch this block's sign_mantissa into shared memory; it lands while we decode.
#if DF11_HAS_CP_ASYNC
    if (staged) {
        for (uint32_t c = t; c < nchunks; c += DF11_THREADS) {
            uint32_t j0 = abase + 16 * c;                           // < end <= n
            uint32_t src = min(n - j0, 16u);                        // zero-fills past n_elements
            uint32_t dst = (uint32_t)__cvta_generic_to_shared(sm_s + 16 * c);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
                         "l"(sign_mantissa + j0), "r"(src));
        }
        asm volatile("cp.async.commit_group;\n" ::);
    }
#endif

    // ---- This thread's 64-bit window + 32 look-ahead bits (= next lane's first word), and gaps.
    const long long off = 8LL * g;
    const uint32_t w0 = load_be32(codes, off, n_bytes);
    const uint32_t w1 = load_be32(codes, off + 4, n_bytes);
    uint32_t w2 = __shfl_down_sync(0xffffffffu, w0, 1);
    const uint32_t gap = read_gap(gaps, g);
    uint32_t next_gap = __shfl_down_sync(0xffffffffu, gap, 1);
    if (lane == 31) {
        w2 = load_be32(codes, off + 8, n_bytes);
        next_gap = g + 1 < nb * DF11_THREADS ? read_gap(gaps, g + 1) : 0;
    }

    // ---- LUT to shared memory; boundary bitmask of row 0 (bit i: entry i differs from entry i-1).
    for (int i = t; i < K * 256; i += DF11_THREADS) lut_s[i] = __ldg(luts + i);
    if (t < 256) {
        uint32_t cur = __ldg(luts + t), prev = t ? __ldg(luts + t - 1) : cur;
        uint32_t m = __ballot_sync(0xffffffffu, cur != prev);
        if (lane == 0) mask[warp] = m;
    }
    __syncthreads();

    // ---- Build the step table: thread i makes entry i (0..255 multi-symbol, 256..511 single-symbol).
    tab[t] = build_entry(t & 255, t < 256 ? 3 : 1, lut_s, mask, K);
    __syncthreads();

    // ---- Pass 1: count the codes starting in this window.
    uint32_t err = 0;
    const uint32_t st1 = run_window<0>(w0, w1, w2, gap, tab, lut_s, K, nullptr, 0, err);
    const uint32_t cnt = st1 >> 6, overshoot = (st1 & 63) - 32;

    // ---- Block exclusive scan: warp shuffles, one barrier, every warp scans the 16 warp totals itself.
    uint32_t incl = cnt;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        uint32_t y = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= (uint32_t)d) incl += y;
    }
    if (lane == 31) wsum[warp] = incl;
    __syncthreads();
    uint32_t ws = lane < 16 ? wsum[lane] : 0, wincl = ws;
#pragma unroll
    for (int d = 1; d < 16; d <<= 1) {
        uint32_t y = __shfl_up_sync(0xffffffffu, wincl, d);
        if (lane >= (uint32_t)d) wincl += y;
    }
    const uint32_t warp_off = __shfl_sync(0xffffffffu, wincl - ws, warp);
    const uint32_t total = __shfl_sync(0xffffffffu, wincl, 15);
    const uint32_t excl = warp_off + incl - cnt;

    // ---- Consistency checks (cheap, never fire on a valid unit).
    // Count: every code starting in this block's 32768 bits is counted once, so a block that does not end the
    // unit must match its span exactly; the last one(s) may also count EOF / padding / look-ahead codes.
    if (t == 0 && (end < n ? total != end - base : total < end - base)) err |= DF11_ERR_COUNT;
    // Chain: if the next window starts a real element, its gap is where this thread's last code ended.
    {
        uint32_t next_first = t < DF11_THREADS - 1 ? base + excl + cnt : end;
        if (next_first < n && next_gap != overshoot) err |= DF11_ERR_CHAIN;
    }

    // ---- Pass 2: decode again, exponent bytes to buf at their final place (relative to abase).
    const uint32_t k0 = base - abase + excl, klim = end - abase;
    if (k0 + cnt <= klim) {
        run_window<1>(w0, w1, w2, gap, tab, lut_s, K, buf + k0, 0, err);
    } else if (k0 < klim) {
        run_window<2>(w0, w1, w2, gap, tab, lut_s, K, buf + k0, klim - k0, err);
    }
#if DF11_HAS_CP_ASYNC
    if (staged) asm volatile("cp.async.wait_all;\n" ::);
#endif
    __syncthreads();

    // ---- Copy-out: 16 elements per thread per iteration, 16-byte shared loads, two 16-byte global stores.
    for (uint32_t c = t; c < nchunks; c += DF11_THREADS) {
        const uint32_t k = 16 * c, j0 = abase + k;
        if (j0 >= base && j0 + 16 <= end) {
            const uint4 e4 = *reinterpret_cast<const uint4*>(buf + k);
            const uint4 s4 = staged ? *reinterpret_cast<const uint4*>(sm_s + k)
                                    : __ldg(reinterpret_cast<const uint4*>(sign_mantissa + j0));
            uint4 o0, o1;
            fuse4(s4.x, e4.x, o0.x, o0.y);
            fuse4(s4.y, e4.y, o0.z, o0.w);
            fuse4(s4.z, e4.z, o1.x, o1.y);
            fuse4(s4.w, e4.w, o1.z, o1.w);
            *reinterpret_cast<uint4*>(out + j0) = o0;
            *reinterpret_cast<uint4*>(out + j0 + 8) = o1;
        } else {                                                    // the block's first / last partial chunk
            for (uint32_t i = 0; i < 16; ++i) {
                const uint32_t j = j0 + i;
                if (j >= base && j < end)
                    out[j] = fuse1(staged ? sm_s[k + i] : __ldg(sign_mantissa + j), buf[k + i]);
            }
        }
    }
    if (err) atomicOr(status, err);
}
