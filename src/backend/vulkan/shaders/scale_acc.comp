// out[row][c] = a[row][c]·col[c], or out += that product rounded first (br_scale_acc).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t a, col, out_;
    uint m, k, accumulate;
};

void main() {
    Args g = Args(pc.args);
    F32 a = F32(g.a), col = F32(g.col), o = F32(g.out_);
    FOR_EACH(i, g.m * g.k) {
        precise float v = a.v[i] * col.v[i % g.k];
        if (g.accumulate != 0u) {
            precise float s = o.v[i] + v;
            o.v[i] = s;
        } else {
            o.v[i] = v;
        }
    }
}
