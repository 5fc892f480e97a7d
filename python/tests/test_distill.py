"""bitrank.distill on tiny transformers models (random weights, CPU): the sliced KL
against an f64 reference, the held-out loss going down, both engines (the library
engine through the library's kernels and optimizer), checkpoints that resume to the
same model as an uninterrupted run, and the mistakes refused."""
import copy
import math
import os
import random

import pytest
import torch
import transformers

import bitrank
from bitrank import BLRLinear
from bitrank.distill import distill, distill_loss, sliced_kl
from bitrank.torch import _BLRFunction

SEED = int(os.environ.get("BITRANK_TEST_SEED", random.SystemRandom().randrange(1 << 30)))
print(f"test_distill seed {SEED}")


def tiny_llama():
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=128, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval()


def tiny_bert():
    cfg = transformers.BertConfig(vocab_size=96, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=128,
                                  max_position_embeddings=64)
    return transformers.BertModel(cfg).eval()


_PAIRS = {}
# The held-out share of the 36 calibration sequences in the tests that assert the
# held-out loss falls: 9 sequences. distill's default (1/16: 2 sequences of 20 random
# tokens) is too small a sample for that assertion; with it seed 1057864457 kept step
# 0 (held-out loss 0.36376 at steps 0, 20 and 40 while the training loss fell).
HELDOUT = 0.25


def pair(make):
    """(teacher, compressed student, calibration ids), compressed once per model kind."""
    if make not in _PAIRS:
        torch.manual_seed(SEED)
        teacher = make()
        student = copy.deepcopy(teacher)
        ids = torch.randint(0, 90, (36, 20), generator=torch.Generator().manual_seed(SEED))
        bitrank.compress_model(student, ids, bpw=2.0, steps=10, layer_steps=5, batch_size=4,
                               device="cpu", progress=False, seed=SEED)
        _PAIRS[make] = (teacher, student, ids)
    teacher, student, ids = _PAIRS[make]
    return teacher, copy.deepcopy(student), ids


def kl_reference(hs, ht, ws, wt, bs, bt):
    zs = hs.double() @ ws.double().t() + (bs.double() if bs is not None else 0)
    zt = ht.double() @ wt.double().t() + (bt.double() if bt is not None else 0)
    lps, lpt = torch.log_softmax(zs, -1), torch.log_softmax(zt, -1)
    return (lpt.exp() * (lpt - lps)).sum(-1).mean()


@pytest.mark.parametrize("vslice", [7, 50, 1000])
@pytest.mark.parametrize("bias", [False, True])
def test_sliced_kl_matches_f64(vslice, bias):
    g = torch.Generator().manual_seed(SEED + vslice)
    n, d, v = 37, 24, 131
    hs = torch.randn(n, d, generator=g, requires_grad=True)
    ht = hs.detach() + 0.5 * torch.randn(n, d, generator=g)
    ws = torch.randn(v, d, generator=g) * 0.5
    wt = ws + 0.1 * torch.randn(v, d, generator=g)
    bs = torch.randn(v, generator=g) if bias else None
    bt = torch.randn(v, generator=g) if bias else None
    kl = sliced_kl(hs, ht, ws, wt, bs, bt, vocab_slice=vslice)
    hr = hs.detach().double().requires_grad_(True)
    ref = kl_reference(hr, ht, ws, wt, bs, bt)
    kl_v, ref_v = float(kl.detach()), float(ref.detach())
    assert abs(kl_v - ref_v) <= 1e-5 * ref_v + 1e-7, (kl_v, ref_v)
    w = torch.randn((), generator=g).abs() + 0.5  # an upstream gradient other than 1
    (w * kl).backward()
    (w.double() * ref).backward()
    err = float((hs.grad.double() - hr.grad).norm() / hr.grad.norm())
    assert err < 1e-5, err


def test_sliced_kl_weights():
    """Weighted rows: weight 0 leaves a row out, integer weights repeat it."""
    g = torch.Generator().manual_seed(SEED + 1)
    n, d, v = 23, 16, 70
    hs = torch.randn(n, d, generator=g, requires_grad=True)
    ht = torch.randn(n, d, generator=g)
    w = torch.randn(v, d, generator=g)
    weights = torch.randint(0, 3, (n,), generator=g).float()
    weights[0] = 2.0
    kl = sliced_kl(hs, ht, w, vocab_slice=9, weights=weights)
    kl.backward()
    rows = torch.repeat_interleave(torch.arange(n), weights.long())
    hr = hs.detach().double().requires_grad_(True)
    ref = kl_reference(hr[rows], ht[rows], w, w, None, None)
    ref.backward()
    assert abs(float(kl.detach()) - float(ref.detach())) <= 1e-5 * float(ref.detach())
    err = float((hs.grad.double() - hr.grad).norm() / hr.grad.norm())
    assert err < 1e-5, err
    assert torch.all(hs.grad[weights == 0] == 0)
    with pytest.raises(ValueError, match="weights"):
        sliced_kl(hs, ht, w, weights=weights[:-1])


