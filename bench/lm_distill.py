#!/usr/bin/env python3
"""Held-out perplexity of the small causal LM (data/tiny-lm) compressed at several
bit budgets: block-wise compression, + distillation, and the LittleBit peer at
equal wall time.

Rows, per bit budget (every linear of the model's blocks compressed, two paths):

  fp16       the stored model as it is (the reference perplexity)
  blockwise  bitrank.compress_model: block by block through the model's forward,
             each block against the original block on the compressed prefix
  distill    blockwise, then bitrank.distill: the whole model against the original
             (KL on the next-token distributions + the blocks' hidden states)
  peer       bench/littlebit_peer.py: LittleBit's training (Dual-SVID init, dense
             latent factors, SmoothSign, AdamW, KL + 10 x hidden MSE) from the
             original model, for the wall time blockwise + distill took

Text: the King James Bible (bitrank.kjv): calibration and training sequences from
its training chapters, perplexity on its test chapters (every 20th chapter, disjoint
from everything trained on). Perplexity: bitrank.eval.perplexity, non-overlapping
windows of --seq-len tokens.

Run from the repository root (CUDA; BITRANK_LIBRARY or the package's library):

    python3 bench/lm_distill.py [--model data/tiny-lm] [--bpw 0.55,1.0,2.0]
        [--methods fp16,blockwise,distill,peer] [--calib-seqs 256]
        [--distill-seqs 2048] [--distill-steps 1000] [--json OUT.json]
"""
import os
# before torch loads OpenMP: the library's threads and torch's share one runtime, and
# spinning waits starve each other on the CPU (bitrank/__init__.py)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import argparse  # noqa: E402
import copy
import json
import random
import sys
import time

import torch

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, BENCH)

import bitrank  # noqa: E402  (before transformers' own imports settle OpenMP)
from bitrank import eval as bitrank_eval  # noqa: E402
from bitrank import kjv  # noqa: E402

