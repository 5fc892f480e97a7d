#!/usr/bin/env bash
# Setup: mkdir -p build-ab-in && cp docs/wip/ab-many.sh docs/wip/streamk-tn2/* build-ab-in/; device call: bash build-ab-in/sk-final.sh
# ab-many of streamk-tn2 (tests included), then its sanitizers and ncu of mm_tn2 alone.
cd "$(dirname "$0")/.." || exit 1
export PATH="$PATH:/usr/local/cuda/bin"
out=${OUT:-/tmp}
bash build-ab-in/ab-many.sh streamk-tn2
for tool in memcheck synccheck; do BITRANK_TEST_DEVICE=cuda BITRANK_TEST_CASES=mm_tn_streamk timeout 100 compute-sanitizer --tool $tool build-ab-streamk-tn2/test_gemm > $out/san-$tool.log 2>&1; echo "$tool rc=$? $(tail -n 2 $out/san-$tool.log | tr '\n' ' ')"; done
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
for v in "head build-ab-head" "sk build-ab-streamk-tn2" "sk-off build-ab-streamk-tn2 BITRANK_MM_TN_STREAMK=0"; do
  set -- $v; label=$1 dir=$2; shift 2
  for sh in 3 1; do
    env "$@" timeout 60 "$ncu" --clock-control none --graph-profiling node --launch-skip 75 --launch-count 1 \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,sm__cycles_active.avg $dir/bench_layer --shape $sh > $out/ncu-$label-$sh.txt 2>&1
    echo "$label shape $sh: $(grep -oE 'wgmma_gemm_kernel<[^>]*>' $out/ncu-$label-$sh.txt | head -n1) $(grep -E 'gpu__time|dram__bytes' $out/ncu-$label-$sh.txt | awk '{print $1, $3}' | tr '\n' ' ')"
  done
done
