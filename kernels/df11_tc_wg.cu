// WARPGROUP tensor-core products (Hopper, sm_90a): df11_tc_wg_* (DF11, a member in the TILE ORDER whose sub-steps are
// whole 2048-element chunks, or stacked such members, as df11_tc_stream.cu takes them) and bf16_tc_wg_*, their BF16
// twin, for 9 to 64 rows of x. They follow THE TC SUMMATION CONTRACT of df11_tc.cu unchanged (same items, same k
// slots, same partial sums added in the same order), so they are bit-identical to every other tensor-core kernel.
// Written for this project.
//
// Why (docs/PERFORMANCE.md, 2026-11-27 and 28): above 8 rows the mma.sync kernels spend their issue slots on x: every
// 16 rows of x are another A fragment per weight fragment, loaded and moved per row group. Here the WEIGHTS are the A
// operand: a warp decodes two row groups (rows g and g + 8 of an m64 tile's 16) into A registers, as the streaming
// kernel decodes one, and a warpgroup's four warps issue one wgmma m64nNk16 per pass and accumulator, whose B operand
// is x read by the tensor core from shared memory: no x register, no x load by a warp, whatever N (16 to 64).
// (wgmma with A = W from registers and B = x from shared memory sums bit for bit as the contract's mma.sync chain:
// kernels/harness/mma_identity.cu.)
//
// WORK. A warpgroup's TASK is one item j of a TILE of 8 row groups (64 weight rows): warp w takes row groups 8 tile +
// 2w (A rows g) and 8 tile + 2w + 1 (A rows g + 8). For each of the item's sub-steps m, each pass i, the warp decodes
// the lane's 8 weights of both rows (the contract's w[0..3] of each) and the warpgroup issues P += W_P x_P and
// Q += W_Q x_Q, where W_P = {w_a[0], w_b[0], w_a[2], w_b[2]} (k slots 2t, 2t + 1 <- columns c, c + 1; 2t + 8, 2t + 9 <-
// c + 4, c + 5) and W_Q = {w_a[1], w_b[1], w_a[3], w_b[3]} (c + 2, c + 3 | c + 6, c + 7). A task's P + Q are the
// item's partial sums; the tile's items are added in item order by the warpgroup that finishes the tile's last one
// (as df11_tc_panel.cu does for a row group: global partial sums, per-tile counters zero before and after a launch).
//
// X IN CONTRACT ORDER. wg_x_order (a launch before the product) writes x as the B operands of every pass: block (k, m,
// i) = the 32 columns 2048 k + 256 i + 32 m .. + 31 of N rows (rows past nb zero), P's 16 k slots then Q's, each as
// N / 8 x 2 core matrices (8 rows x 16 bytes; K-adjacent 128 bytes apart, N-adjacent 256). A task's passes are
// consecutive blocks, so the warpgroup streams them into a ring of WG_XD shared-memory slots with one bulk copy each,
// completing on an mbarrier per slot; thread 0 of the warpgroup refills a slot once the wgmma that read it is done.
//
// PIPELINE, DECODE, ESCAPES: df11_tc_stream.cu's (a warp's stages by cp.async, two per sub-step here: its two row
// groups; escapes held in a register when every lane's fit, else read from global memory; df11_tc_stream.cuh).
//
// STATUS (docs/PERFORMANCE.md, 2026-11-28): bit-identical to the other kernels (tc_exact), but slower than the
// streaming and panel kernels at every row count so far, even with its wgmma removed (-DWG_NO_MMA): the weight
// pipeline, not the tensor cores, limits it. Off by default (DF11_TC_WG).
//
// HOST GUARANTEES (crates/df11-candle/src/cuda/forms/packed/tc_wg.rs): an sm_90a build on a 9.0 device; 128 * wgs threads (wgs = 1
// to 3 warpgroups); cols % 2048 == 0, 2048 * 256 >= cols; 1 <= nb <= N; xp the wg_x_order of x for this N (cols * N
// BF16, 128-byte aligned); DF11: the streaming kernel's guarantees (tiled members, whole chunks, packed buffers
// 16-byte aligned); partial holds tiles * ipg * nb * 64 floats, counters one zero per tile; dynamic shared memory
// wg_smem_bytes (mirrored by the host).

