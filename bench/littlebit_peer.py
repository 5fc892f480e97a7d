#!/usr/bin/env python3
"""A peer for bitrank's training: LittleBit's quantization-aware training as its code does
it, written here from scratch in PyTorch (SamsungLabs/LittleBit, NeurIPS 2025, read for
behaviour only; file references below are to that repository).

What LittleBit does, and what this file reproduces:

  layer     every nn.Linear of the model except those whose name contains "lm_head"
            (quantization/utils/quant_util.py, apply_littlebit_patch / patch_inst) becomes
            y = Σ_paths ((((x·v2) @ sign(V)ᵀ) · (v1·u2)) @ sign(U)ᵀ) · u1  (+ bias)
            (quantization/modules/littlebit.py, _compute_forward). The latent U, V and the
            scales u1, u2, v1, v2 are trained in f32; the bias stays. residual=True adds a
            second path U_R, V_R, u1_R, ... initialized on the first path's residual.
            Here V is stored [in][r] (LittleBit: [r][in]) so that the weight reads
            diag(u1)·sign(U)·diag(v1·u2)·sign(V)ᵀ·diag(v2) = bitrank's
            diag(h)·S_U·diag(ℓ)·S_Vᵀ·diag(g) with h=u1, ℓ=v1·u2, g=v2.
            By default only the linears inside the model's blocks (a ModuleList) are
            converted: for decoder LMs that is what LittleBit converts (it skips lm_head
            only); for BERT-like encoders it leaves out the pooler, which LittleBit's
            loss never reaches anyway.
  sign      SmoothSign (quantization/functions/binary.py): forward sign with 0 -> +1,
            backward grad·α·(1 - tanh(αx)²), α = 100. (main.py defaults to STEBinary,
            backward grad·[|x|<1]; the README's training recipe uses SmoothSign; both here.)
  rank      "split_dim" from the bits-per-weight target (littlebit.py,
            _estimate_split_dim / _finalize_split_dim): with a = in, b = out,
              residual:  r = (a·b·bpw - 32(a+b)) / (2(a+b+16))
              single:    r = (a·b·bpw - 16(a+b)) / (a+b+16)
            times kv_factor for k_proj/v_proj, rounded down to a multiple of 8, at least
            min_split_dim = 8. Bits counted as LittleBit counts them (_compute_eff_bits):
              residual:  (2r(a+b+16) + 32(a+b)) / (a·b),  single: (r(a+b+16) + 16(a+b)) / (a·b)
            (sign bits of U, V; 16-bit u1, v2 per path; 16-bit v1·u2 per rank; no bias).
  init      Dual-SVID (littlebit.py, _decompose_matrix / _rank_one_decompose): truncated
            SVD W ≈ U_t S V_tᵀ (torch.svd_lowrank with q = r), U = U_t·√S, V = V_t·√S;
            the scales are the rank-1 SVD of |U| (u1 ⊗ u2) and of |V| (v2 ⊗ v1). The
            residual path is the same decomposition of W - Ŵ₁, Ŵ₁ the first path's weight
            with hard signs. A rank-1 pair comes out of the SVD with an arbitrary common
            sign; here both halves are made positive, which leaves the weight, and (AdamW
            being sign-equivariant per coordinate) the training, unchanged.
  student   lm_head and embedding parameters frozen (names containing "lm_head" or
            "embed": utils/utils.py, prepare_model_for_training); everything else trains
            (latents, scales, biases, norms). LittleBit loads the student in bf16 (main.py,
            load_student_model), so only the new factors are f32.
  loss      KL(log_softmax(student logits) || softmax(teacher logits)), reduction
            "batchmean" (the sum over tokens and vocabulary divided by the batch size, so
            it grows with the sequence length) + l2l_loss_scale (10) · Σ over
            hidden_states[1:] of the MSE (mean over elements) between student and teacher
            (utils/kd_utils.py, KDTrainer.compute_loss). Models without logits (BERT
            encoders) get the hidden-state term only.
  training  HF Trainer as main.py configures it (get_training_arguments): AdamW
            (optim adamw_torch, β = (0.9, 0.999), ε = 1e-8, weight decay 0 (Trainer's
            default, main.py sets none), not applied to biases and norms), gradient
            clipping at norm 1.0 (Trainer's default), linear warmup over
            ceil(warmup_ratio·total) steps from 0, then cosine to 0 (lr_scheduler_type
            "cosine"), bf16 autocast, batch 4 per device, sequences of 2048 tokens
            (utils/datautils.py, block_size), seed 42, teacher in bf16 without grad.
            main.py defaults: lr 2e-5, warmup_ratio 0.03, 3 epochs, STEBinary, no residual,
            eff_bit 1.0; README recipe: lr 4e-5, warmup_ratio 0.02, 5 epochs, SmoothSign,
            residual True, eff_bit 1.0, l2l 10. The defaults here are the README recipe's.
            (main.py also turns on gradient checkpointing, for memory; it costs time, so
            it is an option here, off by default.)

Equal wall time: train_peer(seconds=S) runs the cosine over an estimated number of steps:
the first step (CUDA start-up, allocator warm-up) is timed but not trusted; the mean time
of the next `probe_steps` steps sets total = steps done + floor(time left / mean step
time), after which the schedule is fixed. Until then the warmup uses the running estimate.
Training stops at the planned total, at `steps`, or when the next step would pass S
seconds, whichever comes first. Time is training wall time only (no loading, conversion
or evaluation), CUDA-synchronized after every step.

CLI (from the repository root):

    python bench/littlebit_peer.py --model DIR --data-text FILE [--eval-text FILE]
        [--bpw 1.0] [--no-residual] [--seconds 60 | --steps N | --epochs E]
        [--seq-len 256] [--n-samples 256] [--batch-size 4] [--lr 4e-5] [--warmup 0.02]
        [--device cuda] [--out result.json]
"""
import argparse
import json
import math
import os
import re
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))
from bitrank.calib import calibration_ids  # noqa: E402
from bitrank.eval import perplexity as _perplexity, token_ids  # noqa: E402

