// WARP-SPECIALIZED products (Hopper, sm_90a): df11_ws_gemm_{16,32,64} (DF11, a member, or stacked members, in the TILE
// ORDER with whole 2048-element chunks, as the streaming kernels take them) and bf16_ws_gemm_{16,32,64}, their BF16
// twin, for 9 to 64 rows of x. Both are one kernel whose consumers read the same shared-memory bytes in the same order,
// so DF11 == twin bit for bit. (They do not follow THE TC SUMMATION CONTRACT of df11_tc.cu: a plan that takes them
// takes them for both formats.) Written for this project.
//
// y [nb, rows] = x [nb, cols] w [rows, cols]^T. A CTA computes a 128 x RT tile of y^T: 128 weight rows (tile tm =
// blockIdx.y, the wgmma M side, A from shared memory: two consumer warpgroups of 64 rows) by RT rows of x (tile tn =
// blockIdx.x, the wgmma N side, B from shared memory: x's rows past nb are zeros), over its split of K (blockIdx.z of
// gridDim.z: more than one, each split's fp32 sums go to `partial` and the tile's last split to land adds them in split
// order, so the bits do not depend on which split lands last).
//
// STAGES. K is walked in stages of 64 columns through a ring of WS_STAGES shared-memory slots (A: 128 x 64, B: RT x 64,
// both K-major with the 128-byte swizzle TMA writes and wgmma reads). The stage order follows the tile order: GROUP
// (k, j) of a 2048-column chunk k holds the DF11 sub-steps m = 2 j and 2 j + 1 of each of the tile's 16 row groups,
// whose pass i (the 32 columns 2048 k + 256 i + 32 m .. + 31 of 8 rows) is what stage (k, j, i) needs: stage (k, j, i)
// covers columns 2048 k + 256 i + 64 j .. + 63, and a split is a run of whole groups.
//
// PRODUCERS (two warpgroups; setmaxnreg gives the consumers the registers). Thread 0 brings a stage's x (and, for the
// twin, its weights) by TMA from the row-major tensors. For DF11, producer warp p (0-7) decodes, each stage, pass i of
// its four sub-steps (row groups 2 p and 2 p + 1 of the tile, sub-steps 2 j and 2 j + 1): a lane's eight weights of
// each, by the streaming kernels' escape-bits decode (ts_decode8_bits), stored as one 16-byte unit at its swizzled
// place; it loads the inputs of WS_VISIT stages at once. A lane's escapes of a sub-step are a run of the list from
// chunk_escapes[c] + lane_starts[32 c + L] (df11_packed.cuh) taken in pass order: the lane reads eight of them at the
// group's start and shifts them out as its passes use them, re-reading at its cursor when they run out.
//
// STATUS (docs/PERFORMANCE.md, "Warp-specialized products on the packed form"): in the library behind DF11_TC_WS (off
// by default; crates/df11-candle/src/cuda/forms/packed/ws.rs). A Qwen3-8B layer on an H200 (ws_probe, graphs): the twin
// at 0.97 / 0.93 / 0.82x cuBLAS at 16 / 32 / 64 rows, DF11 at ~0.54 / 0.53 / 0.46x, where the streaming kernels run
// DF11 at 0.66x at 16 rows and decode + cuBLAS at ~0.35x above. The producers are the limit (busy 93% of their time,
// WS_DIAG_TIMES), and in them the loads of codes and sign_mantissa bytes: with them made up (WS_DIAG_NO_LOADS) DF11
// runs at 0.93x cuBLAS at 16 rows, decode included. Measured no better and removed: the next stage's inputs in
// registers, an L2 prefetch of the next group, the inputs brought to shared memory by bulk copies (per sub-step, or a
// stage's inputs gathered contiguous), a group's stages unrolled, the consumers decoding too. Diagnostics (wrong
// outputs): WS_DIAG_NO_DECODE, WS_DIAG_NO_LOADS, WS_DIAG_NO_STORE, WS_DIAG_NO_FENCE, WS_DIAG_TIMES (the harness prints
// the waits).
//
// HOST GUARANTEES (crates/df11-candle/src/cuda/forms/packed/ws.rs, kernels/harness/ws_probe.cu): an sm_90a build on a
// 9.0 device; WS_THREADS threads, dynamic shared memory ws_smem_bytes(RT) (mirrored by the host), two CTAs an SM; cols
// % 2048 == 0; 1 <= nb, 1 <= rows; gridDim = (ceil(nb / RT), ceil(rows / 128), splits) with 1 <= splits <= 4 * cols /
// 2048; xmap a 2D tensor map of x [nb, cols] (BF16, box 64 x RT, 128-byte swizzle, zero fill), wmap (twin) of w [rows,
// cols] (box 64 x 128, the same); y [nb, rows] BF16, 8-byte aligned; splits > 1: partial holds splits * nb * rows
// floats, 16-byte aligned, and counters one zero word per tile (ceil(nb / RT) * ceil(rows / 128); zero again after the
// launch). DF11: the member(s) [rows, cols] at base whole, in the tile order (rows % 8 == 0), base % 2048 == 0, the
// tables' row-group bounds g1, g2 multiples of 16 (a tile lies in one member), sign_mantissa, codes, lane_starts and
// escapes the packed buffers of df11_packed.cuh (escapes padded by 16 bytes). Arguments: WS_PACKED_ARGS / WS_TWIN_ARGS
// (the packed ones in the order of the other tensor-core kernels).

