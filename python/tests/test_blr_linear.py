"""BLRLinear through the library against float64 references written here.

Each case draws fresh random shapes, signs, scales and inputs (the seed is printed;
BITRANK_TEST_SEED replays one), poisons every output the library writes with NaN
before the run, and checks which implementation ran.
"""
import os
import random

import numpy as np
import pytest
import torch

import bitrank.torch as bt
from bitrank import BLRLinear, LibraryOptimizer

SEED = int(os.environ.get("BITRANK_TEST_SEED", random.SystemRandom().randrange(1 << 30)))
print(f"test_blr_linear seed {SEED}")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    def nan_alloc(*shape, device, dtype=torch.float32):
        return torch.full(shape, float("nan"), device=device, dtype=dtype)
    monkeypatch.setattr(bt, "_alloc", nan_alloc)


def random_layer(rng, m, n, r, paths, device):
    """A layer with random signs and scales of mixed sign and size, and the float64
    ±1 matrices and scales it stands for (unpacked here with numpy, independently
    of the package's layout code)."""
    su = rng.choice([-1.0, 1.0], size=(paths, m, r))
    sv = rng.choice([-1.0, 1.0], size=(paths, n, r))
    h = rng.uniform(0.5, 1.5, (paths, m)) * rng.choice([-1, 1], (paths, m)) / np.sqrt(r)
    l = rng.uniform(0.2, 2.0, (paths, r))
    g = rng.uniform(0.5, 1.5, (paths, n)) * rng.choice([-1, 1], (paths, n)) / np.sqrt(n)
    pack = lambda s: np.packbits(s > 0, axis=-1, bitorder="little")
    mod = BLRLinear(n, m, r, paths, bias=True, device=device)
    with torch.no_grad():
        mod.u.copy_(torch.from_numpy(pack(su)))
        mod.v.copy_(torch.from_numpy(pack(sv)))
        mod.h.copy_(torch.from_numpy(h))
        mod.l.copy_(torch.from_numpy(l))
        mod.g.copy_(torch.from_numpy(g))
        mod.bias.copy_(torch.from_numpy(rng.normal(0, 0.1, m)))
    return mod, (su, sv, h, l, g)


def reference(x, parts, bias, need_grad=False):
    """y = x·Wᵀ + b in float64 from the ±1 matrices and scales, with autograd leaves."""
    leaves = [torch.tensor(a, dtype=torch.float64, requires_grad=need_grad) for a in parts]
    su, sv, h, l, g = leaves
    y = 0
    for p in range(su.shape[0]):
        w = h[p][:, None] * ((su[p] * l[p]) @ sv[p].T) * g[p][None, :]
        y = y + x @ w.T
    return y + bias, leaves


def rel(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm())


