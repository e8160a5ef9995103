// SHARED-MEMORY DECODE GEMM (the kernels of kernels/harness/ss_probe.cu, a measurement harness): a warp-specialized
// wgmma GEMM whose weight tiles reach shared memory either by bulk copies of BF16 (the twin) or by decoder warps that
// decode DF11's packed form into them (DF11). The consumers are the same code in both, reading the same shared-memory
// bytes, so DF11 == twin bit for bit. Written for this project.
//
// y [R, N] = x [R, K] w [N, K]^T. A CTA computes a BM x RT tile of y^T: BM = 128 weight rows (two consumer
// warpgroups of 64, the wgmma M side, A from shared memory) by RT x rows (the wgmma N side, B from shared memory:
// RT 16, 32, 64, 128, or 256 as two n128 halves), over its split of K (blockIdx.z of gridDim.z splits; more than one:
// fp32 partial sums added by ss_reduce in split order) in stages of BK = 64 through a ring of SS_STAGES slots. PW
// producer warpgroups take the stages in turn (with two, setmaxnreg moves registers between the roles): thread 0 of the
// stage's warpgroup bulk-copies its x block (and, for the twin, its weight block); for DF11 the warpgroup's four warps
// each decode one k16 slab of the weight block (2048 weights: one chunk of the packed form) straight into the slot, a
// pass's eight exponents by two byte_perm lookups and its escapes by two more through a 256-entry table of escape
// masks (ss_escape_table), each pass's escapes found in the lane's window from the codes' counts.
//
// VARIANTS (-D..., for measurements): SS_STAGES (default 4; a power of two: 6 hung on an H200, not investigated),
// SS_CTAS (CTAs an SM, default 1; 2 with SS_PRODUCER_REGS=56 for the 16-64-row tiles), SS_PRODUCER_REGS (96),
// SS_TS_DECODE (the streaming kernels' decode through their 16 KB escape table instead), SS_HYBRID_DECODE (their
// decode above 8 rows: the exponents by byte permutes, the escapes through a table indexed by their bits),
// SS_START_AHEAD (where a lane's escapes start, and how many, loaded a chunk ahead; with either of those two), and
// the diagnostics SS_NO_DECODE, SS_NO_ESCAPES, SS_DECODE_TWICE, SS_NO_FENCE (wrong weights, a race, or the decode
// twice). The best build measured at 16-64 rows: -DSS_CTAS=2 -DSS_PRODUCER_REGS=56 -DSS_HYBRID_DECODE
// -DSS_START_AHEAD, run with --ctas 264. Variants measured and removed (figures in docs/PERFORMANCE.md): a warp's next
// inputs loaded before its decode, inputs through a cp.async ring, a warp scan in place of the lane starts, the
// escape window shifted pass by pass.
//
// STATUS (docs/PERFORMANCE.md, "A decoding producer for a wgmma GEMM"): DF11 == twin at every shape. At 16-64 rows
// (split K, two CTAs an SM, SS_HYBRID_DECODE) the twin runs at 0.74-0.93x cuBLAS and DF11 at 0.58-0.66x (1.6-1.9x
// faster than decode + cuBLAS, still below BF16); at 128-4096 rows DF11 is below decode + cuBLAS. Not in the library.
//
// LAYOUT (both operands, no swizzle, K-major core matrices: 8 rows x 16 bytes): element (row, k) of a ROWS x 64 block
// is at slab(k / 16) * ROWS * 16 + (row / 8) * 128 + ((k % 16) / 8) * 64 + (row % 8) * 8 + k % 8; descriptors with
// lbo 128 (K-adjacent core matrices), sbo 256 (M/N-adjacent), as kernels/harness/mma_identity.cu checks them. Global
// memory holds x and the twin's weights pre-arranged in these blocks ((tile, kb) blocks contiguous, one bulk copy a
// stage), and DF11's chunks in the same order: chunk q = 4 (tm KB + kb) + slab holds the slab's 2048 weights in
// layout order, so lane L's pass i (positions 256 i + 8 L .. + 7) is one 16-byte store.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>

#include "../df11_tc_wg.cuh"
#include "ss_decode.cuh"