#include <stdint.h>
#include <cuda_bf16.h>
#include "df11_tc_stream.cuh"
#include "df11_tc_wg.cuh"
#include "llm_common.cuh"

constexpr int WS_BM = 128, WS_BK = 64, WS_THREADS = 512;
#ifndef WS_STAGES
#define WS_STAGES 4
#endif
static_assert((WS_STAGES & (WS_STAGES - 1)) == 0, "WS_STAGES: a power of two");
// Registers of a producer thread below 64 rows of x tile, DF11 and twin; the consumers take the rest of two CTAs an SM
// (64 a thread at launch). At 64 rows the consumers' accumulators need 64: both keep the launch's. (DF11 at 80: 3.7%
// faster than at 72 at 9-32 rows, though its consumers spill 8 bytes; the twin at 80: 1.5% slower.)
#ifndef WS_PRODUCER_REGS
#define WS_PRODUCER_REGS 80
#endif
#ifndef WS_TWIN_PRODUCER_REGS
#define WS_TWIN_PRODUCER_REGS 72
#endif
// Stages a producer warp takes a visit below 64 rows of x tile (1, 2, 4 or 8: a group's eight stages split evenly).
#ifndef WS_VISIT
#define WS_VISIT 2
#endif
__host__ __device__ constexpr int ws_producer_regs(int rt, bool twin) {
    return rt >= 64 ? 64 : twin ? WS_TWIN_PRODUCER_REGS : WS_PRODUCER_REGS;
}
__host__ __device__ constexpr int ws_consumer_regs(int rt, bool twin) { return 128 - ws_producer_regs(rt, twin); }

// ASYNC INPUTS (experimental, -DWS_ASYNC; not in the default build, nor in the library's mirror of ws_smem_bytes): a
// DF11 producer warp brings its stages' codes and sign_mantissa bytes into a private ring of ws_async_depth slots in
// shared memory by cp.async (16 bytes a lane, no registers held while in flight), depth - 1 stages ahead of its
// decode, instead of loading a visit's inputs into registers and waiting for them; the next group's escape windows are
// read at this group's pass 4. Below 64 rows of x tile only (two CTAs an SM leave no room at 64). Needs codes and
// sign_mantissa 16-byte aligned.
#ifndef WS_ASYNC
#define WS_ASYNC 0
#endif
// Slots at 16 and 32 rows of x tile: the most that fit beside a 4-stage ring and the escape-bits table at two CTAs an
// SM (with WS_STAGES=2: 6 at both).
#ifndef WS_ASYNC_DEPTH16
#define WS_ASYNC_DEPTH16 3
#endif
#ifndef WS_ASYNC_DEPTH32
#define WS_ASYNC_DEPTH32 2
#endif
// A slot: a producer warp's inputs of one stage, its four sub-steps' codes of the pass (96 bytes each; a lane's word
// pair may reach 4 bytes past them, into the next sub-step's, whose bits the decode does not use) then their
// sign_mantissa bytes (256 each).
constexpr int WS_SLOT_CODES = 96, WS_SLOT_SM = 4 * WS_SLOT_CODES, WS_SLOT = WS_SLOT_SM + 4 * 256;
__host__ __device__ constexpr int ws_async_depth(int rt, bool twin) {
    return !WS_ASYNC || twin || rt >= 64 ? 0 : rt <= 16 ? WS_ASYNC_DEPTH16 : WS_ASYNC_DEPTH32;
}

