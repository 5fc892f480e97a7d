/* wgmma.mma_async wrappers, m64nNk16, f16 × f16 → f32, both operands K-major
 * (ss<1>: both MN-major, wgmma's transpose bits), D += A·B (the accumulators must
 * be zeroed before a tile's first step). "ss": A and B from shared memory
 * descriptors; "rs": A from four registers per thread (the m16n8k16 A-fragment
 * layout, warp w of the warpgroup holding rows 16w..16w+15).
 * Inline PTX must name every accumulator register, so the wrappers are made from
 * tables: the asm names %0..%127 and the constraints of d[] eight at a time, and
 * one line per N the kernels use. Called only from sm_90a code. */
#ifndef BR_BACKEND_CUDA_GEMM_WGMMA_OPS_CUH
#define BR_BACKEND_CUDA_GEMM_WGMMA_OPS_CUH

#include <stdint.h>

namespace br_gemm_cuda {

/* clang-format off */
/* The asm names of accumulators b..b+7 (outputs come first, so accumulator i is %i). */
#define BR_WGMMA_R0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define BR_WGMMA_R8 "%8, %9, %10, %11, %12, %13, %14, %15"
#define BR_WGMMA_R16 "%16, %17, %18, %19, %20, %21, %22, %23"
#define BR_WGMMA_R24 "%24, %25, %26, %27, %28, %29, %30, %31"
#define BR_WGMMA_R32 "%32, %33, %34, %35, %36, %37, %38, %39"
#define BR_WGMMA_R40 "%40, %41, %42, %43, %44, %45, %46, %47"
#define BR_WGMMA_R48 "%48, %49, %50, %51, %52, %53, %54, %55"
#define BR_WGMMA_R56 "%56, %57, %58, %59, %60, %61, %62, %63"
#define BR_WGMMA_R64 "%64, %65, %66, %67, %68, %69, %70, %71"
#define BR_WGMMA_R72 "%72, %73, %74, %75, %76, %77, %78, %79"
#define BR_WGMMA_R80 "%80, %81, %82, %83, %84, %85, %86, %87"
#define BR_WGMMA_R88 "%88, %89, %90, %91, %92, %93, %94, %95"
#define BR_WGMMA_R96 "%96, %97, %98, %99, %100, %101, %102, %103"
#define BR_WGMMA_R104 "%104, %105, %106, %107, %108, %109, %110, %111"
#define BR_WGMMA_R112 "%112, %113, %114, %115, %116, %117, %118, %119"
#define BR_WGMMA_R120 "%120, %121, %122, %123, %124, %125, %126, %127"

/* The constraints of accumulators i..i+7 (d: the wrapper's accumulator array). */
#define BR_WGMMA_D(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), \
                      "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])

/* Wgmma<N>::ss and ::rs. SS_TAIL, RS_TAIL: the operands after the N/2 accumulators
 * (ss: desc_a, desc_b, the scale immediates, kTnsp for A and B; rs: the four A
 * registers, desc_b, the scale immediates); NAMES: the accumulators' asm names;
 * then their constraints. */
#define BR_WGMMA_DEFINE(N, SS_TAIL, RS_TAIL, NAMES, ...)                                      \
    template <> struct Wgmma<N> {                                                              \
        template <int kTnsp = 0>                                                               \
        static __device__ __forceinline__ void ss(float (&d)[(N) / 2], uint64_t desc_a,        \
                                                  uint64_t desc_b) {                           \
            asm volatile("{\n"                                                                 \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 {" NAMES      \
                         "}, " SS_TAIL ";\n"                                                   \
                         "}\n"                                                                 \
                         : __VA_ARGS__                                                         \
                         : "l"(desc_a), "l"(desc_b), "n"(kTnsp));                              \
        }                                                                                      \
        static __device__ __forceinline__ void rs(float (&d)[(N) / 2], const uint32_t (&a)[4], \
                                                  uint64_t desc_b) {                           \
            asm volatile("{\n"                                                                 \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 {" NAMES      \
                         "}, " RS_TAIL ";\n"                                                   \
                         "}\n"                                                                 \
                         : __VA_ARGS__                                                         \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));           \
        }                                                                                      \
    };

template <int kN> struct Wgmma;

