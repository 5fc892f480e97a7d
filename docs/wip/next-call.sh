#!/usr/bin/env bash
# The next session's first device call (about 8 minutes on a fresh H200): ab-many of
# the waiting patches (every cuda suite on each tree), stream-K's sanitizers, then ncu
# of the nodes they change at the third shape (mm_tn2, sign_rowdot2, sumsq), alone.
# Setup here:
#   mkdir -p build-ab-in && cp docs/wip/ab-many.sh docs/wip/next-call.sh \
#     docs/wip/{streamk-tn2,gnorm-rows}/*.{patch,variants} build-ab-in/
# Device call (run tool, carry ["build-ab-in"], timeout 600):
#   bash build-ab-in/next-call.sh
cd "$(dirname "$0")/.." || exit 1
export PATH="$PATH:/usr/local/cuda/bin"
out=${OUT:-/tmp}
bash build-ab-in/ab-many.sh streamk-tn2 gnorm-rows
if [ -x build-ab-streamk-tn2/test_gemm ]; then
  for tool in memcheck synccheck; do
    BITRANK_TEST_DEVICE=cuda BITRANK_TEST_CASES=mm_tn_streamk timeout 100 \
      compute-sanitizer --tool $tool build-ab-streamk-tn2/test_gemm >"$out/san-$tool.log" 2>&1
    echo "streamk $tool rc=$? $(tail -n 2 "$out/san-$tool.log" | tr '\n' ' ')"
  done
fi
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
# one step's kernels from launch 70 on: y, expand W_U, B, colsum_fused, colsum_fin,
# mm_tn2 (75), sign_rowdot2 (76), sumsq (77), step_ctrl, update_n, ...
node() { # label, build dir, launch index, env assignments...
  local label=$1 dir=$2 at=$3
  shift 3
  env "$@" timeout 60 "$ncu" --clock-control none --graph-profiling node --launch-skip "$at" \
    --launch-count 1 --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    "$dir/bench_layer" --shape 3 >"$out/ncu-$label-$at.txt" 2>&1
  echo "$label @$at: $(grep -oE '[a-z_0-9]+_kernel[<a-z0-9, >]*' "$out/ncu-$label-$at.txt" | head -n 1)" \
    "$(grep -E 'gpu__time|dram__bytes' "$out/ncu-$label-$at.txt" | awk '{print $1, $3}' | tr '\n' ' ')"
}
for at in 75 76 77; do node head build-ab-head $at; done
[ -x build-ab-streamk-tn2/bench_layer ] && for v in "" BITRANK_MM_TN_STREAMK=0 BITRANK_MM_TN_STREAMK=2; do
  l=${v//=/_}
  node "sk${l:+-$l}" build-ab-streamk-tn2 75 $v
done
[ -x build-ab-gnorm-rows/bench_layer ] && for at in 76 77; do
  node gnorm build-ab-gnorm-rows $at
  node gnorm-off build-ab-gnorm-rows $at BITRANK_OPT_ROW_NORMS=0
done
