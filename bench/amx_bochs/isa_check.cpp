// The int8 convolution on every ISA path the (emulated) CPU runs, against the generic path
// (itself bit-exact to reference.qconv2d in the test suite): a static program run by run.sh
// inside Bochs, for the paths our CI machine cannot run. Under Bochs's Arrow Lake model
// (AVX2 with AVX-VNNI, no AVX-512) it checks that the CPU is detected as avxvnni and that the
// AVX-VNNI tile is exact; under Sapphire Rapids, the AVX-512 and VNNI paths besides. Full-range
// weights (-128..127), u8 and s8 inputs, both algorithms, the AVX2 tiles with and without the
// narrow form (NarrowWeights); and the add and the concat's rescale (their 16-bit form and
// the s64 one). Prints ISACHECK lines; exit status 0 when all are equal.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "runtime/cpu.h"
#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_gemm.h"
#include "int8_gemm/int8_ops.h"

using namespace tianyuan;
using namespace tianyuan::int8;

namespace {

uint32_t state = 4242;
uint32_t next() { return (state = state * 1103515245u + 12345u) >> 16; }

// (N, C, H, W, OC, k, stride, padding): tails of the 6-channel blocks and 16-position steps,
// strides 1-2, 1x1, C not a multiple of 4 (packed algorithm only), several images; 8 position
// blocks and more (the AVX2 tiles' channel table, kChanMinVisits), 1x1 and 3x3.
const int64_t kCases[][8] = {{1, 8, 9, 11, 13, 3, 1, 1}, {2, 16, 7, 7, 6, 3, 2, 1},
                             {1, 5, 6, 9, 7, 3, 1, 1},   {1, 32, 5, 5, 40, 1, 1, 0},
                             {3, 12, 4, 6, 11, 3, 1, 1}, {1, 3, 12, 12, 8, 7, 2, 3},
                             {2, 16, 20, 20, 20, 1, 1, 0}, {1, 8, 24, 24, 13, 3, 1, 1}};

size_t check(const int64_t* c, bool is_signed, Isa isa, ConvAlgo algo, bool narrow) {
    ConvGeom g{c[0], c[1], c[2], c[3], c[4], c[5], c[5], c[6], c[6], 1, 1,
               c[7], c[7], c[7], c[7], 1, 0, 0};
    g.oh = (g.h + 2 * c[7] - g.kh) / g.sh + 1;
    g.ow = (g.w + 2 * c[7] - g.kw) / g.sw + 1;
    const int64_t taps = g.kh * g.kw, kp = round_up(g.c * taps, kGroup);
    std::vector<uint8_t> x(g.n * g.c * g.h * g.w);
    std::vector<int8_t> w(g.oc * g.c * taps), packed(g.oc * kp), npacked(g.oc * kp);
    for (auto& v : x) v = static_cast<uint8_t>(next());
    for (auto& v : w) v = static_cast<int8_t>(next());
    std::vector<int32_t> sums(g.oc), bias(g.oc), mult(g.oc), shift(g.oc), res_ptr, res;
    for (int64_t j = 0; j < g.oc; ++j) {
        bias[j] = static_cast<int32_t>(next() % 6000) - 3000;
        mult[j] = (1 << 30) + static_cast<int32_t>(next() * 7);
        shift[j] = 38 + static_cast<int32_t>(next() % 4);
    }
    pack_conv_weights(w.data(), g.oc, g.c, taps, packed.data(), sums.data());
    split_narrow(packed.data(), 1, g.oc, kp, npacked.data(), &res_ptr, &res);
    const NarrowWeights nw{npacked.data(), res_ptr.data(), res.data()};
    const QIn in{x.data(), is_signed, is_signed ? -11 : 117};
    // s8 input: a ReLU's lower bound (the AVX2 stores clamp; u8: the packs saturate)
    const Requant r{bias.data(), mult.data(), shift.data(), 1, 64, is_signed ? 64 : 0, 255,
                    false};
    const size_t n_out = g.n * g.oc * g.oh * g.ow;
    std::vector<uint8_t> want(n_out), got(n_out, 1);
    set_isa(Isa::generic);
    conv2d(in, g, packed.data(), sums.data(), bias.data(), r, want.data(), algo);
    set_isa(isa);
    conv2d(in, g, packed.data(), sums.data(), bias.data(), r, got.data(), algo, nullptr,
           narrow ? &nw : nullptr);
    size_t diff = 0, inside = 0;
    for (size_t i = 0; i < n_out; ++i) {
        diff += got[i] != want[i];
        inside += want[i] != r.lo && want[i] != r.hi && want[i] != r.zero_point;
    }
    std::printf("ISACHECK %s %s %s%s C%ld OC%ld %ldx%ld k%ld s%ld: %zu of %zu bytes differ "
                "(%zu away from the bounds)\n", isa_name(isa),
                algo == ConvAlgo::direct ? "direct" : "packed", is_signed ? "s8" : "u8",
                narrow ? " narrow" : "", (long)g.c, (long)g.oc, (long)g.h, (long)g.w,
                (long)g.kh, (long)g.sh, diff, n_out, inside);
    std::fflush(stdout);
    return diff;
}

// The add (+relu) and the concat's rescale on `isa` against the generic loops, for (m_a,
// m_b, shift) on both sides of the 16-bit form's edges (int8_ops.h, Split16), 1000 values
// (a partial vector step at the end).
const int32_t kEltwise[][3] = {{2147450879, 1073754169, 31}, {2147483647, 1073741824, 31},
                               {40000, -1234, 17},          {70000, 3, 16},
                               {1073741824, 1073741825, 32}, {1073741824, 536870912, 38},
                               {2147450879, -1073741824, 47}, {1073741824, 1073741823, 48}};

size_t check_eltwise(const int32_t* e, bool is_signed, Isa isa) {
    const int64_t n = 1000;
    std::vector<uint8_t> a(n), b(n), want(3 * n), got(3 * n, 1);
    for (auto& v : a) v = static_cast<uint8_t>(next());
    for (auto& v : b) v = static_cast<uint8_t>(next());
    const QIn qa{a.data(), is_signed, is_signed ? -128 : 255};
    const QIn qb{b.data(), is_signed, is_signed ? 127 : 0};
    const int32_t zo = is_signed ? -3 : 7, lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
    const AddParams p{e[0], e[1], e[2], zo, lo, hi};
    const PartRows rows{25, 40, 25, 0};  // 25 rows of 40 bytes into rows of 80
    for (int relu = 0; relu < 2; ++relu) {
        const AddParams q{p.m_a, p.m_b, p.shift, zo, relu ? zo : lo, hi};
        set_isa(Isa::generic);
        add(qa, qb, n, q, want.data());
        concat_part(qa, rows, e[0], e[2], zo, is_signed, want.data() + n, 80);
        concat_part(qb, rows, e[1] < 0 ? -e[1] : e[1], e[2], zo, is_signed, want.data() + n + 40,
                    80);
        set_isa(isa);
        add(qa, qb, n, q, got.data());
        concat_part(qa, rows, e[0], e[2], zo, is_signed, got.data() + n, 80);
        concat_part(qb, rows, e[1] < 0 ? -e[1] : e[1], e[2], zo, is_signed, got.data() + n + 40,
                    80);
        size_t diff = 0;
        for (int64_t i = 0; i < 3 * n; ++i) diff += got[i] != want[i];
        std::printf("ISACHECK %s add%s / concat %s m (%d, %d) shift %d: %zu of %ld bytes "
                    "differ\n", isa_name(isa), relu ? "_relu" : "", is_signed ? "s8" : "u8",
                    e[0], e[1], e[2], diff, (long)(3 * n));
        if (diff) return diff;
    }
    return 0;
}

}  // namespace

