// Rounding helpers of the imgproc kernels, exact and inlined: std::nearbyint and std::floor
// are library calls without SSE4.1 (the generic build), and nearbyint also saves and restores
// the floating-point environment on every call.
#pragma once

#include <cstdint>

namespace tianyuan {

// Round half to even of |v| < 2^22: adding and removing 1.5 * 2^23 leaves the integer part
// rounded in the default mode (what OpenCV's cvRound / SIMD v_round do).
inline float round_even(float v) {
    constexpr float kMagic = 12582912.f;  // 1.5 * 2^23
    return (v + kMagic) - kMagic;          // not folded: no -ffast-math here
}

// uint8 of a float: rounded half to even, saturated (OpenCV's saturate_cast<uchar>(float)).
inline uint8_t saturate_u8(float v) {
    v = v < -1.f ? -1.f : (v > 256.f ? 256.f : v);  // NaN stays NaN and lands on 0 below
    const float r = round_even(v);
    return static_cast<uint8_t>(r > 0.f ? (r < 255.f ? r : 255.f) : 0.f);
}

inline uint8_t saturate_u8(int32_t v) {
    return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// floor of |v| < 2^22 (the warp clamps its coordinates there), as an integer.
inline int32_t floor_int(float v) {
    const int32_t i = static_cast<int32_t>(v);  // truncates toward zero
    return i - (static_cast<float>(i) > v ? 1 : 0);
}

}  // namespace tianyuan
