// AVX512-VNNI tile of the int8 convolution (layouts in int8_cgemm.h): R output channels
// x P panels of 16 positions in R*P zmm accumulators (up to 6 x 4). Per k-quad: P loads of
// the activations at that quad's offset (u8 operand) and R broadcasts of 4 weight bytes
// (s8 operand); the store requantizes each accumulator with its channel's (bias, m, shift)
// exactly like reference.requantize and writes a channel's up to 64 bytes into its NCHW row
// (or, given RowParams.segs, one masked store per segment), asking for the line
// RowParams.ahead bytes further along the row for writing.
// A few positions past the panels (E, the block's npos % 16; vnni_lanes says how few) run
// the other way round, the channels in the lanes: per k-quad one ymm of the block's weight
// quads against each position's activation quad broadcast, E ymm `vpdpbusd` where one more
// panel costs R zmm ones. Batch 1 at 7x7 (49 positions: 3 panels + 1) and 14x14 (blocks of
// 64 and 34 on 2 threads: 34 = 2 panels + 2) had computed 64 and 48 lanes for them. 8
// positions alone as extras cost as much as one more panel, an eighth of a panel each: extras
// stop at kExtraMax = 4 (bench/RESULTS.md, int8 kernels: extras).
#include <immintrin.h>

#include <cstdint>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_requant_avx512.h"

