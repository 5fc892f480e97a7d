"""Text for the MiniLM benchmarks: Debian's `fortunes`, calibration and held-out from
disjoint files. The code lives in the package as bitrank.text (python/bitrank/text.py,
same files, cleaning and seeds); this module is that module under its old name, so
`import minilm_text` and `minilm_text.FORTUNE_DIR = ...` keep working."""
import os
import sys

_PYTHON = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
if _PYTHON not in sys.path:
    sys.path.insert(0, _PYTHON)

from bitrank import text as _text  # noqa: E402

sys.modules[__name__] = _text
