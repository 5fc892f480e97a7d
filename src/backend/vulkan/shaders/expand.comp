// Sign bitmap → ±1 f16 plane [rows][r] and/or its transpose [r][rows] (br_expand).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t bits, plane, plane_t; // either plane may be 0
    uint rows, r;
};

void main() {
    Args a = Args(pc.args);
    U32 bits = U32(a.bits);
    U16 plane = U16(a.plane), plane_t = U16(a.plane_t);
    uint r = a.r, words = (r + 31u) / 32u;
    FOR_EACH(i, a.rows * r) {
        uint row = i / r, j = i % r;
        uint v = ((bits.v[row * words + j / 32u] >> (j % 32u)) & 1u) != 0u ? 0x3C00u : 0xBC00u;
        if (a.plane != 0ul) plane.v[i] = uint16_t(v);
        if (a.plane_t != 0ul) plane_t.v[j * a.rows + row] = uint16_t(v);
    }
}
