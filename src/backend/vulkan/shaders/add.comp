// out[i] = a[i] + b[i] (br_add; out may be a or b: element i reads only element i).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t a, b, out_;
    uint n;
};

void main() {
    Args g = Args(pc.args);
    F32 a = F32(g.a), b = F32(g.b), o = F32(g.out_);
    FOR_EACH(i, g.n) {
        precise float s = a.v[i] + b.v[i];
        o.v[i] = s;
    }
}
