#!/usr/bin/env bash
# Batch-1 generation on the lent GPU in one device call: builds the shared library for
# sm_90a (build-gen), runs the Python tests of torch.compile on the GPU, then
# bench/bench_generate.py as gpu-check runs it and again with --compile (both models'
# decode step through inductor before the CUDA graph capture), and with --lm-head
# also compiled with the LM head compressed. JSON lines to $OUT/generate.jsonl (else
# build-gen/out), summaries on stdout.
#   bash dev/generate-gpu.sh [--no-plain] [--no-tests] [--lm-head]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
plain=1 tests=1 lm_head=0
for a in "$@"; do
  case "$a" in
    --no-plain) plain=0 ;;
    --no-tests) tests=0 ;;
    --lm-head) lm_head=1 ;;
    *) echo "generate-gpu: unknown option $a" >&2; exit 2 ;;
  esac
done
out=${OUT:-build-gen/out}
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$(date +%s)
if ! { cmake -S . -B build-gen -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DBITRANK_NATIVE=OFF \
        -DBITRANK_VULKAN=OFF -DBR_CUDA_GENCODE="-gencode=arch=compute_90a,code=sm_90a" \
        >"$out/build.log" 2>&1 &&
      cmake --build build-gen --target bitrank_shared -j"$(nproc)" >>"$out/build.log" 2>&1; }; then
  tail -n 30 "$out/build.log"
  exit 1
fi
echo "build: $(($(date +%s) - t0)) s"
export BITRANK_LIBRARY="$PWD/build-gen/libbitrank.so" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1
status=0
if ((tests)); then
  t0=$(date +%s)
  timeout 240 python3 -m pytest python/tests/test_inference.py -q --tb=short -p no:cacheprovider \
    -k "compile" >"$out/pytest.log" 2>&1 || status=1
  echo "pytest -k compile: $(tail -n1 "$out/pytest.log") ($(($(date +%s) - t0)) s)"
  ((status)) && grep -E "^(FAILED|ERROR|E  )" "$out/pytest.log" | head -n 20
fi
run() {
  local name=$1
  shift
  local t0
  t0=$(date +%s)
  timeout 300 python3 bench/bench_generate.py "$@" >>"$out/generate.jsonl" 2>"$out/$name.err"
  local rc=$?
  ((rc)) && status=1
  echo "== bench_generate $* (rc $rc, $(($(date +%s) - t0)) s)"
  grep -E "^  " "$out/$name.err"
  ((rc)) && tail -n 8 "$out/$name.err"
}
: >"$out/generate.jsonl"
((plain)) && run plain
run compiled --compile
((lm_head)) && run compiled-lm-head --compile --lm-head
exit $status
