// int8 convolution as a "channels x positions" GEMM whose store is the requantization:
// out (OC, P) = W (OC, K) x cols (K, P) per image and group, written as u8/s8 straight
// into NCHW, with no s32 intermediate and no transpose. Numpy twin: reference.qconv2d.
//
// Conv weight layout (ISA independent; packed once at quantize() time):
//   per group, OCg rows of K s8, Kp = K rounded up to 4. K runs in (c, i, j) order, or,
//   when C/groups is a multiple of 4, in (c / 4, i, j, c % 4) order: then every k-quad is
//   4 channels at one kernel tap, which the direct algorithm reads straight from its
//   quad-interleaved input. Rows in blocks of kOcBlock (the last block may be shorter,
//   rb rows):
//     packed[g*OCg*Kp + b*kOcBlock*Kp + (k/4)*rb*4 + r*4 + k%4] = W[b*kOcBlock + r][k]
//   so one k-quad of the rb rows of a block is rb consecutive 32-bit words (broadcasts).
// Two algorithms feed the same register tile, which reads k-quad q's 64 positions at
// `acts + qoff[q]` (4 consecutive k of one position per 32-bit lane):
//   packed: per block of up to kPos output positions, the block's activations are gathered
//     into buf[(k/4)*kPos*4 + p*4 + k%4] = xpad[koff[k] + src(p)], so qoff[q] = q*kPos*4;
//     for kernels of 2 or more taps with C/groups % 4 == 0, the same buf is copied in runs
//     of quads from the direct algorithm's quad planes instead (QuadInput below).
//   direct (any stride, C/groups % 4 == 0; int8_conv_direct.cpp): the input
//     is rewritten once into quad planes, per channel quad and phase (a, b) of the stride
//     quads[y][x] = 4 channels of xpad[sh*y + a][sw*x + b], and the tile runs over "virtual"
//     positions v = oy*Wph + ox of the phase planes' width Wph >= ow: each tap is one offset,
//     so no per-block gather; the Wph - ow columns past the row end are computed and dropped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "int8_gemm/int8_gemm.h"

