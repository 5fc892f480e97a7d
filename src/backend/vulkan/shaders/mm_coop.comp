// The GEMMs on cooperative matrices (VK_KHR_cooperative_matrix): br_mm, br_mm_bits and
// br_mm_tn with mm_tiled.comp's argument block and contract, the products on the
// device's matrix units (f16 operands, f32 accumulation).
//
// A workgroup computes one BT×BT output tile (BT 128, or 64 where the device's shared
// memory or the problem is small) with 4 subgroups in a 2×2 grid, each an HT×HT
// quarter (HT = BT/2) held as (HT/CM)×(HT/CN) accumulators of CM×CN, so each A piece a
// subgroup loads serves HT/CN products and each B piece HT/CM. k advances BK = 32 at a
// time (k is a multiple of 32: no step is partial). Each step stages A (BT rows × 32 k)
// and B (32 k × BT columns) as f16 in shared memory, in the order the operand has in
// memory, so that every invocation copies 16 bytes at a time:
//   k-major  [BT][LDK], LDK = 40: A of modes 0-2 (act [m][lda]), B of mode 0 (plane
//            [n][k]) and of mode 1 (a word is a column's 32 signs of the step);
//            coopMatLoad row-major (A) or column-major (B), stride LDK;
//   mn-major [32][LDT], LDT = BT + 8: A of mode 3 (act [k][lda]), B of mode 2 (a word
//            is 32 columns' signs of one k) and of mode 3 (plane [k][ldp]);
//            coopMatLoad column-major (A) or row-major (B), stride LDT.
// The padding makes every row 16-byte aligned and an odd number of 16-byte units
// (80 and 272 or 144 bytes), so the 8 rows of a 16-byte-per-row matrix load fall on
// distinct banks. The stages are arrays of uvec4 (coopMatLoad takes element offsets
// and strides in units of the array's type: halves / 8); every piece a subgroup
// loads starts at a multiple of 8 halves (CM, CN, CK are multiples of 8), as the
// extension's 16-byte alignment of start and stride needs.
//
// Global reads: f16 operands as uvec4 (8 halves) where the base address is 16-byte
// aligned and the row stride a multiple of 8 halves (a_vec, b_vec: the whole
// dispatch's) and the 8 are inside the matrix, else one half at a time, those past
// the edge 0; rows of A past m are 0. Sign bitmaps are read a word at a time and expanded to ±1 four
// pairs at a time (f16 +1 0x3C00, −1 0xBC00: the sign bit is the inverted bit).
// Columns of B past n hold whatever their (in-bounds) words give: they only reach
// output columns past n, which are never written.
//
// Pipelining: the next step's global data is read into registers before the current
// step's products, and written to shared memory after them. With NBUF = 2 stage
// buffers one barrier per step suffices (the buffer written at step s+1 was last read
// at step s−1, before the previous barrier); with NBUF = 1 (less shared memory) a
// second barrier comes before the write.
//
// The epilogue passes each accumulator through a per-subgroup CM×CN f32 stage in
// shared memory, so every output element is written by one invocation with
// mm_tiled's bounds and arithmetic:
//   out[i][ocol + j] = fl(fl(oscale·Σ)·colscale[j]) + fl(beta·c[i][ocol + j])
// (no oscale, colscale or c: the sum itself). The plain product's accumulators that
// lie inside the output are stored straight to it instead where out, ldo and ocol
// keep their rows 16-byte aligned.
//
// Specialization constants (set by vk_coop.c): 0 the workgroup size, 4 × the
// device's subgroup size (the pipeline requires full subgroups, so there are exactly
// 4 subgroups); 1, 2, 3 CM, CN, CK: an (M, N, K) the device lists for f16 A and B, f32
// C and result at subgroup scope, each 8, 16 or 32; 4 the mode (below); 5 BT (64 or
// 128); 6 NBUF (1 or 2). Shared memory: NBUF · 2 · BT · 80 bytes + 4 · CM · CN · 4.
//
// Built a second time with BR_COOP_EMULATED (mm_coop_emulated, option
// vk_gemm=coop_emulated): the cooperative-matrix operations done in plain f32
// arithmetic on the same staged operands at the same element offsets, strides and
// layouts, each lane holding the accumulator elements it later reads from the stage.
// Everything else (global reads, bitmap expansion, stage layouts, buffering, the
// subgroups' quarters, the epilogue) is this same code, which so runs, and is
// tested, on devices without cooperative matrices. Only a device with the extension
// checks the rest: the matrix operations themselves and subgroups that truly run side
// by side (lavapipe's take turns).
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
layout(constant_id = 0) const uint WG = 128;
layout(constant_id = 1) const uint CM = 16;
layout(constant_id = 2) const uint CN = 16;
layout(constant_id = 3) const uint CK = 16;
// 0: plane f16 [n][k]; 1: bits rows [n][k/32]; 2: bits cols [k][⌈n/32⌉];
// 3: mm_tn, act f16 [k][lda] and plane f16 [k][ldp]
layout(constant_id = 4) const uint MODE = 0;
layout(constant_id = 5) const uint BT = 128;
layout(constant_id = 6) const uint NBUF = 2;

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t act, plane, out_, colscale, c; // colscale, c 0: none
    uint m, n, k, lda, ldp, ldo, ocol;
    uint mode;  // MODE, which the pipeline is specialized for
    uint c_f16; // c is f16
    uint plain; // oscale 1, no colscale, no c
    float oscale, beta;
};
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer V4 { uvec4 v[]; };
// out where a matrix store starts 16-byte aligned
layout(buffer_reference, std430, buffer_reference_align = 16) buffer F32Rows { float v[]; };