// Dynamic shared memory of a launch: the ring (1024-byte aligned inside: the swizzle's period), its barriers (and, with
// WS_ASYNC, the producer warps' input slots).
__host__ __device__ constexpr int ws_smem_bytes(int rt, bool twin = false) {
    return WS_STAGES * (WS_BM + rt) * WS_BK * 2 + 16 * WS_STAGES + 1024 + 8 * WS_SLOT * ws_async_depth(rt, twin);
}

// A TMA tensor map (CUtensorMap's 128 opaque bytes, made by the host with cuTensorMapEncodeTiled).
struct __align__(64) WsMap {
    unsigned long long opaque[16];
};

// Box (c0, c1) of `map` into shared memory at dst, completing on `bar`.
__device__ __forceinline__ void ws_tma_2d(uint32_t dst, const WsMap* map, int c0, int c1, uint64_t* bar) {
#ifdef WG_HAVE_WGMMA
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            dst),
        "l"(map), "r"(c0), "r"(c1), "r"(wg_smem_addr(bar))
        : "memory");
#endif
}
// A K-major operand with the 128-byte swizzle: rows of 128 bytes (64 BF16), 8-row groups 1024 bytes apart. A k16 step
// inside the 64 columns is 32 bytes more on the start address.
__device__ __forceinline__ uint64_t ws_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
// Eight escape bytes of the list from index `at`. The buffer is padded past the list: the clamp never moves a valid
// cursor's window, it only keeps a bad one inside the buffer.
__device__ __forceinline__ unsigned long long ws_window8(const uint8_t* escapes, uint32_t n_escapes, uint32_t at) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(escapes);
    const uint32_t w = min(at >> 2, n_escapes / 4 - 3), sh = 8 * (at & 3);
    const uint32_t w0 = __ldg(words + w), w1 = __ldg(words + w + 1), w2 = __ldg(words + w + 2);
    return ((unsigned long long)__funnelshift_r(w1, w2, sh) << 32) | __funnelshift_r(w0, w1, sh);
}
// The producers' loads of codes and sign_mantissa bytes: not kept in L1 (each is read once), L2 fetching 256 bytes
// (a chunk's next passes). (2% faster than __ldg at 16-64 rows; __ldcg the same as __ldg.)
__device__ __forceinline__ uint32_t ws_ld(const uint32_t* p) {
    uint32_t v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ uint2 ws_ld2(const uint2* p) {
    uint2 v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
// cp.async of 16 bytes, not kept in L1, L2 fetching 256 bytes; a commit of the thread's copies as a group; a wait
// until at most N of its groups are in flight (WS_ASYNC).
__device__ __forceinline__ void ws_cp16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void ws_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void ws_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// The escapes among a pass's eight codes (24 bits).
__device__ __forceinline__ uint32_t ws_escapes(uint32_t c24) { return __popc(c24 & (c24 >> 1) & (c24 >> 2) & 0x249249u); }

#ifdef WS_DIAG_TIMES
// Diagnostic: cycles the producer warps spent waiting for free slots [0] and the consumer warps for full ones [1],
// their whole time [2] and [3] (summed over warps; the harness zeroes and prints them).
__device__ unsigned long long ws_diag_cycles[4];
#endif
template <int RT, bool TWIN>
__device__ __forceinline__ void ws_gemm(const FgPacked& pk, const TsTables& tabs, const uint8_t* sign_mantissa,
                                        const WsMap* wmap, const WsMap* xmap, __nv_bfloat16* y, float* partial,
                                        uint32_t* counters, int nb, int rows, int cols, long long base) {
#ifndef WG_HAVE_WGMMA
    __trap();   // the host launches these kernels on sm_90a builds only
#endif
    launch_dependents();
    extern __shared__ __align__(16) uint8_t ws_raw[];
    constexpr uint32_t W_BYTES = WS_BM * WS_BK * 2, X_BYTES = RT * WS_BK * 2, STAGE = W_BYTES + X_BYTES;
    const uint32_t raw = wg_smem_addr(ws_raw), ring = (raw + 1023) & ~1023u;
    uint8_t* const smem = ws_raw + (ring - raw);
    uint64_t* const full = reinterpret_cast<uint64_t*>(smem + WS_STAGES * STAGE);
    uint64_t* const empty = full + WS_STAGES;
    const int tn = blockIdx.x, tm = blockIdx.y;
    const int KC = cols >> 11, groups = 4 * KC;
    const int g0 = (int)((long long)groups * blockIdx.z / gridDim.z);
    const int g1 = (int)((long long)groups * (blockIdx.z + 1) / gridDim.z);
    const int nst = 8 * (g1 - g0);
    if (!TWIN)
        for (int i = threadIdx.x; i < 1024; i += WS_THREADS) ts_bits[i] = ts_bits_table.e[i];
    if (threadIdx.x == 0) {
        for (int s = 0; s < WS_STAGES; ++s) {
            wg_bar_init(&full[s], TWIN ? 1 : 9);   // the TMA's arrival (+ the eight decoding warps)
            wg_bar_init(&empty[s], 8);             // the consumers' warps
        }
        wg_bar_init_fence();
    }
    __syncthreads();
    const int wg = threadIdx.x >> 7, lane = threadIdx.x & 31;

    if (wg < 2) {   // ---- producers
#ifdef WG_HAVE_WGMMA
        constexpr int regs = ws_producer_regs(RT, TWIN);
        if (regs < 64) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(regs));
        if (regs > 64) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(regs));
#endif
        if (TWIN && threadIdx.x != 0) return;
#ifdef WS_DIAG_TIMES
        const long long t_start = clock64();
#endif
        if (threadIdx.x == 0) grid_dependency_wait();   // x may be the kernel before's output
        const int pw = threadIdx.x >> 5;                 // producer warp: row groups 2 pw, 2 pw + 1 of the tile
        const uint32_t g = lane >> 2, t = lane & 3;
        const int tile_group = tm * 16;
        const uint32_t t0 = tile_group < tabs.g1 ? tabs.t0a : tile_group < tabs.g2 ? tabs.t0b : tabs.t0c;
        const uint32_t t1 = tile_group < tabs.g1 ? tabs.t1a : tile_group < tabs.g2 ? tabs.t1b : tabs.t1c;
        const uint32_t t0r = fg_rot(t0), t1r = fg_rot(t1);
        // Sub-step u (0-3) of group grp: row group 2 pw + (u >> 1) of the tile, sub-step 2 j + (u & 1) of chunk k.
        const uint32_t first = (uint32_t)(base >> 11);
        // (A last tile past the matrix's rows decodes its last row group again there: in bounds, never stored.)
        const int last_group = rows / 8 - 1;
        auto chunk_of = [&](int grp, int u) -> uint32_t {
            const int group = min(tile_group + 2 * pw + (u >> 1), last_group);
            return first + (uint32_t)((group * KC + (grp >> 2)) * 8 + 2 * (grp & 3) + (u & 1));
        };
        auto lane_start = [&](uint32_t c) -> uint32_t {
            return __ldg(pk.chunk_escapes + c) + __ldg(pk.lane_starts + 32 * c + lane);
        };
        // Per sub-step u: the lane's held escape bytes (every byte rotated, fg_rot, as the decode takes them), read at
        // the group's start from its cursor and shifted out as they are used; `used` counts them (four bits a sub-step)
        // so that a lane that would run past the eight re-reads them at its cursor (rare: more than 8 escapes in 64
        // weights); nxt: the lane's start in the next group's sub-steps, loaded a group ahead.
        unsigned long long held[4];
        uint32_t cur[4], nxt[4], used = 0;
        if (!TWIN)
#pragma unroll
            for (int u = 0; u < 4; ++u) nxt[u] = lane_start(chunk_of(g0, u));
        // WS_ASYNC: the next group's escape windows too are read ahead (at its pass 4 of this group, once nxt has
        // come), so that a group's start waits for no load.
        constexpr int D = ws_async_depth(RT, TWIN);
        unsigned long long held_next[D > 0 ? 4 : 1];
        if constexpr (D > 0) {
#pragma unroll
            for (int u = 0; u < 4; ++u) held_next[u] = fg_rot64(ws_window8(pk.escapes, pk.n_escapes, nxt[u]));
        }
        // A stage's inputs of the lane: each sub-step's codes of the pass and sign_mantissa bytes.
        auto load = [&](int j, uint32_t(&c24)[4], uint2(&sm)[4]) {
            const int grp = g0 + (j >> 3), i = j & 7;
            const uint32_t sh = (24u * lane) & 31u;
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const uint32_t c = chunk_of(grp, u), w0 = 192u * c + 24u * i + ((24u * lane) >> 5);
#ifdef WS_DIAG_NO_LOADS   // diagnostic (wrong weights): codes and sign_mantissa bytes made up, not loaded
                c24[u] = (w0 * 0x9E3779B9u) & 0x6db6dbu;
                sm[u] = make_uint2(w0, c);
#else
                c24[u] = __funnelshift_r(ws_ld(pk.codes + w0), ws_ld(pk.codes + w0 + 1), sh);
                sm[u] = ws_ld2(reinterpret_cast<const uint2*>(sign_mantissa + 2048ull * c + 256 * i + 8 * lane));
#endif
            }
        };
        auto stage = [&](int j, const uint32_t(&c24)[4], const uint2(&sm)[4]) {
            const int grp = g0 + (j >> 3), i = j & 7, s = j & (WS_STAGES - 1);
            if constexpr (!TWIN) {
                if (i == 0) {
#pragma unroll
                    for (int u = 0; u < 4; ++u) {
                        cur[u] = nxt[u];
                        if (grp + 1 < g1) nxt[u] = lane_start(chunk_of(grp + 1, u));
                        if constexpr (D > 0) held[u] = held_next[u];
                        else held[u] = fg_rot64(ws_window8(pk.escapes, pk.n_escapes, cur[u]));
                    }
                    used = 0;
                }
                if constexpr (D > 0) {
                    if (i == 4 && grp + 1 < g1) {
#pragma unroll
                        for (int u = 0; u < 4; ++u)
                            held_next[u] = fg_rot64(ws_window8(pk.escapes, pk.n_escapes, nxt[u]));
                    }
                }
            }
#ifdef WS_DIAG_TIMES
            const long long t_wait = clock64();
#endif
            if (j >= WS_STAGES) wg_bar_wait(&empty[s], ((j / WS_STAGES) - 1) & 1);
#ifdef WS_DIAG_TIMES
            if (lane == 0) atomicAdd(ws_diag_cycles + 0, (unsigned long long)(clock64() - t_wait));
#endif
            const uint32_t st = ring + s * STAGE;
            if (threadIdx.x == 0) {
                const int col = 2048 * (grp >> 2) + 256 * i + 64 * (grp & 3);
                wg_bar_expect(&full[s], X_BYTES + (TWIN ? W_BYTES : 0));
                ws_tma_2d(st + W_BYTES, xmap, col, tn * RT, &full[s]);
                if (TWIN) ws_tma_2d(st, wmap, col, tm * WS_BM, &full[s]);
            }
            if constexpr (!TWIN) {
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const uint32_t n = ws_escapes(c24[u]);
                    if (((used >> (4 * u)) & 15u) + n > 8) {
                        held[u] = fg_rot64(ws_window8(pk.escapes, pk.n_escapes, cur[u]));
                        used &= ~(15u << (4 * u));
                    }
                    uint32_t elo, ehi, w[4];
#ifdef WS_DIAG_NO_DECODE
                    elo = c24[u] ^ (uint32_t)held[u];
                    ehi = c24[u];
#else
                    ts_decode8_bits(c24[u], t0r, t1r, held[u], elo, ehi);
#endif
                    cur[u] += n;
                    used += n << (4 * u);
                    fg_fuse4_rot(sm[u].x, elo, w[0], w[1]);
                    fg_fuse4_rot(sm[u].y, ehi, w[2], w[3]);
                    // Row 8 (2 pw + (u >> 1)) + g of the tile, 16-byte unit 4 (u & 1) + t of its 128 bytes, swizzled.
                    const uint32_t row = 16 * pw + 8 * (u >> 1) + g, unit = (4 * (u & 1) + t) ^ g;
#ifdef WS_DIAG_NO_STORE   // diagnostic (wrong weights): the decoded weights kept from the compiler, not stored
                    if (nb < 0 && (w[0] ^ w[1] ^ w[2] ^ w[3]) == row) asm volatile("trap;");
#else
                    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(st + 128 * row + 16 * unit), "r"(w[0]),
                                 "r"(w[1]), "r"(w[2]), "r"(w[3])
                                 : "memory");
#endif
                }
#ifndef WS_DIAG_NO_FENCE
                wg_proxy_fence();   // the stores, for wgmma's reads
#endif
                __syncwarp();
                if (lane == 0) wg_bar_arrive(&full[s]);
            }
        };
        if constexpr (D > 0) {
            // WS_ASYNC: stage j's inputs land in slot j % D of the warp's ring, issued D - 1 stages ahead. Lanes 0-5
            // copy a sub-step's codes of the pass, lanes 16-31 its sign_mantissa bytes.
            const uint32_t slots = ring + WS_STAGES * STAGE + 16 * WS_STAGES + pw * D * WS_SLOT;
            const uint8_t* const slots_p = smem + (slots - ring);
            const uint8_t* const codes_b = reinterpret_cast<const uint8_t*>(pk.codes);
            auto issue = [&](int j) {
                if (j < nst) {
                    const int grp = g0 + (j >> 3), i = j & 7;
                    const uint32_t slot = slots + (j % D) * WS_SLOT;
#pragma unroll
                    for (int u = 0; u < 4; ++u) {
                        const uint32_t c = chunk_of(grp, u);
                        if (lane < 6)
                            ws_cp16(slot + WS_SLOT_CODES * u + 16 * lane, codes_b + 768ull * c + 96 * i + 16 * lane);
                        else if (lane >= 16)
                            ws_cp16(slot + WS_SLOT_SM + 256 * u + 16 * (lane - 16),
                                    sign_mantissa + 2048ull * c + 256 * i + 16 * (lane - 16));
                    }
                }
                ws_cp_commit();   // (an empty group past the last stage: the waits below count alike)
            };
#pragma unroll
            for (int j = 0; j < D - 1; ++j) issue(j);
            const uint32_t sh = (24u * lane) & 31u, word = (24u * lane) >> 5;
            for (int j = 0; j < nst; ++j) {
                // The slot written here was read at stage j - 1, before its closing __syncwarp.
                issue(j + D - 1);
                ws_cp_wait<D - 1>();
                __syncwarp();   // every lane's copies of stage j landed
                const uint8_t* const slot = slots_p + (j % D) * WS_SLOT;
                uint32_t c24[4];
                uint2 sm[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const uint32_t* cw = reinterpret_cast<const uint32_t*>(slot + WS_SLOT_CODES * u) + word;
                    c24[u] = __funnelshift_r(cw[0], cw[1], sh);
                    sm[u] = reinterpret_cast<const uint2*>(slot + WS_SLOT_SM + 256 * u)[lane];
                }
                stage(j, c24, sm);
            }
#ifdef WS_DIAG_TIMES
            if (lane == 0) atomicAdd(ws_diag_cycles + 2, (unsigned long long)(clock64() - t_start));
#endif
            return;
        }
        // V stages a visit: their inputs loaded together (one memory latency a visit), then decoded stage by stage.
        constexpr int V = RT >= 64 ? 1 : WS_VISIT;
        for (int j = 0; j < nst; j += V) {
            uint32_t c24[V][4];
            uint2 sm[V][4];
            if (!TWIN)
#pragma unroll
                for (int v = 0; v < V; ++v) load(j + v, c24[v], sm[v]);
#pragma unroll
            for (int v = 0; v < V; ++v) stage(j + v, c24[v], sm[v]);
        }
