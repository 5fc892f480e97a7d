// The GEMMs on cooperative matrices (VK_KHR_cooperative_matrix): br_mm, br_mm_bits and
// br_mm_tn with mm_tiled.comp's argument block and contract, the products on the
// device's matrix units (f16 operands, f32 accumulation).
//
// A workgroup computes one 64×64 output tile with 4 subgroups in a 2×2 grid, each a
// 32×32 quarter held as (32/CM)×(32/CN) accumulators of CM×CN; k advances 32 at a
// time. Each step stages A [64][32] and Bᵀ [64][32] as f16 in shared memory: f16
// operands copied bit for bit, sign bitmaps expanded to ±1, rows past m and columns
// past n zero. The subgroups coopMatLoad their CM×CK and CK×CN pieces from there.
// The epilogue passes each accumulator through a per-subgroup CM×CN f32 stage in
// shared memory, so every output element is written by one invocation with
// mm_tiled's bounds and arithmetic:
//   out[i][ocol + j] = fl(fl(oscale·Σ)·colscale[j]) + fl(beta·c[i][ocol + j])
// (no oscale, colscale or c: the sum itself).
//
// Specialization constants (set by vk_coop.c): 0 the workgroup size, 4 × the
// device's subgroup size (the pipeline requires full subgroups, so there are exactly
// 4 subgroups); 1, 2, 3 CM, CN, CK: an (M, N, K) the device lists for f16 A and B, f32
// C and result at subgroup scope, each dividing 32.
//
// Built a second time with BR_COOP_EMULATED (mm_coop_emulated, option
// vk_gemm=coop_emulated): the cooperative-matrix operations done in plain f32
// arithmetic on the same staged operands at the same offsets, each lane holding the
// accumulator elements it later reads from the stage. Everything else (staging,
// bitmap expansion, the subgroups' quarters, the epilogue) is this same code, which
// so runs, and is tested, on devices without cooperative matrices. Only a device with
// the extension checks the rest: the matrix operations themselves (layouts, strides,
// alignment) and subgroups that truly run side by side (lavapipe's take turns).
#version 460
#extension GL_GOOGLE_include_directive : require
#ifndef BR_COOP_EMULATED
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#endif
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#define BR_OWN_WORKGROUP_SIZE
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint CM = 16;
layout(constant_id = 2) const uint CN = 16;
layout(constant_id = 3) const uint CK = 16;

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t act, plane, out_, colscale, c; // colscale, c 0: none
    uint m, n, k, lda, ldp, ldo, ocol;
    uint mode;  // 0: plane f16 [n][k]; 1: bits rows [n][k/32]; 2: bits cols [k][⌈n/32⌉];
                // 3: mm_tn, act f16 [k][lda] and plane f16 [k][ldp]
    uint c_f16; // c is f16
    uint plain; // oscale 1, no colscale, no c
    float oscale, beta;
};

#define BM 64u
#define BN 64u
#define BK 32u
// Row stride of the staged operands in halves: 80 bytes keeps every piece a
// coopMatLoad reads 16-byte aligned and staggers the rows across banks.
#define LDS 40u

shared float16_t As[BM * LDS];    // A[ii][kk] at ii·LDS + kk (row-major A)
shared float16_t Bs[BN * LDS];    // B[kk][jj] at jj·LDS + kk (column-major B)
shared float Cs[4u * CM * CN];    // subgroup s's accumulator, row-major, at s·CM·CN

float h2f(uint h) { return uintBitsToFloat(f32_bits_of_f16(h)); }

