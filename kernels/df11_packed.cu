// Decode of PACKED EXPONENTS (see df11_packed.cuh and crates/df11-candle/src/packed.rs) to BF16 in global memory:
// the path of larger batches (decode + cuBLAS) and of embeddings for units kept in the packed form.
// Written for this project.
//
// A warp takes 2048-element chunks; lane l the chunk's lane l (8-groups 256c + 32i + l, pass i = 0..7). Its codes
// become exponents through the member's table (PRMT on two registers), its escapes (fetched once per chunk) are
// ORed in, and the eight BF16 values are rebuilt with sign_mantissa and stored (one 16-byte store where aligned and
// inside the range).
//
// HOST GUARANTEES: those of df11_packed.cuh; member_ends ascending, the last = n_elements, n_members >= 1;
// tables[2m], tables[2m+1] member m's exponents for codes 0-3 and 4-7 (code 7 -> 0); 0 <= begin <= end <=
// n_elements.

#include "df11_packed.cuh"

#define DP_THREADS 256
#define DP_MEMBERS 32         // members whose tables are cached in shared memory (more: read from global memory)

extern "C" __global__ void __launch_bounds__(DP_THREADS)
df11_decode_packed(const uint32_t* codes, const uint32_t* chunk_escapes, const uint8_t* lane_starts, uint32_t n_chunks,
                   const uint8_t* escapes, uint32_t n_escapes, const uint32_t* tables, const long long* member_ends,
                   int n_members, const uint8_t* sign_mantissa, long long n_elements, uint16_t* out, long long begin,
                   long long end) {
    __shared__ long long s_ends[DP_MEMBERS];
    __shared__ uint32_t s_tables[2 * DP_MEMBERS];
    for (int i = threadIdx.x; i < min(n_members, DP_MEMBERS); i += DP_THREADS) {
        s_ends[i] = member_ends[i];
        s_tables[2 * i] = tables[2 * i];
        s_tables[2 * i + 1] = tables[2 * i + 1];
    }
    __syncthreads();
    const bool cached = n_members <= DP_MEMBERS;
    const uint32_t lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (DP_THREADS / 32);
    const uint32_t n8 = (uint32_t)((n_elements + 7) >> 3);
    const bool vec = (begin & 7) == 0;
    // A warp decodes chunk c (elements [2048c, 2048c + 2048)): lane l takes 8-groups 256c + 32i + l, i = 0..7.
    for (long long c = (begin >> 11) + (long long)blockIdx.x * (DP_THREADS / 32) + (threadIdx.x >> 5);
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
