// One workgroup of 256 = BR_SIGN_LANES lanes: the sign step's one scalar, into ws
// after the keys. Latent factored: mean_i vr = (Σ vr in 256 lanes then the halving
// tree) / rows. Exact: c = curv2 · Σ normsrc² in f64 lanes and tree, rounded once
// (curv2 alone without normsrc).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "sign_step.glsl"

shared float pf[256];
shared double pd[256];

void main() {
    Args a = Args(pc.args);
    if (refused(a)) return;
    uint l = gl_LocalInvocationID.x;
    F32 ws = F32(a.ws);
    uint at = a.rows * a.r;
    if (a.exact == 0u) {
        F32 vr = F32(a.v);
        precise float s = 0.0;
        for (uint i = l; i < a.rows; i += 256u) s = s + vr.v[i];
        pf[l] = s;
        barrier();
        for (uint off = 128u; off >= 1u; off >>= 1) {
            if (l < off) {
                precise float t = pf[l] + pf[l + off];
                pf[l] = t;
            }
            barrier();
        }
        if (l == 0u) ws.v[at] = div_f32(pf[0], float(a.rows));
    } else {
        if (a.normsrc == 0ul) {
            if (l == 0u) ws.v[at] = a.curv2;
            return;
        }
        F32 x = F32(a.normsrc);
        precise double s = 0.0;
        for (uint j = l; j < a.nnorm; j += 256u) s += double(x.v[j]) * double(x.v[j]);
        pd[l] = s;
        barrier();
        for (uint off = 128u; off >= 1u; off >>= 1) {
            if (l < off) {
                precise double t = pd[l] + pd[l + off];
                pd[l] = t;
            }
            barrier();
        }
        if (l == 0u) {
            precise float c = a.curv2 * float(pd[0]);
            ws.v[at] = c;
        }
    }
}
