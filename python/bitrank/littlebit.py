"""Import and export checkpoints of SamsungLabs/LittleBit (NeurIPS 2025, "LittleBit:
Ultra Low-Bit Quantization via Latent Factorization").

Everything below was read from the reference implementation, github.com/SamsungLabs/LittleBit
at commit 7f872f1 ("feat: sync core quantization logic with internal version"); paths are
relative to that repository. No code of theirs is copied here.

What a LittleBit linear is
--------------------------
``quantization/modules/littlebit.py`` (class ``LittleBitLinear``) replaces an ``nn.Linear``
with out_features = m, in_features = n, rank ``split_dim`` = r, by the parameters
(``_initialize_empty_parameters``)::

    U  [m][r]    V  [r][n]          latent factors, binarized in the forward
    u1 [1][m]    u2 [1][r]          scales on the U side
    v1 [1][r]    v2 [1][n]          scales on the V side

and, when ``residual`` is on, a second set with the suffix ``_R`` (``U_R``, ``V_R``, ``u1_R``,
``u2_R``, ``v1_R``, ``v2_R``) of the same shapes. ``_compute_forward`` is::

    y = ((((x * v2) @ sign(V).T) * (v1 * u2)) @ sign(U).T) * u1     (+ the _R path) + bias

with ``sign`` from ``quantization/functions/binary.py`` (``STEBinary`` / ``SmoothSign``: the
forward of both is ``x.sign()`` with 0 -> +1). So the dense weight of one path is::

    W = diag(u1) . sign(U) . diag(v1 * u2) . sign(V) . diag(v2)

and in the BLR layout of docs/FORMAT.md (path 0 = the main path, path 1 = the ``_R`` path)::

    h_p = u1[0]     S_U,p = sign(U)      l_p = v1[0] * u2[0]     S_V,p = sign(V).T     g_p = v2[0]

``U`` is already our orientation (row i = output i, along the rank); ``V`` is stored
transposed relative to our ``S_V`` (row k = latent k, along the inputs), so its bits are
repacked through a transpose. ``u2`` and ``v1`` both live on the rank axis and only their
product matters; we cannot keep them apart, so import multiplies them and export writes
``u2 = l``, ``v1 = 1``.

What a saved checkpoint holds
-----------------------------
``LittleBitLinear.state_dict`` drops ``U``, ``V``, ``U_R``, ``V_R`` and puts in their place
(``pack_weights``), for each of them::

    NAME.U_packed  int32 [m][ceil(r/32)]      NAME.U_shape  int64 [2] = (m, r)
    NAME.V_packed  int32 [r][ceil(n/32)]      NAME.V_shape  int64 [2] = (r, n)
    (NAME.U_R_packed, NAME.U_R_shape, NAME.V_R_packed, NAME.V_R_shape when residual)

next to the plain parameters ``NAME.u1 .u2 .v1 .v2`` (and ``_R``), ``NAME.bias`` when the
linear had one, and three scalar buffers from ``__quant_convert__``: ``NAME._eff_bit_target``
(-1.0 for none), ``NAME._split_dim_final`` (int64, r), ``NAME._eff_bit_actual``. NAME is the
module path, e.g. ``model.layers.0.self_attn.q_proj`` (for Phi-3 the fused ``qkv_proj`` is
first split into ``q_proj``/``k_proj``/``v_proj``, ``quantization/modules/attention.py``).

The sign bits (``quantization/utils/binary_packer.py``, ``binary_packer``): each row of the
±1 matrix is padded with +1 to a multiple of 32 and packed "lsb_first": sign k of a row is
bit ``k % 32`` (least significant first) of int32 word ``k // 32`` of that row, **bit 1 = -1,
bit 0 = +1** (the opposite of ours), padding bits 0; a word with bit 31 set is a negative
int32. Rows are the first axis of the matrix as stored: ``U`` is packed along the rank,
``V`` along the inputs. (Their ``binary_unpacker`` in the same file shifts left,
``(word << k) & 1``, so it recovers only bit 0 of each word and reads every other sign as
+1; it is a bug of theirs, the packer is right, and this module decodes the bits as the
packer wrote them.)

Training (``main.py``, ``save_artifacts``) casts every float32 tensor whose name has neither
"packed" nor "shape" to bfloat16, so trained checkpoints hold **bf16 scales** (and bias and
float buffers), and saves with ``save_pretrained(..., safe_serialization=True)``:
``model.safetensors``, or shards listed in ``model.safetensors.index.json``, plus
``config.json`` (the base model's, with the quantization keys added) and
``littlebit_config.json``::

    {"quant_func": "STEBinary"|"SmoothSign", "eff_bit": float|null, "split_dim": int,
     "residual": bool, "kv_factor": float, "min_split_dim": int, "quant_mod": "LittleBitLinear"}

``quantization/hub.py`` (``LittleBitModel._save_pretrained``) writes the same json and
``model.safetensors`` (``model_state.pt`` when safetensors is missing). Older checkpoints
("legacy") hold the latent ``NAME.U``/``NAME.V`` as dense floats instead of packed bits.

How their loader rebuilds a model
---------------------------------
``quantization/utils/quant_util.py``: ``load_quantized_model`` builds the HF model from
``config.json`` on the meta device, then ``apply_littlebit_patch`` turns **every**
``nn.Linear`` whose name does not contain "lm_head" into a ``LittleBitLinear`` with one
global ``residual`` flag; each one's rank is ``__quant_convert__``'s split_dim: from
``eff_bit`` (the bit-budget formula of ``_estimate_split_dim``, times ``kv_factor`` for
``k_proj``/``v_proj``) or, with ``eff_bit`` null, from ``split_dim``; then rounded down to a
multiple of 8 (0 -> ``min_split_dim``) and raised to at least ``min_split_dim``
(``_finalize_split_dim``). ``_load_and_process_state_dict`` reads
``model.safetensors.index.json`` shards, else ``model.safetensors``, else
``pytorch_model.bin``; if any key ends in ``_packed`` it unpacks every ``X_packed``/
``X_shape`` pair to ``NAME.X`` and marks the modules binarized (signs used as stored, scales
in their stored dtype); otherwise (legacy) it casts all parameters to the run dtype and
binarizes ``U``/``V`` with ``sign`` in each forward. ``load_state_dict(strict=False,
assign=True)`` then requires each file shape to equal the module's; a missing tensor stays
zero, a tensor the module lacks (e.g. ``_R`` tensors with ``residual`` false) is ignored.
Parameter precedence (``hub.py``): CLI arguments, then ``littlebit_config.json``, then
``config.json`` for keys still at their default.

Mapping rules of this module
----------------------------
Import (``read_littlebit``): signs are exact; ``h = float32(u1)``, ``g = float32(v2)`` exactly
(bf16/f16/f32 all widen exactly); ``l = float32(float64(v1) * float64(u2))``: the float64
product is exact, and rounding it to float32 is exact when both are bf16 or f16 (at most
8+8 or 11+11 significant bits) short of float32 underflow; for float32 factors it is one
rounding (2^-24 relative), which ``exact_scales=True`` turns into a ValueError. Legacy
dense ``U``/``V`` are binarized as LittleBit does (0 -> +1). Non-finite scales are refused.

Export (``write_littlebit``): ``u1 = h``, ``u2 = l``, ``v1 = 1``, ``v2 = g`` cast to ``dtype``
(default bfloat16, as training saves, and what their packed-mode loader needs on GPU, where
activations are bf16 and scales are not cast; round to nearest even, or ValueError with
``lossless=True`` when a value would change; float16/float32 may be asked for). Their
loader gives every linear one rank and one residual flag, so layers are padded to the
largest rank R with components of ``l = 0`` (signs +1) and, when any layer has two paths,
one-path layers get an all-zero ``_R`` path: Ŵ is unchanged. ``littlebit_config.json`` gets
``eff_bit: null, split_dim: R, min_split_dim: R, kv_factor: 1.0, residual`` (which give
split_dim R for every linear) and a ``"bitrank"`` entry with each layer's true rank and
paths (ignored by their loader: ``LittleBitConfig.from_dict`` keeps known keys only);
import trims the padding back when it is still exactly zero, so ours -> LittleBit -> ours
is the identity on bits and on scales representable in ``dtype``.

Not representable / not reproduced: paths of different ranks within a layer (LittleBit
cannot make them either); a checkpoint whose config says ``residual`` false but which holds
``_R`` tensors (their loader would ignore them: ValueError); a model whose ``nn.Linear``
modules are not all in ``layers`` (their loader quantizes every one but ``lm_head``; a layer
named with "lm_head" is refused on export); ``u2``/``v1`` as separate factors (only the
product survives import). With ``packed=True`` (their format) their current loader
misreads the signs because of the unpacker bug above; ``packed=False`` writes the legacy
dense ±1 ``U``/``V``, which their loader does reconstruct exactly (at 16 bits per sign).
"""
from __future__ import annotations

