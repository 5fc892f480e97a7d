"""Inference-only models: BLRLinear layers packed into their inference plans, and what
the weights then take in memory.

    report = bitrank.pack_for_inference(model)   # every BLRLinear: plan only
    print(report)                                # resident bytes vs fp16
    bitrank.unpack_for_training(model)           # back to trainable modules

After packing, the device holds one copy of each compressed layer's weights, the
library's inference plan (sign bitmaps and scales: about the model's bits per weight),
and nothing a training step needs (the library's layer state and scratch, gradients,
sign gradients). The modules' own u, v, h, l, g and bias move to host memory rather
than being dropped: they are the exact values save_pretrained writes and the plan is
rebuilt from when they change, and on the GPU they would double the weights' bytes
(the bitmaps u, v are the same bits as the plan's). A packed layer refuses any forward
that needs an autograd graph (it has no backward) with a message naming
unpack_for_training; model.to(device) keeps it packed and moves the plan.
"""
from dataclasses import dataclass, field

import torch

from . import _lib
from .torch import BLRLinear, _resolve


def _blr_modules(model):
    mods = [(name, mod) for name, mod in model.named_modules() if isinstance(mod, BLRLinear)]
    if not mods:
        raise ValueError(f"{type(model).__name__} has no BLRLinear layer (compress it first: "
                         "bitrank.compress_model, or load one with bitrank.load)")
    return mods


def _target_device(mods, device):
    if device is not None:
        return _resolve(device)
    where = {mod.packed or mod.h.device for _, mod in mods}
    if len(where) > 1:
        raise ValueError("the BLRLinear layers are on several devices "
                         f"({', '.join(sorted(map(str, where)))}): pass device=")
    return _resolve(where.pop())