constexpr int SS_BM = 128, SS_BK = 64;
#ifndef SS_STAGES
#define SS_STAGES 4
#endif
static_assert((SS_STAGES & (SS_STAGES - 1)) == 0, "SS_STAGES: a power of two (6 stages hung, not investigated)");

// A no-swizzle K-major descriptor with the given byte offsets between core matrices adjacent in K (lbo) and in M/N
// (sbo): wg_desc's with lbo 128, sbo 256.
__device__ __forceinline__ uint64_t ss_desc(const void* smem, uint32_t lbo, uint32_t sbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}


// The shared memory a launch of ss_gemm<RT> takes.
constexpr size_t ss_smem_bytes(int RT, int PW) {
    return (size_t)SS_STAGES * (SS_BM + RT) * SS_BK * 2 + 2 * SS_STAGES * 8
#if !defined(SS_TS_DECODE) && !defined(SS_HYBRID_DECODE)   // (theirs are static arrays: ts_tab, ts_bits)
           + 256 * 16
#endif
        ;
}

// Registers a producer warp keeps with two producer warpgroups (the consumers take the rest).
#ifndef SS_PRODUCER_REGS
#define SS_PRODUCER_REGS 96
#endif
// CTAs an SM (SS_CTAS=2: small x tiles, fewer stages, registers split two ways).
#ifndef SS_CTAS
#define SS_CTAS 1
#endif
// The registers a thread of the launch starts with.
__host__ __device__ constexpr int ss_base_regs(int pw) { return 65536 / (128 * (pw + 2) * SS_CTAS) / 8 * 8; }

// y = x w^T for one (weight tile tm = blockIdx.y, x tile tn = blockIdx.x); see the head of this file. PW producer
// warpgroups (warpgroup p fills the stages kb % PW == p), then two consumer warpgroups.
template <int RT, bool DF11, int PW>
__global__ void __launch_bounds__(128 * (PW + 2), SS_CTAS) ss_gemm(const SsArgs a) {
    extern __shared__ __align__(1024) uint8_t smem[];
    constexpr uint32_t W_BYTES = SS_BM * SS_BK * 2, X_BYTES = RT * SS_BK * 2, STAGE = W_BYTES + X_BYTES;
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + SS_STAGES * STAGE);
    uint64_t* empty = full + SS_STAGES;
    uint4* esc_table = reinterpret_cast<uint4*>(empty + SS_STAGES);
    (void)esc_table;   // (unused by the decodes with static tables)
    const int tn = blockIdx.x, tm = blockIdx.y, KB = a.K / SS_BK;
    // Split K: this CTA's K blocks [kb0, kb0 + nk) (the host keeps gridDim.z <= KB, so nk >= 1).
    const int kb0 = (int)((long long)KB * blockIdx.z / gridDim.z);
    const int nk = (int)((long long)KB * (blockIdx.z + 1) / gridDim.z) - kb0;
#ifdef SS_TS_DECODE
    if (DF11)
        for (int i = threadIdx.x; i < 4096 + 16; i += blockDim.x) ts_tab[i] = ts_table.e[i];
    const uint32_t t0r = fg_rot(a.t0), t1r = fg_rot(a.t1);
#elif defined(SS_HYBRID_DECODE)
    if (DF11)
        for (int i = threadIdx.x; i < 1024; i += blockDim.x) ts_bits[i] = ts_bits_table.e[i];
    const uint32_t t0r = fg_rot(a.t0), t1r = fg_rot(a.t1);
#else
    if (DF11) ss_escape_table(esc_table, threadIdx.x, blockDim.x);
#endif
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int s = 0; s < SS_STAGES; ++s) {
            wg_bar_init(&full[s], DF11 ? 5 : 1);
            wg_bar_init(&empty[s], 8);
        }
        wg_bar_init_fence();
    }
    __syncthreads();
    if (wg < PW) {
#ifdef WG_HAVE_WGMMA
        // Above the launch's 128 registers a thread (SS_PRODUCER_REGS > 128: small x tiles, whose consumers need
        // few), the producers grow once the consumers have shrunk.
        if (PW > 1 && SS_PRODUCER_REGS <= ss_base_regs(PW)) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(SS_PRODUCER_REGS));
        if (PW > 1 && SS_PRODUCER_REGS > ss_base_regs(PW)) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(SS_PRODUCER_REGS));
