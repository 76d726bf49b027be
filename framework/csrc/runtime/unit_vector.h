// The vector width in bytes of the translation unit that includes this file, by its ISA flags:
// for code written in GCC vector types (batch_norm_impl.h, clamp_impl.h), built once per ISA
// unit. In an anonymous namespace: each unit has its own value.
#pragma once

namespace tianyuan {
namespace {

#if defined(__AVX512F__)
constexpr int kUnitVectorBytes = 64;
#elif defined(__AVX2__)
constexpr int kUnitVectorBytes = 32;
#else
constexpr int kUnitVectorBytes = 16;
#endif

}  // namespace
}  // namespace tianyuan
