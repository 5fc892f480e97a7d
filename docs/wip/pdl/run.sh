#!/usr/bin/env bash
# Device call for docs/wip/pdl (about 4 min): build head and head + patch
# (docs/wip/ab.sh), time the layer step with PDL on and off in the patched build
# (BITRANK_PDL=0), then the tests on the patched tree. Setup here:
#   mkdir -p build-ab-in && cp docs/wip/ab.sh docs/wip/pdl/pdl.patch build-ab-in/ && cp docs/wip/pdl/run.sh build-ab-in/pdl-run.sh
# then the run tool with carry ["build-ab-in"]: bash build-ab-in/pdl-run.sh
cd "$(dirname "$0")/.." || exit 1
bash build-ab-in/ab.sh build pdl || exit 1
out=${OUT:-$PWD/build-ab-out}/pdl
step() { # label, binary, env...
  local label=$1 bin=$2
  shift 2
  env "$@" timeout 100 "$bin" >"$out/l.jsonl" 2>/dev/null
  echo "$label: $(python3 -c "
import json,sys
print(' '.join(str(json.loads(l)['median_ms']) for l in open(sys.argv[1])))" "$out/l.jsonl")"
}
for round in 1 2; do
  step "head          r$round" build-ab-head/bench_layer
  step "fix, PDL      r$round" build-ab-fix/bench_layer
  step "fix, PDL off  r$round" build-ab-fix/bench_layer BITRANK_PDL=0
done
bash build-ab-in/ab.sh test pdl
# the graph and the eager path once more with PDL off (the launch path alone)
BITRANK_PDL=0 BITRANK_TEST_DEVICE=cuda timeout 150 build-ab-fix/test_blr 2>&1 | tail -n 1
