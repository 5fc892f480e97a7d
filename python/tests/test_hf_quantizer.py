"""transformers' from_pretrained on a bitrank.save_pretrained directory (bitrank.hf_quantizer):
the same model as bitrank.load, bit for bit, for a causal LM and an encoder; the scales
stay float32 in a bf16 load; a directory whose file lacks a layer's tensors or holds them
at another rank than its config's, or whose config names a module that is not a linear,
is refused with the layer's name."""
import json
import os

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import bitrank
from bitrank import BLRLinear, hf_quantizer
from test_compress_model import tiny_bert, tiny_llama

pytestmark = pytest.mark.skipif(not hf_quantizer.REGISTERED,
                                reason="this transformers has no loader of weight transforms")


def compressed(make, tmp_path, seed):
    torch.manual_seed(seed)
    model = make()
    vocab = model.config.vocab_size
    bitrank.compress_model(model, torch.randint(0, vocab, (16, 16)), bpw=2.0, steps=2,
                           layer_steps=2, batch_size=4, progress=False)
    out = str(tmp_path / "model")
    bitrank.save_pretrained(model, out)
    return model, out


def edit_config(out, edit):
    path = os.path.join(out, "config.json")
    cfg = json.load(open(path))
    edit(cfg["quantization_config"]["layers"])
    json.dump(cfg, open(path, "w"))


def first_output(model, ids):
    with torch.no_grad():
        o = model(ids)
    return o.logits if hasattr(o, "logits") else o.last_hidden_state


@pytest.mark.parametrize("make,auto", [(tiny_llama, transformers.AutoModelForCausalLM),
                                       (tiny_bert, transformers.AutoModel)])
def test_from_pretrained_is_load(make, auto, tmp_path):
    seed = int(os.environ.get("BITRANK_TEST_SEED", "0"))
    model, out = compressed(make, tmp_path, seed)
    ids = torch.randint(0, model.config.vocab_size, (2, 12))
    want = first_output(model, ids)
    loaded = auto.from_pretrained(out).eval()
    blr = {n for n, m in loaded.named_modules() if isinstance(m, BLRLinear)}
    assert blr == {n for n, m in model.named_modules() if isinstance(m, BLRLinear)}
    assert len(blr) == len(json.load(open(os.path.join(out, "config.json")))
                           ["quantization_config"]["layers"])
    for n in blr:  # the signs and scales are the saved ones
        a, b = model.get_submodule(n), loaded.get_submodule(n)
        assert torch.equal(a.u, b.u) and torch.equal(a.v, b.v)
        for part in "hlg":
            assert torch.equal(getattr(a, part).half().float(), getattr(b, part))
    got = first_output(loaded, ids)
    ref = first_output(bitrank.load(out).eval(), ids)
    assert torch.equal(got, ref)
    # the f16 rounding of the file's scales is all that separates it from the model
    assert (got - want).abs().max() <= 2e-2 * want.abs().max()
    # saved again by bitrank, it loads again
    bitrank.save_pretrained(loaded, str(tmp_path / "again"))
    assert torch.equal(first_output(auto.from_pretrained(str(tmp_path / "again")), ids), got)


def test_bf16_load_keeps_float32_scales(tmp_path):
    model, out = compressed(tiny_llama, tmp_path, 1)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16)
    mods = [m for m in loaded.modules() if isinstance(m, BLRLinear)]
    assert mods and all(getattr(m, p).dtype == torch.float32 for m in mods for p in "hlg")
    assert loaded.model.embed_tokens.weight.dtype == torch.bfloat16


def test_missing_layer_tensors_refused(tmp_path):
    model, out = compressed(tiny_llama, tmp_path, 2)
    f = os.path.join(out, "model.safetensors")
    from safetensors import safe_open
    with safe_open(f, "pt") as fh:
        meta = fh.metadata()
    tensors = load_file(f)
    gone = "model.layers.1.mlp.up_proj.weight.blr."
    tensors = {k: v for k, v in tensors.items() if not k.startswith(gone)}
    save_file(tensors, f, metadata=meta)
    with pytest.raises(ValueError, match="model.layers.1.mlp.up_proj"):
        transformers.AutoModelForCausalLM.from_pretrained(out)


def test_config_rank_unlike_file_refused(tmp_path):
    model, out = compressed(tiny_llama, tmp_path, 4)
    edit_config(out, lambda layers: layers["model.layers.0.self_attn.q_proj"].update(
        rank=layers["model.layers.0.self_attn.q_proj"]["rank"] + 1))
    with pytest.raises(ValueError, match="q_proj.*rank"):
        transformers.AutoModelForCausalLM.from_pretrained(out)


def test_config_naming_no_linear_refused(tmp_path):
    model, out = compressed(tiny_llama, tmp_path, 3)
    edit_config(out, lambda layers: layers.update(
        {"model.layers.0.input_layernorm": {"rank": 4, "paths": 2}}))
    with pytest.raises(ValueError, match="input_layernorm"):
        transformers.AutoModelForCausalLM.from_pretrained(out)
