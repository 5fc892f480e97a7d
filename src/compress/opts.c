/* Options of a compression: defaults. */
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
}
