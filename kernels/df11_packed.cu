// Decode of PACKED EXPONENTS (see df11_packed.cuh and crates/df11-candle/src/packed.rs) to BF16 in global memory:
// the path of larger batches (decode + cuBLAS) and of embeddings for units kept in the packed form.
// Written for this project.
//
// A warp takes 2048-element chunks; lane l the chunk's lane l (8-groups 256c + 32i + l, pass i = 0..7). Its codes
// become exponents through the member's table (PRMT on two registers), its escapes (fetched once per chunk) are
// ORed in, and the eight BF16 values are rebuilt with sign_mantissa and stored (one 16-byte store where aligned and
// inside the range).
//
// TILED MEMBERS (member_cols[m] > 0: member m is stored in the tile order of a [rows, member_cols[m]] matrix,
// df11_packed.cuh): elements are visited in storage order and each 8-group is written to its row-major place, which
// is contiguous there too. Output element o (a row-major unit element) goes to out[o - begin] for begin <= o < end;
// the warps visit the storage range [visit_begin, visit_end), which the host widens to whole row groups of a tiled
// member (8 rows: the storage of any row range is inside them).
//
// HOST GUARANTEES: those of df11_packed.cuh; member_ends ascending, the last = n_elements, n_members >= 1;
// tables[2m], tables[2m+1] member m's exponents for codes 0-3 and 4-7 (code 7 -> 0); member_cols[m] 0 or the column
// count of a tiled member (rows * cols its size, cols % 256 == 0, its start % 8 == 0); 0 <= begin <= end <=
// n_elements; 0 <= visit_begin <= visit_end <= n_elements covering every storage element of [begin, end).

#include "df11_packed.cuh"

#define DP_THREADS 256
#define DP_MEMBERS 32         // members whose tables are cached in shared memory (more: read from global memory)