import json
import os
import warnings

import torch

__all__ = ["pack_signs", "unpack_signs", "reconstruct", "read_littlebit", "write_littlebit",
           "CONFIG_NAME", "WEIGHTS_NAME"]

CONFIG_NAME = "littlebit_config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
MODEL_CONFIG_NAME = "config.json"

_SCALE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_MAX_DIM = 1 << 31
# the latent tensors of one path, by path suffix
_PATH_SUFFIX = ("", "_R")
_SCALES = ("u1", "u2", "v1", "v2")
_BUFFERS = ("_eff_bit_target", "_split_dim_final", "_eff_bit_actual")
# keys of littlebit_config.json that decide each linear's shape in their loader
_STRUCTURAL = ("eff_bit", "split_dim", "min_split_dim", "residual", "kv_factor")


# --------------------------------------------------------------------------- bits

def _bits_to_bytes(b):
    """bool [..., k] -> uint8 [..., ceil(k/8)]: bit j%8 (LSB first) of byte j//8 = b[..., j]."""
    k = b.shape[-1]
    nb = (k + 7) // 8
    x = b.to(torch.uint8)
    if nb * 8 != k:
        x = torch.nn.functional.pad(x, (0, nb * 8 - k))
    x = x.reshape(*b.shape[:-1], nb, 8)
    w = torch.tensor([1 << i for i in range(8)], dtype=torch.int32)
    return (x.to(torch.int32) * w).sum(-1).to(torch.uint8)


