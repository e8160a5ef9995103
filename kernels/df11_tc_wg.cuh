// Hopper primitives of the warpgroup tensor-core kernels (df11_tc_wg.cu) and the warp-specialized ones
// (df11_ws_gemm.cu, the harness's ss_kernel.cuh): wgmma with A from registers or from shared memory and B from shared
// memory by descriptor, mbarriers, the async-proxy fence, and bulk copies from global to shared memory. Every
// instruction here exists on sm_90a only: elsewhere these compile to nothing or a trap (the host launches the kernels
// on sm_90a builds and 9.0 devices only: crates/df11-candle/src/cuda/forms/packed/{tc_wg,ws}.rs).

#pragma once
#include <stdint.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_HAVE_WGMMA 1
#endif

// A no-swizzle K-major operand descriptor: core matrices of 8 rows x 16 bytes (128 contiguous bytes), those adjacent
// in K 128 bytes apart (LBO), those adjacent in N 256 bytes apart (SBO). kernels/harness/mma_identity.cu checked this
// layout, and wgmma's sums against the mma.sync chain of THE TC SUMMATION CONTRACT, on an H100 and an H200.
__device__ __forceinline__ uint64_t wg_desc(const void* smem) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(256 >> 4) << 32);
}

__device__ __forceinline__ void wg_fence() {
#ifdef WG_HAVE_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit() {
#ifdef WG_HAVE_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most N of the warpgroup's wgmma groups are pending.
template <int N>
__device__ __forceinline__ void wg_wait() {
#ifdef WG_HAVE_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

// d += A * B for m64nNk16: A = four registers of the warp's 16 rows (rows g / g + 8, k slots 2t.. / 2t + 8.., as
// mma.sync's A fragment), B = N columns x 16 k slots by descriptor; d = N / 2 floats (d[4j + e]: row g + 8 (e >> 1)
// of the warp's 16, column 8j + 2t + (e & 1)).
template <int N>
__device__ __forceinline__ void wg_mma(float (&d)[N / 2], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint64_t b);

template <>
__device__ __forceinline__ void wg_mma<16>(float (&d)[8], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint64_t b) {
#ifdef WG_HAVE_WGMMA
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7"
        "}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
#else
    __trap();   // the host launches these kernels on sm_90a builds only
#endif
}

template <>
__device__ __forceinline__ void wg_mma<32>(float (&d)[16], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint64_t b) {
#ifdef WG_HAVE_WGMMA
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
        "}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
#else
    __trap();   // the host launches these kernels on sm_90a builds only
#endif
}

template <>
__device__ __forceinline__ void wg_mma<64>(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint64_t b) {
#ifdef WG_HAVE_WGMMA
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
        "}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
#else
    __trap();   // the host launches these kernels on sm_90a builds only
#endif
}


__device__ __forceinline__ uint32_t wg_smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void wg_bar_init(uint64_t* bar, uint32_t count) {
#ifdef WG_HAVE_WGMMA
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(wg_smem_addr(bar)), "r"(count) : "memory");
#endif
}
// Makes the barriers' initialisation visible to the async proxy (the bulk copies complete on them).
__device__ __forceinline__ void wg_bar_init_fence() {
#ifdef WG_HAVE_WGMMA
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival that also expects `bytes` of copies to complete on the barrier before its phase completes.
__device__ __forceinline__ void wg_bar_expect(uint64_t* bar, uint32_t bytes) {
#ifdef WG_HAVE_WGMMA
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(wg_smem_addr(bar)), "r"(bytes)
                 : "memory");
#endif
}

// Waits until the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void wg_bar_wait(uint64_t* bar, uint32_t parity) {
#ifdef WG_HAVE_WGMMA
    asm volatile(
        "{\n.reg .pred done;\n"
        "WG_WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WG_WAIT_%=;\n}\n" ::"r"(wg_smem_addr(bar)),
        "r"(parity)
        : "memory");
#endif
}

// A bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory, completing
// on `bar`.
__device__ __forceinline__ void wg_bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#ifdef WG_HAVE_WGMMA
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
            wg_smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(wg_smem_addr(bar))
        : "memory");
#endif
}

// One plain arrival on an mbarrier.
__device__ __forceinline__ void wg_bar_arrive(uint64_t* bar) {
#ifdef WG_HAVE_WGMMA
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(wg_smem_addr(bar)) : "memory");
#endif
}

// Makes a thread's generic-proxy stores to shared memory visible to the async proxy (wgmma's reads of them).
__device__ __forceinline__ void wg_proxy_fence() {
#ifdef WG_HAVE_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// d (+)= A * B for m64nNk16, A and B both from shared memory by descriptor (the shared-memory producer kernels:
// df11_ws_gemm.cu, kernels/harness/ss_kernel.cuh); d N / 2 floats as wg_mma's; scale_d 0 zeroes d first.
template <int N>
__device__ __forceinline__ void wg_mma_ss(float (&d)[N / 2], uint64_t ad, uint64_t bd, int scale_d);
template <>
__device__ __forceinline__ void wg_mma_ss<16>(float (&d)[8], uint64_t ad, uint64_t bd, int scale_d) {
#ifdef WG_HAVE_WGMMA
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(ad), "l"(bd), "r"(scale_d));
#else
    __trap();   // the host launches these kernels on sm_90a builds only
#endif
}
template <>
__device__ __forceinline__ void wg_mma_ss<32>(float (&d)[16], uint64_t ad, uint64_t bd, int scale_d) {
#ifdef WG_HAVE_WGMMA
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(ad), "l"(bd), "r"(scale_d));
#else
    __trap();   // the host launches these kernels on sm_90a builds only
#endif
}
template <>
__device__ __forceinline__ void wg_mma_ss<64>(float (&d)[32], uint64_t ad, uint64_t bd, int scale_d) {
#ifdef WG_HAVE_WGMMA
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(ad), "l"(bd), "r"(scale_d));
#else
    __trap();   // the host launches these kernels on sm_90a builds only
#endif
}
template <>
__device__ __forceinline__ void wg_mma_ss<128>(float (&d)[64], uint64_t ad, uint64_t bd, int scale_d) {
#ifdef WG_HAVE_WGMMA
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(ad), "l"(bd), "r"(scale_d));
#else
    __trap();   // the host launches these kernels on sm_90a builds only
#endif
}
