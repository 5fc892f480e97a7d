"""Tests of bench/littlebit_peer.py, the LittleBit-training peer (CPU, tiny models).

The references are written here independently of the module, from LittleBit's behaviour
as the module docstring states it: one path's weight diag(u1)·sign(U)·diag(v1·u2)·
sign(V)ᵀ·diag(v2) with sign(0) = +1 (U [out][r], V [in][r] here), SmoothSign's backward
g·α·(1 - tanh²(αx)), the split_dim/eff_bit formulas, and the loss
KL(batchmean) + 10·Σ_{hidden_states[1:]} MSE.
"""
import copy
import importlib.util
import json
import math
import os
import secrets
import types

import numpy as np
import pytest
import torch
import torch.nn as nn

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load_peer():
    path = os.path.join(REPO, "bench", "littlebit_peer.py")
    spec = importlib.util.spec_from_file_location("littlebit_peer", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


lp = _load_peer()


@pytest.fixture
def seed():
    s = int(os.environ.get("BITRANK_TEST_SEED") or secrets.randbits(31))  # to replay a failure
    print(f"seed={s}")
    torch.manual_seed(s)
    return s


def tiny_llama(seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=64, num_hidden_layers=2, vocab_size=256,
                      intermediate_size=128, num_attention_heads=4, num_key_value_heads=4,
                      max_position_embeddings=128)
    return LlamaForCausalLM(cfg).eval()


def tiny_bert(seed=0):
    from transformers import BertConfig, BertModel
    torch.manual_seed(seed)
    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, vocab_size=256, max_position_embeddings=64)
    return BertModel(cfg).eval()


# ------------------------------------------------------------------ independent references

def ref_sign(a):
    return np.where(a < 0, -1.0, 1.0)


def ref_weight(paths):
    """Σ_paths diag(u1)·sign(U)·diag(v1·u2)·sign(V)ᵀ·diag(v2), f64 numpy."""
    W = 0
    for U, V, u1, u2, v1, v2 in paths:
        W = W + (u1[:, None] * ref_sign(U) * (v1 * u2)[None, :]) @ (ref_sign(V) * v2[:, None]).T
    return W


def np_paths(m):
    return [tuple(t.detach().double().numpy() for t in p) for p in m.paths()]


def random_peer(in_f, out_f, r, residual, bias=True):
    m = lp.PeerLinear(in_f, out_f, r, residual=residual, bias=bias)
    with torch.no_grad():
        for name, p in m.named_parameters():
            p.copy_(torch.randn_like(p))
        # exact zeros in the latents: sign(0) must be +1
        m.U.view(-1)[::7] = 0.0
        m.V.view(-1)[::5] = 0.0
        if residual:
            m.U_R.view(-1)[::3] = -0.0
    return m


# ------------------------------------------------------------------ signs

def test_smooth_sign_forward_backward(seed):
    x = torch.randn(500, dtype=torch.float64) * 0.05
    x[:4] = torch.tensor([0.0, -0.0, 1e-30, -1e-30], dtype=torch.float64)
    for alpha in (100.0, 7.5):
        xx = x.clone().requires_grad_(True)
        y = lp.smooth_sign(xx, alpha)
        assert torch.equal(y.detach(), torch.from_numpy(ref_sign(x.numpy())))
        assert y[0] == 1 and y[1] == 1 and y[3] == -1
        g = torch.randn_like(x)
        y.backward(g)
        xn = x.numpy()
        ref = g.numpy() * alpha * (1.0 - np.tanh(alpha * xn) ** 2)
        # 1 - tanh² cancels where tanh ≈ ±1: absolute slack on the scale α·|g|
        np.testing.assert_allclose(xx.grad.numpy(), ref, rtol=1e-10,
                                   atol=1e-13 * alpha * float(g.abs().max()))
    # the default is LittleBit's alpha = 100
    xx = x.clone().requires_grad_(True)
    lp.smooth_sign(xx).sum().backward()
    np.testing.assert_allclose(xx.grad.numpy(), 100.0 * (1 - np.tanh(100.0 * xn) ** 2),
                               rtol=1e-10, atol=1e-11)
    # STEBinary: straight through inside |x| < 1
    z = (torch.randn(300, dtype=torch.float64) * 1.5).requires_grad_(True)
    g = torch.randn_like(z)
    lp.ste_sign(z).backward(g)
    np.testing.assert_array_equal(z.grad.numpy(), g.numpy() * (np.abs(z.detach().numpy()) < 1))


