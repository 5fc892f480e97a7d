#!/usr/bin/env bash
# One device call for MiniLM's fidelity table at several bit budgets: build the shared
# library for sm_90a, then one bench/minilm_model.py process per budget, side by side
# on the one GPU (each is far from filling it), with bench/minilm_model.py's defaults.
#   dev/gpu-round-minilm-bpw.sh [--no-build] 0.55 2.0
# Carry .deps/gpu-carry.tar.xz (dev/make-gpu-carry.sh). Results: $OUT/minilm-BPW.json
# and .log. --no-build: build-gpu/libbitrank.so is there already (scripts/gpu-check's
# build, whose flags these are), so this can run beside gpu-check's tests in one call.
# RUN_SECONDS: each budget's time limit (default: what is left of 580 s).
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d .deps/gpu-carry/minilm ] || tar -xJf .deps/gpu-carry.tar.xz -C .deps || exit 1
export PATH=$PATH:/usr/local/cuda/bin
out=${OUT:-/tmp/gpu-round-minilm}
mkdir -p "$out"
t0=$(date +%s)
if [ "${1:-}" = --no-build ]; then
  shift
else
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DBITRANK_NATIVE=OFF \
    -DBR_CUDA_GENCODE="-gencode=arch=compute_90a,code=sm_90a" >/dev/null &&
    cmake --build build-gpu -j"$(nproc)" --target bitrank_shared >"$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi
[ -f build-gpu/libbitrank.so ] || { echo "no build-gpu/libbitrank.so"; exit 1; }
export BITRANK_LIBRARY=$PWD/build-gpu/libbitrank.so PYTHONPATH=$PWD/python HF_HUB_OFFLINE=1
for b in "$@"; do
  timeout "${RUN_SECONDS:-$(( 580 - $(date +%s) + t0 ))}" python3 bench/minilm_model.py \
    --device cuda --methods original,model,distill --bpw "$b" \
    --model-dir .deps/gpu-carry/minilm --fortunes .deps/gpu-carry/fortunes \
    --work "$PWD/.deps/minilm-model-$b" --json "$out/minilm-$b.json" >"$out/minilm-$b.log" 2>&1 &
done
wait
echo "total $(( $(date +%s) - t0 )) s"
for b in "$@"; do echo "== $b"; grep -v "^ " "$out/minilm-$b.log" | tail -14; done