namespace tianyuan {
namespace int8 {
namespace {

// Named accumulators: GCC keeps arrays of vectors in memory.
#define TY_ACC(i) __m512i c##i##0 = z, c##i##1 = z, c##i##2 = z, c##i##3 = z;
#define TY_DOT(i)                                                              \
    if (R > i) {                                                               \
        const __m512i wv = _mm512_set1_epi32(load4(wq + i * kGroup));          \
        if (P > 0) c##i##0 = _mm512_dpbusd_epi32(c##i##0, x0, wv);             \
        if (P > 1) c##i##1 = _mm512_dpbusd_epi32(c##i##1, x1, wv);             \
        if (P > 2) c##i##2 = _mm512_dpbusd_epi32(c##i##2, x2, wv);             \
        if (P > 3) c##i##3 = _mm512_dpbusd_epi32(c##i##3, x3, wv);             \
    }
// Extra position e (of E) past the P panels: lane i its sum for channel i.
#define TY_XACC(e) __m256i x##e##s = _mm256_setzero_si256();
#define TY_XDOT(e)                                                                       \
    if (E > e) {                                                                         \
        const __m256i xb = _mm256_set1_epi32(load4(a + (16 * P + e) * kGroup));         \
        x##e##s = _mm256_dpbusd_epi32(x##e##s, xb, wr);                                  \
    }
#define TY_XSAVE(e)                                                                      \
    if (E > e) {                                                                         \
        alignas(32) int32_t lanes[8];                                                    \
        _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), x##e##s);                  \
        for (int i = 0; i < R; ++i) acc[4 * i * 16 + 16 * P + e] = lanes[i];            \
    }
// The accumulators go to the stack once the loop is done, and each channel's row is then
// requantized as one 64-byte vector (requant_row64) and stored at once, unmasked when the row
// is whole (it had been P conversions and 16-byte stores; masked stores of whole rows are
// slower). Requantizing straight from the registers, every row's vectors live at once, had
// made GCC spill accumulators inside the loop (bench/RESULTS.md, int8 kernels: tried).
#define TY_SAVE(i)                                                           \
    if (R > i) {                                                             \
        if (P > 0) _mm512_store_si512(acc + (4 * i) * 16, c##i##0);          \
        if (P > 1) _mm512_store_si512(acc + (4 * i + 1) * 16, c##i##1);      \
        if (P > 2) _mm512_store_si512(acc + (4 * i + 2) * 16, c##i##2);      \
        if (P > 3) _mm512_store_si512(acc + (4 * i + 3) * 16, c##i##3);      \
    }

// The weights are one sequential stream per call, read from memory where they pass L2
// (layer4 of ResNet-18: 2.4 MB a layer): prefetched 2 KB ahead (bench/RESULTS.md, int8
// kernels: weights prefetched).
constexpr int64_t kWeightAhead = 2048;

// R channels x (P panels + E positions) = npos.
template <int R, int P, int E>
void tile(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t kp, int64_t npos,
          const RowParams& q, const Requant& r, uint8_t* out, int64_t ldo) {
    const __m512i z = _mm512_setzero_si512();
    constexpr int kPanels = P + (E > 0 ? 1 : 0);  // requantized
    TY_ACC(0) TY_ACC(1) TY_ACC(2) TY_ACC(3) TY_ACC(4) TY_ACC(5)
    TY_XACC(0) TY_XACC(1) TY_XACC(2) TY_XACC(3)
    for (int64_t g = 0; g < kp / kGroup; ++g) {
        const uint8_t* a = acts + qoff[g];
        const int8_t* wq = w + g * R * kGroup;
        _mm_prefetch(reinterpret_cast<const char*>(wq + kWeightAhead), _MM_HINT_T0);
        const __m512i x0 = P > 0 ? _mm512_loadu_si512(a) : z;
        const __m512i x1 = P > 1 ? _mm512_loadu_si512(a + 64) : z;
        const __m512i x2 = P > 2 ? _mm512_loadu_si512(a + 128) : z;
        const __m512i x3 = P > 3 ? _mm512_loadu_si512(a + 192) : z;
        TY_DOT(0) TY_DOT(1) TY_DOT(2) TY_DOT(3) TY_DOT(4) TY_DOT(5)
        if (E > 0) {  // lane i: channel i's 4 weight bytes
            const __m256i wr = _mm256_maskz_loadu_epi32((1 << R) - 1, wq);
            TY_XDOT(0) TY_XDOT(1) TY_XDOT(2) TY_XDOT(3)
        }
    }
    alignas(64) int32_t acc[R * 4 * 16];
    TY_SAVE(0) TY_SAVE(1) TY_SAVE(2) TY_SAVE(3) TY_SAVE(4) TY_SAVE(5)
    TY_XSAVE(0) TY_XSAVE(1) TY_XSAVE(2) TY_XSAVE(3)
    const RowQ rq = row_q(r);
    const __mmask64 m = low_mask64(npos);
    for (int i = 0; i < R; ++i) {
        const ChannelQ cq = channel_q(q.bias[i], q.multiplier[i], q.shift[i], r);
        const int32_t* a = acc + 4 * i * 16;
        const __m512i v = requant_row64(
            requant16_y(_mm512_load_si512(a), cq),
            kPanels > 1 ? requant16_y(_mm512_load_si512(a + 16), cq) : z,
            kPanels > 2 ? requant16_y(_mm512_load_si512(a + 32), cq) : z,
            kPanels > 3 ? requant16_y(_mm512_load_si512(a + 48), cq) : z, rq);
        if (q.ahead)
            __builtin_prefetch(out + i * ldo + (q.segs ? q.segs[0].off : 0) + q.ahead, 1, 3);
        if (q.segs) {
            for (int64_t t = 0; t < q.nsegs; ++t)
                _mm512_mask_storeu_epi8(out + i * ldo + q.segs[t].off, q.segs[t].mask, v);
        } else if (npos >= 64) {
            _mm512_storeu_si512(out + i * ldo, v);
        } else {
            _mm512_mask_storeu_epi8(out + i * ldo, m, v);
        }
    }
}

#undef TY_ACC
#undef TY_DOT
#undef TY_SAVE
#undef TY_XACC
#undef TY_XDOT
#undef TY_XSAVE

using TileFn = void (*)(const uint8_t*, const int64_t*, const int8_t*, int64_t, int64_t,
                        const RowParams&, const Requant&, uint8_t*, int64_t);

template <int P>
TileFn pick_extras(int64_t e) {
    switch (e) {
        case 1: return tile<kOcBlock, P, 1>;
        case 2: return tile<kOcBlock, P, 2>;
        case 3: return tile<kOcBlock, P, 3>;
        default: return tile<kOcBlock, P, 4>;
    }
}

template <int R>
TileFn pick_panels(int64_t npos) {
    const int64_t p = npos / 16, e = npos % 16;
    if (R == kOcBlock && e > 0 && vnni_lanes(npos) == npos) {  // extras in full blocks
        switch (p) {
            case 0: return pick_extras<0>(e);
            case 1: return pick_extras<1>(e);
            case 2: return pick_extras<2>(e);
            default: return pick_extras<3>(e);
        }
    }
    switch ((npos + 15) / 16) {
        case 1: return tile<R, 1, 0>;
        case 2: return tile<R, 2, 0>;
        case 3: return tile<R, 3, 0>;
        default: return tile<R, 4, 0>;
    }
}

}  // namespace

void cgemm_tile_vnni(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t kp,
                     int64_t rows, int64_t npos, const RowParams& q, const Requant& r,
                     uint8_t* out, int64_t ldo) {
    TileFn fn;
    switch (rows) {
        case 1: fn = pick_panels<1>(npos); break;
        case 2: fn = pick_panels<2>(npos); break;
        case 3: fn = pick_panels<3>(npos); break;
        case 4: fn = pick_panels<4>(npos); break;
        case 5: fn = pick_panels<5>(npos); break;
        default: fn = pick_panels<6>(npos); break;
    }
    fn(acts, qoff, w, kp, npos, q, r, out, ldo);
}

}  // namespace int8
}  // namespace tianyuan