#ifdef WS_DIAG_TIMES
        if (lane == 0) atomicAdd(ws_diag_cycles + 2, (unsigned long long)(clock64() - t_start));
#endif
        return;
    }

    // ---- consumers: warpgroup h takes weight rows 64 h .. + 63 of the tile
#ifdef WG_HAVE_WGMMA
    constexpr int regs = ws_consumer_regs(RT, TWIN);
    if (regs > 64) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(regs));
    if (regs < 64) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(regs));
#endif
    const int h = wg - 2, warp = (threadIdx.x >> 5) & 3;
#ifdef WS_DIAG_TIMES
    const long long t_start = clock64();
#endif
    float acc[RT / 2];
#pragma unroll
    for (int i = 0; i < RT / 2; ++i) acc[i] = 0.0f;
    for (int j = 0; j < nst; ++j) {
        const int s = j & (WS_STAGES - 1);
#ifdef WS_DIAG_TIMES
        const long long t_wait = clock64();
#endif
        wg_bar_wait(&full[s], (j / WS_STAGES) & 1);
#ifdef WS_DIAG_TIMES
        if (lane == 0) atomicAdd(ws_diag_cycles + 1, (unsigned long long)(clock64() - t_wait));
#endif
        const uint32_t a = ring + s * STAGE + h * (64 * 128), b = ring + s * STAGE + W_BYTES;
        wg_fence();
#pragma unroll
        for (int k16 = 0; k16 < 4; ++k16) wg_mma_ss<RT>(acc, ws_desc(a + 32 * k16), ws_desc(b + 32 * k16), (j | k16) != 0);
        wg_commit();
        if (j > 0) {
            wg_wait<1>();
            if (lane == 0) wg_bar_arrive(&empty[(j - 1) & (WS_STAGES - 1)]);
        }
    }
    wg_wait<0>();