// Units with no tiled member: each 8-group of [begin, end) (unit elements) decoded to out[j - begin]. The CTA's
// warps take chunks from block * 8 on, nblocks * 8 apart; s_ends / s_tables: the first DP_MEMBERS members' bounds
// and tables, loaded by the caller.
__device__ __forceinline__ void dp_range(const uint32_t* codes, const uint32_t* chunk_escapes, const uint8_t* lane_starts,
                                         uint32_t n_chunks, const uint8_t* escapes, uint32_t n_escapes,
                                         const uint32_t* tables, const long long* member_ends, int n_members,
                                         const long long* s_ends, const uint32_t* s_tables, const uint8_t* sign_mantissa,
                                         long long n_elements, uint16_t* out, long long begin, long long end,
                                         long long block, long long nblocks) {
    const bool cached = n_members <= DP_MEMBERS;
    const uint32_t lane = threadIdx.x & 31;
    const long long warps = (long long)nblocks * (DP_THREADS / 32);
    const uint32_t n8 = (uint32_t)((n_elements + 7) >> 3);
    // 16-byte stores where an 8-group lands on a 16-byte boundary of `out`: `begin` a multiple of 8 AND `out`
    // itself 16-byte aligned (the rows kernel passes out + y * row_len, which is not when row_len % 8 != 0: a vector
    // store there faults with a misaligned address).
    const bool vec = (begin & 7) == 0 && (reinterpret_cast<uintptr_t>(out) & 15) == 0;
    // A warp decodes chunk c (elements [2048c, 2048c + 2048)): lane l takes 8-groups 256c + 32i + l, i = 0..7.
    for (long long c = (begin >> 11) + (long long)block * (DP_THREADS / 32) + (threadIdx.x >> 5);
         c < (end + 2047) >> 11; c += warps) {
        const uint32_t q0 = 256u * (uint32_t)c + lane;
        uint32_t v[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = q0 + 32u * i < n8 ? fp_codes8(codes, q0 + 32u * i) : 0u;
        // The chunk's sign_mantissa for the 16-byte stores, loaded with the codes (in flight together,
        // not one latency per pass: a load is not moved above the pass loop's exits).
        uint2 smv[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const long long j = 8LL * (q0 + 32u * i);
            smv[i] = vec && j >= begin && j + 8 <= end ? __ldg(reinterpret_cast<const uint2*>(sign_mantissa + j))
                                                       : make_uint2(0u, 0u);
        }
        FpLane r;
        r.a = fp_lane_start(chunk_escapes, lane_starts, n_chunks, (uint32_t)c, lane);
        r.b = 0;
        uint32_t na = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) na += __popc(fp_escape_mask(v[i]));
        r.na = na;
        fp_fetch_run(r, escapes, n_escapes);
        uint32_t t = 0;
        int m = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const long long j = 8LL * (q0 + 32u * i);
            if (j >= end || j >= n_elements) break;
            while (m < n_members - 1 && j >= (cached ? s_ends[m] : member_ends[m])) ++m;
            const uint32_t t0 = cached ? s_tables[2 * m] : __ldg(tables + 2 * m);
            const uint32_t t1 = cached ? s_tables[2 * m + 1] : __ldg(tables + 2 * m + 1);
            uint32_t lo = __byte_perm(t0, t1, fp_spread(v[i] & 0xfffu));
            uint32_t hi = __byte_perm(t0, t1, fp_spread(v[i] >> 12));
            if (na <= 8u) fp_apply_held(v[i], r.held, lo, hi);
            else fp_apply(r, t, v[i], escapes, n_escapes, lo, hi);
            if (j + 8 <= begin) continue;
            if (vec && j >= begin && j + 8 <= end) {
                const uint32_t s2[2] = {smv[i].x, smv[i].y}, e[2] = {lo, hi};
                uint32_t o[4];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const uint32_t H = (s2[h] & 0x80808080u) | ((e[h] >> 1) & 0x7f7f7f7fu);
                    const uint32_t L = (s2[h] & 0x7f7f7f7fu) | ((e[h] << 7) & 0x80808080u);
                    o[2 * h] = __byte_perm(L, H, 0x5140);
                    o[2 * h + 1] = __byte_perm(L, H, 0x7362);
                }
                *reinterpret_cast<uint4*>(out + (j - begin)) = make_uint4(o[0], o[1], o[2], o[3]);
            } else {
                for (int k = 0; k < 8; ++k) {
                    const long long jk = j + k;
                    if (jk >= begin && jk < end) {
                        const uint32_t ex = ((k < 4 ? lo : hi) >> (8 * (k & 3))) & 0xffu;
                        const uint32_t sm = sign_mantissa[jk];
                        out[jk - begin] = (uint16_t)(((sm & 0x80u) << 8) | (ex << 7) | (sm & 0x7fu));
                    }
                }
            }
        }
    }
}


// Loads the first DP_MEMBERS members' bounds and tables into shared memory (the caller synchronizes).
__device__ __forceinline__ void dp_cache_members(const uint32_t* tables, const long long* member_ends, int n_members,
                                                 long long* s_ends, uint32_t* s_tables) {
    for (int i = threadIdx.x; i < min(n_members, DP_MEMBERS); i += DP_THREADS) {
        s_ends[i] = member_ends[i];
        s_tables[2 * i] = tables[2 * i];
        s_tables[2 * i + 1] = tables[2 * i + 1];
    }
}

// Units with no tiled member: [begin, end) to out[0 .. end - begin).
extern "C" __global__ void __launch_bounds__(DP_THREADS)
df11_decode_packed(const uint32_t* codes, const uint32_t* chunk_escapes, const uint8_t* lane_starts, uint32_t n_chunks,
                   const uint8_t* escapes, uint32_t n_escapes, const uint32_t* tables, const long long* member_ends,
                   int n_members, const uint8_t* sign_mantissa, long long n_elements, uint16_t* out, long long begin,
                   long long end) {
    __shared__ long long s_ends[DP_MEMBERS];
    __shared__ uint32_t s_tables[2 * DP_MEMBERS];
    dp_cache_members(tables, member_ends, n_members, s_ends, s_tables);
    __syncthreads();
    dp_range(codes, chunk_escapes, lane_starts, n_chunks, escapes, n_escapes, tables, member_ends, n_members, s_ends,
             s_tables, sign_mantissa, n_elements, out, begin, end, blockIdx.x, gridDim.x);
}

