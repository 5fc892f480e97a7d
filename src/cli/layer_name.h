/* What a layer's tensor name says: its place in the natural order of names, its
 * block (the depth in the model) and its type within the block. */
#ifndef BR_CLI_LAYER_NAME_H
#define BR_CLI_LAYER_NAME_H

#include <stddef.h>

#include "bitrank.h"

/* Natural order: runs of digits compare as numbers ("layers.2" before
 * "layers.10"), other bytes as unsigned chars. Numbers equal in value but written
 * with different leading zeros are ordered by the first such difference, so the
 * order is total (only equal strings compare equal). <0, 0 or >0 like strcmp. */
int br_cli_name_cmp(const char *a, const char *b);

/* The block index: the first dot-separated component made only of digits
 * ("model.layers.12.mlp.up_proj.weight": 12), or -1 if there is none (or it does
 * not fit an int). A component rather than any digit run, so that "fc1" or
 * "c_attn2" is never read as a depth. */
long br_cli_block_index(const char *name);

/* The layer's type: the name after its block index, less a final ".weight"
 * ("model.layers.12.self_attn.q_proj.weight": "self_attn.q_proj";
 * "encoder.layer.3.output.dense.weight": "output.dense"); the whole name less
 * ".weight" when it has no block index. Written to dst (cap bytes, terminated). */
void br_cli_layer_type(char *dst, size_t cap, const char *name);

/* order[0..n_layers) = the indices of rep's layers in natural order of their
 * names (layers of the same name keep the order of the report). */
void br_cli_layer_order(const br_compress_report *rep, size_t *order);

#endif
