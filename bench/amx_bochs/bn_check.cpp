// The batch norm's fused forms on every ISA path the (emulated) CPU runs, where our CI machine
// runs AVX2 at most: a static program run by run.sh (CHECK=bn) inside Bochs. On each path
// they must give the bits of the separate ops on that path, as the test suite checks on the
// paths it has (tests/framework/test_norm.py, tests/quantization/test_fake_quant.py): the
// backward with the clamp and with a pass mask against the plain backward of the masked
// gradient; the affine pass with a fake quantization against fake_quantize of its output; the
// statistics' extremes against a scalar loop, their mean and variance against the statistics
// without them; and the weight observers' per-row extremes (min_max_rows) against the same
// loop. Planes of whole vectors and with tails. Prints BNCHECK lines; exit status 0 when all
// are equal.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "norm/batch_norm.h"
#include "norm/clamp.h"
#include "runtime/cpu.h"
#include "int8_gemm/int8_ops.h"

using namespace tianyuan;
using int8::FakeQuantRows;
using int8::fake_quantize;

namespace {

uint32_t state = 777;
uint32_t next() { return (state = state * 1103515245u + 12345u) >> 16; }
float value() { return static_cast<float>(static_cast<int>(next() % 20001) - 10000) / 1500.0f; }

size_t differ(const std::vector<float>& a, const std::vector<float>& b) {
    size_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return n;
}

size_t check(Isa isa, int64_t n, int64_t c, int64_t s) {
    set_isa(isa);
    const BnShape b{n, c, s};
    const size_t size = static_cast<size_t>(n * c * s);
    std::vector<float> x(size), g(size), scale(c), shift(c), ones(c, 1.0f);
    std::vector<uint8_t> pass(size);
    for (auto& v : x) v = value();
    for (auto& v : g) v = value();
    for (auto& v : pass) v = next() % 4 != 0;
    for (int64_t j = 0; j < c; ++j) {
        scale[j] = value() / 3;
        shift[j] = value() / 3;
    }
    size_t bad = 0;
    // statistics with and without the extremes
    std::vector<float> mean(c), var(c), mean2(c), var2(c), lo(c), hi(c), want_lo(c), want_hi(c);
    batch_norm_stats(x.data(), b, mean.data(), var.data());
    batch_norm_stats(x.data(), b, mean2.data(), var2.data(), lo.data(), hi.data());
    for (int64_t j = 0; j < c; ++j) {
        want_lo[j] = want_hi[j] = x[j * s];
        for (int64_t i = 0; i < n; ++i)
            for (int64_t k = 0; k < s; ++k) {
                const float v = x[(i * c + j) * s + k];
                want_lo[j] = v < want_lo[j] ? v : want_lo[j];
                want_hi[j] = v > want_hi[j] ? v : want_hi[j];
            }
    }
    size_t stats = differ(mean, mean2) + differ(var, var2) + differ(lo, want_lo) +
                   differ(hi, want_hi);
    // min_max_rows over the (n * c) planes as rows
    std::vector<float> row_lo(n * c), row_hi(n * c), want_row_lo(n * c), want_row_hi(n * c);
    min_max_rows(x.data(), n * c, s, row_lo.data(), row_hi.data());
    for (int64_t r = 0; r < n * c; ++r) {
        want_row_lo[r] = want_row_hi[r] = x[r * s];
        for (int64_t k = 0; k < s; ++k) {
            const float v = x[r * s + k];
            want_row_lo[r] = v < want_row_lo[r] ? v : want_row_lo[r];
            want_row_hi[r] = v > want_row_hi[r] ? v : want_row_hi[r];
        }
    }
    stats += differ(row_lo, want_row_lo) + differ(row_hi, want_row_hi);
    std::vector<float> invstd(c);
    for (int64_t j = 0; j < c; ++j) invstd[j] = 1.0f / std::sqrt(var[j] + 1e-5f);
    // the clamp in the backward, and the pass mask, against the separate ops
    const BnClamp<float> act{0.0f, 6.0f, scale.data(), shift.data()};
    std::vector<float> y(size), gc(size), gm(size), gcm(size);
    batch_norm_affine(x.data(), scale.data(), shift.data(), b, y.data(), &act);
    clamp_backward(g.data(), y.data(), static_cast<int64_t>(size), 0.0f, 6.0f, gc.data());
    masked_grad(g.data(), pass.data(), static_cast<int64_t>(size), gm.data());
    masked_grad(gc.data(), pass.data(), static_cast<int64_t>(size), gcm.data());
    size_t backward = 0;
    const BnClamp<float>* acts[] = {nullptr, &act};
    for (const BnClamp<float>* a : acts) {
        for (bool masked : {false, true}) {
            if (!a && !masked) continue;
            const std::vector<float>& gin = a ? (masked ? gcm : gc) : gm;
            std::vector<float> wx(size), ww(c), wb(c), gx(size), gw(c), gb(c);
            batch_norm_backward(gin.data(), x.data(), mean.data(), invstd.data(), scale.data(),
                                b, wx.data(), ww.data(), wb.data());
            batch_norm_backward(g.data(), x.data(), mean.data(), invstd.data(), scale.data(), b,
                                gx.data(), gw.data(), gb.data(), a,
                                masked ? pass.data() : nullptr);
            backward += differ(gx, wx) + differ(gw, ww) + differ(gb, wb);
        }
    }
    // the affine pass with the fake quantization, against fake_quantize of its output
    const float qscale = 0.03f;
    const int32_t zp = 7;
    std::vector<float> fq_y(size), want_y(size);
    std::vector<uint8_t> fq_in(size), want_in(size);
    const BnFakeQuant fq{qscale, static_cast<float>(0 - zp), static_cast<float>(255 - zp),
                         fq_in.data()};
    batch_norm_affine(x.data(), scale.data(), shift.data(), b, fq_y.data(), &act, &fq);
    const FakeQuantRows rows{y.data(), 1, 1, static_cast<int64_t>(size), &qscale, &zp, 0, 255};
    fake_quantize(rows, want_y.data(), want_in.data());
    const size_t fake = differ(fq_y, want_y) +
                        (std::memcmp(fq_in.data(), want_in.data(), size) != 0 ? 1 : 0);
    std::printf("BNCHECK %s (%ld, %ld, %ld): stats %zu, backward %zu, fake quant %zu differ\n",
                isa_name(isa), (long)n, (long)c, (long)s, stats, backward, fake);
    std::fflush(stdout);
    bad += stats + backward + fake;
    return bad;
}

}  // namespace

int main() {
    std::printf("BNCHECK best %s\n", isa_name(best_isa()));
    size_t bad = 0, runs = 0;
    const int64_t shapes[][3] = {{3, 5, 63}, {2, 3, 64}, {6, 4, 5}, {2, 7, 49}, {1, 2, 100}};
    for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512}) {
        if (!isa_runs(isa)) {
            std::printf("BNCHECK %s: not on this CPU\n", isa_name(isa));
            continue;
        }
        for (const auto& sh : shapes) {
            bad += check(isa, sh[0], sh[1], sh[2]);
            ++runs;
        }
    }
    std::printf("BNCHECK %zu comparisons, %s\n", runs, bad ? "FAILED" : "ALL EQUAL");
    return bad || runs == 0 ? 1 : 0;
}
