// br_buf_fill on 32-bit elements: dst[i] = bits for i < count.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t dst;
    uint count, bits;
};

void main() {
    Args a = Args(pc.args);
    U32 dst = U32(a.dst);
    FOR_EACH(i, a.count)
        dst.v[i] = a.bits;
}