# ------------------------------------------------------------------------------ signs


class _SmoothSign(torch.autograd.Function):
    """sign with 0 -> +1; gradient of tanh(αx) (LittleBit's SmoothSign)."""

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.save_for_backward(x)
        ctx.alpha = alpha
        return hard_sign(x)

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        t = torch.tanh(ctx.alpha * x)
        return g * (ctx.alpha * (1.0 - t * t)), None


class _STESign(torch.autograd.Function):
    """sign with 0 -> +1; straight-through inside |x| < 1 (LittleBit's STEBinary)."""

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.save_for_backward(x)
        return hard_sign(x)

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * (x.abs() < 1).to(g.dtype), None


def hard_sign(x):
    """±1 in x's dtype, 0 (and -0) -> +1."""
    return torch.where(x < 0, -torch.ones_like(x), torch.ones_like(x))


def smooth_sign(x, alpha=100.0):
    return _SmoothSign.apply(x, alpha)


def ste_sign(x, alpha=None):
    return _STESign.apply(x, alpha)


_QUANT = {"smooth": _SmoothSign, "ste": _STESign}

# ------------------------------------------------------------------------------ rank, bits


def littlebit_rank(in_features, out_features, bpw, residual=True, ratio=1.0,
                   split_default=1024, min_split=8):
    """LittleBit's split_dim for a bits-per-weight target (None: split_default)."""
    a, b = in_features, out_features
    est = None
    if bpw is not None and a * b:
        if residual:
            est = (a * b * bpw - 32 * (a + b)) / (2 * (a + b + 16))
        else:
            est = (a * b * bpw - 16 * (a + b)) / (a + b + 16)
        est *= ratio
    cand = int(est) if est is not None else int(split_default)
    cand = (cand // 8) * 8
    if cand == 0:
        cand = min_split
    return max(cand, min_split)


def littlebit_bits(in_features, out_features, rank, residual=True):
    """LittleBit's bit count of one layer (its eff_bit times in·out)."""
    a, b, s = in_features, out_features, rank
    if residual:
        return s * 2 * (a + b + 16) + 32 * (a + b)
    return s * (a + b + 16) + 16 * (a + b)


# ------------------------------------------------------------------------------ Dual-SVID


def _svd_top(X, q, method):
    """X ≈ A diag(S) Bᵀ, top q, as LittleBit computes it (svd_lowrank) or exactly."""
    if method == "lowrank":
        A, S, B = torch.svd_lowrank(X, q=q)
        return A[:, :q], S[:q], B[:, :q]
    if method == "full":
        A, S, Bh = torch.linalg.svd(X, full_matrices=False)
        return A[:, :q], S[:q], Bh[:q].T
    raise ValueError(f"svd method {method!r}: 'lowrank' or 'full'")


def _rank_one(X, method):
    """Nonnegative X ≈ p qᵀ (rank-1 SVD, √σ on each side), both made nonnegative."""
    A, S, B = _svd_top(X, 1, method)
    s = S[0].sqrt()
    p, q = A[:, 0] * s, B[:, 0] * s
    if p.sum() < 0:  # the SVD's arbitrary common sign; p qᵀ is unchanged
        p, q = -p, -q
    return p, q


def dual_svid(W, rank, method="lowrank"):
    """One path of LittleBit's initialization of W [out][in] at `rank`.
    Returns U [out][r], V [in][r], u1 [out], u2 [r], v1 [r], v2 [in] (f32)."""
    W = W.float()
    A, S, B = _svd_top(W, rank, method)
    sq = S.clamp_min(0).sqrt()
    U = (A * sq).contiguous()
    V = (B * sq).contiguous()
    u1, u2 = _rank_one(U.abs(), method)
    v2, v1 = _rank_one(V.abs(), method)
    return U, V, u1, u2, v1, v2


def path_weight(U, V, u1, u2, v1, v2):
    """diag(u1)·sign(U)·diag(v1·u2)·sign(V)ᵀ·diag(v2), in U's dtype."""
    return (u1[:, None] * hard_sign(U) * (v1 * u2)[None, :]) @ (hard_sign(V) * v2[:, None]).T


# ------------------------------------------------------------------------------ the layer

_NAMES = ("U", "V", "u1", "u2", "v1", "v2")


class PeerLinear(nn.Module):
    """LittleBit's layer: one or two paths of binarized latent factors with f32 scales."""

    def __init__(self, in_features, out_features, rank, residual=True, bias=False,
                 quant="smooth", alpha=100.0, device=None, bias_dtype=None):
        super().__init__()
        if quant not in _QUANT:
            raise ValueError(f"quant {quant!r}: one of {sorted(_QUANT)}")
        self.in_features, self.out_features, self.rank = in_features, out_features, rank
        self.residual = residual
        self.quant, self.alpha = quant, alpha
        self.hard = False  # peer_eval_model: plain signs, no autograd function
        shapes = {"U": (out_features, rank), "V": (in_features, rank), "u1": (out_features,),
                  "u2": (rank,), "v1": (rank,), "v2": (in_features,)}
        for suffix in self._suffixes():
            for n in _NAMES:
                self.register_parameter(n + suffix, nn.Parameter(
                    torch.zeros(shapes[n], device=device, dtype=torch.float32)))
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_features, device=device,
                                                 dtype=bias_dtype or torch.float32))
        else:
            self.register_parameter("bias", None)

    def _suffixes(self):
        return ("", "_R") if self.residual else ("",)

    def paths(self):
        """[(U, V, u1, u2, v1, v2)] per path."""
        return [tuple(getattr(self, n + s) for n in _NAMES) for s in self._suffixes()]

    @classmethod
    def from_linear(cls, linear, rank, residual=True, quant="smooth", alpha=100.0,
                    svd="lowrank"):
        """LittleBit's initialization from linear.weight (Dual-SVID; residual path on the
        residual of the first)."""
        out_f, in_f = linear.weight.shape
        rank = min(rank, in_f, out_f)  # svd_lowrank's limit (LittleBit would fail there)
        b = linear.bias
        m = cls(in_f, out_f, rank, residual=residual, bias=b is not None, quant=quant,
                alpha=alpha, device=linear.weight.device,
                bias_dtype=None if b is None else b.dtype)
        W = linear.weight.detach().float()
        with torch.no_grad():
            first = dual_svid(W, rank, svd)
            for n, t in zip(_NAMES, first):
                getattr(m, n).copy_(t)
            if residual:
                for n, t in zip(_NAMES, dual_svid(W - path_weight(*first), rank, svd)):
                    getattr(m, n + "_R").copy_(t)
            if b is not None:
                m.bias.copy_(b.detach())
        return m

    @property
    def bits(self):
        return littlebit_bits(self.in_features, self.out_features, self.rank, self.residual)

    @property
    def bpw(self):
        return self.bits / (self.in_features * self.out_features)

    def dense_weight(self, dtype=torch.float32):
        """Ŵ [out][in] with hard signs (the weight the forward applies)."""
        with torch.no_grad():
            return sum(path_weight(*(t.to(dtype) for t in p)) for p in self.paths())

    def _sign(self, t):
        if self.hard or not (torch.is_grad_enabled() and t.requires_grad):
            return hard_sign(t)
        return _QUANT[self.quant].apply(t, self.alpha)

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, self.in_features)
        y = None
        for U, V, u1, u2, v1, v2 in self.paths():
            # the order of LittleBit's _compute_forward: r-wide products, never a dense W
            t = ((x2 * v2) @ self._sign(V)) * (v1 * u2)
            t = (t @ self._sign(U).T) * u1
            y = t if y is None else y + t
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype).reshape(*shape[:-1], self.out_features)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"rank={self.rank}, residual={self.residual}, bias={self.bias is not None}, "
                f"quant={self.quant}, bpw={self.bpw:.4f}")


