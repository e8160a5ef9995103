// A host check of the streaming kernels' two decodes (kernels/df11_escape_table.cuh): for every 24-bit word of eight
// 3-bit codes (with other bits above them, random member tables mapping code 7 to exponent 0, random held escapes),
// ts_decode8_bits's recipe (codes spread into nibbles, the escapes' selector from ts_bits_table) gives the exponents,
// the held escapes left and the count consumed of ts_decode8's (ts_table's .x and .y). The tables are the header's
// own constexpr tables and ts_nibbles; prmt and the two recipes are modelled here, as the device functions write them.
//   nvcc -O2 -o escape_bits_check kernels/harness/escape_bits_check.cu && ./escape_bits_check   (no GPU; ~1 s)
// Written for this project.
#include <cstdint>
#include <cstdio>

#include "../df11_escape_table.cuh"

static uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel, bool& bad) {   // prmt.b32, default mode
    const uint64_t bytes = (uint64_t)b << 32 | a;
    uint32_t r = 0;
    for (int n = 0; n < 4; ++n) {
        const uint32_t s = (sel >> (4 * n)) & 15u;
        bad |= (s & 8u) != 0;   // the kernels' selectors never ask for sign replication
        r |= (uint32_t)(bytes >> (8 * (s & 7u)) & 0xffu) << (8 * n);
    }
    return r;
}

int main() {
    static const TsTable tab;
    static const TsBitsTable bits;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    auto next = [&] { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; };
    long mismatches = 0;
    bool bad_selector = false;
    for (uint32_t c = 0; c < (1u << 24); ++c) {
        const uint32_t v = c | (uint32_t)(next() >> 40) << 24;
        const uint32_t t0 = (uint32_t)next(), t1 = (uint32_t)next() & 0x00ffffffu;
        const uint64_t held = next();
        // ts_decode8
        uint64_t h = held;
        const uint32_t ax = tab.e[v & 0xfffu], bx = tab.e[(v >> 12) & 0xfffu];
        const uint32_t ay = tab.e[4096 + ((ax >> 16) & 15u)], by = tab.e[4096 + ((bx >> 16) & 15u)];
        const uint32_t lo = prmt(prmt(t0, t1, ax & 0xffffu, bad_selector), (uint32_t)h, ay & 0xffffu, bad_selector);
        h >>= ax >> 24;
        const uint32_t hi = prmt(prmt(t0, t1, bx & 0xffffu, bad_selector), (uint32_t)h, by & 0xffffu, bad_selector);
        h >>= bx >> 24;
        const uint32_t used = ((ax >> 24) + (bx >> 24)) >> 3;
        // ts_decode8_bits
        uint64_t g = held;
        const uint32_t sel = ts_nibbles(v), esc = v & (v >> 1) & (v >> 2);
        const uint32_t ylo = bits.e[esc & 0x249u], yhi = bits.e[(esc >> 12) & 0x249u];
        const uint32_t lo2 = prmt(prmt(t0, t1, sel & 0xffffu, bad_selector), (uint32_t)g, ylo & 0xffffu, bad_selector);
        g >>= ylo >> 24;
        const uint32_t hi2 = prmt(prmt(t0, t1, sel >> 16, bad_selector), (uint32_t)g, yhi & 0xffffu, bad_selector);
        g >>= yhi >> 24;
        const uint32_t used2 = ((ylo >> 24) + (yhi >> 24)) >> 3;
        if (lo != lo2 || hi != hi2 || h != g || used != used2) {
            if (mismatches++ < 5) printf("code word %06x: the two decodes differ\n", c);
        }
    }
    printf("%s: %u code words, %ld differ%s\n", mismatches || bad_selector ? "FAIL" : "PASS", 1u << 24, mismatches,
           bad_selector ? ", a selector with bit 3 set" : "");
    return mismatches || bad_selector ? 1 : 0;
}
