// SHARED-MEMORY DECODE GEMM for prompts (the kernels of kernels/harness/ss_probe.cu, a measurement harness): a
// warp-specialized wgmma GEMM whose weight tiles reach shared memory either by bulk copies of BF16 (the twin) or by
// decoder warps that decode DF11's packed form into them (DF11). The consumers are the same code in both, reading the
// same shared-memory bytes, so DF11 == twin bit for bit. Written for this project.
//
// y [R, N] = x [R, K] w [N, K]^T. A CTA computes a BM x RT tile of y^T: BM = 128 weight rows (two consumer
// warpgroups of 64, the wgmma M side, A from shared memory) by RT x rows (the wgmma N side, B from shared memory), K
// in stages of BK = 64 through a ring of SS_STAGES slots. PW producer warpgroups take the stages in turn (with two,
// setmaxnreg moves registers to the consumers): thread 0 of the stage's warpgroup bulk-copies its x block (and, for
// the twin, its weight block); for DF11 the warpgroup's four warps each decode one k16 slab of the weight block (2048
// weights: one chunk of the packed form) straight into the slot, a pass's eight exponents by two byte_perm lookups
// and its escapes by two more through a 256-entry table of escape masks (ss_escape_table).
//
// VARIANTS (-D..., for measurements): SS_STAGES (default 4), SS_PRODUCER_REGS (96), SS_PREFETCH (a warp's next inputs
// loaded before its decode), SS_STAGED (inputs through a shared-memory ring filled by cp.async, SS_RAW slots a warp;
// needs SS_STAGES=3 for its shared memory), and the diagnostics SS_NO_DECODE, SS_NO_ESCAPES, SS_DECODE_TWICE (wrong
// weights, or the decode done twice).
//
// STATUS (docs/PERFORMANCE.md, "A decoding producer for a wgmma GEMM"): DF11 == twin at every shape; DF11 at
// 0.4-0.6x its twin and the twin at 0.6-0.87x cuBLAS, so slower than decode + cuBLAS: not in the library.
//
// LAYOUT (both operands, no swizzle, K-major core matrices: 8 rows x 16 bytes): element (row, k) of a ROWS x 64 block
// is at slab(k / 16) * ROWS * 16 + (row / 8) * 128 + ((k % 16) / 8) * 64 + (row % 8) * 8 + k % 8; descriptors with
// lbo 128 (K-adjacent core matrices), sbo 256 (M/N-adjacent), as kernels/harness/mma_identity.cu checks them. Global
// memory holds x and the twin's weights pre-arranged in these blocks ((tile, kb) blocks contiguous, one bulk copy a
// stage), and DF11's chunks in the same order: chunk q = 4 (tm KB + kb) + slab holds the slab's 2048 weights in
// layout order, so lane L's pass i (positions 256 i + 8 L .. + 7) is one 16-byte store.
#pragma once
#include <cstdint>

#include "../df11_tc_wg.cuh"

constexpr int SS_BM = 128, SS_BK = 64;
#ifndef SS_STAGES
#define SS_STAGES 4
#endif

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
    int R, N, K;
};

// One plain arrival on an mbarrier (the mbarrier, bulk-copy and wgmma primitives are df11_tc_wg.cuh's).
__device__ __forceinline__ void ss_bar_arrive(uint64_t* bar) {
#ifdef WG_HAVE_WGMMA
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(wg_smem_addr(bar)) : "memory");
#endif
}
// Generic-proxy stores to shared memory made visible to the async proxy (wgmma reads).
__device__ __forceinline__ void ss_proxy_fence() {
#ifdef WG_HAVE_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// wgmma m64n128k16, A and B by descriptor; d 64 floats; scale_d 0 zeroes the accumulators first.
__device__ __forceinline__ void ss_mma_n128(float (&d)[64], uint64_t ad, uint64_t bd, int scale_d) {
#ifdef WG_HAVE_WGMMA
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(ad), "l"(bd), "r"(scale_d));
#endif
}