# ------------------------------------------------------------------------------ conversion


def _block_prefixes(model):
    return [name + "." for name, mod in model.named_modules()
            if isinstance(mod, nn.ModuleList) and name]


def _matches(name, patterns):
    return any(re.search(p, name) for p in patterns)


def littlebit_convert(model, bpw, residual=True, include=None, skip=("lm_head", "embed"),
                      kv_factor=1.0, kv_pattern=r"\.(k_proj|v_proj)$", split_default=1024,
                      min_split=8, quant="smooth", alpha=100.0, svd="lowrank", seed=0,
                      freeze=("lm_head", "embed")):
    """Replace the model's block linears by PeerLinear (in place) and freeze as LittleBit.

    include: regexes; when given, a linear is converted iff its name matches one (instead
    of the default: inside a ModuleList, i.e. a transformer block). skip: regexes never
    converted. kv_factor: LittleBit's ratio_factor on the rank of names matching
    kv_pattern. freeze: substrings of parameter names set to requires_grad=False.
    Returns a report: per-layer name/in/out/rank/bits/bpw and the total bpw
    (Σ bits / Σ in·out over the converted layers, LittleBit's count)."""
    prefixes = _block_prefixes(model)
    targets = []
    for name, mod in model.named_modules():
        if type(mod) is not nn.Linear:
            continue
        if include is not None:
            ok = _matches(name, include)
        else:
            ok = any(name.startswith(p) for p in prefixes)
        if ok and not _matches(name, skip or ()):
            targets.append((name, mod))
    layers = []
    devs = [d for d in {m.weight.device for _, m in targets} if d.type == "cuda"]
    with torch.random.fork_rng(devices=devs):  # svd_lowrank draws from the global RNG
        torch.manual_seed(seed)
        for name, lin in targets:
            ratio = kv_factor if re.search(kv_pattern, name) else 1.0
            r = littlebit_rank(lin.in_features, lin.out_features, bpw, residual, ratio,
                               split_default, min_split)
            peer = PeerLinear.from_linear(lin, r, residual=residual, quant=quant,
                                          alpha=alpha, svd=svd)
            parent_name, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, child, peer)
            layers.append({"name": name, "in": peer.in_features, "out": peer.out_features,
                           "rank": peer.rank, "bits": peer.bits, "bpw": peer.bpw})
    for pname, p in model.named_parameters():
        if any(f in pname for f in freeze or ()):
            p.requires_grad_(False)
    weights = sum(layer["in"] * layer["out"] for layer in layers)
    bits = sum(layer["bits"] for layer in layers)
    return {"target_bpw": bpw, "residual": residual, "n_layers": len(layers),
            "weights": weights, "bits": bits, "bpw": bits / weights if weights else float("nan"),
            "layers": layers}