SHAPES = [(64, 96, 32, 1), (100, 70, 20, 2), (33, 130, 45, 2), (384, 384, 64, 2)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_against_f64(device, shape):
    rng = np.random.default_rng(SEED + hash(shape) % 1000)
    m, n, r, paths = shape
    mod, parts = random_layer(rng, m, n, r, paths, device)
    x = torch.from_numpy(rng.normal(0, 1, (3, 7, n))).float().to(device)
    before = dict(bt._BLRFunction.calls)
    y = mod(x)
    assert bt._BLRFunction.calls["forward"] == before["forward"] + 1, "the library did not run"
    y_ref, _ = reference(x.double().cpu(), parts, mod.bias.detach().double().cpu())
    assert y.shape == (3, 7, m) and torch.isfinite(y).all()
    # f16 operands, f32 accumulation: about 2^-11 relative per operand
    assert rel(y, y_ref) < 4e-3, rel(y, y_ref)
    # the torch backend computes the same product in f32
    mod.backend = "torch"
    calls = dict(bt._BLRFunction.calls)
    y_t = mod(x)
    assert bt._BLRFunction.calls == calls, "the torch backend called the library"
    assert rel(y_t, y_ref) < 1e-5
    # dense_weight is the same W
    w_ref = sum(parts[2][p][:, None] * ((parts[0][p] * parts[3][p]) @ parts[1][p].T)
                * parts[4][p][None, :] for p in range(paths))
    assert rel(mod.dense_weight(torch.float64), torch.from_numpy(w_ref)) < 1e-6


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES[1:])
def test_backward_against_f64(device, shape):
    rng = np.random.default_rng(SEED + 7 + hash(shape) % 1000)
    m, n, r, paths = shape
    mod, parts = random_layer(rng, m, n, r, paths, device)
    mod.sign_grads = True
    x = torch.from_numpy(rng.normal(0, 1, (40, n))).float().to(device).requires_grad_(True)
    c = torch.from_numpy(rng.normal(0, 1, (40, m)))
    y = mod(x)
    before = bt._BLRFunction.calls["backward"]
    (y.double() * c.to(device)).sum().backward()
    assert bt._BLRFunction.calls["backward"] == before + 1
    x64 = x.detach().double().cpu().requires_grad_(True)
    y_ref, leaves = reference(x64, parts, mod.bias.detach().double().cpu(), need_grad=True)
    (y_ref * c).sum().backward()
    su, sv, h, l, g = leaves
    tol = 6e-3
    assert rel(x.grad, x64.grad) < tol, rel(x.grad, x64.grad)
    assert rel(mod.h.grad, h.grad) < tol, rel(mod.h.grad, h.grad)
    assert rel(mod.l.grad, l.grad) < tol, rel(mod.l.grad, l.grad)
    assert rel(mod.g.grad, g.grad) < tol, rel(mod.g.grad, g.grad)
    assert rel(mod.bias.grad, c.sum(0)) < 1e-6
    assert mod.grad_u.shape == (paths, m, r) and mod.grad_v.shape == (paths, n, r)
    assert rel(mod.grad_u, su.grad) < tol, rel(mod.grad_u, su.grad)
    assert rel(mod.grad_v, sv.grad) < tol, rel(mod.grad_v, sv.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_backward_after_another_forward(device):
    """Two forwards before the backwards (the scratch holds the last one's state):
    the first backward must still be its own forward's gradient."""
    rng = np.random.default_rng(SEED + 11)
    mod, parts = random_layer(rng, 48, 40, 32, 2, device)
    xa = torch.from_numpy(rng.normal(0, 1, (9, 40))).float().to(device).requires_grad_(True)
    xb = torch.from_numpy(rng.normal(0, 1, (5, 40))).float().to(device).requires_grad_(True)
    ya, yb = mod(xa), mod(xb)
    ya.sum().backward()
    x64 = xa.detach().double().cpu().requires_grad_(True)
    y_ref, _ = reference(x64, parts, mod.bias.detach().double().cpu())
    y_ref.sum().backward()
    assert rel(xa.grad, x64.grad) < 6e-3
    yb.sum().backward()
    assert torch.isfinite(xb.grad).all()


def test_bad_input_is_refused():
    mod = BLRLinear(16, 8, 4, 1)
    with pytest.raises(ValueError, match="features"):
        mod(torch.zeros(2, 15))
    with pytest.raises(ValueError, match="paths"):
        BLRLinear(16, 8, 4, 3)


@pytest.mark.parametrize("device", DEVICES)
def test_library_optimizer_adam_step(device):
    """One step of the library's Adam on h, l, g with the signs frozen is the Adam
    formula: the first step moves each scale by lr·grad/(|grad| + eps)."""
    rng = np.random.default_rng(SEED + 13)
    mod, parts = random_layer(rng, 40, 36, 32, 2, device)
    mod.sign_grads = True
    x = torch.from_numpy(rng.normal(0, 1, (24, 36))).float().to(device)
    c = torch.from_numpy(rng.normal(0, 1, (24, 40))).float().to(device)
    (mod(x) * c).sum().backward()
    h0, l0, g0 = (t.detach().double().cpu().clone() for t in (mod.h, mod.l, mod.g))
    grads = [t.grad.double().cpu().clone() for t in (mod.h, mod.l, mod.g)]
    u0 = mod.u.clone()
    lr = 1e-2
    opt = LibraryOptimizer([mod], lr=lr, sign_mode="off")
    opt.step()
    for new, old, gr in zip((mod.h, mod.l, mod.g), (h0, l0, g0), grads):
        want = old - lr * gr / (gr.abs() + 1e-8)
        assert torch.allclose(new.detach().double().cpu(), want, rtol=1e-5, atol=1e-6)
    assert torch.equal(mod.u, u0)
    opt.free()


def signs_to_learn(rng, device):
    """(module, x, target): a random 64×64 rank-32 layer whose scales and bias are a
    teacher's, and the teacher's outputs on x, so only the signs are left to learn."""
    teacher, _ = random_layer(rng, 64, 64, 32, 1, device)
    mod, _ = random_layer(rng, 64, 64, 32, 1, device)
    with torch.no_grad():
        mod.h.copy_(teacher.h)
        mod.g.copy_(teacher.g)
        mod.bias.copy_(teacher.bias)
    x = torch.from_numpy(rng.normal(0, 1, (256, 64))).float().to(device)
    with torch.no_grad():
        target = teacher(x)
    return mod, x, target


@pytest.mark.parametrize("device", DEVICES)
def test_library_optimizer_trains(device):
    """The library's sign optimizer and Adam, on gradients from BLRLinear's backward,
    bring the layer closer to a target layer (signs flip, the loss falls)."""
    mod, x, target = signs_to_learn(np.random.default_rng(SEED + 17), device)
    mod.sign_grads = True
    opt = LibraryOptimizer([mod], lr=1e-3, sign_lr=5e-2)
    u0 = mod.u.clone()
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = ((mod(x) - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert not torch.equal(mod.u, u0), "no sign flipped"
    assert losses[-1] < 0.7 * losses[0], losses
    opt.free()


@pytest.mark.parametrize("device", DEVICES)
def test_curvature_sums_against_f64(device):
    """module.curvature: the backward's Σ_t a[t][k]² per path (a_p = (x⊙g_p)·S_V,p) and
    Σ_t x[t][j]², summed over backwards until zero_grad as the sign gradients are."""
    rng = np.random.default_rng(SEED + 23)
    m, n, r, paths = 70, 90, 40, 2
    mod, (su, sv, h, l, g) = random_layer(rng, m, n, r, paths, device)
    mod.sign_grads = mod.curvature = True
    xs = [rng.normal(0, 1, (t, n)) for t in (30, 17)]
    for x in xs:
        y = mod(torch.from_numpy(x).float().to(device))
        (y * torch.from_numpy(rng.normal(0, 1, y.shape)).float().to(device)).sum().backward()
    x_all = np.concatenate(xs)
    a2 = np.stack([(((x_all * g[p]) @ sv[p]) ** 2).sum(0) for p in range(paths)])
    assert mod.sum_a2.shape == (paths, r) and mod.sum_x2.shape == (n,)
    assert rel(mod.sum_a2, torch.from_numpy(a2)) < 6e-3, rel(mod.sum_a2, torch.from_numpy(a2))
    assert rel(mod.sum_x2, torch.from_numpy((x_all ** 2).sum(0))) < 1e-5
    LibraryOptimizer([mod], sign_mode="off").zero_grad()
    assert mod.sum_a2 is None and mod.sum_x2 is None


@pytest.mark.parametrize("device", DEVICES)
def test_library_optimizer_exact_flips(device):
    """sign_mode="exact": the library's exact-flip sign optimizer, on the curvature
    sums of the module's backward, flips at most the budget per step and brings the
    layer closer to a target layer; without curvature sums or a budget it is refused."""
    mod, x, target = signs_to_learn(np.random.default_rng(SEED + 29), device)
    with pytest.raises(ValueError, match="flip_budget"):
        LibraryOptimizer([mod], sign_mode="exact")
    budget = 1 / 64
    opt = LibraryOptimizer([mod], lr=0.0, sign_mode="exact", flip_budget=budget,
                           curvature=2.0 / target.numel())
    mod.sign_grads = True
    opt.zero_grad()
    ((mod(x) - target) ** 2).mean().backward()
    with pytest.raises(RuntimeError, match="curvature"):
        opt.step()
    mod.curvature = True
    losses = []
    for _ in range(25):
        opt.zero_grad()
        loss = ((mod(x) - target) ** 2).mean()
        loss.backward()
        u0, v0 = mod.u.clone(), mod.v.clone()
        opt.step()
        flips = [int(np.unpackbits((a ^ b).cpu().numpy()).sum()) for a, b in
                 ((mod.u, u0), (mod.v, v0))]
        assert all(f <= max(1, int(budget * 64 * 32)) for f in flips), flips
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.8 * losses[0], losses
    opt.free()


# ---- CPU inference (the library's br_blr_infer plan, taken where no graph is needed)

def _per_token_err(y, y_ref):
    """max_i |y - y_ref| / ||y_ref||_inf of each token (rows of [ntok][m])."""
    y, y_ref = y.detach().double().cpu().reshape(-1, y.shape[-1]), y_ref.reshape(-1, y.shape[-1])
    return (y - y_ref).abs().amax(-1) / y_ref.abs().amax(-1).clamp_min(1e-30)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_cpu_inference_against_f64(shape, bias):
    """Under no_grad a CPU module runs the inference plan (not _BLRFunction), and each
    token's output is within 2e-3 of its largest f64 reference output (the plan's
    f16-level tolerance, include/bitrank.h), NaN-poisoned output overwritten."""
    rng = np.random.default_rng(SEED + 31 + hash(shape) % 1000)
    m, n, r, paths = shape
    mod, parts = random_layer(rng, m, n, r, paths, "cpu")
    if not bias:
        mod.bias = None
    mod.eval()
    x = torch.from_numpy(rng.normal(0, 1, (3, 7, n))).float()
    calls, runs = dict(bt._BLRFunction.calls), bt._InferPlan.calls["run"]
    with torch.no_grad():
        y = mod(x)
    assert bt._InferPlan.calls["run"] == runs + 1, "the inference plan did not run"
    assert bt._BLRFunction.calls == calls, "the training forward ran"
    assert mod.infer_kernel in ("avx2-lut", "portable")
    b = mod.bias.detach().double() if bias else torch.zeros(m, dtype=torch.float64)
    y_ref, _ = reference(x.double(), parts, b)
    assert y.shape == (3, 7, m) and y.dtype == torch.float32 and torch.isfinite(y).all()
    err = _per_token_err(y, y_ref)
    assert float(err.max()) <= 2e-3, float(err.max())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cpu_inference_half_inputs(dtype):
    """f16 / bf16 inputs: converted to f32 for the plan, the output cast back."""
    rng = np.random.default_rng(SEED + 37)
    m, n, r, paths = 100, 70, 20, 2
    mod, parts = random_layer(rng, m, n, r, paths, "cpu")
    x = torch.from_numpy(rng.normal(0, 1, (5, n))).to(dtype)
    runs = bt._InferPlan.calls["run"]
    with torch.no_grad():
        y = mod(x)
    assert bt._InferPlan.calls["run"] == runs + 1
    assert y.dtype == dtype and y.shape == (5, m)
    y_ref, _ = reference(x.double(), parts, mod.bias.detach().double())
    eps = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}[dtype]
    err = (y.double() - y_ref).abs() - eps * y_ref.abs()  # less the output's own rounding
    assert float((err.amax(-1) / y_ref.abs().amax(-1)).max()) <= 2e-3


def test_cpu_inference_plan_follows_parameters():
    """The plan is kept while the parameters stay, and rebuilt after an in-place change
    of h (and of the signs u), whose outputs then follow the new values."""
    rng = np.random.default_rng(SEED + 41)
    m, n, r, paths = 64, 96, 40, 2
    mod, (su, sv, h, l, g) = random_layer(rng, m, n, r, paths, "cpu")
    x = torch.from_numpy(rng.normal(0, 1, (4, n))).float()
    bias = mod.bias.detach().double()
    with torch.no_grad():
        mod(x)
        builds = bt._InferPlan.calls["build"]
        mod(x)
        assert bt._InferPlan.calls["build"] == builds, "rebuilt without a change"
        mod.h[1, 5] *= -3.0  # in place
        mod.h[0].mul_(0.5)
        y = mod(x)
    assert bt._InferPlan.calls["build"] == builds + 1, "not rebuilt after h changed"
    h = h.copy()
    h[1, 5] *= -3.0
    h[0] *= 0.5
    y_ref, _ = reference(x.double(), (su, sv, h, l, g), bias)
    assert float(_per_token_err(y, y_ref).max()) <= 2e-3
    with torch.no_grad():
        mod.u[0, 3, 0] ^= 0b101  # flip two signs of row 3 of path 0
        y = mod(x)
    assert bt._InferPlan.calls["build"] == builds + 2, "not rebuilt after u changed"
    su = su.copy()
    su[0, 3, 0] *= -1
    su[0, 3, 2] *= -1
    y_ref, _ = reference(x.double(), (su, sv, h, l, g), bias)
    assert float(_per_token_err(y, y_ref).max()) <= 2e-3


def test_cpu_inference_only_without_graph():
    """The plan has no backward: with grad enabled and a parameter or x requiring grad
    the training forward runs; without any, or under no_grad / inference_mode, the
    plan does."""
    rng = np.random.default_rng(SEED + 43)
    mod, _ = random_layer(rng, 40, 50, 24, 1, "cpu")
    x = torch.from_numpy(rng.normal(0, 1, (6, 50))).float()

    def ran(fn):
        before = (bt._BLRFunction.calls["forward"], bt._InferPlan.calls["run"])
        y = fn()
        after = (bt._BLRFunction.calls["forward"], bt._InferPlan.calls["run"])
        return ("train" if after[0] > before[0] else "") + ("plan" if after[1] > before[1] else ""), y

    kind, y = ran(lambda: mod(x))
    assert kind == "train" and y.requires_grad
    with torch.no_grad():
        assert ran(lambda: mod(x))[0] == "plan"
    with torch.inference_mode():
        assert ran(lambda: mod(x))[0] == "plan"
    for p in mod.parameters():
        p.requires_grad_(False)
    kind, y = ran(lambda: mod(x))
    assert kind == "plan" and not y.requires_grad
    assert ran(lambda: mod(x.clone().requires_grad_(True)))[0] == "train"
    mod.backend = "torch"
    with torch.no_grad():
        assert ran(lambda: mod(x))[0] == ""
