#!/usr/bin/env python3
"""The LittleBit-style layer training step in PyTorch: the peer of bench_layer.

Per path p the layer keeps real latent factors U_p [m][r], V_p [n][r] and scales
h_p [m], l_p [r], g_p [n]; the forward uses their signs with a straight-through
gradient (sign forward, identity backward):

    y = sum_p ((((x * g_p) @ sign(V_p)) * l_p) @ sign(U_p).T) * h_p

One step = zero_grad, forward, loss 0.5 * mean((y - y*)^2), backward, AdamW over
every parameter. bf16 parameters and activations (--dtype float32 to compare),
eager and under torch.compile, at the shapes of bench_layer; CUDA events around
each step after a warm-up, median (and min) of --runs (>= 20) steps. x has no
gradient (the layer is the first of the step), as in bench_layer without --dx.
One JSON line per measurement on stdout.

    python3 bench/torch_layer.py [--runs 20] [--dtype bfloat16] [--no-compile]
"""
import argparse
import json
import statistics

import torch

SHAPES = [(3584, 1024, 384, 2, 4096), (1024, 3584, 384, 2, 4096), (6144, 1024, 512, 2, 4096)]


class SignSTE(torch.autograd.Function):
    """sign() forward, the identity backward (the straight-through estimator)."""

    @staticmethod
    def forward(ctx, w):
        return torch.where(w >= 0, 1.0, -1.0).to(w.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad


class LittleBitLinear(torch.nn.Module):
    def __init__(self, m, n, r, paths, dtype, device):
        super().__init__()
        def p(*shape, lo=-1.0, hi=1.0):
            t = torch.empty(*shape, device=device, dtype=torch.float32).uniform_(lo, hi)
            return torch.nn.Parameter(t.to(dtype))
        self.u = torch.nn.ParameterList([p(m, r) for _ in range(paths)])
        self.v = torch.nn.ParameterList([p(n, r) for _ in range(paths)])
        self.h = torch.nn.ParameterList([p(m, lo=0.01, hi=0.05) for _ in range(paths)])
        self.l = torch.nn.ParameterList([p(r, lo=0.5, hi=1.5) for _ in range(paths)])
        self.g = torch.nn.ParameterList([p(n, lo=0.05, hi=0.2) for _ in range(paths)])

    def forward(self, x):
        y = None
        for u, v, h, l, g in zip(self.u, self.v, self.h, self.l, self.g):
            a = (x * g) @ SignSTE.apply(v)          # [T][r]
            c = (a * l) @ SignSTE.apply(u).t()      # [T][m]
            yp = c * h
            y = yp if y is None else y + yp
        return y


def bench(m, n, r, paths, tokens, dtype, compiled, runs):
    torch.manual_seed(1234 + m * 7 + n)
    dev = "cuda"
    layer = LittleBitLinear(m, n, r, paths, dtype, dev)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3, weight_decay=0.0, foreach=True)
    x = torch.empty(tokens, n, device=dev, dtype=torch.float32).uniform_(-1, 1).to(dtype)
    ystar = torch.empty(tokens, m, device=dev, dtype=torch.float32).uniform_(-1, 1).to(dtype)

    def loss_fn():
        y = layer(x)
        return 0.5 * ((y.float() - ystar.float()) ** 2).mean()

    fwd_bwd = torch.compile(loss_fn) if compiled else loss_fn
    step_opt = torch.compile(opt.step) if compiled else opt.step

    def step():
        opt.zero_grad(set_to_none=True)
        loss = fwd_bwd()
        loss.backward()
        step_opt()

    for _ in range(10 if compiled else 5):  # warm-up (and compilation)
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    flop = paths * 6.0 * tokens * r * (m + n)
    med = statistics.median(times)
    print(json.dumps({
        "bench": "torch_layer_step", "device": torch.cuda.get_device_name(),
        "torch": torch.__version__, "m": m, "n": n, "r": r, "paths": paths, "tokens": tokens,
        "dtype": str(dtype).replace("torch.", ""), "compiled": compiled, "runs": runs,
        "median_ms": round(med, 4), "min_ms": round(min(times), 4),
        "gflop": round(flop / 1e9, 2), "tflops": round(flop / (med * 1e-3) / 1e12, 1),
    }), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--no-compile", action="store_true", help="eager only")
    args = ap.parse_args()
    runs = max(args.runs, 20)
    dtype = getattr(torch, args.dtype)
    for shape in SHAPES:
        bench(*shape, dtype, False, runs)
        if not args.no_compile:
            bench(*shape, dtype, True, runs)


if __name__ == "__main__":
    main()