#endif
        // DF11: the warp's chunk of stage kb is q.
        const uint32_t q_step = 4u * PW;
        uint32_t q = 4u * ((uint32_t)tm * KB + kb0 + wg) + warp;
#ifdef SS_START_AHEAD
        // The next chunk's escape range and the lane's start in it, loaded a chunk ahead.
        uint32_t ce0_n = 0, ce1_n = 0, ls_n = 0;
        if (DF11 && wg < nk) {
            ce0_n = __ldg(a.chunk_escapes + q);
            ce1_n = __ldg(a.chunk_escapes + q + 1);
            ls_n = __ldg(a.lane_starts + 32 * q + lane);
        }
#endif
        for (int j = wg; j < nk; j += PW, q += q_step) {
            const int kb = kb0 + j, s = j % SS_STAGES;
            SsIn in;
#ifdef SS_START_AHEAD
            if (DF11) {
                const uint32_t start = ce0_n + ls_n, next = __shfl_down_sync(0xffffffffu, start, 1);
                ss_load(in, a, q, lane, start);
                in.cnt = (lane == 31 ? ce1_n : next) - start;
                if (j + PW < nk) {
                    ce0_n = __ldg(a.chunk_escapes + q + q_step);
                    ce1_n = __ldg(a.chunk_escapes + q + q_step + 1);
                    ls_n = __ldg(a.lane_starts + 32 * (q + q_step) + lane);
                }
            }
#else
            if (DF11) ss_load(in, a, q, lane, ss_escape_start(a, q, lane));
#endif
            if (j >= SS_STAGES) wg_bar_wait(&empty[s], ((j / SS_STAGES) - 1) & 1);
            uint8_t* sw = smem + s * STAGE;
            if ((threadIdx.x & 127) == 0) {
                wg_bar_expect(&full[s], X_BYTES + (DF11 ? 0 : W_BYTES));
                wg_bulk_copy(sw + W_BYTES, a.xb + ((size_t)tn * KB + kb) * RT * SS_BK, X_BYTES, &full[s]);
                if (!DF11) wg_bulk_copy(sw, a.wb + ((size_t)tm * KB + kb) * SS_BM * SS_BK, W_BYTES, &full[s]);
            }
            if (DF11) {
#ifdef SS_DECODE_TWICE   // diagnostic: the decode's cost doubled (the same bytes stored twice)
                {
                    uint32_t z;
                    asm volatile("mov.u32 %0, 0;\n" : "=r"(z));
                    SsIn twice = in;
                    for (int i = 0; i < 8; ++i) twice.c24[i] ^= z;
                    ss_decode(twice, a, esc_table, reinterpret_cast<uint16_t*>(sw) + 2048 * warp, lane);
                }
#endif
#if defined(SS_TS_DECODE) || defined(SS_HYBRID_DECODE)
                ss_decode_table(in, a, t0r, t1r, reinterpret_cast<uint16_t*>(sw) + 2048 * warp, lane);
#else
                ss_decode(in, a, esc_table, reinterpret_cast<uint16_t*>(sw) + 2048 * warp, lane);
#endif
#ifndef SS_NO_FENCE   // diagnostic (a race): the fence's cost
                wg_proxy_fence();
#endif
                __syncwarp();
                if (lane == 0) wg_bar_arrive(&full[s]);
            }
        }
        return;
    }
#ifdef WG_HAVE_WGMMA
    constexpr int kConsumerRegs = (65536 / (128 * SS_CTAS) - PW * SS_PRODUCER_REGS) / 2 / 8 * 8;
    if (PW > 1 && SS_PRODUCER_REGS <= ss_base_regs(PW)) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    if (PW > 1 && SS_PRODUCER_REGS > ss_base_regs(PW)) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
#endif
    const int g = wg - PW;
    constexpr int NT = RT < 128 ? RT : 128, NH = RT / NT;   // wgmma N, and N blocks a k16 step
    float acc[NH][NT / 2];
#pragma unroll
    for (int nh = 0; nh < NH; ++nh)