def _bytes_to_bits(x, k):
    """uint8 [..., nb] -> bool [..., k], the inverse of _bits_to_bytes (bits past k dropped)."""
    sh = torch.arange(8, dtype=torch.uint8)
    b = (x.unsqueeze(-1) >> sh) & 1
    return b.reshape(*x.shape[:-1], x.shape[-1] * 8)[..., :k].to(torch.bool)


def _words_to_bytes(w):
    """int32 [..., W] -> uint8 [..., 4W]: the little-endian bytes of each word (bits 0..31)."""
    w64 = w.to(torch.int64) & 0xFFFFFFFF
    parts = [((w64 >> (8 * i)) & 0xFF).to(torch.uint8) for i in range(4)]
    return torch.stack(parts, dim=-1).reshape(*w.shape[:-1], w.shape[-1] * 4)


def _bytes_to_words(x):
    """uint8 [..., 4W] -> int32 [..., W], the inverse of _words_to_bytes (two's complement)."""
    x = x.reshape(*x.shape[:-1], x.shape[-1] // 4, 4).to(torch.int64)
    v = x[..., 0] | (x[..., 1] << 8) | (x[..., 2] << 16) | (x[..., 3] << 24)
    v = torch.where(v >= (1 << 31), v - (1 << 32), v)
    return v.to(torch.int32)


def _lb_pack(minus):
    """bool [rows][cols] (True where the sign is -1) -> LittleBit's int32 [rows][ceil(cols/32)]."""
    rows, cols = minus.shape
    nw = (cols + 31) // 32
    x = _bits_to_bytes(minus)
    if x.shape[-1] != 4 * nw:
        x = torch.nn.functional.pad(x, (0, 4 * nw - x.shape[-1]))
    return _bytes_to_words(x)


def _lb_unpack(words, cols):
    """LittleBit's int32 [rows][W] -> bool [rows][cols], True where the sign is -1."""
    return _bytes_to_bits(_words_to_bytes(words), cols)


def pack_signs(s):
    """±1 values [..., r] -> uint8 [..., ceil(r/8)] in the BLR layout of docs/FORMAT.md:
    sign k is bit k%8 (LSB first) of byte k//8, bit 1 = +1, bit 0 = -1, padding bits 0.
    Any value other than +1 or -1 is a ValueError."""
    if not isinstance(s, torch.Tensor) or s.dim() < 1:
        raise ValueError("pack_signs: expected a tensor of at least one dimension")
    if s.dtype == torch.bool or not bool(((s == 1) | (s == -1)).all()):
        raise ValueError("pack_signs: values must be exactly +1 or -1")
    return _bits_to_bytes(s > 0)


def unpack_signs(bits, r):
    """uint8 [..., ceil(r/8)] in the BLR layout -> float32 ±1 [..., r] (padding bits ignored)."""
    r = _as_int(r, "unpack_signs: r")
    if not isinstance(bits, torch.Tensor) or bits.dtype != torch.uint8 or bits.dim() < 1:
        raise ValueError("unpack_signs: expected a uint8 tensor")
    if r < 1 or bits.shape[-1] != (r + 7) // 8:
        raise ValueError(f"unpack_signs: last dimension {bits.shape[-1]} is not ceil({r}/8)")
    return _bytes_to_bits(bits, r).to(torch.float32) * 2 - 1


# --------------------------------------------------------------------------- our dicts

def _as_int(x, what):
    if isinstance(x, bool) or not isinstance(x, int):
        if isinstance(x, torch.Tensor) and x.dim() == 0 and not x.is_floating_point() \
                and x.dtype != torch.bool:
            return int(x)
        raise ValueError(f"{what} must be an integer, got {x!r}")
    return x


def _check_layer(name, d):
    """Validate one layer dict of ours; return (P, m, n, r)."""
    if not isinstance(d, dict):
        raise ValueError(f"layer {name!r}: expected a dict")
    for k in ("u", "v", "h", "l", "g", "rank"):
        if k not in d:
            raise ValueError(f"layer {name!r}: missing {k!r}")
    r = _as_int(d["rank"], f"layer {name!r}: rank")
    if not 1 <= r <= _MAX_DIM:
        raise ValueError(f"layer {name!r}: rank {r} out of range")
    rb = (r + 7) // 8
    u, v = d["u"], d["v"]
    for k, t in (("u", u), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8 or t.dim() != 3:
            raise ValueError(f"layer {name!r}: {k!r} must be a uint8 tensor [P][rows][{rb}]")
    P, m = u.shape[0], u.shape[1]
    n = v.shape[1]
    if P not in (1, 2) or m < 1 or n < 1:
        raise ValueError(f"layer {name!r}: 'u' shape {tuple(u.shape)}: P must be 1 or 2, m >= 1")
    if tuple(u.shape) != (P, m, rb):
        raise ValueError(f"layer {name!r}: 'u' shape {tuple(u.shape)}, expected {(P, m, rb)}")
    if tuple(v.shape) != (P, n, rb):
        raise ValueError(f"layer {name!r}: 'v' shape {tuple(v.shape)}, expected {(P, n, rb)}")
    for k, want in (("h", (P, m)), ("l", (P, r)), ("g", (P, n))):
        t = d[k]
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise ValueError(f"layer {name!r}: {k!r} must be a floating point tensor")
        if tuple(t.shape) != want:
            raise ValueError(f"layer {name!r}: {k!r} shape {tuple(t.shape)}, expected {want}")
    b = d.get("bias")
    if b is not None:
        if not isinstance(b, torch.Tensor) or not b.is_floating_point() \
                or tuple(b.shape) != (m,):
            raise ValueError(f"layer {name!r}: 'bias' must be a floating point tensor [{m}]")
    return P, m, n, r


def reconstruct(layer):
    """Ŵ [m][n] of one layer dict, float64:
    sum_p diag(h_p) . S_U,p . diag(l_p) . S_V,p^T . diag(g_p) (the bias is not included)."""
    P, m, n, r = _check_layer("<reconstruct>", layer)
    w = torch.zeros(m, n, dtype=torch.float64)
    for p in range(P):
        su = unpack_signs(layer["u"][p], r).to(torch.float64)
        sv = unpack_signs(layer["v"][p], r).to(torch.float64)
        l = layer["l"][p].to(torch.float64)
        w += layer["h"][p].to(torch.float64)[:, None] * ((su * l) @ sv.T) \
            * layer["g"][p].to(torch.float64)[None, :]
    return w


# --------------------------------------------------------------------------- reading files

def _load_safetensors(path, out, origin):
    from safetensors import safe_open
    try:
        with safe_open(path, framework="pt", device="cpu") as f:
            for k in f.keys():
                if k in out:
                    raise ValueError(f"littlebit: tensor {k!r} appears twice ({origin})")
                out[k] = f.get_tensor(k)
    except ValueError:
        raise
    except Exception as e:  # safetensors' own errors for malformed files
        raise ValueError(f"littlebit: cannot read {origin}: {e}") from e


def _load_torch(path, out, origin):
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ValueError(f"littlebit: cannot read {origin}: {e}") from e
    if not isinstance(sd, dict):
        raise ValueError(f"littlebit: {origin} does not hold a dict of tensors")
    for k, t in sd.items():
        if not isinstance(k, str) or not isinstance(t, torch.Tensor):
            raise ValueError(f"littlebit: {origin}: entry {k!r} is not a named tensor")
        out[k] = t


def _load_json(path):
    try:
        with open(path, "r", encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"littlebit: cannot read {os.path.basename(path)}: {e}") from e
    if not isinstance(obj, dict):
        raise ValueError(f"littlebit: {os.path.basename(path)} is not a JSON object")
    return obj


def _load_tensors(path):
    """All tensors of a checkpoint directory (their loader's order of preference) or file."""
    out = {}
    if os.path.isdir(path):
        index = os.path.join(path, INDEX_NAME)
        if os.path.exists(index):
            wm = _load_json(index).get("weight_map")
            if not isinstance(wm, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in wm.items()):
                raise ValueError(f"littlebit: {INDEX_NAME}: 'weight_map' must map names to files")
            for shard in sorted(set(wm.values())):
                if (not shard or os.path.basename(shard) != shard or shard in (".", "..")
                        or "\\" in shard):
                    raise ValueError(f"littlebit: {INDEX_NAME}: shard {shard!r} is not a file "
                                     "name inside the checkpoint directory")
                sp = os.path.join(path, shard)
                if not os.path.isfile(sp):
                    raise ValueError(f"littlebit: {INDEX_NAME}: shard {shard!r} is missing")
                _load_safetensors(sp, out, shard)
            return out
        for fname, loader in ((WEIGHTS_NAME, _load_safetensors), ("pytorch_model.bin", _load_torch),
                              ("model_state.pt", _load_torch)):
            p = os.path.join(path, fname)
            if os.path.isfile(p):
                loader(p, out, fname)
                return out
        raise ValueError(f"littlebit: no {WEIGHTS_NAME}, {INDEX_NAME}, pytorch_model.bin or "
                         f"model_state.pt in {path}")
    if not os.path.isfile(path):
        raise ValueError(f"littlebit: {path} does not exist")
    if path.endswith(".safetensors"):
        _load_safetensors(path, out, os.path.basename(path))
    else:
        _load_torch(path, out, os.path.basename(path))
    return out


def _effective_residual(lb_cfg, model_cfg, have_lb_cfg):
    """The residual flag their loader would use, or None when no config says anything."""
    def flag(cfg, src):
        v = cfg["residual"]
        if not isinstance(v, bool):
            raise ValueError(f"littlebit: {src}: 'residual' must be true or false, got {v!r}")
        return v
    res = None
    if have_lb_cfg:
        res = flag(lb_cfg, CONFIG_NAME) if "residual" in lb_cfg else False
    if model_cfg is not None and "residual" in model_cfg and not res:
        res = flag(model_cfg, MODEL_CONFIG_NAME)  # hub.py: config.json fills keys at default
    return res


def _find_layers(tensors):
    """Module paths of the LittleBit linears in a state dict."""
    marks = []
    for sfx in _PATH_SUFFIX:
        marks += [f".u1{sfx}", f".U{sfx}_packed", f".V{sfx}_packed", f".U{sfx}_shape",
                  f".V{sfx}_shape"]
    names = set()
    for k in tensors:
        for mk in marks:
            if k.endswith(mk) and len(k) > len(mk):
                names.add(k[:-len(mk)])
    return sorted(names)


def _need(tensors, key, used):
    if key not in tensors:
        raise ValueError(f"littlebit: missing tensor {key!r}")
    used.add(key)
    return tensors[key]


def _check_dims(key, t, want):
    if tuple(t.shape) != tuple(want):
        raise ValueError(f"littlebit: tensor {key!r} has shape {tuple(t.shape)}, "
                         f"expected {tuple(want)}")


def _read_shape(tensors, key, used):
    t = _need(tensors, key, used)
    if t.dtype != torch.int64:
        raise ValueError(f"littlebit: tensor {key!r} has dtype {t.dtype}, expected int64")
    _check_dims(key, t, (2,))
    a, b = (int(x) for x in t.tolist())
    if not (1 <= a <= _MAX_DIM and 1 <= b <= _MAX_DIM):
        raise ValueError(f"littlebit: tensor {key!r} holds an invalid shape {(a, b)}")
    return a, b


def _read_signs(tensors, name, which, sfx, any_packed, used):
    """One latent matrix U or V of a path: (bool [rows][cols] True where -1, rows, cols)."""
    pk, shk, dk = f"{name}.{which}{sfx}_packed", f"{name}.{which}{sfx}_shape", \
        f"{name}.{which}{sfx}"
    if pk in tensors or shk in tensors:
        if dk in tensors:
            raise ValueError(f"littlebit: both {pk!r} and the dense {dk!r} are present")
        rows, cols = _read_shape(tensors, shk, used)
        t = _need(tensors, pk, used)
        if t.dtype != torch.int32:
            raise ValueError(f"littlebit: tensor {pk!r} has dtype {t.dtype}, expected int32")
        _check_dims(pk, t, (rows, (cols + 31) // 32))
        return _lb_unpack(t, cols), rows, cols
    t = _need(tensors, dk, used)
    if t.dtype not in _SCALE_DTYPES:
        raise ValueError(f"littlebit: tensor {dk!r} has dtype {t.dtype}, expected "
                         "bfloat16, float16 or float32")
    if t.dim() != 2 or t.shape[0] < 1 or t.shape[1] < 1:
        raise ValueError(f"littlebit: tensor {dk!r} has shape {tuple(t.shape)}, expected 2-D")
    t = t.to(torch.float32)
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"littlebit: tensor {dk!r} holds non-finite values")
    if any_packed and not bool(((t == 1) | (t == -1)).all()):
        # their loader marks every module binarized once any tensor is packed, and then
        # uses dense latents as they are
        raise ValueError(f"littlebit: dense tensor {dk!r} in a packed checkpoint holds values "
                         "other than ±1, which LittleBit's loader would use unbinarized")
    return t < 0, t.shape[0], t.shape[1]   # sign with 0 -> +1


def _read_scale(tensors, key, dim, used):
    t = _need(tensors, key, used)
    if t.dtype not in _SCALE_DTYPES:
        raise ValueError(f"littlebit: tensor {key!r} has dtype {t.dtype}, expected "
                         "bfloat16, float16 or float32")
    _check_dims(key, t, (1, dim))
    t = t[0].to(torch.float64)
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"littlebit: tensor {key!r} holds non-finite values")
    return t


def _read_path(tensors, name, sfx, any_packed, exact_scales, used):
    Um, m, r = _read_signs(tensors, name, "U", sfx, any_packed, used)
    Vm, r2, n = _read_signs(tensors, name, "V", sfx, any_packed, used)
    if r2 != r:
        raise ValueError(f"littlebit: tensor {name}.V{sfx}: rank {r2} differs from "
                         f"{name}.U{sfx}'s {r}")
    u1 = _read_scale(tensors, f"{name}.u1{sfx}", m, used)
    u2 = _read_scale(tensors, f"{name}.u2{sfx}", r, used)
    v1 = _read_scale(tensors, f"{name}.v1{sfx}", r, used)
    v2 = _read_scale(tensors, f"{name}.v2{sfx}", n, used)
    l64 = v1 * u2                       # exact: both factors have <= 24 significant bits
    l = l64.to(torch.float32)
    if not bool(torch.isfinite(l).all()):
        raise ValueError(f"littlebit: {name}.v1{sfx} * {name}.u2{sfx} overflows float32")
    if exact_scales and not torch.equal(l.to(torch.float64), l64):
        raise ValueError(f"littlebit: {name}.v1{sfx} * {name}.u2{sfx} is not exactly "
                         "representable in float32")
    return dict(su_plus=~Um, sv_plus=~Vm.T, h=u1.to(torch.float32), l=l,
                g=v2.to(torch.float32), m=m, n=n, r=r)


def _zero_path(path):
    return bool((path["h"] == 0).all() or (path["l"] == 0).all() or (path["g"] == 0).all())


def read_littlebit(path, *, exact_scales=False):
    """Read a LittleBit checkpoint (a directory as their training or hub code saves it, or a
    single .safetensors / torch .bin/.pt file) into

        (layers, other_tensors, config)

    layers: {module path: {"u", "v", "h", "l", "g", "rank", "bias"}} in the BLR layout;
    other_tensors: every tensor that is not part of a LittleBit linear, as stored;
    config: littlebit_config.json as a dict (for a checkpoint without it, the quantization
    keys of config.json), with config.json itself under "model_config" when present.

    The three informational buffers per linear (_eff_bit_target, _split_dim_final,
    _eff_bit_actual) are dropped. Any malformed, missing or mis-typed tensor raises a
    ValueError naming it. exact_scales=True refuses an l = v1*u2 that float32 cannot hold
    exactly (only possible with float32 factors); see the module docstring."""
    path = os.fspath(path)
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    tensors = _load_tensors(path)

    lb_path = os.path.join(folder, CONFIG_NAME)
    mc_path = os.path.join(folder, MODEL_CONFIG_NAME)
    have_lb = os.path.isfile(lb_path)
    lb_cfg = _load_json(lb_path) if have_lb else {}
    model_cfg = _load_json(mc_path) if os.path.isfile(mc_path) else None
    if have_lb:
        config = dict(lb_cfg)
    else:
        keys = ("quant_func", "eff_bit", "split_dim", "residual", "kv_factor",
                "min_split_dim", "quant_mod")
        config = {k: model_cfg[k] for k in keys if model_cfg and k in model_cfg}
    if model_cfg is not None:
        config["model_config"] = model_cfg
    residual = _effective_residual(lb_cfg, model_cfg, have_lb)
    meta = _bitrank_meta(lb_cfg)

    any_packed = any(k.endswith("_packed") for k in tensors)
    used = set()
    layers = {}
    for name in _find_layers(tensors):
        has_r = any(f"{name}.{x}_R{s}" in tensors for x in ("U", "V") for s in ("", "_packed",
                                                                                 "_shape")) \
            or any(f"{name}.{x}_R" in tensors for x in _SCALES)
        if has_r and residual is False:
            raise ValueError(f"littlebit: layer {name!r} holds residual (_R) tensors but the "
                             "config says residual=false, so LittleBit's loader would ignore "
                             "them; refusing an ambiguous checkpoint")
        paths = [_read_path(tensors, name, "", any_packed, exact_scales, used)]
        if has_r:
            paths.append(_read_path(tensors, name, "_R", any_packed, exact_scales, used))
            for a, b in (("m", "U"), ("n", "V"), ("r", "U")):
                if paths[1][a] != paths[0][a]:
                    raise ValueError(f"littlebit: layer {name!r}: tensor {name}.{b}_R does not "
                                     f"match the main path's {a} ({paths[1][a]} vs "
                                     f"{paths[0][a]}); paths of different shapes are not "
                                     "representable")
        m, r = paths[0]["m"], paths[0]["r"]
        bias = None
        bk = f"{name}.bias"
        if bk in tensors:
            b = _need(tensors, bk, used)
            if b.dtype not in _SCALE_DTYPES:
                raise ValueError(f"littlebit: tensor {bk!r} has dtype {b.dtype}, expected "
                                 "bfloat16, float16 or float32")
            _check_dims(bk, b, (m,))
            bias = b.to(torch.float32).clone()
        for buf in _BUFFERS:
            if f"{name}.{buf}" in tensors:
                used.add(f"{name}.{buf}")
        paths, r = _trim(name, paths, r, meta.get(name))
        layers[name] = {
            "u": torch.stack([_bits_to_bytes(p["su_plus"][:, :r]) for p in paths]),
            "v": torch.stack([_bits_to_bytes(p["sv_plus"][:, :r]) for p in paths]),
            "h": torch.stack([p["h"] for p in paths]),
            "l": torch.stack([p["l"][:r] for p in paths]),
            "g": torch.stack([p["g"] for p in paths]),
            "rank": r,
            "bias": bias,
        }
    other = {k: t for k, t in tensors.items() if k not in used}
    return layers, other, config


def _bitrank_meta(lb_cfg):
    """The per-layer true ranks/paths our exporter records, validated; {} when absent."""
    br = lb_cfg.get("bitrank")
    if br is None:
        return {}
    if not isinstance(br, dict) or not isinstance(br.get("layers", {}), dict):
        raise ValueError(f"littlebit: {CONFIG_NAME}: 'bitrank' must be an object with "
                         "an object 'layers'")
    out = {}
    for name, e in br.get("layers", {}).items():
        if not isinstance(e, dict):
            raise ValueError(f"littlebit: {CONFIG_NAME}: bitrank.layers[{name!r}] is not an object")
        try:
            rank, paths = _as_int(e.get("rank"), "rank"), _as_int(e.get("paths"), "paths")
        except ValueError as err:
            raise ValueError(f"littlebit: {CONFIG_NAME}: bitrank.layers[{name!r}]: {err}") from None
        if rank < 1 or paths not in (1, 2):
            raise ValueError(f"littlebit: {CONFIG_NAME}: bitrank.layers[{name!r}] has "
                             f"rank {rank}, paths {paths}")
        out[name] = (rank, paths)
    return out


def _trim(name, paths, r, meta):
    """Undo our exporter's padding (extra zero components / an all-zero second path) when
    the recorded true rank/paths say so and the padding still contributes exactly zero."""
    if meta is None:
        return paths, r
    rank, npaths = meta
    if rank > r or npaths > len(paths):
        raise ValueError(f"littlebit: {CONFIG_NAME}: bitrank.layers[{name!r}] claims rank "
                         f"{rank} and {npaths} paths, the tensors hold rank {r}, "
                         f"{len(paths)} paths")
    keep = paths[:npaths]
    ok = all(_zero_path(p) for p in paths[npaths:]) and \
        all(bool((p["l"][rank:] == 0).all()) for p in keep)
    if not ok:
        warnings.warn(f"littlebit: layer {name!r}: the components past its recorded rank "
                      f"{rank}/paths {npaths} are no longer zero; keeping all of them")
        return paths, r
    return keep, rank


# --------------------------------------------------------------------------- writing

def _cast(key, t, dtype, lossless):
    out = t.to(dtype)
    if not bool(torch.isfinite(out).all()):
        raise ValueError(f"littlebit: tensor {key!r}: a value is non-finite or out of "
                         f"{dtype}'s range")
    if lossless and not torch.equal(out.to(torch.float64), t.to(torch.float64)):
        raise ValueError(f"littlebit: tensor {key!r} is not exactly representable in {dtype}")
    return out.contiguous()


def _eff_bits(m, n, r, residual):
    """The _eff_bit_actual buffer their module keeps (bits per weight of the layer)."""
    if residual:
        return (r * 2 * (m + n + 16) + 32 * (m + n)) / (m * n)
    return (r * (m + n + 16) + 16 * (m + n)) / (m * n)


def write_littlebit(dir, layers, other_tensors, config_extra=None, *, dtype=torch.bfloat16,
                    packed=True, lossless=False, model_config=None):
    """Write `layers` (our dicts) and `other_tensors` (written as they are) as a LittleBit
    checkpoint directory: model.safetensors, littlebit_config.json and, when a model config is
    given (`model_config`, or config_extra["model_config"] as read_littlebit returns it),
    config.json with the quantization keys set as their training does.

    Scales and biases are cast to `dtype` (bfloat16, float16 or float32; round to nearest
    even, or a ValueError with lossless=True if any value would change). packed=True writes
    their int32-packed signs (U_packed/U_shape/V_packed/V_shape); packed=False the legacy
    dense ±1 U/V (see the module docstring for why). Keys of config_extra are copied into
    littlebit_config.json except the ones that fix each linear's rank (eff_bit, split_dim,
    min_split_dim, residual, kv_factor) and "bitrank", which are computed here."""
    if dtype not in _SCALE_DTYPES:
        raise ValueError(f"littlebit: dtype must be bfloat16, float16 or float32, not {dtype}")
    if not isinstance(layers, dict) or not layers:
        raise ValueError("littlebit: layers must be a non-empty dict")
    if config_extra is not None and not isinstance(config_extra, dict):
        raise ValueError("littlebit: config_extra must be a dict")
    other_tensors = {} if other_tensors is None else other_tensors
    shapes = {}
    for name, d in layers.items():
        if not isinstance(name, str) or not name or name.startswith(".") \
                or name.endswith(".") or ".." in name:
            raise ValueError(f"littlebit: {name!r} is not a module path")
        if name.endswith(".weight"):
            raise ValueError(f"littlebit: layer {name!r}: name the module "
                             f"({name[:-len('.weight')]!r}), not its weight tensor")
        if "lm_head" in name:
            raise ValueError(f"littlebit: layer {name!r}: LittleBit's loader never quantizes "
                             "a module whose name contains 'lm_head'")
        shapes[name] = _check_layer(name, d)
    R = max(s[3] for s in shapes.values())
    residual = any(s[0] == 2 for s in shapes.values())

    out = {}
    for name in sorted(layers):
        d = layers[name]
        P, m, n, r = shapes[name]
        for p, sfx in enumerate(_PATH_SUFFIX[:2 if residual else 1]):
            if p < P:
                su = _bytes_to_bits(d["u"][p], r)             # True = +1, [m][r]
                sv = _bytes_to_bits(d["v"][p], r)             # [n][r]
                u1 = d["h"][p]
                u2 = torch.zeros(R, dtype=torch.float64)
                u2[:r] = d["l"][p].to(torch.float64)
                v1 = torch.ones(R, dtype=torch.float64)
                v2 = d["g"][p]
            else:                                             # all-zero padding path
                su = torch.ones(m, r, dtype=torch.bool)
                sv = torch.ones(n, r, dtype=torch.bool)
                u1 = torch.zeros(m)
                u2 = torch.zeros(R, dtype=torch.float64)
                v1 = torch.ones(R, dtype=torch.float64)
                v2 = torch.zeros(n)
            if r < R:                                         # padding components: +1
                su = torch.cat([su, torch.ones(m, R - r, dtype=torch.bool)], 1)
                sv = torch.cat([sv, torch.ones(n, R - r, dtype=torch.bool)], 1)
            U_minus, V_minus = ~su, (~sv).T.contiguous()      # [m][R], [R][n]
            if packed:
                out[f"{name}.U{sfx}_packed"] = _lb_pack(U_minus)
                out[f"{name}.U{sfx}_shape"] = torch.tensor([m, R], dtype=torch.int64)
                out[f"{name}.V{sfx}_packed"] = _lb_pack(V_minus)
                out[f"{name}.V{sfx}_shape"] = torch.tensor([R, n], dtype=torch.int64)
            else:
                out[f"{name}.U{sfx}"] = (1 - 2 * U_minus.to(torch.int8)).to(dtype)
                out[f"{name}.V{sfx}"] = (1 - 2 * V_minus.to(torch.int8)).to(dtype)
            for k, t in (("u1", u1), ("u2", u2), ("v1", v1), ("v2", v2)):
                key = f"{name}.{k}{sfx}"
                out[key] = _cast(key, t.reshape(1, -1), dtype, lossless)
        if d.get("bias") is not None:
            out[f"{name}.bias"] = _cast(f"{name}.bias", d["bias"], dtype, lossless)
        out[f"{name}._eff_bit_target"] = torch.tensor(-1.0)
        out[f"{name}._split_dim_final"] = torch.tensor(R, dtype=torch.int64)
        out[f"{name}._eff_bit_actual"] = torch.tensor(_eff_bits(m, n, R, residual))
    for k, t in other_tensors.items():
        if not isinstance(k, str) or not isinstance(t, torch.Tensor):
            raise ValueError(f"littlebit: other_tensors entry {k!r} is not a named tensor")
        if k in out:
            raise ValueError(f"littlebit: other tensor {k!r} collides with a layer's tensor")
        out[k] = t.detach().cpu().contiguous().clone()

    extra = dict(config_extra or {})
    if model_config is None:
        model_config = extra.get("model_config")
    extra.pop("model_config", None)
    quant = {"quant_func": "STEBinary", "quant_mod": "LittleBitLinear"}
    quant.update({k: v for k, v in extra.items() if k not in _STRUCTURAL and k != "bitrank"})
    quant.update({"eff_bit": None, "split_dim": R, "min_split_dim": R, "kv_factor": 1.0,
                  "residual": residual})
    quant["bitrank"] = {"version": 1, "layers": {
        name: {"rank": shapes[name][3], "paths": shapes[name][0]} for name in sorted(layers)}}
    try:
        json.dumps(quant)
    except (TypeError, ValueError) as e:
        raise ValueError(f"littlebit: config_extra is not JSON-serializable: {e}") from e
    if model_config is not None and not isinstance(model_config, dict):
        raise ValueError("littlebit: model_config must be a dict")

    from safetensors.torch import save_file
    dir = os.fspath(dir)
    os.makedirs(dir, exist_ok=True)
    save_file(out, os.path.join(dir, WEIGHTS_NAME), metadata={"format": "pt"})
    with open(os.path.join(dir, CONFIG_NAME), "w", encoding="utf-8") as f:
        json.dump(quant, f, indent=2)
    if model_config is not None:
        mc = dict(model_config)
        mc.update({k: quant[k] for k in ("quant_func", "eff_bit", "split_dim", "residual",
                                         "kv_factor", "min_split_dim", "quant_mod")})
        with open(os.path.join(dir, MODEL_CONFIG_NAME), "w", encoding="utf-8") as f:
            json.dump(mc, f, indent=2)


# ----------------------------------------------------------------- whole models

def export_model(model, dir, **kwargs):
    """Write a model whose compressed linears are BLRLinear (compress_model, bitrank.load)
    as a LittleBit checkpoint in `dir` (write_littlebit's options as keywords)."""
    from .torch import BLRLinear
    layers, blr_keys = {}, set()
    for name, mod in model.named_modules():
        if isinstance(mod, BLRLinear):
            d = mod.to_layer()
            d["bias"] = mod.bias.detach().float().cpu() if mod.bias is not None else None
            layers[name] = d
            blr_keys.update(f"{name}.{p}" for p in ("u", "v", "h", "l", "g", "bias"))
    if not layers:
        raise ValueError("littlebit: the model has no BLRLinear layer to export")
    other = {k: v.detach().cpu() for k, v in model.state_dict().items() if k not in blr_keys}
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg["architectures"] = [type(model).__name__]
    kwargs.setdefault("model_config", cfg)
    write_littlebit(dir, layers, other, **kwargs)


def load_model(path, config=None, device="cpu"):
    """A transformers model from a LittleBit checkpoint: its LittleBit linears become
    BLRLinear (exactly their signs and scales), every other tensor is loaded as stored.
    config: a transformers config or directory (default: the checkpoint's config.json)."""
    import transformers
    from torch import nn
    from .torch import BLRLinear
    layers, other, lb_cfg = read_littlebit(path)
    if config is None:
        mc = lb_cfg.get("model_config")
        if not mc:
            raise ValueError(f"{path}: no config.json beside the checkpoint (pass config=...)")
        mc = {k: v for k, v in mc.items() if k not in ("quantization_config",)}
        config = transformers.AutoConfig.for_model(**mc)
    elif isinstance(config, str):
        config = transformers.AutoConfig.from_pretrained(config)
    archs = getattr(config, "architectures", None) or []
    cls = next((getattr(transformers, a) for a in archs if hasattr(transformers, a)), None)
    model = cls(config) if cls is not None else transformers.AutoModel.from_config(config)
    model.eval()
    for name, d in layers.items():
        lin = model.get_submodule(name)
        if not isinstance(lin, nn.Linear):
            raise ValueError(f"{path}: layer {name} is not an nn.Linear in {type(model).__name__}")
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf,
                BLRLinear.from_layer(d, bias=d.get("bias")))
    from .hf import load_rest
    load_rest(model, other, path)
    return model.to(device)