#include <stdint.h>
#include <type_traits>
#include <cuda_bf16.h>
#include "df11_tc_stream.cuh"
#include "df11_tc_wg.cuh"

// x slots a warpgroup (passes in flight): 8 (4 at N >= 64, whose slots are larger).
#ifndef WG_UNROLL
#define WG_UNROLL 8                  // passes of a DF11 sub-step unrolled (a -D for measurements)
#endif
constexpr int wg_unroll = WG_UNROLL;
#ifndef WG_XD
#define WG_XD(N) ((N) >= 64 ? 4 : 8)
#endif
#define WG_HEAD 512                  // dynamic shared memory before the x slots: barriers, flags, counters

// x [nb, cols] -> xp in contract order for N rows (above). One thread a 16-byte piece: (block, P/Q, k half, row).
extern "C" __global__ void wg_x_order(const __nv_bfloat16* x, uint4* xp, int nb, int cols, int N) {
    pdl_begin();
    const long long pieces = (long long)cols / 32 * 4 * N;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < pieces;
         e += (long long)gridDim.x * blockDim.x) {
        // e = ((block * 2 + h) * N + row) * 2 + half, so that a warp writes 512 consecutive bytes.
        const int half = (int)(e & 1), b = (int)((e >> 1) % N);
        const long long bh = (e >> 1) / N;
        const int h = (int)(bh & 1);
        const long long block = bh >> 1;
        const int i = (int)(block & 7), m = (int)((block >> 3) & 7);
        const long long k = block >> 6;
        const long long col = 2048 * k + 256 * i + 32 * m;
        // Column pairs of the 32 (pair p = columns 2p, 2p + 1) in the 16 k slots: P's half 0 takes pairs 0, 4, 8,
        // 12 (slots 2t, 2t + 1 <- columns 8t, 8t + 1), half 1 pairs 2, 6, 10, 14 (slots 2t + 8.. <- 8t + 4..); Q's
        // the pairs one further (columns + 2).
        const int first = 2 * half + h;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (b < nb) {
            const uint32_t* src = reinterpret_cast<const uint32_t*>(x + (long long)b * cols + col);
            v = make_uint4(__ldg(src + first), __ldg(src + first + 4), __ldg(src + first + 8), __ldg(src + first + 12));
        }
        const int out = (int)(((block * 2 + h) * N) / 8) * 16 + (b >> 3) * 16 + half * 8 + (b & 7);
        xp[out] = v;
    }
}

// A position in a warp's sequence of sub-steps: the task, the sub-step of its item, where its two row groups read.
struct WgPos {
    int task, s;
    bool live_a, live_b;    // the row groups exist (and the task does)
    int cg;                 // the sub-step's place in its row group: 8 k + m
    uint32_t chunk_a;       // DF11: row group a's chunk of the unit (b's is chunk_a + ipg * steps)
    long long at_a;         // twin: the lane's first weight of row group a (b's is 8 cols further)
    bool in_a, in_b;        // twin: the lane's rows are rows of the matrix
};

// The lane's escape state of a DF11 stage: held bytes where they fit the staged window (fits), else the cursor.
struct WgEsc {
    unsigned long long held;
    uint32_t cursor;
    bool fits;
};

__device__ __forceinline__ WgEsc wg_lane_escapes(const uint8_t* st) {
    const uint32_t lane = threadIdx.x & 31;
    const uint4 head = *reinterpret_cast<const uint4*>(st + TS_HEAD);
    const uint32_t first = head.x, win0 = head.y, total = head.z;
    const uint32_t ls = st[TS_LANES + lane], le = lane < 31 ? st[TS_LANES + lane + 1] : total;
    const uint32_t start = first + ls, cnt = le - ls, local = start - win0;
    WgEsc e;
    e.cursor = start;
    e.fits = cnt <= 8u && local <= TS_ESC_WIN - cnt;
    // Where they fit, the three words lie in the window and the stage's head after it; else (unused) in the stage.
    const uint32_t q = min(local, (uint32_t)TS_ESC_WIN) >> 2, sh = 8 * (local & 3);
    const uint32_t* ew = reinterpret_cast<const uint32_t*>(st + TS_WIN);
    const uint32_t e0 = ew[q], e1 = ew[q + 1], e2 = ew[q + 2];
    e.held = fg_rot64(((unsigned long long)__funnelshift_r(e1, e2, sh) << 32) | __funnelshift_r(e0, e1, sh));
    return e;
}

