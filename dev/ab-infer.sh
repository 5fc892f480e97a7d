#!/usr/bin/env bash
# A/B of the CUDA inference plan on the lent GPU in one device call: the working tree
# as carried ("head") and head + each named change, built for sm_90a
# (bench_infer_cuda and test_blr_infer_cuda only); each tree's test suite, then
# bench_infer_cuda of every tree, interleaved, in rounds (two unless --rounds).
#
# A change is a patch against the carried tree: dev/<name>.patch (kept in the repo:
# decode-timeline, the decode kernel's phases stamped per block and printed beside
# the table), or
# build-ab-in/<name>.patch (ignored by git, so the device call must carry it; write
# the patch to /tmp first, then copy it there). A "before" is the reverse of a change
# already in the tree: `git diff -R HEAD~1 -- src > /tmp/before.patch` (it may delete
# and create files; the changes after it still apply to the carried tree). A file may
# hold several patches one after another (a change with the timeline on top:
# `cat build-ab-in/x.patch dev/decode-timeline.patch > build-ab-in/x-tl.patch`).
# The tree is copied once to build-ab-src and built there in full; each change is
# then applied to that copy, built incrementally (what it touches and the links), and
# the files it touched copied back from the tree; its binaries kept in build-ab-bin/<name>: one full build, not one a tree.
# Device call (run tool), from the repository root:
#   bash dev/ab-infer.sh [--quick] [--rounds N] decode-timeline
# --quick passes to bench_infer_cuda (1 bpw only). Per tree and round, the timeline
# lines and the rows up to 64 tokens on stdout; bench_infer_cuda's whole tables, JSON
# lines and logs packed in $OUT/ab-infer.tgz (else build-ab-out).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
out=${OUT:-$root/build-ab-out}
mkdir -p "$out"
logs=$root/build-ab-logs
rm -rf "$logs" && mkdir -p "$logs"
export PATH="$PATH:/usr/local/cuda/bin"
bench_args=() rounds=2
while :; do
  case "${1:-}" in
    --quick) bench_args=(--quick); shift ;;
    --rounds) rounds=$2; shift 2 ;;
    *) break ;;
  esac
done
flags=(-DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DBITRANK_VULKAN=OFF -DBITRANK_NATIVE=OFF
  "-DBR_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a")
targets="bench_infer_cuda test_blr_infer_cuda"
t0=$(date +%s)
for name in "$@"; do
  pf=$root/dev/$name.patch
  [ -f "$pf" ] || pf=$root/build-ab-in/$name.patch
  [ -f "$pf" ] || { echo "ab-infer: no dev/$name.patch or build-ab-in/$name.patch"; exit 1; }
done
src=$root/build-ab-src
rm -rf "$src" build-ab build-ab-bin && mkdir -p "$src" build-ab-bin
tar --exclude='./build*' --exclude='./.git' --exclude='./.deps' --exclude='./.gl' -cf - . |
  tar -xf - -C "$src"
st=("${PIPESTATUS[@]}") # tar's 1: a file changed while read (a build beside this one)
[ "${st[0]}" -le 1 ] && [ "${st[1]}" = 0 ] || { echo "ab-infer: copying the tree failed"; exit 1; }
build() { # $1: the tree's name
  cmake --build build-ab -j"$(nproc)" --target $targets >"$logs/build-$1.log" 2>&1 &&
    mkdir -p "build-ab-bin/$1" && cp build-ab/bench_infer_cuda build-ab/test_blr_infer_cuda "build-ab-bin/$1/"
}
cmake -S "$src" -B build-ab "${flags[@]}" >"$logs/cmake.log" 2>&1 || { tail -n 20 "$logs/cmake.log"; exit 1; }
build head || { grep -E "error" "$logs/build-head.log" | head; echo "build head: FAILED"; exit 1; }
echo "build head: $(($(date +%s) - t0)) s"
trees=(head)
for name in "$@"; do
  pf=$root/dev/$name.patch
  [ -f "$pf" ] || pf=$root/build-ab-in/$name.patch
  (cd "$src" && patch -p1 --forward <"$pf") >"$logs/patch-$name.log" 2>&1 ||
    { cat "$logs/patch-$name.log"; echo "ab-infer: $name DOES NOT APPLY"; exit 1; }
  if build "$name"; then trees+=("$name"); else
    grep -E "error" "$logs/build-$name.log" | head; echo "build $name: FAILED"; fi
  # every file the patch names (--- for one it deletes, +++ for one it creates)
  for f in $(sed -n 's#^\(---\|+++\) [ab]/\([^[:space:]]*\).*#\2#p' "$pf" | sort -u); do
    if [ -f "$f" ]; then cp "$f" "$src/$f"; else rm -f "$src/$f"; fi # the carried tree's
  done
  echo "build $name: $(($(date +%s) - t0)) s"
done
for v in "${trees[@]}"; do
  BITRANK_TEST_DEVICE=cuda timeout 120 "build-ab-bin/$v/test_blr_infer_cuda" >"$logs/test-$v.log" 2>&1
  echo "test_blr_infer_cuda $v: rc=$? $(tail -n 1 "$logs/test-$v.log")"
done
for round in $(seq "$rounds"); do
  for v in "${trees[@]}"; do
    echo "== bench_infer_cuda $v, round $round"
    timeout 150 "build-ab-bin/$v/bench_infer_cuda" "${bench_args[@]}" >"$logs/bench-$v-$round.jsonl" 2>"$logs/bench-$v-$round.txt"
    echo "rc=$?"
    grep -E "^timeline|^[0-9]+x[0-9]+ +[0-9.]+ +[0-9]+ +(1|8|16|64) +f16 " "$logs/bench-$v-$round.txt" || tail -n 5 "$logs/bench-$v-$round.txt"
  done
done
tar -czf "$out/ab-infer.tgz" -C "$logs" .
echo "total: $(($(date +%s) - t0)) s"