def peer_bpw(model):
    """LittleBit's bits per weight over the model's PeerLinear layers."""
    mods = [m for m in model.modules() if isinstance(m, PeerLinear)]
    w = sum(m.in_features * m.out_features for m in mods)
    return sum(m.bits for m in mods) / w if w else float("nan")


def peer_eval_model(student):
    """Eval mode with plain hard signs (the values the training forward already uses)."""
    for m in student.modules():
        if isinstance(m, PeerLinear):
            m.hard = True
    return student.eval()


# ------------------------------------------------------------------------------ loss


def _get(out, key):
    if isinstance(out, dict):
        return out.get(key)
    return getattr(out, key, None)


def peer_loss(student_out, teacher_out, l2l_scale=10.0):
    """LittleBit's KD loss. Returns (loss, kl, mse): loss = kl + l2l_scale·mse, kl the
    batchmean KL of the logits (0 without logits), mse = Σ over hidden_states[1:] of the
    element-mean squared error. Computed in f32 (autocast runs these ops in f32 too)."""
    s_logits, t_logits = _get(student_out, "logits"), _get(teacher_out, "logits")
    s_hs, t_hs = _get(student_out, "hidden_states"), _get(teacher_out, "hidden_states")
    if s_hs is None or t_hs is None:
        raise ValueError("peer_loss needs hidden_states (call the models with "
                         "output_hidden_states=True)")
    if s_logits is not None and t_logits is not None:
        kl = F.kl_div(F.log_softmax(s_logits.float(), dim=-1),
                      F.softmax(t_logits.float(), dim=-1), reduction="batchmean")
    else:
        kl = s_hs[-1].new_zeros((), dtype=torch.float32)
    mse = kl.new_zeros(())
    for s, t in zip(s_hs[1:], t_hs[1:]):
        mse = mse + F.mse_loss(s.float(), t.float())
    return kl + l2l_scale * mse, kl, mse


