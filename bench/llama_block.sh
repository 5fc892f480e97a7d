#!/usr/bin/env bash
# A Llama-2-7B-shaped block (q, k, v, o 4096×4096; gate, up 11008×4096; down
# 4096×11008; synthetic structured weights from bench_compress) through
# `bitrank compress` at the default options: prints each layer's line, the time
# per layer, and fails unless every layer's trained error is below its init's.
#   bench/llama_block.sh BUILD_DIR [OUT_DIR] [extra compress options]
set -uo pipefail
build=${1:?usage: llama_block.sh BUILD_DIR [OUT_DIR] [options]}
out=${2:-$build}
shift $(($# < 2 ? $# : 2))
mkdir -p "$out"
blk=$build/llama7b-block.safetensors
p=model.layers.0
shapes="$p.self_attn.q_proj.weight=4096x4096,$p.self_attn.k_proj.weight=4096x4096"
shapes+=",$p.self_attn.v_proj.weight=4096x4096,$p.self_attn.o_proj.weight=4096x4096"
shapes+=",$p.mlp.gate_proj.weight=11008x4096,$p.mlp.up_proj.weight=11008x4096"
shapes+=",$p.mlp.down_proj.weight=4096x11008"
[ -f "$blk" ] || "$build/bench_compress" --write "$blk" --shapes "$shapes" >/dev/null || exit 1
t0=$(date +%s)
"$build/bitrank" compress "$blk" -o "$build/llama7b-block.blr.safetensors" --report \
  "$out/llama-block.html" "$@" >"$out/llama-block.txt" 2>&1
rc=$?
secs=$(($(date +%s) - t0))
cat "$out/llama-block.txt"
# progress lines: "[i/7] NAME [m][n] rank r: error A -> B (m:ss)"
awk -v rc=$rc -v secs=$secs '
  /^\[[0-9]+\/[0-9]+\] .* error [0-9.]+ -> [0-9.]+/ {
    for (i = 1; i < NF; i++) if ($i == "->") { a = $(i - 1) + 0; b = $(i + 1) + 0 }
    layers++; if (b >= a) worse++
    t = $NF; gsub(/[()]/, "", t); split(t, hm, ":"); s = hm[1] * 60 + hm[2]
    if (s > slowest) slowest = s
  }
  END {
    printf "llama-2-7b-shaped block: rc %d, %d layers, %d not better than their init, %d s in all, slowest layer %d s\n", rc, layers, worse, secs, slowest
    exit (rc || layers != 7 || worse) ? 1 : 0
  }' "$out/llama-block.txt"
