// The AMX work item's tile loop (int8_amx.h), included by int8_tiles_amx.cpp once per tile
// implementation: TY_TILE_LOAD / STORE / ZERO / DP (TDPBUSD) / DPSU (TDPBSUD) and the
// functions' names TY_ITEM_NAME, TY_STORE_NAME and TY_GEMM_NAME are defined around each
// inclusion. Tiles 0-3: acc (positions 0-15 | 16-31) x (channels 0-15 | 16-31);
// 4-5: the two position halves' u8 rows; 6-7: the two channel halves' s8 rows.
// No include guard: included on purpose twice.

void TY_ITEM_NAME(const uint8_t* a0, const uint8_t* a1, int64_t lda, const int64_t* soff,
                  int64_t steps, const int8_t* w, const AmxPending* prev) {
    TY_TILE_ZERO(0);
    TY_TILE_ZERO(1);
    TY_TILE_ZERO(2);
    TY_TILE_ZERO(3);
    __asm__ volatile("" ::: "memory");  // the operands were written by ordinary stores
    // prev's pieces: after step s (of steps), those below kAmxPieces * (s + 1) / steps
    int piece = 0;
    int64_t due = 0;  // kAmxPieces * (steps done) - steps * (pieces done)
    Drain drain(prev ? *prev : AmxPending{});
    // the weights first, then each position half just before its two products, not all four
    // operands first (bench/RESULTS.md, int8 kernels: AMX)
    for (int64_t s = 0; s < steps; ++s, w += 2048) {
        TY_TILE_LOAD(6, w, 64);
        TY_TILE_LOAD(7, w + 1024, 64);
        TY_TILE_LOAD(4, a0 + soff[s], lda);
        TY_TILE_DP(0, 4, 6);
        TY_TILE_DP(1, 4, 7);
        TY_TILE_LOAD(5, a1 + soff[s], lda);
        TY_TILE_DP(2, 5, 6);
        TY_TILE_DP(3, 5, 7);
        if (!prev) continue;
        for (due += kAmxPieces; due >= steps; due -= steps) drain_piece(drain, piece++);
    }
}

void TY_STORE_NAME(int32_t* acc) {
    TY_TILE_STORE(0, acc, kAmxOc * 4);
    TY_TILE_STORE(1, acc + 16, kAmxOc * 4);
    TY_TILE_STORE(2, acc + 16 * kAmxOc, kAmxOc * 4);
    TY_TILE_STORE(3, acc + 16 * kAmxOc + 16, kAmxOc * 4);
    __asm__ volatile("" ::: "memory");  // acc is read by ordinary loads next
}

// amx_gemm_block (int8_amx.h): tiles 4-5 the weights' channel halves, 6-7 the block's two
// position halves; 0-3 the sums (channels 0-15 | 16-31) x (positions 0-15 | 16-31) of a pass.
void TY_GEMM_NAME(const uint8_t* buf, int64_t chunks, const int8_t* wa, int64_t j0, int64_t j1,
                  int64_t npos, const RowParams& q, const Requant& r, uint8_t* out, int64_t ld,
                  const StoreSeg* segs, int nsegs, AmxGemmState& st) {
    constexpr int64_t kRow = kPos * kGroup;  // a k-quad's bytes in the block
    const int64_t passes = npos > kAmxPos ? 2 : 1, steps = passes * chunks;
    for (int64_t j = j0; j < j1; j += kAmxOc) {
        // st's pending pieces: after step s, those below kRowPieces * (s + 1) / steps
        const RowDrain d = row_drain(st);
        int piece = 0;
        int64_t due = 0;
        for (int64_t pass = 0; pass < passes; ++pass) {
            TY_TILE_ZERO(0);
            TY_TILE_ZERO(1);
            TY_TILE_ZERO(2);
            TY_TILE_ZERO(3);
            __asm__ volatile("" ::: "memory");  // the block was written by ordinary stores
            const int8_t* w = wa + j / kAmxOc * chunks * 2048;
            const uint8_t* b = buf + pass * kAmxPos * kGroup;
            for (int64_t cc = 0; cc < chunks; ++cc, w += 2048, b += 16 * kRow) {
                TY_TILE_LOAD(4, w, 64);
                TY_TILE_LOAD(6, b, kRow);
                TY_TILE_DPSU(0, 4, 6);
                TY_TILE_LOAD(7, b + 16 * kGroup, kRow);
                TY_TILE_DPSU(1, 4, 7);
                TY_TILE_LOAD(5, w + 1024, 64);
                TY_TILE_DPSU(2, 5, 6);
                TY_TILE_DPSU(3, 5, 7);
                if (!st.acc) continue;
                for (due += kRowPieces; due >= steps; due -= steps) row_drain_piece(d, piece++);
            }
            int32_t* acc = st.stage[st.slot] + pass * kAmxPos;
            TY_TILE_STORE(0, acc, kPos * 4);
            TY_TILE_STORE(1, acc + 16, kPos * 4);
            TY_TILE_STORE(2, acc + 16 * kPos, kPos * 4);
            TY_TILE_STORE(3, acc + 16 * kPos + 16, kPos * 4);
            __asm__ volatile("" ::: "memory");  // the stage is read by ordinary loads next
        }
        // the pending chunk is stored: this one takes its place
        st.acc = st.stage[st.slot];
        st.slot ^= 1;
        st.j = j;
        st.end = j1;
        st.npos = npos;
        st.ld = ld;
        st.q = q;
        st.r = &r;
        st.out = out;
        st.nsegs = nsegs;
        for (int i = 0; i < nsegs; ++i) st.segs[i] = segs[i];
    }
}
