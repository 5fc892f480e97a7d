// Per (token, head) row: [q(hd); gate(hd)] ↔ q, gate (br_split_qg), moved as bits.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t qg, q, gate;
    uint rows, hd, merge;
};

void main() {
    Args a = Args(pc.args);
    U32 qg = U32(a.qg), q = U32(a.q), gate = U32(a.gate);
    uint hd = a.hd;
    FOR_EACH(i, a.rows * hd) {
        uint row = i / hd, d = i % hd, p = row * 2u * hd + d;
        if (a.merge != 0u) {
            qg.v[p] = q.v[i];
            qg.v[p + hd] = gate.v[i];
        } else {
            q.v[i] = qg.v[p];
            gate.v[i] = qg.v[p + hd];
        }
    }
}