__device__ __forceinline__ int wg_smem_bytes(int N, bool twin, int wgs) {
    return WG_HEAD + wgs * (WG_XD(N) * N * 64 + 4 * 4 * (twin ? TS_TWIN_STAGE : TS_STAGE));
}


template <int N, bool TWIN>
__device__ __forceinline__ void tc_wg(const FgPacked& pk, const TsTables& tabs, const uint8_t* sign_mantissa,
                                      const uint16_t* wd, const uint8_t* xp, __nv_bfloat16* y, float* partial,
                                      uint32_t* counters, int nb, int rows, int cols, long long base, int steps) {
    launch_dependents();
    if (TWIN) grid_dependency_wait();
    extern __shared__ __align__(128) uint8_t wg_smem[];
    constexpr int stage_bytes = TWIN ? TS_TWIN_STAGE : TS_STAGE;
    constexpr int XSLOT = N * 64, XD = WG_XD(N);
    const int wgs = (int)(blockDim.x >> 7);
    const uint32_t tid = threadIdx.x & 127, wg = threadIdx.x >> 7, warp = tid >> 5, lane = threadIdx.x & 31;
    const uint32_t g = lane >> 2, t = lane & 3;
    const int ipg = tc_items_per_group(cols, steps), nsb = 8 / steps;
    const int groups = (rows + 7) / 8, tiles = (groups + 7) / 8, ntasks = tiles * ipg;
    // Warpgroup wg of CTA c takes tasks wg * grid + c, + grid * wgs, ...: the first tasks go one to a CTA, so a
    // product with fewer tasks than warpgroups still spreads over every SM.
    const int stride = (int)gridDim.x * wgs, first_task = (int)wg * (int)gridDim.x + (int)blockIdx.x;
    // Head: 3 x 8 barriers (192 bytes), 3 flags, 3 x 8 counters at 208.. (WG_HEAD 512).
    uint64_t* xfull = reinterpret_cast<uint64_t*>(wg_smem) + 8 * wg;
    volatile uint32_t* flag = reinterpret_cast<uint32_t*>(wg_smem + 192) + wg;
    uint32_t* xcnt = reinterpret_cast<uint32_t*>(wg_smem + 208) + 8 * wg;
    uint8_t* xring = wg_smem + WG_HEAD + wg * (XD * XSLOT);
    uint8_t* ring = wg_smem + WG_HEAD + wgs * (XD * XSLOT) + (wg * 4 + warp) * (4 * stage_bytes);
    const uint32_t first_chunk = (uint32_t)(base >> 11);
    const int bar_id = 1 + (int)wg;                            // the warpgroup's named barrier (0: __syncthreads)

    // Fills in where position p (task set, s = 0) reads; advance() moves one sub-step on.
    auto locate = [&](WgPos& p) {
        p.live_a = p.live_b = false;
        if (p.task >= ntasks) return;
        const int tile = p.task / ipg, j = p.task - tile * ipg, Ga = 8 * tile + 2 * (int)warp;
        p.live_a = Ga < groups;
        p.live_b = Ga + 1 < groups;
        p.cg = j * steps;
        if (TWIN) {
            const int c0 = 2048 * (p.cg >> 3), ra = 8 * Ga + (int)g;
            p.in_a = ra < rows;
            p.in_b = ra + 8 < rows;
            p.at_a = (long long)min(ra, rows - 1) * cols + c0 + 8 * (4 * (p.cg & 7) + (int)t);
        } else {
            p.chunk_a = first_chunk + (uint32_t)((Ga * ipg + j) * steps);
        }
    };
    auto advance = [&](WgPos& p) {
        if (++p.s < steps) {
            ++p.cg;
            p.at_a += 32;
            ++p.chunk_a;
            return;
        }
        p.s = 0;
        p.task += stride;
        locate(p);
    };

    // DF11: lane L's escape range of the warp's stage 32 b + L (THE ESCAPE RANGES, df11_tc_stream.cuh); the warp's
    // stages are sub-step (task n, s)'s row group a, then b.
    auto batch = [&](int bt, uint32_t& lo, uint32_t& hi) {
        lo = hi = 0;
        if (TWIN) return;
        const int q = 32 * bt + (int)lane, which = q & 1, step = q >> 1, nth = step / steps, s = step - nth * steps;
        const long long task = (long long)first_task + (long long)stride * nth;
        if (task >= ntasks) return;
        const int tile = (int)task / ipg, j = (int)task - tile * ipg, G = 8 * tile + 2 * (int)warp + which;
        if (G < groups) {
            const uint32_t c = first_chunk + (uint32_t)((G * ipg + j) * steps + s);
            lo = __ldg(pk.chunk_escapes + c);
            hi = __ldg(pk.chunk_escapes + c + 1);
        }
    };
    TsRanges ranges;
    ts_ranges_start(ranges, batch);
    uint8_t* ring_lane = ring + 16 * lane;
    // Starts the copies of both row groups' stages of position p into pair slot `slot` and commits them as one group.
    auto issue = [&](const WgPos& p, int slot) {
        uint8_t* st = ring_lane + 2 * slot * stage_bytes;
        if (TWIN) {
            if (p.live_a) ts_stage_twin(st, wd + p.at_a, 2048, p.in_a);
            if (p.live_b) ts_stage_twin(st + stage_bytes, wd + p.at_a + 8LL * cols, 2048, p.in_b);
        } else {
            uint32_t lo, hi;
            ts_ranges_next(ranges, batch, lo, hi);
            if (p.live_a) ts_stage_df11(st, pk, sign_mantissa, p.chunk_a, lo, hi);
            ts_ranges_next(ranges, batch, lo, hi);
            const uint32_t chunk_b = p.chunk_a + (uint32_t)(ipg * steps);
            if (p.live_b) ts_stage_df11(st + stage_bytes, pk, sign_mantissa, chunk_b, lo, hi);
        }
        ts_commit();
    };

    // The table (DF11) and the first sub-step's weights; then, after the kernel before (x's order), the first x.
    if (!TWIN) ts_stage_table((int)blockDim.x);
    ts_commit();
    WgPos ahead = {first_task, 0, false, false, 0, 0u, 0, false, false};
    locate(ahead);
    issue(ahead, 0);
    advance(ahead);
    ts_wait_group_le<1>();                                      // the table's group (every thread's share of it)
    if (tid == 0) {
        // A loop, not unrolled: unrolled (XD = 4), the compiler predicated the inits into every warp's uniform
        // datapath, which compute-sanitizer racecheck then attributed to other threads at unrelated addresses
        // (thousands of false write-after-write reports against the table's copy, df11_tc_wg_64 only; be4b14e).
#pragma unroll 1
        for (int d = 0; d < XD; ++d) wg_bar_init(xfull + d, 1);
        wg_bar_init_fence();
    }
    if (tid < XD) xcnt[tid] = 0u;
    __syncthreads();
    grid_dependency_wait();

    // X LOADS: pass index n of the warpgroup's sequence (task first_task + stride (n / passes), its pass n % passes)
    // fills slot n % WG_XD. Thread 0 loads the first WG_XD; after that the warp that is the last of the four to be
    // done with a pass (its wgmma complete: each warp's wgmma.wait_group covers its own 16 rows only) loads the pass
    // WG_XD further into the slot (xcnt: the warps done with the slot's pass).
    const int passes = 8 * steps;
    auto load = [&](int n) {
        const int task = first_task + stride * (n / passes), pass = n % passes;
        if (task >= ntasks) return;
        const int j = task % ipg, k = j / nsb, sb = j - k * nsb;
        const long long block = (long long)(8 * k + sb * steps) * 8 + pass;
        const int slot = n % XD;
        wg_bar_expect(xfull + slot, XSLOT);
        wg_bulk_copy(xring + slot * XSLOT, xp + block * XSLOT, XSLOT, xfull + slot);
    };
    if (tid == 0)
        for (int d = 0; d < XD; ++d) load(d);

    int cur = 0;             // the pair slot of this sub-step's stages
    int pc = 0;              // passes consumed by the warpgroup
    for (int task = first_task; task < ntasks; task += stride) {
        const int tile = task / ipg, Ga = 8 * tile + 2 * (int)warp;
        const bool live_a = Ga < groups, live_b = Ga + 1 < groups;
        uint32_t ta0 = 0, ta1 = 0, tb0 = 0, tb1 = 0;
        if (!TWIN) {
            ts_table_of(tabs, Ga, ta0, ta1);
            ts_table_of(tabs, Ga + 1, tb0, tb1);
        }
        float accp[N / 2], accq[N / 2];
#pragma unroll
        for (int e = 0; e < N / 2; ++e) accp[e] = accq[e] = 0.0f;
        for (int s = 0; s < steps; ++s) {
            __syncwarp();                                       // every lane is done with the pair slot refilled now
            issue(ahead, cur ^ 1);
            advance(ahead);
            ts_wait_group_le<1>();                              // this sub-step's stages have landed
            __syncwarp();
            const uint8_t* sa = ring + 2 * cur * stage_bytes;
            const uint8_t* sbs = sa + stage_bytes;
            cur ^= 1;
            // One pass: the warp's A fragments of both accumulators, x's slot awaited, two wgmma, awaited; the last
            // warp done with the slot refills it.
            auto mul = [&](int i, const uint32_t(&wa)[4], const uint32_t(&wb)[4]) {
                const int slot = pc % XD;
                wg_bar_wait(xfull + slot, (uint32_t)(pc / XD) & 1u);
                const uint8_t* xs = xring + slot * XSLOT;
#ifdef WG_NO_MMA   // diagnostic (wrong sums): the kernel without its tensor-core work
                (void)xs;
                accp[0] += __uint_as_float(wa[0] ^ wb[0] ^ wa[2] ^ wb[2]);
                accq[0] += __uint_as_float(wa[1] ^ wb[1] ^ wa[3] ^ wb[3]);
#else
                wg_fence();
                wg_mma<N>(accp, wa[0], wb[0], wa[2], wb[2], wg_desc(xs));
                wg_mma<N>(accq, wa[1], wb[1], wa[3], wb[3], wg_desc(xs + N * 32));
                wg_commit();
#endif
                // This pass's wgmma done before the next decode: the compiler takes a wgmma's A registers as read
                // at its issue and may decode the next pass into them while it runs (wait_group 1 and a use of the
                // registers after it still gave wrong sums; measured, docs/PERFORMANCE.md, 2026-11-28).
                wg_wait<0>();
                if (lane == 0) {
                    volatile uint32_t* done = xcnt + slot;
                    if (atomicAdd((uint32_t*)done, 1u) == 3u) {
                        *done = 0u;
                        load(pc + XD);
                    }
                }
                ++pc;
            };
            if (TWIN) {
                const uint4* qa = reinterpret_cast<const uint4*>(sa);
                const uint4* qb = reinterpret_cast<const uint4*>(sbs);
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const uint4 va = live_a ? qa[lane + 32 * i] : make_uint4(0u, 0u, 0u, 0u);
                    const uint4 vb = live_b ? qb[lane + 32 * i] : make_uint4(0u, 0u, 0u, 0u);
                    const uint32_t wa[4] = {va.x, va.y, va.z, va.w}, wb[4] = {vb.x, vb.y, vb.z, vb.w};
                    mul(i, wa, wb);
                }
            } else {
                WgEsc ea = {0ull, 0u, true}, eb = {0ull, 0u, true};
                if (live_a) ea = wg_lane_escapes(sa);
                if (live_b) eb = wg_lane_escapes(sbs);
                auto passes8 = [&](auto slow) {
                    constexpr bool SLOW = decltype(slow)::value;
#pragma unroll wg_unroll
                    for (int i = 0; i < 8; ++i) {
                        uint32_t wa[4] = {0u, 0u, 0u, 0u}, wb[4] = {0u, 0u, 0u, 0u};
                        if (live_a) ts_decode_pass<SLOW>(sa, i, ta0, ta1, ea.held, ea.cursor, pk, wa);
                        if (live_b) ts_decode_pass<SLOW>(sbs, i, tb0, tb1, eb.held, eb.cursor, pk, wb);
                        mul(i, wa, wb);
                    }
                };
#ifdef WG_FORCE_SLOW   // diagnostic: every sub-step's escapes read from global memory
                if (false) passes8(std::false_type{});
#else
                if (__all_sync(0xffffffffu, ea.fits && eb.fits)) passes8(std::false_type{});
#endif
                else passes8(std::true_type{});
            }
        }
        wg_wait<0>();
        // The task's partial sums P + Q: d[4jj + e] is A row 16 warp + g + 8 (e >> 1), x row 8 jj + 2t + (e & 1).
        float* pt = partial + (long long)task * nb * 64;
#pragma unroll
        for (int e = 0; e < N / 2; ++e) {
            const int b = 8 * (e >> 2) + 2 * (int)t + (e & 1), r = 16 * (int)warp + (int)g + 8 * ((e >> 1) & 1);
            if (b < nb) pt[b * 64 + r] = accp[e] + accq[e];
        }
        __threadfence();
        ts_bar_sync(bar_id, 128);
        if (tid == 0) *flag = atomicAdd(counters + tile, 1u) == (uint32_t)(ipg - 1);
        ts_bar_sync(bar_id, 128);
        if (!*flag) continue;
        // The tile's last item: every item's sums are visible; add them in item order.
        __threadfence();
        const float* q = partial + (long long)tile * ipg * nb * 64;
        for (int o = (int)tid; o < nb * 64; o += 128) {
            const int b = o >> 6, r = 64 * tile + (o & 63);
            float sum = 0.0f;
            for (int it = 0; it < ipg; ++it) sum += __ldcg(q + (long long)it * nb * 64 + o);
            if (r < rows) y[(long long)b * rows + r] = __float2bfloat16_rn(sum);
        }
        if (tid == 0) counters[tile] = 0u;
    }
    ts_wait_group_le<0>();
}

