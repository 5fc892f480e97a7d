"""distill: a compressed model trained end to end against the original.

After compress_model (block by block, each block against its own target) the
compressed model is trained as a whole so its outputs match the original model's
(the teacher's) on calibration text, as LittleBit and OneBit train theirs:

    loss = kl_weight     · KL(p_teacher ‖ p_student)          (causal LMs: next-token
                                                                distributions, per token)
         + hidden_weight · Σ_blocks ‖h_s − h_t‖² / ‖h_t‖²     (every block's output)
         + embed_weight  · (1 − cos(e_s, e_t))                 (models without an LM head:
                                                                mean-pooled last hidden state)

on the tokens the attention mask keeps. The hidden-state term is relative per block
(each block's squared error over the teacher's squared norm there) so the blocks
with massive activations do not decide it for the rest. The KL term runs over the
vocabulary in slices (`sliced_kl`): the [tokens][vocab] logits never exist whole.

The teacher runs without gradients in its own dtype (bf16/fp16 on a GPU is fine);
on several processes its parameters may be sharded over them (teacher_shard,
ShardedTeacher: torch's FSDP2).
The student's BLRLinear layers train in one of two engines:

  engine="torch":   latent reals whose signs are S_U, S_V (straight-through
                    estimator), h, ℓ, g and the latents by torch's Adam; the forward
                    in torch at f32 (what compress_model's joint training does);
  engine="library": the BLRLinear modules as they are, forward and backward by the
                    library's kernels with sign gradients, stepped by the library's
                    optimizer (bitrank.LibraryOptimizer: Adam for h, ℓ, g; latent
                    signs).

The model's other parameters (norms, biases) are trained by Adam when train_other
is set, else frozen; embeddings and the output head are always frozen (they are
what the sliced KL reads). Steps follow a warm-up and cosine schedule, with
gradient accumulation; checkpoints are written every checkpoint_every steps and a
run resumes from its checkpoint directory. The report has the loss curves.
"""
import contextlib
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field, asdict

import torch
from torch import nn

from . import distributed
from .calib import calibration_ids
from .compress import _TrainBLR, _set_module, find_blocks
from .torch import BLRLinear, LibraryOptimizer, cast_except_blr

CHECKPOINT = "distill-checkpoint.pt"


# ----------------------------------------------------------------- the KL over slices

class _SlicedKL(torch.autograd.Function):
    """Σ_i w_i·KL(softmax(z_t,i) ‖ softmax(z_s,i)) / Σ_i w_i, z = h·Wᵀ (+ b), computed a
    slice of the vocabulary at a time in f32. The gradient in h_s, w_i·(p_s − p_t)·W_s
    / Σw, is formed in the forward's second pass (it needs both log-normalizers,
    known only after the first), so backward only scales it. Row weights rather than
    a selection of rows: nothing here waits for the device."""

    @staticmethod
    def forward(ctx, hs, ht, ws, bs, wt, bt, w, vslice, wsum):
        n = hs.shape[0]
        vocab = ws.shape[0]
        hs32, ht32 = hs.detach().float(), ht.detach().float()
        if w is None:
            wn = torch.full((n,), 1.0 / max(1, n), device=hs.device)
        else:
            total = w.float().sum() if wsum is None else wsum.float()
            wn = w.float() / total.clamp_min(1e-30)

        def logits(h, wgt, b, a, z):
            out = h @ wgt[a:z].float().t()
            return out + b[a:z].float() if b is not None else out

        lse_s = torch.full((n,), -float("inf"), device=hs.device)
        lse_t = torch.full((n,), -float("inf"), device=hs.device)
        for a in range(0, vocab, vslice):
            z = min(vocab, a + vslice)
            lse_s = torch.logaddexp(lse_s, torch.logsumexp(logits(hs32, ws, bs, a, z), -1))
            lse_t = torch.logaddexp(lse_t, torch.logsumexp(logits(ht32, wt, bt, a, z), -1))
        kl_rows = torch.zeros(n, device=hs.device, dtype=torch.float64)
        need = ctx.needs_input_grad[0]
        dh = torch.zeros_like(hs32) if need else None
        for a in range(0, vocab, vslice):
            z = min(vocab, a + vslice)
            lps = logits(hs32, ws, bs, a, z) - lse_s[:, None]
            lpt = logits(ht32, wt, bt, a, z) - lse_t[:, None]
            pt = lpt.exp()
            kl_rows += (pt * (lpt - lps)).sum(-1, dtype=torch.float64)
            if need:
                dh += ((lps.exp() - pt) * wn[:, None]) @ ws[a:z].float()
        ctx.save_for_backward(dh if need else None)
        ctx.hs_dtype = hs.dtype
        return (kl_rows * wn.double()).sum().float()

    @staticmethod
    def backward(ctx, g):
        (dh,) = ctx.saved_tensors
        if dh is None:
            return (None,) * 9
        return (g * dh).to(ctx.hs_dtype), None, None, None, None, None, None, None, None


