"""compress_model on tiny transformers models built from configs (random weights):
every linear becomes a BLRLinear, the joint training does not lose to the layer-wise
result, and save_pretrained / load give back a model with the same outputs. Also the
CLI's output file beside the original config.json loads."""
import json
import os
import random
import shutil
import subprocess

import pytest
import torch
import transformers

import bitrank
from bitrank import BLRLinear

SEED = int(os.environ.get("BITRANK_TEST_SEED", random.SystemRandom().randrange(1 << 30)))
print(f"test_compress_model seed {SEED}")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tiny_bert():
    cfg = transformers.BertConfig(vocab_size=120, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=128,
                                  max_position_embeddings=64)
    return transformers.BertModel(cfg).eval()


def tiny_llama():
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=128, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval()


def outputs(model, ids):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids))
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


@pytest.mark.parametrize("make,n_linears", [(tiny_bert, 12), (tiny_llama, 14)])
def test_compress_save_load(make, n_linears, tmp_path):
    torch.manual_seed(SEED)
    model = make()
    orig = outputs(model, torch.randint(0, 100, (2, 16)))
    ids = torch.randint(0, 100, (16, 24))
    report = bitrank.compress_model(model, ids, bpw=2.0, paths=2, steps=30, layer_steps=20,
                                    batch_size=4, device="cpu", progress=False, seed=SEED)
    blr = [m for m in model.modules() if isinstance(m, BLRLinear)]
    assert len(blr) == n_linears == len(report.layers)
    assert not any(type(m) is torch.nn.Linear for n, m in model.named_modules()
                   if ".layers." in n or ".layer." in n)
    assert 0 < report.bpw <= 2.0
    assert len(report.blocks) == 2
    for b in report.blocks:
        assert b.err_layerwise == b.err_layerwise and b.err_trained == b.err_trained
        # the kept state is the best held-out one, the layer-wise state included
        # (the finished block runs in the library's f16 operands: a small margin)
        assert b.err_trained <= b.err_layerwise * 1.05 + 1e-3, (b.err_trained, b.err_layerwise)
    for r in report.layers:
        assert 0 <= r.err_model < 1.5 and r.rank >= 1
    assert "bits per weight" in report.table()
    test_ids = torch.randint(0, 100, (2, 16))
    y = outputs(model, test_ids)
    assert torch.isfinite(y).all()
    model_dir = tmp_path / "out"
    bitrank.save_pretrained(model, str(model_dir))
    cfg = json.loads((model_dir / "config.json").read_text())
    qc = cfg["quantization_config"]
    assert qc["quant_method"] == "bitrank" and len(qc["layers"]) == n_linears
    loaded = bitrank.load(str(model_dir))
    assert sum(isinstance(m, BLRLinear) for m in loaded.modules()) == n_linears
    y2 = outputs(loaded, test_ids)
    assert torch.equal(y, y2), float((y - y2).abs().max())
    assert orig.shape[-1] == y.shape[-1]


def test_calibration_mistakes_are_refused():
    model = tiny_bert()
    with pytest.raises(ValueError, match="tokenizer"):
        bitrank.compress_model(model, ["some text"], progress=False, device="cpu")
    with pytest.raises(ValueError, match="target"):
        bitrank.compress_model(model, torch.zeros(4, 8, dtype=torch.long), target="x",
                               progress=False, device="cpu")
    with pytest.raises(ValueError, match="too few"):
        bitrank.compress_model(model, torch.randint(0, 100, (4, 8)), batch_size=4, bpw=2.0,
                               progress=False, device="cpu")
    with pytest.raises(bitrank.BitrankError, match="too small"):
        bitrank.compress_model(model, torch.randint(0, 100, (8, 8)), batch_size=4, bpw=0.5,
                               progress=False, device="cpu")


