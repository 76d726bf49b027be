// The int8 convolution family's kernels (int8_cgemm.h's packed and direct algorithms,
// int8_conv_nhwc.h's channels-last engine): one table, chosen once per ISA
// (runtime/dispatch.h) by int8_conv_kernels.cpp's fill_int8_conv, its one ISA ladder. Two
// entries are planning facts rather than kernels: whether the direct algorithm's VNNI tile
// and the AMX algorithms are on this level, which the automatic algorithm choice reads.
#pragma once

#include "int8_cgemm/int8_cgemm.h"
#include "int8_conv/int8_conv_nhwc.h"

namespace tianyuan {
namespace int8 {

using PackBlockFn = void (*)(const uint8_t*, const uint8_t*, const int64_t*, int64_t, int64_t,
                             const Run*, int64_t, int64_t, uint8_t*);
using PackQuadsFn = void (*)(const uint8_t*, const int64_t*, int64_t, const Run*, int64_t,
                             uint8_t*);
using PadPlaneFn = void (*)(const uint8_t*, const PadPlane&, uint8_t*);
using QuadPlanesFn = void (*)(const uint8_t* const*, const QuadPlanes&, uint8_t*);

struct ConvKernels {
    CTileFn tile;         // the register tile on the packed weights
    CTileFn narrow_tile;  // the tile on the narrow form (NarrowWeights); null: none reads it
    PackBlockFn pack_block;
    PackQuadsFn pack_quads;
    PadPlaneFn pad_plane;
    QuadPlanesFn quad_planes;
    bool quad_lanes;      // unit-stride quad planes by quad_planes_vbmi2 (plane_lanes)
    NhwcTileFn nhwc_tile;
    NhwcRequantFn nhwc_requant;
    bool nhwc_fast;       // nhwc_tile is a fast one (else the generic, exact but slow)
    bool direct;          // the direct algorithm may win (its VNNI tile's lanes: direct_wins)
    bool amx;             // the AMX algorithms may run automatically (amx_verified decides)
};
const ConvKernels& conv_kernels();

}  // namespace int8
}  // namespace tianyuan
