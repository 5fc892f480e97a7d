#!/usr/bin/env bash
# One device call for MiniLM's distillation data: build the shared library for sm_90a,
# then dev/minilm-distill-sweep.py on cuda (arguments: its configurations, JSON dicts).
#   dev/gpu-round-distill.sh '{"kjv": true, "steps": 3000}' '{"steps": 3000}'
# Carry .deps/gpu-carry.tar.xz (dev/make-gpu-carry.sh): the model, the fortunes, the KJV.
# SWEEP_SECONDS bounds the sweep (default: what is left of 570 s after the build); its lines are in $OUT/sweep.jsonl as
# they come.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d .deps/gpu-carry/minilm ] || tar -xJf .deps/gpu-carry.tar.xz -C .deps || exit 1
export PATH=$PATH:/usr/local/cuda/bin
out=${OUT:-/tmp/gpu-round-distill}
mkdir -p "$out"
t0=$(date +%s)
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DBITRANK_NATIVE=OFF \
  >/dev/null && cmake --build build-gpu -j"$(nproc)" --target bitrank_shared >"$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
export BITRANK_LIBRARY=$PWD/build-gpu/libbitrank.so PYTHONPATH=$PWD/python HF_HUB_OFFLINE=1
timeout "${SWEEP_SECONDS:-$(( 570 - $(date +%s) + t0 ))}" python3 dev/minilm-distill-sweep.py --device cuda \
  --model-dir .deps/gpu-carry/minilm --fortunes .deps/gpu-carry/fortunes \
  --kjv-text .deps/gpu-carry/kjv.txt "$@" 2>"$out/sweep.err" | tee "$out/sweep.jsonl"
echo "sweep rc ${PIPESTATUS[0]}; total $(( $(date +%s) - t0 )) s"
grep -v "^ " "$out/sweep.err" | tail -8
