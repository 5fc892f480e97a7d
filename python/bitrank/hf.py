"""Saving and loading compressed transformers models.

save_pretrained(model, dir) writes dir/config.json with a quantization_config
({"quant_method": "bitrank", ...}) and dir/model.safetensors in docs/FORMAT.md's BLR
layout: each BLRLinear at module path M as tensors M.weight.blr.{u,v,h,l,g} and the
metadata entry "M.weight.blr", every other tensor of the state dict as it is. That is
the layout `bitrank compress` writes, so load() reads both: a directory from
save_pretrained, or the CLI's output file beside the original model's config.json.
transformers' from_pretrained reads a save_pretrained directory too (hf_quantizer).
"""
import json
import os

import torch
from torch import nn

from . import layout
from .torch import BLRLinear, cast_except_blr

FORMAT = "bitrank-blr"
VERSION = "0.1.0"
WEIGHTS = "model.safetensors"


def _blr_modules(model):
    return [(name, mod) for name, mod in model.named_modules() if isinstance(mod, BLRLinear)]


def quantization_config(model, report=None):
    """The config.json entry describing the compressed layers."""
    layers = {name: {"rank": mod.rank, "paths": mod.paths} for name, mod in _blr_modules(model)}
    cfg = {"quant_method": "bitrank", "format": FORMAT, "format_version": 1,
           "bitrank_version": VERSION, "layers": layers,
           "paths": max([v["paths"] for v in layers.values()], default=0)}
    if report is not None:
        cfg["bpw"] = round(report.bpw, 6)
        cfg["bpw_target"] = report.options.get("bpw")
        cfg["method"] = "compress_model"
    return cfg


def blr_tensors(m, n, rank, paths):
    """The file's tensors of an m x n layer of `rank` and `paths` (docs/FORMAT.md):
    {part: (shape, dtype)}, stored as M.weight.blr.<part>."""
    rb = (rank + 7) // 8
    return {"u": ((paths, m, rb), torch.uint8), "v": ((paths, n, rb), torch.uint8),
            "h": ((paths, m), torch.float16), "l": ((paths, rank), torch.float16),
            "g": ((paths, n), torch.float16)}


def _check_f16(name, t):
    t = t.detach().float()
    if not torch.isfinite(t).all() or float(t.abs().max()) >= 65520:
        raise ValueError(f"{name}: a scale is not finite or beyond the f16 range")
    return t.half().contiguous()


def save_pretrained(model, out_dir, tokenizer=None):
    """Write the compressed model to out_dir (config.json, model.safetensors and the
    tokenizer's files when given)."""
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    blr = _blr_modules(model)
    tensors, meta = {}, {"format": FORMAT, "format_version": "1", "writer": f"bitrank {VERSION}"}
    blr_keys = set()
    for name, mod in blr:
        base = f"{name}.weight"
        tensors[f"{base}.blr.u"] = mod.u.detach().cpu().contiguous()
        tensors[f"{base}.blr.v"] = mod.v.detach().cpu().contiguous()
        for part in "hlg":
            tensors[f"{base}.blr.{part}"] = _check_f16(f"{base}.blr.{part}",
                                                       getattr(mod, part).cpu())
        meta[f"{base}.blr"] = json.dumps({"paths": mod.paths, "rank": mod.rank,
                                          "out_features": mod.out_features,
                                          "in_features": mod.in_features,
                                          "bpw": round(mod.bits_per_weight(), 6)})
        for part in ("u", "v", "h", "l", "g"):
            blr_keys.add(f"{name}.{part}")
    seen = {}
    for key, t in model.state_dict().items():
        if key in blr_keys:
            continue
        t = t.detach().cpu()
        ptr = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if t.numel() and ptr in seen:  # a tied weight: stored once, tied again on load
            continue
        seen[ptr] = key
        tensors[key] = t.contiguous()
    save_file(tensors, os.path.join(out_dir, WEIGHTS), metadata=meta)
    cfg = model.config
    cfg.architectures = [type(model).__name__]
    qc = quantization_config(model)
    old = getattr(cfg, "quantization_config", None)
    if hasattr(old, "to_dict"):  # a model from transformers' from_pretrained (hf_quantizer)
        old = old.to_dict()
    if isinstance(old, dict) and old.get("quant_method") == "bitrank":
        # what compress_model and distill recorded (bpw, method, distill) stays; the
        # layers are described anew from the modules
        qc = {**{k: v for k, v in old.items() if k not in qc}, **qc}
    cfg.quantization_config = qc
    cfg.save_pretrained(out_dir)
    if tokenizer is not None:
        tokenizer.save_pretrained(out_dir)


def _find_weights(path):
    if os.path.isdir(path):
        f = os.path.join(path, WEIGHTS)
        if not os.path.isfile(f):
            raise FileNotFoundError(f"{path}: no {WEIGHTS} in the directory")
        return path, f
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file or directory")
    return os.path.dirname(os.path.abspath(path)), path


def _model_class(config):
    import transformers
    archs = getattr(config, "architectures", None) or []
    for a in archs:
        cls = getattr(transformers, a, None)
        if cls is not None:
            return cls
    return None


def _module_path(model, name):
    """The module path in `model` of a file's layer name (checkpoints of a task model
    carry the base model's prefix, e.g. "bert.", that a base model lacks)."""
    names = dict(model.named_modules())
    if name in names:
        return name
    prefix = getattr(model, "base_model_prefix", "")
    if prefix and name.startswith(prefix + ".") and name[len(prefix) + 1:] in names:
        return name[len(prefix) + 1:]
    if prefix and f"{prefix}.{name}" in names:
        return f"{prefix}.{name}"
    return None