METHODS = ["fp16", "blockwise", "distill", "peer"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=os.path.join(REPO, "data", "tiny-lm"))
    p.add_argument("--bpw", default="0.55,1.0,2.0")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--device", default="cuda")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--calib-seqs", type=int, default=256)
    p.add_argument("--steps", type=int, default=400, help="compress_model's steps per block")
    p.add_argument("--layer-steps", type=int, default=None,
                   help="compress_model's layer_steps (default: the library's)")
    p.add_argument("--distill-seqs", type=int, default=2048)
    p.add_argument("--distill-steps", type=int, default=1000)
    p.add_argument("--distill-batch", type=int, default=16)
    p.add_argument("--distill-arg", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--peer-seconds", type=float, default=None,
                   help="the peer's wall time (default: blockwise + distill's at that bpw)")
    p.add_argument("--peer-batch", type=int, default=16)
    p.add_argument("--peer-lr", type=float, default=4e-5,
                   help="the peer's AdamW lr (LittleBit's README recipe: 4e-5)")
    p.add_argument("--eval-tokens", type=int, default=65536,
                   help="held-out tokens scored (the first ones of the test chapters)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    a.bpws = [float(b) for b in a.bpw.split(",") if b.strip()]
    a.methods = [m for m in a.methods.split(",") if m]
    bad = [m for m in a.methods if m not in METHODS]
    if bad:
        p.error(f"unknown methods {bad}; known {METHODS}")
    a.distill_kwargs = {}
    for item in a.distill_arg:
        k, _, v = item.partition("=")
        try:
            a.distill_kwargs[k] = json.loads(v)
        except ValueError:
            a.distill_kwargs[k] = v
    return a


def main(argv=None):
    args = parse_args(argv)
    import transformers
    transformers.utils.logging.disable_progress_bar()
    import littlebit_peer as peer
    dev = torch.device(args.device)
    tok = transformers.AutoTokenizer.from_pretrained(args.model)
    base = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    base.eval()
    teacher16 = copy.deepcopy(base).half().to(dev).eval()

    train, test = kjv.kjv_split(kjv.kjv_chapters())
    order = list(range(len(train)))
    random.Random(0).shuffle(order)  # calibration from all over the training chapters
    train_shuffled = [train[i] for i in order]
    test_ids = bitrank_eval.token_ids(tok, "\n".join(test))[:args.eval_tokens]
    calib_ids, _ = bitrank.calib.calibration_ids(train_shuffled, tok, args.calib_seqs,
                                                 args.seq_len)
    dist_ids, dist_mask = bitrank.calib.calibration_ids(train_shuffled, tok, args.distill_seqs,
                                                        args.seq_len)
    log(f"text: {len(train)} training chapters, {len(test)} test chapters; calibration "
        f"{tuple(calib_ids.shape)}, distillation {tuple(dist_ids.shape)}, "
        f"{len(test_ids)} held-out tokens")

    def ppl(model):
        return bitrank_eval.perplexity(model, None, test_ids, seq_len=args.seq_len,
                                       device=dev, batch=16)["ppl"]

    rows = []
    ref_ppl = ppl(teacher16)
    if "fp16" in args.methods:
        rows.append({"method": "fp16", "bpw": 16.0, "ppl": ref_ppl, "seconds": 0.0})
        log(f"fp16: perplexity {ref_ppl:.3f}")
    for bpw in args.bpws:
        spent = 0.0
        if "blockwise" in args.methods or "distill" in args.methods:
            student = copy.deepcopy(base).to(dev)
            t0 = time.perf_counter()
            rep = bitrank.compress_model(student, calib_ids, bpw=bpw, paths=2, device=dev,
                                         steps=args.steps, layer_steps=args.layer_steps,
                                         seq_len=args.seq_len, progress=False)
            secs = time.perf_counter() - t0
            spent += secs
            p_b = ppl(student)
            rows.append({"method": "blockwise", "bpw": rep.bpw, "target": bpw, "ppl": p_b,
                         "seconds": secs})
            log(f"blockwise {bpw:g}: {rep.bpw:.3f} bpw, perplexity {p_b:.3f}, {secs:.1f} s")
        if "distill" in args.methods:
            t0 = time.perf_counter()
            kw = dict(steps=args.distill_steps, batch_size=args.distill_batch, device=dev,
                      progress=False)
            kw.update(args.distill_kwargs)
            drep = bitrank.distill(student, teacher16, {"input_ids": dist_ids,
                                                        "attention_mask": dist_mask}, **kw)
            secs = time.perf_counter() - t0
            spent += secs
            p_d = ppl(student)
            rows.append({"method": "distill", "bpw": rep.bpw, "target": bpw, "ppl": p_d,
                         "seconds": spent, "distill_seconds": secs,
                         "tokens_per_s": drep.tokens_per_s, "report": drep.to_dict()})
            log(drep.table())
            log(f"distill {bpw:g}: perplexity {p_d:.3f}, {secs:.1f} s "
                f"({drep.tokens_per_s:.0f} tokens/s)")
        if "peer" in args.methods:
            seconds = args.peer_seconds or spent or 60.0
            pst = copy.deepcopy(base).to(dev)
            info = peer.littlebit_convert(pst, bpw, residual=True)
            # a copy: train_peer casts its teacher in place (bf16, as LittleBit runs it)
            res = peer.train_peer(pst, copy.deepcopy(teacher16), dist_ids, dist_mask,
                                  seconds=seconds,
                                  batch_size=args.peer_batch, lr=args.peer_lr, device=dev)
            pst.eval()
            p_p = ppl(pst)
            rows.append({"method": "peer", "bpw": res.get("bpw", info), "target": bpw,
                         "ppl": p_p, "seconds": res["seconds"], "steps": res["steps"],
                         "tokens_per_s": res["tokens_per_s"]})
            log(f"peer {bpw:g}: perplexity {p_p:.3f}, {res['steps']} steps in "
                f"{res['seconds']:.1f} s ({res['tokens_per_s']:.0f} tokens/s)")
            del pst
    print(f"tiny LM ({args.model}), held-out perplexity on {len(test_ids)} KJV test tokens, "
          f"device {args.device}")
    print(f"{'method':<10} {'target':>6} {'bpw':>6} {'ppl':>9} {'x fp16':>7} {'s':>7} "
          f"{'tok/s':>9}")
    for r in rows:
        tps = r.get("tokens_per_s")
        print(f"{r['method']:<10} {r.get('target', '-')!s:>6} {float(r['bpw']):>6.3f} "
              f"{r['ppl']:>9.3f} {r['ppl'] / ref_ppl:>7.3f} {r['seconds']:>7.1f} "
              f"{'' if tps is None else f'{tps:.0f}':>9}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "rows": rows, "ref_ppl": ref_ppl,
                       "args": {k: v for k, v in vars(args).items()}}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
