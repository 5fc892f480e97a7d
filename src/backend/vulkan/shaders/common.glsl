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
#extension GL_ARB_gpu_shader_int64 : require
#extension GL_EXT_spirv_intrinsics : require

// f32 subnormals kept (SPV_KHR_float_controls' DenormPreserve): a device may flush
// them by default (NVIDIA's driver does), where the CPU backend keeps them. On a
// device that does not list shaderDenormPreserveFloat32, br_vk_create_pipeline takes
// the mode and its capability out of the module again (lavapipe keeps them anyway).
spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4464], 4459, 32);

layout(push_constant) uniform Push {
    uint64_t args; // the argument block (vk_queue.c: br_vk_args)
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

// A shader whose workgroup size the host sets (a specialization constant) defines
// BR_OWN_WORKGROUP_SIZE before this include and declares its own.
#ifndef BR_OWN_WORKGROUP_SIZE
layout(local_size_x = 256) in;

// Grid-stride loop over i < n (the host caps the grid at 65535 groups).
#define FOR_EACH(i, n)                                                                             \
    for (uint i = gl_GlobalInvocationID.x; i < (n); i += gl_NumWorkGroups.x * 256u)
#endif

// Column c of a vector stored in groups (br_colsum_fused_args.group; 0: plain).
uint grouped(uint c, uint group, uint stride) {
    return group == 0u ? c : c / group * stride + c % group;
}

// fmaf(a, b, c): a·b + c rounded once, as the CPU's fmaf. Vulkan lets fma() be a
// product rounded and then a sum rounded (lavapipe's is), so it is computed here:
// a·b is exact in f64, the f64 sum is corrected to round-to-odd with its exact
// error (TwoSum), and round-to-odd in 53 bits then round-to-nearest to 24 bits is
// the correctly rounded result (53 ≥ 24 + 2).
float fma_exact(float a, float b, float c) {
    precise double p = double(a) * double(b);
    precise double cd = double(c);
    precise double s = p + cd;
    precise double bv = s - p;
    precise double e = (p - (s - bv)) + (cd - bv);
    if (e != 0.0) {
        uint64_t u = doubleBitsToUint64(s);
        if ((u & 1ul) == 0ul) {
            // the odd neighbour on the side of the exact sum s + e
            u = ((e > 0.0) == (s > 0.0)) ? u + 1ul : u - 1ul;
            s = uint64BitsToDouble(u);
        }
    }
    return float(s);
}

// sqrtf(x) correctly rounded (Vulkan's sqrt is not): the f64 root rounded to f32,
// then moved to the neighbour whose midpoint test says it is nearer (the midpoints
// and their squares are exact in f64).
float sqrt_exact(float x) {
    if (!(x > 0.0) || isinf(x)) return sqrt(x); // 0, −0, Inf, NaN, negatives
    float y = float(sqrt(double(x)));
    for (int it = 0; it < 2; it++) {
        float up = uintBitsToFloat(floatBitsToUint(y) + 1u);
        float lo = uintBitsToFloat(floatBitsToUint(y) - 1u);
        precise double mu = (double(y) + double(up)) * 0.5;
        precise double ml = (double(y) + double(lo)) * 0.5;
        if (double(x) > mu * mu) y = up;
        else if (double(x) < ml * ml) y = lo;
    }
    return y;
}

// a / b correctly rounded for ordinary operands (Vulkan's division is 2.5 ulp): the
// quotient in f64 rounded to f32.
float div_f32(float a, float b) { return float(double(a) / double(b)); }
