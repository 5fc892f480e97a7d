#!/usr/bin/env bash
# The MiniLM end-to-end benchmark (bench/minilm_e2e.py) over variants of the CLI's
# options, on the device it is run on (for choosing defaults by measurement).
#   dev/minilm-sweep.sh [--methods M] [--model-dir D --fortunes F] [--bitrank B] \
#     'label=extra args' ...
# Each variant's JSON goes to $OUT (or /tmp/minilm-sweep), a table of all last.
# On the lent GPU (no network, 64 MiB carried with the tree) the model travels as
# f16 with its tokenizer, and the fortune files beside it, in .deps/gpu-carry/, packed
# as .deps/gpu-carry.tar.xz by dev/make-gpu-carry.sh (carry that file; the
# dev/gpu-round*.sh scripts unpack it)
# then: dev/minilm-sweep.sh --device cuda --bitrank build-gpu/bitrank \
#   --model-dir .deps/gpu-carry/minilm --fortunes .deps/gpu-carry/fortunes 'default='
# (dev/gpu-round.sh does that after its build, tests and benchmarks).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/minilm-sweep}
mkdir -p "$out"
py=${PYTHON:-python3}
common=()
while [[ $# -gt 0 && $1 == --* ]]; do common+=("$1" "$2"); shift 2; done
first=1
for v in "$@"; do
  label=${v%%=*} extra=${v#*=}
  methods=cli
  ((first)) && methods=original,init,svd,cli
  first=0
  $py bench/minilm_e2e.py "${common[@]}" --methods "$methods" --extra "$extra" \
    --work "$out/work" --json "$out/$label.json" >"$out/$label.txt" 2>&1
  echo "== $label ($extra): rc $?"
  grep -A8 '^method' "$out/$label.txt"
done
