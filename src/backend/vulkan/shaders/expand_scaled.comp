// br_expand_scaled(_rows): path p's sign bitmap → ±f16(rowscale[i]·scale) (−x: the
// sign bit flipped). by_rows: plane [rows][ld], path p's columns p·r..; else plane
// [paths·r][ld], path p's rows p·r.., columns rows..ld−1 zero.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t bits, rowscale, plane;
    uint rows, r, ld, paths, bits_stride, scale_stride, by_rows;
    float scale;
};

void main() {
    Args a = Args(pc.args);
    U32 bits = U32(a.bits);
    F32 rs = F32(a.rowscale);
    U16 plane = U16(a.plane);
    uint rows = a.rows, r = a.r, words = r / 32u;
    if (a.by_rows != 0u) {
        FOR_EACH(e, a.paths * rows * r) {
            uint p = e / (rows * r), rem = e % (rows * r), i = rem / r, k = rem % r;
            precise float s = rs.v[p * a.scale_stride + i] * a.scale;
            uint m = f16_bits(s);
            uint bit = (bits.v[p * a.bits_stride + i * words + k / 32u] >> (k % 32u)) & 1u;
            plane.v[i * a.ld + p * r + k] = uint16_t(bit != 0u ? m : m ^ 0x8000u);
        }
    } else {
        FOR_EACH(e, a.paths * r * a.ld) {
            uint q = e / a.ld, i = e % a.ld, p = q / r, k = q % r;
            uint v = 0u;
            if (i < rows) {
                precise float s = rs.v[p * a.scale_stride + i] * a.scale;
                uint m = f16_bits(s);
                uint bit = (bits.v[p * a.bits_stride + i * words + k / 32u] >> (k % 32u)) & 1u;
                v = bit != 0u ? m : m ^ 0x8000u;
            }
            plane.v[e] = uint16_t(v);
        }
    }
}
