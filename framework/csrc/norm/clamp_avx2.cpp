// Clamp drivers (clamp_impl.h), compiled with the avx2 flags.
#include <cstdint>

#include "norm/clamp.h"
#include "norm/clamp_impl.h"

namespace tianyuan {

TY_CLAMP_DEFINE(avx2)

}  // namespace tianyuan