# ------------------------------------------------------------------ the layer

@pytest.mark.parametrize("residual", [False, True])
def test_peer_forward_matches_f64_reference(seed, residual):
    m = random_peer(40, 24, 16, residual)
    x = torch.randn(3, 5, 40)
    y = m(x)
    assert y.shape == (3, 5, 24) and y.dtype == torch.float32
    W = ref_weight(np_paths(m))
    ref = x.double().numpy() @ W.T + m.bias.detach().double().numpy()
    err = np.abs(y.detach().double().numpy() - ref).max() / np.abs(ref).max()
    assert err < 1e-5, err
    # no grad / hard mode: the same values
    with torch.no_grad():
        y2 = m(x)
    m.hard = True
    y3 = m(x)
    assert torch.equal(y.detach(), y2) and torch.equal(y2, y3.detach())
    np.testing.assert_allclose(m.dense_weight(torch.float64).numpy(), W, rtol=1e-12, atol=1e-12)


def test_peer_latent_gradient_is_smooth_sign(seed):
    """dL/dU = dL/dsign(U) · α(1 - tanh²(αU)), dL/dsign(U) from a plain f64 reference."""
    m = random_peer(12, 10, 8, residual=False, bias=False).double()
    with torch.no_grad():
        m.U.mul_(0.02)  # near 0, where the surrogate's gradient is not negligible
        m.V.mul_(0.02)
    x = torch.randn(6, 12, dtype=torch.float64)
    g = torch.randn(6, 10, dtype=torch.float64)
    (m(x) * g).sum().backward()

    U, V = m.U.detach(), m.V.detach()
    su = lp.hard_sign(U).requires_grad_(True)
    sv = lp.hard_sign(V).requires_grad_(True)
    u1, u2, v1, v2 = (t.detach() for t in (m.u1, m.u2, m.v1, m.v2))
    W = (u1[:, None] * su * (v1 * u2)[None, :]) @ (sv * v2[:, None]).T
    ((x @ W.T) * g).sum().backward()
    dU = su.grad * 100.0 * (1 - torch.tanh(100.0 * U) ** 2)
    dV = sv.grad * 100.0 * (1 - torch.tanh(100.0 * V) ** 2)
    torch.testing.assert_close(m.U.grad, dU, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(m.V.grad, dV, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ rank and bits

def test_rank_and_bits_formulas():
    # worked by hand from LittleBit's _estimate_split_dim / _compute_eff_bits
    # 4096², 1.0 bpw, two paths: (16777216 - 262144) / 16416 = 1006.04 -> 1000
    assert lp.littlebit_rank(4096, 4096, 1.0, residual=True) == 1000
    assert lp.littlebit_bits(4096, 4096, 1000, True) == 1000 * 16416 + 262144
    assert abs(lp.littlebit_bits(4096, 4096, 1000, True) / 4096 ** 2 - 0.9940948) < 1e-6
    # 4096², 0.1 bpw, one path: (1677721.6 - 131072) / 8208 = 188.4 -> 184
    assert lp.littlebit_rank(4096, 4096, 0.1, residual=False) == 184
    assert abs(lp.littlebit_bits(4096, 4096, 184, False) / 4096 ** 2 - 0.0978317) < 1e-6
    # the minimum: a target too small for any rank gives split_dim 8
    assert lp.littlebit_rank(64, 64, 1.0, residual=True) == 8
    assert lp.littlebit_rank(64, 64, 0.01, residual=False) == 8
    # kv ratio_factor scales the estimate before rounding: 1006.04 * 0.5 = 503.02 -> 496
    assert lp.littlebit_rank(4096, 4096, 1.0, True, ratio=0.5) == 496
    # no target: the default split_dim
    assert lp.littlebit_rank(4096, 4096, None) == 1024
    for (a, b, bpw, res) in [(4096, 11008, 1.0, True), (11008, 4096, 0.55, False),
                             (768, 3072, 0.8, True), (512, 256, 2.0, False)]:
        r = lp.littlebit_rank(a, b, bpw, res)
        assert r % 8 == 0 and r >= 8
        got = lp.littlebit_bits(a, b, r, res) / (a * b)
        step = lp.littlebit_bits(a, b, r + 8, res) / (a * b) - got
        assert got <= bpw + 1e-12 and bpw - got < step, (a, b, bpw, res, got)


def test_convert_bits_within_target():
    m = tiny_llama()
    rep = lp.littlebit_convert(m, 2.0, residual=True)
    assert rep["n_layers"] == 14
    for layer in rep["layers"]:
        a, b, r = layer["in"], layer["out"], layer["rank"]
        assert layer["bits"] == 2 * r * (a + b + 16) + 32 * (a + b)
        assert layer["bpw"] <= 2.0
    tot_w = sum(la["in"] * la["out"] for la in rep["layers"])
    assert rep["bpw"] == pytest.approx(sum(la["bits"] for la in rep["layers"]) / tot_w)
    assert rep["bpw"] <= 2.0
    assert lp.peer_bpw(m) == pytest.approx(rep["bpw"])
    # kv_factor shrinks the k/v ranks only
    m2 = tiny_llama()
    rep2 = lp.littlebit_convert(m2, 3.0, residual=False, kv_factor=0.5)
    ranks = {la["name"].rsplit(".", 1)[1]: la["rank"] for la in rep2["layers"]}
    assert ranks["k_proj"] < ranks["q_proj"] and ranks["v_proj"] == ranks["k_proj"]


def test_convert_targets_and_freezing():
    m = tiny_llama()
    n_linear = sum(isinstance(x, nn.Linear) for x in m.modules())
    rep = lp.littlebit_convert(m, 2.0)
    names = [la["name"] for la in rep["layers"]]
    assert len(names) == 14 == n_linear - 1  # all but lm_head
    assert all(n.startswith("model.layers.") for n in names)
    assert type(m.lm_head) is nn.Linear and isinstance(m.model.embed_tokens, nn.Embedding)
    assert isinstance(m.model.layers[1].mlp.down_proj, lp.PeerLinear)
    frozen = {n for n, p in m.named_parameters() if not p.requires_grad}
    assert frozen == {"model.embed_tokens.weight", "lm_head.weight"}
    peer = m.model.layers[0].self_attn.q_proj
    for p in peer.parameters():
        assert p.dtype == torch.float32 and p.requires_grad
    assert {n for n, _ in peer.named_parameters()} == {
        "U", "V", "u1", "u2", "v1", "v2", "U_R", "V_R", "u1_R", "u2_R", "v1_R", "v2_R"}
    assert peer.U.shape == (64, peer.rank) and peer.V.shape == (64, peer.rank)
    # the encoder: the blocks' 6 linears each; the pooler (outside the blocks) stays
    b = tiny_bert()
    rep = lp.littlebit_convert(b, 2.0)
    assert rep["n_layers"] == 12
    assert all(la["name"].startswith("encoder.layer.") for la in rep["layers"])
    assert type(b.pooler.dense) is nn.Linear
    assert b.encoder.layer[0].attention.self.query.bias is not None
    assert not any(p.requires_grad for n, p in b.named_parameters() if "embeddings" in n)
    # include/skip rules
    m = tiny_llama()
    rep = lp.littlebit_convert(m, 2.0, include=[r"mlp\."], skip=[r"down_proj"])
    assert sorted({la["name"].rsplit(".", 1)[1] for la in rep["layers"]}) == ["gate_proj",
                                                                             "up_proj"]


# ------------------------------------------------------------------ Dual-SVID

@pytest.mark.parametrize("method", ["lowrank", "full"])
def test_dual_svid_init_approximates(seed, method):
    out_f, in_f = 96, 160
    # a weight with a decaying spectrum, as trained weights have
    A = torch.linalg.qr(torch.randn(out_f, out_f))[0]
    B = torch.linalg.qr(torch.randn(in_f, out_f))[0]
    s = 1.0 / (1.0 + torch.arange(out_f, dtype=torch.float32)) ** 0.7
    lin = nn.Linear(in_f, out_f, bias=True)
    with torch.no_grad():
        lin.weight.copy_((A * s) @ B.T)
    W = lin.weight.detach().double()
    nW = W.norm()
    errs = {}
    for residual in (False, True):
        r = lp.littlebit_rank(in_f, out_f, 2.5, residual)
        torch.manual_seed(1)
        m = lp.PeerLinear.from_linear(lin, r, residual=residual, svd=method)
        Wh = torch.from_numpy(ref_weight(np_paths(m)))
        errs[residual] = float((Wh - W).norm() / nW)
        assert errs[residual] < 1.0  # better than the zero matrix
        assert torch.equal(m.bias, lin.bias)
        # the scales: positive, u1 ⊗ u2 the best rank-1 of |U| (and v2 ⊗ v1 of |V|)
        for U, V, u1, u2, v1, v2 in m.paths():
            for left, right, X in ((u1, u2, U), (v2, v1, V)):
                assert (left > 0).all() and (right > 0).all()
                left, right = left.detach(), right.detach()
                Xa = X.detach().double().abs()
                sv = torch.linalg.svdvals(Xa)
                best = float(sv[1:].square().sum().sqrt())
                got = float((torch.outer(left, right).double() - Xa).norm())
                # exact SVD: the best rank-1 up to f32. svd_lowrank at q = 1 (LittleBit's
                # call, two power iterations, no oversampling) is the best in the median
                # but 0.5% of 1200 random weights came out 1–39% worse: its bound is looser
                assert got <= best * (1.01 if method == "full" else 1.5) + 1e-6, (got, best)
    assert errs[True] < errs[False]
    print(f"rel err: one path {errs[False]:.3f}, two {errs[True]:.3f}")


def test_dual_svid_full_first_path_is_truncated_svd():
    """With the exact SVD, the latents of the first path reproduce W's rank-r part."""
    torch.manual_seed(3)
    W = torch.randn(30, 50, dtype=torch.float64)
    U, V, *_ = lp.dual_svid(W, 8, "full")
    a, s, bh = np.linalg.svd(W.numpy(), full_matrices=False)
    np.testing.assert_allclose((U.double() @ V.double().T).numpy(),
                               (a[:, :8] * s[:8]) @ bh[:8], atol=1e-4)


def test_converted_llama_layers_approximate():
    m = tiny_llama()
    orig = {n: x.weight.detach().double().clone() for n, x in m.named_modules()
            if isinstance(x, nn.Linear)}
    lp.littlebit_convert(m, 2.0)
    for name, mod in m.named_modules():
        if isinstance(mod, lp.PeerLinear):
            W = orig[name]
            err = float((mod.dense_weight(torch.float64) - W).norm() / W.norm())
            assert err < 1.0, (name, err)


# ------------------------------------------------------------------ loss

def ref_loss(s_logits, t_logits, s_hs, t_hs, scale=10.0):
    kl = 0.0
    if s_logits is not None:
        s = s_logits.astype(np.float64)
        t = t_logits.astype(np.float64)
        ls = s - s.max(-1, keepdims=True)
        ls = ls - np.log(np.exp(ls).sum(-1, keepdims=True))
        lt = t - t.max(-1, keepdims=True)
        lt = lt - np.log(np.exp(lt).sum(-1, keepdims=True))
        kl = float((np.exp(lt) * (lt - ls)).sum() / s.shape[0])
    mse = sum(float(((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean())
              for a, b in zip(s_hs[1:], t_hs[1:]))
    return kl + scale * mse, kl, mse


def test_loss_matches_f64(seed):
    B, T, V, H = 3, 5, 11, 7
    sl, tl = torch.randn(B, T, V) * 2, torch.randn(B, T, V) * 2
    shs = tuple(torch.randn(B, T, H) for _ in range(4))
    ths = tuple(torch.randn(B, T, H) for _ in range(4))
    so = types.SimpleNamespace(logits=sl, hidden_states=shs)
    to = types.SimpleNamespace(logits=tl, hidden_states=ths)
    loss, kl, mse = lp.peer_loss(so, to)
    rl, rk, rm = ref_loss(sl.numpy(), tl.numpy(), [x.numpy() for x in shs],
                          [x.numpy() for x in ths])
    assert float(loss) == pytest.approx(rl, rel=1e-5)
    assert float(kl) == pytest.approx(rk, rel=1e-5)
    assert float(mse) == pytest.approx(rm, rel=1e-5)
    # hidden_states[0] (the embeddings) is not part of it
    so2 = types.SimpleNamespace(logits=sl, hidden_states=(shs[0] + 5,) + shs[1:])
    assert float(lp.peer_loss(so2, to)[0]) == pytest.approx(float(loss), rel=1e-6)
    # another scale; no logits (an encoder): the hidden-state term only
    assert float(lp.peer_loss(so, to, l2l_scale=3.0)[0]) == pytest.approx(rk + 3 * rm, rel=1e-5)
    no = types.SimpleNamespace(logits=None, hidden_states=shs)
    nt = {"hidden_states": ths}
    loss, kl, mse = lp.peer_loss(no, nt)
    assert float(kl) == 0.0 and float(loss) == pytest.approx(10 * rm, rel=1e-5)


def test_loss_on_models():
    t = tiny_llama()
    s = copy.deepcopy(t)
    lp.littlebit_convert(s, 2.0)
    ids = torch.randint(0, 256, (2, 12))
    with torch.no_grad():
        to = t(input_ids=ids, output_hidden_states=True)
        so = s(input_ids=ids, output_hidden_states=True)
        assert abs(float(lp.peer_loss(to, to)[0])) < 1e-5  # f32 softmax vs log_softmax
        loss, kl, mse = lp.peer_loss(so, to)
    rl, rk, rm = ref_loss(so.logits.numpy(), to.logits.numpy(),
                          [x.numpy() for x in so.hidden_states],
                          [x.numpy() for x in to.hidden_states])
    assert float(loss) == pytest.approx(rl, rel=1e-4) and rk > 0 and rm > 0


# ------------------------------------------------------------------ schedule and training

def test_schedule_is_hf_cosine_with_warmup():
    from transformers import get_cosine_schedule_with_warmup
    for total, warmup in ((50, 0.03), (37, 0.2), (10, 3)):
        warm = lp._warmup_steps(warmup, total)
        assert warm == (int(warmup) if warmup >= 1 else math.ceil(total * warmup))
        opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
        sch = get_cosine_schedule_with_warmup(opt, warm, total)
        for step in range(total):
            assert lp._lr_factor(step, total, warm) == pytest.approx(opt.param_groups[0]["lr"],
                                                                     abs=1e-12)
            opt.step()
            sch.step()


def _fixed_loss(student, teacher, ids):
    with torch.no_grad():
        return float(lp.peer_loss(student(input_ids=ids, output_hidden_states=True),
                                  teacher(input_ids=ids, output_hidden_states=True))[0])


def test_train_reduces_loss():
    teacher = tiny_llama(seed=5)
    student = copy.deepcopy(teacher)
    rep = lp.littlebit_convert(student, 2.0)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (16, 32), generator=g)
    before = _fixed_loss(student, teacher, ids)
    res = lp.train_peer(student, teacher, ids, steps=30, batch_size=4, lr=1e-3, warmup=0.1,
                        log_every=5, seed=0)
    after = _fixed_loss(student, teacher, ids)
    print(f"loss {before:.4f} -> {after:.4f}; curve {res['loss_curve']}")
    assert after < 0.9 * before
    curve = res["loss_curve"]
    assert curve[0][0] == 1 and curve[-1][0] == 30 and len(curve) == 7
    assert np.mean([c[1] for c in curve[-2:]]) < curve[0][1]
    for step, loss, kl, mse in curve:
        assert loss == pytest.approx(kl + 10.0 * mse, rel=1e-5)
    assert res["steps"] == 30 and res["stopped_by"] == "steps"
    assert res["tokens"] == 30 * 4 * 32
    assert res["tokens_per_s"] == pytest.approx(res["tokens"] / res["seconds"])
    assert res["bpw"] == pytest.approx(rep["bpw"])
    assert res["planned_steps"] == 30 and res["warmup_steps"] == 3
    # the teacher did not move; the frozen parts of the student did not either
    fresh = tiny_llama(seed=5)
    for (n, p), (_, q) in zip(teacher.named_parameters(), fresh.named_parameters()):
        assert torch.equal(p, q), n
    assert torch.equal(student.lm_head.weight, fresh.lm_head.weight)
    assert torch.equal(student.model.embed_tokens.weight, fresh.model.embed_tokens.weight)
    # eval model: hard signs, eval mode, the same function
    x = ids[:2]
    with torch.no_grad():
        y_train = student(input_ids=x).logits
    lp.peer_eval_model(student)
    assert not student.training
    assert all(m.hard for m in student.modules() if isinstance(m, lp.PeerLinear))
    with torch.no_grad():
        assert torch.equal(student(input_ids=x).logits, y_train)


def test_seconds_limit_stops():
    teacher = tiny_llama()
    student = copy.deepcopy(teacher)
    lp.littlebit_convert(student, 2.0)
    ids = torch.randint(0, 256, (8, 16))
    res = lp.train_peer(student, teacher, ids, seconds=1.0, batch_size=4, lr=1e-3,
                        log_every=1000)
    assert res["stopped_by"] in ("time", "schedule")
    assert 2 <= res["steps"] and res["seconds"] < 1.5
    assert res["planned_steps"] >= res["steps"] - 1
    assert res["loss_curve"][-1][0] == res["steps"]
    # steps and seconds: the first limit reached wins
    res = lp.train_peer(student, teacher, ids, steps=100000, seconds=0.5, batch_size=4)
    assert res["stopped_by"] == "time" and res["steps"] < 100000 and res["seconds"] < 1.0


def test_train_encoder():
    teacher = tiny_bert()
    student = copy.deepcopy(teacher)
    lp.littlebit_convert(student, 2.0)
    ids = torch.randint(0, 256, (8, 16))
    mask = torch.ones_like(ids)
    mask[:, -3:] = 0
    res = lp.train_peer(student, teacher, ids, mask, steps=6, batch_size=4, lr=1e-3,
                        log_every=2, train_mode=False)
    assert res["steps"] == 6 and res["tokens"] == int(mask[:4].sum()) * 6
    assert all(c[2] == 0.0 and np.isfinite(c[1]) for c in res["loss_curve"])


# ------------------------------------------------------------------ CLI

def _byte_tokenizer(path):
    """A 256-token byte-level tokenizer (no merges), saved as an HF tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    vocab = {c: i for i, c in enumerate(bytes_to_unicode().values())}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tk).save_pretrained(path)


def test_cli_end_to_end(tmp_path):
    mdir = tmp_path / "model"
    tiny_llama().save_pretrained(mdir)
    _byte_tokenizer(mdir)
    text = "".join(f"The {i}-th line of a small text, said the fox. " for i in range(120))
    (tmp_path / "train.txt").write_text(text)
    (tmp_path / "eval.txt").write_text(text[::-1])
    out = tmp_path / "res.json"
    res = lp.main(["--model", str(mdir), "--data-text", str(tmp_path / "train.txt"),
                   "--eval-text", str(tmp_path / "eval.txt"), "--bpw", "2.0", "--steps", "4",
                   "--seq-len", "64", "--n-samples", "12", "--device", "cpu", "--lr", "1e-3",
                   "--log-every", "2", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["steps"] == 4 and saved["n_samples"] == 12 and saved["seq_len"] == 64
    assert saved["causal"] and saved["convert"]["n_layers"] == 14
    assert saved["bpw"] <= 2.0 and saved["tokens"] == 4 * 4 * 64
    for k in ("ppl_teacher", "ppl_student", "tokens_per_s", "loss_curve"):
        assert k in saved and k in res
    assert np.isfinite(saved["ppl_student"]) and saved["ppl_teacher"] > 1
