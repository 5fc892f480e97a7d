#!/usr/bin/env bash
# Setup: mkdir -p build-ab-in && cp docs/wip/ab-many.sh docs/wip/streamk-tn2/* build-ab-in/; device call: bash build-ab-in/sk-probe.sh
# streamk-tn2 probe: head and head+patch built side by side; ncu per kernel at shape 3
# (head, patch with stream-K off, patch on); benches alternated; stream-K tests + sanitizers.
cd "$(dirname "$0")/.." || exit 1
export PATH="$PATH:/usr/local/cuda/bin"
out=${OUT:-/tmp}; t0=$(date +%s)
flags=(-DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DBITRANK_NATIVE=OFF "-DBR_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a")
rm -rf build-sk-src && mkdir build-sk-src && tar --exclude='./build*' --exclude='./.git' -cf - . | tar -xf - -C build-sk-src
(cd build-sk-src && patch -p1 --forward < ../build-ab-in/streamk-tn2.patch) > $out/patch.log 2>&1 || { cat $out/patch.log; exit 1; }
cmake -S . -B build-h "${flags[@]}" > $out/bh.log 2>&1
cmake -S build-sk-src -B build-sk "${flags[@]}" > $out/bs.log 2>&1
cmake --build build-h -j8 --target bench_layer test_gemm >> $out/bh.log 2>&1 &
cmake --build build-sk -j8 --target bench_layer test_gemm test_layer_ops test_blr >> $out/bs.log 2>&1 &
wait; echo "build: $(($(date +%s) - t0)) s"; ls build-h/bench_layer build-sk/bench_layer build-sk/test_gemm || exit 1
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
prof() { local label=$1 b=$2; shift 2
  env "$@" timeout 100 "$ncu" --clock-control none --graph-profiling node --metrics gpu__time_duration.sum \
    --launch-skip 70 --launch-count 14 --csv $b --shape 3 > $out/ncu-$label.csv 2>$out/ncu-$label.err
  python3 - $out/ncu-$label.csv $label <<'PY'
import csv, re, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) == 15]
if len(rows) < 2: sys.exit("no ncu rows " + sys.argv[2])
h = rows[0]; k, v, g = h.index("Kernel Name"), h.index("Metric Value"), h.index("Grid Size")
print("== " + sys.argv[2]); tot = 0
for r in rows[1:]:
    t = float(r[v].replace(",", "")) / 1000; tot += t
    print("%8.2f us  grid %-12s %s" % (t, r[g], re.sub(r"\(CUtensorMap_st.*|\(.*", "", r[k])[:70]))
print("%8.2f us  total" % tot)
PY
}
prof head build-h/bench_layer
prof skoff build-sk/bench_layer BITRANK_MM_TN_STREAMK=0
prof skon build-sk/bench_layer
echo "ncu: $(($(date +%s) - t0)) s"
run() { local label=$1 b=$2; shift 2
  env "$@" timeout 60 $b 2>/dev/null | python3 -c "
import json,sys
print('%-30s %s' % (sys.argv[1], ' '.join(str(json.loads(l)['median_ms']) for l in sys.stdin)))" "$label"; }
for r in 1 2 3; do run "head r$r" build-h/bench_layer; run "sk r$r" build-sk/bench_layer; run "sk-off r$r" build-sk/bench_layer BITRANK_MM_TN_STREAMK=0; done
echo "bench: $(($(date +%s) - t0)) s"
for t in test_gemm test_layer_ops test_blr; do BITRANK_TEST_DEVICE=cuda timeout 150 build-sk/$t > $out/sk-$t.log 2>&1; echo "sk $t rc=$? $(tail -n 1 $out/sk-$t.log)"; grep -m4 FAIL $out/sk-$t.log; done
for tool in memcheck synccheck; do BITRANK_TEST_DEVICE=cuda BITRANK_TEST_CASES=mm_tn_streamk timeout 120 compute-sanitizer --tool $tool build-sk/test_gemm > $out/san-$tool.log 2>&1; echo "$tool rc=$? $(tail -n 2 $out/san-$tool.log | tr '\n' ' ')"; done
echo "total: $(($(date +%s) - t0)) s"