/* The names and constraints of the first K accumulators, K = N/2 of the N used. */
#define BR_WGMMA_NAMES48 \
    BR_WGMMA_R0 ", " BR_WGMMA_R8 ", " BR_WGMMA_R16 ", " BR_WGMMA_R24 ", " BR_WGMMA_R32 ", " \
    BR_WGMMA_R40
#define BR_WGMMA_DS48 \
    BR_WGMMA_D(0), BR_WGMMA_D(8), BR_WGMMA_D(16), BR_WGMMA_D(24), BR_WGMMA_D(32), \
    BR_WGMMA_D(40)
#define BR_WGMMA_NAMES56 BR_WGMMA_NAMES48 ", " BR_WGMMA_R48
#define BR_WGMMA_DS56 BR_WGMMA_DS48, BR_WGMMA_D(48)
#define BR_WGMMA_NAMES64 BR_WGMMA_NAMES56 ", " BR_WGMMA_R56
#define BR_WGMMA_DS64 BR_WGMMA_DS56, BR_WGMMA_D(56)
#define BR_WGMMA_NAMES96 \
    BR_WGMMA_NAMES64 ", " BR_WGMMA_R64 ", " BR_WGMMA_R72 ", " BR_WGMMA_R80 ", " BR_WGMMA_R88
#define BR_WGMMA_DS96 \
    BR_WGMMA_DS64, BR_WGMMA_D(64), BR_WGMMA_D(72), BR_WGMMA_D(80), BR_WGMMA_D(88)
#define BR_WGMMA_NAMES128 \
    BR_WGMMA_NAMES96 ", " BR_WGMMA_R96 ", " BR_WGMMA_R104 ", " BR_WGMMA_R112 ", " \
    BR_WGMMA_R120
#define BR_WGMMA_DS128 \
    BR_WGMMA_DS96, BR_WGMMA_D(96), BR_WGMMA_D(104), BR_WGMMA_D(112), BR_WGMMA_D(120)

/* N, the operands after the accumulators in ss and in rs, the accumulators */
BR_WGMMA_DEFINE(96, "%48, %49, 1, 1, 1, %50, %50",
                "{%48, %49, %50, %51}, %52, 1, 1, 1, 0", BR_WGMMA_NAMES48, BR_WGMMA_DS48)
BR_WGMMA_DEFINE(112, "%56, %57, 1, 1, 1, %58, %58",
                "{%56, %57, %58, %59}, %60, 1, 1, 1, 0", BR_WGMMA_NAMES56, BR_WGMMA_DS56)
BR_WGMMA_DEFINE(128, "%64, %65, 1, 1, 1, %66, %66",
                "{%64, %65, %66, %67}, %68, 1, 1, 1, 0", BR_WGMMA_NAMES64, BR_WGMMA_DS64)
BR_WGMMA_DEFINE(192, "%96, %97, 1, 1, 1, %98, %98",
                "{%96, %97, %98, %99}, %100, 1, 1, 1, 0", BR_WGMMA_NAMES96, BR_WGMMA_DS96)
BR_WGMMA_DEFINE(256, "%128, %129, 1, 1, 1, %130, %130",
                "{%128, %129, %130, %131}, %132, 1, 1, 1, 0", BR_WGMMA_NAMES128, BR_WGMMA_DS128)
/* clang-format on */

#undef BR_WGMMA_DEFINE
#undef BR_WGMMA_D
#undef BR_WGMMA_NAMES48
#undef BR_WGMMA_NAMES56
#undef BR_WGMMA_NAMES64
#undef BR_WGMMA_NAMES96
#undef BR_WGMMA_NAMES128
#undef BR_WGMMA_DS48
#undef BR_WGMMA_DS56
#undef BR_WGMMA_DS64
#undef BR_WGMMA_DS96
#undef BR_WGMMA_DS128
#undef BR_WGMMA_R0
#undef BR_WGMMA_R8
#undef BR_WGMMA_R16
#undef BR_WGMMA_R24
#undef BR_WGMMA_R32
#undef BR_WGMMA_R40
#undef BR_WGMMA_R48
#undef BR_WGMMA_R56
#undef BR_WGMMA_R64
#undef BR_WGMMA_R72
#undef BR_WGMMA_R80
#undef BR_WGMMA_R88
#undef BR_WGMMA_R96
#undef BR_WGMMA_R104
#undef BR_WGMMA_R112
#undef BR_WGMMA_R120

} // namespace br_gemm_cuda

#endif
