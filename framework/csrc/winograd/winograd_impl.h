// Winograd F(2x2, 3x3) transform drivers shared by every ISA translation unit (winograd.cpp,
// winograd_avx2.cpp, winograd_avx512.cpp): each includes this file into its own anonymous
// namespace and compiles it with its own flags. Plain loops over a row of tiles (the index tx
// is the vector lane), so the compiler vectorises them for the TU's ISA; no STL.
//
// Why rows of tiles: the 16 transformed positions are 16 planes of v (16, C, T) whose
// distance is often a multiple of 4 KiB; writing one tile at a time touches 16 lines that map
// to the same cache set. A whole tile row writes 16 contiguous runs instead.
// Stride-2 tile columns are read as even / odd copies of the (zero-padded) input row, so
// tile tx reads e[tx], o[tx], e[tx + 1], o[tx + 1]: unit-stride loads only.
#pragma once

#include <cstdint>

#include "winograd/winograd.h"

namespace tianyuan {
namespace {

constexpr int64_t kWinoParallelMin = 1 << 15;

// Even / odd columns of input row y, shifted by the left padding; zero outside the image.
// e[j] = x[y, 2j - pl], o[j] = x[y, 2j + 1 - pl], j = 0 .. tw (tw + 1 entries each).
template <typename T>
void wino_split_row(const T* plane, const WinogradGeometry& g, int64_t y, T* e, T* o) {
    const int64_t tw = g.tw();
    if (y < 0 || y >= g.h) {
        for (int64_t j = 0; j <= tw; ++j) e[j] = o[j] = T(0);
        return;
    }
    const T* row = plane + y * g.w;
    for (int64_t j = 0; j <= tw; ++j) {
        const int64_t xe = 2 * j - g.pl, xo = xe + 1;
        e[j] = (xe >= 0 && xe < g.w) ? row[xe] : T(0);
        o[j] = (xo >= 0 && xo < g.w) ? row[xo] : T(0);
    }
}

// One tile row: rows[r] holds (even, odd) of input row 2 ty - pt + r; dst[e * stride + tx].
template <typename T>
void wino_input_row(T* const rows[8], int64_t tw, T* __restrict dst, int64_t stride) {
    const T* __restrict e0 = rows[0];
    const T* __restrict o0 = rows[1];
    const T* __restrict e1 = rows[2];
    const T* __restrict o1 = rows[3];
    const T* __restrict e2 = rows[4];
    const T* __restrict o2 = rows[5];
    const T* __restrict e3 = rows[6];
    const T* __restrict o3 = rows[7];
    for (int64_t tx = 0; tx < tw; ++tx) {
        // t = B^T d: column q of the tile is (e[tx], o[tx], e[tx + 1], o[tx + 1])[q]
        const T t00 = e0[tx] - e2[tx], t01 = o0[tx] - o2[tx];
        const T t02 = e0[tx + 1] - e2[tx + 1], t03 = o0[tx + 1] - o2[tx + 1];
        const T t10 = e1[tx] + e2[tx], t11 = o1[tx] + o2[tx];
        const T t12 = e1[tx + 1] + e2[tx + 1], t13 = o1[tx + 1] + o2[tx + 1];
        const T t20 = e2[tx] - e1[tx], t21 = o2[tx] - o1[tx];
        const T t22 = e2[tx + 1] - e1[tx + 1], t23 = o2[tx + 1] - o1[tx + 1];
        const T t30 = e1[tx] - e3[tx], t31 = o1[tx] - o3[tx];
        const T t32 = e1[tx + 1] - e3[tx + 1], t33 = o1[tx + 1] - o3[tx + 1];
        // V = t B, row by row
        dst[0 * stride + tx] = t00 - t02;
        dst[1 * stride + tx] = t01 + t02;
        dst[2 * stride + tx] = t02 - t01;
        dst[3 * stride + tx] = t01 - t03;
        dst[4 * stride + tx] = t10 - t12;
        dst[5 * stride + tx] = t11 + t12;
        dst[6 * stride + tx] = t12 - t11;
        dst[7 * stride + tx] = t11 - t13;
        dst[8 * stride + tx] = t20 - t22;
        dst[9 * stride + tx] = t21 + t22;
        dst[10 * stride + tx] = t22 - t21;
        dst[11 * stride + tx] = t21 - t23;
        dst[12 * stride + tx] = t30 - t32;
        dst[13 * stride + tx] = t31 + t32;
        dst[14 * stride + tx] = t32 - t31;
        dst[15 * stride + tx] = t31 - t33;
    }
}

// Tile rows of one plane staged together: the stage is (16, kWinoStage) and is copied out as
// 16 long contiguous runs (the direct writes alias in the cache when stride is a 4 KiB
// multiple, e.g. 64 channels of 56x56, and run an order of magnitude slower).
constexpr int64_t kWinoStage = 1024;
constexpr int64_t kWinoStageStride = kWinoStage + 16;  // stage rows must not alias either

// Copies columns [0, count) of the (16, kWinoStageStride) stage to dst[e * stride + ..].
template <typename T>
void wino_flush(const T* stage, int64_t count, T* dst, int64_t stride) {
    for (int e = 0; e < 16; ++e) {
        const T* __restrict s = stage + e * kWinoStageStride;
        T* __restrict d = dst + e * stride;
        for (int64_t k = 0; k < count; ++k) d[k] = s[k];
    }
}

// One (n, c) plane -> its th * tw tiles at dst[e * stride + t].
template <typename T>
void wino_input_plane(const T* plane, const WinogradGeometry& g, T* const rows[8], T* stage,
                      T* dst, int64_t stride) {
    const int64_t th = g.th(), tw = g.tw();
    const int64_t chunk = tw <= kWinoStage ? kWinoStage / tw : 1;  // tile rows per flush
    for (int64_t ty0 = 0; ty0 < th; ty0 += chunk) {
        const int64_t rows_here = th - ty0 < chunk ? th - ty0 : chunk;
        for (int64_t k = 0; k < rows_here; ++k) {
            const int64_t ty = ty0 + k;
            for (int r = 0; r < 4; ++r)
                wino_split_row(plane, g, 2 * ty - g.pt + r, rows[2 * r], rows[2 * r + 1]);
            if (tw > kWinoStage) {  // very wide rows: write straight through
                wino_input_row(rows, tw, dst + ty * tw, stride);
            } else {
                wino_input_row(rows, tw, stage + k * tw, kWinoStageStride);
            }
        }
        if (tw <= kWinoStage) wino_flush(stage, rows_here * tw, dst + ty0 * tw, stride);
    }
}

// x (N, C, H, W) -> v (16, C, T); see winograd.h.
template <typename T>
void wino_input(const T* x, const WinogradGeometry& g, T* v) {
    const int64_t th = g.th(), tw = g.tw(), tiles = g.tiles();
    const int64_t stride = g.c * tiles;  // between the 16 transformed positions
    const int64_t span = tw + 1;
#pragma omp parallel if (16 * stride >= kWinoParallelMin)
    {
        T* buf = new T[8 * span + 16 * kWinoStageStride];  // (even, odd) of 4 input rows; the stage
        T* rows[8];
        for (int k = 0; k < 8; ++k) rows[k] = buf + k * span;
        T* stage = buf + 8 * span;
#pragma omp for collapse(2) schedule(static)
        for (int64_t n = 0; n < g.n; ++n) {
            for (int64_t c = 0; c < g.c; ++c) {
                const T* plane = x + (n * g.c + c) * g.h * g.w;
                wino_input_plane(plane, g, rows, stage, v + c * tiles + n * th * tw, stride);
            }
        }
        delete[] buf;
    }
}

// One tile row of outputs: src[e * stride + tx] -> output rows y0 (and y0 + 1 if `two`).
template <typename T>
void wino_output_row(const T* __restrict s, int64_t stride, int64_t tw, T* __restrict buf,
                     T* y0, T* y1, int64_t ow) {
    T* __restrict a = buf;           // row 0 even / odd columns
    T* __restrict b = buf + tw;
    T* __restrict c = buf + 2 * tw;  // row 1 even / odd columns
    T* __restrict d = buf + 3 * tw;
    for (int64_t tx = 0; tx < tw; ++tx) {
        T m[16];
        for (int e = 0; e < 16; ++e) m[e] = s[e * stride + tx];
        // t = A^T M (2 x 4), then Y = t A (2 x 2)
        const T t00 = m[0] + m[4] + m[8], t01 = m[1] + m[5] + m[9];
        const T t02 = m[2] + m[6] + m[10], t03 = m[3] + m[7] + m[11];
        const T t10 = m[4] - m[8] - m[12], t11 = m[5] - m[9] - m[13];
        const T t12 = m[6] - m[10] - m[14], t13 = m[7] - m[11] - m[15];
        a[tx] = t00 + t01 + t02;
        b[tx] = t01 - t02 - t03;
        c[tx] = t10 + t11 + t12;
        d[tx] = t11 - t12 - t13;
    }
    for (int64_t x = 0; x < ow; ++x) y0[x] = (x & 1) ? b[x >> 1] : a[x >> 1];
    if (y1 == nullptr) return;
    for (int64_t x = 0; x < ow; ++x) y1[x] = (x & 1) ? d[x >> 1] : c[x >> 1];
}

// m (16, Co, T) -> out (N, Co, oh, ow).
template <typename T>
void wino_output(const T* m, const WinogradGeometry& g, int64_t co, T* out) {
    const int64_t th = g.th(), tw = g.tw(), tiles = g.tiles();
    const int64_t stride = co * tiles;
#pragma omp parallel if (16 * stride >= kWinoParallelMin)
    {
        T* buf = new T[4 * tw];
#pragma omp for collapse(2) schedule(static)
        for (int64_t n = 0; n < g.n; ++n) {
            for (int64_t o = 0; o < co; ++o) {
                const T* src = m + o * tiles + n * th * tw;
                T* plane = out + (n * co + o) * g.oh * g.ow;
                for (int64_t ty = 0; ty < th; ++ty) {
                    T* y0 = plane + 2 * ty * g.ow;
                    T* y1 = 2 * ty + 1 < g.oh ? y0 + g.ow : nullptr;
                    wino_output_row(src + ty * tw, stride, tw, buf, y0, y1, g.ow);
                }
            }
        }
        delete[] buf;
    }
}

// w (Co, C, 3, 3) -> u (16, Co, C) for blocks of 64 filters, staged in a local (16, 64) block
// and then copied out row by row: the 16 rows of u are often 4 KiB multiples apart.
template <typename T>
void wino_weight(const T* w, int64_t co, int64_t c, T* u) {
    const int64_t stride = co * c;
    constexpr int64_t kBlock = 64;
#pragma omp parallel for schedule(static) if (16 * stride >= kWinoParallelMin)
    for (int64_t f0 = 0; f0 < stride; f0 += kBlock) {
        const int64_t nb = stride - f0 < kBlock ? stride - f0 : kBlock;
        T tmp[16][kBlock];
        for (int64_t b = 0; b < nb; ++b) {
            const T* g = w + (f0 + b) * 9;
            T t[4][3];  // G g (columns)
            for (int q = 0; q < 3; ++q) {
                t[0][q] = g[q];
                t[1][q] = T(0.5) * (g[q] + g[3 + q] + g[6 + q]);
                t[2][q] = T(0.5) * (g[q] - g[3 + q] + g[6 + q]);
                t[3][q] = g[6 + q];
            }
            for (int r = 0; r < 4; ++r) {  // (G g) G^T (rows)
                tmp[4 * r + 0][b] = t[r][0];
                tmp[4 * r + 1][b] = T(0.5) * (t[r][0] + t[r][1] + t[r][2]);
                tmp[4 * r + 2][b] = T(0.5) * (t[r][0] - t[r][1] + t[r][2]);
                tmp[4 * r + 3][b] = t[r][2];
            }
        }
        for (int e = 0; e < 16; ++e) {
            T* dst = u + e * stride + f0;
            for (int64_t b = 0; b < nb; ++b) dst[b] = tmp[e][b];
        }
    }
}

}  // namespace
}  // namespace tianyuan
