#!/usr/bin/env bash
# Device call for docs/wip/stage-wide (about 4 min): build head and head + patch
# (docs/wip/ab.sh), time the layer step three ways, the fused one's op profile, then
# the tests on the patched tree. Setup here:
#   mkdir -p build-ab-in && cp docs/wip/ab.sh docs/wip/stage-wide/*.patch docs/wip/stage-wide/run.sh build-ab-in/
# then the run tool with carry ["build-ab-in"]: bash build-ab-in/run.sh
cd "$(dirname "$0")/.." || exit 1
bash build-ab-in/ab.sh build stage-wide || exit 1
out=${OUT:-$PWD/build-ab-out}/stage-wide
step() { # label, binary, env...
  local label=$1 bin=$2
  shift 2
  env "$@" timeout 100 "$bin" >"$out/l.jsonl" 2>/dev/null
  echo "$label: $(python3 -c "
import json,sys
print(' '.join(str(json.loads(l)['median_ms']) for l in open(sys.argv[1])))" "$out/l.jsonl")"
}
for round in 1 2; do
  step "head            r$round" build-ab-head/bench_layer
  step "fix             r$round" build-ab-fix/bench_layer
  step "fix fused (pp)  r$round" build-ab-fix/bench_layer BITRANK_MM_STAGE=fused
done
BITRANK_MM_STAGE=fused timeout 100 build-ab-fix/bench_layer --profile >/dev/null 2>"$out/prof-fused.txt"
timeout 100 build-ab-head/bench_layer --profile >/dev/null 2>"$out/prof-head.txt"
for v in head fused; do echo "== profile $v"; grep -E " mm_stage | mm | cvt_both " "$out/prof-$v.txt"; done
bash build-ab-in/ab.sh test stage-wide