def sliced_kl(h_student, h_teacher, w_student, w_teacher=None, b_student=None,
              b_teacher=None, vocab_slice=8192, weights=None, weight_sum=None):
    """Mean over the rows of KL(p_teacher ‖ p_student) for logits h·Wᵀ + b, h [N][d],
    W [V][d], computed vocab_slice rows of W at a time (f32; memory N·vocab_slice);
    with weights [N] the weighted mean (weight 0: a row that does not count), divided
    by weight_sum where given rather than by the weights' sum (one process's share of
    a batch several processes split: the shares add up to the batch's mean).
    Differentiable in h_student; the heads are treated as constants."""
    if h_student.dim() != 2 or h_student.shape != h_teacher.shape:
        raise ValueError(f"sliced_kl: hidden states must be equal [N][d], got "
                         f"{tuple(h_student.shape)} and {tuple(h_teacher.shape)}")
    w_teacher = w_student if w_teacher is None else w_teacher
    if w_student.shape[1] != h_student.shape[1] or w_teacher.shape != w_student.shape:
        raise ValueError("sliced_kl: the heads must be [V][d] with the hidden states' d")
    if vocab_slice < 1:
        raise ValueError(f"sliced_kl: vocab_slice must be >= 1, got {vocab_slice}")
    if weights is not None and tuple(weights.shape) != (h_student.shape[0],):
        raise ValueError(f"sliced_kl: weights must be [N] = [{h_student.shape[0]}], got "
                         f"{tuple(weights.shape)}")
    return _SlicedKL.apply(h_student, h_teacher.detach(), w_student.detach(),
                           None if b_student is None else b_student.detach(),
                           w_teacher.detach(), None if b_teacher is None else b_teacher.detach(),
                           None if weights is None else weights.detach(), int(vocab_slice),
                           None if weight_sum is None else torch.as_tensor(weight_sum).detach())


# ----------------------------------------------------------------- the model's outputs

def _lm_head(model):
    """The output head of a causal LM (its nn.Linear over the vocabulary), else None."""
    if not type(model).__name__.endswith("ForCausalLM"):
        return None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return head if isinstance(head, nn.Linear) else None


def _base(model):
    prefix = getattr(model, "base_model_prefix", "")
    return getattr(model, prefix) if prefix and hasattr(model, prefix) else model


def _hidden(model, ids, mask):
    """The hidden states after each block (the last one after the final norm where the
    model has one, as transformers returns them)."""
    kw = {"input_ids": ids, "attention_mask": mask, "output_hidden_states": True}
    if getattr(model.config, "use_cache", None) is not None:
        kw["use_cache"] = False
    out = _base(model)(**kw)
    return list(out.hidden_states[1:])


# ----------------------------------------------------------------- the sharded teacher

def _fully_shard():
    """torch's FSDP2 fully_shard (torch.distributed.fsdp from torch 2.6, the
    _composable path before), or None where this torch has none."""
    try:
        from torch.distributed.fsdp import fully_shard
        return fully_shard
    except ImportError:
        pass
    try:
        from torch.distributed._composable.fsdp import fully_shard
        return fully_shard
    except ImportError:
        return None


