// The PACKED EXPONENTS form (crates/df11-candle/src/cuda/forms/packed/pack.rs, df11_packed.cuh) built on the GPU at load,
// from a unit's BF16 values just decoded by df11_decode (whose status word the host checks first): the same
// arrays, byte for byte, as PackedExponents::build makes on the CPU. Written for this project.
//
//   df11_pack_tile     the exponents in storage order (members the host tiles in the tile order of df11_packed.cuh,
//                      the others as they are), and sign_mantissa in that order: the pack kernels' `_e` forms
//                      (exponents, not BF16 values, as input) then read them
//   df11_pack_hist     exponent histogram (256 bins) of one member's elements
//   df11_pack_codes    3-bit codes, one thread per 32 elements (three words), code_of[member][exponent]
//   df11_pack_lanes    per 2048-element chunk (a warp): each lane's escape count, exclusive-scanned into
//                      lane_starts (flag 1 when a lane would start past 255), the chunk's total
//   df11_pack_escapes  per chunk (a warp): each lane's escaped exponents at chunk_escapes[c] + lane_starts, in pass
//                      order and element order within an 8-group (the order a decoding lane consumes them)
//
// HOST GUARANTEES: `w` holds n_elements BF16 values (n_elements < 2^32); member_ends ascending, the last =
// n_elements, every member boundary a multiple of 8 (an 8-group never straddles members); code_of holds 256
// codes (0-7) per member; `codes` holds 3 * n_triples words, n_triples * 32 >= n_elements + 11 (the decoders read
// one word past the last code); lane_starts 32 per chunk; chunk_counts one per chunk; chunk_escapes n_chunks + 1
// entries (the exclusive scan of chunk_counts, computed by the host); `escapes` at least chunk_escapes[n_chunks]
// bytes. Every index below is bounded by those sizes.

#include <stdint.h>
#include "df11_packed.cuh"

#define PK_THREADS 256

// The exponent of a decoded BF16 value, or an exponent as it is (the tiled build keeps exponents only).
__device__ __forceinline__ uint32_t pk_exponent(uint16_t w) { return (w >> 7) & 0xffu; }
__device__ __forceinline__ uint32_t pk_exponent(uint8_t e) { return e; }

// The member holding element j (member_ends ascending; j < n_elements).
__device__ __forceinline__ int pk_member(const long long* member_ends, int n_members, long long j) {
    int lo = 0, hi = n_members - 1;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (member_ends[mid] <= j) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// The 24 bits of 8-group q (as df11_packed.cuh's fp_codes8, without the read-only cache: written this launch).
__device__ __forceinline__ uint32_t pk_codes8(const uint32_t* codes, long long q) {
    const long long w = (3 * q) >> 2;
    const uint32_t sh = (uint32_t)((q & 3) * 24) & 31u;
    return __funnelshift_r(codes[w], codes[w + 1], sh) & 0xffffffu;
}

// One bit (at 3k) per escaped code k.
__device__ __forceinline__ uint32_t pk_escape_mask(uint32_t v) { return v & (v >> 1) & (v >> 2) & 0x249249u; }

template <typename T>
__device__ __forceinline__ void df11_pack_hist_body(const T* w, long long begin, long long end, uint32_t* hist) {
    // One histogram per warp in shared memory: weights share a few exponents, so one histogram
    // for the block would serialise its atomics.
    __shared__ uint32_t h[PK_THREADS / 32][256];
    const int warp = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < (PK_THREADS / 32) * 256; i += PK_THREADS) (&h[0][0])[i] = 0;
    __syncthreads();
    const long long stride = (long long)gridDim.x * PK_THREADS;
    for (long long j = begin + (long long)blockIdx.x * PK_THREADS + threadIdx.x; j < end; j += stride)
        atomicAdd(&h[warp][pk_exponent(w[j])], 1u);
    __syncthreads();
    for (int e = threadIdx.x; e < 256; e += PK_THREADS) {
        uint32_t s = 0;
        for (int k = 0; k < PK_THREADS / 32; ++k) s += h[k][e];
        if (s) atomicAdd(hist + e, s);
    }
}
extern "C" __global__ void __launch_bounds__(PK_THREADS)
df11_pack_hist(const uint16_t* w, long long begin, long long end, uint32_t* hist) {
    df11_pack_hist_body(w, begin, end, hist);
}
extern "C" __global__ void __launch_bounds__(PK_THREADS)
df11_pack_hist_e(const uint8_t* w, long long begin, long long end, uint32_t* hist) {
    df11_pack_hist_body(w, begin, end, hist);
}

