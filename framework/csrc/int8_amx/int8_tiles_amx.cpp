// AMX unit of the int8 convolution (layouts in int8_amx.h): the work item's tile loop, once
// on the real tiles and once on emulated ones (the same body, included twice with other
// tile macros), and the transposing requantization of the accumulators.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "int8_amx/int8_amx.h"
#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_requant_amx.h"
#include "conv/transpose_avx512.h"

namespace tianyuan {
namespace int8 {
namespace {

// palette 1: tiles 0-3 accumulators (16 rows x 64 bytes of s32), 4-5 the u8 operands
// (16 positions x 64 k), 6-7 the s8 operands (16 k-quads x 16 channels x 4 bytes).
struct alignas(64) TileConfig {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

// The emulated tiles: the instructions' semantics on plain arrays, per thread.
thread_local uint8_t emu[8][16][64];

inline void emu_load(int t, const void* p, int64_t stride) {
    for (int r = 0; r < 16; ++r)
        std::memcpy(emu[t][r], static_cast<const uint8_t*>(p) + r * stride, 64);
}
inline void emu_store(int t, void* p, int64_t stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(static_cast<uint8_t*>(p) + r * stride, emu[t][r], 64);
}
inline void emu_zero(int t) { std::memset(emu[t], 0, sizeof(emu[t])); }
// TDPBUSD (ASigned false): c[m][n] += sum over 16 k-quads q and i < 4 of u8 a[m][4q + i] * s8
// b[q][4n + i], 32-bit sums that wrap; TDPBSUD (true): a's bytes s8 and b's u8.
template <bool ASigned>
inline void emu_dp(int c, int a, int b) {
    for (int m = 0; m < 16; ++m) {
        for (int n = 0; n < 16; ++n) {
            uint32_t acc;
            std::memcpy(&acc, &emu[c][m][4 * n], 4);
            for (int q = 0; q < 16; ++q)
                for (int i = 0; i < 4; ++i) {
                    const uint8_t x = emu[a][m][4 * q + i], y = emu[b][q][4 * n + i];
                    acc += ASigned ? static_cast<uint32_t>(static_cast<int8_t>(x) * int32_t{y})
                                   : static_cast<uint32_t>(int32_t{x} * static_cast<int8_t>(y));
                }
            std::memcpy(&emu[c][m][4 * n], &acc, 4);
        }
    }
}

}  // namespace

// The real tiles. The intrinsics' asm names no memory, hence the compiler barriers.
#define TY_TILE_LOAD(t, p, s) _tile_loadd(t, p, s)
#define TY_TILE_STORE(t, p, s) _tile_stored(t, p, s)
#define TY_TILE_ZERO(t) _tile_zero(t)
#define TY_TILE_DP(c, a, b) _tile_dpbusd(c, a, b)
#define TY_TILE_DPSU(c, a, b) _tile_dpbsud(c, a, b)
#define TY_ITEM_NAME amx_item_tiles
#define TY_STORE_NAME amx_store_tiles
#define TY_GEMM_NAME amx_gemm_block_tiles
#include "int8_amx/int8_tiles_body.h"
#undef TY_TILE_LOAD
#undef TY_TILE_STORE
#undef TY_TILE_ZERO
#undef TY_TILE_DP
#undef TY_TILE_DPSU
#undef TY_ITEM_NAME
#undef TY_STORE_NAME
#undef TY_GEMM_NAME

#define TY_TILE_LOAD(t, p, s) emu_load(t, p, s)
#define TY_TILE_STORE(t, p, s) emu_store(t, p, s)
#define TY_TILE_ZERO(t) emu_zero(t)
#define TY_TILE_DP(c, a, b) emu_dp<false>(c, a, b)
#define TY_TILE_DPSU(c, a, b) emu_dp<true>(c, a, b)
#define TY_ITEM_NAME amx_item_emulated
#define TY_STORE_NAME amx_store_emulated
#define TY_GEMM_NAME amx_gemm_block_emulated
#include "int8_amx/int8_tiles_body.h"
#undef TY_TILE_LOAD
#undef TY_TILE_STORE
#undef TY_TILE_ZERO
#undef TY_TILE_DP
#undef TY_TILE_DPSU
#undef TY_ITEM_NAME
#undef TY_STORE_NAME
#undef TY_GEMM_NAME

void amx_tiles_begin() {
    TileConfig cfg;
    std::memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int t = 0; t < 8; ++t) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    // Not _tile_loadconfig: GCC 12's asm for it declares only the config's first 8 bytes as
    // read, so the stores of colsb and rows above were dropped as dead (objdump: zeroing and
    // the palette only), and the first tile instruction raised #UD - found by running the
    // real tiles under Bochs 3.0's Sapphire Rapids model. The whole struct is the operand.
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

void amx_tiles_end() { _tile_release(); }

int64_t amx_peak_steps(int64_t steps) {
    alignas(64) static const uint8_t zeros[1024] = {};
    alignas(64) int32_t out[256];
    amx_tiles_begin();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, zeros, 64);
    _tile_loadd(5, zeros, 64);
    _tile_loadd(6, zeros, 64);
    _tile_loadd(7, zeros, 64);
    for (int64_t i = 0; i < steps; ++i) {
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(1, 4, 7);
        _tile_dpbusd(2, 5, 6);
        _tile_dpbusd(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    amx_tiles_end();
    __asm__ volatile("" ::: "memory");
    return out[0] + steps;
}

namespace {

// Column x (< 64) of 16 rows, its 16 bytes (ch < 16: src[ch * lds + x]), to dst + (x % S) *
// phase + (x / S) * ldd: S = 1, the rows transposed; S = 2, the even and odd columns to two
// planes `phase` bytes apart. Four rounds of unpacks (bytes, words, dwords, qwords) leave, in
// 128-bit lane L of register 8H + 4G + 2E + F, the 16 channels of column 16L + 8H + 4G + 2E +
// F. Columns x >= len are not written; a holds the 16 rows and is clobbered.
template <int S>
inline void transpose_16x64(__m512i* a, uint8_t* dst, int64_t ldd, int64_t phase, int64_t len) {
    const auto col = [&](int64_t x) { return dst + x % S * phase + x / S * ldd; };
    __m512i b[16];
    for (int p = 0; p < 8; ++p) {  // channel pairs; [p][H]
        b[2 * p] = _mm512_unpacklo_epi8(a[2 * p], a[2 * p + 1]);
        b[2 * p + 1] = _mm512_unpackhi_epi8(a[2 * p], a[2 * p + 1]);
    }
    for (int q = 0; q < 4; ++q)  // channel quads; [q][H][G]
        for (int h = 0; h < 2; ++h) {
            a[4 * q + 2 * h] = _mm512_unpacklo_epi16(b[4 * q + h], b[4 * q + 2 + h]);
            a[4 * q + 2 * h + 1] = _mm512_unpackhi_epi16(b[4 * q + h], b[4 * q + 2 + h]);
        }
    for (int o = 0; o < 2; ++o)  // channel octets; [o][H][G][E]
        for (int hg = 0; hg < 4; ++hg) {
            b[8 * o + 2 * hg] = _mm512_unpacklo_epi32(a[8 * o + hg], a[8 * o + 4 + hg]);
            b[8 * o + 2 * hg + 1] = _mm512_unpackhi_epi32(a[8 * o + hg], a[8 * o + 4 + hg]);
        }
    for (int hge = 0; hge < 8; ++hge) {  // all 16 channels; [H][G][E][F]
        a[2 * hge] = _mm512_unpacklo_epi64(b[hge], b[8 + hge]);
        a[2 * hge + 1] = _mm512_unpackhi_epi64(b[hge], b[8 + hge]);
    }
    if (len >= 64) {
        for (int j = 0; j < 16; ++j) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(col(j)), _mm512_castsi512_si128(a[j]));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(col(16 + j)),
                             _mm512_extracti32x4_epi32(a[j], 1));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(col(32 + j)),
                             _mm512_extracti32x4_epi32(a[j], 2));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(col(48 + j)),
                             _mm512_extracti32x4_epi32(a[j], 3));
        }
        return;
    }
    for (int j = 0; j < 16; ++j) {
        alignas(64) uint8_t cols[64];  // columns j, 16 + j, 32 + j, 48 + j
        _mm512_store_si512(cols, a[j]);
        for (int64_t l = 0; 16 * l + j < len; ++l) std::memcpy(col(16 * l + j), cols + 16 * l, 16);
    }
}

}  // namespace

