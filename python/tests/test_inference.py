"""Inference: BLRLinear's CUDA plan (br_blr_infer_cuda) against float64 references and
under CUDA graph capture, pack_for_inference / unpack_for_training / inference_memory,
`python -m bitrank generate`, and bench/bench_generate.py's refusal without a GPU.

The CUDA tests skip where torch sees no GPU or the library lacks the CUDA plan's
functions (an older or CPU-only build loads without them); everything else runs on
the CPU on a tiny Llama compressed by compress_model and saved with its own word
tokenizer.
"""
import copy
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers

import bitrank
import bitrank.torch as bt
from bitrank import BLRLinear, _lib

SEED = int(os.environ.get("BITRANK_TEST_SEED", random.SystemRandom().randrange(1 << 30)))
print(f"test_inference seed {SEED}")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(REPO, "bench", "bench_generate.py")


def _cuda_plan_reason():
    if not torch.cuda.is_available():
        return "needs a CUDA GPU (torch.cuda.is_available() is false)"
    if not _lib.has_cuda_infer():
        return f"{_lib.library_path()} has no CUDA inference plan (br_blr_infer_cuda_*)"
    return None


cuda_plan = pytest.mark.skipif(_cuda_plan_reason() is not None,
                               reason=_cuda_plan_reason() or "")


def _env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))


# ---- the tiny compressed Llama, made once

