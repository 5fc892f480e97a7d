// br_colsum_fused, first pass: the AB partials as colsum_part, and in the same pass
// the fused elementwise op on every element of the block's rows (what br_cvt,
// br_scale_acc, br_cvt_t write), and the padding those ops zero (by the threads
// of the last block; dst_t's rows k..kpad−1 the host zeroes by a fill).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t a, b, col, dst, dst_t, part; // dst_t 0: none
    uint rows, k, block, nb;
    uint kind, accumulate, group, stride; // kind: 0 CVT_A, 1 CVT_B, 2 SCALE_B
    uint ld_t, mpad, kpad;
    float scale, t_scale;
};

void main() {
    Args g = Args(pc.args);
    F32 a = F32(g.a), b = F32(g.b), col = F32(g.col), part = F32(g.part);
    F32 dst32 = F32(g.dst);
    U16 dst16 = U16(g.dst), dst_t = U16(g.dst_t);
    uint k = g.k, ld_t = g.ld_t;
    bool has_t = g.dst_t != 0ul;
    FOR_EACH(i, g.nb * k) {
        uint blk = i / k, c = i % k;
        uint r0 = blk * g.block, r1 = min(g.rows, r0 + g.block);
        float colv = col.v[grouped(c, g.group, g.stride)];
        precise float acc = 0.0;
        for (uint row = r0; row < r1; row++) {
            uint e = row * k + c;
            float av = a.v[e], bv = b.v[e];
            acc = fma_exact(av, bv, acc);
            if (g.kind != 2u) {
                precise float s = (g.kind == 0u ? av : bv) * colv;
                precise float y = s * g.scale;
                uint h = f16_bits(y);
                dst16.v[e] = uint16_t(h);
                if (has_t) dst_t.v[c * ld_t + row] = uint16_t(h);
            } else {
                precise float v = bv * colv;
                if (g.accumulate != 0u) {
                    precise float s = dst32.v[e] + v;
                    dst32.v[e] = s;
                } else {
                    dst32.v[e] = v;
                }
                if (has_t) {
                    precise float s = av * colv;
                    precise float y = s * g.t_scale;
                    dst_t.v[c * ld_t + row] = uint16_t(f16_bits(y));
                }
            }
        }
        part.v[i] = acc;
        if (blk == g.nb - 1u) {
            if (g.kind != 2u)
                for (uint row = g.rows; row < g.mpad; row++) dst16.v[row * k + c] = uint16_t(0u);
            if (has_t) {
                for (uint t = g.rows; t < ld_t; t++) dst_t.v[c * ld_t + t] = uint16_t(0u);
            }
        }
    }
}