def test_load_refuses_other_files(tmp_path):
    from safetensors.torch import save_file
    model = tiny_bert()
    model.save_pretrained(str(tmp_path))
    with pytest.raises(ValueError, match="not a bitrank file"):
        bitrank.load(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        bitrank.load(str(tmp_path / "nowhere"))
    save_file({"x": torch.zeros(2)}, str(tmp_path / "model.safetensors"),
              metadata={"format": "bitrank-blr", "format_version": "1",
                        "encoder.layer.0.output.dense.weight.blr": "{\"paths\": 1}"})
    with pytest.raises(ValueError, match="malformed"):
        bitrank.load(str(tmp_path))


def _cli():
    for d in ("build", "build-cpu"):
        p = os.path.join(REPO, d, "bitrank")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


@pytest.mark.skipif(_cli() is None, reason="the bitrank CLI is not built (build/bitrank)")
def test_cli_output_loads(tmp_path):
    """`bitrank compress` on a transformers checkpoint, then bitrank.load of its output
    with the original config.json: the loaded model computes with the file's Ŵ."""
    torch.manual_seed(SEED)
    model = tiny_bert()
    src = tmp_path / "src"
    model.save_pretrained(str(src), safe_serialization=True)
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(src / "config.json", out / "config.json")
    r = subprocess.run([_cli(), "compress", str(src / "model.safetensors"), "-o",
                        str(out / "model.safetensors"), "--bpw", "2", "--steps", "5",
                        "--device", "cpu"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    loaded = bitrank.load(str(out))
    blr = {n: m for n, m in loaded.named_modules() if isinstance(m, BLRLinear)}
    assert len(blr) == 13  # the CLI takes every 2-D weight: the 12 of the blocks and the pooler's
    # reference: the original model with each compressed weight replaced by the
    # file's dense Ŵ, formed here in float64 from the file's tensors
    from safetensors import safe_open
    import numpy as np
    ref = tiny_bert()
    ref.load_state_dict(model.state_dict())
    with safe_open(str(out / "model.safetensors"), "np") as f:
        meta = f.metadata()
        for name in blr:
            info = json.loads(meta[f"{name}.weight.blr"])
            t = {k: f.get_tensor(f"{name}.weight.blr.{k}") for k in "uvhlg"}
            rr = info["rank"]
            sign = lambda b: np.unpackbits(b, axis=-1, bitorder="little")[..., :rr] * 2.0 - 1.0
            su, sv = sign(t["u"]), sign(t["v"])
            h, l, g = (t[k].astype(np.float64) for k in "hlg")
            w = sum(h[p][:, None] * ((su[p] * l[p]) @ sv[p].T) * g[p][None, :]
                    for p in range(info["paths"]))
            with torch.no_grad():
                ref.get_submodule(name).weight.copy_(torch.from_numpy(w))
    ids = torch.randint(0, 100, (2, 12))
    a, b = outputs(loaded, ids), outputs(ref, ids)
    assert float((a - b).norm() / b.norm()) < 5e-3


def test_littlebit_model_round_trip(tmp_path):
    """A compressed tiny Llama exported as a LittleBit checkpoint and loaded back as a
    model of BLRLinear computes the same logits (bf16 scales are exact for f16-rounded
    ones only up to bf16's precision: exported losslessly as float32 here)."""
    from bitrank import littlebit
    torch.manual_seed(SEED)
    model = tiny_llama()
    ids = torch.randint(0, 100, (8, 16))
    bitrank.compress_model(model, ids, bpw=2.0, steps=5, layer_steps=5, batch_size=4,
                           device="cpu", progress=False, seed=SEED)
    littlebit.export_model(model, str(tmp_path / "lb"), dtype=torch.float32, lossless=True)
    assert (tmp_path / "lb" / "littlebit_config.json").is_file()
    back = littlebit.load_model(str(tmp_path / "lb"))
    n_blr = sum(isinstance(m, BLRLinear) for m in back.modules())
    assert n_blr == 14
    test_ids = torch.randint(0, 100, (2, 12))
    assert torch.equal(outputs(model, test_ids), outputs(back, test_ids))


def test_bf16_model_keeps_f32_scales(tmp_path):
    """A bf16 model: its compressed linears' scales stay float32 (rounded to f16 as the
    file stores them, never to bf16), the rest of the model stays bf16, and it runs."""
    torch.manual_seed(SEED)
    model = tiny_llama().to(torch.bfloat16)
    ids = torch.randint(0, 100, (8, 16))
    bitrank.compress_model(model, ids, bpw=2.0, steps=5, layer_steps=5, batch_size=4,
                           device="cpu", progress=False, seed=SEED)
    blr = [m for m in model.modules() if isinstance(m, BLRLinear)]
    assert blr and all(m.h.dtype == torch.float32 for m in blr)
    for m in blr:  # exactly f16 values: not rounded further
        assert torch.equal(m.h.detach(), m.h.detach().half().float())
    assert model.model.embed_tokens.weight.dtype == torch.bfloat16
    y = outputs(model, torch.randint(0, 100, (2, 12)))
    assert y.dtype == torch.bfloat16 and torch.isfinite(y.float()).all()
    bitrank.save_pretrained(model, str(tmp_path / "m"))
    back = bitrank.load(str(tmp_path / "m"), dtype=torch.bfloat16)
    assert all(m.h.dtype == torch.float32 for m in back.modules() if isinstance(m, BLRLinear))


def test_layer_token_cap():
    """max_layer_tokens below the calibration: each linear gets at most that many
    training tokens (drawn at record time) and the job still works."""
    torch.manual_seed(SEED)
    model = tiny_bert()
    ids = torch.randint(0, 100, (16, 24))
    seen = []
    orig = bitrank.compress.compress_linear

    def spy(weight, inputs, **kw):
        seen.append((inputs.shape[0], kw.get("eval_tokens")))
        return orig(weight, inputs, **kw)
    bitrank.compress.compress_linear = spy
    try:
        bitrank.compress_model(model, ids, bpw=2.0, steps=2, layer_steps=2, batch_size=4,
                               device="cpu", progress=False, seed=SEED, max_layer_tokens=100)
        assert len(seen) == 12
        for total, held in seen:
            # 100 of the 3 training batches' 288 tokens at most (about 125 drawn at
            # record time, then cut), plus the held-out batch's 4 x 24
            assert held == 96 and 96 + 50 < total <= 96 + 100, (total, held)
        seen.clear()
        ids = torch.randint(0, 100, (64, 24))  # 7 batches of 8 x 24 train (1344), 1 held out (192)
        bitrank.compress_model(tiny_bert(), ids, bpw=2.0, steps=2, layer_steps=2, batch_size=8,
                               device="cpu", progress=False, seed=SEED, max_layer_tokens=100000)
        assert seen and all(s == (1344 + 192, 192) for s in seen), seen
    finally:
        bitrank.compress.compress_linear = orig