# ------------------------------------------------------------------------------ training


def _lr_factor(step, total, warm):
    """HF's get_cosine_schedule_with_warmup (num_cycles 0.5) at 0-based optimizer step."""
    if step < warm:
        return step / max(1, warm)
    progress = (step - warm) / max(1, total - warm)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def _warmup_steps(warmup, total):
    return int(warmup) if warmup >= 1 else math.ceil(total * warmup)


def _param_groups(model, weight_decay):
    """HF Trainer's split: no decay for biases and norm weights."""
    no_decay_pat = re.compile(r"bias|layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.)",
                              re.IGNORECASE)
    norm_params = {id(p) for m in model.modules() if isinstance(m, nn.LayerNorm)
                   for p in m.parameters(recurse=False)}
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if id(p) in norm_params or no_decay_pat.search(n) else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def train_peer(student, teacher, ids, mask=None, steps=None, seconds=None, epochs=None,
               batch_size=4, lr=4e-5, warmup=0.02, weight_decay=0.0, device="cpu",
               log_every=10, seed=42, l2l_scale=10.0, max_grad_norm=1.0,
               betas=(0.9, 0.999), eps=1e-8, probe_steps=5, teacher_dtype="auto",
               autocast="auto", grad_checkpoint=False, train_mode=True, verbose=False):
    """LittleBit's KD training of `student` (converted) against `teacher` (original).

    ids, mask: [N][T] token ids and attention mask (mask None: all ones). Length: `steps`
    (also the schedule's length), else `seconds` (schedule over an estimated step count,
    see the module docstring), else `epochs` over the N sequences; `seconds` with `steps`
    stops at whichever comes first. warmup: ratio of the schedule (< 1) or steps (>= 1).
    On CUDA the teacher is cast to bf16 (teacher_dtype "auto") and both models run under
    bf16 autocast (autocast "auto"). Returns steps, seconds, tokens, tokens_per_s, loss
    curve [(step, loss, kl, mse)], bpw, and the plan (planned_steps, warmup_steps,
    stopped_by). train_mode: the student in train mode as HF Trainer puts it (dropout
    active where the model has some, e.g. BERT; LittleBit's LLMs have none); False: eval."""
    if steps is None and seconds is None and epochs is None:
        raise ValueError("train_peer: give steps, seconds or epochs")
    dev = torch.device(device)
    if autocast == "auto":
        autocast = dev.type == "cuda"
    if teacher_dtype == "auto":
        teacher_dtype = torch.bfloat16 if dev.type == "cuda" else None
    ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.dim() == 1:
        ids = ids[None]
    mask = torch.ones_like(ids) if mask is None else torch.as_tensor(mask, dtype=torch.long)
    n = ids.shape[0]

    student.to(dev)
    teacher.to(dev)
    if teacher_dtype is not None:
        teacher.to(teacher_dtype)
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    for m in (student, teacher):
        if getattr(m, "config", None) is not None and hasattr(m.config, "use_cache"):
            m.config.use_cache = False
    if grad_checkpoint:
        student.gradient_checkpointing_enable()
        if hasattr(student, "enable_input_require_grads"):
            student.enable_input_require_grads()  # embeddings are frozen
    for m in student.modules():
        if isinstance(m, PeerLinear):
            m.hard = False
    student.train(train_mode)

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(_param_groups(student, weight_decay), lr=lr, betas=betas, eps=eps)
    params = [p for g in opt.param_groups for p in g["params"]]

    if steps is not None:
        total = int(steps)
    elif seconds is None:
        total = max(1, math.ceil(epochs * math.ceil(n / batch_size)))
    else:
        total = None  # estimated from the first steps' time
    planned, fixed = total, total is not None

    def batches():
        while True:  # epochs of a seeded shuffle; the last batch may be short (HF's default)
            perm = torch.randperm(n, generator=gen)
            for i in range(0, n, batch_size):
                yield perm[i:i + batch_size]

    ac = (torch.autocast(device_type=dev.type, dtype=torch.bfloat16) if autocast
          else torch.autocast(device_type=dev.type, enabled=False))
    curve, step_times = [], []
    done, tokens, stopped_by = 0, 0, None
    it = batches()
    _sync(dev)
    t0 = time.perf_counter()
    t_prev = t0
    while True:
        plan = planned if planned is not None else max(done + 1, 1)
        warm = _warmup_steps(warmup, plan)
        cur_lr = lr * _lr_factor(done, plan, warm)
        for g in opt.param_groups:
            g["lr"] = cur_lr
        idx = next(it)
        b_ids, b_mask = ids[idx].to(dev, non_blocking=True), mask[idx].to(dev, non_blocking=True)
        with ac:
            with torch.no_grad():
                t_out = teacher(input_ids=b_ids, attention_mask=b_mask,
                                output_hidden_states=True)
            s_out = student(input_ids=b_ids, attention_mask=b_mask, output_hidden_states=True)
        loss, kl, mse = peer_loss(s_out, t_out, l2l_scale)
        del t_out, s_out
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if max_grad_norm and max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        opt.step()
        done += 1
        tokens += int(mask[idx].sum())
        _sync(dev)
        now = time.perf_counter()
        step_times.append(now - t_prev)
        t_prev = now
        elapsed = now - t0

        if done % max(1, log_every) == 0 or done == 1:
            curve.append((done, float(loss.detach()), float(kl.detach()), float(mse.detach())))
            if verbose:
                print(f"step {done}/{planned if planned else '?'} loss {curve[-1][1]:.5g} "
                      f"kl {curve[-1][2]:.5g} mse {curve[-1][3]:.5g} lr {cur_lr:.3g} "
                      f"{elapsed:.1f}s", flush=True)

        # the first step carries start-up costs: trust the ones after it
        t_step = (sum(step_times[1:]) / (len(step_times) - 1) if len(step_times) > 1
                  else step_times[0])
        if seconds is not None and not fixed:
            planned = done + max(0, int((seconds - elapsed) / max(t_step, 1e-9)))
            if len(step_times) > probe_steps:
                fixed = True
        if steps is not None and done >= steps:
            stopped_by = "steps"
        elif planned is not None and fixed and done >= planned:
            stopped_by = "schedule"
        elif seconds is not None and elapsed + t_step > seconds:
            stopped_by = "time"
        if stopped_by:
            break
    if not curve or curve[-1][0] != done:
        curve.append((done, float(loss.detach()), float(kl.detach()), float(mse.detach())))
    seconds_run = time.perf_counter() - t0
    return {"steps": done, "seconds": seconds_run, "tokens": tokens,
            "tokens_per_s": tokens / seconds_run if seconds_run > 0 else float("nan"),
            "loss_curve": curve, "bpw": peer_bpw(student), "planned_steps": planned,
            "warmup_steps": _warmup_steps(warmup, planned or done), "stopped_by": stopped_by,
            "lr": lr, "batch_size": batch_size, "seq_len": int(ids.shape[1]),
            "n_samples": n}