def test_sliced_kl_is_zero_for_equal_models_and_refuses_bad_shapes():
    g = torch.Generator().manual_seed(SEED)
    h = torch.randn(9, 8, generator=g)
    w = torch.randn(20, 8, generator=g)
    assert abs(float(sliced_kl(h, h, w, w, vocab_slice=6))) < 1e-6
    with pytest.raises(ValueError, match="equal"):
        sliced_kl(h, h[:, :4], w)
    with pytest.raises(ValueError, match="vocab_slice"):
        sliced_kl(h, h, w, vocab_slice=0)


@pytest.mark.parametrize("make", [tiny_llama, tiny_bert])
def test_distill_lowers_the_heldout_loss(make, tmp_path):
    teacher, student, ids = pair(make)
    n_blr = sum(isinstance(m, BLRLinear) for m in student.modules())
    t_before = copy.deepcopy(teacher.state_dict())
    rep = distill(student, teacher, ids, steps=40, batch_size=4, eval_every=20, log_every=10,
                  heldout=HELDOUT, device="cpu", progress=False, seed=SEED)
    assert rep.eval_best < rep.eval_first, rep.table()
    assert rep.steps == 40 and rep.tokens == 40 * 4 * 20 and rep.tokens_per_s > 0
    assert len(rep.curve) == 4 and len(rep.eval_curve) == 3
    kind = "kl" if make is tiny_llama else "embed"
    col = {"kl": 3, "embed": 5}[kind]
    assert all(row[col] > 0 for row in rep.curve), rep.table()
    assert all(row[5 if kind == "kl" else 3] == 0 for row in rep.curve)
    # the student is BLRLinear again, nothing trains, the teacher is untouched
    assert sum(isinstance(m, BLRLinear) for m in student.modules()) == n_blr
    assert not any(p.requires_grad for p in student.parameters())
    for k, v in teacher.state_dict().items():
        assert torch.equal(v, t_before[k]), k
    # the kept state is what the report says: its held-out loss, and it saves and loads
    e_ids = ids[-round(ids.shape[0] * HELDOUT):]
    _, parts = distill_loss(student, teacher, e_ids, torch.ones_like(e_ids))
    assert abs(float(parts[0]) - rep.eval_best) <= 0.02 * rep.eval_best + 1e-4, \
        (float(parts[0]), rep.eval_best)
    bitrank.save_pretrained(student, str(tmp_path / "out"))
    loaded = bitrank.load(str(tmp_path / "out"))
    x = ids[:2]
    with torch.no_grad():
        a = student(input_ids=x, attention_mask=torch.ones_like(x))[0]
        b = loaded(input_ids=x, attention_mask=torch.ones_like(x))[0]
    assert torch.equal(a, b)


def test_padding_is_masked_out_of_the_loss():
    """One text per sequence (calibration_ids(pack=False)) pads with a mask: what the
    padded positions hold changes neither the loss nor its gradient."""
    teacher, student, ids = pair(tiny_bert)
    g = torch.Generator().manual_seed(SEED)
    lengths = torch.randint(3, ids.shape[1], (6,), generator=g)
    mask = (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).long()
    a = ids[:6].clone()
    b = torch.where(mask.bool(), a, torch.randint(0, 90, a.shape, generator=g))
    assert not torch.equal(a, b)
    student.train(False)
    out = []
    for x in (a, b):
        student.zero_grad(set_to_none=True)
        loss, parts = distill_loss(student, teacher, x, mask)
        loss.backward()
        out.append((parts.clone(), [p.grad.clone() for p in student.parameters()
                                    if p.grad is not None]))
    assert torch.allclose(out[0][0], out[1][0], rtol=1e-5, atol=1e-6), (out[0][0], out[1][0])
    assert out[0][1] and len(out[0][1]) == len(out[1][1])
    for ga, gb in zip(out[0][1], out[1][1]):
        assert torch.allclose(ga, gb, rtol=1e-4, atol=1e-6)


def test_library_engine_runs_the_library():
    teacher, student, ids = pair(tiny_llama)
    ref = copy.deepcopy(student)
    before = dict(_BLRFunction.calls)
    rep = distill(student, teacher, ids, steps=20, batch_size=4, grad_accum=2, eval_every=10,
                  heldout=HELDOUT, engine="library", device="cpu", progress=False, seed=SEED)
    n_blr = sum(isinstance(m, BLRLinear) for m in student.modules())
    # every step: grad_accum forwards and backwards through each layer's kernels
    assert _BLRFunction.calls["backward"] - before["backward"] == 20 * 2 * n_blr
    assert rep.eval_best < rep.eval_first, rep.table()
    # with a sign step large enough to cross the latents' ±1 in a few steps, the
    # library's sign optimizer flips bits (the last state kept, whatever its loss)
    student = copy.deepcopy(ref)
    distill(student, teacher, ids, steps=10, batch_size=4, sign_lr=0.3, keep="last",
            engine="library", device="cpu", progress=False, seed=SEED)
    changed = sum(not torch.equal(a.u, b.u) or not torch.equal(a.v, b.v)
                  for a, b in zip(student.modules(), ref.modules()) if isinstance(a, BLRLinear))
    assert changed > 0