#ifdef WS_DIAG_TIMES
    if (lane == 0) atomicAdd(ws_diag_cycles + 3, (unsigned long long)(clock64() - t_start));
#endif
    grid_dependency_wait();   // y, partial and counters may be read by the kernel before
    // acc[4 c8 + e]: weight row wrow (+ 8 for e >= 2), x row 8 c8 + 2 (lane % 4) + e % 2 of the tile.
    const int wrow = tm * WS_BM + 64 * h + 16 * warp + (lane >> 2);
    const bool whole = (tn + 1) * RT <= nb;
    const int splits = gridDim.z;
#pragma unroll
    for (int c8 = 0; c8 < RT / 8; ++c8)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const int xrow = tn * RT + 8 * c8 + 2 * (lane & 3) + c;
            if (whole || xrow < nb) {
                if (splits == 1) {
                    __nv_bfloat16* yr = y + (size_t)xrow * rows + wrow;
                    if (wrow < rows) yr[0] = __float2bfloat16_rn(acc[4 * c8 + c]);
                    if (wrow + 8 < rows) yr[8] = __float2bfloat16_rn(acc[4 * c8 + 2 + c]);
                } else {
                    float* pr = partial + ((size_t)blockIdx.z * nb + xrow) * rows + wrow;
                    if (wrow < rows) __stcg(pr, acc[4 * c8 + c]);
                    if (wrow + 8 < rows) __stcg(pr + 8, acc[4 * c8 + 2 + c]);
                }
            }
        }
    if (splits == 1) return;
    // The tile's last split to land adds the splits' sums in split order (the same bits whichever lands last) and
    // re-arms the tile's counter.
    __shared__ uint32_t ws_last;
    __threadfence();
    asm volatile("bar.sync 1, 256;" ::: "memory");   // the consumers only (the producers have left)
    const uint32_t tile = (uint32_t)tn * gridDim.y + tm;
    if (threadIdx.x == 256) ws_last = atomicAdd(counters + tile, 1u) == (uint32_t)splits - 1;
    asm volatile("bar.sync 1, 256;" ::: "memory");
    if (!ws_last) return;
    __threadfence();
    const int r0 = tn * RT, nr = min(RT, nb - r0);
    const size_t split_stride = (size_t)nb * rows;
    for (int e = (int)threadIdx.x - 256; e < nr * 32; e += 256) {
        const int xrow = r0 + (e >> 5), col = tm * WS_BM + 4 * (e & 31);
        if (col >= rows) continue;
        const float* p = partial + (size_t)xrow * rows + col;
        __nv_bfloat16* yr = y + (size_t)xrow * rows + col;
        if ((rows & 3) != 0 || col + 4 > rows) {   // a ragged edge: one column at a time, in the same order
            for (int k = 0; k < 4 && col + k < rows; ++k) {
                float v = __ldcg(p + k);
                for (int z = 1; z < splits; ++z) v += __ldcg(p + z * split_stride + k);
                yr[k] = __float2bfloat16_rn(v);
            }
            continue;
        }
        float4 v = __ldcg(reinterpret_cast<const float4*>(p));
        // Four splits' loads in flight at a time, added in split order.
        for (int z = 1; z < splits; z += 4) {
            float4 u[4];
#pragma unroll
            for (int q = 0; q < 4; ++q)
                if (z + q < splits) u[q] = __ldcg(reinterpret_cast<const float4*>(p + (z + q) * split_stride));
#pragma unroll
            for (int q = 0; q < 4; ++q)
                if (z + q < splits) {
                    v.x += u[q].x;
                    v.y += u[q].y;
                    v.z += u[q].z;
                    v.w += u[q].w;
                }
        }
        const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
        *reinterpret_cast<uint2*>(yr) =
            make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
    }
    if (threadIdx.x == 256) counters[tile] = 0;
}

