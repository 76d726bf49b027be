// The AMX int8 convolution on real tiles, checked against the VNNI one (itself bit-exact to
// reference.qconv2d in the test suite): a static program run by run.sh inside Bochs, whose
// Sapphire Rapids model implements AMX, for machines (like our CI) that have none.
//
// AMXCHECK_REAL=1 runs the real tiles (XCR0 must grant the tile state, else #UD); without it
// only the emulated tiles run, as the test suite does. Weights are 0..127: Bochs 3.0's
// TDPBUSD reads the s8 operand as u8 (Bit32s of a Bit8u), so negative weights would test
// that emulator bug, not our code. Exit status: 0 when every comparison holds.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "runtime/cpu.h"
#include "int8_amx/int8_amx.h"
#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_ops.h"

using namespace tianyuan;
using namespace tianyuan::int8;

namespace {

uint32_t state = 777;
uint32_t next() { return (state = state * 1103515245u + 12345u) >> 16; }

// The work item's tile loop alone, right after the tile configuration.
size_t check_item(bool real) {
    const int64_t taps = 9, chunks = 2, lda = chunks * kAmxK + 64, rows = 64;
    std::vector<uint8_t> a(rows * lda);
    std::vector<int8_t> w(taps * chunks * 2048);
    std::vector<int64_t> soff(taps * chunks);  // step (tap t, chunk cc)
    for (auto& v : a) v = static_cast<uint8_t>(next());
    for (auto& v : w) v = static_cast<int8_t>(next() & 0x7f);
    for (int64_t i = 0; i < taps * chunks; ++i)
        soff[i] = i / chunks * 5 % (rows - 32) * lda + i % chunks * kAmxK;
    std::vector<int32_t> got(kAmxPos * kAmxOc, 7), want(kAmxPos * kAmxOc, 9);
    amx_item_emulated(a.data(), a.data() + 16 * lda, lda, soff.data(), taps * chunks, w.data(),
                      nullptr);
    amx_store_emulated(want.data());
    if (real) {
        amx_tiles_begin();
        amx_item_tiles(a.data(), a.data() + 16 * lda, lda, soff.data(), taps * chunks, w.data(),
                       nullptr);
        amx_store_tiles(got.data());
        amx_tiles_end();
    }
    size_t diff = 0;
    for (size_t i = 0; i < want.size(); ++i) diff += got[i] != want[i];
    std::printf("AMXCHECK item, 9 taps x 2 chunks: %zu of %zu sums differ\n", diff, want.size());
    return real ? diff : 0;
}

// One convolution: the packed (VNNI) algorithm against the AMX one, real and emulated.
size_t check_conv(const int64_t* c, bool is_signed, bool real) {
    ConvGeom g{c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[7], c[9], c[9],
               c[8], c[8], c[8], c[8], 1, 0, 0};
    g.oh = (g.h + 2 * c[8] - g.dh * (g.kh - 1) - 1) / g.sh + 1;
    g.ow = (g.w + 2 * c[8] - g.dw * (g.kw - 1) - 1) / g.sw + 1;
    const int64_t taps = g.kh * g.kw, k = g.c * taps;
    std::vector<uint8_t> x(g.n * g.c * g.h * g.w);
    std::vector<int8_t> w(g.oc * k), packed(g.oc * round_up(k, kGroup));
    std::vector<int8_t> wa(amx_packed_size(g.oc, g.c, taps));
    for (auto& v : x) v = static_cast<uint8_t>(next());
    for (auto& v : w) v = static_cast<int8_t>(next() & 0x7f);
    std::vector<int32_t> sums(g.oc), bias(g.oc), mult(g.oc), shift(g.oc), corrected(g.oc);
    for (int64_t j = 0; j < g.oc; ++j) {
        bias[j] = static_cast<int32_t>(next() % 6000) - 3000;
        mult[j] = (1 << 30) + static_cast<int32_t>(next() * 7);
        shift[j] = 40 + static_cast<int32_t>(next() % 4);
    }
    pack_conv_weights(w.data(), g.oc, g.c, taps, packed.data(), sums.data());
    amx_pack_weights(w.data(), g.oc, g.c, taps, wa.data());
    const int32_t zp = is_signed ? -11 : 117, z = zp + (is_signed ? 128 : 0);
    const Requant r{bias.data(), mult.data(), shift.data(), 1, 64, 0, 255, false};
    const size_t n_out = g.n * g.oc * g.oh * g.ow;
    std::vector<uint8_t> want(n_out), got(n_out, 0), emulated(n_out, 1);
    conv2d({x.data(), is_signed, zp}, g, packed.data(), sums.data(), bias.data(), r,
           want.data(), ConvAlgo::packed);
    for (int64_t j = 0; j < g.oc; ++j) {  // bias - z * row sums, as conv2d corrects it
        const uint32_t zs = static_cast<uint32_t>(z) * static_cast<uint32_t>(sums[j]);
        corrected[j] = static_cast<int32_t>(static_cast<uint32_t>(bias[j]) - zs);
    }
    const uint8_t flip = is_signed ? 0x80 : 0, zu = static_cast<uint8_t>(z);
    if (real) conv2d_amx(x.data(), flip, zu, g, wa.data(), corrected.data(), r, got.data(), false);
    conv2d_amx(x.data(), flip, zu, g, wa.data(), corrected.data(), r, emulated.data(), true);
    size_t diff = 0, diff_emulated = 0, inside = 0;
    for (size_t i = 0; i < n_out; ++i) {
        diff += got[i] != want[i];
        diff_emulated += emulated[i] != want[i];
        inside += want[i] != r.lo && want[i] != r.hi && want[i] != r.zero_point;
    }
    std::printf("AMXCHECK %s C%ld OC%ld %ldx%ld k%ld s%ld d%ld: real tiles %zu, emulated %zu of "
                "%zu bytes differ from VNNI (%zu away from the bounds)\n",
                is_signed ? "s8" : "u8", (long)g.c, (long)g.oc, (long)g.h, (long)g.w, (long)g.kh,
                (long)g.sh, (long)g.dh, real ? diff : n_out, diff_emulated, n_out, inside);
    std::fflush(stdout);
    return (real ? diff : 0) + diff_emulated;
}

}  // namespace

int main() {
    const bool real = std::getenv("AMXCHECK_REAL") != nullptr;
    const CpuFeatures& f = cpu_features();
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    std::printf("AMXCHECK cpuid amx_tile %d amx_int8 %d, XCR0 %x, real tiles %d\n", f.amx_tile,
                f.amx_int8, lo, (int)real);
    std::fflush(stdout);
    size_t bad = check_item(real);
    // (N, C, H, W, OC, kh, kw, stride, padding, dilation): strides 1-3, dilation, 1x1, rows
    // wider than the transpose's 64 columns, several channel blocks and images
    const int64_t cases[][10] = {
        {1, 64, 5, 5, 32, 3, 3, 1, 1, 1},  {2, 64, 9, 11, 64, 3, 3, 2, 1, 1},
        {1, 128, 7, 7, 32, 1, 1, 1, 0, 1}, {2, 64, 3, 3, 96, 3, 3, 1, 1, 1},
        {1, 64, 4, 70, 32, 3, 3, 1, 1, 1}, {1, 64, 3, 40, 32, 3, 3, 3, 1, 1},
        {1, 64, 6, 9, 32, 3, 3, 1, 2, 2}};
    for (const auto& c : cases) bad += check_conv(c, false, real);
    bad += check_conv(cases[1], true, real);
    std::printf("AMXCHECK %s\n", bad ? "FAILED" : "ALL EQUAL");
    return bad ? 1 : 0;
}
