// br_sign_rowdot, one thread per (path, row): grad = h·M (or grad + h·M), its row
// norm (32 lanes of fmaf(g, g, ·) then the halving tree, then sqrtf), and
// dsum (+)= Σ_k s·M in the same 32-lane order (backend/cpu/cpu_layer_ops.c).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t mat, bits, rowscale, grad, dsum, rownorm; // 0: absent
    uint rows, r, ldm, col0, paths;
    uint bits_stride, scale_stride, grad_stride, dsum_stride, rownorm_stride;
    uint accumulate;
};

void main() {
    Args a = Args(pc.args);
    U32 mat = U32(a.mat), bits = U32(a.bits);
    F32 rs = F32(a.rowscale), grad = F32(a.grad), dsum = F32(a.dsum), rn = F32(a.rownorm);
    uint r = a.r, words = r / 32u;
    FOR_EACH(e, a.paths * a.rows) {
        uint p = e / a.rows, i = e % a.rows;
        uint mrow = i * a.ldm + a.col0 + p * r;
        float lane[32];
        if (a.grad != 0ul) {
            float h = rs.v[p * a.scale_stride + i];
            uint g0 = p * a.grad_stride + i * r;
            for (uint k = 0u; k < r; k++) {
                precise float v = h * uintBitsToFloat(mat.v[mrow + k]);
                if (a.accumulate != 0u) v = grad.v[g0 + k] + v;
                grad.v[g0 + k] = v;
            }
            if (a.rownorm != 0ul) {
                for (int l = 0; l < 32; l++) lane[l] = 0.0;
                for (uint k = 0u; k < r; k++) {
                    float g = grad.v[g0 + k];
                    lane[k % 32u] = fma_exact(g, g, lane[k % 32u]);
                }
                for (int s = 16; s >= 1; s >>= 1)
                    for (int t = 0; t < s; t++) {
                        precise float x = lane[t] + lane[t + s];
                        lane[t] = x;
                    }
                rn.v[p * a.rownorm_stride + i] = sqrt_exact(lane[0]);
            }
        }
        if (a.dsum != 0ul) {
            for (int l = 0; l < 32; l++) lane[l] = 0.0;
            for (uint w = 0u; w < words; w++) {
                uint word = bits.v[p * a.bits_stride + i * words + w];
                for (uint l = 0u; l < 32u; l++) {
                    uint u = mat.v[mrow + 32u * w + l] ^ (((~word >> l) & 1u) << 31);
                    precise float x = lane[l] + uintBitsToFloat(u);
                    lane[l] = x;
                }
            }
            for (int s = 16; s >= 1; s >>= 1)
                for (int t = 0; t < s; t++) {
                    precise float x = lane[t] + lane[t + s];
                    lane[t] = x;
                }
            uint at = p * a.dsum_stride + i;
            if (a.accumulate != 0u) {
                precise float x = dsum.v[at] + lane[0];
                dsum.v[at] = x;
            } else {
                dsum.v[at] = lane[0];
            }
        }
    }
}