def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(90)]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(original dir, compressed dir, compressed-without-tokenizer dir): a tiny Llama
    and its compress_model output at 2 bpw."""
    root = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(SEED)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=128, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(cfg).eval()
    tok = _tokenizer()
    model.save_pretrained(str(root / "orig"))
    tok.save_pretrained(str(root / "orig"))
    ids = torch.randint(3, 93, (16, 24), generator=torch.Generator().manual_seed(SEED))
    bitrank.compress_model(model, ids, bpw=2.0, steps=2, layer_steps=2, batch_size=4,
                           device="cpu", progress=False, seed=SEED)
    bitrank.save_pretrained(model, str(root / "small"), tokenizer=tok)
    bitrank.save_pretrained(model, str(root / "small-notok"))
    return root / "orig", root / "small", root / "small-notok"


def _blr(model):
    return [m for m in model.modules() if isinstance(m, BLRLinear)]


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


# ---- the bindings

def test_optional_functions_may_be_absent():
    """A library without an optional function loads; has() says it is missing, and the
    CUDA plan's functions are bound or reported missing together."""
    code = ("import bitrank._lib as L\n"
            "L._OPTIONAL_SIGS['br_no_such_function'] = (None, [])\n"
            "L.lib()\n"
            "assert not L.has('br_no_such_function')\n"
            "assert L.has('br_ctx_new')\n"
            "print(L.has_cuda_infer())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(_lib.has_cuda_infer())


def test_pack_refuses_cuda_without_the_plan(tiny, monkeypatch):
    """pack_for_inference for a GPU with a library lacking the CUDA plan: a BitrankError
    naming the missing functions, raised before any layer changed."""
    monkeypatch.setattr(_lib, "_absent", set(_lib._absent) | set(_lib.CUDA_INFER))
    model = bitrank.load(str(tiny[1]))
    with pytest.raises(bitrank.BitrankError, match="br_blr_infer_cuda"):
        bitrank.pack_for_inference(model, "cuda")
    assert all(m.packed is None and m.h.device.type == "cpu" for m in _blr(model))


# ---- packing on the CPU

def test_pack_for_inference_cpu(tiny):
    """Packing frees the training state and gradients, freezes the layers and keeps
    their outputs; a forward that needs a graph is refused, .half()/.to() keep the
    model packed; unpack_for_training gives back trainable layers."""
    model = bitrank.load(str(tiny[1]))
    ids = torch.randint(3, 93, (2, 10), generator=torch.Generator().manual_seed(SEED))
    before = _logits(model, ids)
    for m in _blr(model):
        m.l.requires_grad_(False)  # to see it restored so by unpack_for_training
    model(input_ids=ids, labels=ids).loss.backward()  # the library's training layer
    assert all(m._state and m.h.grad is not None for m in _blr(model))
    rep = bitrank.pack_for_inference(model)
    assert isinstance(rep, bitrank.InferenceMemory) and rep.packed == len(_blr(model)) == 14
    for m in _blr(model):
        assert m.packed == torch.device("cpu") and m._state == {}
        assert m.h.grad is None and m.grad_u is None
        assert not any(p.requires_grad for p in m.parameters())
        assert m._infer is not None  # built by pack, not at the first forward
        assert "packed for cpu" in repr(m)
    builds = bt._InferPlan.calls["build"]
    assert torch.equal(_logits(model, ids), before)  # the same plan computes both
    assert bt._InferPlan.calls["build"] == builds
    # a forward that needs a graph has no backward to record: refused, by name
    x = torch.randn(3, 64, requires_grad=True)
    with pytest.raises(RuntimeError, match="unpack_for_training"):
        model.model.layers[0].self_attn.q_proj(x)
    with pytest.raises(RuntimeError, match="unpack_for_training"):
        model(input_ids=ids, labels=ids)  # the embeddings require grad
    # moving (a dtype change, .to("cpu")) keeps the layers packed
    model.half()
    model.float()
    model.to("cpu")
    assert all(m.packed == torch.device("cpu") for m in _blr(model))
    assert torch.allclose(_logits(model, ids), before, atol=1e-2, rtol=1e-2)  # via f16 scales
    # unpacked: trainable again (requires_grad as before packing: not l)
    bitrank.unpack_for_training(model)
    for m in _blr(model):
        assert m.packed is None and m.h.requires_grad and not m.l.requires_grad
    model(input_ids=ids, labels=ids).loss.backward()
    assert all(m.h.grad is not None for m in _blr(model))
    # a deep copy of a packed model is packed and builds its own plan
    bitrank.pack_for_inference(model)
    twin = copy.deepcopy(model)
    assert all(m.packed is not None and m._infer is None for m in _blr(twin))
    assert torch.equal(_logits(twin, ids), _logits(model, ids))


def test_inference_memory_cpu(tiny):
    """The report's numbers from the shapes: fp16 bytes of the compressed layers, the
    plans' bitmaps and f32 scales (with the layers' own copies for a CPU pack), the
    rest of the model once per tensor."""
    model = bitrank.load(str(tiny[1]))
    blr = _blr(model)
    rep = bitrank.inference_memory(model)
    assert rep.packed == 0 and len(rep.layers) == len(blr)
    own = [sum(t.numel() * t.element_size() for t in [m.u, m.v, *m.parameters(recurse=False)])
           for m in blr]
    assert rep.linear_bytes == sum(own)
    assert {layer.kind for layer in rep.layers} == {"module"}
    assert rep.linear_fp16_bytes == sum(2 * m.out_features * m.in_features
                                        + (2 * m.out_features if m.bias is not None else 0)
                                        for m in blr)
    blr_ptrs = {t.data_ptr() for m in blr for t in [m.u, m.v, *m.parameters(recurse=False)]}
    rest = {t.data_ptr(): t for t in list(model.parameters()) + list(model.buffers())
            if t.data_ptr() not in blr_ptrs}
    assert rep.other_bytes == sum(t.numel() * t.element_size() for t in rest.values())
    assert rep.other_fp16_bytes == sum(2 * t.numel() if t.is_floating_point()
                                       else t.numel() * t.element_size() for t in rest.values())
    bitrank.pack_for_inference(model)
    rep = bitrank.inference_memory(model)
    assert rep.packed == rep.estimated == len(blr) and rep.host_bytes == 0
    m = blr[0]
    r32, m32, n32 = [(k + 31) // 32 * 32 for k in (m.rank, m.out_features, m.in_features)]
    plan = m.paths * ((m32 + n32) * r32 // 8 + 4 * (m.out_features + m.in_features + m.rank))
    assert m.plan_bytes() == (plan + (4 * m.out_features if m.bias is not None else 0),
                              "estimate")
    assert rep.layers[0].nbytes == m.plan_bytes()[0] + own[0]
    assert rep.total_bytes == rep.linear_bytes + rep.other_bytes
    assert rep.linear_ratio == pytest.approx(rep.linear_fp16_bytes / rep.linear_bytes)
    d = rep.to_dict()
    assert d["linears"] == len(blr) and json.dumps(d)
    assert "compressed layers" in str(rep) and "fp16" in str(rep)
    with pytest.raises(ValueError, match="no BLRLinear"):
        bitrank.inference_memory(torch.nn.Linear(3, 4))


# ---- python -m bitrank generate

def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "bitrank", "generate", *args],
                          capture_output=True, text=True, env=_env(), timeout=timeout)


def _greedy(model, tok, prompt, n, device="cpu"):
    enc = tok(prompt, return_tensors="pt")
    cfg = transformers.GenerationConfig(max_new_tokens=n, do_sample=False,
                                        eos_token_id=tok.eos_token_id,
                                        pad_token_id=tok.eos_token_id, min_new_tokens=n)
    with torch.inference_mode():
        out = model.generate(input_ids=enc["input_ids"].to(device),
                             attention_mask=enc["attention_mask"].to(device),
                             generation_config=cfg)
    return out[0, enc["input_ids"].shape[1]:].tolist()


def test_cli_generate(tiny, tmp_path, capsys):
    """The compressed model and the original generate through the same harness: both
    texts, tokens/s and weight bytes printed; the compressed model's tokens are the
    greedy tokens of the packed model in this process; mistakes are one line, exit 1."""
    orig, small, notok = map(str, tiny)
    out = tmp_path / "g.json"
    r = _cli(small, "--prompt", "w1 w2 w3", "--max-new-tokens", "6", "--ignore-eos",
             "--device", "cpu", "--compare-fp16", orig, "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "== compressed" in r.stdout and "== original" in r.stdout
    assert r.stdout.count("tokens/s") >= 3 and "weights" in r.stdout
    assert "packed, kernels" in r.stdout
    res = json.loads(out.read_text())
    c = res["compressed"]
    assert c["new_tokens"] == 6 and res["original"]["new_tokens"] == 6
    assert c["memory"]["packed"] == 14 and c["kernels"]
    assert res["memory_ratio"] > 1 and 0 <= res["agree_tokens"] <= 6
    model = bitrank.load(small)
    bitrank.pack_for_inference(model)
    assert c["tokens"] == _greedy(model, _tokenizer(), "w1 w2 w3", 6)
    ref = transformers.LlamaForCausalLM.from_pretrained(orig).eval()
    assert res["original"]["tokens"] == _greedy(ref, _tokenizer(), "w1 w2 w3", 6)
    # the rest in this process (each subprocess pays for importing torch again)
    from bitrank.__main__ import main
    assert main(["generate", small, "--prompt", "w4", "--max-new-tokens", "3", "--device",
                 "cpu", "--no-pack"]) == 0
    assert "not packed" in capsys.readouterr().out
    # the tokenizer from --compare-fp16 when the compressed model has none
    assert main(["generate", notok, "--prompt", "w5", "--max-new-tokens", "2", "--device",
                 "cpu", "--compare-fp16", orig]) == 0
    capsys.readouterr()
    for args, what in (((str(tmp_path / "nope"),), "no such file"),
                       ((notok, "--device", "cpu"), "no tokenizer"),
                       ((small, "--device", "tpu"), "--device"),
                       ((small, "--compare-fp16", str(tmp_path / "nope")), "no such file"),
                       ((small, "--json", str(tmp_path / "no" / "g.json")), "does not exist")):
        assert main(["generate", *args]) == 1, args
        err = capsys.readouterr().err
        assert what in err and len(err.strip().splitlines()) == 1, (args, err)
    with pytest.raises(SystemExit) as e:
        main(["generate", small, "--max-new-tokens", "0"])
    assert e.value.code == 1 and "not positive" in capsys.readouterr().err


def test_cli_generate_compile(tiny, tmp_path):
    """--compile: a static cache and the forward through torch.compile (fullgraph, no
    graph break); the packed layers' plans run inside the compiled graphs and the
    greedy tokens are the eager ones."""
    from bitrank.__main__ import main
    orig, small, _ = map(str, tiny)
    out = tmp_path / "c.json"
    torch._dynamo.utils.counters.clear()
    runs = bt._InferPlan.calls["run"]
    assert main(["generate", small, "--prompt", "w1 w2 w3", "--max-new-tokens", "5",
                 "--ignore-eos", "--device", "cpu", "--compile", "--json", str(out)]) == 0
    assert not torch._dynamo.utils.counters["graph_break"]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 2
    assert bt._InferPlan.calls["run"] > runs
    c = json.loads(out.read_text())["compressed"]
    assert c["compiled"] and c["new_tokens"] == 5 and c["warmup_s"] > 0
    model = bitrank.load(small)
    bitrank.pack_for_inference(model)
    assert c["tokens"] == _greedy(model, _tokenizer(), "w1 w2 w3", 5)


# ---- bench/bench_generate.py

def test_bench_generate_refuses_without_the_plan():
    """Without a GPU, or with a library lacking the CUDA plan, the benchmark says why
    and exits 2 (--dense-only needs only the GPU)."""
    reason = _cuda_plan_reason()
    if reason is None:
        pytest.skip("a GPU and the CUDA plan are here: test_bench_generate_small runs it")
    r = subprocess.run([sys.executable, BENCH, "--small"], capture_output=True, text=True,
                       env=_env(), timeout=300)
    assert r.returncode == 2, (r.stdout, r.stderr)
    want = "CUDA GPU" if not torch.cuda.is_available() else "br_blr_infer_cuda"
    assert want in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


# ---- torch.compile

def _compile_pair(rng, device):
    """Two random BLRLinear layers with a ReLU between (exact under inductor too)."""
    a, _, _ = random_layer(rng, 48, 64, 16, 2, device)
    b, _, _ = random_layer(rng, 40, 48, 8, 1, device, bias=False)
    return torch.nn.Sequential(a, torch.nn.ReLU(), b)


@pytest.mark.parametrize("packed", [False, True])
def test_compile_fullgraph_cpu(packed):
    """torch.compile(fullgraph=True) of a model with BLRLinear layers needing no graph:
    one bitrank::blr_linear operator a layer (no graph break), running the same plan
    as eager code: the same bits, the plan's runs counted, no training forward."""
    torch._dynamo.reset()
    rng = np.random.default_rng(SEED + 31 + packed)
    model = _compile_pair(rng, "cpu")
    if packed:
        bitrank.pack_for_inference(model)
    x = torch.from_numpy(rng.normal(0, 1, (2, 3, 64))).float()
    with torch.no_grad():
        ref = model(x)
        compiled = torch.compile(model, fullgraph=True, backend="inductor")
        calls, runs = dict(bt._BLRFunction.calls), bt._InferPlan.calls["run"]
        y = compiled(x)
        x2 = torch.from_numpy(rng.normal(0, 1, (2, 3, 64))).float()
        y2 = compiled(x2)
    assert bt._InferPlan.calls["run"] == runs + 4 and bt._BLRFunction.calls == calls
    assert y.shape == (2, 3, 40) and torch.equal(y, ref)
    with torch.no_grad():
        assert torch.equal(y2, model(x2))


def test_compile_module_ids():
    """Each module is its own operator argument: a deep copy gets its own id and runs
    its own weights under the copy's compiled graph; an id whose module is gone is
    refused by name."""
    torch._dynamo.reset()
    rng = np.random.default_rng(SEED + 33)
    model = _compile_pair(rng, "cpu")
    twin = copy.deepcopy(model)
    assert twin[0]._op_id != model[0]._op_id and twin[2]._op_id != model[2]._op_id
    with torch.no_grad():
        twin[0].h.mul_(2.0)
        x = torch.from_numpy(rng.normal(0, 1, (4, 64))).float()
        ya = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
        yb = torch.compile(twin, fullgraph=True, backend="aot_eager")(x)
        assert torch.equal(ya, model(x)) and torch.equal(yb, twin(x))
        assert not torch.equal(ya, yb)
    with pytest.raises(RuntimeError, match="no longer exists"):
        torch.ops.bitrank.blr_linear(x, 10 ** 12, 48)


def test_compile_operator_registration():
    """The operator's schema, fake (meta) kernel and autograd registration pass
    torch.library.opcheck, and a training forward under torch.compile (not fullgraph)
    still records the library's backward."""
    rng = np.random.default_rng(SEED + 35)
    mod, w, b = random_layer(rng, 48, 64, 16, 2, "cpu")
    x = torch.from_numpy(rng.normal(0, 1, (5, 64))).float()
    res = torch.library.opcheck(torch.ops.bitrank.blr_linear.default, (x, mod._op_id, 48))
    assert all(v == "SUCCESS" for v in res.values()), res
    torch._dynamo.reset()
    y = torch.compile(mod, backend="aot_eager")(x)
    y.sum().backward()
    assert mod.h.grad is not None and mod.g.grad is not None
    ref = x.double() @ w.T + b
    assert float((y.detach().double() - ref).abs().max() / ref.abs().max()) < 3e-3


# ---- the CUDA plan (GPU)

def random_layer(rng, m, n, r, paths, device, bias=True):
    """A BLRLinear with random signs and scales, and the float64 dense W it stands for
    (from the ±1 matrices drawn here, independently of the package's layout code)."""
    su = rng.choice([-1.0, 1.0], size=(paths, m, r))
    sv = rng.choice([-1.0, 1.0], size=(paths, n, r))
    h = rng.uniform(0.5, 1.5, (paths, m)) * rng.choice([-1, 1], (paths, m)) / np.sqrt(r)
    l = rng.uniform(0.2, 2.0, (paths, r))
    g = rng.uniform(0.5, 1.5, (paths, n)) * rng.choice([-1, 1], (paths, n)) / np.sqrt(n)
    pack = lambda s: np.packbits(s > 0, axis=-1, bitorder="little")  # noqa: E731
    mod = BLRLinear(n, m, r, paths, bias=bias, device=device)
    with torch.no_grad():
        mod.u.copy_(torch.from_numpy(pack(su)))
        mod.v.copy_(torch.from_numpy(pack(sv)))
        mod.h.copy_(torch.from_numpy(h))
        mod.l.copy_(torch.from_numpy(l))
        mod.g.copy_(torch.from_numpy(g))
        if bias:
            mod.bias.copy_(torch.from_numpy(rng.normal(0, 0.1, m)))
    w = sum(h[p][:, None] * ((su[p] * l[p]) @ sv[p].T) * g[p][None, :] for p in range(paths))
    b = mod.bias.detach().double().cpu() if bias else torch.zeros(m, dtype=torch.float64)
    return mod, torch.from_numpy(w), b


# the output's own rounding, and the plan's error (f16 operands, f32 sums; bf16
# activations may keep the intermediate in bf16) relative to the largest output
EPS = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
TOL = {torch.float16: 3e-3, torch.bfloat16: 1e-2}


def _check(y, x, w, b, dtype):
    """Per token: max_i (|y - y_ref| - eps |y_ref|) <= TOL · max_i |y_ref|, y_ref the f64
    product of the input as given (already rounded to its dtype)."""
    y_ref = x.double().cpu() @ w.T + b
    y = y.double().cpu()
    assert torch.isfinite(y).all()
    err = (y - y_ref).abs() - EPS[dtype] * y_ref.abs()
    worst = float((err.amax(-1) / y_ref.abs().amax(-1)).max())
    assert worst <= TOL[dtype], worst


@cuda_plan
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("ntok", [1, 16, 100])
@pytest.mark.parametrize("shape", [(64, 96, 32, 1), (100, 70, 20, 2), (384, 384, 64, 2),
                                   (1000, 520, 200, 2)])
def test_cuda_plan_against_f64(dtype, ntok, shape):
    """Under no_grad a CUDA module runs the CUDA plan (not the training forward), in the
    input's dtype, within the tolerance of an f64 reference; infer_kernel names it."""
    rng = np.random.default_rng(SEED + ntok + hash(shape) % 1000)
    m, n, r, paths = shape
    mod, w, b = random_layer(rng, m, n, r, paths, "cuda", bias=ntok != 16)
    x = torch.from_numpy(rng.normal(0, 1, (ntok, n))).to("cuda", dtype)
    calls, runs = dict(bt._BLRFunction.calls), bt._CudaPlan.calls["run"]
    with torch.no_grad():
        y = mod(x)
    assert bt._CudaPlan.calls["run"] == runs + 1 and bt._BLRFunction.calls == calls
    assert y.dtype == dtype and y.shape == (ntok, m) and y.device == x.device
    assert isinstance(mod.infer_kernel, str) and mod.infer_kernel not in ("", "none")
    _check(y, x, w, b, dtype)


@cuda_plan
@pytest.mark.cuda
def test_cuda_plan_f32_input_and_shapes():
    """f32 inputs go through f16 and come back f32; leading dimensions are kept; an
    empty input gives an empty output."""
    rng = np.random.default_rng(SEED + 5)
    mod, w, b = random_layer(rng, 100, 70, 20, 2, "cuda")
    x = torch.from_numpy(rng.normal(0, 1, (3, 5, 70))).float().cuda()
    with torch.no_grad():
        y = mod(x)
        assert mod(x[:0]).shape == (0, 5, 100)
    assert y.dtype == torch.float32 and y.shape == (3, 5, 100)
    _check(y.reshape(15, 100), x.reshape(15, 70).half(), w, b, torch.float16)


@cuda_plan
@pytest.mark.cuda
def test_cuda_plan_only_without_graph():
    """The plan has no backward: a forward that needs a graph runs the training layer."""
    rng = np.random.default_rng(SEED + 6)
    mod, w, b = random_layer(rng, 64, 96, 32, 2, "cuda")
    x = torch.from_numpy(rng.normal(0, 1, (4, 96))).half().cuda()
    f, runs = bt._BLRFunction.calls["forward"], bt._CudaPlan.calls["run"]
    y = mod(x)
    assert y.requires_grad and bt._BLRFunction.calls["forward"] == f + 1
    assert bt._CudaPlan.calls["run"] == runs
    with torch.inference_mode():
        mod(x)
    assert bt._CudaPlan.calls["run"] == runs + 1


@cuda_plan
@pytest.mark.cuda
def test_cuda_plan_follows_parameters():
    """Kept while the parameters stay, rebuilt after an in-place change of h or u."""
    rng = np.random.default_rng(SEED + 7)
    mod, w, b = random_layer(rng, 64, 96, 40, 2, "cuda")
    x = torch.from_numpy(rng.normal(0, 1, (4, 96))).half().cuda()
    with torch.no_grad():
        mod(x)
        builds = bt._CudaPlan.calls["build"]
        mod(x)
        assert bt._CudaPlan.calls["build"] == builds
        mod.h[0].mul_(-2.0)
        y = mod(x)
    assert bt._CudaPlan.calls["build"] == builds + 1
    _check(y, x, mod.dense_weight(torch.float64).cpu(), b, torch.float16)
    with torch.no_grad():
        mod.u[1, 3, 0] ^= 0b11
        y = mod(x)
    assert bt._CudaPlan.calls["build"] == builds + 2
    _check(y, x, mod.dense_weight(torch.float64).cpu(), b, torch.float16)


class _CountingLib:
    """The library's functions, counting br_ctx_set_stream calls."""

    def __init__(self, lib):
        self.lib, self.set_stream = lib, 0

    def __getattr__(self, name):
        if name == "br_ctx_set_stream":
            self.set_stream += 1
        return getattr(self.lib, name)


@cuda_plan
@pytest.mark.cuda
def test_cuda_plan_follows_the_stream(monkeypatch):
    """The context issues on torch's current stream, switching only when it changed:
    forwards on one stream call br_ctx_set_stream at most once; on a side stream the
    result is right and ordered after the side stream's earlier work."""
    rng = np.random.default_rng(SEED + 8)
    mod, w, b = random_layer(rng, 384, 384, 64, 2, "cuda")
    x = torch.from_numpy(rng.normal(0, 1, (8, 384))).half().cuda()
    with torch.no_grad():
        mod(x)
        ctx = _lib.context("cuda")
        counting = _CountingLib(ctx._lib)
        monkeypatch.setattr(ctx, "_lib", counting)
        for _ in range(5):
            mod(x)
        assert counting.set_stream == 0
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            x2 = torch.from_numpy(rng.normal(0, 1, (8, 384))).half().cuda() * 3
            y2 = mod(x2)
        assert counting.set_stream == 1
        torch.cuda.current_stream().wait_stream(side)
        y = mod(x)
        assert counting.set_stream == 2
    torch.cuda.synchronize()
    _check(y2, x2, w, b, torch.float16)
    _check(y, x, w, b, torch.float16)


@cuda_plan
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_graph_capture_and_replay(dtype):
    """A forward captured in torch.cuda.graph after one eager forward replays to the
    eager result of new inputs (the same kernel: the same bits); a capture the plan
    is not ready for (not built, more tokens than any run before, a new dtype's bias)
    is refused with a message saying what to run first."""
    rng = np.random.default_rng(SEED + 9)
    mod, w, b = random_layer(rng, 1000, 520, 200, 2, "cuda")
    static_x = torch.zeros(4, 520, dtype=dtype, device="cuda")
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            mod(static_x)  # warm-up: plan built, scratch sized
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = mod(static_x)
        assert mod._infer_cuda.captured
        for _ in range(3):
            x = torch.from_numpy(rng.normal(0, 1, (4, 520))).to("cuda", dtype)
            static_x.copy_(x)
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(static_y, mod(x))
            _check(static_y, x, w, b, dtype)
        # not ready: more tokens than before
        g2 = torch.cuda.CUDAGraph()
        with pytest.raises(RuntimeError, match="more than any run"):
            with torch.cuda.graph(g2):
                mod(torch.zeros(9, 520, dtype=dtype, device="cuda"))
        # not ready: a fresh module whose plan is not built
        fresh, _, _ = random_layer(rng, 64, 96, 32, 1, "cuda")
        g3 = torch.cuda.CUDAGraph()
        with pytest.raises(RuntimeError, match="built before"):
            with torch.cuda.graph(g3):
                fresh(torch.zeros(1, 96, dtype=dtype, device="cuda"))
        # parameters changed after the capture: the captured plan is kept (the graph
        # may replay it) and the change is warned about
        mod.h[0, 0] += 1.0
        with pytest.warns(UserWarning, match="capture it again"):
            mod(static_x)
        assert len(mod._captured) == 1 and mod._captured[0].ptr
        g.replay()
        torch.cuda.synchronize()


@cuda_plan
@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compile_cuda(mode):
    """On the GPU, torch.compile(fullgraph=True) of packed layers runs their CUDA plans
    inside the compiled graph (and inside its CUDA graphs with mode="reduce-overhead"):
    the eager outputs, bit for bit, f16 in and out."""
    torch._dynamo.reset()
    rng = np.random.default_rng(SEED + 37)
    model = _compile_pair(rng, "cuda")
    bitrank.pack_for_inference(model)
    xs = [torch.from_numpy(rng.normal(0, 1, (3, 64))).to("cuda", torch.float16)
          for _ in range(4)]
    with torch.no_grad():
        compiled = torch.compile(model, fullgraph=True, mode=mode)
        runs = bt._CudaPlan.calls["run"]
        ys = [compiled(x).clone() for x in xs]
        assert bt._CudaPlan.calls["run"] > runs
        for x, y in zip(xs, ys):
            assert y.dtype == torch.float16 and torch.equal(y, model(x))
    assert model[0].infer_kernel not in (None, "", "none")


@cuda_plan
@pytest.mark.cuda
def test_pack_for_inference_cuda(tiny):
    """On the GPU: the plans are the compressed layers' one device copy (parameters to
    host memory, the device memory they held returned), outputs as before packing,
    the report counts the plans' bytes as the library does, well under the fp16
    bytes; .to("cuda") keeps the model packed, .to("cpu") packs it for the CPU."""
    model = bitrank.load(str(tiny[1]), device="cuda", dtype=torch.float16)
    ids = torch.randint(3, 93, (2, 10), device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(SEED))
    before = _logits(model, ids)  # the plans, from the device parameters
    for m in _blr(model):
        m.h.requires_grad_(True)
    model(input_ids=ids, labels=ids).loss.backward()  # training state on the device
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_allocated()
    own = sum(t.numel() * t.element_size() for m in _blr(model)
              for t in [m.u, m.v, *m.parameters(recurse=False)])
    rep = bitrank.pack_for_inference(model)
    assert torch.cuda.memory_allocated() <= allocated - own  # parameters and grads gone
    for m in _blr(model):
        assert m.packed == torch.device("cuda", torch.cuda.current_device())
        assert m.h.device.type == "cpu" and m.u.device.type == "cpu" and m._state == {}
    assert rep.packed == 14 and rep.estimated == 0 and rep.host_bytes == own
    assert {layer.kind for layer in rep.layers} == {"cuda-plan"}
    assert rep.linear_bytes == sum(m._infer_cuda.nbytes() for m in _blr(model))
    after = _logits(model, ids)
    assert torch.equal(after, before)
    rep = bitrank.inference_memory(model)  # the scratch is sized now
    assert rep.linear_bytes == sum(m._infer_cuda.nbytes() for m in _blr(model)) > 0
    with pytest.raises(RuntimeError, match="unpack_for_training"):
        model(input_ids=ids, labels=ids)
    model.to("cuda")
    assert all(m.packed is not None and m.h.device.type == "cpu" for m in _blr(model))
    assert torch.equal(_logits(model, ids), before)
    model.to("cpu").float()
    assert all(m.packed == torch.device("cpu") for m in _blr(model))
    y = _logits(model, ids.cpu())
    assert torch.allclose(y, before.float().cpu(), atol=5e-2, rtol=5e-2)
    bitrank.unpack_for_training(model, "cuda")
    model.to("cuda")
    model(input_ids=ids, labels=ids).loss.backward()


@cuda_plan
@pytest.mark.cuda
def test_inference_memory_cuda_at_1bpw():
    """A 4096x4096 layer at 1 bpw, 2 paths, packed and run on a token: its plan's
    device bytes (the library's count) are near the bitmaps and scales it must hold
    and at most 1/12 of the layer's fp16 bytes (the issue's target)."""
    from bitrank import layout
    n = 4096
    r = layout.rank_for(n, n, 2, 1.0)
    rng = np.random.default_rng(SEED + 11)
    mod, _, _ = random_layer(rng, n, n, r, 2, "cuda", bias=False)
    model = torch.nn.Sequential(mod)
    rep = bitrank.pack_for_inference(model)
    with torch.no_grad():
        model(torch.zeros(1, n, dtype=torch.float16, device="cuda"))
    rep = bitrank.inference_memory(model)
    r32 = (r + 31) // 32 * 32
    estimate = 2 * (2 * n * r32 // 8 + 4 * (2 * n + r))  # the bitmaps and f32 scales
    assert rep.layers[0].kind == "cuda-plan"
    assert 0.9 * estimate <= rep.linear_bytes <= 1.25 * estimate, (rep.linear_bytes, estimate)
    assert rep.linear_ratio >= 12.0, rep.linear_ratio


@cuda_plan
@pytest.mark.cuda
@pytest.mark.parametrize("compiled", [False, True])
def test_cli_generate_cuda(tiny, compiled):
    orig, small, _ = map(str, tiny)
    r = _cli(small, "--prompt", "w1 w2 w3", "--max-new-tokens", "8", "--ignore-eos",
             "--device", "cuda", "--compare-fp16", orig, *(["--compile"] if compiled else []))
    assert r.returncode == 0, r.stderr
    assert "packed, kernels" in r.stdout and "== original" in r.stdout
    assert ("compiled, warm-up" in r.stdout) == compiled


@cuda_plan
@pytest.mark.cuda
def test_bench_generate_small():
    """bench_generate --small: its checks pass, and it prints the two models' lines and
    the comparison as JSON."""
    r = subprocess.run([sys.executable, BENCH, "--small", "--tokens", "16", "--runs", "2"],
                       capture_output=True, text=True, env=_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert [row["variant"] for row in rows] == ["fp16", "blr-1bpw-p2", "blr-vs-fp16"]
    assert rows[2]["speedup"] > 0 and rows[2]["mem_ratio"] > 1
