// Clamp drivers (clamp_impl.h), compiled with the avx512 flags.
#include <cstdint>

#include "clamp.h"
#include "clamp_impl.h"

namespace tianyuan {

TY_CLAMP_DEFINE(avx512)

}  // namespace tianyuan
