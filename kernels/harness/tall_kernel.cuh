// TALL-CHUNK PRODUCTS, the device side of kernels/harness/tall_probe.cu (the order, the summation and the variants
// are described there): the stage copies, the stream-K partition over row blocks, the products (tall_df11_*,
// tall_twin_*) and the kernel that adds a tile's pieces (tall_reduce). Written for this project.
#pragma once
#include <stdint.h>
#include <cuda_bf16.h>
#include "../df11_tc_stream.cuh"

#ifndef TP_WARPS
#define TP_WARPS 8   // warps a CTA: a row block is TP_WARPS tiles
#endif
#define TP_THREADS (32 * TP_WARPS)
#ifndef TP_DEPTH
#define TP_DEPTH 2   // stages a warp: TP_DEPTH - 1 chunks in flight (3: no faster, docs/PERFORMANCE.md)
#endif

struct TallArgs {
    FgPacked pk;
    const uint8_t* sign_mantissa;
    const uint16_t* w;          // twin: row-major BF16
    const __nv_bfloat16* x;     // [nb, cols]
    __nv_bfloat16* y;           // [nb, rows]
    float* partial;             // [gridDim.x][2][8 warps][64 * 16 MT]: a CTA's first and last pieces when partial
    int nb, rows, cols;
};

// Starts the lane's copies of twin chunk (G, c) into its stage (st_lane = the stage + 16 lane): pass i's 16 bytes are
// row 64G + 8i + g, columns 32c + 8t .. + 8.
__device__ __forceinline__ void tp_stage_twin(uint8_t* st_lane, const uint16_t* w, int cols, int G, int c) {
    const uint32_t lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#ifdef TP_TWIN_CONTIG   // diagnostic (wrong sums): the chunk's 4 KB read as one contiguous run
    const uint16_t* run = w + ((size_t)G * (cols / 32) + c) * 2048 + 8 * lane;
#pragma unroll
    for (int i = 0; i < 8; ++i) ts_copy16(st_lane + 512 * i, run + 256 * i, 16);
    return;
#endif
    const uint16_t* src = w + (size_t)(64 * G + (int)g) * cols + 32 * c + 8 * (int)t;
#pragma unroll
    for (int i = 0; i < 8; ++i) ts_copy16(st_lane + 512 * i, src + (size_t)8 * i * cols, 16);
}

// STREAM-K OVER ROW BLOCKS: a row block is eight tiles (512 rows), one a warp of the CTA, so a CTA's warps never add
// each other's sums. The Q = blocks * cpr block-chunks in (block, column) order are cut into gridDim.x equal runs, one
// a CTA; a CTA's run is PIECES, its columns of each block it touches. Warp w's chunks over all pieces (tile 8 block + w,
// the piece's columns) are one sequence for its copy ring.
struct TpRun {
    int lo, hi;   // the CTA's block-chunks
};
__device__ __forceinline__ int tp_cta_start(int Q, int C, int i) { return (int)((long long)Q * i / C); }
// The CTA whose run holds block-chunk q.
__device__ __forceinline__ int tp_cta_of(int Q, int C, int q) { return (int)(((long long)(q + 1) * C - 1) / Q); }

// Piece k of the CTA's run: block B, its columns [c0, c1). False past the run.
__device__ __forceinline__ bool tp_piece(const TpRun& run, int cpr, int k, int& B, int& c0, int& c1) {
    B = run.lo / cpr + k;
    c0 = max(run.lo, B * cpr) - B * cpr;
    c1 = min(run.hi, (B + 1) * cpr) - B * cpr;
    return c0 < c1;
}