// ROWS of a unit with no tiled member (an embedding's rows for a step's tokens): row y = blockIdx.y is the elements
// [starts[y], starts[y] + row_len), written to out[y * row_len ..]; blockIdx.x takes its chunks as
// df11_decode_packed does. One launch for every row instead of one a row. HOST GUARANTEES: as df11_decode_packed's
// for each [starts[y], starts[y] + row_len); gridDim.y rows in starts; out holds gridDim.y * row_len values.
extern "C" __global__ void __launch_bounds__(DP_THREADS)
df11_decode_packed_rows(const uint32_t* codes, const uint32_t* chunk_escapes, const uint8_t* lane_starts,
                        uint32_t n_chunks, const uint8_t* escapes, uint32_t n_escapes, const uint32_t* tables,
                        const long long* member_ends, int n_members, const uint8_t* sign_mantissa, long long n_elements,
                        uint16_t* out, const long long* starts, long long row_len) {
    __shared__ long long s_ends[DP_MEMBERS];
    __shared__ uint32_t s_tables[2 * DP_MEMBERS];
    dp_cache_members(tables, member_ends, n_members, s_ends, s_tables);
    __syncthreads();
    const long long begin = starts[blockIdx.y];
    dp_range(codes, chunk_escapes, lane_starts, n_chunks, escapes, n_escapes, tables, member_ends, n_members, s_ends,
             s_tables, sign_mantissa, n_elements, out + (long long)blockIdx.y * row_len, begin, begin + row_len,
             blockIdx.x, gridDim.x);
}

// Units with a tiled member (see TILED MEMBERS above). A CTA takes BLOCKS of 8 chunks. A block that is one whole
// (G, k) piece of a tiled member (8 rows x 2048 columns: its 8 chunks are the sub-steps m = 0..7) is decoded into
// shared memory and written out row by row, 4 KB contiguous per row (16-byte stores straight from the lanes would
// touch 8 rows x 64 bytes each: measured 30% slower than the row-order kernel). Other chunks (row-order members,
// partial-width chunks, a block cut by the visited range) write each 8-group to its place directly.
#define DP_ROW_UNITS 257   // 16-byte units per staged row: 256 + 1 (the pad spreads the 8 rows over the banks)

// Decodes this lane's 8-groups of chunk c inside [visit_begin, visit_end): store(i, j, m, lo, hi, sm) for pass i, its
// unit element j, its member m, its exponents (lo, hi) and its sign_mantissa (loaded when `vec` and j is in the range).
template <typename Store>
__device__ __forceinline__ void dp_chunk(const FgPacked& u, const uint8_t* sign_mantissa, long long n_elements,
                                         long long c, const long long* ends, const uint32_t* tabs,
                                         int n_members, bool vec, long long visit_begin, long long visit_end,
                                         Store&& store) {
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t n8 = (uint32_t)((n_elements + 7) >> 3);
    const uint32_t q0 = 256u * (uint32_t)c + lane;
    uint32_t v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = q0 + 32u * i < n8 ? fp_codes8(u.codes, q0 + 32u * i) : 0u;
    uint2 smv[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const long long j = 8LL * (q0 + 32u * i);
        smv[i] = vec && j >= visit_begin && j + 8 <= visit_end
                     ? __ldg(reinterpret_cast<const uint2*>(sign_mantissa + j))
                     : make_uint2(0u, 0u);
    }
    FpLane r;
    r.a = fp_lane_start(u.chunk_escapes, u.lane_starts, u.n_chunks, (uint32_t)c, lane);
    r.b = 0;
    uint32_t na = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) na += __popc(fp_escape_mask(v[i]));
    r.na = na;
    fp_fetch_run(r, u.escapes, u.n_escapes);
    uint32_t t = 0;
    int m = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const long long j = 8LL * (q0 + 32u * i);
        if (j >= visit_end || j >= n_elements) break;
        while (m < n_members - 1 && j >= ends[m]) ++m;
        uint32_t lo = __byte_perm(tabs[2 * m], tabs[2 * m + 1], fp_spread(v[i] & 0xfffu));
        uint32_t hi = __byte_perm(tabs[2 * m], tabs[2 * m + 1], fp_spread(v[i] >> 12));
        if (na <= 8u) fp_apply_held(v[i], r.held, lo, hi);
        else fp_apply(r, t, v[i], u.escapes, u.n_escapes, lo, hi);
        if (j + 8 <= visit_begin) continue;
        store(i, j, m, lo, hi, smv[i]);
    }
}

