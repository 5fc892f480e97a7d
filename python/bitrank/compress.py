"""compress_model: a transformers model's linears into BLRLinear, block by block
through the model's own forward pass.

Sequential, as GPTQ-style calibration and block-wise reconstruction work: block i
sees the hidden states that blocks < i, already compressed, produce. For each block:

  1. its inputs X (the compressed prefix's hidden states on the calibration), and
     the target Y it should produce: the original block applied to X
     (target="block") or the original model's hidden state there (target="model");
  2. each selected nn.Linear of the block is compressed by the C library
     (br_compress_matrix: the best of plain, channel-scaled and whitened Dual-SVID on
     its inputs under X, then trained on them alone) — the per-layer path;
  3. the block's compressed linears are trained jointly (signs through latent reals
     with a straight-through estimator, h, l, g and the block's other parameters by
     Adam) so the block's output matches Y, autograd through attention, norms and
     activations, on per-token relative errors; the state with the lowest error on
     held-out calibration sequences is kept;
  4. the block's linears become BLRLinear modules (run by the library), and X for
     the next block is what the compressed block now outputs.

The report gives, per layer, the library's per-layer errors and the layer's output
error inside the finished model, and per block the output error before and after
the joint training, all on held-out calibration sequences.
"""
import copy
import ctypes
import math
import sys
import time
from dataclasses import dataclass, field, asdict

import torch
from torch import nn

from . import _lib
from . import distributed
from . import layout
from .calib import calibration_ids
from .torch import BLRLinear, cast_except_blr


class _Stop(Exception):
    pass


@dataclass
class LayerResult:
    name: str
    m: int
    n: int
    rank: int
    paths: int
    bpw: float
    init_kind: str = ""
    err_init: float = float("nan")    # library, after Dual-SVID (its held-out tokens)
    err_layer: float = float("nan")   # library, after per-layer training
    err_model: float = float("nan")   # output error inside the finished block, held out
    seconds: float = 0.0


@dataclass
class BlockResult:
    index: int
    name: str
    err_layerwise: float = float("nan")  # block output error after per-layer compression
    err_trained: float = float("nan")    # after the joint training (the state kept)
    steps: int = 0
    best_step: int = 0
    loss_first: float = 0.0  # mean training loss (relative squared error) of the first 20 steps
    loss_last: float = 0.0   # and of the last 20
    seconds: float = 0.0


@dataclass
class CompressReport:
    layers: list = field(default_factory=list)
    blocks: list = field(default_factory=list)
    bpw: float = 0.0
    params_compressed: int = 0
    seconds: float = 0.0
    device: str = ""
    calib_sequences: int = 0
    calib_tokens: int = 0
    heldout_sequences: int = 0
    options: dict = field(default_factory=dict)

    def to_dict(self):
        return asdict(self)

    def table(self):
        """The per-layer and per-block table as text."""
        out = []
        out.append(f"{'layer':<48} {'shape':>11} {'rank':>5} {'bpw':>6} {'init':>7} "
                   f"{'layer':>7} {'model':>7}")
        for r in self.layers:
            out.append(f"{r.name[-48:]:<48} {f'{r.m}x{r.n}':>11} {r.rank:>5} {r.bpw:>6.3f} "
                       f"{r.err_init:>7.4f} {r.err_layer:>7.4f} {r.err_model:>7.4f}")
        out.append("")
        out.append(f"{'block':<48} {'layer-wise':>11} {'trained':>8} {'steps':>6} {'best':>5} "
                   f"{'s':>6}")
        for b in self.blocks:
            out.append(f"{b.name[-48:]:<48} {b.err_layerwise:>11.4f} {b.err_trained:>8.4f} "
                       f"{b.steps:>6} {b.best_step:>5} {b.seconds:>6.1f}")
        out.append("")
        out.append(f"{len(self.layers)} layers, {self.params_compressed} weights at "
                   f"{self.bpw:.3f} bits per weight; {self.calib_sequences} calibration "
                   f"sequences ({self.calib_tokens} tokens, {self.heldout_sequences} held out); "
                   f"{self.seconds:.1f} s on {self.device}")
        out.append("errors: relative output error ||y' - y|| / ||y|| on held-out calibration "
                   "sequences; init, layer: the library's per-layer errors (inputs of the "
                   "compressed prefix); model: inside the finished model against the original "
                   "layer on the same inputs; block: against the block's target")
        return "\n".join(out)

    def __str__(self):
        return self.table()


