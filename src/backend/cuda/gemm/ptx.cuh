/* The Hopper PTX the wgmma kernels are written in: mbarriers, cp.async, TMA loads
 * and stores, named barriers, shared-memory moves, register reallocation, the wgmma
 * fence / commit / wait and its shared-memory descriptors. Called only from sm_90a
 * code. */
#ifndef BR_BACKEND_CUDA_GEMM_PTX_CUH
#define BR_BACKEND_CUDA_GEMM_PTX_CUH

#include <cuda.h> /* CUtensorMap */
#include <stdint.h>

namespace br_gemm_cuda {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
/* Waits until the phase of parity `parity` has completed. A wait that cannot end
 * (a broken pipeline) traps after seconds instead of hanging the device. */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done, spins = 0;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
        if (!done && ++spins == (1u << 26)) __trap();
    } while (!done);
}
__device__ __forceinline__ void cp_async_drain() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}
/* One arrive on `bar` once this thread's earlier cp.async copies have landed. */
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void tma_prefetch(const CUtensorMap *map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
/* Box at (c0 = inner coordinate, c1 = row) → shared dst; completes tx bytes on bar. */
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c0,
                                         int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
}
/* Box at (c0, c1) into L2 only (a hint: no barrier, nothing to wait for). */
__device__ __forceinline__ void tma_prefetch_l2(const CUtensorMap *map, int c0, int c1) {
    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];\n" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(c0), "r"(c1)
                 : "memory");
}
__device__ __forceinline__ void tma_store(const CUtensorMap *map, uint32_t src, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
            reinterpret_cast<uint64_t>(map)),
        "r"(src), "r"(c0), "r"(c1)
        : "memory");
}
__device__ __forceinline__ void bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
/* Until this thread's bulk stores have read their shared source (may reuse it). */
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
/* Until this thread's bulk stores are complete. */
__device__ __forceinline__ void bulk_wait_all() {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
/* Generic-proxy shared writes → visible to the TMA (async proxy). */
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void named_barrier(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void sts16(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(addr), "h"((uint16_t)v) : "memory");
}
__device__ __forceinline__ void sts32(uint32_t addr, float v) {
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}
/* Four 8 × 8 f16 matrices, transposed: lane l gives the address of row l % 8 of
 * matrix l / 8; each thread gets, of every matrix, its elements (2(l%4), l/4) and
 * (2(l%4) + 1, l/4) as one register, the lower row in the low half. */
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
/* Its inverse: the registers of ldsm_x4_trans written back to the same rows. */
__device__ __forceinline__ void stsm_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
    asm volatile(
        "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
        "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
        : "memory");
}
__device__ __forceinline__ float ldsf(uint32_t addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void sts128(uint32_t addr, uint32_t x, uint32_t y, uint32_t z,
                                       uint32_t w) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(x), "r"(y), "r"(z),
                 "r"(w)
                 : "memory");
}

template <int kRegs> __device__ __forceinline__ void regs_release() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs> __device__ __forceinline__ void regs_claim() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

/* A consumer warp frees a stage it has finished with. Where the consumers read the
 * stage only through wgmma (the f16 plane and the producer-expanded bitmap), lane 0
 * arrives for its warp once wgmma_wait has retired those reads (8 arrivals). Where
 * they also read the bitmap words with ld.shared (register A fragments), every
 * thread arrives (256 arrivals): an mbarrier arrive releases only the arriving
 * thread's own earlier accesses, and compute-sanitizer racecheck holds us to that. */
template <bool kAllLanes>
__device__ __forceinline__ void release_stage(uint32_t empty_bar, int lane) {
    if (kAllLanes || lane == 0) mbar_arrive(empty_bar);
}
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/* Until at most kPending of this warpgroup's wgmma groups are still running. */
template <int kPending> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

/* Shared-memory matrix descriptor of a K-major tile with 128-byte rows, 128-byte
 * swizzle (as TMA writes it), 8-row groups 1024 bytes apart. Adding 2 moves the
 * start 32 bytes = 16 f16 along k. */
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 |
           (uint64_t)1 << 62;
}
/* The same of an MN-major tile (kMN): [64 k][64 m or n] boxes of 128-byte rows in the
 * 128-byte swizzle, the next 64 along m or n one box (8192 bytes) on (the leading
 * byte offset), 8-row k groups 1024 bytes apart (the stride byte offset). Adding 128
 * moves the start 2048 bytes = 16 k rows (still on a 1024-byte swizzle boundary). */
__device__ __forceinline__ uint64_t sw128_mn_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)(8192 >> 4) << 16 |
           (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}

} // namespace br_gemm_cuda

#endif
