#!/usr/bin/env bash
# One device call for the tiny causal LM: build for sm_90a (the shared library), train
# the tiny LM when data/tiny-lm is missing (it comes back as $OUT/tiny-lm.tgz, to
# be copied into data/tiny-lm), then bench/lm_distill.py with the arguments given.
#   dev/gpu-round-lm.sh --bpw 1.0
# Carry .deps/kjv (the corpus as text: python -m bitrank.kjv .deps/kjv/kjv.txt); the
# lent machine has no Debian KJV and no network. TRAIN_SECONDS bounds the training.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/cuda/bin
out=${OUT:-/tmp/gpu-round-lm}
mkdir -p "$out"
t0=$(date +%s)
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DBITRANK_NATIVE=OFF \
  -DBR_CUDA_GENCODE="-gencode=arch=compute_90a,code=sm_90a" >/dev/null &&
  cmake --build build-gpu -j"$(nproc)" --target bitrank_shared >"$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
export BITRANK_LIBRARY=$PWD/build-gpu/libbitrank.so PYTHONPATH=$PWD/python HF_HUB_OFFLINE=1
export BITRANK_KJV_TEXT=${BITRANK_KJV_TEXT:-$PWD/.deps/kjv/kjv.txt}
model=data/tiny-lm
if [ ! -f "$model/model.safetensors" ]; then
  # trained outside $OUT and packed into it: the device tool returns at most 8 files
  model=build-gpu/tiny-lm
  rm -rf "$model"
  timeout 420 scripts/train-tiny-lm --device cuda --max-seconds "${TRAIN_SECONDS:-300}" \
    --out "$model" >"$out/train.txt" 2>&1
  echo "train: rc $? $(grep -E 'trained|kept step|held-out ppl' "$out/train.txt" | tail -3 | tr '\n' ' ')"
  tar -czf "$out/tiny-lm.tgz" -C build-gpu tiny-lm
fi
# the distillation's CUDA tests first (the captured step against the eager one)
timeout 120 python3 -m pytest python/tests/test_distill.py -q -m cuda -p no:cacheprovider \
  2>&1 | tail -3
left=$(( 560 - ($(date +%s) - t0) ))
PYTHONUNBUFFERED=1 timeout "$left" python3 bench/lm_distill.py --model "$model" \
  --json "$out/lm_distill.json" "$@" 2>"$out/lm_distill.err" | tee "$out/lm_distill.txt"
echo "lm_distill rc ${PIPESTATUS[0]}; total $(( $(date +%s) - t0 )) s"
tail -5 "$out/lm_distill.err"
