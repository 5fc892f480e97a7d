// Column reduction, second pass: total[c] = Σ_blk part[blk][c] in block order from
// 0; out[grouped(c)] = total, or out + total.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t part, out_;
    uint nb, k, accumulate, group, stride;
};

void main() {
    Args g = Args(pc.args);
    F32 part = F32(g.part), o = F32(g.out_);
    FOR_EACH(c, g.k) {
        precise float total = 0.0;
        for (uint blk = 0u; blk < g.nb; blk++) total = total + part.v[blk * g.k + c];
        uint at = grouped(c, g.group, g.stride);
        if (g.accumulate != 0u) {
            precise float s = o.v[at] + total;
            o.v[at] = s;
        } else {
            o.v[at] = total;
        }
    }
}