__device__ __forceinline__ uint4 dp_fuse8(uint2 sm, uint32_t lo, uint32_t hi) {
    uint32_t w[4];
    fg_fuse4(sm.x, lo, w[0], w[1]);
    fg_fuse4(sm.y, hi, w[2], w[3]);
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// dp_cache_members for the tiled kernels, whose members all fit (n_members <= DP_MEMBERS), with each member's column
// count (> 0: tiled) too (the caller synchronizes).
__device__ __forceinline__ void dp_cache_tiled_members(const uint32_t* tables, const long long* member_ends,
                                                       const int* member_cols, int n_members, long long* s_ends,
                                                       uint32_t* s_tables, int* s_cols) {
    for (int i = threadIdx.x; i < n_members; i += DP_THREADS) {
        s_ends[i] = member_ends[i];
        s_tables[2 * i] = tables[2 * i];
        s_tables[2 * i + 1] = tables[2 * i + 1];
        s_cols[i] = member_cols[i];
    }
}

// HOST GUARANTEES (besides the file's): n_members <= DP_MEMBERS.
extern "C" __global__ void __launch_bounds__(DP_THREADS, 4)
df11_decode_packed_tiled(const uint32_t* codes, const uint32_t* chunk_escapes, const uint8_t* lane_starts,
                         uint32_t n_chunks, const uint8_t* escapes, uint32_t n_escapes, const uint32_t* tables,
                         const long long* member_ends, const int* member_cols, int n_members,
                         const uint8_t* sign_mantissa, long long n_elements, uint16_t* out, long long begin,
                         long long end, long long visit_begin, long long visit_end) {
    __shared__ long long s_ends[DP_MEMBERS];
    __shared__ uint32_t s_tables[2 * DP_MEMBERS];
    __shared__ int s_cols[DP_MEMBERS];
    __shared__ uint4 s_rows[8 * DP_ROW_UNITS];
    dp_cache_tiled_members(tables, member_ends, member_cols, n_members, s_ends, s_tables, s_cols);
    __syncthreads();
    // The unit's packed form (the per-member tables are in shared memory: t0, t1 unused).
    const FgPacked u = {codes, chunk_escapes, lane_starts, n_chunks, escapes, n_escapes, 0u, 0u};
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const bool vec = (begin & 7) == 0;
    const long long c_begin = visit_begin >> 11, c_end = (visit_end + 2047) >> 11;
    // Where an 8-group goes when written directly: its own place, or its row-major place in a tiled member.
    auto direct = [&](int, long long j, int m, uint32_t lo, uint32_t hi, uint2 sm) {
        long long o = j;
        if (s_cols[m] > 0) {
            const long long start = m == 0 ? 0 : s_ends[m - 1];
            o = start + tile_original((uint32_t)(j - start), (uint32_t)s_cols[m]);
        }
        if (vec && j >= visit_begin && j + 8 <= visit_end && o >= begin && o + 8 <= end) {
            *reinterpret_cast<uint4*>(out + (o - begin)) = dp_fuse8(sm, lo, hi);
        } else {
            for (int k = 0; k < 8; ++k) {
                const long long jk = j + k, ok = o + k;
                if (jk < n_elements && ok >= begin && ok < end) {
                    const uint32_t ex = ((k < 4 ? lo : hi) >> (8 * (k & 3))) & 0xffu;
                    const uint32_t s1 = sign_mantissa[jk];
                    out[ok - begin] = (uint16_t)(((s1 & 0x80u) << 8) | (ex << 7) | (s1 & 0x7fu));
                }
            }
        }
    };
    for (long long B = (c_begin >> 3) + blockIdx.x; B < (c_end + 7) >> 3; B += gridDim.x) {
        // CTA-uniform: is the block one whole (G, k) piece of a tiled member, all of it visited?
        const long long j0 = 16384LL * B;
        int mc = 0;
        while (mc < n_members - 1 && j0 >= s_ends[mc]) ++mc;
        const long long start = mc == 0 ? 0 : s_ends[mc - 1];
        const int cols = s_cols[mc];
        long long row0 = -1;   // the block's first row-major element (row 8G, column 2048k)
        if (cols > 0 && ((j0 - start) & 16383) == 0 && j0 + 16384 <= s_ends[mc] && j0 >= visit_begin &&
            j0 + 16384 <= visit_end) {
            const uint32_t p = (uint32_t)(j0 - start), group = p / (8u * (uint32_t)cols);
            const uint32_t k = (p - group * 8u * (uint32_t)cols) >> 14;
            if ((uint32_t)cols - 2048u * k >= 2048u) row0 = start + 8LL * group * cols + 2048LL * k;
        }
        const long long c = 8 * B + warp;
        if (row0 >= 0) {
            // Chunk c is sub-step m = warp: lane (g, t), pass i holds row g, columns 8(4m + t) + 256i ..+ 8.
            dp_chunk(u, sign_mantissa, n_elements, c, s_ends, s_tables, n_members, true, visit_begin, visit_end,
                     [&](int i, long long, int, uint32_t lo, uint32_t hi, uint2 sm) {
                         s_rows[(lane >> 2) * DP_ROW_UNITS + 4 * warp + (lane & 3) + 32 * i] = dp_fuse8(sm, lo, hi);
                     });
            __syncthreads();
            for (int idx = threadIdx.x; idx < 8 * 256; idx += DP_THREADS) {
                const int rr = idx >> 8, q = idx & 255;
                const long long o = row0 + (long long)rr * cols + 8 * q;
                const uint4 w = s_rows[rr * DP_ROW_UNITS + q];
                if (vec && o >= begin && o + 8 <= end) {
                    *reinterpret_cast<uint4*>(out + (o - begin)) = w;
                } else {
                    const uint16_t* h = reinterpret_cast<const uint16_t*>(&w);
                    for (int k = 0; k < 8; ++k)
                        if (o + k >= begin && o + k < end) out[o + k - begin] = h[k];
                }
            }
            __syncthreads();
        } else if (c >= c_begin && c < c_end) {
            dp_chunk(u, sign_mantissa, n_elements, c, s_ends, s_tables, n_members, vec, visit_begin, visit_end,
                     direct);
        }
    }
}

// WHOLE PIECES: the same decode for a visited range made only of whole (G, k) pieces of tiled members whose columns are
// whole 2048-column chunks (a stacked q/k/v or gate/up, a whole member: what prompts and large batches decode), with
// a software pipeline across a CTA's blocks: the next block's codes, sign_mantissa and escape starts are loaded into
// registers before this block is decoded and stored, so their latency overlaps the work (a Qwen3-8B layer in 205 us
// instead of the general kernel's 224; kernels/harness/decode_probe.cu, H200, docs/PERFORMANCE.md, 2026-11-29). The
// general kernel's extra cases, in the same loop, spilled its registers and ran slower (250 us).
//
// HOST GUARANTEES (besides the file's): n_members <= DP_MEMBERS; [begin, end) is whole members, each tiled with
// member_cols[m] % 2048 == 0 and its start % 16384 == 0, so block B of 8 chunks (elements 16384 B ..) is one whole
// piece of one member for every B in [begin / 16384, end / 16384), and its storage range is its element range.

// A lane's inputs of chunk c: its eight 8-groups' codes, their sign_mantissa and its escape start.
struct DpIn {
    uint32_t v[8];
    uint2 sm[8];
    uint32_t a;
};

__device__ __forceinline__ void dp_load(DpIn& in, const FgPacked& u, const uint8_t* sign_mantissa, uint32_t c,
                                        bool live) {
    const uint32_t lane = threadIdx.x & 31, q0 = 256u * c + lane;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        in.v[i] = live ? fp_codes8(u.codes, q0 + 32u * i) : 0u;
        in.sm[i] = live ? __ldg(reinterpret_cast<const uint2*>(sign_mantissa + 8LL * (q0 + 32u * i)))
                        : make_uint2(0u, 0u);
    }
    in.a = live ? fp_lane_start(u.chunk_escapes, u.lane_starts, u.n_chunks, c, lane) : 0u;
}

