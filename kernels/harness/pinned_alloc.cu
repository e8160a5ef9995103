// How fast page-locked host memory can be had for an offloaded model's units (the load of
// `--max-gpu-memory` copies every offloaded unit's device form into pinned memory; the page
// locking, not the copy, sets the time). Host code only (driver API); run on the GPU machine:
//     nvcc -O2 -o pinned_alloc kernels/harness/pinned_alloc.cu -lcuda -lpthread && ./pinned_alloc [GB]
// Ways, each over GB gigabytes (default 8) in pieces of 256 MB, each piece then written by a
// device-to-host copy of the same size (what the load does):
//   host_alloc      cuMemHostAlloc per piece, one thread
//   host_alloc_T    the same from T threads (each its share of the pieces)
//   register_thp    mmap + MADV_HUGEPAGE + touch, then cuMemHostRegister, one thread
//   register_thp_T  the same from T threads
#include <cuda.h>
#include <sys/mman.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#define CK(x)                                                                  \
    do {                                                                       \
        CUresult r_ = (x);                                                     \
        if (r_ != CUDA_SUCCESS) {                                              \
            const char* s_ = nullptr;                                          \
            cuGetErrorString(r_, &s_);                                         \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); \
            std::exit(1);                                                      \
        }                                                                      \
    } while (0)

static const size_t PIECE = 256ull << 20;

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Allocates and locks pieces [first, first + n) into `out` the given way.
static void lock_pieces(CUcontext ctx, bool thp, void** out, size_t first, size_t n) {
    CK(cuCtxSetCurrent(ctx));
    for (size_t i = first; i < first + n; ++i) {
        if (!thp) {
            CK(cuMemHostAlloc(&out[i], PIECE, 0));
        } else {
            void* p = mmap(nullptr, PIECE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) { std::perror("mmap"); std::exit(1); }
            madvise(p, PIECE, MADV_HUGEPAGE);
            std::memset(p, 0, PIECE);
            CK(cuMemHostRegister(p, PIECE, 0));
            out[i] = p;
        }
    }
}

static void run(CUcontext ctx, CUdeviceptr src, size_t pieces, bool thp, int threads) {
    std::vector<void*> ptr(pieces, nullptr);
    double t0 = now();
    std::vector<std::thread> ts;
    size_t per = (pieces + threads - 1) / threads;
    for (int t = 0; t < threads; ++t) {
        size_t first = t * per;
        if (first >= pieces) break;
        size_t n = std::min(per, pieces - first);
        ts.emplace_back(lock_pieces, ctx, thp, ptr.data(), first, n);
    }
    for (auto& t : ts) t.join();
    double t1 = now();
    for (size_t i = 0; i < pieces; ++i) CK(cuMemcpyDtoH(ptr[i], src, PIECE));
    double t2 = now();
    for (size_t i = 0; i < pieces; ++i) {
        if (!thp) {
            CK(cuMemFreeHost(ptr[i]));
        } else {
            CK(cuMemHostUnregister(ptr[i]));
            munmap(ptr[i], PIECE);
        }
    }
    double gb = pieces * (double)PIECE / 1e9;
    std::printf("%-16s threads %2d: lock %6.2f s (%5.1f GB/s), copy %5.2f s (%5.1f GB/s)\n",
                thp ? "register_thp" : "host_alloc", threads, t1 - t0, gb / (t1 - t0), t2 - t1,
                gb / (t2 - t1));
    std::fflush(stdout);
}

int main(int argc, char** argv) {
    double gb = argc > 1 ? std::atof(argv[1]) : 8.0;
    size_t pieces = (size_t)(gb * 1e9 / PIECE);
    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CUdeviceptr src;
    CK(cuMemAlloc(&src, PIECE));
    CK(cuMemsetD8(src, 1, PIECE));
    std::printf("%zu pieces of %zu MB\n", pieces, PIECE >> 20);
    for (bool thp : {false, true})
        for (int threads : {1, 4, 16}) run(ctx, src, pieces, thp, threads);
    return 0;
}