namespace tianyuan {
namespace int8 {

// Grow-only per-thread scratch, one per use, 64-byte aligned (malloc's large blocks start 16
// bytes past a page, so every 64-byte load of an unaligned buffer would split cache lines,
// and a 32-byte one every other time). A grown buffer is all zeros; what a call wrote stays
// until the next call of the same thread and use. Kernels may read up to 64 bytes past
// `size` but write none: those bytes are a canary that the next call checks.
// Defined in a generic translation unit: ISA units must not instantiate STL templates.
enum class Space : int {
    pad, block, blocks, quads, amx, depthwise, pool, widened, chans, count
};
uint8_t* thread_space(Space use, int64_t size);
// The names of the spaces whose canary a kernel changed since the last call of this (on
// every thread of the current OpenMP team, and those later calls found); for the tests.
std::vector<std::string> broken_spaces();
// Every space of every thread of an OpenMP team set to `value` up to its last call's size, so
// that a kernel that reads what it did not write this call (a previous call's bytes) reads
// junk; for the tests.
void scribble_spaces(uint8_t value);

constexpr int64_t kOcBlock = 6;  // output channels per weight block (register rows)
constexpr int64_t kPos = 64;     // output positions per activation block (4 zmm panels)

// The VNNI tile (int8_cgemm_vnni.cpp) runs the positions past a block's whole panels of 16 as
// extras, the channels in the lanes, where there are up to kExtraMax of them; else as one
// more panel. vnni_lanes: the lanes a block of npos positions costs it, an extra counted as
// one.
constexpr int64_t kExtraMax = 4;
inline int64_t vnni_lanes(int64_t npos) {
    const int64_t e = npos % 16;
    return e <= kExtraMax ? npos : npos - e + 16;
}

// W (OC, C/groups, kh*kw) s8 row-major -> conv layout above (oc*Kp bytes), row sums (OC,).
void pack_conv_weights(const int8_t* w, int64_t oc, int64_t cg, int64_t taps, int8_t* packed,
                       int32_t* row_sums);

// Whether k runs in channel quads (c / 4, i, j, c % 4), and the (c, tap) of k-row q.
inline bool quad_order(int64_t cg) { return cg % 4 == 0; }
inline void k_row(int64_t q, int64_t cg, int64_t taps, int64_t* c, int64_t* tap) {
    if (quad_order(cg)) {
        *c = q / (4 * taps) * 4 + q % 4;
        *tap = q / 4 % taps;
    } else {
        *c = q / taps;
        *tap = q % taps;
    }
}

// A run of consecutive output positions of one block that read one input row:
// buf position dst + t reads xpad[koff + src + t * stride], t < len.
struct Run {
    int64_t dst, src, len;
};

// One activation block: k rows (koff (K,) offsets into xpad), runs with input stride sw;
// bytes from xpad up to `end` are readable (steps may read past a run's last byte to there).
void pack_block_generic(const uint8_t* xpad, const uint8_t* end, const int64_t* koff,
                        int64_t k, int64_t kp, const Run* runs, int64_t nruns, int64_t sw,
                        uint8_t* buf);
void pack_block_avx2(const uint8_t* xpad, const uint8_t* end, const int64_t* koff, int64_t k,
                     int64_t kp, const Run* runs, int64_t nruns, int64_t sw, uint8_t* buf);
void pack_block_avx512(const uint8_t* xpad, const uint8_t* end, const int64_t* koff, int64_t k,
                       int64_t kp, const Run* runs, int64_t nruns, int64_t sw, uint8_t* buf);

// Where a block's positions go: lane p (bit p of mask) of channel ch's row to out + off +
// ch * ld + p (masked stores: bytes outside the mask are neither read nor written). A packed
// block inside one image is one segment, one that spans images a segment an image; a direct
// block (int8_conv_direct.cpp) a segment an output row, whose off may be a little below 0
// (lane p lands past the row's start; the masked-off bytes before it are not touched).
struct StoreSeg {
    int64_t off;
    uint64_t mask;
};
// The segment of lanes [lane, lane + len) whose first lane goes to byte `first` of a row.
static inline StoreSeg store_seg(int64_t first, int64_t lane, int64_t len) {
    return {first - lane, low_mask64(lane + len) & ~low_mask64(lane)};
}

// Per-channel requantization of one weight block; r carries zero point and bounds.
struct RowParams {
    const int32_t* bias;        // corrected: bias - z * row_sums
    const int32_t* multiplier;
    const int32_t* shift;
    // The narrow tile's residual (NarrowWeights) from the block's first row on; null: none.
    const int32_t* res_ptr = nullptr;
    const int32_t* res = nullptr;
    // The AVX2 tiles' requantization constants (make_chans_avx2) from the block's first row
    // on; null: the tile makes its rows' own.
    const uint8_t* chans = nullptr;
    // The VNNI tile's (cgemm_tile_vnni's) destinations, nsegs of them (ld: the tile's ldo);
    // null: row r at out + r * ldo. Other tiles ignore them.
    const StoreSeg* segs = nullptr;
    int64_t nsegs = 0;
    // The VNNI and AVX2 tiles' stores ask for the line this many bytes further along each
    // row for writing (prefetchw; 0: not), the VNNI tile per row and store, the AVX2 tiles
    // once a row per block: store_ahead, below, says where and what it gained.
    int64_t ahead = 0;
};

// RowParams.ahead for an output of `bytes`. The blocks a thread runs next write further along
// the same rows; an output not in cache (a model's fresh buffer, every layer in between having
// passed through the cache) had made each 64-byte store wait for its line's read for
// ownership. Asked 512 bytes ahead (256-768 alike) from outputs of 1 MiB on: smaller ones
// (batch 1) are in cache, where asking on every store cost a little (bench/RESULTS.md, int8
// kernels: stores request the line).
constexpr int64_t kStoreAhead = 512, kStoreAheadMin = int64_t{1} << 20;
inline int64_t store_ahead(int64_t bytes) { return bytes >= kStoreAheadMin ? kStoreAhead : 0; }

// Conv weights for the narrow AVX2 tile (cgemm_tile_avx2_narrow). vpmaddubsw sums the
// products of a k-quad's bytes 0-1 and 2-3 into a saturating int16, exact when each pair has
// |w0| + |w1| <= 128 (255 * 128 < 2^15). split_narrow writes the packed weights with every
// pair past that bound clamped to [-64, 64], and the clamped-off parts (|r| <= 64, so they
// obey the bound too) as a sparse residual the tile adds after its dense loop: row j's
// entries are res[2e] (its k-quad) and res[2e + 1] (the quad's 4 residual bytes) for e in
// [res_ptr[j], res_ptr[j + 1]). 7-bit weights (|w| <= 64) have no residual; full-range
// 8-bit weights with a bell-shaped spread have a few per cent of quads in it.
struct NarrowWeights {
    const int8_t* packed;
    const int32_t* res_ptr;  // (OC + 1,)
    const int32_t* res;      // (2 * res_ptr[OC],)
};
// packed: the conv layout of groups * ocg rows of kp bytes; narrow: as many bytes.
void split_narrow(const int8_t* packed, int64_t groups, int64_t ocg, int64_t kp, int8_t* narrow,
                  std::vector<int32_t>* res_ptr, std::vector<int32_t>* res);

// rows (<= kOcBlock) channels x npos (<= kPos) positions: out[r*ldo + p] = requantized
// sum_k w[r][k] * acts[qoff[k/4] + 4*p + k%4]. w is the block's packed rows.
void cgemm_tile_generic(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t kp,
                        int64_t rows, int64_t npos, const RowParams& q, const Requant& r,
                        uint8_t* out, int64_t ldo);
void cgemm_tile_avx2(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t kp,
                     int64_t rows, int64_t npos, const RowParams& q, const Requant& r,
                     uint8_t* out, int64_t ldo);
// The AVX2 tile widens its block's weights into int16 pairs (w0, w2), (w1, w3) per k-quad
// and row (widen_weights_avx2, groups of 4 bytes -> 2 words, order kept); the _wide entry
// takes them widened beforehand, so that a call widens each weight once, not once per tile.
void widen_weights_avx2(const int8_t* w, int64_t groups, int32_t* out);
void cgemm_tile_avx2_wide(const uint8_t* acts, const int64_t* qoff, const int32_t* wx,
                          int64_t kp, int64_t rows, int64_t npos, const RowParams& q,
                          const Requant& r, uint8_t* out, int64_t ldo);
// Narrow weights (NarrowWeights.packed, with q's residual): the AVX2 tile on the packed
// bytes with vpmaddubsw, whose pair sums cannot saturate then.
void cgemm_tile_avx2_narrow(const uint8_t* acts, const int64_t* qoff, const int8_t* w,
                            int64_t kp, int64_t rows, int64_t npos, const RowParams& q,
                            const Requant& r, uint8_t* out, int64_t ldo);
// AVX-VNNI (int8_cgemm_avxvnni.cpp): vpdpbusd on ymm, exact on the packed bytes.
void cgemm_tile_avxvnni(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t kp,
                        int64_t rows, int64_t npos, const RowParams& q, const Requant& r,
                        uint8_t* out, int64_t ldo);
void cgemm_tile_vnni(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t kp,
                     int64_t rows, int64_t npos, const RowParams& q, const Requant& r,
                     uint8_t* out, int64_t ldo);
using CTileFn = void (*)(const uint8_t*, const int64_t*, const int8_t*, int64_t, int64_t,
                         int64_t, const RowParams&, const Requant&, uint8_t*, int64_t);
// The AVX2 tiles (cgemm_tile_avx2*, cgemm_tile_avxvnni) requantize with per-channel vector
// constants (Chan, int8_requant_avx2.h; kChanBytes a channel). A tile makes its rows' own
// unless RowParams.chans has them, made once per convolution by make_chans_avx2: with few
// k-quads a tile's work is small (MobileNetV2's 16-deep 1x1 layer: 6 channels x 64 positions
// x 4 k-quads), and the tile's code outside its loops, mostly making them, was a large share
// of such a layer's time (bench/RESULTS.md, int8 kernels: AVX2).
constexpr int64_t kChanBytes = 352;
void make_chans_avx2(const int32_t* bias, const int32_t* multiplier, const int32_t* shift,
                     int64_t n, const Requant& r, uint8_t* out);

// The tile of the current ISA (the family's table, int8_conv_kernels.h); narrow: the weights
// are in the narrow form (above), which only cgemm_tile_avx2_narrow reads (the AVX2 tiles
// without VNNI).
CTileFn cgemm_tile(bool narrow = false);
// Whether the current ISA's tile takes the narrow form.
inline bool narrow_tile() { return cgemm_tile(true) == cgemm_tile_avx2_narrow; }
// Whether `tile` reads RowParams.chans.
inline bool tile_takes_chans(CTileFn tile) {
    return tile == cgemm_tile_avx2 || tile == cgemm_tile_avx2_narrow ||
           tile == cgemm_tile_avxvnni;
}
// Space for n channels' table (kChanBytes each; the calling thread's Space::chans) where `tile`
// takes one and each weight block's tile runs `visits` >= kChanMinVisits times in the call,
// else null; fill_chans writes it, as an orphaned `omp for` (inside a parallel region, its
// threads share the channels). With fewer visits (batch 1, small maps) the tiles' own
// constants are cheaper than the table (bench/RESULTS.md, int8 kernels: AVX2).
constexpr int64_t kChanMinVisits = 8;
uint8_t* chans_space(CTileFn tile, int64_t visits, int64_t n);
void fill_chans(const int32_t* bias, const int32_t* multiplier, const int32_t* shift, int64_t n,
                const Requant& r, uint8_t* table);

// One plane (h, w) padded: (pt + h + pb, pl + w + pr) bytes, the zero point z outside and
// every byte xor flip (the sign bit, for s8) inside. The AVX2 version may read the source up
// to src_end (its plane's end when null); all write exactly the padded plane.
struct PadPlane {
    int64_t h, w, pt, pb, pl, pr;
    uint8_t z, flip;
    const uint8_t* src_end = nullptr;
};
void pad_plane_generic(const uint8_t* src, const PadPlane& p, uint8_t* dst);
void pad_plane_avx2(const uint8_t* src, const PadPlane& p, uint8_t* dst);
void pad_plane_avx512(const uint8_t* src, const PadPlane& p, uint8_t* dst);

// The direct algorithm's quad planes of one channel quad of one image: 4 rows of the input
// (c0..c3, each h x w, sign bit flipped by `flip`, zero point z outside) -> per phase (a, b)
// of the stride, hph x wph quads at dst + (a*sw + b)*plane*4; plane >= hph*wph, and dst is
// writable 64 quads past the last phase's last row (rows may be written whole panels wide).
// Quad x of phase row y holds input column sw*x + b - pl of row sh*y + a - pt; wph may stop
// short of the right padding, which the next row's left padding then stands in for
// (quad_input's geometry at unit stride).
struct QuadPlanes {
    int64_t h, w, pt, pl, sh, sw, hph, wph, plane;
    uint8_t z, flip;
};
void quad_planes_generic(const uint8_t* const* rows4, const QuadPlanes& p, uint8_t* dst);
void quad_planes_avx2(const uint8_t* const* rows4, const QuadPlanes& p, uint8_t* dst);
void quad_planes_avx512(const uint8_t* const* rows4, const QuadPlanes& p, uint8_t* dst);
// Unit stride, AVX512-VBMI2 (CpuFeatures::avx512vbmi2): lanes (chunks,) from plane_lanes.
void quad_planes_vbmi2(const uint8_t* const* rows4, const QuadPlanes& p, const uint64_t* lanes,
                       int64_t chunks, uint8_t* dst);
// The plane's positions 64 at a time (chunks of ceil(hph * wph / 64)), bit l of chunk k set
// where position 64k + l holds an input byte (not padding; positions past the plane: unset).
std::vector<uint64_t> plane_lanes(const QuadPlanes& p);

struct ConvGeom;
struct QIn;

// x's quad planes (C/groups % 4 == 0), as the direct algorithm reads them and the packed one
// copies from for kernels of 2 or more taps: image n, group gi starts group_quads * (n * groups
// + gi) quads into `planes`, and k-quad q of output position (oy, ox) is the 4 bytes at
// planes + qoff[q] + 4 * (that start + oy * wph + ox). quad_input works out the geometry
// (planes null); batch_planes gives the calling thread's grow-only workspace for the batch's
// planes (valid until its next call), which fill_quad_planes writes as an orphaned `omp for`:
// called inside a parallel region, the region's threads share the planes. fill_image_planes
// writes image n's alone (its groups' g.groups * group_quads quads) to dst.
struct QuadInput {
    QuadPlanes qp;
    int64_t cq, span, group_quads;  // channel quads per group; quads per channel quad, per group
    std::vector<int64_t> qoff;      // (kp / 4,) bytes
    uint8_t* planes;
    // plane_lanes where the planes are written by quad_planes_vbmi2, else empty
    std::vector<uint64_t> lanes;
};
QuadInput quad_input(const ConvGeom& g, uint8_t flip, uint8_t z);
uint8_t* batch_planes(const ConvGeom& g, const QuadInput& in);
void fill_quad_planes(const uint8_t* x, const ConvGeom& g, const QuadInput& in);
void fill_image_planes(const uint8_t* x, const ConvGeom& g, const QuadInput& in, int64_t n,
                       uint8_t* dst);

// One packed block from quad planes: k-quad q of run u (u.src in quads from src, unit
// stride) is u.len quads at src + qoff[q] + 4 * u.src, copied to buf + q*kPos*4 + 4*u.dst.
// Nothing past k-quad nq - 1's last run is written: parts of one block may be copied by
// different threads.
void pack_quads_generic(const uint8_t* src, const int64_t* qoff, int64_t nq, const Run* runs,
                        int64_t nruns, uint8_t* buf);
void pack_quads_avx2(const uint8_t* src, const int64_t* qoff, int64_t nq, const Run* runs,
                     int64_t nruns, uint8_t* buf);
void pack_quads_avx512(const uint8_t* src, const int64_t* qoff, int64_t nq, const Run* runs,
                       int64_t nruns, uint8_t* buf);

// The direct algorithm (int8_conv_direct.cpp): whether it can run g, whether the automatic
// choice takes it, and the convolution itself (bias already corrected for the zero point).
bool direct_takes(const ConvGeom& g);
bool direct_wins(const ConvGeom& g);
// nw: the weights' narrow form, for the narrow tile (null: packed, the current ISA's tile).
void conv2d_direct(const uint8_t* x, uint8_t flip, uint8_t z, const ConvGeom& g,
                   const int8_t* packed, const NarrowWeights* nw, const int32_t* bias,
                   const Requant& r, uint8_t* out);

// Depthwise, one channel plane: xp (Hp, Wp) padded with the zero point (u8, sign bit
// flipped for s8) and readable kPadSlack bytes past its end; q holds the channel's bias
// (already minus z * sum(w)), multiplier and shift; out (oh, ow); scratch >= oh * wp + 64
// bytes. Any stride and dilation (fast paths at strides 1 and 2).
constexpr int64_t kPadSlack = 256;
void depthwise_plane_avx512(const uint8_t* xp, int64_t wp, const int8_t* w, const ConvGeom& g,
                            const RowParams& q, const Requant& r, uint8_t* out,
                            uint8_t* scratch);
// The AVX2 twin (windows of up to 26 taps, strides 1 and 2: depthwise_avx2_takes).
bool depthwise_avx2_takes(const ConvGeom& g);
void depthwise_plane_avx2(const uint8_t* xp, int64_t wp, const int8_t* w, const ConvGeom& g,
                          const RowParams& q, const Requant& r, uint8_t* out,
                          uint8_t* scratch);
// The AVX2 kernel with channels in the lanes (int8_depthwise_lanes_avx2.cpp): the whole
// convolution, any stride and dilation, windows of up to 26 taps, channel multiplier 1.
// at (h * w): input position (y, x)'s byte in the padded position-major plane,
// ((y + pt) * (w + pl + pr) + x + pl) * 16.
bool depthwise_lanes_avx2_takes(const ConvGeom& g);
void depthwise_lanes_avx2(const QIn& x, const ConvGeom& g, const int8_t* w,
                          const int32_t* bias, const Requant& r, const int64_t* at,
                          uint8_t* out);
// Its AVX512-VNNI twin (int8_depthwise_lanes_vnni.cpp): column dilation 1, kernels up to 8x8,
// every shift 33 or more (r.shift of the g.oc channels); words, sums: depthwise_consts.
bool depthwise_lanes_vnni_takes(const ConvGeom& g, const Requant& r);
void depthwise_lanes_vnni(const QIn& x, const ConvGeom& g, const int32_t* words,
                          const int32_t* sums, const int32_t* bias, const Requant& r,
                          const int64_t* at, uint8_t* out);
// AVX-VNNI (vpdpbusd on ymm; column dilation 1, strides 1 and 2, kernels up to 8x8:
// depthwise_avxvnni_takes).
bool depthwise_avxvnni_takes(const ConvGeom& g);
void depthwise_plane_avxvnni(const uint8_t* xp, int64_t wp, const int8_t* w, const ConvGeom& g,
                             const RowParams& q, const Requant& r, uint8_t* out,
                             uint8_t* scratch);

}  // namespace int8
}  // namespace tianyuan