void amx_transpose(const uint8_t* src, int64_t c, int64_t n, uint8_t* dst) {
    __m512i a[16];
    for (int64_t c0 = 0; c0 < c; c0 += 16) {
        for (int64_t x0 = 0; x0 < n; x0 += 64) {
            const __mmask64 m = low_mask64(n - x0);
            for (int i = 0; i < 16; ++i) a[i] = _mm512_maskz_loadu_epi8(m, src + (c0 + i) * n + x0);
            transpose_16x64<1>(a, dst + x0 * c + c0, c, 0, n - x0);
        }
    }
}

void amx_transpose_rows(const uint8_t* src, int64_t lds, uint64_t valid, uint8_t z,
                        uint8_t flip, int64_t len, uint8_t* dst, int64_t ldd, int64_t phase) {
    const __m512i vz = _mm512_set1_epi8(static_cast<char>(z));
    const __m512i vflip = _mm512_set1_epi8(static_cast<char>(flip));
    __m512i a[16];
    for (int i = 0; i < 16; ++i) {
        const __m512i v = _mm512_maskz_loadu_epi8(valid, src + i * lds);
        a[i] = _mm512_mask_mov_epi8(vz, valid, _mm512_xor_si512(v, vflip));
    }
    if (phase) {
        transpose_16x64<2>(a, dst, ldd, phase, len);
    } else {
        transpose_16x64<1>(a, dst, ldd, 0, len);
    }
}

void amx_window(int64_t v, int64_t wph, int64_t ow, int64_t nv, AmxWindow& w) {
    w.segs = 0;
    int64_t oy = v / wph, ox = v % wph;
    for (int64_t i = 0; i < 16; ++oy, ox = 0) {  // the run of row oy: window bits [i, i + len)
        const int64_t len = std::min<int64_t>(16 - i, wph - ox);
        const int64_t real = std::max<int64_t>(
            0, std::min(std::min(len, ow - ox), nv - (v + i)));
        if (real > 0) {
            w.off[w.segs] = v - oy * (wph - ow);  // + i: row oy's column ox
            w.mask[w.segs++] = static_cast<uint16_t>(((1u << real) - 1) << i);
        }
        i += len;
    }
}

void amx_gemm_flush(AmxGemmState& st) {
    if (!st.acc) return;
    const RowDrain d = row_drain(st);
    for (int piece = 0; piece < kRowPieces; ++piece) row_drain_piece(d, piece);
    st.acc = nullptr;
}

void amx_requant(const AmxPending& pending) {
    Drain d(pending);
    for (int i = 0; i < kAmxPieces; ++i) drain_piece(d, i);
}

}  // namespace int8
}  // namespace tianyuan
