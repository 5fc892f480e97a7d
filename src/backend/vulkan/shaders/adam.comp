// Adam (br_adam, br_adam_cat; backend/cpu/cpu_optim.c states it), each entry on its
// own, every operation rounded to f32; divisions and the root correctly rounded.
// With a schedule buffer, {lr, t, grad_mul, skip} are read here (skip ≠ 0: nothing
// changes) and the bias corrections 1 − β^t computed in f64.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t w, m1, m2, grad, mask, rel_floor, sched; // mask, rel_floor, sched 0: none
    uint n;
    float lr, step, grad_mul, beta1, beta2, eps, rho_all, bc1, bc2;
};

// 1 − β^t rounded to f32, β^t by squaring in f64 (t a whole number ≥ 1).
float bias_corr(float beta, float t) {
    double r = 1.0, b = double(beta);
    uint e = uint(t);
    while (e != 0u) {
        if ((e & 1u) != 0u) r *= b;
        b *= b;
        e >>= 1;
    }
    return float(1.0 - r);
}

void main() {
    Args x = Args(pc.args);
    F32 w = F32(x.w), m1 = F32(x.m1), m2 = F32(x.m2), grad = F32(x.grad), mask = F32(x.mask);
    F32 rho = F32(x.rel_floor), sched = F32(x.sched);
    float lr = x.lr, grad_mul = x.grad_mul, bc1 = x.bc1, bc2 = x.bc2;
    if (x.sched != 0ul) {
        if (sched.v[3] != 0.0) return;
        lr = sched.v[0];
        grad_mul = sched.v[2];
        bc1 = bias_corr(x.beta1, sched.v[1]);
        bc2 = bias_corr(x.beta2, sched.v[1]);
    }
    precise float omb1 = 1.0 - x.beta1, omb2 = 1.0 - x.beta2;
    FOR_EACH(i, x.n) {
        if (x.mask != 0ul && mask.v[i] == 0.0) continue;
        precise float g = grad.v[i] * grad_mul;
        precise float m1n = x.beta1 * m1.v[i] + omb1 * g;
        precise float m2n = x.beta2 * m2.v[i] + (omb2 * g) * g;
        m1.v[i] = m1n;
        m2.v[i] = m2n;
        float mh = div_f32(m1n, bc1), vh = div_f32(m2n, bc2);
        precise float num = lr * mh;
        precise float den = sqrt_exact(vh) + x.eps;
        float st = div_f32(num, den);
        float rho_i = x.rel_floor != 0ul ? rho.v[i] : x.rho_all;
        float wi = w.v[i];
        precise float nw;
        if (rho_i > 0.0) nw = wi - st * max(abs(wi), rho_i);
        else nw = wi - st;
        w.v[i] = nw;
    }
}