const uint BK = 32u;
const uint HT = BT / 2u;        // a subgroup's quarter: HT×HT
const uint RM = HT / CM, RN = HT / CN;
const uint LDK = 40u, LDT = BT + 8u; // stage row strides in halves
const uint LDK8 = LDK / 8u, LDT8 = LDT / 8u;
const uint BUF8 = BT * LDK8;    // one operand's stage, uvec4 (≥ 32·LDT8)
const bool A_KMAJOR = MODE != 3u, B_KMAJOR = MODE <= 1u;
const uint CHUNKS = BT * BK / 8u;          // 16-byte pieces of an f16 operand per step
const uint CPI = (CHUNKS + WG - 1u) / WG;  // per invocation
const uint WPI = (BT + WG - 1u) / WG;      // bitmap words per invocation (BT a step)

shared uvec4 As[NBUF * BUF8];
shared uvec4 Bs[NBUF * BUF8];
shared float Cs[4u * CM * CN]; // subgroup s's accumulator, row-major, at s·CM·CN

float h2f(uint h) { return uintBitsToFloat(f32_bits_of_f16(h)); }

// Loops over registers the matrix build unrolls (its arrays of chunks and of
// cooperative matrices are indexed by the counter); lavapipe, running the emulated
// build, compiles them much faster as loops.
#ifdef BR_COOP_EMULATED
#define UNROLL_GPU [[dont_unroll]]
#else
#define UNROLL_GPU [[unroll]]
#endif

// 8 halves of an f16 matrix at p from element `at` (a multiple of 8), of which the
// first `valid` are in it (the rest 0): one 16-byte read where vec says p and the
// row stride allow it and all 8 are in, else one half at a time.
uvec4 load8(uint64_t p, uint at, uint valid, bool vec) {
    if (vec && valid >= 8u) return V4(p).v[at >> 3];
    U16 s = U16(p);
    uvec4 r = uvec4(0u);
    [[unroll]] for (uint e = 0u; e < 8u; e++)
        if (e < valid) r[e >> 1] |= uint(s.v[at + e]) << (16u * (e & 1u));
    return r;
}

// Signs 8q .. 8q+7 of word as f16 ±1, in element order (bit set: +1).
uvec4 signs8(uint word, uint q) {
    uvec4 x = uvec4(~word >> (8u * q)) >> uvec4(0u, 2u, 4u, 6u);
    return uvec4(0x3C003C00u) | ((x & 1u) << 15) | ((x & 2u) << 30);
}

