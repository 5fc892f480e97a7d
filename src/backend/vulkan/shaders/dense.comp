// The small dense f32 linear, one thread per output, its terms in the contract's
// order with one fmaf each from 0 (backend/cpu/cpu_dense.c):
//   fwd (bwd = 0): out[i][o] (+)= Σ_j a[i][j]·w[o][j], j = 0..k−1
//   bwd:           dx[i][j] = dx[i][j] + Σ_o dy[i][o]·w[o][j], o = 0..r−1
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t a, w, out_;
    uint m, k, r, accumulate, bwd;
};

void main() {
    Args g = Args(pc.args);
    F32 a = F32(g.a), w = F32(g.w), o = F32(g.out_);
    uint k = g.k, r = g.r;
    if (g.bwd == 0u) {
        FOR_EACH(e, g.m * r) {
            uint i = e / r, oo = e % r;
            float acc = 0.0;
            for (uint j = 0u; j < k; j++) acc = fma_exact(a.v[i * k + j], w.v[oo * k + j], acc);
            if (g.accumulate != 0u) {
                precise float s = o.v[e] + acc;
                o.v[e] = s;
            } else {
                o.v[e] = acc;
            }
        }
    } else {
        FOR_EACH(e, g.m * k) {
            uint i = e / k, j = e % k;
            float acc = 0.0;
            for (uint oo = 0u; oo < r; oo++) acc = fma_exact(a.v[i * r + oo], w.v[oo * k + j], acc);
            precise float s = o.v[e] + acc;
            o.v[e] = s;
        }
    }
}
