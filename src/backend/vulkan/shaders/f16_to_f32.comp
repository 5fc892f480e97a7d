// dst[i] = f32(src[i]), exact, NaN payloads kept (br_f16_to_f32).
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t src, dst;
    uint n;
};

void main() {
    Args a = Args(pc.args);
    U16 src = U16(a.src);
    U32 dst = U32(a.dst);
    FOR_EACH(i, a.n) dst.v[i] = f32_bits_of_f16(uint(src.v[i]));
}