def load_rest(model, tensors, where):
    """Load every tensor that is not a BLRLinear's into `model` (whose compressed
    linears are BLRLinear already): a tensor the model lacks, or a model tensor the
    file lacks (other than tied weights and non-persistent position ids), is an
    error naming it."""
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if unexpected:
        raise ValueError(f"{where}: tensors the model does not have: {', '.join(unexpected[:5])}")
    blr_names = {f"{n}.{p}" for n, _ in _blr_modules(model)
                 for p in ("u", "v", "h", "l", "g", "bias")}
    missing = [k for k in missing if k not in blr_names and not k.endswith("position_ids")]
    if missing:
        try:
            model.tie_weights()
        except Exception:
            pass
        tied = set(getattr(model, "_tied_weights_keys", None) or [])
        missing = [k for k in missing if k not in tied]
    if missing:
        raise ValueError(f"{where}: tensors missing from the file: {', '.join(missing[:5])}"
                         + (" …" if len(missing) > 5 else ""))


def load(path, device="cpu", config=None, dtype=None):
    """A model from a directory written by save_pretrained, or from the CLI's output
    (a file, or a directory holding it as model.safetensors) beside the original
    model's config.json (or `config`, a transformers config or its directory).
    Compressed linears become BLRLinear; every other tensor must be in the file."""
    from safetensors import safe_open
    import transformers
    model_dir, weights = _find_weights(path)
    if config is None:
        if not os.path.isfile(os.path.join(model_dir, "config.json")):
            raise FileNotFoundError(f"{model_dir}: no config.json (pass config=...)")
        config = transformers.AutoConfig.from_pretrained(model_dir)
    elif isinstance(config, str):
        config = transformers.AutoConfig.from_pretrained(config)
    with safe_open(weights, "pt") as f:
        meta = f.metadata() or {}
        if meta.get("format") != FORMAT:
            raise ValueError(f"{weights}: not a bitrank file (metadata format is "
                             f"{meta.get('format')!r}, not {FORMAT!r})")
        if meta.get("format_version") != "1":
            raise ValueError(f"{weights}: format_version {meta.get('format_version')!r} "
                             "is not 1")
        keys = set(f.keys())
        layers = {}
        for k, v in meta.items():
            if not k.endswith(".blr") or k in ("bitrank.blr",):
                continue
            base = k[:-4]
            try:
                info = json.loads(v)
                P, r = int(info["paths"]), int(info["rank"])
                m, n = int(info["out_features"]), int(info["in_features"])
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{weights}: metadata {k!r} is malformed ({e})") from None
            want = blr_tensors(m, n, r, P)
            t = {}
            for part, (shape, dt) in want.items():
                key = f"{base}.blr.{part}"
                if key not in keys:
                    raise ValueError(f"{weights}: layer {base}: tensor {key} is missing")
                x = f.get_tensor(key)
                if tuple(x.shape) != shape or x.dtype != dt:
                    raise ValueError(f"{weights}: {key} is {x.dtype} {tuple(x.shape)}, expected "
                                     f"{dt} {shape}")
                t[part] = x
                keys.discard(key)
            t["rank"] = r
            for part in "hlg":
                t[part] = t[part].float()
            layers[base] = t
        if not layers:
            raise ValueError(f"{weights}: no compressed layer in the file")
        rest = {k: f.get_tensor(k) for k in keys}
    qc = getattr(config, "quantization_config", None)
    if qc is not None:
        del config.quantization_config
    cls = _model_class(config)
    model = cls(config) if cls is not None else transformers.AutoModel.from_config(config)
    cls = type(model)
    if qc is not None:
        config.quantization_config = qc
    model.eval()
    for base, t in layers.items():
        mod_name = base[:-len(".weight")] if base.endswith(".weight") else base
        path_in = _module_path(model, mod_name)
        if path_in is None:
            raise ValueError(f"{weights}: layer {base}: the model ({cls.__name__}) has no "
                             f"module {mod_name}")
        lin = model.get_submodule(path_in)
        if not isinstance(lin, nn.Linear) or lin.weight.shape != (t["u"].shape[1],
                                                                  t["v"].shape[1]):
            raise ValueError(f"{weights}: layer {base}: module {path_in} is not an nn.Linear "
                             f"of shape {t['u'].shape[1]}x{t['v'].shape[1]}")
        bias_key = f"{mod_name}.bias"
        bias = rest.pop(bias_key, None)
        if lin.bias is not None and bias is None:
            raise ValueError(f"{weights}: layer {base}: its bias {bias_key} is missing")
        parent, _, leaf = path_in.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf,
                BLRLinear.from_layer(t, bias=bias))
    # the rest: names as the model's, or with / without the base model's prefix
    sd_keys = set(model.state_dict().keys())
    fixed = {}
    prefix = getattr(model, "base_model_prefix", "")
    for k, v in rest.items():
        if k in sd_keys:
            fixed[k] = v
        elif prefix and k.startswith(prefix + ".") and k[len(prefix) + 1:] in sd_keys:
            fixed[k[len(prefix) + 1:]] = v
        elif prefix and f"{prefix}.{k}" in sd_keys:
            fixed[f"{prefix}.{k}"] = v
        else:
            raise ValueError(f"{weights}: tensor {k} matches nothing in {cls.__name__}")
    load_rest(model, fixed, weights)
    if dtype is not None:
        cast_except_blr(model, dtype)
    return model.to(device)


__all__ = ["save_pretrained", "load", "quantization_config", "layout"]
