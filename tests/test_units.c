/* Units of primitive ops (ops/op.h: br_submit_unit): a fused call is the sequence of
 * primitives that defines it. On the CPU, which runs a unit's ops one by one, the
 * unit gives the same bits as the primitives called separately, eagerly and from a
 * recorded graph (which holds the primitives). On a Hopper GPU the CUDA backend's
 * fusion table (backend/cuda/cuda_fuse.c) runs the units as its fused kernels:
 * br_ctx_last_kernel and the launch count say so. */
#include "harness.h"

#include "core/internal.h" /* ctx->stats.launches */
#include "ops/layer_ops.h"

static br_buf *rand_f16(br_ctx *ctx, br_rng *r, size_t n, float scale) {
    uint16_t *h = t_xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = br_half_from_float(br_rng_sym(r) * scale);
    br_buf *b = t_buf_from(ctx, BR_F16, h, n);
    free(h);
    return b;
}

/* f32 [n] holding the exact values of the f16 buffer b. */
static br_buf *f32_of(br_ctx *ctx, const br_buf *b, size_t n) {
    uint16_t *h = t_download_f16(ctx, b, n);
    float *f = t_xmalloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = br_half_to_float(h[i]);
    br_buf *out = t_buf_from(ctx, BR_F32, f, n);
    free(h), free(f);
    return out;
}

/* Whether the n f16 elements of a and b have the same bits. */
static size_t differ16(br_ctx *ctx, const br_buf *a, const br_buf *b, size_t n) {
    uint16_t *x = t_download_f16(ctx, a, n), *y = t_download_f16(ctx, b, n);
    size_t d = t_bits_differ16(x, y, n);
    free(x), free(y);
    return d;
}

/* br_mm_stage (an f16 c, out not kept, both staged layouts) against br_mm with c's
 * exact f32 values then br_cvt_both: every bit, eagerly and replayed from a graph of
 * the unit's two primitives. */
static void stage_unit_is_its_primitives(void) {
    br_ctx *ctx = t_ctx();
    if (strcmp(br_ctx_backend(ctx), "cpu") != 0) { /* other backends: GEMM tolerance */
        br_ctx_free(ctx);
        return;
    }
    br_rng rng = t_rng_for(1);
    for (int c = 0; c < 6; c++) {
        const size_t m = t_rand_size(&rng, 1, 150), n = t_rand_size(&rng, 1, 120),
                     k = 32 * t_rand_size(&rng, 1, 4), ld = n + t_rand_size(&rng, 0, 9);
        const size_t n_dst = br_pad_rows(m) * ld, n_dst_t = br_pad_rows(n) * br_pad_tokens(m);
        const float scale = 0.5f + (float)br_rng_unit(&rng);
        br_buf *act = rand_f16(ctx, &rng, m * k, 1.0f), *plane = rand_f16(ctx, &rng, n * k, 1.0f);
        br_buf *c16 = rand_f16(ctx, &rng, m * n, 2.0f), *c32 = f32_of(ctx, c16, m * n);
        br_buf *dst = t_buf_poison(ctx, BR_F16, n_dst, T_NAN16);
        br_buf *dst_t = t_buf_poison(ctx, BR_F16, n_dst_t, T_NAN16);
        br_buf *ref = t_buf_poison(ctx, BR_F32, m * n, T_NAN32);
        br_buf *ref_dst = t_buf_poison(ctx, BR_F16, n_dst, T_NAN16);
        br_buf *ref_dst_t = t_buf_poison(ctx, BR_F16, n_dst_t, T_NAN16);
        br_gemm g = {.m = m, .n = n, .k = k, .oscale = -0.75f, .c = c16, .beta = 1.25f};
        br_gemm g32 = g;
        g32.c = c32;
        CHECK_OK(ctx, br_mm(ctx, act, plane, ref, g32));
        CHECK_OK(ctx, br_cvt_both(ctx, ref, NULL, ref_dst, ref_dst_t, m, n, ld, scale));
        for (int graph = 0; graph < 2; graph++) {
            CHECK_OK(ctx, br_buf_fill(dst, 0, n_dst, T_NAN16));
            CHECK_OK(ctx, br_buf_fill(dst_t, 0, n_dst_t, T_NAN16));
            br_graph *gr = NULL;
            if (graph) CHECK_OK(ctx, br_graph_begin(ctx));
            CHECK_OK(ctx, br_mm_stage(ctx, act, plane, NULL, g, dst, dst_t, ld, scale));
            if (graph) {
                CHECK_OK(ctx, br_graph_end(ctx, &gr));
                CHECK(br_graph_op_count(gr) == 2, "the unit recorded %zu ops, want mm, cvt_both",
                      br_graph_op_count(gr));
                CHECK_OK(ctx, br_graph_launch(gr));
                br_graph_free(gr);
            }
            CHECK(differ16(ctx, dst, ref_dst, n_dst) == 0 &&
                      differ16(ctx, dst_t, ref_dst_t, n_dst_t) == 0,
                  "mm_stage m=%zu n=%zu k=%zu ld=%zu%s: not the bits of mm then cvt_both", m, n, k,
                  ld, graph ? " (graph)" : "");
        }
        br_buf *all[] = {act, plane, c16, c32, dst, dst_t, ref, ref_dst, ref_dst_t};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            br_buf_free(all[i]);
    }
    br_ctx_free(ctx);
}

/* On Hopper: the layer's staged output GEMM (f16 c, out not kept, no dst_t, aligned)
 * runs as the EPI_STAGE16 kernel alone, br_mm_tn2's two aligned products of one k,
 * and br_mm_tn2_rowdot's, as one pair launch (the rowdots as one more), and
 * br_cvt_multi as one launch. (br_sign_steps: test_sign; br_expand_scaled2:
 * test_layer_ops.) */