// A lane's inputs for one chunk of the packed form (2048 weights, layout order; lane L's pass i is positions
// 256 i + 8 L .. + 7): its 3-bit codes of each pass (at bit 3 (2048 q + 256 i + 8 L)), its sign_mantissa bytes, and
// the first eight of its escapes (in order from the chunk's and lane's start; more are read from global memory).
struct SsIn {
    uint32_t c24[8];
    uint2 s[8];
    uint32_t e_lo, e_hi, esc;
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

// SS_STAGED: a producer warp's inputs come through a ring of SS_RAW shared-memory slots filled by cp.async a few of its
// stages ahead (no register or load latency held across the decode): a slot holds a chunk's codes (768 bytes), its
// sign_mantissa (2048), lane starts (32) and a 128-byte window of its escapes from the 16-byte unit holding the
// chunk's first escape (units past the buffer zero-filled).
#ifndef SS_RAW
#define SS_RAW 3
#endif
constexpr int SS_RAW_BYTES = 768 + 2048 + 32 + 128;

__device__ __forceinline__ void ss_cp16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(wg_smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void ss_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void ss_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Queues chunk q's inputs into slot (esc0: the chunk's first escape).
__device__ __forceinline__ void ss_stage_chunk(uint8_t* slot, const SsArgs& a, uint32_t q, uint32_t esc0,
                                               uint32_t lane) {
    const uint32_t eb = esc0 & ~15u;
    for (uint32_t u = lane; u < SS_RAW_BYTES / 16; u += 32) {
        const uint8_t* src;
        bool valid = true;
        if (u < 48) src = reinterpret_cast<const uint8_t*>(a.codes) + 768ull * q + 16 * u;
        else if (u < 176) src = a.sm + 2048ull * q + 16 * (u - 48);
        else if (u < 178) src = a.lane_starts + 32ull * q + 16 * (u - 176);
        else {
            const uint32_t off = eb + 16 * (u - 178);
            valid = off + 16 <= a.n_escapes;
            src = a.escapes + (valid ? off : 0);
        }
        ss_cp16(slot + 16 * u, src, valid);
    }
}

// A lane's inputs for a chunk from its slot (ss_load's, from shared memory); esc0 as staged.
__device__ __forceinline__ void ss_load_staged(SsIn& in, const uint8_t* slot, const SsArgs& a, uint32_t esc0,
                                               uint32_t lane) {
    const uint32_t* codes = reinterpret_cast<const uint32_t*>(slot);
    const uint32_t sh = (24u * lane) & 31u, w0 = (24u * lane) >> 5;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        in.c24[i] = __funnelshift_r(codes[w0 + 24 * i], codes[w0 + 24 * i + 1], sh);
        in.s[i] = *reinterpret_cast<const uint2*>(slot + 768 + 256 * i + 8 * lane);
    }
    const uint32_t esc = esc0 + slot[768 + 2048 + lane], off = esc - (esc0 & ~15u);
    in.esc = esc;
    if (off <= 116) {   // three words of the window hold the lane's first eight escapes
        const uint32_t* ew = reinterpret_cast<const uint32_t*>(slot + 768 + 2048 + 32) + (off >> 2);
        const uint32_t b = 8u * (off & 3u);
        in.e_lo = __funnelshift_r(ew[0], ew[1], b);
        in.e_hi = __funnelshift_r(ew[1], ew[2], b);
        in.in_window = true;
    } else {
        in.in_window = false;
    }
}

// 8 codes of 3 bits (bits 0..23) spread into 8 nibbles: a byte_perm selector of 8 table bytes.
__device__ __forceinline__ uint32_t ss_nibbles(uint32_t c) {
    c = (c & 0xfffu) | ((c & 0xfff000u) << 4);
    c = (c & 0x003f003fu) | ((c & 0x0fc00fc0u) << 2);
    return (c & 0x07070707u) | ((c & 0x38383838u) << 1);
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
    uint32_t n_esc = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) n_esc += __popc(in.c24[i] & (in.c24[i] >> 1) & (in.c24[i] >> 2) & 0x249249u);
    uint64_t w = (uint64_t)in.e_hi << 32 | in.e_lo;
    uint32_t esc = in.esc;
    const bool window = n_esc <= 8 && in.in_window;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const uint32_t c = in.c24[i] & 0xffffffu, sel = ss_nibbles(c);
        uint32_t e_lo = __byte_perm(a.t0, a.t1, sel & 0xffffu), e_hi = __byte_perm(a.t0, a.t1, sel >> 16);