template <typename T>
__device__ __forceinline__ void df11_pack_codes_body(const T* w, long long n_elements, const uint8_t* code_of,
                                                     const long long* member_ends,
                int n_members, uint32_t* codes, long long n_triples) {
    const long long stride = (long long)gridDim.x * PK_THREADS;
    for (long long t = (long long)blockIdx.x * PK_THREADS + threadIdx.x; t < n_triples; t += stride) {
        uint32_t g[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const long long first = 32 * t + 8 * q;
            uint32_t bits = 0;
            if (first < n_elements) {
                const uint8_t* map = code_of + 256 * pk_member(member_ends, n_members, first);
                for (int k = 0; k < 8 && first + k < n_elements; ++k)
                    bits |= (uint32_t)map[pk_exponent(w[first + k])] << (3 * k);
            }
            g[q] = bits;
        }
        codes[3 * t] = g[0] | g[1] << 24;
        codes[3 * t + 1] = g[1] >> 8 | g[2] << 16;
        codes[3 * t + 2] = g[2] >> 16 | g[3] << 8;
    }
}
extern "C" __global__ void __launch_bounds__(PK_THREADS)
df11_pack_codes(const uint16_t* w, long long n_elements, const uint8_t* code_of, const long long* member_ends,
                int n_members, uint32_t* codes, long long n_triples) {
    df11_pack_codes_body(w, n_elements, code_of, member_ends, n_members, codes, n_triples);
}
extern "C" __global__ void __launch_bounds__(PK_THREADS)
df11_pack_codes_e(const uint8_t* w, long long n_elements, const uint8_t* code_of, const long long* member_ends,
                int n_members, uint32_t* codes, long long n_triples) {
    df11_pack_codes_body(w, n_elements, code_of, member_ends, n_members, codes, n_triples);
}

extern "C" __global__ void __launch_bounds__(PK_THREADS)
df11_pack_lanes(const uint32_t* codes, long long n_elements, long long n_chunks, uint8_t* lane_starts,
                uint32_t* chunk_counts, uint32_t* flags) {
    const uint32_t lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (PK_THREADS / 32);
    for (long long c = (long long)blockIdx.x * (PK_THREADS / 32) + (threadIdx.x >> 5); c < n_chunks; c += warps) {
        uint32_t count = 0;
        for (int pass = 0; pass < 8; ++pass) {
            const long long first = 2048 * c + 256 * pass + 8 * lane;
            if (first >= n_elements) break;
            count += __popc(pk_escape_mask(pk_codes8(codes, first >> 3)));
        }
        uint32_t x = count;   // inclusive scan over the lanes
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= (uint32_t)o) x += y;
        }
        const uint32_t start = x - count;
        if (start > 255u) atomicOr(flags, 1u);
        lane_starts[32 * c + lane] = (uint8_t)min(start, 255u);
        if (lane == 31) chunk_counts[c] = x;
    }
}