template <int MT, bool TWIN>
__device__ __forceinline__ void tall(const TallArgs& a) {
    launch_dependents();
#ifdef TP_EMPTY   // diagnostic: the launch alone
    return;
#endif
    extern __shared__ __align__(16) uint8_t tp_smem[];
    // A stage: the chunk's weights (the streaming kernels' DF11 or twin stage), then x's 16 MT rows at the chunk's 32
    // columns (64 bytes a row; rows past nb zero-filled: those outputs are never stored).
    constexpr int w_bytes = TWIN ? TS_TWIN_STAGE : TS_STAGE, stage_bytes = w_bytes + 1024 * MT;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int cpr = a.cols / 32, tiles = a.rows / 64, blocks = (tiles + TP_WARPS - 1) / TP_WARPS;
    const int Q = blocks * cpr;   // < 2^31: the host checks
    const int C = gridDim.x;
    const TpRun run = {tp_cta_start(Q, C, blockIdx.x), tp_cta_start(Q, C, blockIdx.x + 1)};
    uint8_t* ring = tp_smem + warp * (TP_DEPTH * stage_bytes);
    uint8_t* ring_lane = ring + 16 * lane;
    // The lane's x pieces in a stage: piece j = lane + 32 u (u < 2 MT) is x row j / 4, 16 bytes at column 8 (j % 4).

    // The copy cursor: the next chunk to stage: piece ik (block iB), column ic of [ic, ie).
    int ik = 0, iB = 0, ic = 0, ie = 0;
    bool ilive = tp_piece(run, cpr, 0, iB, ic, ie);
    int bq = -(1 << 30);   // DF11: the first column of the loaded batch of escape ranges (below)
    auto iskip = [&]() {   // past the piece's end to the next piece (or the end); a new piece needs a new batch
        while (ilive && ic >= ie) {
            ilive = tp_piece(run, cpr, ++ik, iB, ic, ie);
            bq = -(1 << 30);
        }
    };
    // DF11: escape ranges 32 chunks at a time from column `bq` of the piece (lane L: column bq + L's [lo, hi)).
    uint32_t blo = 0, bhi = 0;
#ifdef TP_NO_COPY   // diagnostic (wrong sums): the first TP_DEPTH - 1 stages copied, then decoded again and again
    int copies = 0;
#endif
    auto issue = [&](int slot) {
        const int G = TP_WARPS * iB + warp;
        const bool live = ilive && G < tiles;
#ifdef TP_NO_COPY
        if (live && ++copies >= TP_DEPTH) {
            ++ic;
            iskip();
            ts_commit();
            return;
        }
#endif
        if (live) {
            uint8_t* st = ring_lane + slot * stage_bytes;
            const uint32_t q = (uint32_t)G * (uint32_t)cpr + (uint32_t)ic;
            if (TWIN) {
                tp_stage_twin(st, a.w, a.cols, G, ic);
            } else {
                if (ic - bq >= 32) {   // a new batch (a new piece, or 32 chunks on)
                    bq = ic;
                    blo = bhi = 0;
                    if (bq + lane < ie) {
                        blo = __ldg(a.pk.chunk_escapes + q + lane);
                        bhi = __ldg(a.pk.chunk_escapes + q + lane + 1);
                    }
                }
                const int j = ic - bq;
                ts_stage_df11(st, a.pk, a.sign_mantissa, q, __shfl_sync(0xffffffffu, blo, j),
                              __shfl_sync(0xffffffffu, bhi, j));
            }
#pragma unroll
            for (int u = 0; u < 2 * MT; ++u) {
                const int piece = lane + 32 * u, row = piece >> 2;
                const bool in = row < a.nb;
                ts_copy16(st + w_bytes + 16 * (piece - lane),
                          a.x + (size_t)(in ? row : 0) * a.cols + 32 * ic + 8 * (piece & 3), in ? 16u : 0u);
            }
        }
        if (ilive) {
            ++ic;
            iskip();
        }
        ts_commit();
    };

    if (!TWIN) ts_stage_table(TP_THREADS);
    ts_commit();
    grid_dependency_wait();                            // x (staged with the weights), y, partial sums and counters
#pragma unroll 1
    for (int d = 0; d < TP_DEPTH - 1; ++d) issue(d);
    ts_wait_group_le<TP_DEPTH - 1>();                  // the table's group
    __syncthreads();                                   // the table, copied by every thread, is here

    uint32_t t0 = 0, t1 = 0;
    if (!TWIN) {
        t0 = fg_rot(a.pk.t0);
        t1 = fg_rot(a.pk.t1);
    }
    int slot = 0;
    int B, c0, c1;
#pragma unroll 1
    for (int k = 0; tp_piece(run, cpr, k, B, c0, c1); ++k) {
        const int G = TP_WARPS * B + warp;
        if (G >= tiles) {   // warp-uniform: no tile of the matrix (its issue() staged nothing, only committed)
            for (int c = c0; c < c1; ++c) {
                issue(slot == 0 ? TP_DEPTH - 1 : slot - 1);
                slot = slot + 1 == TP_DEPTH ? 0 : slot + 1;
            }
            continue;
        }
        float acc[8][MT][4];
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) acc[i][mt][0] = acc[i][mt][1] = acc[i][mt][2] = acc[i][mt][3] = 0.0f;
#pragma unroll 1
        for (int c = c0; c < c1; ++c) {
            __syncwarp();
            issue(slot == 0 ? TP_DEPTH - 1 : slot - 1);
            ts_wait_group_le<TP_DEPTH - 1>();
            __syncwarp();
            const uint8_t* st = ring + slot * stage_bytes;
            slot = slot + 1 == TP_DEPTH ? 0 : slot + 1;
            // x rows 16 mt + g (+ 8) at the lane's columns 8 t .. + 8 of the chunk.
            uint4 xa[MT], xb[MT];
            const uint4* xs = reinterpret_cast<const uint4*>(st + w_bytes);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                xa[mt] = xs[4 * (16 * mt + g) + t];
                xb[mt] = xs[4 * (16 * mt + g + 8) + t];
            }
            auto mul = [&](int i, const uint32_t(&w)[4]) {
#ifdef TP_NO_MMA   // diagnostic (wrong sums): the weights and x folded in without the mma
                acc[i][0][0] += __uint_as_float((w[0] ^ w[1] ^ w[2] ^ w[3] ^ xa[0].x ^ xb[0].y) & 0x3f800000u);
                return;
#endif
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    tc_mma(acc[i][mt], xa[mt].x, xb[mt].x, xa[mt].z, xb[mt].z, w[0], w[2]);
                    tc_mma(acc[i][mt], xa[mt].y, xb[mt].y, xa[mt].w, xb[mt].w, w[1], w[3]);
                }
            };
            if (TWIN) {
                const uint4* qv = reinterpret_cast<const uint4*>(st);
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const uint4 v = qv[lane + 32 * i];
                    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
                    mul(i, w);
                }
            } else {
                ts_df11_substep(st, t0, t1, a.pk, mul);
            }
        }
        // The lane's outputs: (x row 16 mt + g + 8 h, weight row 64 G + 8 i + 2 t, + 1) = acc[i][mt][2 h], [2 h + 1].
        auto store = [&](int i, int mt, int h, float v0, float v1) {
            const int b = 16 * mt + g + 8 * h;
            if (b < a.nb) {
                __nv_bfloat162 v = __floats2bfloat162_rn(v0, v1);
                *reinterpret_cast<__nv_bfloat162*>(a.y + (size_t)b * a.rows + 64 * G + 8 * i + 2 * t) = v;
            }
        };
        if (c0 == 0 && c1 == cpr) {   // the whole tile
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int h = 0; h < 2; ++h) store(i, mt, h, acc[i][mt][2 * h], acc[i][mt][2 * h + 1]);
            continue;
        }
        // Part of tile G: the warp's slot (the CTA's first piece: 0, else 1), lane-major; tall_reduce adds a tile's
        // pieces in CTA order.
        float* mine = a.partial + (((size_t)blockIdx.x * 2 + (k == 0 ? 0 : 1)) * TP_WARPS + warp) * (32 * 32 * MT);
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int e = 0; e < 4; ++e) __stcg(mine + (size_t)32 * ((i * MT + mt) * 4 + e) + lane, acc[i][mt][e]);
    }
    ts_wait_group_le<0>();
}