int main() {
    const CpuFeatures& f = cpu_features();
    std::printf("ISACHECK cpuid avx2 %d avx_vnni %d avx512_vnni %d, best %s\n", f.avx2,
                f.avxvnni, f.avx512vnni, isa_name(best_isa()));
    std::fflush(stdout);
    size_t bad = 0, runs = 0;
    if (isa_runs(Isa::avxvnni)) {  // 12 x 8 lanes, each steps + 4 x steps (ones times ones)
        const int64_t sum = avxvnni_peak_steps(1000);
        std::printf("ISACHECK avxvnni peak loop: checksum %ld (expected 480000)\n", (long)sum);
        bad += sum != 480000;
        ++runs;
    }
    for (Isa isa : {Isa::avx2, Isa::avxvnni, Isa::avx512, Isa::vnni}) {
        if (!isa_runs(isa)) {
            std::printf("ISACHECK %s: not on this CPU\n", isa_name(isa));
            continue;
        }
        for (const auto& e : kEltwise) {
            for (bool is_signed : {false, true}) {
                bad += check_eltwise(e, is_signed, isa);
                ++runs;
            }
        }
        for (const auto& c : kCases) {
            for (bool is_signed : {false, true}) {
                for (ConvAlgo algo : {ConvAlgo::packed, ConvAlgo::direct}) {
                    if (algo == ConvAlgo::direct && c[1] % 4) continue;
                    for (bool narrow : {false, true}) {
                        if (narrow && isa > Isa::avx512) continue;  // the AVX2 tiles' form
                        bad += check(c, is_signed, isa, algo, narrow);
                        ++runs;
                    }
                }
            }
        }
    }
    std::printf("ISACHECK %zu comparisons, %s\n", runs, bad ? "FAILED" : "ALL EQUAL");
    return bad || runs == 0 ? 1 : 0;
}
