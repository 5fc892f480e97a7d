// br_sumsq / br_sumsq_cat: partial j (a workgroup of 256) of parameter p (group y):
// its 1024 lanes (thread u holds lanes u, u+256, u+512, u+768), each summing
// fmaf(x, x, lane) over its elements in index order, then the halving tree from
// s = 512 (backend/cpu/cpu_optim.c states the partition).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t a, tab, out_; // tab 0: one parameter, all n
    uint n;
};

shared float red[256];

void main() {
    Args x = Args(pc.args);
    F32 a = F32(x.a), o = F32(x.out_);
    U32 tab = U32(x.tab);
    uint j = gl_WorkGroupID.x, p = gl_WorkGroupID.y, u = gl_LocalInvocationID.x;
    uint off = 0u, len = x.n;
    if (x.tab != 0ul) {
        off = tab.v[2u * p];
        len = tab.v[2u * p + 1u];
        uint avail = off < x.n ? x.n - off : 0u;
        if (avail == 0u) off = 0u;
        len = min(len, avail);
    }
    float lane[4] = float[4](0.0, 0.0, 0.0, 0.0);
    for (uint c0 = j * 1024u; c0 < len; c0 += 64u * 1024u)
        for (uint q = 0u; q < 4u; q++) {
            uint t = u + 256u * q;
            if (c0 + t < len) {
                float v = a.v[off + c0 + t];
                lane[q] = fma_exact(v, v, lane[q]);
            }
        }
    precise float s0 = lane[0] + lane[2]; // s = 512
    precise float s1 = lane[1] + lane[3];
    precise float s = s0 + s1;            // s = 256
    red[u] = s;
    barrier();
    for (uint h = 128u; h >= 1u; h >>= 1) {
        if (u < h) {
            precise float t = red[u] + red[u + h];
            red[u] = t;
        }
        barrier();
    }
    if (u == 0u) o.v[p * 64u + j] = red[0];
}