def pack_for_inference(model, device=None):
    """Make every BLRLinear of `model` inference-only on `device` (default: the device
    its layers are on): each layer's inference plan is built there (the CUDA plan on
    a GPU, which the library must have: BitrankError otherwise, before any layer
    changes; the CPU plan on the CPU); the library's training layer state and scratch,
    gradients and sign gradients are freed; the layers' parameters and sign buffers
    move to host memory and stop requiring grad (BLRLinear.pack). The rest of the
    model stays where it is. On a GPU, torch's cached free blocks are returned to the
    driver afterwards, so the process's footprint shows the saving. Returns
    inference_memory(model)."""
    mods = _blr_modules(model)
    kind = torch.device(device).type if device is not None else \
        {(mod.packed or mod.h.device).type for _, mod in mods}.pop()
    if kind == "cuda" and not _lib.has_cuda_infer():
        raise _lib.BitrankError(
            "BR_E_UNSUPPORTED", f"{_lib.library_path()} has no CUDA inference plan "
            "(br_blr_infer_cuda_*): build the library from a tree that has it to pack for a GPU")
    device = _target_device(mods, device)
    for _, mod in mods:
        mod.pack(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
    return inference_memory(model)


def unpack_for_training(model, device=None):
    """Undo pack_for_inference: every packed BLRLinear's parameters back on `device`
    (default: its plan's device), requiring grad as they did before packing; the
    plans are freed (a training forward builds the library's layer state again)."""
    for _, mod in _blr_modules(model):
        mod.unpack(device)
    return model


@dataclass
class LayerMemory:
    name: str
    out_features: int
    in_features: int
    rank: int
    paths: int
    nbytes: int       # what the layer's weights take for inference (kind says how counted)
    fp16_bytes: int   # the same layer as a dense fp16 nn.Linear (weight and bias)
    kind: str         # packed: "cuda-plan" (the library's count) or "estimate" (from the
    #                   shape); not packed: "module" or "module+cuda-plan"


@dataclass
class InferenceMemory:
    """The bytes a model's weights take for inference next to the same model in fp16.

    linear_bytes: the BLRLinear layers. A packed layer counts its plan: a CUDA plan's
    device bytes as the library counts them (the scratch of the largest run so far
    included) plus its bias copies; a CPU plan (or a CUDA plan not built again yet
    after a move) the bitmaps and f32 scales a plan holds, from the layer's shape
    (`estimated` counts those). A layer not packed counts its own u, v, h, l, g and
    bias as held, and its CUDA plan when one is live; the library's training state
    is not counted (pack_for_inference frees it). linear_fp16_bytes:
    those layers as dense fp16 weights and biases. other_bytes: every other parameter
    and buffer of the model as it is held (embeddings, norms, layers left dense; a
    tied weight once), other_fp16_bytes the same in fp16 (floating tensors at 2
    bytes an element). host_bytes: the GPU-packed layers' own copies in host memory
    (not resident on the GPU; a CPU-packed layer counts them in linear_bytes)."""
    device: str
    layers: list = field(default_factory=list)
    linear_bytes: int = 0
    linear_fp16_bytes: int = 0
    other_bytes: int = 0
    other_fp16_bytes: int = 0
    host_bytes: int = 0
    packed: int = 0
    estimated: int = 0

    @property
    def total_bytes(self):
        return self.linear_bytes + self.other_bytes

    @property
    def total_fp16_bytes(self):
        return self.linear_fp16_bytes + self.other_fp16_bytes

    @property
    def linear_ratio(self):
        """fp16 bytes / resident bytes of the compressed layers (how many times smaller)."""
        return self.linear_fp16_bytes / self.linear_bytes if self.linear_bytes else 0.0

    @property
    def total_ratio(self):
        return self.total_fp16_bytes / self.total_bytes if self.total_bytes else 0.0

    def to_dict(self):
        return {"device": self.device, "linears": len(self.layers), "packed": self.packed,
                "estimated": self.estimated, "linear_bytes": self.linear_bytes,
                "linear_fp16_bytes": self.linear_fp16_bytes, "other_bytes": self.other_bytes,
                "other_fp16_bytes": self.other_fp16_bytes, "total_bytes": self.total_bytes,
                "total_fp16_bytes": self.total_fp16_bytes, "host_bytes": self.host_bytes,
                "linear_ratio": round(self.linear_ratio, 3),
                "total_ratio": round(self.total_ratio, 3),
                "layers": [vars(layer) for layer in self.layers]}

    def table(self):
        est = f", {self.estimated} estimated from their shapes" if self.estimated else ""
        rows = [f"weights for inference on {self.device} ({len(self.layers)} compressed "
                f"layers, {self.packed} packed{est}):",
                f"  {'':<18} {'resident':>11} {'fp16':>11} {'fp16/resident':>14}",
                f"  {'compressed layers':<18} {human_bytes(self.linear_bytes):>11} "
                f"{human_bytes(self.linear_fp16_bytes):>11} {self.linear_ratio:>13.2f}x",
                f"  {'everything else':<18} {human_bytes(self.other_bytes):>11} "
                f"{human_bytes(self.other_fp16_bytes):>11}",
                f"  {'model':<18} {human_bytes(self.total_bytes):>11} "
                f"{human_bytes(self.total_fp16_bytes):>11} {self.total_ratio:>13.2f}x"]
        if self.host_bytes:
            rows.append(f"  (the packed layers' parameters in host memory: "
                        f"{human_bytes(self.host_bytes)})")
        return "\n".join(rows)

    def __str__(self):
        return self.table()


def human_bytes(n):
    """1023 B, 12.3 KiB, 4.56 MiB, 1.23 GiB."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}" if n < 100 * size else f"{n / size:.0f} {unit}"
    return f"{n} B"


def _nbytes(t):
    return t.numel() * t.element_size()


def inference_memory(model):
    """An InferenceMemory of `model` as it is now (builds and frees nothing)."""
    mods = _blr_modules(model)
    devices = {str(mod.packed or mod.h.device) for _, mod in mods}
    rep = InferenceMemory(device=", ".join(sorted(devices)))
    blr_tensors = set()
    for name, mod in mods:
        own = [mod.u, mod.v] + list(mod.parameters(recurse=False))
        blr_tensors.update(t.data_ptr() for t in own)
        own_bytes = sum(_nbytes(t) for t in own)
        plan_bytes, kind = mod.plan_bytes()
        if mod.packed is not None:
            rep.packed += 1
            rep.estimated += kind == "estimate"
            if mod.packed.type == "cpu":  # the plan and the parameters share the memory
                nbytes = plan_bytes + own_bytes
            else:
                nbytes = plan_bytes
                rep.host_bytes += own_bytes
        elif kind == "cuda-plan":  # a module in use: its own tensors and its plan
            nbytes, kind = own_bytes + plan_bytes, "module+cuda-plan"
        else:
            nbytes, kind = own_bytes, "module"
        m, n = mod.out_features, mod.in_features
        fp16 = 2 * m * n + (2 * m if mod.bias is not None else 0)
        rep.layers.append(LayerMemory(name, m, n, mod.rank, mod.paths, nbytes, fp16, kind))
        rep.linear_bytes += nbytes
        rep.linear_fp16_bytes += fp16
    seen = set()
    for t in list(model.parameters()) + list(model.buffers()):
        ptr = t.data_ptr()
        if ptr in blr_tensors or (t.numel() and ptr in seen):
            continue
        seen.add(ptr)
        rep.other_bytes += _nbytes(t)
        rep.other_fp16_bytes += 2 * t.numel() if t.is_floating_point() else _nbytes(t)
    return rep


__all__ = ["pack_for_inference", "unpack_for_training", "inference_memory", "InferenceMemory",
           "LayerMemory"]