#define WS_PACKED_ARGS                                                                                                 \
    const uint32_t *codes, const uint32_t *chunk_escapes, const uint8_t *lane_starts, uint32_t n_chunks,             \
        const uint8_t *escapes, uint32_t n_escapes, uint32_t t0, uint32_t t1, uint32_t t0b, uint32_t t1b,           \
        uint32_t t0c, uint32_t t1c, int g1, int g2, const uint8_t *sign_mantissa, const __grid_constant__ WsMap xmap, \
        __nv_bfloat16 *y, float *partial, uint32_t *counters, int nb, int rows, int cols, long long base
#define WS_TWIN_ARGS                                                                                                   \
    const __grid_constant__ WsMap wmap, const __grid_constant__ WsMap xmap, __nv_bfloat16 *y, float *partial,       \
        uint32_t *counters, int nb, int rows, int cols

#define WS_INSTANTIATE(N)                                                                                            \
    extern "C" __global__ void __launch_bounds__(WS_THREADS, 2) df11_ws_gemm_##N(WS_PACKED_ARGS) {                   \
        const FgPacked pk = {codes, chunk_escapes, lane_starts, n_chunks, escapes, n_escapes, t0, t1};               \
        const TsTables tabs = {t0, t1, t0b, t1b, t0c, t1c, g1, g2};                                                   \
        ws_gemm<N, false>(pk, tabs, sign_mantissa, nullptr, &xmap, y, partial, counters, nb, rows, cols, base);      \
    }                                                                                                                 \
    extern "C" __global__ void __launch_bounds__(WS_THREADS, 2) bf16_ws_gemm_##N(WS_TWIN_ARGS) {                     \
        const FgPacked pk = {};                                                                                       \
        const TsTables tabs = {};                                                                                     \
        ws_gemm<N, true>(pk, tabs, nullptr, &wmap, &xmap, y, partial, counters, nb, rows, cols, 0);                  \
    }

WS_INSTANTIATE(16)
WS_INSTANTIATE(32)
WS_INSTANTIATE(64)