#define TP_KERNEL(MT, CTAS)                                                                                     \
    __global__ void __launch_bounds__(TP_THREADS, CTAS) tall_df11_##MT(TallArgs a) { tall<MT, false>(a); }      \
    __global__ void __launch_bounds__(TP_THREADS, CTAS) tall_twin_##MT(TallArgs a) { tall<MT, true>(a); }
TP_KERNEL(1, 16 / TP_WARPS)
TP_KERNEL(2, 16 / TP_WARPS)
TP_KERNEL(4, 1)

// The pieces of the tiles no one CTA held whole, added in CTA order: thread j of tile G is lane-major index j of the
// warp's pieces (register r = j / 32 of lane j % 32). Launched after the product (PDL: it waits for it first).
__global__ void __launch_bounds__(256) tall_reduce(const float* partial, __nv_bfloat16* y, int nb, int rows, int cols,
                                                   int C, int mt_count) {
    launch_dependents();
    grid_dependency_wait();
    const int per_tile = 32 * 32 * mt_count, G = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= per_tile) return;
    const int cpr = cols / 32, tiles = rows / 64, blocks = (tiles + TP_WARPS - 1) / TP_WARPS, Q = blocks * cpr;
    const int B = G / TP_WARPS, w = G % TP_WARPS;
    const int i0 = tp_cta_of(Q, C, B * cpr), i1 = tp_cta_of(Q, C, (B + 1) * cpr - 1);
    if (i0 == i1) return;   // one CTA held the tile whole and wrote it
    float sum = 0.0f;
    for (int ci = i0; ci <= i1; ++ci) {
        const int slot = B == tp_cta_start(Q, C, ci) / cpr ? 0 : 1;
        sum += __ldcg(partial + (((size_t)ci * 2 + slot) * TP_WARPS + w) * per_tile + j);
    }
    const int lane = j & 31, r = j >> 5, e = r & 3, imt = r >> 2, i = imt / mt_count, mt = imt % mt_count;
    const int b = 16 * mt + (lane >> 2) + 8 * (e >> 1);
    if (b < nb) y[(size_t)b * rows + 64 * G + 8 * i + 2 * (lane & 3) + (e & 1)] = __float2bfloat16_rn(sum);
}

