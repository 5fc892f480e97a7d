#!/usr/bin/env python3
"""End-to-end batch-1 decode speed and weight memory of a Llama-2-7B-shaped model in
fp16 against the same model with its block linears (and, with --lm-head, the LM
head) as BLRLinear layers at --bpw bits per weight (default 1.0, 2 paths) running the
library's CUDA inference plan.

Both models have random weights, made on the GPU in seconds: the fp16 model as
transformers builds it (LlamaForCausalLM of Llama-2-7B's config: hidden 4096,
intermediate 11008, 32 layers, 32 heads, vocabulary 32000), then each linear replaced
in place by a BLRLinear of the rank the library's rank selection gives for its shape
and bit budget (bitrank.layout.rank_for), random signs, and scales drawn so that the
layer's weights have the dense layer's spread (the activations stay in range through
the 32 blocks). The BLR model shares the fp16 model's embeddings and norms, and is
packed (bitrank.pack_for_inference): its plans are the only device copy of its
compressed weights.

At batch 1 a decode step of eager PyTorch is bound by Python and kernel launches, not
by the weights, which is what this compares; so both models run the same minimal
static-KV-cache decode step written here (the model's own modules: norms, rotary
embedding, q/k/v/o and MLP linears, lm_head; scaled_dot_product_attention over a
fixed-length cache with a mask), which writes its greedy token and advances its
position on the device, captured once as a CUDA graph and replayed for --tokens
tokens with no host work between them. The cache holds --prompt-len positions of
random keys and values before decoding starts (each token attends over them), and
every run starts from the same state. tokens/s is the median over --runs runs after
a warm-up run (CUDA events around the replays); the eager step (no graph) is timed
once too, to show what the graph saves. With --compile both models' step goes
through torch.compile (inductor, fullgraph: the norms, rotary embedding and
elementwise work fused; a BLRLinear is one bitrank::blr_linear operator of the
graph) before the capture, its compile time reported.

Before timing, the decode step is checked against transformers' own forward of the
same model on a short random sequence (each position's logits, relative L2 error):
for the fp16 model that checks the harness; for the BLR model it also checks the
plan's single-token kernel against its many-token one.

Output: one JSON line per model and one comparing them on stdout (scripts/bench-table
prints them), a readable summary on stderr. Exit status 2, with the reason, where
there is no CUDA GPU or the library has no CUDA inference plan (--dense-only then
still measures the fp16 model); 1 when a check fails.

    python3 bench/bench_generate.py [--small] [--tokens 128] [--runs 5] [--lm-head]
        [--bpw 1.0] [--paths 2] [--prompt-len 128] [--layers N] [--dense-only] [--compile]
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# the Llama-2-7B shape, and a small one for a smoke test in seconds
FULL = dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=32, vocab_size=32000)
SMALL = dict(hidden_size=512, intermediate_size=1376, num_hidden_layers=2,
             num_attention_heads=8, num_key_value_heads=4, vocab_size=1000)
SPEED_TARGET, MEMORY_TARGET = 3.0, 12.0  # the issue's: >= 3x tokens/s, <= 1/12 the bytes


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def unavailable(msg):
    log(f"bench_generate: {msg}")
    sys.exit(2)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true",
                    help="2 layers, hidden 512 (a smoke test in seconds)")
    ap.add_argument("--layers", type=int, default=None, help="blocks (default: 32, --small 2)")
    ap.add_argument("--tokens", type=int, default=128, help="tokens decoded per run (128)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs (5; median)")
    ap.add_argument("--prompt-len", type=int, default=128,
                    help="cache positions filled before decoding (128)")
    ap.add_argument("--bpw", type=float, default=1.0, help="bits per weight (1.0)")
    ap.add_argument("--paths", type=int, default=2, choices=(1, 2))
    ap.add_argument("--lm-head", action="store_true", help="compress the LM head too")
    ap.add_argument("--dense-only", action="store_true", help="the fp16 model alone")
    ap.add_argument("--no-check", action="store_true",
                    help="skip the check against transformers' forward")
    ap.add_argument("--compile", action="store_true",
                    help="both models' decode step through torch.compile (inductor, "
                         "fullgraph) before the CUDA graph capture")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args(argv)
    for name in ("tokens", "runs", "prompt_len"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.layers is not None and args.layers < 1:
        ap.error("--layers must be at least 1")
    if not args.bpw > 0:
        ap.error("--bpw must be positive")
    return args


def build_fp16(torch, transformers, args):
    """The fp16 model with random weights, made on the GPU."""
    shape = dict(SMALL if args.small else FULL)
    if args.layers is not None:
        shape["num_hidden_layers"] = args.layers
    max_len = args.prompt_len + args.tokens + 1
    cfg = transformers.LlamaConfig(**shape, max_position_embeddings=max(4096, max_len),
                                   rms_norm_eps=1e-5, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(args.seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float16)
    try:
        with torch.device("cuda"):
            model = transformers.LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    return model.eval(), cfg


def weight_bytes(model):
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if t.numel() and t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += t.numel() * t.element_size()
    return total


def to_blr(torch, model, args):
    """Every linear of the blocks (and the LM head with --lm-head) replaced by a
    BLRLinear of random signs at the rank --bpw gives; returns how many."""
    from bitrank import BLRLinear, layout
    gen = torch.Generator(device="cuda").manual_seed(args.seed + 1)
    targets = []
    for block in model.model.layers:
        for name, mod in block.named_modules():
            if isinstance(mod, torch.nn.Linear):
                targets.append((block, name))
    if args.lm_head:
        targets.append((model, "lm_head"))
    P = args.paths
    for root, name in targets:
        parent_name, _, leaf = name.rpartition(".")
        parent = root.get_submodule(parent_name) if parent_name else root
        lin = getattr(parent, leaf)
        m, n = lin.out_features, lin.in_features
        r = layout.rank_for(m, n, P, args.bpw)
        if r < 1:
            raise SystemExit(f"bench_generate: --bpw {args.bpw} holds no rank for {name} "
                             f"({m}x{n})")
        std = float(lin.weight.float().std())
        mod = BLRLinear(n, m, r, P, bias=lin.bias is not None, device="cuda")
        rb = (r + 7) // 8
        with torch.no_grad():
            for buf, rows in ((mod.u, m), (mod.v, n)):
                bits = torch.randint(0, 256, (P, rows, rb), generator=gen, device="cuda",
                                     dtype=torch.int32).to(torch.uint8)
                if r % 8:
                    bits[..., -1] &= (1 << (r % 8)) - 1  # the layout's bits past r are 0
                buf.copy_(bits)

            def uniform(*shape):
                return torch.rand(*shape, generator=gen, device="cuda") + 0.5  # U(0.5, 1.5)
            # W's entries: sum over paths and ranks of h g l (+-1): variance
            # P r E[h^2] E[g^2] E[l^2], each E[U(0.5,1.5)^2] = 13/12
            mod.h.copy_(uniform(P, m))
            mod.g.copy_(uniform(P, n))
            mod.l.copy_(uniform(P, r) * (std / math.sqrt(P * r * (13 / 12) ** 3)))
            if lin.bias is not None:
                mod.bias.copy_(lin.bias.float())
        setattr(parent, leaf, mod)
        del lin
    torch.cuda.empty_cache()
    return len(targets)


class StaticDecoder:
    """One greedy decode step of a Llama model over a static KV cache, on device
    state only (so a CUDA graph of it replays with nothing from the host): the token
    `tok` at position `pos` through every block, the logits, then tok <- argmax,
    pos <- pos + 1. Uses the model's own modules, so a BLRLinear layer runs as it
    does inside transformers."""

    def __init__(self, torch, model, cfg, max_len, compile_step=False):
        self.torch = torch
        self.model = model
        if compile_step:  # the step's own code compiled; the modules it calls inlined
            self.step = torch.compile(self.step, fullgraph=True, dynamic=False)
        self.H = cfg.num_attention_heads
        self.Hkv = cfg.num_key_value_heads
        self.D = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.H
        self.L = max_len
        dev, dt = "cuda", torch.float16
        n = len(model.model.layers)
        self.k = [torch.zeros(1, self.Hkv, max_len, self.D, device=dev, dtype=dt)
                  for _ in range(n)]
        self.v = [torch.zeros_like(k) for k in self.k]
        self.tok = torch.zeros(1, 1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.positions = torch.arange(max_len, device=dev)
        self.logits = None

    def fill_random(self, upto, seed):
        """Positions [0, upto) of every layer's cache hold random keys and values."""
        g = self.torch.Generator(device="cuda").manual_seed(seed)
        for c in self.k + self.v:
            c.zero_()
            c[:, :, :upto].normal_(generator=g)

    def reset(self, pos, tok):
        self.pos.fill_(pos)
        self.tok.fill_(tok)

    @staticmethod
    def _rope(x, cos, sin):
        half = x.shape[-1] // 2
        rot = x.new_empty(x.shape)
        rot[..., :half] = -x[..., half:]
        rot[..., half:] = x[..., :half]
        return x * cos + rot * sin

    def step(self):
        torch, F = self.torch, self.torch.nn.functional
        m = self.model.model
        h = m.embed_tokens(self.tok)                                  # [1, 1, hidden]
        cos, sin = m.rotary_emb(h, self.pos.view(1, 1))               # [1, 1, D]
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)                 # [1, 1, 1, D]
        mask = (self.positions <= self.pos).view(1, 1, 1, self.L)
        H, Hkv, D = self.H, self.Hkv, self.D
        for i, layer in enumerate(m.layers):
            attn, mlp = layer.self_attn, layer.mlp
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(1, 1, H, D).transpose(1, 2)
            k = attn.k_proj(x).view(1, 1, Hkv, D).transpose(1, 2)
            v = attn.v_proj(x).view(1, 1, Hkv, D).transpose(1, 2)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            self.k[i].index_copy_(2, self.pos, k)
            self.v[i].index_copy_(2, self.pos, v)
            kk, vv = self.k[i], self.v[i]
            if Hkv != H:
                kk = kk.repeat_interleave(H // Hkv, dim=1)
                vv = vv.repeat_interleave(H // Hkv, dim=1)
            o = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
            h = h + attn.o_proj(o.transpose(1, 2).reshape(1, 1, H * D))
            x = layer.post_attention_layernorm(h)
            h = h + mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))
        logits = self.model.lm_head(m.norm(h))[:, -1]                 # [1, vocab]
        self.tok.copy_(logits.argmax(-1).view(1, 1))
        self.pos.add_(1)
        self.logits = logits
        return logits


