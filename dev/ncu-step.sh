#!/usr/bin/env bash
# Device time of every kernel of the BLR layer training step at bench_layer's third
# shape, each graph node isolated by ncu (--graph-profiling node, clocks as found,
# gpu__time_duration.sum, two replayed steps; ncu flushes the caches between
# kernels, so the small memory-bound kernels read cold), then, if
# build-ab-in/ncu.variants exists (one line of VAR=value words per variant), the
# step at that shape under each variant, alternated with the default, three rounds.
# Builds build-n (sm_90a, bench_layer only). About 70 s on a fresh machine.
#   bash dev/ncu-step.sh                  (device call; carry ["build-ab-in"] for variants)
# NCU_SKIP / NCU_COUNT (default 70 / 28): kernels skipped before the profiled ones
# and kernels profiled; when the step's kernels change, check that the rows printed
# are two whole steps. scripts/ncu-layer is the general form (any shape, the L2 left
# warm with NCU_CACHE=none).
cd "$(dirname "$0")/.." || exit 1
export PATH="$PATH:/usr/local/cuda/bin"
out=${OUT:-/tmp}
t0=$(date +%s)
cmake -S . -B build-n -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DBITRANK_NATIVE=OFF \
  "-DBR_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a" >"$out/build.log" 2>&1 &&
  cmake --build build-n -j"$(nproc)" --target bench_layer >>"$out/build.log" 2>&1 ||
  { tail "$out/build.log"; exit 1; }
echo "build: $(($(date +%s) - t0)) s"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
# about 70 kernels go before the replays' third step; 28 is two steps
timeout 110 "$ncu" --clock-control none --graph-profiling node --metrics gpu__time_duration.sum \
  --launch-skip "${NCU_SKIP:-70}" --launch-count "${NCU_COUNT:-28}" --csv ./build-n/bench_layer --shape 3 \
  >"$out/ncu.csv" 2>"$out/ncu.err"
echo "ncu rc=$? ($(($(date +%s) - t0)) s)"
python3 - "$out/ncu.csv" <<'PY'
import csv, re, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) == 15]  # not the bench's JSON
if len(rows) < 2: sys.exit("no ncu rows")
h = rows[0]
k, v, g = h.index("Kernel Name"), h.index("Metric Value"), h.index("Grid Size")
for r in rows[1:]:
    name = re.sub(r"\(CUtensorMap_st.*|\(.*", "", r[k])
    print("%8.2f us  grid %-12s %s" % (float(r[v].replace(",", "")) / 1000, r[g], name[:90]))
PY
b=build-n/bench_layer
run() { local label=$1; shift
  env "$@" timeout 60 $b --shape 3 2>/dev/null | python3 -c "
import json,sys
print('%-60s %s' % (sys.argv[1], ' '.join(str(json.loads(l)['median_ms']) for l in sys.stdin)))" "$label"; }
if [ -f build-ab-in/ncu.variants ]; then
  for round in 1 2 3; do
    run "default r$round"
    while read -r vars; do [ -n "$vars" ] && run "$vars r$round" $vars; done <build-ab-in/ncu.variants
  done
fi
echo "total: $(($(date +%s) - t0)) s"