#ifndef SS_NO_ESCAPES
        // Escaped elements: nibbles 0111, gathered into an 8-bit mask.
        uint32_t m = sel & (sel >> 1) & (sel >> 2) & 0x11111111u;
        m = (m | (m >> 3)) & 0x03030303u;
        m = (m | (m >> 6)) & 0x000f000fu;
        m = (m | (m >> 12)) & 0xffu;
        if (window) {
            const uint4 t = esc_table[m];
            const uint32_t lo = (uint32_t)w, hi = (uint32_t)(w >> 32);
            e_lo = (e_lo & ~t.y) | (__byte_perm(lo, hi, t.x & 0xffffu) & t.y);
            e_hi = (e_hi & ~t.z) | (__byte_perm(lo, hi, t.x >> 16) & t.z);
            w = t.w >= 8 ? 0 : w >> (8 * t.w);
        } else {
            for (int e = 0; e < 8; ++e)
                if (m >> e & 1) {
                    const uint32_t ex = a.escapes[esc++], sh = 8 * (e & 3);
                    if (e < 4) e_lo = (e_lo & ~(0xffu << sh)) | (ex << sh);
                    else e_hi = (e_hi & ~(0xffu << sh)) | (ex << sh);
                }
        }
#endif
        const uint2 lo = ss_join(in.s[i].x, e_lo), hi = ss_join(in.s[i].y, e_hi);
        *reinterpret_cast<uint4*>(dst + 256 * i + 8 * lane) = make_uint4(lo.x, lo.y, hi.x, hi.y);
    }
}

// The shared memory a launch of ss_gemm<RT> takes.
constexpr size_t ss_smem_bytes(int RT, int PW) {
    return (size_t)SS_STAGES * (SS_BM + RT) * SS_BK * 2 + 2 * SS_STAGES * 8 + 256 * 16
#ifdef SS_STAGED
           + (size_t)4 * PW * SS_RAW * SS_RAW_BYTES
#endif
        ;
}

// Registers a producer warp keeps with two producer warpgroups (the consumers take the rest).
#ifndef SS_PRODUCER_REGS
#define SS_PRODUCER_REGS 96
#endif

// y = x w^T for one (weight tile tm = blockIdx.y, x tile tn = blockIdx.x); see the head of this file. PW producer
// warpgroups (warpgroup p fills the stages kb % PW == p), then two consumer warpgroups.
template <int RT, bool DF11, int PW>
__global__ void __launch_bounds__(128 * (PW + 2), 1) ss_gemm(const SsArgs a) {
    extern __shared__ __align__(1024) uint8_t smem[];
    constexpr uint32_t W_BYTES = SS_BM * SS_BK * 2, X_BYTES = RT * SS_BK * 2, STAGE = W_BYTES + X_BYTES;
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + SS_STAGES * STAGE);
    uint64_t* empty = full + SS_STAGES;
    uint4* esc_table = reinterpret_cast<uint4*>(empty + SS_STAGES);
    const int tn = blockIdx.x, tm = blockIdx.y, KB = a.K / SS_BK;
    if (DF11) ss_escape_table(esc_table, threadIdx.x, blockDim.x);
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
        if (PW > 1) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(SS_PRODUCER_REGS));
#endif
        // DF11: the warp's chunk of stage kb is q; with SS_PREFETCH its inputs are loaded one of its stages ahead, and
        // where its escapes start two.
        const uint32_t q_step = 4u * PW;
        uint32_t q = 4u * ((uint32_t)tm * KB + wg) + warp;
#ifdef SS_PREFETCH
        SsIn cur;
        uint32_t esc_next = 0;
        if (DF11 && wg < KB) {
            ss_load(cur, a, q, lane, ss_escape_start(a, q, lane));
            if (wg + PW < KB) esc_next = ss_escape_start(a, q + q_step, lane);
        }
#endif
#ifdef SS_STAGED
        // The warp's ring: its first SS_RAW stages queued now; where each slot's chunk's escapes start.
        uint8_t* raw = reinterpret_cast<uint8_t*>(esc_table + 256) + (4 * wg + warp) * SS_RAW * SS_RAW_BYTES;
        uint32_t esc_ring[SS_RAW], esc_fetch = 0;   // the escape starts of the slots' chunks, in stage order
        if (DF11) {
#pragma unroll
            for (int t = 0; t < SS_RAW; ++t) {
                esc_ring[t] = 0;
                if (wg + t * PW < KB) {
                    esc_ring[t] = __ldg(a.chunk_escapes + q + t * q_step);
                    ss_stage_chunk(raw + t * SS_RAW_BYTES, a, q + t * q_step, esc_ring[t], lane);
                }
                ss_cp_commit();
            }
            if (wg + SS_RAW * PW < KB) esc_fetch = __ldg(a.chunk_escapes + q + SS_RAW * q_step);
        }
