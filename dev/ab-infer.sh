#!/usr/bin/env bash
# A/B of the CUDA inference plan on the lent GPU in one device call: the working tree
# as carried ("head") and head + each named change, built side by side for sm_90a
# (bench_infer_cuda and test_blr_infer_cuda only); each tree's test suite, then
# bench_infer_cuda of every tree, interleaved, two rounds.
#
# A change is a patch against the carried tree: dev/<name>.patch (kept in the repo:
# decode-timeline, the decode kernel's phases stamped per block and printed beside
# the table), or
# build-ab-in/<name>.patch (ignored by git, so the device call must carry it; write
# the patch to /tmp first, then copy it there). A "before" is the reverse of a change
# already in the tree: `git diff -R HEAD~1 -- src > /tmp/before.patch`.
# Device call (run tool), from the repository root:
#   bash dev/ab-infer.sh --quick decode-timeline
# --quick passes to bench_infer_cuda (1 bpw only). One table per tree and round on
# stdout (bench_infer_cuda's stderr); JSON lines and logs in $OUT (else build-ab-out).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
out=${OUT:-$root/build-ab-out}
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
bench_args=()
[ "${1:-}" = --quick ] && { bench_args=(--quick); shift; }
flags=(-DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DBITRANK_NATIVE=OFF
  "-DBR_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a")
targets="bench_infer_cuda test_blr_infer_cuda"
t0=$(date +%s)
trees=(head)
for name in "$@"; do
  rm -rf "build-ab-src-$name" && mkdir -p "build-ab-src-$name"
  tar --exclude='./build*' --exclude='./.git' --exclude='./.deps' -cf - . |
    tar -xf - -C "build-ab-src-$name" || exit 1
  pf=$root/dev/$name.patch
  [ -f "$pf" ] || pf=$root/build-ab-in/$name.patch
  (cd "build-ab-src-$name" && patch -p1 --forward <"$pf") \
    >"$out/patch-$name.log" 2>&1 || { cat "$out/patch-$name.log"; echo "ab-infer: $name DOES NOT APPLY"; exit 1; }
  trees+=("$name")
done
jobs=$(( $(nproc) / ${#trees[@]} + 1 ))
for v in "${trees[@]}"; do
  src=.
  [ "$v" = head ] || src=build-ab-src-$v
  { cmake -S "$src" -B "build-ab-$v" "${flags[@]}" && cmake --build "build-ab-$v" -j"$jobs" --target $targets; } \
    >"$out/build-$v.log" 2>&1 &
done
wait
for v in "${trees[@]}"; do
  [ -x "build-ab-$v/bench_infer_cuda" ] || { echo "build $v: FAILED"; grep -E "error" "$out/build-$v.log" | head; exit 1; }
done
echo "build: $(($(date +%s) - t0)) s"
for v in "${trees[@]}"; do
  BITRANK_TEST_DEVICE=cuda timeout 120 "build-ab-$v/test_blr_infer_cuda" >"$out/test-$v.log" 2>&1
  echo "test_blr_infer_cuda $v: rc=$? $(tail -n 1 "$out/test-$v.log")"
done
for round in 1 2; do
  for v in "${trees[@]}"; do
    echo "== bench_infer_cuda $v, round $round"
    timeout 150 "build-ab-$v/bench_infer_cuda" "${bench_args[@]}" >"$out/bench-$v-$round.jsonl" 2>"$out/bench-$v-$round.txt"
    echo "rc=$?"
    cat "$out/bench-$v-$round.txt"
  done
done
echo "total: $(($(date +%s) - t0)) s"
