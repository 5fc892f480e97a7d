// The GEMMs without cooperative matrices (br_mm, br_mm_bits, br_mm_tn): a 64×64
// output tile per workgroup of 256, each thread 4×4 outputs, k in steps of 16
// through shared memory, f16 operands widened to f32 (exact) and the sign bitmaps
// expanded to ±1 as they are loaded; f32 accumulation; then the epilogue
//   out[i][ocol + j] = fl(fl(oscale·Σ)·colscale[j]) + fl(beta·c[i][ocol + j])
// (no oscale, colscale or c: the sum itself, as the CPU's plain product).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t act, plane, out_, colscale, c; // colscale, c 0: none
    uint m, n, k, lda, ldp, ldo, ocol;
    uint mode;  // 0: plane f16 [n][k]; 1: bits rows [n][k/32]; 2: bits cols [k][⌈n/32⌉];
                // 3: mm_tn, act f16 [k][lda] and plane f16 [k][ldp]
    uint c_f16; // c is f16
    uint plain; // oscale 1, no colscale, no c
    float oscale, beta;
};

#define TM 64
#define TN 64
#define TK 16
shared float As[TK][TM + 1];
shared float Bs[TK][TN + 1];

float h2f(uint h) { return uintBitsToFloat(f32_bits_of_f16(h)); }

void main() {
    Args g = Args(pc.args);
    U16 act = U16(g.act), plane16 = U16(g.plane), c16 = U16(g.c);
    U32 bits = U32(g.plane);
    F32 o = F32(g.out_), colscale = F32(g.colscale), c32 = F32(g.c);
    uint tid = gl_LocalInvocationID.x;
    uint tx = tid % 16u, ty = tid / 16u;
    uint i0 = gl_WorkGroupID.y * TM, j0 = gl_WorkGroupID.x * TN;
    uint words_cols = (g.n + 31u) / 32u;
    float acc[4][4];
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) acc[a][b] = 0.0;

    for (uint k0 = 0u; k0 < g.k; k0 += TK) {
        // 1024 elements of each tile, 4 per thread
        for (uint e = tid; e < TM * TK; e += 256u) {
            uint ii = e / TK, kk = e % TK; // act: consecutive k for row-major reads
            if (g.mode == 3u) ii = e % TM, kk = e / TM;
            uint i = i0 + ii, kg = k0 + kk;
            float v = 0.0;
            if (i < g.m && kg < g.k)
                v = h2f(uint(act.v[g.mode == 3u ? kg * g.lda + i : i * g.lda + kg]));
            As[kk][ii] = v;
        }
        for (uint e = tid; e < TN * TK; e += 256u) {
            uint jj, kk;
            if (g.mode == 0u || g.mode == 1u) jj = e / TK, kk = e % TK;
            else jj = e % TN, kk = e / TN;
            uint j = j0 + jj, kg = k0 + kk;
            float v = 0.0;
            if (j < g.n && kg < g.k) {
                if (g.mode == 0u) {
                    v = h2f(uint(plane16.v[j * g.k + kg]));
                } else if (g.mode == 1u) {
                    uint word = bits.v[j * (g.k / 32u) + kg / 32u];
                    v = ((word >> (kg % 32u)) & 1u) != 0u ? 1.0 : -1.0;
                } else if (g.mode == 2u) {
                    uint word = bits.v[kg * words_cols + j / 32u];
                    v = ((word >> (j % 32u)) & 1u) != 0u ? 1.0 : -1.0;
                } else {
                    v = h2f(uint(plane16.v[kg * g.ldp + j]));
                }
            }
            Bs[kk][jj] = v;
        }
        barrier();
        for (uint kk = 0u; kk < TK; kk++) {
            float av[4], bv[4];
            for (int a = 0; a < 4; a++) av[a] = As[kk][ty + 16u * uint(a)];
            for (int b = 0; b < 4; b++) bv[b] = Bs[kk][tx + 16u * uint(b)];
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++) acc[a][b] = fma(av[a], bv[b], acc[a][b]);
        }
        barrier();
    }

    for (int a = 0; a < 4; a++) {
        uint i = i0 + ty + 16u * uint(a);
        if (i >= g.m) continue;
        for (int b = 0; b < 4; b++) {
            uint j = j0 + tx + 16u * uint(b);
            if (j >= g.n) continue;
            uint at = i * g.ldo + g.ocol + j;
            precise float v = acc[a][b];
            if (g.plain == 0u) {
                v = g.oscale * v;
                if (g.colscale != 0ul) v = v * colscale.v[j];
                if (g.c != 0ul) {
                    float cv = g.c_f16 != 0u ? h2f(uint(c16.v[at])) : c32.v[at];
                    precise float bc = g.beta * cv;
                    v = v + bc;
                }
            }
            o.v[at] = v;
        }
    }
}
