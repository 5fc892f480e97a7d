// br_step_ctrl, on one thread (a handful of parameters): the parameters' norms from
// their sumsq partials (f64 sums in order), the clip factor, and the step schedule
// or the refusal of a non-finite step (backend/cpu/cpu_sign.c states it). The
// roots are f64 roots rounded once, as the CPU's sqrt.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t partials, hyper, state, sched, sign_sched, norms;
    uint np, nclip;
    float sign_beta1, sign_beta2;
};

// sqrt(x) of an f64, correctly rounded to f64 (Vulkan's f64 sqrt need not be): a
// Newton correction with the exact residual.
double sqrt_f64(double x) {
    if (!(x > 0.0) || isinf(x)) return sqrt(x);
    double y = sqrt(x);
    precise double r = fma(-y, y, x); // exact where fma is fused; one step either way
    return y + r / (2.0 * y);
}

void main() {
    if (gl_GlobalInvocationID.x != 0u) return;
    Args a = Args(pc.args);
    F32 part = F32(a.partials), hyper = F32(a.hyper), state = F32(a.state);
    F32 sched = F32(a.sched), ss = F32(a.sign_sched), norms = F32(a.norms);
    bool finite = true;
    double clip = 0.0;
    for (uint i = 0u; i < a.np; i++) {
        double s = 0.0;
        for (uint j = 0u; j < 64u; j++) s += double(part.v[i * 64u + j]);
        if (isnan(s) || isinf(s)) finite = false;
        norms.v[i] = float(sqrt_f64(s));
        if (i < a.nclip) clip += s;
    }
    double norm = sqrt_f64(clip);
    norms.v[a.np] = float(norm);
    float max_norm = hyper.v[2];
    float gm = max_norm > 0.0 && norm > double(max_norm) ? float(double(max_norm) / norm) : 1.0;
    if (!finite) {
        sched.v[2] = gm;
        sched.v[3] = 1.0;
        ss.v[2] = gm;
        ss.v[3] = 1.0;
        return;
    }
    precise float t = state.v[0] + 1.0;
    precise float b1t = state.v[1] * a.sign_beta1;
    precise float b2t = state.v[2] * a.sign_beta2;
    state.v[0] = t;
    state.v[1] = b1t;
    state.v[2] = b2t;
    sched.v[0] = hyper.v[0];
    sched.v[1] = t;
    sched.v[2] = gm;
    sched.v[3] = 0.0;
    ss.v[0] = hyper.v[1];
    ss.v[1] = t;
    ss.v[2] = gm;
    ss.v[3] = 0.0;
    precise float c1 = 1.0 - b1t;
    precise float c2 = 1.0 - b2t;
    ss.v[4] = c1;
    ss.v[5] = c2;
    ss.v[6] = 0.0;
    ss.v[7] = 0.0;
}
