// Column reduction, first pass (br_colsum; backend/cpu/cpu_reduce.c states the
// order): part[blk][c] = Σ over the rows of block blk, in order from 0, of the term.
// One thread per (block, column).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t a, b, f, part;
    uint rows, k, block, nb, term; // term: 0 AB, 1 ABF, 2 A
};

void main() {
    Args g = Args(pc.args);
    F32 a = F32(g.a), b = F32(g.b), f = F32(g.f), part = F32(g.part);
    uint k = g.k;
    FOR_EACH(i, g.nb * k) {
        uint blk = i / k, c = i % k;
        uint r0 = blk * g.block, r1 = min(g.rows, r0 + g.block);
        precise float acc = 0.0;
        for (uint row = r0; row < r1; row++) {
            uint e = row * k + c;
            if (g.term == 0u) {
                acc = fma_exact(a.v[e], b.v[e], acc);
            } else if (g.term == 1u) {
                precise float ab = a.v[e] * b.v[e];
                acc = fma_exact(ab, f.v[row], acc);
            } else {
                acc = acc + a.v[e];
            }
        }
        part.v[i] = acc;
    }
}
