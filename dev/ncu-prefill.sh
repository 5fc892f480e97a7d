#!/usr/bin/env bash
# Device time of each kernel of the CUDA inference plan's prefill at bench_infer_cuda's
# first shape (11008×4096, 1 bpw, 4096 tokens, f16): ncu on the bench's first two
# prefill runs (unpack, staging, the bitmap GEMMs, finish; ncu flushes the caches
# between kernels, clocks as found). Uses build-ab-bin/TREE/bench_infer_cuda (TREE:
# head, or a change's name) where dev/ab-infer.sh ran before it in the same call, else
# builds build-n from the tree as carried (sm_90a, the bench only, about 60 s).
# Device call (run tool), from the repository root:
#   bash dev/ncu-prefill.sh [TREE]
cd "$(dirname "$0")/.." || exit 1
export PATH="$PATH:/usr/local/cuda/bin"
out=${OUT:-/tmp}
bin=build-ab-bin/${1:-head}/bench_infer_cuda
if [ ! -x "$bin" ]; then
  t0=$(date +%s)
  cmake -S . -B build-n -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DBITRANK_VULKAN=OFF \
    -DBITRANK_NATIVE=OFF "-DBR_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a" \
    >"$out/ncu-build.log" 2>&1 &&
    cmake --build build-n -j"$(nproc)" --target bench_infer_cuda >>"$out/ncu-build.log" 2>&1 ||
    { tail "$out/ncu-build.log"; exit 1; }
  bin=build-n/bench_infer_cuda
  echo "build: $(($(date +%s) - t0)) s"
fi
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
# ncu's rows go to the log file: the bench's own JSON lines stay out of the CSV
timeout 100 "$ncu" --clock-control none \
  -k 'regex:unpack_|stage_x|stage_t|finish_kernel|wgmma_gemm|mma_gemm|reduce_splits' \
  --launch-count 20 --metrics gpu__time_duration.sum,dram__bytes.sum --csv \
  --log-file "$out/ncu-prefill.csv" "$bin" --quick --runs 3 >"$out/ncu-bench.out" 2>&1
echo "ncu rc=$?"
python3 - "$out/ncu-prefill.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hi = next(i for i, r in enumerate(rows) if r and r[0] == 'ID')
h = rows[hi]
ki, mi, ui, vi = (h.index(x) for x in ('Kernel Name', 'Metric Name', 'Metric Unit', 'Metric Value'))
for r in rows[hi + 1:]:
    if len(r) == len(h):
        print("%3s %-60.60s %-24s %14s %s" % (r[0], r[ki].split('(')[0], r[mi], r[vi], r[ui]))
PY