#pragma unroll
        for (int i = 0; i < NT / 2; ++i) acc[nh][i] = 0.0f;
    for (int j = 0; j < nk; ++j) {
        const int s = j % SS_STAGES;
        wg_bar_wait(&full[s], (j / SS_STAGES) & 1);
        const uint16_t* sw = reinterpret_cast<const uint16_t*>(smem + s * STAGE);
        const uint16_t* sx = reinterpret_cast<const uint16_t*>(smem + s * STAGE + W_BYTES);
        wg_fence();
#pragma unroll
        for (int k16 = 0; k16 < 4; ++k16) {
            const uint64_t ad = wg_desc(sw + k16 * 2048 + g * 1024);
#pragma unroll
            for (int nh = 0; nh < NH; ++nh)
                wg_mma_ss<NT>(acc[nh], ad, wg_desc(sx + k16 * RT * 16 + nh * NT * 16), (j | k16) != 0);
        }
        wg_commit();
        if (j > 0) {
            wg_wait<1>();
            if (lane == 0) wg_bar_arrive(&empty[(j - 1) % SS_STAGES]);
        }
    }
    wg_wait<0>();
    // d[4 c8 + e] of an N block: weight row wrow0 (+ 8 for e >= 2), x row 8 c8 + 2 (lane % 4) + e % 2 of the block.
    const int wrow0 = tm * SS_BM + 64 * g + 16 * warp + (lane >> 2);
    const bool whole_tile = (tn + 1) * RT <= a.R;
#pragma unroll
    for (int nh = 0; nh < NH; ++nh)
#pragma unroll
        for (int c8 = 0; c8 < NT / 8; ++c8)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const int xrow = tn * RT + nh * NT + 8 * c8 + 2 * (lane & 3) + c;
                if (whole_tile || xrow < a.R) {
                    if (gridDim.z == 1) {
                        uint16_t* yr = a.y + (size_t)xrow * a.N + wrow0;
                        yr[0] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[nh][4 * c8 + c]));
                        yr[8] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[nh][4 * c8 + 2 + c]));
                    } else {
                        float* wr = a.ws + ((size_t)blockIdx.z * a.R + xrow) * a.N + wrow0;
                        __stcg(wr, acc[nh][4 * c8 + c]);
                        __stcg(wr + 8, acc[nh][4 * c8 + 2 + c]);
                    }
                }
            }
}

// Split K: y = the splits' partial sums added in split order (so DF11 and twin, which store the same partial sums,
// give the same bits), rounded to BF16 once. Four outputs a thread.
__global__ void ss_reduce(const float* ws, uint16_t* y, size_t n, int splits) {
    for (size_t i = 4 * (blockIdx.x * (size_t)blockDim.x + threadIdx.x); i < n; i += 4 * (size_t)gridDim.x * blockDim.x) {
        float4 v = __ldcg(reinterpret_cast<const float4*>(ws + i));
        for (int s = 1; s < splits; ++s) {
            const float4 u = __ldcg(reinterpret_cast<const float4*>(ws + (size_t)s * n + i));
            v.x += u.x;
            v.y += u.y;
            v.z += u.z;
            v.w += u.w;
        }
        const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
        *reinterpret_cast<uint2*>(y + i) =
            make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
    }
}

// x [R, K] row-major -> xb: (x tile, kb) blocks of RT x 64 in the layout above, rows past R zero. A thread a 16-byte
// unit.
template <int RT>
__global__ void ss_x_blocks(const uint16_t* x, uint16_t* xb, int R, int K) {
    const int KB = K / SS_BK;
    const size_t units = (size_t)((R + RT - 1) / RT) * KB * RT * 8;
    for (size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x; u < units; u += (size_t)gridDim.x * blockDim.x) {
        const size_t blk = u / (RT * 8);
        const int tile = (int)(blk / KB), kb = (int)(blk % KB), e = 8 * (int)(u % (RT * 8));
        const int slab = e / (RT * 16), r = e % (RT * 16);
        const int row = tile * RT + (r >> 7) * 8 + ((r & 63) >> 3), k = kb * SS_BK + slab * 16 + ((r & 127) >> 6) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (row < R) v = *reinterpret_cast<const uint4*>(x + (size_t)row * K + k);
        reinterpret_cast<uint4*>(xb)[u] = v;
    }
}
