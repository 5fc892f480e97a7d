#!/usr/bin/env bash
# A/B of /work/briefs2/gemm-regress.patch (helper gemm-regress, 2026-11-29) on the
# lent H200. Three builds of test_gemm + bench_gemm (sm_90a only, as scripts/bench-gemm):
#   head   the tree as carried (HEAD c90d450 + whatever the lead has uncommitted)
#   fix    the same tree + the patch (plain GEMM: kFullEpi = false kernels)
#   lane0  fix + -DBR_WGMMA_LANE0_RELEASE=1 (register-A stage release by lane 0 alone,
#          as at 1ad684a: measures what the per-thread release costs the bits rows;
#          racecheck is known to flag it, so it is benchmarked, not racechecked)
#
# Setup here (the patch and this script travel in an ignored folder named in carry):
#   mkdir -p /work/main/build-ab-in && cp /work/briefs2/gemm-regress.patch \
#     /work/briefs2/gemm-regress-ab.sh /work/main/build-ab-in/
# Device calls (run tool, carry ["build-ab-in"], one step per call, each < 10 min):
#   bash build-ab-in/gemm-regress-ab.sh build   # ~3-5 min: copy, patch, 3 builds in parallel
#   bash build-ab-in/gemm-regress-ab.sh bench   # bench_gemm --no-sweep, head/fix/lane0 x 2 rounds, interleaved
#   bash build-ab-in/gemm-regress-ab.sh test    # test_gemm x3, bench_gemm --sweep-only (fix), racecheck (fix)
# Logs go to $OUT; each step prints its summary.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
out=${OUT:-$root/build-ab-out}
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
variants="head fix lane0"

step_build() {
  local t0=$(date +%s)
  rm -rf build-ab-src && mkdir -p build-ab-src
  # the tracked and untracked sources, without build folders (they match /build*/)
  tar --exclude='./build*' --exclude='./.git' -cf - . | tar -xf - -C build-ab-src || return 1
  if ! (cd build-ab-src && { patch -p1 --forward <"$root/build-ab-in/gemm-regress.patch" ||
    git apply -p1 "$root/build-ab-in/gemm-regress.patch"; } >"$out/patch.log" 2>&1); then
    cat "$out/patch.log"
    echo "ab: PATCH DOES NOT APPLY"
    return 1
  fi
  local flags=(-DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DBITRANK_NATIVE=OFF
    "-DBR_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a")
  cmake -S . -B build-ab-head "${flags[@]}" >"$out/build-head.log" 2>&1 &&
    cmake -S build-ab-src -B build-ab-fix "${flags[@]}" >"$out/build-fix.log" 2>&1 &&
    cmake -S build-ab-src -B build-ab-lane0 "${flags[@]}" \
      -DCMAKE_CUDA_FLAGS=-DBR_WGMMA_LANE0_RELEASE=1 >"$out/build-lane0.log" 2>&1 || {
    echo "ab: CONFIGURE FAILED"
    tail -n 20 "$out"/build-*.log
    return 1
  }
  local jobs=$(($(nproc) / 3 + 1)) rc=0
  for v in $variants; do
    cmake --build build-ab-$v -j"$jobs" --target test_gemm bench_gemm >>"$out/build-$v.log" 2>&1 &
  done
  for v in $variants; do wait -n || rc=1; done
  for v in $variants; do
    if [ -x build-ab-$v/bench_gemm ] && [ -x build-ab-$v/test_gemm ]; then
      echo "build $v: ok"
    else
      echo "build $v: FAILED"
      grep -E "error|Error" "$out/build-$v.log" | head -n 20
      rc=1
    fi
  done
  echo "build: $(($(date +%s) - t0)) s"
  return $rc
}

# TFLOP/s of the wgmma 128x256 rows (f16/smem, rows/reg2, cols/reg2) and the best
# wgmma tile per kind, per shape, for each bench log given.
summary() {
  python3 - "$@" <<'EOF'
import json, sys
for path in sys.argv[1:]:
    best, pick = {}, {}
    for line in open(path):
        if not line.startswith('{'):
            continue
        r = json.loads(line)
        if r.get('bench') != 'gemm' or 'm' not in r or r.get('family') != 'wgmma':
            continue
        shape = (r['m'], r['n'], r['k'])
        kind = r['variant'].split('/')[0]
        if r['tile'] in ('128x256/smem', '128x256/reg2'):
            pick[(shape, kind, r['tile'])] = r['tflops']
        if r['tflops'] > best.get((shape, kind), (0, ''))[0]:
            best[(shape, kind)] = (r['tflops'], r['tile'])
    print(path.split('/')[-1])
    for (shape, kind, tile), tf in sorted(pick.items()):
        b = best[(shape, kind)]
        print('  %-16s %-13s %-13s %6.1f   best %6.1f %s' % (
            '%d,%d,%d' % shape, kind, tile, tf, b[0], b[1]))
EOF
}

step_bench() {
  local files=()
  for round in 1 2; do
    for v in $variants; do
      local t=$(date +%s)
      timeout 150 build-ab-$v/bench_gemm --no-sweep >"$out/bench-$v-$round.jsonl" \
        2>"$out/bench-$v-$round.txt"
      echo "bench $v round $round: rc=$? ($(($(date +%s) - t)) s)"
      files+=("$out/bench-$v-$round.jsonl")
    done
  done
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
    --format=csv,noheader 2>/dev/null
  summary "${files[@]}"
  grep -h "FAIL" "$out"/bench-*.txt | head -n 10
}

step_test() {
  local rc=0
  for v in $variants; do
    BITRANK_TEST_DEVICE=cuda timeout 120 build-ab-$v/test_gemm >"$out/test-$v.log" 2>&1
    local r=$?
    echo "test_gemm $v: rc=$r $(grep -E "checks, " "$out/test-$v.log" | tail -n 1)"
    ((r != 0 && r != 77)) && rc=1
  done
  timeout 120 build-ab-fix/bench_gemm --sweep-only >"$out/sweep-fix.jsonl" 2>"$out/sweep-fix.txt"
  echo "bench_gemm --sweep-only fix: rc=$? $(grep sweep "$out/sweep-fix.jsonl")"
  local t=$(date +%s)
  BITRANK_TEST_DEVICE=cuda BITRANK_TEST_SMALL=1 timeout 300 compute-sanitizer --tool racecheck \
    --error-exitcode 99 build-ab-fix/test_gemm >"$out/racecheck-fix.log" 2>&1
  local r=$?
  echo "racecheck test_gemm (small) fix: rc=$r ($(($(date +%s) - t)) s)"
  grep -E "=========.*(Error|ERROR|hazard|RACECHECK SUMMARY)" "$out/racecheck-fix.log" | head -n 8
  ((r != 0)) && rc=1
  return $rc
}

case "${1:-}" in
  build) step_build ;;
  bench) step_bench ;;
  test) step_test ;;
  all) step_build && step_bench && step_test ;;
  *) echo "usage: $0 build|bench|test|all" >&2; exit 2 ;;
esac
