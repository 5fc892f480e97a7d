// Staging into row-major f16 (br_cvt, br_cvt_cols, br_cvt_pad, br_cvt_both's dst):
// dst[row][c] = f16(fl(src[row][col0 + c]·col[c])·scale) (no col: f16(src·scale)) for
// row < m, c < k; zero for c in k..ld−1 and rows m..mpad−1. dst [mpad][ld].
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t src, col, dst; // col 0: none
    uint ld_src, col0, m, k, ld, mpad;
    uint col_group, col_stride;
    float scale;
};

void main() {
    Args a = Args(pc.args);
    F32 src = F32(a.src);
    F32 col = F32(a.col);
    U16 dst = U16(a.dst);
    uint ld = a.ld;
    FOR_EACH(i, a.mpad * ld) {
        uint row = i / ld, c = i % ld;
        uint h = 0u;
        if (row < a.m && c < a.k) {
            precise float x = src.v[row * a.ld_src + a.col0 + c];
            if (a.col != 0ul) x = x * col.v[grouped(c, a.col_group, a.col_stride)];
            precise float y = x * a.scale;
            h = f16_bits(y);
        }
        dst.v[i] = uint16_t(h);
    }
}