// Where coopMatLoad reads the CM×CK A piece rm and the CK×CN B piece cn of the
// subgroup at k offset kk of stage buffer buf: element offset and stride in uvec4.
uint a_elem(uint buf, uint wm, uint rm, uint kk) {
    uint row = wm * HT + rm * CM;
    return buf * BUF8 + (A_KMAJOR ? row * LDK8 + kk / 8u : kk * LDT8 + row / 8u);
}
uint b_elem(uint buf, uint wn, uint cn, uint kk) {
    uint col = wn * HT + cn * CN;
    return buf * BUF8 + (B_KMAJOR ? col * LDK8 + kk / 8u : kk * LDT8 + col / 8u);
}
const uint A_STRIDE = A_KMAJOR ? LDK8 : LDT8, B_STRIDE = B_KMAJOR ? LDK8 : LDT8;

#ifdef BR_COOP_EMULATED
// Element (r, q) of a matrix coopMatLoad would read at (elem, stride) with the
// layout: row-major (r, q) at half elem·8 + r·stride·8 + q, column-major at
// elem·8 + q·stride·8 + r.
float half_at(uvec4 v, uint h) {
    uint w = v[(h >> 1) & 3u];
    return float(uint16BitsToHalf(uint16_t((h & 1u) != 0u ? w >> 16 : w & 0xffffu)));
}
float a_at(uint elem, bool row_major, uint r, uint q) {
    uint h = elem * 8u + (row_major ? r * A_STRIDE * 8u + q : q * A_STRIDE * 8u + r);
    return half_at(As[h >> 3], h);
}
float b_at(uint elem, bool row_major, uint q, uint c) {
    uint h = elem * 8u + (row_major ? q * B_STRIDE * 8u + c : c * B_STRIDE * 8u + q);
    return half_at(Bs[h >> 3], h);
}
#endif