template <typename T>
__device__ __forceinline__ void df11_pack_escapes_body(const T* w, const uint32_t* codes, long long n_elements,
                                                       long long n_chunks,
                  const uint32_t* chunk_escapes, const uint8_t* lane_starts, uint8_t* escapes) {
    const uint32_t lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (PK_THREADS / 32);
    for (long long c = (long long)blockIdx.x * (PK_THREADS / 32) + (threadIdx.x >> 5); c < n_chunks; c += warps) {
        uint32_t at = chunk_escapes[c] + lane_starts[32 * c + lane];
        for (int pass = 0; pass < 8; ++pass) {
            const long long first = 2048 * c + 256 * pass + 8 * lane;
            if (first >= n_elements) break;
            for (uint32_t m = pk_escape_mask(pk_codes8(codes, first >> 3)); m; m &= m - 1) {
                const int k = (__ffs(m) - 1) / 3;
                escapes[at++] = (uint8_t)pk_exponent(w[first + k]);
            }
        }
    }
}
extern "C" __global__ void __launch_bounds__(PK_THREADS)
df11_pack_escapes(const uint16_t* w, const uint32_t* codes, long long n_elements, long long n_chunks,
                  const uint32_t* chunk_escapes, const uint8_t* lane_starts, uint8_t* escapes) {
    df11_pack_escapes_body(w, codes, n_elements, n_chunks, chunk_escapes, lane_starts, escapes);
}
extern "C" __global__ void __launch_bounds__(PK_THREADS)
df11_pack_escapes_e(const uint8_t* w, const uint32_t* codes, long long n_elements, long long n_chunks,
                  const uint32_t* chunk_escapes, const uint8_t* lane_starts, uint8_t* escapes) {
    df11_pack_escapes_body(w, codes, n_elements, n_chunks, chunk_escapes, lane_starts, escapes);
}

// One thread per 8-group of storage: et[j..j+8] = the exponents stored there, sm[j..j+8] their sign and mantissa
// bytes (one byte each: the tiled build holds 2 bytes per element besides the decoded values, not 3).
// member_cols[m]: the columns of a member the host tiles (rows * cols its size, cols % 256 == 0, its start % 256 == 0),
// else 0.
extern "C" __global__ void __launch_bounds__(PK_THREADS)
df11_pack_tile(const uint16_t* w, long long n_elements, const long long* member_ends, const int* member_cols,
               int n_members, uint8_t* et, uint8_t* sm) {
    const long long stride = (long long)gridDim.x * PK_THREADS;
    const long long n8 = (n_elements + 7) >> 3;
    for (long long q = (long long)blockIdx.x * PK_THREADS + threadIdx.x; q < n8; q += stride) {
        const long long j = 8 * q;
        const int m = pk_member(member_ends, n_members, j);
        const long long start = m == 0 ? 0 : member_ends[m - 1];
        const int cols = member_cols[m];
        const long long src = cols > 0 ? start + tile_original((uint32_t)(j - start), (uint32_t)cols) : j;
        if (j + 8 <= n_elements) {
            const uint4 v = *reinterpret_cast<const uint4*>(w + src);
            const uint32_t u[4] = {v.x, v.y, v.z, v.w};
            uint32_t b[2], e[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                // Two BF16 per word: byte 1 holds sign + 7 exponent bits, byte 0 exponent bit + mantissa.
                const uint32_t lo = u[2 * h], hi = u[2 * h + 1];
                const uint32_t h4 = __byte_perm(lo, hi, 0x7531);   // high bytes: sign, exponent bits 7..1
                const uint32_t l4 = __byte_perm(lo, hi, 0x6420);   // low bytes: exponent bit 0, mantissa
                b[h] = (h4 & 0x80808080u) | (l4 & 0x7f7f7f7fu);
                e[h] = ((h4 << 1) & 0xfefefefeu) | ((l4 >> 7) & 0x01010101u);
            }
            *reinterpret_cast<uint2*>(et + j) = make_uint2(e[0], e[1]);
            *reinterpret_cast<uint2*>(sm + j) = make_uint2(b[0], b[1]);
        } else {
            for (long long k = j; k < n_elements; ++k) {
                const uint16_t v = w[src + (k - j)];
                et[k] = (uint8_t)((v >> 7) & 0xffu);
                sm[k] = (uint8_t)(((v >> 8) & 0x80u) | (v & 0x7fu));
            }
        }
    }
}
