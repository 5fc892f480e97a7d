#!/usr/bin/env bash
# One device call for the PyTorch path: build for sm_90a (with the shared library),
# the interop tests on the GPU, the Python tests on cuda, then a compress_model sweep
# on all-MiniLM-L6-v2 (arguments: JSON dicts of compress_model options).
#   dev/gpu-round-model.sh '{"steps": 400}' '{"steps": 400, "target": "model"}'
# The model and text travel as the device call's carry: .deps/gpu-carry (see
# dev/minilm-sweep.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
# the carry, packed (dev/make-gpu-carry.sh): unpacked here
[ -d .deps/gpu-carry/minilm ] || [ ! -f .deps/gpu-carry.tar.xz ] || tar -xJf .deps/gpu-carry.tar.xz -C .deps
export PATH=$PATH:/usr/local/cuda/bin
out=${OUT:-/tmp/gpu-round-model}
mkdir -p "$out"
t0=$(date +%s)
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DBITRANK_NATIVE=OFF \
  >/dev/null && cmake --build build-gpu -j"$(nproc)" >"$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
ctest --test-dir build-gpu -L gpu -R interop --output-on-failure >"$out/interop.txt" 2>&1
echo "interop (gpu): rc $? $(grep -E 'tests passed|tests failed' "$out/interop.txt")"
export BITRANK_LIBRARY=$PWD/build-gpu/libbitrank.so PYTHONPATH=$PWD/python HF_HUB_OFFLINE=1
if python3 -c "import pytest" 2>/dev/null; then
  timeout 150 python3 -m pytest python/tests/test_blr_linear.py python/tests/test_compress_model.py \
    -q -x >"$out/pytest.txt" 2>&1
  echo "pytest: rc $? $(tail -n1 "$out/pytest.txt")"
else
  echo "pytest: not installed"
fi
timeout 420 python3 dev/minilm-model-sweep.py --device cuda --model-dir .deps/gpu-carry/minilm \
  --fortunes .deps/gpu-carry/fortunes "$@" 2>"$out/sweep.err" | tee "$out/sweep.jsonl"
echo "sweep rc ${PIPESTATUS[0]}; total $(( $(date +%s) - t0 )) s"
tail -5 "$out/sweep.err"
