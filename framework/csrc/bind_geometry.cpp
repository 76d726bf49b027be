// The bindings' shape and geometry checks (bind_geometry.h). The messages are built only to
// be thrown: a check that passes costs a few compares.
#include "bind_geometry.h"

#include <stdexcept>
#include <string>

namespace tianyuan {
namespace bind {
namespace {

std::string pair_str(int64_t a, int64_t b) {
    return "(" + std::to_string(a) + ", " + std::to_string(b) + ")";
}

std::string quad_str(const Quad& q) {
    return "(" + std::to_string(std::get<0>(q)) + ", " + std::to_string(std::get<1>(q)) + ", " +
           std::to_string(std::get<2>(q)) + ", " + std::to_string(std::get<3>(q)) + ")";
}

[[noreturn]] void refuse(const char* op, const std::string& what, const Dims& input) {
    throw std::invalid_argument(std::string(op) + ": " + what + " (input " + input.str() + ")");
}

// One axis of window_2d: its name ("height"), the input's size, the window's kernel, stride,
// padding before and after, dilation; checked (see window_2d), the output length.
struct Axis {
    const char* name;
    int64_t size, k, s, lo, hi, d;
};

int64_t axis_out(const char* op, const Dims& input, const Axis& a, PadRule rule, bool ceil,
                 int64_t* padded) {
    // the strings are made only where the check fails (one a call dominated the check)
    const auto name = [&] { return std::string(a.name); };
    if (a.size < 1) refuse(op, "the input has no " + name(), input);
    const int64_t extent = checked_add(checked_mul(a.d, a.k - 1, op, "the dilated kernel"), 1,
                                       op, "the dilated kernel");
    *padded = checked_add(checked_add(a.size, a.lo, op, "the padded input"), a.hi, op,
                          "the padded input");
    const auto kernel = [&] {
        return "kernel " + name() + " " + std::to_string(a.k) +
               (a.d > 1 ? " (dilation " + std::to_string(a.d) + ": " + std::to_string(extent) +
                              " wide)"
                        : std::string());
    };
    const bool below = a.lo < extent && a.hi < extent;
    const bool half = a.lo <= extent / 2 && a.hi <= extent / 2;
    if ((rule == PadRule::below_extent && !below) || (rule == PadRule::half_extent && !half)) {
        refuse(op, name() + " padding (" + std::to_string(a.lo) + ", " + std::to_string(a.hi) +
                       ") must be " +
                       (rule == PadRule::half_extent ? "at most half the " : "smaller than the ") +
                       kernel(),
               input);
    }
    if (*padded < extent) {
        refuse(op, kernel() + " is larger than the padded input " + name() + " " +
                       std::to_string(*padded) + " (" + std::to_string(a.size) + " + padding " +
                       std::to_string(a.lo) + " + " + std::to_string(a.hi) + ")",
               input);
    }
    const int64_t span = *padded - extent, out = span / a.s + 1;
    if (!ceil || span % a.s == 0) return out;
    // ceil_mode: one more output, unless it would start past the input and its top padding
    int64_t start = 0;
    const bool past = __builtin_mul_overflow(out, a.s, &start) || start >= a.size + a.lo;
    return past ? out : out + 1;
}

}  // namespace

std::string Dims::str() const {
    std::string s = "(";
    for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + ")";
}

Dims dims_of(const pybind11::array& a) {
    Dims out;
    out.n = a.ndim() < 4 ? static_cast<int>(a.ndim()) : 4;
    for (int i = 0; i < out.n; ++i) out.d[i] = a.shape(i);
    return out;
}

Dims dims_of(std::tuple<int64_t, int64_t, int64_t, int64_t> shape) {
    Dims out;
    out.n = 4;
    std::tie(out.d[0], out.d[1], out.d[2], out.d[3]) = shape;
    return out;
}

void refuse_arithmetic(int64_t a, int64_t b, char sign, const char* op, const char* what) {
    throw std::invalid_argument(std::string(op) + ": " + what + " (" + std::to_string(a) + " " +
                                sign + " " + std::to_string(b) + ") " +
                                (a < 0 || b < 0 ? "is negative" : "overflows int64"));
}

int64_t checked_shape(const char* op, const char* arg, const Dims& shape) {
    int64_t count = 1;
    for (int i = 0; i < shape.n; ++i) {
        if (shape.d[i] < 0 || __builtin_mul_overflow(count, shape.d[i], &count)) {
            throw std::invalid_argument(std::string(op) + ": " + arg + " " + shape.str() +
                                        (shape.d[i] < 0 ? " has a negative size"
                                                        : "'s element count overflows int64"));
        }
    }
    return count;
}

Window2d window_2d(const char* op, const Dims& input, Pair kernel, Pair stride, Quad padding,
                   Pair dilation, PadRule rule, bool ceil) {
    const auto [pt, pb, pl, pr] = padding;
    if (input.n != 4) refuse(op, "the input must be (N, C, H, W)", input);
    if (input.d[0] < 0 || input.d[1] < 0) refuse(op, "the input has a negative size", input);
    if (kernel.first < 1 || kernel.second < 1 || stride.first < 1 || stride.second < 1 ||
        dilation.first < 1 || dilation.second < 1 || pt < 0 || pb < 0 || pl < 0 || pr < 0) {
        refuse(op, "kernel " + pair_str(kernel.first, kernel.second) + ", stride " +
                       pair_str(stride.first, stride.second) + " and dilation " +
                       pair_str(dilation.first, dilation.second) + " must be >= 1, padding " +
                       quad_str(padding) + " >= 0",
               input);
    }
    int64_t hp = 0, wp = 0;
    const Window2d out{
        axis_out(op, input, {"height", input.d[2], kernel.first, stride.first, pt, pb,
                             dilation.first}, rule, ceil, &hp),
        axis_out(op, input, {"width", input.d[3], kernel.second, stride.second, pl, pr,
                             dilation.second}, rule, ceil, &wp)};
    check_plane(op, "the padded input plane", hp, wp);
    return out;
}

void check_pool_out(const char* op, const Dims& input, Pair kernel, Pair stride, Pair padding,
                    Pair dilation, Pair out) {
    const Quad pad{padding.first, padding.first, padding.second, padding.second};
    const Window2d lo = window_2d(op, input, kernel, stride, pad, dilation, PadRule::half_extent);
    const Window2d hi =
        window_2d(op, input, kernel, stride, pad, dilation, PadRule::half_extent, true);
    const bool rows = out.first == lo.oh || out.first == hi.oh;
    const bool cols = out.second == lo.ow || out.second == hi.ow;
    if (!rows || !cols) {
        refuse(op, "out_size " + pair_str(out.first, out.second) + " is not the output of "
                       "kernel " + pair_str(kernel.first, kernel.second) + ", stride " +
                       pair_str(stride.first, stride.second) + ", padding " +
                       pair_str(padding.first, padding.second) + ", dilation " +
                       pair_str(dilation.first, dilation.second) + ": " +
                       pair_str(lo.oh, lo.ow) + (lo.oh == hi.oh && lo.ow == hi.ow
                                                     ? std::string()
                                                     : " or, ceil_mode, " +
                                                           pair_str(hi.oh, hi.ow)),
               input);
    }
}

void check_plane(const char* op, const char* what, int64_t rows, int64_t cols) {
    int64_t n = 0;
    if (rows < 0 || cols < 0 || __builtin_mul_overflow(rows, cols, &n) || n > kMaxPlane) {
        throw std::invalid_argument(std::string(op) + ": " + what + " " + pair_str(rows, cols) +
                                    " has more than 2^31 - 1 elements");
    }
}

}  // namespace bind
}  // namespace tianyuan