def test_library_engine_exact_flip_signs():
    """sign_mode="exact": the library's exact-flip sign optimizer on the layers'
    curvature sums runs every step; signs flip, at most the budget of each matrix per
    step. (Whether it helps depends on `curvature`, the loss's second derivative in a
    layer's output, which the whole model's loss does not give: too small a value
    predicts gains that flips do not deliver; this test checks the mechanics.)"""
    teacher, student, ids = pair(tiny_llama)
    ref = copy.deepcopy(student)
    before = dict(_BLRFunction.calls)
    steps, budget = 10, 2e-3
    rep = distill(student, teacher, ids, steps=steps, batch_size=4, eval_every=5,
                  engine="library", sign_mode="exact", flip_budget=budget, curvature=10.0,
                  keep="last", device="cpu", progress=False, seed=SEED)
    n_blr = sum(isinstance(m, BLRLinear) for m in student.modules())
    assert _BLRFunction.calls["backward"] - before["backward"] == steps * n_blr
    assert len(rep.eval_curve) == 3 and rep.options["sign_mode"] == "exact"
    flipped = 0
    for a, b in zip(student.modules(), ref.modules()):
        if isinstance(a, BLRLinear):
            for new, old in ((a.u, b.u), (a.v, b.v)):
                rows = new.shape[1]
                per_path = [sum(bin(x).count("1") for x in (new[p] ^ old[p]).flatten().tolist())
                            for p in range(a.paths)]
                r32 = (a.rank + 31) // 32 * 32  # the library's matrix, its rank padded
                cap = steps * max(1, math.ceil(budget * rows * r32))
                assert all(k <= cap for k in per_path), (per_path, rows, r32)
                flipped += sum(per_path)
    assert flipped > 0
    assert not any(m.curvature or m.sum_a2 is not None
                   for m in student.modules() if isinstance(m, BLRLinear))


def test_checkpoint_resume_equals_one_run(tmp_path):
    teacher, student, ids = pair(tiny_llama)
    s_a, s_b = copy.deepcopy(student), copy.deepcopy(student)
    kw = dict(steps=30, batch_size=4, eval_every=10, log_every=10, checkpoint_every=10,
              device="cpu", progress=False, seed=SEED)
    rep_a = distill(s_a, teacher, ids, checkpoint_dir=str(tmp_path / "a"), **kw)
    rep_b1 = distill(s_b, teacher, ids, checkpoint_dir=str(tmp_path / "b"), stop_at=15, **kw)
    assert rep_b1.stopped_at == 15
    s_c = copy.deepcopy(student)
    rep_c = distill(s_c, teacher, ids, checkpoint_dir=str(tmp_path / "b"), **kw)
    assert rep_c.resumed_from == 15
    assert rep_c.curve == rep_a.curve and rep_c.eval_curve == rep_a.eval_curve
    for (k, a), (_, c) in zip(s_a.state_dict().items(), s_c.state_dict().items()):
        assert torch.equal(a, c), k
    # a checkpoint written under other options is refused, not silently resumed
    with pytest.raises(ValueError, match="other options"):
        distill(copy.deepcopy(student), teacher, ids, checkpoint_dir=str(tmp_path / "b"),
                **dict(kw, steps=31))


def test_mistakes_are_refused():
    teacher, student, ids = pair(tiny_llama)
    with pytest.raises(ValueError, match="no BLRLinear"):
        distill(copy.deepcopy(teacher), teacher, ids, steps=1, progress=False)
    with pytest.raises(ValueError, match="batch_size"):
        distill(student, teacher, ids[:5], batch_size=8, steps=1, progress=False)
    with pytest.raises(ValueError, match="engine"):
        distill(student, teacher, ids, engine="jax", steps=1, progress=False)
    with pytest.raises(ValueError, match="engine='library'"):
        distill(student, teacher, ids, sign_mode="exact", steps=1, progress=False)
    with pytest.raises(ValueError, match="sign_mode"):
        distill(student, teacher, ids, sign_mode="flip", engine="library", steps=1,
                progress=False)
    with pytest.raises(ValueError, match="flip_budget"):
        distill(student, teacher, ids, sign_mode="exact", engine="library", flip_budget=0,
                steps=1, progress=False)
    with pytest.raises(ValueError, match="every loss term"):
        distill(student, teacher, ids, kl_weight=0, hidden_weight=0, embed_weight=0,
                steps=1, progress=False)