def _is_fsdp(model):
    """Whether FSDP manages some module of `model` (its parameters are shards)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import FSDPModule
        except ImportError:
            return False
    return any(isinstance(m, FSDPModule) for m in model.modules())


def _shares_parameters(model, module):
    """Whether a parameter of `module` is also one of `model`'s elsewhere (a head tied
    to the input embeddings)."""
    mine = {id(p) for p in module.parameters()}
    seen = sum(1 for _, p in model.named_parameters(remove_duplicate=False) if id(p) in mine)
    return seen > len(mine)


class ShardedTeacher(nn.Module):
    """The teacher with its parameters sharded over the processes of the default
    process group by torch's FSDP2 (fully_shard): each process keeps 1/N of every
    parameter (DTensor shards, dim 0). The units: each repeated block (find_blocks),
    the output head where it is its own (not tied to the embeddings), and this module
    as the root, holding the rest (embeddings, final norm, a tied head). This module
    is the root rather than the teacher itself because distill calls the teacher's
    base model (not the causal LM's forward, which would form the whole [tokens][vocab]
    logits), and because fully_shard gives the module it wraps a class of its own,
    which transformers' output capturing (keyed by the class) would not know.

    forward(ids, mask) is the teacher's hidden states (_hidden), a block's
    parameters all-gathered by its pre-forward hook and freed by its post-forward
    hook, the root's around the whole forward: no more than the root's and one
    block's parameters are whole at a time. head() gathers the output head for the
    sliced KL, which reads its weight directly. All-gathers copy the shards: the
    numbers the forward sees are the teacher's own, so its outputs are the replicated
    teacher's bit for bit. Every process must run the same forwards in the same order
    (they are collectives): distill's are.

    The teacher passed in is sharded in place (its parameters are this process's
    shards afterwards, its block modules FSDP's) and stays so."""

    def __init__(self, teacher, device):
        super().__init__()
        fully_shard = _fully_shard()
        if fully_shard is None:
            raise ValueError("distill: teacher_shard needs torch's FSDP2 "
                             "(torch.distributed.fsdp.fully_shard, torch >= 2.4); this torch "
                             f"{torch.__version__} has none")
        from torch.distributed.device_mesh import init_device_mesh
        self.teacher = teacher
        mesh = init_device_mesh(torch.device(device).type, (distributed.size(),))
        try:
            _, blocks = find_blocks(teacher)
        except ValueError:  # no repeated blocks: the root unit holds everything
            blocks = []
        for block in blocks:
            fully_shard(block, mesh=mesh, reshard_after_forward=True)
        head = _lm_head(teacher)
        self._head_unit = None
        if head is not None and not _shares_parameters(teacher, head):
            fully_shard(head, mesh=mesh, reshard_after_forward=True)
            self._head_unit = head
        # reshard_after_forward=True for the root too: FSDP's default keeps the root's
        # parameters whole after the forward (for a backward that never comes here)
        fully_shard(self, mesh=mesh, reshard_after_forward=True)

    def forward(self, ids, mask):
        return _hidden(self.teacher, ids, mask)

    @contextlib.contextmanager
    def head(self):
        """The teacher's output head with its parameters whole, resharded on exit."""
        unit = self._head_unit if self._head_unit is not None else self
        unit.unshard()
        try:
            yield _lm_head(self.teacher)
        finally:
            unit.reshard()


def resident_parameter_bytes(model):
    """(this process's, whole) bytes of `model`'s parameters: a DTensor parameter (a
    sharded teacher's) counts its local shard in the first."""
    local = whole = 0
    for p in model.parameters():
        t = p.to_local() if hasattr(p, "to_local") else p
        local += t.numel() * t.element_size()
        whole += p.numel() * p.element_size()
    return local, whole


PARTS = ("total", "kl", "hidden", "embed")


def distill_loss(student, teacher, ids, mask, kl_weight=1.0, hidden_weight=1.0,
                 embed_weight=1.0, vocab_slice=8192, mask_to_models=True, reduce=None):
    """(loss, parts) of the student against the teacher on one batch: parts a detached
    f32 tensor [4] of the total and the kl, hidden and embed terms (left on the
    device: reading it waits for the GPU, so the training loop reads it only when it
    logs). mask_to_models=False: the models get no attention mask (right only when
    `mask` is all ones; the loss still weights by it). teacher: the original model,
    or a ShardedTeacher (distill's teacher_shard) whose parameters it gathers.

    reduce: this batch is one process's share of a batch that several processes
    split; reduce(t) sums a tensor over them. The loss's denominators (each block's
    teacher norm, the count of predicted tokens, of sequences) are then the whole
    batch's, and loss and parts are this share's part: the shares' losses add up to
    the whole batch's loss and their gradients to its gradient."""
    m = mask.to(torch.float32)
    model_mask = mask if mask_to_models else None
    sharded = isinstance(teacher, ShardedTeacher)
    with torch.no_grad():
        t_hid = teacher(ids, model_mask) if sharded else _hidden(teacher, ids, model_mask)
    s_hid = _hidden(student, ids, model_mask)
    if len(s_hid) != len(t_hid):
        raise ValueError(f"distill: the student has {len(s_hid)} hidden states, the teacher "
                         f"{len(t_hid)}")
    zero = torch.zeros((), device=ids.device)
    loss, kl, hidden, embed = None, zero, zero, zero
    mw = m.unsqueeze(-1)
    pos = (m[:, :-1] * m[:, 1:]).reshape(-1)  # position j predicts token j+1: both real
    dens = pos_sum = n_seq = None
    if reduce is not None:
        with torch.no_grad():
            dens = [(ht.float().pow(2) * mw).sum() for ht in t_hid] if hidden_weight else []
            stats = reduce(torch.stack(dens + [pos.sum(), m.new_tensor(float(ids.shape[0]))]))
        dens, pos_sum, n_seq = stats[:-2], stats[-2], stats[-1]
    if hidden_weight:
        hl = zero
        for i, (hs, ht) in enumerate(zip(s_hid, t_hid)):
            ht32 = ht.float()
            num = ((hs.float() - ht32).pow(2) * mw).sum()
            den = (ht32.pow(2) * mw).sum().clamp_min(1e-30) if dens is None else \
                dens[i].clamp_min(1e-30)
            hl = hl + num / den
        hidden = hl / len(s_hid)
        loss = hidden_weight * hidden
    head_s, head_t = _lm_head(student), _lm_head(teacher.teacher if sharded else teacher)
    if kl_weight and head_s is not None and head_t is not None:
        d = s_hid[-1].shape[-1]
        hs = s_hid[-1][:, :-1].reshape(-1, d)
        ht = t_hid[-1][:, :-1].reshape(-1, d)
        # the sliced KL reads the head's weight, not its forward: a sharded teacher's
        # head is gathered for it (the KL keeps nothing of it for the backward)
        with teacher.head() if sharded else contextlib.nullcontext(head_t) as head_t:
            kl = sliced_kl(hs, ht, head_s.weight, head_t.weight, head_s.bias, head_t.bias,
                           vocab_slice, weights=pos, weight_sum=pos_sum)
        loss = kl_weight * kl if loss is None else loss + kl_weight * kl
    elif embed_weight:
        es = (s_hid[-1].float() * mw).sum(1) / mw.sum(1).clamp_min(1)
        et = (t_hid[-1].float() * mw).sum(1) / mw.sum(1).clamp_min(1)
        gap = 1 - nn.functional.cosine_similarity(es, et, dim=-1)
        embed = gap.mean() if n_seq is None else gap.sum() / n_seq
        loss = embed_weight * embed if loss is None else loss + embed_weight * embed
    if loss is None:
        raise ValueError("distill: every loss term is off (kl_weight, hidden_weight, "
                         "embed_weight)")
    parts = torch.stack([loss.detach(), kl.detach(), hidden.detach(), embed.detach()]).float()
    return loss, parts


# ----------------------------------------------------------------- report

@dataclass
class DistillReport:
    steps: int = 0
    tokens: int = 0
    seconds: float = 0.0
    train_seconds: float = 0.0
    tokens_per_s: float = 0.0
    engine: str = ""
    device: str = ""
    sequences: int = 0
    heldout_sequences: int = 0
    best_step: int = 0
    eval_first: float = float("nan")
    eval_best: float = float("nan")
    resumed_from: int = 0
    stopped_at: int = 0  # the run ended here by stop_at, before `steps`
    cuda_graph: bool = False  # its steps after the first few were CUDA graph replays
    curve: list = field(default_factory=list)       # [step, lr factor, total, kl, hidden, embed]
    eval_curve: list = field(default_factory=list)  # [step, total, kl, hidden, embed] held out
    options: dict = field(default_factory=dict)

    def to_dict(self):
        return asdict(self)

    def table(self):
        out = [f"{'step':>6} {'lr':>6} {'loss':>9} {'kl':>9} {'hidden':>9} {'embed':>9}"
               "   (training, mean over the steps since the last row)"]
        for row in self.curve:
            out.append(f"{row[0]:>6} {row[1]:>6.3f} {row[2]:>9.5f} {row[3]:>9.5f} "
                       f"{row[4]:>9.5f} {row[5]:>9.5f}")
        if self.eval_curve:
            out.append("")
            out.append(f"{'step':>6} {'loss':>9} {'kl':>9} {'hidden':>9} {'embed':>9}"
                       "   (held-out calibration sequences)")
            for row in self.eval_curve:
                out.append(f"{row[0]:>6} {row[1]:>9.5f} {row[2]:>9.5f} {row[3]:>9.5f} "
                           f"{row[4]:>9.5f}")
        out.append("")
        out.append(f"{self.steps} steps ({self.engine}), {self.tokens} tokens, "
                   f"{self.tokens_per_s:.0f} tokens/s, {self.seconds:.1f} s on {self.device}; "
                   f"kept step {self.best_step} (held-out loss {self.eval_first:.5f} -> "
                   f"{self.eval_best:.5f})")
        return "\n".join(out)

    def __str__(self):
        return self.table()


# ----------------------------------------------------------------- the training

def _blr_modules(model):
    return [(n, m) for n, m in model.named_modules() if isinstance(m, BLRLinear)]


def _frozen_kind(name):
    low = name.lower()
    return any(k in low for k in ("embed", "lm_head", "wte", "wpe"))


def _to_train_form(student, device):
    """Each BLRLinear → _TrainBLR (latent ±1 reals for the signs). Returns their names."""
    names = []
    for name, mod in _blr_modules(student):
        lay = mod.to_layer()
        _set_module(student, name, _TrainBLR(lay, mod.bias).to(device))
        names.append(name)
    return names


def _from_train_form(student, names, device):
    for name in names:
        tm = student.get_submodule(name)
        lay = tm.to_layer()
        for part in "hlg":  # as the file stores them: the model in memory is the saved one
            lay[part] = lay[part].half().float()
        blr = BLRLinear.from_layer(lay, bias=tm.bias.detach() if tm.bias is not None else None,
                                   device=device)
        _set_module(student, name, blr)


def _options_key(opts):
    keep = ("engine", "steps", "lr", "sign_lr", "batch_size", "grad_accum", "kl_weight",
            "hidden_weight", "embed_weight", "train_other", "seed", "warmup", "sequences",
            "seq_len", "sign_mode", "flip_budget", "curvature")
    return {k: opts[k] for k in keep if k in opts}


def _save_checkpoint(path, state):
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def distill(student, teacher, data, tokenizer=None, steps=1000, batch_size=8, grad_accum=1,
            lr=5e-3, sign_lr=5e-3, n_samples=None, seq_len=128, heldout=0.0625,
            eval_data=None, kl_weight=1.0, hidden_weight=1.0, embed_weight=1.0,
            vocab_slice=8192, engine="torch", train_other=True, warmup=None, keep="best",
            eval_every=100, log_every=50, checkpoint_dir=None, checkpoint_every=200,
            resume=True, stop_at=None, device=None, seed=0, cuda_graph=True, progress=True,
            pack=True, sign_mode="latent", flip_budget=1e-3, curvature=1.0,
            teacher_shard=False):
    """Train `student` (a compressed model, its linears BLRLinear; changed in place)
    to reproduce `teacher` (the original model, not changed but for teacher_shard's
    sharding) on `data`.

    data: calibration as compress_model takes it (token ids [N][L], a dict, or text
      with `tokenizer`, cut into n_samples sequences of seq_len tokens, or with
      pack=False each text one sequence padded to seq_len); the last
      `heldout` fraction of the sequences (or eval_data, given as data is) is held
      out for the eval curve and for choosing the kept state (keep="best"; "last"
      keeps the final one).
    steps optimizer steps of batch_size sequences × grad_accum micro-batches; lr
      the scales' Adam step relative to each tensor's RMS (other parameters a tenth
      of it), sign_lr the latents' step (engine="torch"; latents start at ±1) or the
      library optimizer's sign step (engine="library"); warmup steps (default
      steps/20) then a cosine decay to 0.
    kl_weight, hidden_weight, embed_weight: the loss's terms (module docstring).
    checkpoint_dir: where the state is written every checkpoint_every steps and,
      with resume, read back at the start when it was written by a run with the same
      options (a run with other options there is refused). stop_at: end this run
      after that step (its checkpoint written; the schedule is still the one of
      `steps`), for jobs cut into time slots.
    sign_mode: "latent" (both engines: a latent real per sign, stepped by sign_lr) or,
      with engine="library", "exact": the library's exact-flip sign optimizer (no
      latents; a sign flips where the predicted change of the loss of flipping it
      alone, from its gradient and the layer's curvature sums, is negative, at most
      flip_budget of a sign matrix per step; `curvature` scales the prediction's
      quadratic term, the loss's second derivative in a layer's output).
    cuda_graph: on a CUDA device with engine="torch", the training step (the
      teacher's and the student's forward, the backward and Adam's step) is captured
      once as a CUDA graph and replayed: a small model's step is otherwise bound by
      the launch of its thousands of small kernels. Where the capture fails the run
      goes on without it (and says so).

    Under torchrun (several processes; bitrank.distributed): data parallel. Every
    process holds the whole student and the whole teacher (or its shard, with
    teacher_shard); each micro-batch of batch_size sequences is the one a single
    process draws, cut into contiguous slices, one per process (batch_size >= the
    number of processes). Each process's loss is its
    slice's share of the whole micro-batch's loss (denominators over the whole
    micro-batch: distill_loss's reduce), so the gradients, summed over the processes
    in rank order (distributed.all_reduce_fixed) before every optimizer step, are the
    whole batch's gradient: every process then takes the same step. Equal to one
    process up to the order of floating-point sums (the weight gradients add over
    fewer tokens per process, then over processes); the same bits run to run on the
    same number of processes. The held-out evaluation runs whole on every process.
    Logs, the report's printing and checkpoints come from rank 0. The library engine
    (its gradients live in the library) and CUDA graphs are one-process only.

    teacher_shard: on several processes, the teacher's parameters sharded over them
      (torch's FSDP2, ShardedTeacher) rather than whole on each: each process keeps
      about 1/N of them, and the teacher's forward all-gathers one block's at a time
      (and the embeddings', and the output head's for the KL), freeing them after.
      The teacher's outputs are the same numbers, so the run is the replicated run's
      bit for bit; it costs the all-gathers (each process receives the whole teacher
      once per teacher forward). The teacher is sharded in place and stays sharded
      (pass it with teacher_shard=True to a later distill on the same processes).
      It is still loaded whole by each process before it is sharded: the saving is
      for the run, not for the load's peak. On one process there is nothing to shard
      over: a warning, and the teacher stays whole.
    Returns a DistillReport."""
    t0 = time.time()
    distributed.ensure_initialised(device)
    world, me = distributed.size(), distributed.rank()
    several = world > 1
    if several and engine != "torch":
        raise ValueError(f"distill: engine={engine!r} keeps its gradients in the library; on "
                         f"{world} processes use engine='torch'")
    if several and batch_size < world:
        raise ValueError(f"distill: batch_size {batch_size} is split over {world} processes: "
                         f"it must be at least {world}")
    if engine not in ("torch", "library"):
        raise ValueError(f"distill: engine must be 'torch' or 'library', not {engine!r}")
    if sign_mode not in ("latent", "exact"):
        raise ValueError(f"distill: sign_mode must be 'latent' or 'exact', not {sign_mode!r}")
    if sign_mode == "exact" and engine != "library":
        raise ValueError("distill: sign_mode 'exact' is the library's sign optimizer: it needs "
                         "engine='library'")
    if sign_mode == "exact" and not (flip_budget > 0 and curvature > 0):
        raise ValueError("distill: sign_mode 'exact' needs flip_budget > 0 and curvature > 0")
    if keep not in ("best", "last"):
        raise ValueError(f"distill: keep must be 'best' or 'last', not {keep!r}")
    if steps < 0 or batch_size < 1 or grad_accum < 1:
        raise ValueError("distill: steps >= 0, batch_size >= 1 and grad_accum >= 1")
    if teacher_shard and not several:
        warnings.warn("distill: teacher_shard on one process (no process group of 2 or "
                      "more): nothing to shard over, the teacher stays whole", stacklevel=2)
        teacher_shard = False
    if isinstance(teacher, ShardedTeacher):
        teacher = teacher.teacher
    already = _is_fsdp(teacher)
    # a teacher sharded by an earlier run keeps its units (fully_shard runs once)
    wrapped = teacher.__dict__.get("_bitrank_sharded") if already else None
    if already and wrapped is None:
        raise ValueError("distill: the teacher is already sharded by FSDP, not by distill's "
                         "teacher_shard: pass it whole")
    if already and not teacher_shard:
        raise ValueError("distill: the teacher's parameters are sharded (FSDP, an earlier "
                         "distill with teacher_shard=True): pass teacher_shard=True on the "
                         "same processes")
    blr = _blr_modules(student)
    if not blr:
        raise ValueError("distill: the student has no BLRLinear layer (compress it first: "
                         "bitrank.compress_model)")
    if device is None:
        device = next(iter(blr))[1].h.device
    device = torch.device(device)
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if progress and me == 0 else \
        (lambda s: None)

    ids, mask = calibration_ids(data, tokenizer, n_samples, seq_len, pack)
    if eval_data is not None:
        e_ids, e_mask = calibration_ids(eval_data, tokenizer, None, ids.shape[1], pack)
        t_ids, t_mask = ids, mask
    else:
        n_hold = max(1, round(ids.shape[0] * heldout)) if heldout > 0 else 0
        if ids.shape[0] - n_hold < 1:
            raise ValueError(f"distill: {ids.shape[0]} sequences leave none to train on "
                             f"after holding out {n_hold}")
        t_ids, t_mask = ids[:ids.shape[0] - n_hold], mask[:ids.shape[0] - n_hold]
        e_ids, e_mask = ids[ids.shape[0] - n_hold:], mask[ids.shape[0] - n_hold:]
    if batch_size > t_ids.shape[0]:
        raise ValueError(f"distill: batch_size {batch_size} is more than the "
                         f"{t_ids.shape[0]} training sequences")
    warmup = max(1, steps // 20) if warmup is None else int(warmup)
    opts = dict(engine=engine, steps=steps, lr=lr, sign_lr=sign_lr, batch_size=batch_size,
                grad_accum=grad_accum, kl_weight=kl_weight, hidden_weight=hidden_weight,
                embed_weight=embed_weight, train_other=train_other, seed=seed, warmup=warmup,
                sequences=int(t_ids.shape[0]), seq_len=int(ids.shape[1]), keep=keep,
                vocab_slice=vocab_slice, sign_mode=sign_mode)
    if sign_mode == "exact":
        opts.update(flip_budget=flip_budget, curvature=curvature)
    if teacher_shard:
        opts["teacher_shard"] = True
    report = DistillReport(engine=engine, device=str(device), sequences=int(t_ids.shape[0]),
                           heldout_sequences=int(e_ids.shape[0]), options=opts)

    teacher.eval()
    if not already:
        teacher.to(device)
    for p in teacher.parameters():
        p.requires_grad_(False)
    if teacher_shard:
        if wrapped is None:
            wrapped = ShardedTeacher(teacher, device)
            # kept outside the module tree (object.__setattr__): the wrapper holds the
            # teacher, and the teacher must not list the wrapper as a submodule
            object.__setattr__(teacher, "_bitrank_sharded", wrapped)
        teacher = wrapped
    blr_ids = {id(p) for _, m in blr for p in m.parameters()}
    student_dtype = next((p.dtype for p in student.parameters()
                          if p.is_floating_point() and id(p) not in blr_ids), torch.float32)
    student.to(device)
    student.train(False)  # dropout off: the student is matched, not regularized
    cast_except_blr(student, torch.float32)

    # the same student on every process, whatever each one loaded
    distributed.broadcast_module(student, 0)
    names = []
    lib_opt = None
    if engine == "torch":
        names = _to_train_form(student, device)
        trained = [student.get_submodule(n) for n in names]
    else:
        trained = [m for _, m in blr]
        for m in trained:
            m.sign_grads = True
            m.curvature = sign_mode == "exact"
    groups = []
    seen = set()
    for m in trained:
        for par in (m.h, m.l, m.g):
            seen.add(id(par))
            if engine == "torch":
                rms = float(par.detach().pow(2).mean().sqrt()) or 1e-3
                groups.append({"params": [par], "lr": lr * rms, "base": lr * rms})
            par.requires_grad_(True)
        if engine == "torch":
            for par in (m.lat_u, m.lat_v):
                seen.add(id(par))
                par.requires_grad_(sign_lr > 0)
            if sign_lr > 0:
                groups.append({"params": [m.lat_u, m.lat_v], "lr": sign_lr, "base": sign_lr})
    for name, par in student.named_parameters():
        if id(par) in seen:
            continue
        if train_other and not _frozen_kind(name):
            par.requires_grad_(True)
            rms = float(par.detach().pow(2).mean().sqrt()) or 1e-3
            groups.append({"params": [par], "lr": 0.1 * lr * rms, "base": 0.1 * lr * rms})
        else:
            par.requires_grad_(False)
    graphed = bool(cuda_graph) and device.type == "cuda" and engine == "torch" and \
        bool(groups) and not several
    lr_base = lr_now = sched = None
    if graphed:
        # the learning rates live on the device, one element of lr_now per group,
        # recomputed inside the captured step from the schedule factor `sched`
        lr_base = torch.tensor([gr["base"] for gr in groups], device=device)
        lr_now = lr_base.clone()
        sched = torch.ones((), device=device)
        for i, gr in enumerate(groups):
            gr["lr"] = lr_now[i]
    opt = torch.optim.Adam(groups, betas=(0.9, 0.999), fused=device.type == "cuda",
                           capturable=graphed) if groups else None
    if engine == "library":
        # steps relative to each scale's magnitude (rel_floor), latents from ±1: the
        # torch engine's lr and sign_lr mean the same there
        signs = dict(sign_mode="latent" if sign_lr > 0 else "off", sign_tau=1.0)
        if sign_mode == "exact":
            signs = dict(sign_mode="exact", flip_budget=flip_budget, curvature=curvature)
        lib_opt = LibraryOptimizer(trained, lr=lr, sign_lr=sign_lr,
                                   rel_floor=(1e-6, 1e-6, 1e-6), **signs)

    # the sequences of every micro-batch of the run, drawn at the start: a new random
    # order of the training sequences each epoch, batches taken in turn (a resumed run
    # draws the same). On the device in one copy, so no step waits on a transfer.
    gen = torch.Generator().manual_seed(seed)
    n_train = t_ids.shape[0]
    per_epoch = n_train // batch_size
    n_micro = steps * grad_accum
    order = torch.cat([torch.randperm(n_train, generator=gen)[:per_epoch * batch_size]
                       for _ in range(math.ceil(n_micro / per_epoch))]) if n_micro else \
        torch.zeros(0, dtype=torch.long)
    picks = order[:n_micro * batch_size].reshape(n_micro, batch_size)
    tokens_of = t_mask[picks].sum((1, 2)).tolist() if n_micro else []
    lo, hi = distributed.shard(batch_size, world, me)
    picks = picks[:, lo:hi]  # this process's slice of every micro-batch
    reduce = None
    if several:
        def reduce(t):
            return distributed.all_reduce_fixed([t.clone()])[0]
    t_ids_dev, t_mask_dev, picks_dev = t_ids.to(device), t_mask.to(device), picks.to(device)
    start = 0
    best = None
    resumed_window = ([0.0] * 4, 0)
    ckpt = os.path.join(checkpoint_dir, CHECKPOINT) if checkpoint_dir else None
    if ckpt and resume and os.path.exists(ckpt):
        state = torch.load(ckpt, map_location=device, weights_only=False)
        if state.get("options") != _options_key(opts):
            raise ValueError(f"distill: {ckpt} was written by a run with other options "
                             f"({state.get('options')}); use another checkpoint_dir or "
                             f"resume=False")
        if engine == "library":
            raise ValueError("distill: resuming the library engine is not supported (its "
                             "optimizer state lives in the library)")
        student.load_state_dict(state["student"])
        if opt is not None:
            opt.load_state_dict(state["opt"])
            if graphed:  # the loaded groups hold copies: point them back at lr_now
                for i, gr in enumerate(opt.param_groups):
                    gr["lr"] = lr_now[i]
        start = state["step"]
        report.curve, report.eval_curve = state["curve"], state["eval_curve"]
        report.tokens = state["tokens"]
        best = state["best"]
        if best is not None:
            best = (best[0], best[1], best[2])
        resumed_window = (state["window"], state["wcount"])
        report.resumed_from = start
        log(f"distill: resumed at step {start} from {ckpt}")
    elif ckpt and me == 0:
        os.makedirs(checkpoint_dir, exist_ok=True)

    # full masks (text cut into windows): the models get none, so their attention
    # takes the plain causal path (and nothing in the step reads the mask's values)
    full = bool(t_mask.all()) and bool(e_mask.all())

    def evaluate():
        # the mean over the held-out sequences: each batch's mean weighted by its
        # sequences (the last batch may be short)
        acc = torch.zeros(4, device=device)
        with torch.no_grad():
            for i in range(0, e_ids.shape[0], batch_size):
                x = e_ids[i:i + batch_size]
                _, p = distill_loss(student, teacher, x.to(device),
                                    e_mask[i:i + batch_size].to(device), kl_weight,
                                    hidden_weight, embed_weight, vocab_slice,
                                    mask_to_models=not full)
                acc += p * x.shape[0]
        return [float(v) / e_ids.shape[0] for v in acc.cpu()]

    def snapshot():
        return {k: v.detach().clone() for k, v in student.state_dict().items()}

    if e_ids.shape[0] and start == 0:
        first = evaluate()
        report.eval_curve.append([0] + first)
        best = (first[0], 0, snapshot() if keep == "best" else None)
    # one optimizer step on the micro-batches whose sequences are in step_pick
    # [grad_accum][batch_size]; its loss parts in step_parts. Written to run as it is
    # or captured: nothing in it waits for the device or depends on a value there.
    step_pick = torch.zeros(grad_accum, hi - lo, dtype=torch.long, device=device)
    step_parts = torch.zeros(4, device=device)

    def train_step():
        step_parts.zero_()
        if graphed:
            torch.mul(lr_base, sched, out=lr_now)
        for j in range(grad_accum):
            bi, bm = t_ids_dev[step_pick[j]], t_mask_dev[step_pick[j]]
            with torch.enable_grad():
                loss, parts = distill_loss(student, teacher, bi, bm, kl_weight, hidden_weight,
                                           embed_weight, vocab_slice, mask_to_models=not full,
                                           reduce=reduce)
                (loss / grad_accum).backward()
            step_parts.add_(parts / grad_accum)
        if several and opt is not None:  # the shares add up to the whole batch's
            distributed.all_reduce_fixed([p.grad for gr in opt.param_groups
                                          for p in gr["params"]] + [step_parts])
        if opt is not None:
            opt.step()
        if lib_opt is not None:
            lib_opt.step()

    graph = None
    eager_left = 3  # steps run before the capture (they also initialize Adam's state)
    side = torch.cuda.Stream(device) if graphed else None
    window, wcount = resumed_window  # the curve's running mean, as the checkpoint had it
    window = torch.tensor(window, device=device)
    t_train = time.time()
    tok_run = 0
    for step in range(start + 1, steps + 1):
        f = step / warmup if step <= warmup else \
            0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))
        if graphed:
            sched.fill_(f)
        elif opt is not None:
            for gr in opt.param_groups:
                gr["lr"] = gr["base"] * f
        if lib_opt is not None:
            lib_opt.set_lr(lr * f, sign_lr * f)
        if lib_opt is not None:
            lib_opt.zero_grad()
        step_pick.copy_(picks_dev[(step - 1) * grad_accum:step * grad_accum])
        if graph is not None:
            graph.replay()
        elif graphed and eager_left > 0:
            # warm-up steps on a side stream, as a capture wants them
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                opt.zero_grad(set_to_none=True)
                train_step()
            torch.cuda.current_stream(device).wait_stream(side)
            eager_left -= 1
        elif graphed:
            opt.zero_grad(set_to_none=True)  # the captured backward makes the grads
            try:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    train_step()
                graph = g
                graph.replay()
            except Exception as e:  # noqa: BLE001 (any failure: go on without the graph)
                log(f"distill: the CUDA graph capture failed ({type(e).__name__}: "
                    f"{str(e).splitlines()[0] if str(e) else ''}); going on without it")
                graphed = False
                torch.cuda.synchronize(device)
                for gr in opt.param_groups:  # this step's rates, as the eager steps set them
                    gr["lr"] = gr["base"] * f
                opt.zero_grad(set_to_none=True)
                train_step()
        else:
            if opt is not None:
                opt.zero_grad(set_to_none=True)
            train_step()
        for k in range((step - 1) * grad_accum, step * grad_accum):
            report.tokens += tokens_of[k]
            tok_run += tokens_of[k]
        window += step_parts
        wcount += 1
        if step % log_every == 0 or step == steps:
            mean = [float(v) / wcount for v in window.cpu()]
            if not all(math.isfinite(v) for v in mean):
                raise FloatingPointError(f"distill: the loss is not finite (steps "
                                         f"{step - wcount + 1}..{step})")
            row = [step, round(f, 4)] + mean
            report.curve.append(row)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            rate = tok_run / max(1e-9, time.time() - t_train)
            log(f"distill step {step}/{steps}: loss {row[2]:.5f} (kl {row[3]:.5f}, hidden "
                f"{row[4]:.5f}, embed {row[5]:.5f}), lr x{f:.3f}, {rate:.0f} tokens/s")
            window, wcount = torch.zeros(4, device=device), 0
        if e_ids.shape[0] and (step % eval_every == 0 or step == steps):
            ev = evaluate()
            report.eval_curve.append([step] + ev)
            if best is None or ev[0] < best[0]:
                best = (ev[0], step, snapshot() if keep == "best" else None)
        stop = stop_at is not None and step >= stop_at and step < steps
        write = ckpt and (step % checkpoint_every == 0 or step == steps or stop) and \
            engine == "torch"
        if write and me == 0:
            _save_checkpoint(ckpt, {"options": _options_key(opts), "step": step,
                                    "student": student.state_dict(),
                                    "opt": opt.state_dict() if opt is not None else None,
                                    "curve": report.curve,
                                    "eval_curve": report.eval_curve, "tokens": report.tokens,
                                    "best": best, "window": window.tolist(),
                                    "wcount": wcount})
        if write:
            distributed.barrier()  # no process reads it before it is whole
        if stop:
            report.stopped_at = step
            break
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    report.cuda_graph = graph is not None
    report.train_seconds = time.time() - t_train
    report.tokens_per_s = tok_run / report.train_seconds if tok_run else 0.0
    report.steps = report.stopped_at or steps
    if best is not None:
        report.eval_first = report.eval_curve[0][1] if report.eval_curve else float("nan")
        report.eval_best = best[0]
        report.best_step = best[1] if keep == "best" else steps
        if keep == "best" and best[2] is not None and best[1] != report.steps:
            student.load_state_dict(best[2])
    else:
        report.best_step = steps
    if lib_opt is not None:
        lib_opt.free()
        for m in trained:
            m.sign_grads = m.curvature = False
            m.grad_u = m.grad_v = m.sum_a2 = m.sum_x2 = None
    if engine == "torch":
        _from_train_form(student, names, device)
    for par in student.parameters():
        par.requires_grad_(False)
        par.grad = None
    cast_except_blr(student, student_dtype)
    student.eval()
    report.seconds = time.time() - t0
    return report