#endif
        for (int kb = wg; kb < KB; kb += PW, q += q_step) {
            const int s = kb % SS_STAGES;
#ifdef SS_PREFETCH
            SsIn in = cur;
            uint32_t esc_after = 0;
            if (DF11) {
                if (kb + PW < KB) ss_load(cur, a, q + q_step, lane, esc_next);
                if (kb + 2 * PW < KB) esc_after = ss_escape_start(a, q + 2 * q_step, lane);
                esc_next = esc_after;
            }
#elif defined(SS_STAGED)
            SsIn in;
            if (DF11) {
                const int t = (kb - wg) / PW;
                uint8_t* slot = raw + (t % SS_RAW) * SS_RAW_BYTES;
                ss_cp_wait<SS_RAW - 1>();
                __syncwarp();
                ss_load_staged(in, slot, a, esc_ring[0], lane);
                __syncwarp();
                // Refill the slot for this warp's stage t + SS_RAW.
                const int kb_next = kb + SS_RAW * PW;
#pragma unroll
                for (int r = 0; r + 1 < SS_RAW; ++r) esc_ring[r] = esc_ring[r + 1];
                esc_ring[SS_RAW - 1] = esc_fetch;
                if (kb_next < KB) ss_stage_chunk(slot, a, q + SS_RAW * q_step, esc_fetch, lane);
                ss_cp_commit();
                if (kb_next + PW < KB) esc_fetch = __ldg(a.chunk_escapes + q + (SS_RAW + 1) * q_step);
            }
#else
            SsIn in;
            if (DF11) ss_load(in, a, q, lane, ss_escape_start(a, q, lane));
#endif
            if (kb >= SS_STAGES) wg_bar_wait(&empty[s], ((kb / SS_STAGES) - 1) & 1);
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
                ss_decode(in, a, esc_table, reinterpret_cast<uint16_t*>(sw) + 2048 * warp, lane);
                ss_proxy_fence();
                __syncwarp();
                if (lane == 0) ss_bar_arrive(&full[s]);
            }
        }
        return;
    }
#ifdef WG_HAVE_WGMMA
    if (PW > 1) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"((65536 / 128 - PW * SS_PRODUCER_REGS) / 2));
#endif
    const int g = wg - PW;
    float acc[RT / 128][64];
#pragma unroll
    for (int nh = 0; nh < RT / 128; ++nh)
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[nh][i] = 0.0f;
    for (int kb = 0; kb < KB; ++kb) {
        const int s = kb % SS_STAGES;
        wg_bar_wait(&full[s], (kb / SS_STAGES) & 1);
        const uint16_t* sw = reinterpret_cast<const uint16_t*>(smem + s * STAGE);
        const uint16_t* sx = reinterpret_cast<const uint16_t*>(smem + s * STAGE + W_BYTES);
        wg_fence();
#pragma unroll
        for (int k16 = 0; k16 < 4; ++k16) {
            const uint64_t ad = wg_desc(sw + k16 * 2048 + g * 1024);
#pragma unroll
            for (int nh = 0; nh < RT / 128; ++nh)
                ss_mma_n128(acc[nh], ad, wg_desc(sx + k16 * RT * 16 + nh * 2048), (kb | k16) != 0);
        }
        wg_commit();
        if (kb > 0) {
            wg_wait<1>();
            if (lane == 0) ss_bar_arrive(&empty[(kb - 1) % SS_STAGES]);
        }
    }
    wg_wait<0>();
    const int wrow0 = tm * SS_BM + 64 * g + 16 * warp + (lane >> 2);
    const bool whole_tile = (tn + 1) * RT <= a.R;
#pragma unroll
    for (int nh = 0; nh < RT / 128; ++nh)
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const int xrow = tn * RT + nh * 128 + 8 * j + 2 * (lane & 3) + c;
                if (whole_tile || xrow < a.R) {
                    uint16_t* yr = a.y + (size_t)xrow * a.N + wrow0;
                    yr[0] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[nh][4 * j + c]));
                    yr[8] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[nh][4 * j + 2 + c]));
                }
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