# ------------------------------------------------------------------------------ CLI


def _is_causal(config):
    archs = getattr(config, "architectures", None) or []
    if archs:
        return any(a.endswith("ForCausalLM") or a.endswith("LMHeadModel") for a in archs)
    from transformers import AutoModelForCausalLM
    return type(config) in AutoModelForCausalLM._model_mapping


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="HF model directory")
    ap.add_argument("--data-text", required=True, help="calibration/training text file")
    ap.add_argument("--eval-text", help="held-out text: perplexity (causal LMs)")
    ap.add_argument("--bpw", type=float, default=1.0)
    ap.add_argument("--no-residual", action="store_true", help="one path (LittleBit's "
                    "main.py default; its README recipe uses two)")
    ap.add_argument("--seconds", type=float, help="training wall time")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--epochs", type=float)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--n-samples", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--lr", type=float, default=4e-5)
    ap.add_argument("--warmup", type=float, default=0.02, help="ratio (<1) or steps")
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--l2l-scale", type=float, default=10.0)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--quant", choices=sorted(_QUANT), default="smooth")
    ap.add_argument("--alpha", type=float, default=100.0)
    ap.add_argument("--kv-factor", type=float, default=1.0)
    ap.add_argument("--svd", choices=("lowrank", "full"), default="lowrank")
    ap.add_argument("--student-dtype", choices=sorted(_DTYPES), help="non-factor parameters "
                    "of the student (default: bfloat16 on cuda as LittleBit, else float32)")
    ap.add_argument("--teacher-dtype", choices=sorted(_DTYPES),
                    help="default: bfloat16 on cuda, else float32")
    ap.add_argument("--grad-checkpoint", action="store_true")
    ap.add_argument("--no-dropout", action="store_true", help="student in eval mode while "
                    "training (HF Trainer, hence LittleBit, trains in train mode)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-batch-size", type=int, default=8)
    ap.add_argument("--eval-windows", type=int, help="at most this many eval windows")
    ap.add_argument("--eval-init", action="store_true", help="also the untrained peer's ppl")
    ap.add_argument("--out", help="JSON result file")
    args = ap.parse_args(argv)
    if args.seconds is None and args.steps is None and args.epochs is None:
        ap.error("give --seconds, --steps or --epochs")

    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    s_dtype = _DTYPES[args.student_dtype] if args.student_dtype else (
        torch.bfloat16 if cuda else torch.float32)
    t_dtype = _DTYPES[args.teacher_dtype] if args.teacher_dtype else (
        torch.bfloat16 if cuda else torch.float32)
    config = AutoConfig.from_pretrained(args.model)
    causal = _is_causal(config)
    cls = AutoModelForCausalLM if causal else AutoModel
    tok = AutoTokenizer.from_pretrained(args.model)
    with open(args.data_text, encoding="utf-8", errors="replace") as f:
        ids, _ = calibration_ids(f.read(), tok, args.n_samples, args.seq_len)

    t_load = time.perf_counter()
    teacher = cls.from_pretrained(args.model, dtype=t_dtype).to(dev).eval()
    student = cls.from_pretrained(args.model, dtype=s_dtype).to(dev)
    t_load = time.perf_counter() - t_load
    t_conv = time.perf_counter()
    report = littlebit_convert(student, args.bpw, residual=not args.no_residual,
                               quant=args.quant, alpha=args.alpha, kv_factor=args.kv_factor,
                               svd=args.svd, seed=args.seed)
    _sync(dev)
    t_conv = time.perf_counter() - t_conv
    print(f"converted {report['n_layers']} linears, bpw {report['bpw']:.4f} "
          f"(target {args.bpw}), {t_conv:.1f}s; calibration {tuple(ids.shape)}", flush=True)

    def ppl_of(model, ids):
        max_tokens = args.eval_windows * args.seq_len if args.eval_windows else None
        r = _perplexity(model, None, ids, seq_len=args.seq_len, device=dev,
                        max_tokens=max_tokens, batch=args.eval_batch_size)
        return r["ppl"], r["tokens"]

    eval_ids = None
    res = {"model": args.model, "causal": causal, "args": vars(args),
           "load_seconds": t_load, "convert_seconds": t_conv,
           "convert": {k: v for k, v in report.items() if k != "layers"},
           "ranks": sorted({layer["rank"] for layer in report["layers"]})}
    if args.eval_text and causal:
        with open(args.eval_text, encoding="utf-8", errors="replace") as f:
            eval_ids = token_ids(tok, f.read())
        ppl, cnt = ppl_of(teacher, eval_ids)
        res["ppl_teacher"], res["eval_tokens"] = ppl, cnt
        print(f"teacher ppl {ppl:.4f} ({cnt} tokens)", flush=True)
        if args.eval_init:
            res["ppl_init"] = ppl_of(peer_eval_model(student), eval_ids)[0]
            print(f"init peer ppl {res['ppl_init']:.4f}", flush=True)

    out = train_peer(student, teacher, ids, steps=args.steps, seconds=args.seconds,
                     epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                     warmup=args.warmup, weight_decay=args.weight_decay, device=dev,
                     log_every=args.log_every, seed=args.seed, l2l_scale=args.l2l_scale,
                     max_grad_norm=args.max_grad_norm, teacher_dtype=t_dtype,
                     grad_checkpoint=args.grad_checkpoint, train_mode=not args.no_dropout,
                     verbose=True)
    res.update(out)
    print(f"trained {out['steps']} steps in {out['seconds']:.1f}s "
          f"({out['tokens_per_s']:.0f} tok/s, stopped by {out['stopped_by']}), "
          f"final loss {out['loss_curve'][-1][1]:.5g}", flush=True)
    if eval_ids is not None:
        res["ppl_student"] = ppl_of(peer_eval_model(student), eval_ids)[0]
        print(f"peer ppl {res['ppl_student']:.4f}", flush=True)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    else:
        json.dump({k: v for k, v in res.items() if k != "loss_curve"}, sys.stdout, indent=1)
        print()
    return res


if __name__ == "__main__":
    main()
