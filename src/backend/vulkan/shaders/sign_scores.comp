// The sign step's per-entry pass (backend/cpu/cpu_sign.c): latent Adam (latent, m1,
// v updated; a candidate is a latent whose sign disagrees with its bit by more than
// hyst, scored |latent|) or the exact-flip score (a candidate lowers the loss by
// −Δ). key[e] = the score's bits for a candidate, 0 otherwise.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "sign_step.glsl"

void main() {
    Args a = Args(pc.args);
    if (refused(a)) return;
    F32 sched = F32(a.sched), grad = F32(a.grad), ws = F32(a.ws);
    U32 bits = U32(a.bits), key = U32(a.ws);
    uint rows = a.rows, r = a.r, words = r / 32u;
    float scal = ws.v[rows * r];
    FOR_EACH(e, rows * r) {
        uint i = e / r, k = e % r;
        uint bit = (bits.v[i * words + k / 32u] >> (k % 32u)) & 1u;
        uint kb = 0u;
        if (a.exact == 0u) {
            F32 lat = F32(a.latent), m1 = F32(a.m1), v = F32(a.v);
            float lr = sched.v[0], gm = sched.v[2], bc1 = sched.v[4], bc2 = sched.v[5];
            precise float omb1 = 1.0 - a.beta1, omb2 = 1.0 - a.beta2;
            precise float g = grad.v[e] * gm;
            precise float m = a.beta1 * m1.v[e] + omb1 * g;
            m1.v[e] = m;
            float ve;
            if (a.factored != 0u) {
                precise float vv = v.v[i] * v.v[rows + k];
                ve = scal > 0.0 ? div_f32(vv, scal) : 0.0;
            } else {
                precise float vn = a.beta2 * v.v[e] + omb2 * (g * g);
                v.v[e] = vn;
                ve = vn;
            }
            float mh = div_f32(m, bc1), vh = div_f32(ve, bc2);
            precise float num = lr * mh;
            precise float den = sqrt_exact(vh) + a.eps;
            float upd = div_f32(num, den);
            precise float x = lat.v[e] - upd;
            float lv = x >= -a.clamp_ ? x : -a.clamp_;
            lv = lv <= a.clamp_ ? lv : a.clamp_;
            lat.v[e] = lv;
            bool cand = (lv > 0.0) != (bit != 0u) && abs(lv) > a.hyst;
            kb = cand ? floatBitsToUint(abs(lv)) : 0u;
        } else {
            F32 rowf = F32(a.rowf), rowq = F32(a.rowq), colf = F32(a.colf), colq = F32(a.colq);
            precise float qr = rowf.v[i] * rowf.v[i];
            if (a.rowq != 0ul) qr = qr * rowq.v[i];
            precise float cq = scal * qr;
            precise float qc = colf.v[k] * colf.v[k];
            if (a.colq != 0ul) qc = qc * colq.v[k];
            precise float quad = cq * qc;
            precise float tg = 2.0 * grad.v[e];
            precise float dl = bit != 0u ? quad - tg : quad + tg;
            kb = dl < 0.0 ? floatBitsToUint(-dl) : 0u;
        }
        key.v[e] = kb;
    }
}