@pytest.mark.cuda
@pytest.mark.parametrize("engine", ["torch", "library", "library-exact"])
def test_distill_on_cuda(engine):
    teacher, student, ids = pair(tiny_llama)
    teacher = copy.deepcopy(teacher).half().cuda()  # the teacher in half precision
    student = student.cuda()
    before = dict(_BLRFunction.calls)
    signs = dict(sign_mode="exact", flip_budget=2e-4, curvature=10.0) \
        if engine == "library-exact" else {}
    rep = distill(student, teacher, ids, steps=30, batch_size=4, eval_every=10,
                  engine=engine.split("-")[0], device="cuda", progress=False, seed=SEED,
                  **signs)
    # kept: the best held-out state, never worse than the start (exact flips need not
    # improve it: test_library_engine_exact_flip_signs)
    assert rep.eval_best < rep.eval_first or (signs and rep.eval_best <= rep.eval_first), \
        rep.table()
    ran = _BLRFunction.calls["backward"] - before["backward"]
    assert ran == (0 if engine == "torch" else 30 * 14)
    assert all(m.h.is_cuda for m in student.modules() if isinstance(m, BLRLinear))
    x = ids[:2].cuda()
    with torch.no_grad():
        y = student(input_ids=x).logits
    assert torch.isfinite(y).all()


@pytest.mark.cuda
def test_distill_cuda_graph_matches_eager():
    """The captured step is the eager step: the same run with and without the CUDA
    graph ends at the same held-out loss, and the graph was replayed."""
    teacher, student, ids = pair(tiny_llama)
    teacher = copy.deepcopy(teacher).half().cuda()
    reps = {}
    for graph in (False, True):
        s = copy.deepcopy(student).cuda()
        reps[graph] = distill(s, teacher, ids, steps=20, batch_size=4, eval_every=10,
                              keep="last", device="cuda", progress=False, seed=SEED,
                              cuda_graph=graph)
    assert reps[True].cuda_graph and not reps[False].cuda_graph
    e0, e1 = reps[False].eval_curve, reps[True].eval_curve
    assert [r[0] for r in e0] == [r[0] for r in e1]
    for a, b in zip(e0, e1):
        assert abs(a[1] - b[1]) <= 2e-2 * abs(a[1]), (e0, e1)
    assert e1[-1][1] < e1[0][1]


def test_cli_distill(tmp_path):
    """python -m bitrank distill on a compressed tiny Llama with its own word tokenizer:
    the output loads, records the distillation, and the mistakes are refused."""
    import json
    import subprocess
    import sys
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(90)]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>")
    teacher, student, _ = pair(tiny_llama)
    teacher_dir, student_dir = tmp_path / "teacher", tmp_path / "student"
    teacher.save_pretrained(str(teacher_dir))
    tok.save_pretrained(str(teacher_dir))
    bitrank.save_pretrained(student, str(student_dir))
    rng = random.Random(SEED)
    calib = tmp_path / "calib.txt"
    calib.write_text("\n\n".join(" ".join(f"w{rng.randrange(90)}" for _ in range(60))
                                 for _ in range(12)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "bitrank", "distill", *args],
                              capture_output=True, text=True, env=env, timeout=300)

    out = tmp_path / "out"
    common = ["--teacher", str(teacher_dir), "--calib", str(calib), "--samples", "10",
              "--seq-len", "16", "--steps", "4", "--batch-size", "2", "--device", "cpu"]
    r = cli(str(student_dir), "-o", str(out), "--report", str(tmp_path / "r.json"), *common)
    assert r.returncode == 0, r.stderr
    assert "tokens/s" in r.stdout
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quantization_config"]["distill"]["steps"] == 4
    assert json.loads((tmp_path / "r.json").read_text())["steps"] == 4
    loaded = bitrank.load(str(out))
    assert sum(isinstance(m, BLRLinear) for m in loaded.modules()) == 14
    # each paragraph its own sequence (padded), as a sentence encoder is calibrated
    r = cli(str(student_dir), "-o", str(tmp_path / "out-per-text"), "--per-text", *common)
    assert r.returncode == 0, r.stderr
    # refused: an output that is not empty, a student that does not exist
    r = cli(str(student_dir), "-o", str(out), *common)
    assert r.returncode == 1 and "not empty" in r.stderr
    r = cli(str(tmp_path / "nope"), "-o", str(tmp_path / "o2"), *common)
    assert r.returncode == 1 and "no such file" in r.stderr
    r = cli(str(student_dir), "-o", str(tmp_path / "o3"), "--sign-mode", "exact", *common)
    assert r.returncode == 1 and "--engine library" in r.stderr and "Traceback" not in r.stderr