void main() {
    Args g = Args(pc.args);
    U16 act = U16(g.act), plane16 = U16(g.plane), c16 = U16(g.c);
    U32 bits = U32(g.plane);
    F32 o = F32(g.out_), colscale = F32(g.colscale), c32 = F32(g.c);
    const uint WG = gl_WorkGroupSize.x;
    const uint RM = 32u / CM, RN = 32u / CN;
    uint tid = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    uint wm = sg / 2u, wn = sg % 2u; // the subgroup's quarter
    uint i0 = gl_WorkGroupID.y * BM, j0 = gl_WorkGroupID.x * BN;
    uint words_cols = (g.n + 31u) / 32u;
    const float16_t one = float16_t(1.0), minus_one = float16_t(-1.0), zero = float16_t(0.0);

#ifdef BR_COOP_EMULATED
    // lane l holds elements l, l + S, l + 2S, ... (row-major e = r·CN + c) of each
    // accumulator, S the subgroup size
    const uint S = WG / 4u, EPL = (CM * CN + S - 1u) / S;
    float acc[RM * RN * EPL];
    for (uint t = 0u; t < RM * RN * EPL; t++) acc[t] = 0.0;
#else
    coopmat<float, gl_ScopeSubgroup, CM, CN, gl_MatrixUseAccumulator> acc[RM * RN];
    [[unroll]] for (uint t = 0u; t < RM * RN; t++)
        acc[t] = coopmat<float, gl_ScopeSubgroup, CM, CN, gl_MatrixUseAccumulator>(0.0);
#endif

    for (uint k0 = 0u; k0 < g.k; k0 += BK) {
        // A [64][32]: consecutive invocations read consecutive elements of act
        for (uint e = tid; e < BM * BK; e += WG) {
            uint ii = e / BK, kk = e % BK;
            if (g.mode == 3u) ii = e % BM, kk = e / BM;
            uint i = i0 + ii, kg = k0 + kk;
            uint16_t h = uint16_t(0);
            if (i < g.m && kg < g.k) h = act.v[g.mode == 3u ? kg * g.lda + i : i * g.lda + kg];
            As[ii * LDS + kk] = uint16BitsToHalf(h);
        }
        // Bᵀ [64][32]
        if (g.mode == 0u || g.mode == 3u) {
            for (uint e = tid; e < BN * BK; e += WG) {
                uint jj = e / BK, kk = e % BK;
                if (g.mode == 3u) jj = e % BN, kk = e / BN;
                uint j = j0 + jj, kg = k0 + kk;
                uint16_t h = uint16_t(0);
                if (j < g.n && kg < g.k)
                    h = plane16.v[g.mode == 0u ? j * g.k + kg : kg * g.ldp + j];
                Bs[jj * LDS + kk] = uint16BitsToHalf(h);
            }
        } else if (g.mode == 1u) {
            // bits rows: column j's 32 signs of this step are one word
            for (uint jj = tid; jj < BN; jj += WG) {
                uint j = j0 + jj;
                uint word = j < g.n ? bits.v[j * (g.k / 32u) + k0 / 32u] : 0u;
                for (uint kk = 0u; kk < BK; kk++)
                    Bs[jj * LDS + kk] = j >= g.n || k0 + kk >= g.k ? zero
                                        : ((word >> kk) & 1u) != 0u ? one
                                                                    : minus_one;
            }
        } else {
            // bits cols: row kg's signs of columns j0..j0+63 are two words (j0 % 64 == 0)
            for (uint w = tid; w < 2u * BK; w += WG) {
                uint kk = w / 2u, half_ = w % 2u;
                uint kg = k0 + kk, jw = j0 / 32u + half_;
                uint word = kg < g.k && jw < words_cols ? bits.v[kg * words_cols + jw] : 0u;
                for (uint b = 0u; b < 32u; b++) {
                    uint jj = half_ * 32u + b;
                    Bs[jj * LDS + kk] = j0 + jj >= g.n || kg >= g.k ? zero
                                        : ((word >> b) & 1u) != 0u ? one
                                                                   : minus_one;
                }
            }
        }
        barrier();
#ifdef BR_COOP_EMULATED
        // The step's 32 k of each accumulator element the lane holds, read where the
        // coop loads read: A piece rm at (wm·32 + rm·CM)·LDS + kk, element (r, q) at
        // + r·LDS + q (row-major); B piece cn at (wn·32 + cn·CN)·LDS + kk, element
        // (q, c) at + c·LDS + q (column-major); over kk = 0, CK, ... and q < CK, which
        // is q < 32 from kk = 0. The k loop unrolled: lavapipe ends an invocation after
        // 65535 loop iterations in all, k/32 · (RM·RN·EPL + the loads' 128) here with
        // its subgroups of 8, so k up to about 8000 runs there.
        for (uint rm = 0u; rm < RM; rm++)
            for (uint cn = 0u; cn < RN; cn++)
                for (uint t = 0u; t < EPL; t++) {
                    uint e = lane + S * t;
                    if (e < CM * CN) {
                        uint a0 = (wm * 32u + rm * CM) * LDS + (e / CN) * LDS;
                        uint b0 = (wn * 32u + cn * CN) * LDS + (e % CN) * LDS;
                        float sum = acc[(rm * RN + cn) * EPL + t];
                        [[unroll]] for (uint q = 0u; q < BK; q++)
                            sum = fma(float(As[a0 + q]), float(Bs[b0 + q]), sum);
                        acc[(rm * RN + cn) * EPL + t] = sum;
                    }
                }
#else
        [[unroll]] for (uint kk = 0u; kk < BK; kk += CK) {
            coopmat<float16_t, gl_ScopeSubgroup, CK, CN, gl_MatrixUseB> b[RN];
            [[unroll]] for (uint cn = 0u; cn < RN; cn++)
                coopMatLoad(b[cn], Bs, (wn * 32u + cn * CN) * LDS + kk, LDS,
                            gl_CooperativeMatrixLayoutColumnMajor);
            [[unroll]] for (uint rm = 0u; rm < RM; rm++) {
                coopmat<float16_t, gl_ScopeSubgroup, CM, CK, gl_MatrixUseA> a;
                coopMatLoad(a, As, (wm * 32u + rm * CM) * LDS + kk, LDS,
                            gl_CooperativeMatrixLayoutRowMajor);
                [[unroll]] for (uint cn = 0u; cn < RN; cn++)
                    acc[rm * RN + cn] = coopMatMulAdd(a, b[cn], acc[rm * RN + cn]);
            }
        }
#endif
        barrier();
    }

    uint stage = sg * CM * CN;
    [[unroll]] for (uint rm = 0u; rm < RM; rm++) {
        [[unroll]] for (uint cn = 0u; cn < RN; cn++) {
#ifdef BR_COOP_EMULATED
            for (uint t = 0u; t < EPL; t++)
                if (lane + S * t < CM * CN)
                    Cs[stage + lane + S * t] = acc[(rm * RN + cn) * EPL + t];
#else
            coopMatStore(acc[rm * RN + cn], Cs, stage, CN, gl_CooperativeMatrixLayoutRowMajor);
#endif
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint e = lane; e < CM * CN; e += gl_SubgroupSize) {
                uint i = i0 + wm * 32u + rm * CM + e / CN;
                uint j = j0 + wn * 32u + cn * CN + e % CN;
                if (i >= g.m || j >= g.n) continue;
                uint at = i * g.ldo + g.ocol + j;
                precise float v = Cs[stage + e];
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
            // the stage is written again by the next accumulator's store
            subgroupMemoryBarrierShared();
            subgroupBarrier();
        }
    }
}
