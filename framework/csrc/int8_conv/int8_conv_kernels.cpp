// The int8 convolution family's one ISA choice (int8_conv_kernels.h).
#include "int8_conv/int8_conv_kernels.h"

#include "runtime/cpu.h"
#include "runtime/dispatch.h"

namespace tianyuan {
namespace int8 {
namespace {

// The register tile: VNNI's from the vnni level up; AVX-VNNI's on its own level (it sits below
// avx512, whose CPUs need not have it); the AVX2 tile on avx2 and avx512, the only ones that
// read the narrow form. The unit-stride quad planes by VBMI2 from the vnni level up (VBMI2
// came with VNNI), so that TIANYUAN_ISA=avx512 still runs the row-by-row planes on the same
// host. The channels-last engine's fast tile is VNNI's.
void fill_int8_conv(ConvKernels& k, Isa isa) {
    k.tile = isa >= Isa::vnni       ? cgemm_tile_vnni
             : isa == Isa::avxvnni  ? cgemm_tile_avxvnni
             : isa >= Isa::avx2     ? cgemm_tile_avx2
                                    : cgemm_tile_generic;
    k.narrow_tile = k.tile == cgemm_tile_avx2 ? cgemm_tile_avx2_narrow : nullptr;
    const bool avx512 = isa >= Isa::avx512, avx2 = isa >= Isa::avx2;
    k.pack_block = avx512 ? pack_block_avx512 : avx2 ? pack_block_avx2 : pack_block_generic;
    k.pack_quads = avx512 ? pack_quads_avx512 : avx2 ? pack_quads_avx2 : pack_quads_generic;
    k.pad_plane = avx512 ? pad_plane_avx512 : avx2 ? pad_plane_avx2 : pad_plane_generic;
    k.quad_planes = avx512 ? quad_planes_avx512 : avx2 ? quad_planes_avx2 : quad_planes_generic;
    k.quad_lanes = isa >= Isa::vnni && cpu_features().avx512vbmi2;
    k.nhwc_fast = isa >= Isa::vnni;
    k.nhwc_tile = k.nhwc_fast ? nhwc_tile_vnni : nhwc_tile_generic;
    k.nhwc_requant = k.nhwc_fast ? nhwc_requant_vnni : nhwc_requant_generic;
    k.direct = isa >= Isa::vnni;
    k.amx = isa == Isa::amx;
}

Dispatch<ConvKernels> kernels(fill_int8_conv);

}  // namespace

const ConvKernels& conv_kernels() { return kernels(); }

}  // namespace int8
}  // namespace tianyuan
