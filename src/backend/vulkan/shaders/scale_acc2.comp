// out = fl(fl(a0·col0) + fl(a1·col1)) per element (br_scale_acc2).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t a0, col0, a1, col1, out_;
    uint m, k;
};

void main() {
    Args g = Args(pc.args);
    F32 a0 = F32(g.a0), c0 = F32(g.col0), a1 = F32(g.a1), c1 = F32(g.col1), o = F32(g.out_);
    FOR_EACH(i, g.m * g.k) {
        uint c = i % g.k;
        precise float v0 = a0.v[i] * c0.v[c];
        precise float v1 = a1.v[i] * c1.v[c];
        precise float s = v0 + v1;
        o.v[i] = s;
    }
}