#define WG_PACKED_ARGS                                                                                               \
    const uint32_t *codes, const uint32_t *chunk_escapes, const uint8_t *lane_starts, uint32_t n_chunks,             \
        const uint8_t *escapes, uint32_t n_escapes, uint32_t t0, uint32_t t1, uint32_t t0b, uint32_t t1b,           \
        uint32_t t0c, uint32_t t1c, int g1, int g2, const uint8_t *sign_mantissa, const uint8_t *xp,                \
        __nv_bfloat16 *y, float *partial, uint32_t *counters, int nb, int rows, int cols, long long base, int steps
#define WG_TWIN_ARGS                                                                                                 \
    const uint16_t *w, const uint8_t *xp, __nv_bfloat16 *y, float *partial, uint32_t *counters, int nb, int rows,   \
        int cols, int steps

// One CTA per SM (the stages and x slots take the shared memory), up to 3 warpgroups.
#define WG_INSTANTIATE(N)                                                                                            \
    extern "C" __global__ void __launch_bounds__(384, 1) df11_tc_wg_##N(WG_PACKED_ARGS) {                           \
        const FgPacked pk = {codes, chunk_escapes, lane_starts, n_chunks, escapes, n_escapes, t0, t1};              \
        const TsTables tabs = {t0, t1, t0b, t1b, t0c, t1c, g1, g2};                                                  \
        tc_wg<N, false>(pk, tabs, sign_mantissa, nullptr, xp, y, partial, counters, nb, rows, cols, base, steps);   \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(384, 1) bf16_tc_wg_##N(WG_TWIN_ARGS) {                             \
        const FgPacked pk = {};                                                                                      \
        const TsTables tabs = {};                                                                                    \
        tc_wg<N, true>(pk, tabs, nullptr, w, xp, y, partial, counters, nb, rows, cols, 0, steps);                  \
    }

WG_INSTANTIATE(16)
WG_INSTANTIATE(32)
WG_INSTANTIATE(64)
