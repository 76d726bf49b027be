// Winograd F(2x2, 3x3) transforms for 3x3, stride-1, dilation-1 convolutions (Lavin & Gray,
// "Fast Algorithms for Convolutional Neural Networks", 2016). The 16 products per tile are
// one batched GEMM done by the caller (numpy BLAS): M[e] = U[e] @ V[e], e = 0..15.
//   input tiles  d (4x4) at rows 2*ty - pt .., cols 2*tx - pl .. (0 outside the image)
//   V = B^T d B, B^T = [[1,0,-1,0],[0,1,1,0],[0,-1,1,0],[0,1,0,-1]]   -> v (16, C, T)
//   Y = A^T M A, A^T = [[1,1,1,0],[0,1,-1,-1]]                         -> out (N, Co, oh, ow)
// T = N * th * tw tiles, th = ceil(oh / 2), tw = ceil(ow / 2), tile t = (n * th + ty) * tw + tx.
// Drivers: winograd_impl.h, built generic, AVX2 and AVX-512 (OpenMP over planes). Numpy twin: framework/ops/conv_ref.py (winograd_*_ref).
#pragma once

#include <cstdint>

namespace tianyuan {

struct WinogradGeometry {
    int64_t n, c, h, w;  // input (N, C, H, W)
    int64_t pt, pl;      // top / left padding (bottom / right follow from oh, ow)
    int64_t oh, ow;      // output size
    int64_t th() const { return (oh + 1) / 2; }
    int64_t tw() const { return (ow + 1) / 2; }
    int64_t tiles() const { return n * th() * tw(); }
};

// w (Co, C, 3, 3) -> u (16, Co, C): U = G g G^T, G = [[1,0,0],[.5,.5,.5],[.5,-.5,.5],[0,0,1]].
template <typename T>
void winograd_weight_transform(const T* w, int64_t co, int64_t c, T* u);

// x (N, C, H, W) -> v (16, C, T).
template <typename T>
void winograd_input_transform(const T* x, const WinogradGeometry& g, T* v);

// m (16, Co, T) -> out (N, Co, oh, ow); `co` output channels (g.c is ignored).
template <typename T>
void winograd_output_transform(const T* m, const WinogradGeometry& g, int64_t co, T* out);

// float32 builds of the same drivers with the ISA's flags (winograd_avx2.cpp, _avx512.cpp).
void winograd_weight_avx2(const float* w, int64_t co, int64_t c, float* u);
void winograd_input_avx2(const float* x, const WinogradGeometry& g, float* v);
void winograd_output_avx2(const float* m, const WinogradGeometry& g, int64_t co, float* out);
void winograd_weight_avx512(const float* w, int64_t co, int64_t c, float* u);
void winograd_input_avx512(const float* x, const WinogradGeometry& g, float* v);
void winograd_output_avx512(const float* m, const WinogradGeometry& g, int64_t co, float* out);

}  // namespace tianyuan