void main() {
    Args g = Args(pc.args);
    U16 c16 = U16(g.c);
    U32 bits = U32(g.plane);
    F32 o = F32(g.out_), colscale = F32(g.colscale), c32 = F32(g.c);
    uint tid = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    uint wm = sg / 2u, wn = sg % 2u; // the subgroup's quarter
    uint i0 = gl_WorkGroupID.y * BT, j0 = gl_WorkGroupID.x * BT;
    uint words_cols = (g.n + 31u) / 32u, steps = g.k / BK;
    // 16-byte reads: a 16-byte aligned base and rows of whole 16-byte units
    bool a_vec = (g.act & 15ul) == 0ul && g.lda % 8u == 0u;
    bool b_vec = (g.plane & 15ul) == 0ul && (MODE == 3u ? g.ldp % 8u == 0u : true);

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

    // One step's operands in registers: f16 A (and B) as 16-byte chunks, chunk x of
    // the invocation being number tid + x·WG of the step's CHUNKS; bitmap words,
    // word x being number tid + x·WG of the step's BT.
    uvec4 ra[CPI], rb[CPI];
    uint rw[WPI];

    // Iteration s reads step s into the registers, does step s − 1's products from
    // its stage buffer, then writes the registers into step s's buffer: the reads'
    // latency is spent on the products.
    for (uint s = 0u; s <= steps; s++) {
        if (s < steps) {
            // A chunk c: k-major, row c/4, k 8·(c%4); mn-major, k c/(BT/8), row
            // 8·(c%(BT/8)); consecutive invocations read consecutive 16 bytes of a row
            uint k0 = s * BK;
            UNROLL_GPU for (uint x = 0u; x < CPI; x++) {
                uint c = tid + x * WG;
                uint row, kk, valid = 0u, at;
                if (A_KMAJOR) {
                    row = c / (BK / 8u), kk = 8u * (c % (BK / 8u));
                    if (c < CHUNKS && i0 + row < g.m) valid = 8u;
                    at = (i0 + row) * g.lda + k0 + kk;
                } else {
                    kk = c / (BT / 8u), row = 8u * (c % (BT / 8u));
                    if (c < CHUNKS && i0 + row < g.m) valid = min(g.m - i0 - row, 8u);
                    at = (k0 + kk) * g.lda + i0 + row;
                }
                ra[x] = valid == 0u ? uvec4(0u) : load8(g.act, at, valid, a_vec);
                if (MODE == 0u || MODE == 3u) {
                    // B likewise: mode 0 column-major [n][k], mode 3 row-major [k][ldp]
                    if (MODE == 0u) {
                        row = c / (BK / 8u), kk = 8u * (c % (BK / 8u));
                        valid = c < CHUNKS && j0 + row < g.n ? 8u : 0u;
                        at = (j0 + row) * g.k + k0 + kk;
                    } else {
                        kk = c / (BT / 8u), row = 8u * (c % (BT / 8u));
                        valid = c < CHUNKS && j0 + row < g.n ? min(g.n - j0 - row, 8u) : 0u;
                        at = (k0 + kk) * g.ldp + j0 + row;
                    }
                    rb[x] = valid == 0u ? uvec4(0u) : load8(g.plane, at, valid, b_vec);
                }
            }
            if (MODE == 1u || MODE == 2u) {
                UNROLL_GPU for (uint x = 0u; x < WPI; x++) {
                    uint w = tid + x * WG, word = 0u;
                    if (MODE == 1u) {
                        // column j0 + w's 32 signs of the step
                        if (w < BT && j0 + w < g.n) word = bits.v[(j0 + w) * (g.k / 32u) + s];
                    } else {
                        // row k0 + w/(BT/32)'s signs of 32 columns from j0 + 32·(w%(BT/32))
                        uint jw = j0 / 32u + w % (BT / 32u);
                        if (w < BT && jw < words_cols)
                            word = bits.v[(k0 + w / (BT / 32u)) * words_cols + jw];
                    }
                    rw[x] = word;
                }
            }
        }
        if (s > 0u) {
            uint buf = NBUF == 1u ? 0u : (s - 1u) % 2u;
#ifdef BR_COOP_EMULATED
            // The step's 32 k of each accumulator element the lane holds, read where
            // the coop loads read (a_at, b_at: their offsets, strides and layouts);
            // over kk = 0, CK, ... and q < CK, which is q < 32 from kk = 0. Two
            // elements at a time with the k loop unrolled: lavapipe ends an invocation
            // after 65535 loop iterations in all, and with its subgroups of 8 a lane
            // holds HT²/8 elements (512 at BT 128), so a step takes about
            // RM·RN·(1 + EPL/2) + the reads' and writes' 2·CPI iterations there (about
            // 300), k up to about 7000; more unrolling makes its compiler take minutes.
            for (uint p = 0u; p < RM * RN; p++) {
                uint rm = p / RN, cn = p % RN;
                uint ae = a_elem(buf, wm, rm, 0u), be = b_elem(buf, wn, cn, 0u);
                for (uint t0 = 0u; t0 < EPL; t0 += 2u) {
                    [[unroll]] for (uint u = 0u; u < 2u; u++) {
                        uint t = t0 + u, e = lane + S * t;
                        if (t < EPL && e < CM * CN) {
                            uint r = e / CN, cc = e % CN;
                            float sum = acc[p * EPL + t];
                            [[unroll]] for (uint q = 0u; q < BK; q++)
                                sum = fma(a_at(ae, A_KMAJOR, r, q), b_at(be, !B_KMAJOR, q, cc),
                                          sum);
                            acc[p * EPL + t] = sum;
                        }
                    }
                }
            }
#else
            [[unroll]] for (uint kk = 0u; kk < BK; kk += CK) {
                coopmat<float16_t, gl_ScopeSubgroup, CK, CN, gl_MatrixUseB> b[RN];
                [[unroll]] for (uint cn = 0u; cn < RN; cn++) {
                    if (B_KMAJOR)
                        coopMatLoad(b[cn], Bs, b_elem(buf, wn, cn, kk), B_STRIDE,
                                    gl_CooperativeMatrixLayoutColumnMajor);
                    else
                        coopMatLoad(b[cn], Bs, b_elem(buf, wn, cn, kk), B_STRIDE,
                                    gl_CooperativeMatrixLayoutRowMajor);
                }
                [[unroll]] for (uint rm = 0u; rm < RM; rm++) {
                    coopmat<float16_t, gl_ScopeSubgroup, CM, CK, gl_MatrixUseA> a;
                    if (A_KMAJOR)
                        coopMatLoad(a, As, a_elem(buf, wm, rm, kk), A_STRIDE,
                                    gl_CooperativeMatrixLayoutRowMajor);
                    else
                        coopMatLoad(a, As, a_elem(buf, wm, rm, kk), A_STRIDE,
                                    gl_CooperativeMatrixLayoutColumnMajor);
                    [[unroll]] for (uint cn = 0u; cn < RN; cn++)
                        acc[rm * RN + cn] = coopMatMulAdd(a, b[cn], acc[rm * RN + cn]);
                }
            }
#endif
        }
        if (s < steps) {
            // with one buffer, every subgroup must be done reading it first
            if (NBUF == 1u && s > 0u) barrier();
            uint base = (NBUF == 1u ? 0u : s % 2u) * BUF8;
            UNROLL_GPU for (uint x = 0u; x < CPI; x++) {
                uint c = tid + x * WG;
                if (c < CHUNKS) {
                    uint kmajor = (c / (BK / 8u)) * LDK8 + c % (BK / 8u);
                    uint mnmajor = (c / (BT / 8u)) * LDT8 + c % (BT / 8u);
                    As[base + (A_KMAJOR ? kmajor : mnmajor)] = ra[x];
                    if (MODE == 0u) Bs[base + kmajor] = rb[x];
                    if (MODE == 3u) Bs[base + mnmajor] = rb[x];
                }
            }
            if (MODE == 1u || MODE == 2u) {
                UNROLL_GPU for (uint x = 0u; x < WPI; x++) {
                    uint w = tid + x * WG;
                    if (w < BT) {
                        // mode 1: column w, k 0..31; mode 2: k w/(BT/32), 32 columns
                        uint at = MODE == 1u ? w * LDK8
                                             : (w / (BT / 32u)) * LDT8 + 4u * (w % (BT / 32u));
                        [[unroll]] for (uint q = 0u; q < 4u; q++)
                            Bs[base + at + q] = signs8(rw[x], q);
                    }
                }
            }
            barrier();
        }
    }

    uint stage = sg * CM * CN;
    // the plain product's pieces inside the output go straight to it where their
    // rows start 16-byte aligned (coopMatStore's rule)
    bool direct =
        g.plain != 0u && (g.out_ & 15ul) == 0ul && g.ldo % 4u == 0u && g.ocol % 4u == 0u;
    UNROLL_GPU for (uint rm = 0u; rm < RM; rm++) {
        UNROLL_GPU for (uint cn = 0u; cn < RN; cn++) {
            uint pi = i0 + wm * HT + rm * CM, pj = j0 + wn * HT + cn * CN;
            if (direct && pi + CM <= g.m && pj + CN <= g.n) {
                uint at = pi * g.ldo + g.ocol + pj;
#ifdef BR_COOP_EMULATED
                for (uint t = 0u; t < EPL; t++) {
                    uint e = lane + S * t;
                    if (e < CM * CN)
                        o.v[at + (e / CN) * g.ldo + e % CN] = acc[(rm * RN + cn) * EPL + t];
                }
#else
                coopMatStore(acc[rm * RN + cn], F32Rows(g.out_).v, at, g.ldo,
                             gl_CooperativeMatrixLayoutRowMajor);
#endif
                continue;
            }
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
                uint i = pi + e / CN, j = pj + e % CN;
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
