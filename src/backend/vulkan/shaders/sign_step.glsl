// The arguments every pass of the sign step reads (vk_ops_sign.c: sign_args).
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    uint64_t grad, bits, latent, m1, v, sched, flips;
    uint64_t rowf, rowq, colf, colq, normsrc; // rowq, colq, normsrc 0: none
    uint64_t ws; // keys [rows·r], then the scalars: [0] mean or c
    uint exact, factored, slot, rows, r, budget, nnorm;
    float beta1, beta2, eps, clamp_, hyst, curv2;
};

bool refused(Args a) { return F32(a.sched).v[3] != 0.0; }
