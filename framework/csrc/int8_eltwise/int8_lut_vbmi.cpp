// A byte-to-byte table lookup on AVX-512 VBMI: every requantization with one 8-bit input
// (a concat part's rescale) is a function of the byte alone, so a 256-entry table built from
// the scalar formula (int8_eltwise.cpp) maps 64 bytes with two vpermi2b and a blend, exact by
// construction. The table stays in registers over a thread's rows (ShuffleNetV2's last
// stage has rows of 49 bytes).
#include <immintrin.h>

#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {

void map_rows_vbmi(const uint8_t* table, const uint8_t* data, const PartRows& rows, int64_t r0,
                   int64_t r1, uint8_t* out, int64_t out_inner) {
    const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
    const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
    const int64_t n = rows.inner;
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* in = rows.row(data, r);
        uint8_t* dst = out + r * out_inner;
        for (int64_t i = 0; i < n; i += 64) {
            const __mmask64 k = low_mask64(n - i);
            const __m512i x = _mm512_maskz_loadu_epi8(k, in + i);
            // vpermi2b reads the index's low 7 bits: entries x & 127 of each half
            const __m512i lo = _mm512_permutex2var_epi8(t0, x, t1);
            const __m512i hi = _mm512_permutex2var_epi8(t2, x, t3);
            _mm512_mask_storeu_epi8(dst + i, k,
                                    _mm512_mask_blend_epi8(_mm512_movepi8_mask(x), lo, hi));
        }
    }
}

}  // namespace int8
}  // namespace tianyuan
