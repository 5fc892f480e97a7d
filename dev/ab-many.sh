#!/usr/bin/env bash
# A/B of the BLR layer training step on the lent GPU, several changes in one device
# call: the working tree as carried ("head") and head + each named change, built side
# by side for sm_90a; the step (bench_layer, all three shapes) of each, interleaved,
# two rounds, with the env variants named for it; then every CUDA test suite on head
# and on each changed tree, the trees in parallel. About 7 minutes for three changes.
#
# The changes go in build-ab-in/ (ignored by git, so the device call must carry it):
#   <name>.patch     a patch against the carried tree (write it to /tmp, then copy:
#                    `git diff > tracked-file` puts the truncated file in the patch)
#   <name>.tar       instead, a whole tree (`git archive <commit> -o build-ab-in/<name>.tar`):
#                    the A/B against a change too large to revert as a patch
#   <name>.variants  optional, one variant per line: `VAR=value ... --bench_layer-option ...`
#   head.variants    the same for head
# Device call (run tool, carry ["build-ab-in"]), from the repository root:
#   bash dev/ab-many.sh <name> ...        (no names: head and its variants alone)
# AB_NO_TESTS=1: timings only. One line per timed tree/variant: the median ms at
# shapes 1 / 2 / 3; logs in $OUT (else build-ab-out). The device copies the working
# tree when the call starts: edit nothing it carries until the call is under way.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
out=${OUT:-$root/build-ab-out}
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
targets="test_reduce test_sign test_optim test_optim_ops test_cross_backend test_layer_ops test_blr test_gemm bench_layer"
tests="test_reduce test_sign test_optim test_optim_ops test_cross_backend test_layer_ops test_blr test_gemm"
flags=(-DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DBITRANK_NATIVE=OFF
  "-DBR_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a")
t0=$(date +%s)

# ---- build: head and one tree per patch, in parallel
ok=()
cmake -S . -B build-ab-head "${flags[@]}" >"$out/build-head.log" 2>&1 || { tail "$out/build-head.log"; exit 1; }
for p in "$@"; do
  rm -rf "build-ab-src-$p" && mkdir -p "build-ab-src-$p"
  if [ -f "$root/build-ab-in/$p.tar" ]; then # a whole tree (git archive), e.g. the commit before a change
    tar -xf "$root/build-ab-in/$p.tar" -C "build-ab-src-$p" >"$out/patch-$p.log" 2>&1
  else
    tar --exclude='./build*' --exclude='./.git' -cf - . | tar -xf - -C "build-ab-src-$p"
    (cd "build-ab-src-$p" && patch -p1 --forward <"$root/build-ab-in/$p.patch") >"$out/patch-$p.log" 2>&1
  fi
  if [ $? -eq 0 ] &&
    cmake -S "build-ab-src-$p" -B "build-ab-$p" "${flags[@]}" >"$out/build-$p.log" 2>&1; then
    ok+=("$p")
  else
    echo "$p: PATCH DOES NOT APPLY or configure failed"; tail -n 5 "$out/patch-$p.log"
  fi
done
jobs=$(($(nproc) / (${#ok[@]} + 1) + 1))
cmake --build build-ab-head -j"$jobs" --target $targets >>"$out/build-head.log" 2>&1 &
for p in "${ok[@]}"; do
  cmake --build "build-ab-$p" -j"$jobs" --target $targets >>"$out/build-$p.log" 2>&1 &
done
wait
built=()
for v in head "${ok[@]}"; do
  if [ -x "build-ab-$v/bench_layer" ] && [ -x "build-ab-$v/test_gemm" ]; then
    [ "$v" = head ] || built+=("$v")
  else
    echo "build $v: FAILED"; grep -E "error" "$out/build-$v.log" | head -n 5
  fi
done
echo "builds: $(($(date +%s) - t0)) s"

# ---- layer step, interleaved
layer() { # label, binary, env assignments and bench_layer arguments (--...)...
  local label=$1 bin=$2 w vars=() args=()
  shift 2
  for w in "$@"; do # a word after an option that is no assignment is that option's value
    if [[ $w == --* ]] || { [[ $w != *=* ]] && ((${#args[@]})); }; then args+=("$w"); else vars+=("$w"); fi
  done
  env "${vars[@]}" timeout 100 "$bin" "${args[@]}" >"$out/l.jsonl" 2>"$out/l.err"
  local rc=$?
  printf '%-44s %s\n' "$label" "$(python3 -c "
import json,sys
print(' '.join(str(json.loads(l)['median_ms']) for l in open(sys.argv[1])))" "$out/l.jsonl" 2>/dev/null)"
  ((rc)) && echo "    rc=$rc: $(tail -n 1 "$out/l.err")"
  return 0
}
for round in 1 2; do
  layer "head r$round" build-ab-head/bench_layer
  [ -f build-ab-in/head.variants ] && while read -r vars; do
    [ -n "$vars" ] && layer "head [$vars] r$round" build-ab-head/bench_layer $vars
  done <build-ab-in/head.variants
  for p in "${built[@]}"; do
    layer "$p r$round" "build-ab-$p/bench_layer"
    [ -f "build-ab-in/$p.variants" ] && while read -r vars; do
      [ -n "$vars" ] && layer "$p [$vars] r$round" "build-ab-$p/bench_layer" $vars
    done <"build-ab-in/$p.variants"
  done
done
echo "benches: $(($(date +%s) - t0)) s"

# ---- tests of head and each patched tree (trees in parallel, suites in order);
# AB_NO_TESTS=1: timings only
[ -n "${AB_NO_TESTS:-}" ] && { echo "total: $(($(date +%s) - t0)) s"; exit 0; }
for p in head "${built[@]}"; do
  (
    for t in $tests; do
      BITRANK_TEST_DEVICE=cuda timeout 200 "build-ab-$p/$t" >"$out/$p-$t.log" 2>&1
      r=$?
      echo "$p $t: rc=$r $(tail -n 1 "$out/$p-$t.log")"
      ((r != 0 && r != 77)) && grep -m 4 -E "^seed|FAIL" "$out/$p-$t.log"
    done
  ) >"$out/tests-$p.txt" &
done
wait
cat "$out"/tests-*.txt
echo "total: $(($(date +%s) - t0)) s"
