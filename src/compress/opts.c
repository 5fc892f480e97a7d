/* Options of a compression: defaults and their checks. */
#include <math.h>
#include <string.h>

#include "compress/compress.h"

void br_compress_opts_default(br_compress_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->bpw = 1.0;
    o->rank = 0;
    o->paths = 2;
    o->steps = 300;
    o->tokens = 512;
    o->lr = 2e-2f;
    o->sign_lr = 1e-2f;
    o->warmup = -1; /* steps / 20 */
    o->patience = 5;
    o->eval_every = 25;
    o->eval_tokens = 1024;
    o->seed = 1;
    o->init_on_device = 1;
    o->weight_term = 0.03f;
    o->token_weighting = BR_TOKENS_RELATIVE;
}

br_status br_compress_check_opts(br_ctx *ctx, const br_compress_opts *o) {
    if (o->paths < 1 || o->paths > 2)
        return br_fail(ctx, BR_E_ARG, "paths must be 1 or 2 (got %zu)", o->paths);
    if (o->rank > (1u << 20))
        return br_fail(ctx, BR_E_ARG, "rank %zu is above the 1048576 this build takes", o->rank);
    if (!(o->weight_term >= 0) || !isfinite(o->weight_term))
        return br_fail(ctx, BR_E_ARG, "weight_term must be finite and ≥ 0 (got %g)",
                       (double)o->weight_term);
    if (o->token_weighting != BR_TOKENS_RELATIVE && o->token_weighting != BR_TOKENS_AGGREGATE)
        return br_fail(ctx, BR_E_ARG, "token_weighting = %d is not a br_token_weighting",
                       o->token_weighting);
    if (!o->rank && (!(o->bpw > 0) || !isfinite(o->bpw)))
        return br_fail(ctx, BR_E_ARG, "bits per weight must be positive (got %g)", o->bpw);
    if (o->steps < 0) return br_fail(ctx, BR_E_ARG, "steps must be ≥ 0 (got %d)", o->steps);
    if (o->synthetic != BR_SYNTH_ISOTROPIC && o->synthetic != BR_SYNTH_HEAVY)
        return br_fail(ctx, BR_E_ARG, "synthetic = %d is not a br_synthetic", o->synthetic);
    if (!o->tokens || o->tokens > (1u << 20))
        return br_fail(ctx, BR_E_ARG, "tokens per step must be 1..1048576 (got %zu)", o->tokens);
    if (!o->eval_tokens || o->eval_tokens > (1u << 22))
        return br_fail(ctx, BR_E_ARG, "held-out tokens must be 1..4194304 (got %zu)",
                       o->eval_tokens);
    if (!(o->lr >= 0) || !isfinite(o->lr) || !(o->sign_lr >= 0) || !isfinite(o->sign_lr))
        return br_fail(ctx, BR_E_ARG, "learning rates must be finite and ≥ 0 (lr %g, sign_lr %g)",
                       (double)o->lr, (double)o->sign_lr);
    if ((o->n_include && !o->include) || (o->n_exclude && !o->exclude))
        return br_fail(ctx, BR_E_ARG, "%s is NULL with %zu patterns",
                       o->n_include && !o->include ? "include" : "exclude",
                       o->n_include && !o->include ? o->n_include : o->n_exclude);
    return BR_OK;
}
