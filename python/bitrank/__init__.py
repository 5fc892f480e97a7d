"""bitrank: binary low-rank compression of transformers models.

    import bitrank
    report = bitrank.compress_model(model, texts, tokenizer=tok, bpw=1.0)
    bitrank.distill(model, original, texts, tokenizer=tok)  # end to end
    bitrank.save_pretrained(model, "out")          # config.json + model.safetensors
    model = bitrank.load("out")                    # its linears are BLRLinear
    model = transformers.AutoModel.from_pretrained("out")  # the same, after import bitrank
    print(bitrank.pack_for_inference(model))       # plans only; bytes vs fp16

The C library (libbitrank.so, shipped in this package) runs the layers and the
per-layer compression; torch runs the rest of the model.
"""
import os as _os
import sys as _sys

# The library's OpenMP threads and torch's take turns on the same cores: threads that
# spin at a barrier after their work starve the other runtime's (a 2-core machine
# ran 15x slower). Passive waiting costs nothing here; it takes effect for every
# OpenMP runtime loaded after this line (set it before importing torch to cover
# torch's too).
TORCH_OPENMP_SPINS = "torch" in _sys.modules and "OMP_WAIT_POLICY" not in _os.environ
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from ._lib import BitrankError  # noqa: E402
from .compress import CompressReport, compress_linear, compress_model, find_blocks  # noqa: E402
from .distill import DistillReport, distill, sliced_kl  # noqa: E402
from .hf import load, save_pretrained  # noqa: E402
from .inference import (InferenceMemory, inference_memory, pack_for_inference,  # noqa: E402
                        unpack_for_training)
from .torch import BLRLinear, LibraryOptimizer  # noqa: E402
# transformers' from_pretrained learns quant_method "bitrank" (where transformers can)
from . import hf_quantizer  # noqa: E402,F401

__version__ = "0.1.0"
__all__ = ["BLRLinear", "BitrankError", "CompressReport", "DistillReport", "InferenceMemory",
           "LibraryOptimizer", "compress_linear", "compress_model", "distill", "find_blocks",
           "inference_memory", "load", "pack_for_inference", "save_pretrained", "sliced_kl",
           "unpack_for_training"]