# ----------------------------------------------------------------- model structure

def find_blocks(model):
    """(name, ModuleList) of the model's repeated blocks: the ModuleList of modules of
    one class holding linears with the most parameters (encoder.layer of BERT,
    model.layers of Llama/Qwen)."""
    best = None
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) >= 1:
            if len({type(c) for c in mod}) != 1:
                continue
            if not any(isinstance(x, nn.Linear) for x in mod[0].modules()):
                continue
            size = sum(p.numel() for p in mod.parameters())
            if best is None or size > best[2]:
                best = (name, mod, size)
    if best is None:
        raise ValueError("compress_model: the model has no repeated blocks with linear layers "
                         "(a ModuleList of one block class)")
    return best[0], best[1]


def _default_skip(rel_name):
    low = rel_name.lower()
    return any(k in low for k in ("embed", "lm_head", "norm", "wte", "wpe"))


def _selected_linears(block, include, exclude):
    import fnmatch
    sel = []
    for rel, mod in block.named_modules():
        if not isinstance(mod, nn.Linear):
            continue
        if any(fnmatch.fnmatch(rel, p) for p in (exclude or [])):
            continue
        if include and not any(fnmatch.fnmatch(rel, p) for p in include):
            continue
        if not include and _default_skip(rel):
            continue
        sel.append((rel, mod))
    return sel


def _set_module(root, rel, new):
    parent_name, _, leaf = rel.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, leaf, new)


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


# ----------------------------------------------------------------- the trainable form

class _SignSTE(torch.autograd.Function):
    """sign(latent) (0 -> +1) forward; the gradient passes straight through."""

    @staticmethod
    def forward(ctx, lat):
        return torch.where(lat >= 0, 1.0, -1.0).to(lat.dtype)

    @staticmethod
    def backward(ctx, g):
        return g


class _TrainBLR(nn.Module):
    """A BLR linear during the joint training: latent reals whose signs are S_U, S_V."""

    def __init__(self, layer, bias, tau=1.0):
        super().__init__()
        r = int(layer["rank"])
        self.rank = r
        su = layout.unpack_signs(layer["u"], r)
        sv = layout.unpack_signs(layer["v"], r)
        self.lat_u = nn.Parameter(su * tau)
        self.lat_v = nn.Parameter(sv * tau)
        self.h = nn.Parameter(layer["h"].float().clone())
        self.l = nn.Parameter(layer["l"].float().clone())
        self.g = nn.Parameter(layer["g"].float().clone())
        self.bias = nn.Parameter(bias.detach().float().clone()) if bias is not None else None

    def forward(self, x):
        dt = x.dtype
        x2 = x.float()
        su = _SignSTE.apply(self.lat_u)
        sv = _SignSTE.apply(self.lat_v)
        y = 0
        for p in range(su.shape[0]):
            a = (x2 * self.g[p]) @ sv[p]
            y = y + ((a * self.l[p]) @ su[p].transpose(0, 1)) * self.h[p]
        if self.bias is not None:
            y = y + self.bias
        return y.to(dt)

    def to_layer(self):
        with torch.no_grad():
            return {"u": layout.pack_signs(self.lat_u.detach()).cpu(),
                    "v": layout.pack_signs(self.lat_v.detach()).cpu(),
                    "h": self.h.detach().float().cpu(), "l": self.l.detach().float().cpu(),
                    "g": self.g.detach().float().cpu(), "rank": self.rank}


# ----------------------------------------------------------------- the library's layer

