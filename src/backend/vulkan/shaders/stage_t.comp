// Staging transposed (br_cvt_t, br_cvt_both's dst_t): dst[c][t] = the staged
// src[t][c] for c < k, t < ntok; zero elsewhere. src [ntok][k]; dst [kpad][tpad].
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t src, col, dst; // col 0: none
    uint ntok, k, tpad, kpad;
    uint col_group, col_stride;
    float scale;
};

void main() {
    Args a = Args(pc.args);
    F32 src = F32(a.src);
    F32 col = F32(a.col);
    U16 dst = U16(a.dst);
    uint tpad = a.tpad;
    FOR_EACH(i, a.kpad * tpad) {
        uint c = i / tpad, t = i % tpad;
        uint h = 0u;
        if (c < a.k && t < a.ntok) {
            precise float x = src.v[t * a.k + c];
            if (a.col != 0ul) x = x * col.v[grouped(c, a.col_group, a.col_stride)];
            precise float y = x * a.scale;
            h = f16_bits(y);
        }
        dst.v[i] = uint16_t(h);
    }
}
