// What every shader of the Vulkan backend shares: buffers reached through 64-bit
// device addresses, the argument block's address in the push constants, and f16
// conversions written out in integer arithmetic, so they give the CPU backend's bits
// (core/f16.c: round to nearest even, subnormals kept, NaN quieted with its top
// payload bits) on every device whatever its own conversion does.
//
// Exactness: f32 products and sums are correctly rounded in Vulkan, but a compiler
// may fuse a·b + c; every value that must match the CPU is `precise`.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_EXT_shader_16bit_storage : require

layout(push_constant) uniform Push {
    uint64_t args; // the argument block (vk_queue.c: br_vk_args)
    uint64_t unused;
} pc;

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32 { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32 { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U16 { uint16_t v[]; };

// f32 → f16 bits, round to nearest even.
uint f16_bits(float x) {
    uint u = floatBitsToUint(x);
    uint sign = (u >> 16) & 0x8000u;
    uint e8 = (u >> 23) & 0xffu;
    uint man = u & 0x7fffffu;
    if (e8 == 0xffu) return sign | 0x7c00u | (man != 0u ? (0x200u | (man >> 13)) : 0u);
    int e = int(e8) - 112; // rebiased for f16
    if (e >= 31) return sign | 0x7c00u;
    if (e <= 0) {
        if (e < -10) return sign;
        uint full = man | 0x800000u;
        uint shift = uint(14 - e);
        uint q = full >> shift;
        uint rem = full & ((1u << shift) - 1u);
        uint half_ = 1u << (shift - 1u);
        if (rem > half_ || (rem == half_ && (q & 1u) != 0u)) q++;
        return sign | q;
    }
    uint q = (uint(e) << 10) | (man >> 13);
    uint rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u) != 0u)) q++;
    return sign | q;
}

// f16 bits → f32 bits, exact (NaN payloads kept).
uint f32_bits_of_f16(uint h) {
    uint sign = (h & 0x8000u) << 16;
    uint e = (h >> 10) & 0x1fu;
    uint man = h & 0x3ffu;
    if (e == 0u) {
        if (man == 0u) return sign;
        int lz = findMSB(man); // position of the leading 1, 0..9
        uint shift = uint(10 - lz);
        return sign | (uint(113 - int(shift)) << 23) | (((man << shift) & 0x3ffu) << 13);
    }
    if (e == 31u) return sign | 0x7f800000u | (man << 13);
    return sign | ((e + 112u) << 23) | (man << 13);
}
