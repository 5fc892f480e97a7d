"""transformers' from_pretrained for bitrank's models: `quant_method: "bitrank"`.

After `import bitrank`, `AutoModelForCausalLM.from_pretrained(dir)` (or any
transformers model class) loads a directory written by bitrank.save_pretrained, as
bitrank.load does: the config's quantization_config names each compressed linear with
its rank and paths, the quantizer puts a BLRLinear of that shape in its place before the
weights load, and the file's tensors M.weight.blr.{u,v,h,l,g} (docs/FORMAT.md) load into
the BLRLinear's u, v, h, l, g. Every other tensor loads as transformers loads it.

This needs transformers' loader of weight transforms (transformers 5:
core_model_loading.WeightRenaming and HfQuantizer.get_weight_conversions; tested with
5.17 and 5.25); with an older transformers nothing is registered and bitrank.load is
the way in.
"""
import torch
from torch import nn

from .hf import _module_path, blr_tensors
from .torch import BLRLinear

QUANT_METHOD = "bitrank"
# the file's name of a BLRLinear tensor (docs/FORMAT.md) -> the module's
_FILE_KEY = r"\.weight\.blr\.([uvhlg])$"
_MODULE_KEY = r".\1"


def _supported():
    try:
        from transformers.core_model_loading import WeightRenaming  # noqa: F401
        from transformers.quantizers import HfQuantizer, register_quantizer  # noqa: F401
        from transformers.quantizers import register_quantization_config  # noqa: F401
    except ImportError:
        return False
    from transformers.quantizers import HfQuantizer
    return hasattr(HfQuantizer, "get_weight_conversions")


def _layers_of(config):
    """{module path: (rank, paths)} from a quantization config, checked."""
    layers = getattr(config, "layers", None)
    if not isinstance(layers, dict) or not layers:
        raise ValueError("quantization_config (bitrank): no compressed layers listed")
    out = {}
    for name, info in layers.items():
        try:
            rank, paths = int(info["rank"]), int(info["paths"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"quantization_config (bitrank): layer {name!r} needs an integer "
                             f"rank and paths, has {info!r}") from None
        if rank < 1 or paths not in (1, 2):
            raise ValueError(f"quantization_config (bitrank): layer {name!r}: rank {rank}, "
                             f"paths {paths}")
        out[name] = (rank, paths)
    return out


def _file_shapes(files):
    """{key: shape} of every BLRLinear tensor in the checkpoint's safetensors files
    (their headers only)."""
    from safetensors import safe_open
    shapes = {}
    for f in files or ():
        if str(f).endswith(".safetensors"):
            with safe_open(f, "pt") as fh:
                for k in fh.keys():
                    if ".weight.blr." in k:
                        shapes[k] = tuple(fh.get_slice(k).get_shape())
    return shapes


def _check_layer(shapes, name, m, n, rank, paths):
    """The checkpoint holds layer `name`'s five tensors in the shapes of an m x n layer of
    `rank` and `paths`: transformers' loader would fill a missing or misshapen one with
    fresh values and only warn."""
    for part, (shape, _) in blr_tensors(m, n, rank, paths).items():
        key = f"{name}.weight.blr.{part}"
        if key not in shapes:
            raise ValueError(f"bitrank: layer {name}: the checkpoint lacks its tensor {key}")
        if shapes[key] != shape:
            raise ValueError(f"bitrank: layer {name}: {key} is {shapes[key]} in the checkpoint; "
                             f"an {m}x{n} layer of rank {rank} with {paths} paths (the config) "
                             f"needs {shape}")


def _register():
    from transformers.core_model_loading import WeightRenaming
    from transformers.quantizers import HfQuantizer, register_quantization_config, register_quantizer
    from transformers.utils.quantization_config import QuantizationConfigMixin

    @register_quantization_config(QUANT_METHOD)
    class BitrankConfig(QuantizationConfigMixin):
        """config.json's quantization_config of a bitrank model (bitrank.hf writes it):
        `layers` {module path: {"rank", "paths"}}, and what compress_model and distill
        recorded (bpw, method, ...), kept as they are."""

        def __init__(self, layers=None, **kwargs):
            self.quant_method = QUANT_METHOD
            self.layers = layers or {}
            for k, v in kwargs.items():
                if k != "quant_method":
                    setattr(self, k, v)

        def to_dict(self):
            return dict(self.__dict__)

    @register_quantizer(QUANT_METHOD)
    class BitrankHfQuantizer(HfQuantizer):
        """Loads bitrank's compressed models (it does not compress: compress_model does)."""

        requires_calibration = True

        def _process_model_before_weight_loading(self, model, checkpoint_files=None, **kwargs):
            layers = _layers_of(self.quantization_config)
            shapes = _file_shapes(checkpoint_files) if checkpoint_files else None
            for saved, (rank, paths) in layers.items():
                # a task model's names carry the base model's prefix, a base model's do not
                name = _module_path(model, saved)
                lin = model.get_submodule(name) if name is not None else None
                if not isinstance(lin, nn.Linear):
                    raise ValueError(f"bitrank: the config lists layer {saved!r}, which is not an "
                                     f"nn.Linear of {type(model).__name__}")
                if shapes is not None:
                    _check_layer(shapes, saved, lin.out_features, lin.in_features, rank, paths)
                blr = BLRLinear(lin.in_features, lin.out_features, rank, paths,
                                bias=lin.bias is not None, device=lin.weight.device)
                parent, _, leaf = name.rpartition(".")
                setattr(model.get_submodule(parent) if parent else model, leaf, blr)

        def get_weight_conversions(self):
            # the transforms the loader applies to what the model's own conversions do
            # not match (its signature has held across transformers 5 releases where
            # update_weight_conversions' has not)
            return list(super().get_weight_conversions()) + [
                WeightRenaming(source_patterns=_FILE_KEY, target_patterns=_MODULE_KEY)]

        def _process_model_after_weight_loading(self, model, **kwargs):
            # the scales stay float32 whatever dtype the model loads in (as bitrank.load's
            # cast_except_blr)
            for mod in model.modules():
                if isinstance(mod, BLRLinear):
                    for part in ("h", "l", "g"):
                        p = getattr(mod, part)
                        if p.dtype != torch.float32:
                            p.data = p.data.float()
            return model

        def is_serializable(self, *args, **kwargs):
            return False

        @property
        def is_trainable(self):
            return True

    return BitrankConfig, BitrankHfQuantizer


REGISTERED = _supported() and _register() is not None
