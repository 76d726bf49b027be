// The bindings' shape and geometry checks, one helper per concern, shared by every bind_*.cpp
// (bind_geometry.cpp). Everything a kernel's pointer arithmetic relies on is checked here,
// before any pointer is formed: sizes are int64 and non-negative, products and sums of
// caller-given sizes overflow-checked, and a sliding window (convolution, pooling) fits its
// padded input. Errors are std::invalid_argument (Python's ValueError) naming the op, the
// argument and the input's shape. Each check is O(1) a call.
#pragma once

#include <pybind11/numpy.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

namespace tianyuan {
namespace bind {

// The largest padded image plane (rows x columns, padding included) any kernel takes: the
// float max pool's argmax is an int32 index into a plane, and the int8 kernels copy a padded
// plane into per-thread scratch. Far above any image a model sees (46340 x 46340).
constexpr int64_t kMaxPlane = (int64_t{1} << 31) - 1;

// An input's dimensions (up to 4, N C H W) for checks and messages: from an array, or from a
// shape a caller gives (col2im, the backward ops' input_shape), which may be negative.
struct Dims {
    int64_t d[4] = {0, 0, 0, 0};
    int n = 0;
    std::string str() const;  // "(2, 8, 8, 8)"
};
Dims dims_of(const pybind11::array& a);
Dims dims_of(std::tuple<int64_t, int64_t, int64_t, int64_t> shape);

// a * b and a + b of non-negative sizes, or std::invalid_argument "op: what ... overflows
// int64" (inline: a check is a few instructions; the message is made out of line).
[[noreturn]] void refuse_arithmetic(int64_t a, int64_t b, char sign, const char* op,
                                    const char* what);
inline int64_t checked_mul(int64_t a, int64_t b, const char* op, const char* what) {
    int64_t r = 0;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) refuse_arithmetic(a, b, 'x', op, what);
    return r;
}
inline int64_t checked_add(int64_t a, int64_t b, const char* op, const char* what) {
    int64_t r = 0;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) refuse_arithmetic(a, b, '+', op, what);
    return r;
}

// A caller-given shape (N, C, H, W): every dimension >= 0 and its element count within int64;
// the count. `arg` names it ("input_shape").
int64_t checked_shape(const char* op, const char* arg, const Dims& shape);

// How much padding a window may have on each side, with e = the dilated kernel d (k - 1) + 1:
//   any:          convolutions, PyTorch's rule (bounded only by the padded plane's size);
//   below_extent: p < e (Winograd's F(2x2, 3x3): at most 2);
//   half_extent:  p <= e / 2 (pooling, PyTorch's rule: every window holds a pixel).
enum class PadRule { any, below_extent, half_extent };

// A 2-D sliding window over input (N, C, H, W): kernel, stride, padding (top, bottom, left,
// right) and dilation. window_2d checks kernel, stride, dilation >= 1, padding >= 0 and within
// `rule`, H, W >= 1, the padded plane within kMaxPlane and the dilated kernel within it, all
// in overflow-checked int64, and gives the output size (floor; with `ceil`, PyTorch's
// ceil_mode: one more where the last window starts inside the input or its top padding).
struct Window2d {
    int64_t oh, ow;
};
using Pair = std::pair<int64_t, int64_t>;
using Quad = std::tuple<int64_t, int64_t, int64_t, int64_t>;
Window2d window_2d(const char* op, const Dims& input, Pair kernel, Pair stride, Quad padding,
                   Pair dilation, PadRule rule, bool ceil = false);

// A pool's output size as a caller gives it (the float pools: Python works it out, with
// ceil_mode): out must be window_2d's floor or ceil size, else std::invalid_argument naming
// both.
void check_pool_out(const char* op, const Dims& input, Pair kernel, Pair stride, Pair padding,
                    Pair dilation, Pair out);

// rows x cols elements (a plane, or a kernel's per-thread scratch of that size) within
// kMaxPlane; `what` names it.
void check_plane(const char* op, const char* what, int64_t rows, int64_t cols);

}  // namespace bind
}  // namespace tianyuan