// CTAs an SM it is compiled for (mirrored by the host: DECODE_PIECES_CTAS in
// crates/df11-candle/src/cuda/forms/packed/kernels.rs): two blocks' inputs need ~80 registers.
#define DP_PIECES_CTAS 3

extern "C" __global__ void __launch_bounds__(DP_THREADS, DP_PIECES_CTAS)
df11_decode_packed_pieces(const uint32_t* codes, const uint32_t* chunk_escapes, const uint8_t* lane_starts,
                          uint32_t n_chunks, const uint8_t* escapes, uint32_t n_escapes, const uint32_t* tables,
                          const long long* member_ends, const int* member_cols, int n_members,
                          const uint8_t* sign_mantissa, uint16_t* out, long long begin, long long end) {
    __shared__ long long s_ends[DP_MEMBERS];
    __shared__ uint32_t s_tables[2 * DP_MEMBERS];
    __shared__ int s_cols[DP_MEMBERS];
    __shared__ uint4 s_rows[8 * DP_ROW_UNITS];
    dp_cache_tiled_members(tables, member_ends, member_cols, n_members, s_ends, s_tables, s_cols);
    __syncthreads();
    const FgPacked u = {codes, chunk_escapes, lane_starts, n_chunks, escapes, n_escapes, 0u, 0u};
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // 32-bit positions (a unit has fewer than 2^32 elements): with 64-bit ones the registers spilled, and a spill
    // store of a register the block-ahead loads write waits for them (323 us a layer).
    const uint32_t b_begin = (uint32_t)(begin >> 14), b_end = (uint32_t)(end >> 14);
    uint32_t B = b_begin + blockIdx.x;
    DpIn cur;
    dp_load(cur, u, sign_mantissa, 8 * B + warp, B < b_end);
    for (; B < b_end; B += gridDim.x) {
        DpIn nxt;
        const uint32_t Bn = B + gridDim.x;
        dp_load(nxt, u, sign_mantissa, 8 * Bn + warp, Bn < b_end);
        // The block's member (CTA-uniform) and place: piece (G, k), rows 8G .. 8G + 7, columns 2048k .. + 2048.
        const uint32_t j0 = 16384u * B;
        int m = 0;
        while (m < n_members - 1 && (long long)j0 >= s_ends[m]) ++m;
        const uint32_t start = m == 0 ? 0u : (uint32_t)s_ends[m - 1];
        const uint32_t cols = (uint32_t)s_cols[m], p = j0 - start, group = p / (8u * cols);
        const uint32_t k = (p - group * 8u * cols) >> 14;
        uint16_t* dst = out + (start + 8u * group * cols + 2048u * k - (uint32_t)begin);
        // Chunk 8B + warp is sub-step warp of the piece: lane (g, t), pass i holds row g, columns 8(4 warp + t) + 256i.
        FpLane r;
        r.a = cur.a;
        r.b = 0;
        uint32_t na = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) na += __popc(fp_escape_mask(cur.v[i]));
        r.na = na;
        fp_fetch_run(r, u.escapes, u.n_escapes);
        const uint32_t t0 = s_tables[2 * m], t1 = s_tables[2 * m + 1];
        uint32_t t = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            uint32_t lo = __byte_perm(t0, t1, fp_spread(cur.v[i] & 0xfffu));
            uint32_t hi = __byte_perm(t0, t1, fp_spread(cur.v[i] >> 12));
            if (na <= 8u) fp_apply_held(cur.v[i], r.held, lo, hi);
            else fp_apply(r, t, cur.v[i], u.escapes, u.n_escapes, lo, hi);
            s_rows[(lane >> 2) * DP_ROW_UNITS + 4 * warp + (lane & 3) + 32 * i] = dp_fuse8(cur.sm[i], lo, hi);
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < 8 * 256; idx += DP_THREADS) {
            const int rr = idx >> 8, q = idx & 255;
            *reinterpret_cast<uint4*>(dst + rr * cols + 8 * q) = s_rows[rr * DP_ROW_UNITS + q];
        }
        __syncthreads();
        cur = nxt;
    }
}
