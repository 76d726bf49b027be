// The AMX peak and the once-per-process check of the real tiles against the emulated ones
// (int8_amx.h) that the automatic choice needs. No vector code: built with the baseline flags,
// it only calls the kernels of the *_amx.cpp files.
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "runtime/cpu.h"
#include "int8_amx/int8_amx.h"
#include "int8_cgemm/int8_cgemm.h"
#include "int8_conv/int8_conv_kernels.h"
#include "int8_gemm/int8_gemm.h"
#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {

double amx_peak(int64_t steps) {
    if (!cpu_features().os_amx) {
        throw std::runtime_error("amx_peak: this CPU (or its OS) offers no AMX tiles");
    }
    return peak_ops(amx_peak_steps, steps, 4 * 16 * 16 * 64 * 2);
}

bool amx_automatic() { return conv_kernels().amx && amx_verified(); }

bool amx_verified() {
    static const bool ok = [] {
        if (!cpu_features().os_amx) return false;
        // a 3x3 conv of 64 -> 32 channels on a 6x5 map, stride 1, zero points != 0
        ConvGeom g{1, 64, 6, 5, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6, 5};
        std::vector<uint8_t> x(static_cast<size_t>(64 * 30));
        std::vector<int8_t> w(static_cast<size_t>(32 * 64 * 9)), wa(w.size());
        uint32_t s = 12345;
        const auto next = [&s] { return (s = s * 1103515245u + 12345u) >> 16; };
        for (auto& v : x) v = static_cast<uint8_t>(next());
        for (auto& v : w) v = static_cast<int8_t>(next());
        amx_pack_weights(w.data(), 32, 64, 9, wa.data());
        std::vector<int32_t> bias(32, -1000), mult(32, 1 << 30), shift(32, 40);
        Requant r{};
        r.multiplier = mult.data();
        r.shift = shift.data();
        r.step = 1;
        r.zero_point = 3;
        r.lo = 0;
        r.hi = 255;
        std::vector<uint8_t> real(32 * 30), emulated(32 * 30);
        conv2d_amx(x.data(), 0, 7, g, wa.data(), bias.data(), r, real.data(), false);
        conv2d_amx(x.data(), 0, 7, g, wa.data(), bias.data(), r, emulated.data(), true);
        bool same = real == emulated;
        // the packed blocks' products (TDPBSUD): 2 chunks, 40 positions
        std::vector<uint8_t> buf(static_cast<size_t>(2 * 16 * kPos * kGroup));
        for (auto& v : buf) v = static_cast<uint8_t>(next());
        const RowParams q{bias.data(), mult.data(), shift.data()};
        std::vector<uint8_t> real_block(32 * kPos), emulated_block(32 * kPos);
        const StoreSeg seg{0, low_mask64(40)};
        AmxGemmState st;
        amx_tiles_begin();
        amx_gemm_block_tiles(buf.data(), 2, wa.data(), 0, 32, 40, q, r, real_block.data(), kPos,
                             &seg, 1, st);
        amx_tiles_end();
        amx_gemm_flush(st);
        amx_gemm_block_emulated(buf.data(), 2, wa.data(), 0, 32, 40, q, r, emulated_block.data(),
                                kPos, &seg, 1, st);
        amx_gemm_flush(st);
        same = same && real_block == emulated_block;
        // the rows form (int8_rows_amx.cpp): 3 channels, 7x7, stride 2, on an 8x9 image
        ConvGeom gr{1, 3, 8, 9, 32, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1, 4, 5};
        std::vector<int8_t> wr(static_cast<size_t>(amx_rows_size(32, 3, 7, 7)));
        amx_rows_weights(w.data(), 32, 3, 7, 7, wr.data());  // w's bytes as conv-packed ones
        std::vector<uint8_t> real_rows(32 * 20), emulated_rows(32 * 20);
        conv2d_amx_rows(x.data(), 7, gr, wr.data(), bias.data(), r, real_rows.data(), false);
        conv2d_amx_rows(x.data(), 7, gr, wr.data(), bias.data(), r, emulated_rows.data(), true);
        same = same && real_rows == emulated_rows;
        if (!same) {
            std::fprintf(stderr, "tianyuan: AMX int8 tiles disagree with their emulation; int8 "
                                 "convolutions stay on VNNI\n");
        }
        return same;
    }();
    return ok;
}

}  // namespace int8
}  // namespace tianyuan