def check(torch, model, dec, cfg, seed, tol):
    """Max over positions of the relative L2 error of the decode step's logits against
    transformers' forward of the same random sequence."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    ids = torch.randint(0, cfg.vocab_size, (1, 12), generator=g, device="cuda")
    with torch.inference_mode():
        ref = model(input_ids=ids, use_cache=False).logits[0].float()
        for c in dec.k + dec.v:
            c.zero_()
        dec.reset(0, 0)
        worst = 0.0
        for t in range(ids.shape[1]):
            dec.tok.copy_(ids[:, t:t + 1])
            y = dec.step()[0].float()
            worst = max(worst, float((y - ref[t]).norm() / ref[t].norm()))
    return worst, worst <= tol


def time_model(torch, dec, args, start_tok):
    """(median tokens/s of the graph replays, their per-run list, eager tokens/s)."""
    with torch.inference_mode():
        dec.fill_random(args.prompt_len, args.seed + 7)
        # warm-up on a side stream, as capture wants (plans sized, cuBLAS handles made)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                dec.reset(args.prompt_len, start_tok)
                dec.step()
        torch.cuda.current_stream().wait_stream(side)
        # eager, for reference
        n_eager = min(args.tokens, 16)
        dec.reset(args.prompt_len, start_tok)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n_eager):
            dec.step()
        torch.cuda.synchronize()
        eager = n_eager / (time.perf_counter() - t0)
        graph = torch.cuda.CUDAGraph()
        dec.reset(args.prompt_len, start_tok)
        with torch.cuda.graph(graph):
            dec.step()
        rates = []
        for run in range(args.runs + 1):
            dec.reset(args.prompt_len, start_tok)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(args.tokens):
                graph.replay()
            b.record()
            b.synchronize()
            if run:  # the first is a warm-up
                rates.append(args.tokens / (a.elapsed_time(b) * 1e-3))
        del graph
    return statistics.median(rates), rates, eager


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
        import transformers
    except ImportError as e:
        unavailable(f"needs torch and transformers ({e})")
    if not torch.cuda.is_available():
        unavailable("needs a CUDA GPU (torch.cuda.is_available() is false)")
    sys.path.insert(0, os.path.join(REPO, "python"))
    import bitrank
    from bitrank import _lib
    try:
        _lib.lib()
    except bitrank.BitrankError as e:
        unavailable(f"the library does not load: {e}")
    if not args.dense_only and not _lib.has_cuda_infer():
        unavailable(f"{_lib.library_path()} has no CUDA inference plan (br_blr_infer_cuda_*): "
                    "build the library from a tree that has it (--dense-only measures the "
                    "fp16 model alone)")
    transformers.utils.logging.set_verbosity_error()
    device_name = torch.cuda.get_device_name()
    t0 = time.perf_counter()
    model, cfg = build_fp16(torch, transformers, args)
    torch.cuda.synchronize()
    shape = (f"{cfg.num_hidden_layers}x(h{cfg.hidden_size},i{cfg.intermediate_size},"
             f"heads{cfg.num_attention_heads}/{cfg.num_key_value_heads}),v{cfg.vocab_size}")
    log(f"bench_generate: {shape} on {device_name}, built in {time.perf_counter() - t0:.1f} s"
        f"{', the decode step through torch.compile' if args.compile else ''}")
    common = {"bench": "generate", "device": device_name, "torch": torch.__version__,
              "shape": shape, "tokens": args.tokens, "prompt_len": args.prompt_len,
              "runs": args.runs, "compiled": args.compile}
    max_len = args.prompt_len + args.tokens + 1
    status = 0

    def measure(variant, tol, extra):
        nonlocal status
        if args.compile:
            torch.compiler.reset()  # the other model's graphs
        dec = StaticDecoder(torch, model, cfg, max_len, compile_step=args.compile)
        compile_s = None
        if args.compile:  # the first step compiles (timed)
            t0 = time.perf_counter()
            with torch.inference_mode():
                dec.reset(0, 0)
                dec.step()
            torch.cuda.synchronize()
            compile_s = round(time.perf_counter() - t0, 1)
        err, ok = (None, True) if args.no_check else check(torch, model, dec, cfg,
                                                           args.seed + 3, tol)
        if not ok:
            status = 1
            log(f"  {variant}: CHECK FAILED: decode step vs transformers' forward: relative "
                f"error {err:.3g} > {tol}")
        tps, rates, eager = time_model(torch, dec, args, start_tok=1)
        row = dict(common, variant=variant, **extra, tokens_per_s=round(tps, 2),
                   ms_per_token=round(1e3 / tps, 4), eager_tokens_per_s=round(eager, 2),
                   runs_tokens_per_s=[round(r, 2) for r in rates],
                   check_rel_err=None if err is None else round(err, 6), compile_s=compile_s)
        print(json.dumps(row), flush=True)
        del dec
        return row

    def compiled(row):
        return "" if row["compile_s"] is None else f"; compiled in {row['compile_s']} s"

    dense_bytes = weight_bytes(model)
    dense = measure("fp16", 2e-2, {"weight_bytes": dense_bytes})
    log(f"  fp16: {dense['tokens_per_s']:.1f} tokens/s ({dense['ms_per_token']:.3f} ms/token; "
        f"eager {dense['eager_tokens_per_s']:.1f}{compiled(dense)}), "
        f"weights {dense_bytes / 2**30:.3f} GiB, "
        f"check {dense['check_rel_err']}")
    if args.dense_only:
        return status
    n_blr = to_blr(torch, model, args)
    mem = bitrank.pack_for_inference(model)
    blr = measure(f"blr-{args.bpw:g}bpw-p{args.paths}", 5e-2,
                  {"bpw": args.bpw, "paths": args.paths, "lm_head": args.lm_head,
                   "layers_blr": n_blr})
    mem = bitrank.inference_memory(model)  # the plans' scratch sized by the runs
    kernels = sorted({m.infer_kernel for m in model.modules()
                      if isinstance(m, bitrank.BLRLinear) and m.infer_kernel})
    speed = blr["tokens_per_s"] / dense["tokens_per_s"]
    mem_ratio = dense_bytes / mem.total_bytes
    dense_linear = mem.linear_fp16_bytes
    summary = dict(common, variant="blr-vs-fp16", bpw=args.bpw, paths=args.paths,
                   lm_head=args.lm_head, speedup=round(speed, 3),
                   fp16_tokens_per_s=dense["tokens_per_s"], blr_tokens_per_s=blr["tokens_per_s"],
                   fp16_weight_bytes=dense_bytes, blr_weight_bytes=mem.total_bytes,
                   blr_linear_bytes=mem.linear_bytes, fp16_linear_bytes=dense_linear,
                   other_bytes=mem.other_bytes, mem_ratio=round(mem_ratio, 3),
                   linear_mem_ratio=round(mem.linear_ratio, 3), kernels=kernels,
                   meets_speed=speed >= SPEED_TARGET, meets_memory=mem_ratio >= MEMORY_TARGET)
    print(json.dumps(summary), flush=True)
    gib = 2 ** 30
    log(f"  {blr['variant']}: {blr['tokens_per_s']:.1f} tokens/s ({blr['ms_per_token']:.3f} "
        f"ms/token; eager {blr['eager_tokens_per_s']:.1f}{compiled(blr)}), "
        f"kernels {', '.join(kernels)}, "
        f"check {blr['check_rel_err']}")
    log(f"  weights: fp16 {dense_bytes / gib:.3f} GiB, BLR {mem.total_bytes / gib:.3f} GiB "
        f"(compressed layers {mem.linear_bytes / gib:.3f} GiB for {dense_linear / gib:.3f} GiB "
        f"in fp16, {mem.linear_ratio:.2f}x; the rest {mem.other_bytes / gib:.3f} GiB)")
    log(f"  BLR / fp16: {speed:.2f}x the tokens/s (target {SPEED_TARGET:g}x: "
        f"{'met' if speed >= SPEED_TARGET else 'NOT met'}), weights {mem_ratio:.2f}x smaller "
        f"(target {MEMORY_TARGET:g}x: {'met' if mem_ratio >= MEMORY_TARGET else 'NOT met'}"
        f"{'' if args.lm_head else '; the LM head stays fp16, --lm-head compresses it'})")
    return status


if __name__ == "__main__":
    sys.exit(main())