static void cuda_fuses_units(void) {
    br_ctx *ctx = t_ctx();
    if (!strcmp(br_ctx_backend(ctx), "cpu") || !has_wgmma(ctx)) {
        br_ctx_free(ctx);
        return;
    }
    br_rng rng = t_rng_for(2);
    const size_t m = 256, n = 384, k = 128, ld = n;
    br_buf *act = rand_f16(ctx, &rng, m * k, 1.0f), *plane = rand_f16(ctx, &rng, n * k, 1.0f);
    br_buf *c16 = rand_f16(ctx, &rng, m * n, 2.0f);
    br_buf *dst = t_buf_poison(ctx, BR_F16, br_pad_rows(m) * ld, T_NAN16);
    br_gemm g = {.m = m, .n = n, .k = k, .oscale = 1.0f, .c = c16, .beta = -1.0f};
    uint64_t l0 = ctx->stats.launches;
    CHECK_OK(ctx, br_mm_stage(ctx, act, plane, NULL, g, dst, NULL, ld, 2.0f));
    CHECK(strstr(br_ctx_last_kernel(ctx), "stage16") && ctx->stats.launches - l0 == 1,
          "mm_stage ran %s in %llu launches, want the stage16 kernel alone",
          br_ctx_last_kernel(ctx), (unsigned long long)(ctx->stats.launches - l0));

    /* tokens k' = 256 first in both products: act [k'][m'], plane [k'][n'] */
    const size_t T = 256, m1 = 128, r = 64, P = 2, n1 = P * r, m2 = 192;
    br_buf *a1 = rand_f16(ctx, &rng, T * m1, 1.0f), *p1 = rand_f16(ctx, &rng, T * n1, 1.0f);
    br_buf *a2 = rand_f16(ctx, &rng, T * m2, 1.0f), *p2 = rand_f16(ctx, &rng, T * n1, 1.0f);
    br_buf *o1 = t_buf_poison(ctx, BR_F32, m1 * n1, T_NAN32);
    br_buf *o2 = t_buf_poison(ctx, BR_F32, m2 * n1, T_NAN32);
    br_gemm g1 = {.m = m1, .n = n1, .k = T, .oscale = 1.0f};
    br_gemm g2 = {.m = m2, .n = n1, .k = T, .oscale = 1.0f};
    l0 = ctx->stats.launches;
    CHECK_OK(ctx, br_mm_tn2(ctx, a1, p1, 0, o1, g1, a2, p2, 0, o2, g2));
    CHECK(strstr(br_ctx_last_kernel(ctx), "pair") && ctx->stats.launches - l0 == 1,
          "mm_tn2 ran %s in %llu launches, want one pair launch", br_ctx_last_kernel(ctx),
          (unsigned long long)(ctx->stats.launches - l0));

    br_buf *bits[2], *scale[2], *grad[2];
    const size_t ms[2] = {m1, m2};
    br_tn_rowdot side[2];
    for (int i = 0; i < 2; i++) {
        bits[i] = t_buf_poison(ctx, BR_U32, P * ms[i] * r / 32, 0x5a5a5a5au);
        scale[i] = t_buf_poison(ctx, BR_F32, P * ms[i], 0x3f800000u);
        grad[i] = t_buf_poison(ctx, BR_F32, P * ms[i] * r, T_NAN32);
        side[i] = (br_tn_rowdot){.act = i ? a2 : a1,
                                 .plane = i ? p2 : p1,
                                 .mat = i ? o2 : o1,
                                 .g = i ? g2 : g1,
                                 .bits = bits[i],
                                 .rowscale = scale[i],
                                 .grad = grad[i],
                                 .bits_stride = ms[i] * r / 32,
                                 .scale_stride = ms[i],
                                 .grad_stride = ms[i] * r,
                                 .r = r,
                                 .paths = P};
    }
    l0 = ctx->stats.launches;
    CHECK_OK(ctx, br_mm_tn2_rowdot(ctx, side));
    CHECK(strstr(br_ctx_last_kernel(ctx), "pair") && ctx->stats.launches - l0 == 2,
          "mm_tn2_rowdot ran %s in %llu launches, want the pair and one rowdot launch",
          br_ctx_last_kernel(ctx), (unsigned long long)(ctx->stats.launches - l0));

    /* br_cvt_multi: its three CVT ops in one launch */
    br_buf *src = t_buf_poison(ctx, BR_F32, m * n, 0x3f800000u), *outs[3];
    for (int i = 0; i < 3; i++)
        outs[i] = t_buf_poison(ctx, BR_F16, br_pad_rows(m) * n, T_NAN16);
    l0 = ctx->stats.launches;
    CHECK_OK(ctx, br_cvt_multi(ctx, src, 3, NULL, outs, m, n, 1.0f));
    CHECK(ctx->stats.launches - l0 == 1, "cvt_multi: %llu launches, want 1",
          (unsigned long long)(ctx->stats.launches - l0));
    br_buf_free(src);
    for (int i = 0; i < 3; i++)
        br_buf_free(outs[i]);

    br_buf *all[] = {act, plane, c16,     dst,     a1,       p1,       a2,      p2,
                     o1,  o2,    bits[0], bits[1], scale[0], scale[1], grad[0], grad[1]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        br_buf_free(all[i]);
    br_ctx_free(ctx);
}

T_RUN("units", T_CASE(stage_unit_is_its_primitives), T_CASE(cuda_fuses_units))
