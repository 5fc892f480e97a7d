// The latent sign step's factored second moment (backend/cpu/cpu_sign.c:
// factored_update), one thread per row (y = 0: vr[i] from the row's 32-lane Σ g²)
// or per column (y = 1: vc[k] from chunks of BR_SIGN_CHUNK = 64 rows, each summed in
// row order, the chunks summed in order); g = fl(grad·gm), g² rounded, no fmaf.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "sign_step.glsl"

void main() {
    Args a = Args(pc.args);
    if (refused(a)) return;
    F32 grad = F32(a.grad), v = F32(a.v);
    float gm = F32(a.sched).v[2];
    precise float omb2 = 1.0 - a.beta2;
    uint rows = a.rows, r = a.r;
    if (gl_WorkGroupID.y == 0u) {
        FOR_EACH(i, rows) {
            float p[32];
            for (int l = 0; l < 32; l++) p[l] = 0.0;
            for (uint k = 0u; k < r; k++) {
                precise float g = grad.v[i * r + k] * gm;
                precise float s = p[k % 32u] + g * g;
                p[k % 32u] = s;
            }
            for (int off = 16; off >= 1; off >>= 1)
                for (int l = 0; l < off; l++) {
                    precise float s = p[l] + p[l + off];
                    p[l] = s;
                }
            float mean = div_f32(p[0], float(r));
            precise float nv = a.beta2 * v.v[i] + omb2 * mean;
            v.v[i] = nv;
        }
    } else {
        FOR_EACH(k, r) {
            precise float total = 0.0;
            for (uint c0 = 0u; c0 < rows; c0 += 64u) {
                precise float chunk = 0.0;
                for (uint i = c0; i < min(rows, c0 + 64u); i++) {
                    precise float g = grad.v[i * r + k] * gm;
                    chunk = chunk + g * g;
                }
                total = total + chunk;
            }
            precise float nv = a.beta2 * v.v[rows + k] + omb2 * div_f32(total, float(rows));
            v.v[rows + k] = nv;
        }
    }
}
