#!/usr/bin/env bash
# One device call of issue 20's measurements: rebuild, the compression suite on
# cuda, the big layer shapes, the Llama-2-7B-shaped block and the MiniLM sweep.
set -uo pipefail
cd "$(dirname "$0")/.."
# the carry, packed (dev/make-gpu-carry.sh): unpacked here
[ -d .deps/gpu-carry/minilm ] || [ ! -f .deps/gpu-carry.tar.xz ] || tar -xJf .deps/gpu-carry.tar.xz -C .deps
export PATH=$PATH:/usr/local/cuda/bin
out=${OUT:-/tmp/gpu-round}
mkdir -p "$out"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DBITRANK_NATIVE=OFF \
  -DBR_CUDA_GENCODE="-gencode=arch=compute_90a,code=sm_90a" >/dev/null &&
  cmake --build build-gpu -j"$(nproc)" >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
BITRANK_TEST_DEVICE=cuda ./build-gpu/test_compress >"$out/test_compress.txt" 2>&1
echo "test_compress on cuda: rc $? $(tail -n1 "$out/test_compress.txt")"
./build-gpu/bench_compress --shapes 4096x11008,11008x4096 >"$out/bench_compress.txt" 2>&1
grep -vE '^\{' "$out/bench_compress.txt"
bench/llama_block.sh build-gpu "$out" --device cuda | grep -E '^\[|llama-2'
dev/minilm-sweep.sh --device cuda --bitrank build-gpu/bitrank --model-dir .deps/gpu-carry/minilm \
  --fortunes .deps/gpu-carry/fortunes "$@"
