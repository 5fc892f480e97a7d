// The sign step's selection, one workgroup of 256: the candidates counted; over the
// budget, the budget-th highest key (score, then the lower index) found by 8 passes
// of 8-bit digits from the top (backend/cpu/cpu_sign.c: radix_select); then every
// bitmap word flips its selected bits and the flips are counted into flips[slot].
// Integer atomics only: the counts are the same whatever order threads run in.
#version 460
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "sign_step.glsl"

shared uint hist[256];
shared uint count;
shared uint need;
shared uint64_t prefix;
shared uint flipped;

uint64_t sel_key(uint kb, uint e) {
    return kb != 0u ? (uint64_t(kb) << 32) | uint64_t(0xFFFFFFFFu - e) : 0ul;
}

void main() {
    Args a = Args(pc.args);
    if (refused(a)) return;
    U32 key = U32(a.ws), bits = U32(a.bits), flips = U32(a.flips);
    uint l = gl_LocalInvocationID.x, n = a.rows * a.r;
    if (l == 0u) {
        count = 0u;
        flipped = 0u;
        prefix = 0ul;
        need = a.budget;
    }
    barrier();
    uint mine = 0u;
    for (uint e = l; e < n; e += 256u) mine += key.v[e] != 0u ? 1u : 0u;
    atomicAdd(count, mine);
    barrier();
    uint64_t thr = 1ul;
    if (a.budget != 0u && count > a.budget) {
        uint64_t mask = 0ul;
        for (int shift = 56; shift >= 0; shift -= 8) {
            hist[l] = 0u;
            barrier();
            uint64_t pre = prefix;
            for (uint e = l; e < n; e += 256u) {
                uint64_t kk = sel_key(key.v[e], e);
                if (kk != 0ul && (kk & mask) == pre)
                    atomicAdd(hist[uint((kk >> shift) & 255ul)], 1u);
            }
            barrier();
            if (l == 0u) {
                int b = 255;
                uint nd = need;
                for (; b > 0 && hist[b] < nd; b--) nd -= hist[b];
                need = nd;
                prefix = pre | (uint64_t(b) << shift);
            }
            barrier();
            mask |= 255ul << shift;
        }
        thr = prefix;
    }
    uint words = n / 32u, mycount = 0u;
    for (uint w = l; w < words; w += 256u) {
        uint x = 0u;
        for (uint j = 0u; j < 32u; j++) {
            uint e = w * 32u + j, kb = key.v[e];
            if (a.budget != 0u && kb != 0u && sel_key(kb, e) >= thr) x |= 1u << j;
        }
        bits.v[w] ^= x;
        mycount += bitCount(x);
    }
    atomicAdd(flipped, mycount);
    barrier();
    if (l == 0u) flips.v[a.slot] = flipped;
}
