// The channels-last int8 convolution's weight packing, generic tile and requantization, and its
// blocks' requantization constants (int8_conv_nhwc.h; the driver: int8_conv_nhwc_driver.cpp).
#include <cstring>
#include <vector>

#include "int8_conv/int8_conv_kernels.h"
#include "int8_conv/int8_conv_nhwc.h"

namespace tianyuan {
namespace int8 {

namespace {

int64_t block_vectors(int64_t oc, int64_t b) {
    const int64_t n = oc - b * kNhwcOc < kNhwcOc ? oc - b * kNhwcOc : kNhwcOc;
    return (n + 15) / 16;
}

// One form of the weights: per block, `steps` steps of `quads` quads each; byte i of a step
// is weight `at(step, i)` of the output channel ((channel, tap) -> index into the channel's
// C * kh * kw weights), or -1 for a zero.
template <class At>
void pack_form(const int8_t* w, int64_t oc, int64_t k, int64_t steps, int64_t quads, At at,
               int8_t* out) {
    for (int64_t b = 0; b * kNhwcOc < oc; ++b) {
        const int64_t lanes = 16 * block_vectors(oc, b);
        int8_t* blk = out + b * kNhwcOc * steps * quads * 4;
        for (int64_t j = 0; j < lanes && b * kNhwcOc + j < oc; ++j) {
            const int8_t* row = w + (b * kNhwcOc + j) * k;
            for (int64_t t = 0; t < steps; ++t) {
                for (int64_t i = 0; i < 4 * quads; ++i) {
                    const int64_t src = at(t, i);
                    blk[((t * quads + i / 4) * lanes + j) * 4 + i % 4] = src < 0 ? 0 : row[src];
                }
            }
        }
    }
}

// The forms' offsets from the blob's start: by tap, then by pixel row (C % 4 != 0).
struct Forms {
    int64_t taps, rows, size;
};
Forms forms(int64_t oc, int64_t c, int64_t kh, int64_t kw) {
    const int64_t lanes = (oc + 15) / 16 * 16;
    Forms f{0, 0, lanes * kh * kw * nhwc_quads(c) * 4};
    f.rows = c % 4 ? f.size : 0;
    f.size += c % 4 ? lanes * kh * nhwc_row_quads(c, kw) * 4 : 0;
    return f;
}
}  // namespace

int64_t nhwc_packed_size(int64_t oc, int64_t c, int64_t kh, int64_t kw) {
    return forms(oc, c, kh, kw).size;
}

int64_t nhwc_form_offset(int64_t oc, int64_t c, int64_t kh, int64_t kw, bool rows) {
    const Forms f = forms(oc, c, kh, kw);
    return rows && c % 4 ? f.rows : f.taps;
}

void nhwc_pack_weights(const int8_t* w, int64_t oc, int64_t c, int64_t kh, int64_t kw,
                       int8_t* out) {
    const Forms f = forms(oc, c, kh, kw);
    std::memset(out, 0, static_cast<size_t>(f.size));
    const int64_t taps = kh * kw, k = c * taps;
    // by tap: channel i of tap t (w's (o, i, t)), zero past C
    pack_form(w, oc, k, taps, nhwc_quads(c),
              [&](int64_t t, int64_t i) { return i < c ? i * taps + t : -1; }, out + f.taps);
    // by pixel row: byte i of row r is tap (r, i / C)'s channel i % C, zero past kw * C
    if (c % 4) {
        pack_form(w, oc, k, kh, nhwc_row_quads(c, kw), [&](int64_t r, int64_t i) {
            return i < kw * c ? i % c * taps + r * kw + i / c : -1;
        }, out + f.rows);
    }
}

void nhwc_tile_generic(const NhwcTile& t) {
    const int64_t lanes = 16 * t.nv;
    for (int m = 0; m < t.npos; ++m) {
        for (int64_t j = 0; j < lanes; ++j) {
            uint32_t acc = static_cast<uint32_t>(t.bias[j]);  // wraps like vpdpbusd
            for (int64_t k = 0; k < t.steps; ++k) {
                const uint8_t* a = t.table ? t.table[k * kNhwcPos + m] : t.base[m] + t.soff[k];
                const int8_t* b = t.w + k * t.quads * lanes * 4 + j * 4;
                for (int64_t q = 0; q < t.quads; ++q) {
                    for (int i = 0; i < 4; ++i) {
                        acc += static_cast<uint32_t>(static_cast<int32_t>(a[4 * q + i]) *
                                                     b[q * lanes * 4 + i]);
                    }
                }
            }
            t.sums[m * 64 + j] = static_cast<int32_t>(acc);
        }
    }
}

void nhwc_requant_generic(const int32_t* sums, int64_t npos, const NhwcRequant& q,
                          uint8_t* out, int64_t ldo) {
    for (int64_t p = 0; p < npos; ++p) {
        for (int64_t j = 0; j < q.nbytes; ++j) {
            out[p * ldo + j] =
                requant_one(sums[p * 64 + j], 0, q.q->mult[j], q.q->shift[j], *q.r);
        }
    }
}

void nhwc_block_q(const Requant& r, int64_t oc, NhwcBlockQ* q) {
    for (int64_t b = 0; b < nhwc_blocks(oc); ++b) {
        NhwcBlockQ& k = q[b];
        k.fold = true;
        for (int64_t j = 0; j < kNhwcOc; ++j) {
            const bool real = b * kNhwcOc + j < oc;
            k.mult[j] = real ? r.multiplier[b * kNhwcOc + j] : 0;
            k.shift[j] = real ? r.shift[b * kNhwcOc + j] : 33;
            k.fold = k.fold && k.shift[j] >= 33;
        }
        for (int64_t j = 0; j < kNhwcOc; ++j) {
            const int32_t s = k.shift[j];
            k.mult_odd[j] = j % 2 ? 0 : k.mult[j + 1];  // _mm512_srli_epi64(mult, 32)
            k.half_hi[j] = s >= 33 && s - 33 < 32 ? static_cast<int32_t>(1u << (s - 33)) : 0;
            k.shift_hi[j] = s - 32;
        }
    }
}

bool nhwc_fast() { return conv_kernels().nhwc_fast; }

}  // namespace int8
}  // namespace tianyuan