def _layer_from_host(host):
    m, n, r, P = host.m, host.n, host.r, host.paths
    rw = (r + 31) // 32
    u = torch.empty(P, m, (r + 7) // 8, dtype=torch.uint8)
    v = torch.empty(P, n, (r + 7) // 8, dtype=torch.uint8)
    h, l, g = torch.empty(P, m), torch.empty(P, r), torch.empty(P, n)

    def arr(ptr, count, ctype, dtype):
        buf = ctypes.cast(ptr, ctypes.POINTER(ctype * count)).contents
        return torch.frombuffer(bytearray(buf), dtype=dtype).clone()

    for p in range(P):
        ph = host.path[p]
        u[p] = layout.bytes_from_words(arr(ph.bits_u, m * rw, ctypes.c_uint32, torch.int32)
                                       .reshape(m, rw), r)
        v[p] = layout.bytes_from_words(arr(ph.bits_v, n * rw, ctypes.c_uint32, torch.int32)
                                       .reshape(n, rw), r)
        h[p] = arr(ph.h, m, ctypes.c_float, torch.float32)
        l[p] = arr(ph.l, r, ctypes.c_float, torch.float32)
        g[p] = arr(ph.g, n, ctypes.c_float, torch.float32)
    return {"u": u, "v": v, "h": h, "l": l, "g": g, "rank": r}


def compress_linear(weight, inputs, bpw=1.0, paths=2, rank=None, steps=None, device="cpu",
                    name="linear", seed=1, **opts):
    """One linear through the library's per-layer path (br_compress_matrix): weight
    [m][n], its inputs [tokens][n] (the last quarter, at most 1024, held out for the
    report). Returns (layout dict, library report dict)."""
    L = _lib.lib()
    ctx = _lib.context(device)
    o = _lib.CompressOpts()
    L.br_compress_opts_default(ctypes.byref(o))
    o.bpw = float(bpw)
    o.paths = int(paths)
    o.rank = int(rank or 0)
    o.seed = int(seed)
    if steps is not None:
        o.steps = int(steps)
    for k, val in opts.items():
        if not hasattr(o, k):
            raise ValueError(f"compress_linear: unknown library option {k!r}")
        setattr(o, k, val)
    w = weight.detach().float().cpu().contiguous()
    m, n = w.shape
    x = inputs.detach().float().cpu().contiguous() if inputs is not None else None
    host = _lib.BlrHost()
    rep = _lib.LayerReport()
    st = L.br_compress_matrix(ctx.ptr, name.encode(), _lib.P(w.data_ptr()), m, n,
                              _lib.P(x.data_ptr()) if x is not None else None,
                              x.shape[0] if x is not None else 0, None, ctypes.byref(o),
                              ctypes.byref(host), ctypes.byref(rep))
    try:
        ctx.check(st)
        layer = _layer_from_host(host)
    finally:
        L.br_blr_host_free(ctypes.byref(host))
        libc = ctypes.CDLL(None)
        libc.free.argtypes = [ctypes.c_void_p]
        for ptr in (rep.loss, rep.eval):
            if ptr:
                libc.free(ctypes.cast(ptr, ctypes.c_void_p))
    info = {"err_init": rep.err_init, "err_trained": rep.err_trained,
            "weight_err": rep.weight_err, "init_kind": rep.init_kind.decode(),
            "outcome": rep.outcome, "note": rep.note.decode(errors="replace"),
            "steps": rep.steps, "rank": rep.rank, "bpw": rep.bpw, "seconds": rep.seconds}
    return layer, info


# ----------------------------------------------------------------- the job

def _rel_err(y_hat, y, valid):
    """Per-token relative squared error, mean over valid tokens (each token's error
    relative to its own output, floored at a tenth of the mean: massive tokens do not
    decide the fit for the rest)."""
    d = (y_hat.float() - y.float())[valid]
    yy = y.float()[valid]
    n2 = (yy * yy).sum(-1)
    floor = 0.1 * n2.mean()
    return ((d * d).sum(-1) / torch.clamp(n2, min=float(floor) + 1e-30)).mean()


def _rel_err_share(y_hat, y, valid, lo, hi):
    """_rel_err of a batch whose sequences lo:hi gave y_hat: this slice's part of the
    mean (the floor and the count of tokens are the whole batch's), so the slices'
    parts add up to _rel_err of the batch."""
    yy = y.float()[valid]
    floor = 0.1 * (yy * yy).sum(-1).mean()
    y_s = y[lo:hi].float()[valid[lo:hi]]
    d = (y_hat.float() - y[lo:hi].float())[valid[lo:hi]]
    n2 = (y_s * y_s).sum(-1)
    return ((d * d).sum(-1) / torch.clamp(n2, min=float(floor) + 1e-30)).sum() / yy.shape[0]


def _agg_err(num, den):
    return math.sqrt(num / den) if den > 0 else float("nan")


def _call(block, x, rest, kw):
    return _first(block(x, *rest, **kw))


def _run_model_to_block(model, blocks, ids, mask, batch, device, ranges=None):
    """The first block's inputs for each calibration batch: (x, rest args, kwargs);
    with ranges [(lo, hi)], one per batch, for those sequences of each batch."""
    store = []

    def pre(_mod, args, kwargs):
        kwargs = dict(kwargs)
        if args:
            x, rest = args[0], tuple(args[1:])
        else:
            x, rest = kwargs.pop("hidden_states"), ()
        store.append((x.detach(), rest, kwargs))
        raise _Stop

    handle = blocks[0].register_forward_pre_hook(pre, with_kwargs=True)
    try:
        with torch.no_grad():
            for k, i in enumerate(range(0, ids.shape[0], batch)):
                a, z = (i, i + batch) if ranges is None else (i + ranges[k][0], i + ranges[k][1])
                kw = {"input_ids": ids[a:z].to(device),
                      "attention_mask": mask[a:z].to(device)}
                if getattr(model.config, "use_cache", None) is not None:
                    kw["use_cache"] = False
                try:
                    model(**kw)
                except _Stop:
                    pass
                else:
                    raise RuntimeError("compress_model: the forward pass never reached the "
                                       "first block")
    finally:
        handle.remove()
    return store


def compress_model(model, calibration, tokenizer=None, bpw=1.0, paths=2, n_samples=None,
                   seq_len=128, device=None, steps=400, lr=2e-2, sign_lr=2e-2, batch_size=8,
                   heldout=0.125, layer_steps=None, target="block", train_other=True,
                   include=None, exclude=None, max_layer_tokens=16384, eval_every=50,
                   seed=0, progress=True, layer_options=None, pack=True, split_joint=False):
    """Compress `model` (a transformers model; changed in place) into BLRLinear layers.

    calibration: token ids [N][L], a dict with input_ids/attention_mask, or text (a
      list of strings or a dataset; needs `tokenizer`), cut into n_samples (default
      128 for text) sequences of seq_len tokens; pack=False: each text one sequence,
      padded (bitrank.calib.calibration_ids).
    bpw, paths: bits per weight per layer, one or two paths (each layer's rank is the
      largest within the budget).
    steps: joint training steps per block (0: the per-layer path alone), lr the
      scales' Adam step relative to their RMS, sign_lr the latents' step (latents
      start at ±1), batch_size sequences per step; heldout the fraction of the
      calibration sequences held out for the report and for choosing the kept state.
    layer_steps: the library's per-layer training steps (None: its default; 0: the
      initialization only). layer_options: more br_compress_opts fields by name.
    target: "block" (the original block on the compressed prefix's hidden states) or
      "model" (the original model's hidden states).
    train_other: also train the block's other parameters (norms, biases) jointly.
    include / exclude: glob patterns on a linear's name inside its block
      ("attention.self.query", "mlp.down_proj"); by default every nn.Linear but heads.

    Under torchrun (a process group of N > 1 processes, or WORLD_SIZE > 1: one is
    started, bitrank.distributed) every process loads the model and the calibration
    and calls this with the same arguments. Each block's calibration forward (the
    targets, each linear's recorded inputs, and the finished block's outputs) runs
    sharded by whole batches, batch b on process b mod N; the targets and the next
    block's inputs go to every process, each linear's recorded rows to the process
    that compresses it (distributed.schedule: largest m·n·(tokens + min(m, n))
    first, to the least loaded process), and each compressed linear from there to
    every process, in the block's order, before the joint training. The joint
    training runs whole on every process (each step is one batch: splitting it would
    change the order of the weight gradients' sums), unless split_joint: then each
    step's batch is cut into contiguous slices of sequences, one per process (every
    batch must hold at least N sequences), each process's loss is its slice's share of
    the batch's (the per-token error floor and the token count are the whole
    batch's), and the gradients are summed in rank order before each step; equal to
    one process within rounding, not bit for bit (and the next block's per-layer
    path, on inputs that differ by that rounding, may choose other signs: the errors
    agree, not the weights). Without split_joint the result — every tensor of the
    model and every number of the report but its times — is the one process's, bit
    for bit, on every process: each batch's forward is the computation one process
    does, the per-layer statistics are the recorded rows themselves concatenated in
    batch order (no sums), the generator that draws subsets and batches moves the
    same way on every process, and the report's sums are added in batch order. N
    processes shorten the block forwards and the per-layer path (at most one process
    per linear), and with split_joint the joint training. Logs come from rank 0.
    Returns a CompressReport; the model's compressed linears are BLRLinear."""
    t0 = time.time()
    distributed.ensure_initialised(device)
    world, me = distributed.size(), distributed.rank()
    several = world > 1
    if target not in ("block", "model"):
        raise ValueError(f"compress_model: target must be 'block' or 'model', not {target!r}")
    if paths not in (1, 2):
        raise ValueError(f"compress_model: paths must be 1 or 2, not {paths}")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    lib_device = "cpu" if device.type == "cpu" else f"cuda:{device.index}"
    import bitrank
    if device.type == "cpu" and bitrank.TORCH_OPENMP_SPINS and me == 0:
        import warnings
        warnings.warn("bitrank: torch was imported before bitrank without OMP_WAIT_POLICY=PASSIVE "
                      "in the environment; on the CPU the library and torch then share OpenMP "
                      "threads that spin, many times slower. Import bitrank first or set "
                      "OMP_WAIT_POLICY=PASSIVE.", RuntimeWarning, stacklevel=2)
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if progress and me == 0 else \
        (lambda s: None)

    ids, mask = calibration_ids(calibration, tokenizer, n_samples, seq_len, pack)
    n_seq = ids.shape[0]
    n_batches = math.ceil(n_seq / batch_size)
    n_hold = max(1, round(n_batches * heldout)) if heldout > 0 else 0
    if n_batches - n_hold < 1:
        raise ValueError(f"compress_model: {n_seq} calibration sequences are too few for "
                         f"batches of {batch_size} with a held-out part (heldout={heldout})")
    train_b = list(range(n_batches - n_hold))
    hold_b = list(range(n_batches - n_hold, n_batches))
    # several processes: each runs the blocks' forward on its share of the calibration
    # batches (round robin), whole batches, so each batch's forward is the computation
    # one process does
    owner_b = [b % world for b in range(n_batches)]

    def mine(b):
        return owner_b[b] == me

    model.eval()
    model.to(device)
    blocks_name, blocks = find_blocks(model)
    store = _run_model_to_block(model, blocks, ids, mask, batch_size, device)
    valid = [mask[i:i + batch_size].to(device).bool() for i in range(0, n_seq, batch_size)]
    xs = [s[0].float() for s in store]
    rests = [s[1] for s in store]
    kws = [s[2] for s in store]
    xs_orig = [x.clone() for x in xs] if target == "model" else None
    gen = torch.Generator().manual_seed(seed)
    split = several and split_joint
    if split:
        sizes = [int(v.shape[0]) for v in valid]
        if min(sizes) < world:
            raise ValueError(f"compress_model: split_joint cuts each batch over {world} "
                             f"processes, but a batch has {min(sizes)} sequences")
        cuts = [distributed.shard(n, world, me) for n in sizes]
        # the block's other arguments as the model gives them for this process's slice
        # of each batch (masks, positions: whatever it passes, cut by the model itself)
        sub = _run_model_to_block(model, blocks, ids, mask, batch_size, device, cuts)
        rests_s = [t[1] for t in sub]
        kws_s = [t[2] for t in sub]
        sub = None

    report = CompressReport(device=str(device), calib_sequences=n_seq,
                            calib_tokens=int(mask.sum()),
                            heldout_sequences=sum(int(valid[b].shape[0]) for b in hold_b),
                            options=dict(bpw=bpw, paths=paths, steps=steps, lr=lr,
                                         sign_lr=sign_lr, batch_size=batch_size,
                                         layer_steps=layer_steps, target=target,
                                         train_other=train_other, seed=seed, seq_len=seq_len,
                                         **({"split_joint": True} if split else {})))
    bits_total = 0.0
    for bi, block in enumerate(blocks):
        tb = time.time()
        bname = f"{blocks_name}.{bi}"
        orig = copy.deepcopy(block).float().eval()
        for p in orig.parameters():
            p.requires_grad_(False)
        sel = _selected_linears(orig, include, exclude)
        if not sel:
            log(f"{bname}: no linear selected")
        # 1. the targets, and each linear's inputs under the compressed prefix
        recs = {rel: ([], []) for rel, _ in sel}  # (training tokens, held-out tokens)
        cur = {"b": 0}
        # Far more calibration than the library is given (an LLM's 262k tokens of 11008
        # inputs would be 11 GB per linear on the host): a random subset of the training
        # tokens, drawn once per block for all its linears (its own generator: the rest
        # of the job draws the same either way), and the first 1024 held-out tokens.
        n_tok = {b: int(valid[b].sum()) for b in range(n_batches)}
        f_train = 1.25 * max_layer_tokens / max(1, sum(n_tok[b] for b in train_b))
        sub_gen = torch.Generator().manual_seed(seed * 1000003 + bi)
        keep = {b: torch.rand(n_tok[b], generator=sub_gen) < f_train
                if f_train < 0.8 and b not in hold_b else None for b in range(n_batches)}

        per_b = {rel: {} for rel, _ in sel}  # several processes: rows by batch, shared later

        def rec_hook(rel):
            def hook(_m, args):
                x, b = args[0], cur["b"]
                if x.dim() == 3:
                    rows = x[valid[b]]
                    if keep[b] is not None:
                        rows = rows[keep[b].to(rows.device)]
                else:
                    rows = x.reshape(-1, x.shape[-1])
                if several:
                    per_b[rel][b] = (rows[:1024] if b in hold_b else rows).detach().float().cpu()
                    return
                train_rows, hold_rows = recs[rel]
                if b in hold_b:
                    room = 1024 - sum(r.shape[0] for r in hold_rows)
                    if room > 0:
                        hold_rows.append(rows[:room].detach().float().cpu())
                else:
                    train_rows.append(rows.detach().float().cpu())
            return hook

        hooks = [mod.register_forward_pre_hook(rec_hook(rel)) for rel, mod in sel]
        ys = []
        with torch.no_grad():
            for b in range(n_batches):
                cur["b"] = b
                ys.append(_call(orig, xs[b], rests[b], kws[b]).float() if mine(b) else None)
            if target == "model":
                for h in hooks:
                    h.remove()
                hooks = []
                ys = [_call(orig, xs_orig[b], rests[b], kws[b]).float() if mine(b) else None
                      for b in range(n_batches)]
        for h in hooks:
            h.remove()
        lin_owner = [0] * len(sel)
        counts = None
        if several:
            lin_owner, counts = _share_block_inputs(sel, per_b, recs, ys, owner_b, hold_b,
                                                    n_batches, device)
        per_b = None
        # 2. the per-layer path, in the library
        layers = {}
        results = {}
        done = {}
        for i, (rel, mod) in enumerate(sel):
            tl = time.time()
            if several:
                # every rank draws every linear's subset, so the generator moves on
                # as in one process; the linear's owner alone has its rows
                n_train = int(sum(int(counts[b, i]) for b in train_b))
                pick = torch.randperm(n_train, generator=gen)[:max_layer_tokens] \
                    if n_train > max_layer_tokens else None
                if lin_owner[i] != me:
                    continue
            x_train = torch.cat(recs[rel][0])
            x_hold = torch.cat(recs[rel][1]) if recs[rel][1] else x_train[:0]
            recs[rel] = None
            if x_train.shape[0] > max_layer_tokens:
                if not several:
                    pick = torch.randperm(x_train.shape[0], generator=gen)[:max_layer_tokens]
                x_train = x_train[pick.sort().values]
            # the library holds out the last tokens: the held-out sequences'
            hold_take = x_hold[:min(x_hold.shape[0], 1024)]
            x_lib = torch.cat([x_train, hold_take]) if hold_take.shape[0] else x_train
            opts = dict(layer_options or {})
            if hold_take.shape[0]:
                opts["eval_tokens"] = int(hold_take.shape[0])
            layer, info = compress_linear(mod.weight, x_lib, bpw=bpw, paths=paths,
                                          steps=layer_steps, device=lib_device,
                                          name=f"{bname}.{rel}", seed=seed + 1, **opts)
            done[rel] = (layer, info, time.time() - tl)
        for i, (rel, mod) in enumerate(sel):
            if several:  # each linear from its owner, in the block's order
                done[rel] = distributed.broadcast_object(done.get(rel), lin_owner[i])
            layer, info, seconds = done.pop(rel)
            if info["outcome"] != 0:
                log(f"{bname}.{rel}: kept as it is ({info['note']})")
                continue
            layers[rel] = layer
            m, n = mod.weight.shape
            results[rel] = LayerResult(name=f"{bname}.{rel}", m=m, n=n, rank=layer["rank"],
                                       paths=paths, bpw=info["bpw"], init_kind=info["init_kind"],
                                       err_init=info["err_init"], err_layer=info["err_trained"],
                                       seconds=seconds)
        recs = None
        # 3. the joint training
        train = copy.deepcopy(orig)
        for rel, mod in sel:
            if rel in layers:
                _set_module(train, rel, _TrainBLR(layers[rel], mod.bias).to(device))
        blr_mods = [m for m in train.modules() if isinstance(m, _TrainBLR)]

        def heldout_err(net):
            num = den = 0.0
            with torch.no_grad():
                for b in hold_b:
                    y = ys[b]
                    d = (_call(net, xs[b], rests[b], kws[b]).float() - y)[valid[b]]
                    num += float((d * d).sum())
                    den += float((y[valid[b]] ** 2).sum())
            return _agg_err(num, den)

        bres = BlockResult(index=bi, name=bname)
        bres.err_layerwise = heldout_err(train) if hold_b else float("nan")
        if steps > 0 and blr_mods:
            groups = []
            for m in blr_mods:
                for par in (m.h, m.l, m.g):
                    rms = float(par.detach().pow(2).mean().sqrt()) or 1e-3
                    groups.append({"params": [par], "lr": lr * rms, "base": lr * rms})
                if sign_lr > 0:
                    groups.append({"params": [m.lat_u, m.lat_v], "lr": sign_lr, "base": sign_lr})
                else:
                    m.lat_u.requires_grad_(False)
                    m.lat_v.requires_grad_(False)
            blr_params = {id(p) for m in blr_mods for p in m.parameters()}
            for par in train.parameters():
                if id(par) in blr_params:
                    continue
                if train_other:
                    par.requires_grad_(True)
                    rms = float(par.detach().pow(2).mean().sqrt()) or 1e-3
                    groups.append({"params": [par], "lr": 0.1 * lr * rms, "base": 0.1 * lr * rms})
                else:
                    par.requires_grad_(False)
            # one fused kernel for every group on CUDA: the step is launch-bound otherwise
            opt = torch.optim.Adam(groups, betas=(0.9, 0.999), fused=device.type == "cuda")
            warm = max(1, steps // 20)
            best = (bres.err_layerwise, 0, copy.deepcopy(train.state_dict()))
            for step in range(1, steps + 1):
                f = step / warm if step <= warm else \
                    0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))
                for gr in opt.param_groups:
                    gr["lr"] = gr["base"] * f
                b = train_b[int(torch.randint(len(train_b), (1,), generator=gen))]
                with torch.enable_grad():
                    if split:
                        lo, hi = cuts[b]
                        loss = _rel_err_share(_call(train, xs[b][lo:hi], rests_s[b], kws_s[b]),
                                              ys[b], valid[b], lo, hi)
                    else:
                        loss = _rel_err(_call(train, xs[b], rests[b], kws[b]), ys[b], valid[b])
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                if split:  # the slices' shares add up to the batch's loss and gradient
                    loss = loss.detach().reshape(1).clone()
                    distributed.all_reduce_fixed([p.grad for gr in opt.param_groups
                                                  for p in gr["params"]] + [loss])
                    loss = loss[0]
                opt.step()
                if step <= 20:
                    bres.loss_first += float(loss.detach()) / 20
                if step > steps - 20:
                    bres.loss_last += float(loss.detach()) / min(20, steps)
                if hold_b and (step % eval_every == 0 or step == steps):
                    e = heldout_err(train)
                    if e < best[0]:
                        best = (e, step, copy.deepcopy(train.state_dict()))
            bres.steps = steps
            if hold_b:
                train.load_state_dict(best[2])
                bres.best_step = best[1]
            else:
                bres.best_step = steps
            opt = None
        # 4. the finished block: BLRLinear modules, in the model
        final = train
        for rel, mod in sel:
            if rel not in layers:
                continue
            tm = final.get_submodule(rel)
            lay = tm.to_layer()
            for part in "hlg":  # as the file stores them: the model in memory is the saved one
                lay[part] = lay[part].half().float()
            blr = BLRLinear.from_layer(lay, bias=tm.bias.detach() if tm.bias is not None
                                       else None, device=device)
            _set_module(final, rel, blr)
            bits_total += blr.bits_per_weight() * blr.in_features * blr.out_features
            report.params_compressed += blr.in_features * blr.out_features
        for par in final.parameters():
            par.requires_grad_(False)
        dt = next(block.parameters()).dtype
        final = cast_except_blr(final, dt)
        blocks[bi] = final
        # the next block's inputs, and each layer's error inside the model (held out)
        errs = {rel: [0.0, 0.0] for rel in results}
        # several processes: each batch's contributions, added in batch order after
        # they are shared (the same additions, in the same order, as one process)
        errs_b = {}
        cmp_hooks = []
        for rel in results:
            o_mod = orig.get_submodule(rel)
            c_mod = final.get_submodule(rel)

            def hook(_m, args, out, o_mod=o_mod, rel=rel):
                if cur["hold"]:
                    x = args[0]
                    y = nn.functional.linear(x.float(), o_mod.weight, o_mod.bias)
                    d = (out.float() - y)[valid[cur["b"]]]
                    acc = errs_b.setdefault(cur["b"], {}).setdefault(rel, [0.0, 0.0]) \
                        if several else errs[rel]
                    acc[0] += float((d * d).sum())
                    acc[1] += float((y[valid[cur["b"]]] ** 2).sum())
            cmp_hooks.append(c_mod.register_forward_hook(hook))
        num = den = 0.0
        block_b = {}
        with torch.no_grad():
            for b in range(n_batches):
                if not mine(b):
                    continue
                cur["b"], cur["hold"] = b, b in hold_b
                out = _call(final, xs[b].to(dt), rests[b], kws[b])
                if b in hold_b:
                    d = (out.float() - ys[b])[valid[b]]
                    if several:
                        block_b[b] = (float((d * d).sum()), float((ys[b][valid[b]] ** 2).sum()))
                    else:
                        num += float((d * d).sum())
                        den += float((ys[b][valid[b]] ** 2).sum())
                xs[b] = out.float()
                if xs_orig is not None:
                    xs_orig[b] = ys[b]
        for h in cmp_hooks:
            h.remove()
        if several:
            for b in range(n_batches):
                share = distributed.broadcast_object(
                    (block_b.get(b), errs_b.get(b, {})) if mine(b) else None, owner_b[b])
                xs[b] = distributed.broadcast_tensor(xs[b] if mine(b) else None,
                                                     owner_b[b]).to(device)
                if share[0] is not None:
                    num += share[0][0]
                    den += share[0][1]
                for rel, (e0, e1) in share[1].items():
                    errs[rel][0] += e0
                    errs[rel][1] += e1
        bres.err_trained = _agg_err(num, den) if hold_b else float("nan")
        for rel, r in results.items():
            r.err_model = _agg_err(*errs[rel])
            report.layers.append(r)
        bres.seconds = time.time() - tb
        report.blocks.append(bres)
        log(f"{bname} ({bi + 1}/{len(blocks)}): {len(results)} layers, block error "
            f"{bres.err_layerwise:.4f} layer-wise -> {bres.err_trained:.4f} trained "
            f"({bres.steps} steps, kept {bres.best_step}), {bres.seconds:.1f} s")
        orig = train = None
        ys = None
    report.bpw = bits_total / report.params_compressed if report.params_compressed else 0.0
    report.seconds = time.time() - t0
    _mark_config(model, report)
    return report


def _share_block_inputs(sel, per_b, recs, ys, owner_b, hold_b, n_batches, device):
    """Several processes, after a block's sharded calibration forward: the targets ys
    to every rank (the joint training runs on every rank), each linear's recorded
    rows to the rank that compresses it (recs filled there as one process fills them:
    batches in order, the held-out rows cut at 1024). Returns (the owner of each
    linear, the rows each batch gave each linear [batches][linears] on every rank)."""
    me, world = distributed.rank(), distributed.size()
    for b in range(n_batches):
        ys[b] = distributed.broadcast_tensor(ys[b], owner_b[b]).to(device)
    counts = torch.zeros(n_batches, len(sel), dtype=torch.long)
    for b in range(n_batches):
        if owner_b[b] == me:
            for i, (rel, _) in enumerate(sel):
                counts[b, i] = per_b[rel][b].shape[0]
    distributed.all_reduce_fixed([counts])  # integers: exact
    tokens = int(counts.sum(0).max()) if len(sel) else 0
    costs = [m.weight.shape[0] * m.weight.shape[1] * (tokens + min(m.weight.shape))
             for _, m in sel]
    lin_owner = distributed.schedule(costs, world)
    for b in range(n_batches):
        src = owner_b[b]
        for i, (rel, _) in enumerate(sel):
            dst = lin_owner[i]
            if me == src and me != dst:
                distributed.send_tensor(per_b[rel].pop(b), dst)
            elif me == dst and me != src:
                per_b[rel][b] = distributed.recv_tensor(src, "cpu")
    for i, (rel, _) in enumerate(sel):
        if lin_owner[i] != me:
            recs[rel] = None
            continue
        train_rows, hold_rows = recs[rel]
        for b in range(n_batches):
            rows = per_b[rel].pop(b)
            if b in hold_b:
                room = 1024 - sum(r.shape[0] for r in hold_rows)
                if room > 0:
                    hold_rows.append(rows[:room])
            else:
                train_rows.append(rows)
    return lin_owner, counts


def _mark_config(model, report):
    """model.config.quantization_config for save_pretrained (bitrank.hf)."""
    from .hf import quantization_config
    model.config.quantization_config = quantization_config(model, report)
