#!/usr/bin/env bash
# A/B of one change on the lent GPU, in three steps: the working tree as carried
# ("head") against it + build-ab-in/<name>.patch ("fix"), both built for sm_90a;
# then bench_layer (two interleaved rounds), bench_ops' sumsq and cvt_both rows and
# bench_gemm --layer-only (every GEMM of the layer step) on both; then every CUDA
# test suite on the patched tree. dev/ab-many.sh does several changes in one call.
#
# build-ab-in/ is ignored by git, so the device call must carry it. Write the patch
# to /tmp, then copy it there (`git diff > tracked-file` puts the truncated file in
# the patch). Device call (run tool, carry ["build-ab-in"]), about 3 min a patch:
#   bash dev/ab.sh build <name> && bash dev/ab.sh bench <name> && bash dev/ab.sh test <name>
# Logs in $OUT/<name> (else build-ab-out/<name>). The device copies the working tree
# when the call starts: edit nothing it carries until the call is under way.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
name=${2:?usage: ab.sh build|bench|test <patch name>}
patch_file=$root/build-ab-in/$name.patch
out=${OUT:-$root/build-ab-out}/$name
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
targets="test_reduce test_sign test_optim_ops test_cross_backend test_layer_ops test_blr test_gemm bench_ops bench_layer bench_gemm"
tests="test_reduce test_sign test_optim_ops test_cross_backend test_layer_ops test_blr test_gemm"

step_build() {
  local t0=$(date +%s)
  rm -rf build-ab-src && mkdir -p build-ab-src
  tar --exclude='./build*' --exclude='./.git' -cf - . | tar -xf - -C build-ab-src || return 1
  (cd build-ab-src && patch -p1 --forward <"$patch_file") >"$out/patch.log" 2>&1 ||
    { cat "$out/patch.log"; echo "ab: PATCH DOES NOT APPLY"; return 1; }
  local flags=(-DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DBITRANK_NATIVE=OFF
    "-DBR_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a")
  cmake -S . -B build-ab-head "${flags[@]}" >"$out/build-head.log" 2>&1 &&
    cmake -S build-ab-src -B build-ab-fix "${flags[@]}" >"$out/build-fix.log" 2>&1 ||
    { echo "ab: CONFIGURE FAILED"; tail -n 20 "$out"/build-*.log; return 1; }
  local jobs=$(($(nproc) / 2 + 1)) rc=0
  for v in head fix; do
    cmake --build build-ab-$v -j"$jobs" --target $targets >>"$out/build-$v.log" 2>&1 &
  done
  wait -n || rc=1
  wait -n || rc=1
  for v in head fix; do
    [ -x build-ab-$v/bench_layer ] && echo "build $v: ok" ||
      { echo "build $v: FAILED"; grep -E "error" "$out/build-$v.log" | head; rc=1; }
  done
  echo "build ($name): $(($(date +%s) - t0)) s"
  return $rc
}

step_bench() {
  for round in 1 2; do
    for v in head fix; do
      timeout 120 build-ab-$v/bench_layer >"$out/layer-$v-$round.jsonl" 2>/dev/null
      echo "bench_layer $v round $round: rc=$?"
      python3 -c "
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l); print('   ', r['m'], r['n'], r['r'], r['median_ms'])" "$out/layer-$v-$round.jsonl"
      timeout 120 build-ab-$v/bench_ops >"$out/ops-$v-$round.jsonl" 2>/dev/null
      grep -E '"(sumsq|cvt_both)"' "$out/ops-$v-$round.jsonl" | head -n 3
    done
  done
  for v in head fix; do # every GEMM of the layer step as the layer calls it
    timeout 200 build-ab-$v/bench_gemm --layer-only >"$out/gemm-layer-$v.jsonl" 2>/dev/null
    echo "bench_gemm --layer-only $v: rc=$?"
    python3 -c "
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l)
    if r.get('bench')=='gemm_layer': print('   ', r['layer'], r['gemm'], r['after_tile'], r['after_us'])" "$out/gemm-layer-$v.jsonl"
  done
}

step_test() {
  local rc=0
  for t in $tests; do
    BITRANK_TEST_DEVICE=cuda timeout 150 build-ab-fix/$t >"$out/$t-fix.log" 2>&1
    local r=$?
    echo "$t fix: rc=$r $(tail -n 1 "$out/$t-fix.log")"
    ((r != 0 && r != 77)) && rc=1
  done
  return $rc
}

case "${1:-}" in
  build) step_build ;;
  bench) step_bench ;;
  test) step_test ;;
  *) echo "usage: $0 build|bench|test <patch name>" >&2; exit 2 ;;
esac
