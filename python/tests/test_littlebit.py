"""Tests of bitrank.littlebit: LittleBit (SamsungLabs/LittleBit) checkpoint import/export.

The references here are written independently of the module, from LittleBit's code as the
module docstring describes it: int32 words, sign k of a row at bit k%32 of word k//32,
bit 1 = -1; U [m][r] packed along r, V [r][n] packed along n; one path's weight
diag(u1) . sign(U) . diag(v1*u2) . sign(V) . diag(v2), plus the _R path.
Every test draws a fresh seed (printed, so a failure can be replayed).
"""
import json
import os
import re
import secrets
import warnings

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from bitrank import littlebit as lb
from bitrank.littlebit import (pack_signs, read_littlebit, reconstruct,
                               unpack_signs, write_littlebit)

# (m, n, r, P): m != n, r below / at / above / across multiples of 8 and 32
SHAPES = [(5, 7, 3, 1), (17, 40, 13, 2), (64, 33, 32, 2), (24, 70, 45, 1), (3, 100, 70, 2),
          (33, 16, 8, 1), (40, 9, 33, 2)]


@pytest.fixture
def rng():
    seed = secrets.randbits(32)
    print(f"seed={seed}")
    return np.random.default_rng(seed)


# ------------------------------------------------------------------ independent references

def ref_lb_pack(s):
    """±1 [rows][cols] -> LittleBit int32 words [rows][ceil(cols/32)] (bit 1 = -1, LSB first)."""
    rows, cols = s.shape
    nw = (cols + 31) // 32
    words = np.zeros((rows, nw), dtype=np.uint64)
    for k in range(cols):
        words[:, k // 32] |= (s[:, k] == -1).astype(np.uint64) << np.uint64(k % 32)
    return words.astype(np.uint32).view(np.int32)


def ref_lb_unpack(words, cols):
    """LittleBit int32 words -> ±1 float64 [rows][cols]."""
    w = np.asarray(words).astype(np.int64) & 0xFFFFFFFF
    bits = (w[:, :, None] >> np.arange(32)) & 1
    bits = bits.reshape(w.shape[0], -1)[:, :cols]
    return np.where(bits == 1, -1.0, 1.0)


def ref_blr_unpack(b, r):
    """Our layout (docs/FORMAT.md): bit k%8 LSB first of byte k//8, bit 1 = +1."""
    bits = np.unpackbits(np.asarray(b, dtype=np.uint8), axis=-1, bitorder="little")[..., :r]
    return bits.astype(np.float64) * 2 - 1


def ref_littlebit_weight(paths):
    """LittleBit's forward weight: sum over paths of diag(u1) sign(U) diag(v1*u2) sign(V) diag(v2).
    paths: list of dicts of float64 numpy arrays U [m][r] (±1), V [r][n] (±1), u1 [m], u2 [r],
    v1 [r], v2 [n]."""
    return sum(p["u1"][:, None] * ((p["U"] * (p["v1"] * p["u2"])[None, :]) @ p["V"])
               * p["v2"][None, :] for p in paths)


def ref_blr_weight(layer):
    """Ŵ of one of our dicts, from the bytes through np.unpackbits."""
    r = layer["rank"]
    su = ref_blr_unpack(layer["u"].numpy(), r)
    sv = ref_blr_unpack(layer["v"].numpy(), r)
    h, l, g = (layer[k].double().numpy() for k in "hlg")
    return sum(h[p][:, None] * ((su[p] * l[p]) @ sv[p].T) * g[p][None, :]
               for p in range(su.shape[0]))


def close(a, b, what):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (what, a.shape, b.shape)
    scale = max(np.abs(b).max(), 1e-300)
    err = np.abs(a - b).max()
    assert err <= 1e-12 * scale, f"{what}: max err {err} vs scale {scale}"


# ------------------------------------------------------------------ random data

def signs(rng, *shape):
    return np.where(rng.random(shape) < 0.5, -1.0, 1.0)


def bf16_values(rng, *shape):
    """float32 values exactly representable in bfloat16 (either sign, a spread of exponents)."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-6, 6, size=shape))
    return torch.tensor(x, dtype=torch.float32).bfloat16().float()


def random_layer(rng, m, n, r, P, bias=True, f32=False):
    vals = (lambda *s: torch.tensor(rng.standard_normal(s), dtype=torch.float32)) if f32 \
        else (lambda *s: bf16_values(rng, *s))
    return {
        "u": pack_signs(torch.tensor(signs(rng, P, m, r))),
        "v": pack_signs(torch.tensor(signs(rng, P, n, r))),
        "h": vals(P, m), "l": vals(P, r), "g": vals(P, n), "rank": r,
        "bias": vals(m) if bias else None,
    }


def random_model(rng, shapes=SHAPES, f32=False):
    return {f"model.layers.{i}.mlp.proj{i}": random_layer(rng, m, n, r, P, bias=(i % 2 == 0),
                                                          f32=f32)
            for i, (m, n, r, P) in enumerate(shapes)}


def random_others(rng):
    return {"model.embed_tokens.weight": torch.tensor(rng.standard_normal((11, 6)),
                                                      dtype=torch.float32).bfloat16(),
            "model.norm.weight": torch.tensor(rng.standard_normal(6), dtype=torch.float32),
            "lm_head.weight": torch.tensor(rng.standard_normal((11, 6)), dtype=torch.float16),
            "model.step": torch.tensor(rng.integers(0, 100, size=3), dtype=torch.int64)}


def assert_same_layers(a, b):
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name]["rank"] == b[name]["rank"], name
        for k in "uvhlg":
            assert a[name][k].dtype == b[name][k].dtype, (name, k)
            assert torch.equal(a[name][k], b[name][k]), (name, k)
        if a[name]["bias"] is None:
            assert b[name]["bias"] is None, name
        else:
            assert torch.equal(a[name]["bias"].float(), b[name]["bias"]), name


# ------------------------------------------------------------------ (a) pack / unpack

def test_pack_unpack_round_trip(rng):
    for r in (1, 3, 7, 8, 9, 13, 31, 32, 33, 64, 70):
        s = torch.tensor(signs(rng, 2, 5, r), dtype=torch.float32)
        b = pack_signs(s)
        assert b.dtype == torch.uint8 and b.shape == (2, 5, (r + 7) // 8)
        assert torch.equal(unpack_signs(b, r), s)
        # the layout, through an independent decoder
        assert np.array_equal(ref_blr_unpack(b.numpy(), r), s.numpy())
        # padding bits are written 0 and ignored when read
        if r % 8:
            assert int((b[..., -1] >> (r % 8)).max()) == 0
            dirty = b.clone()
            dirty[..., -1] |= np.uint8(0xFF << (r % 8) & 0xFF)
            assert torch.equal(unpack_signs(dirty, r), s)


def test_pack_bit_order_by_hand():
    s = -torch.ones(10)
    s[[0, 3, 8]] = 1
    assert pack_signs(s).tolist() == [0b00001001, 0b00000001]
    with pytest.raises(ValueError):
        pack_signs(torch.tensor([1.0, 0.0, -1.0]))
    with pytest.raises(ValueError):
        unpack_signs(torch.zeros(3, dtype=torch.uint8), 10)


def test_littlebit_word_packing_by_hand(rng):
    """Sign k at bit k%32 of word k//32, bit 1 = -1, words as int32 (bit 31 -> negative)."""
    row = np.ones((1, 33))
    row[0, [0, 2, 31, 32]] = -1
    want = [[5 - 2 ** 31, 1]]
    assert ref_lb_pack(row).tolist() == want
    assert lb._lb_pack(torch.tensor(row == -1)).tolist() == want
    for cols in (1, 5, 31, 32, 33, 64, 100):
        s = signs(rng, 4, cols)
        assert np.array_equal(ref_lb_unpack(ref_lb_pack(s), cols), s)
        assert np.array_equal(lb._lb_pack(torch.tensor(s == -1)).numpy(), ref_lb_pack(s))


# ------------------------------------------------------------------ (b) the mapping

def littlebit_checkpoint(rng, tmp, shapes, packed=True, dtype=torch.bfloat16, residual_cfg=None):
    """A LittleBit checkpoint made here from LittleBit's layout (not by the module).
    Returns the reference paths per layer."""
    sd, refs = {}, {}
    for i, (m, n, r, P) in enumerate(shapes):
        name = f"model.layers.{i}.self_attn.q_proj"
        refs[name] = []
        for p in range(P):
            sfx = "" if p == 0 else "_R"
            if packed:
                U, V = signs(rng, m, r), signs(rng, r, n)
                sd[f"{name}.U{sfx}_packed"] = torch.tensor(ref_lb_pack(U))
                sd[f"{name}.U{sfx}_shape"] = torch.tensor([m, r], dtype=torch.int64)
                sd[f"{name}.V{sfx}_packed"] = torch.tensor(ref_lb_pack(V))
                sd[f"{name}.V{sfx}_shape"] = torch.tensor([r, n], dtype=torch.int64)
            else:   # legacy latent floats, with exact zeros and -0.0 (sign -> +1)
                Uf = rng.standard_normal((m, r))
                Vf = rng.standard_normal((r, n))
                Uf[rng.random((m, r)) < 0.1] = 0.0
                Vf[rng.random((r, n)) < 0.1] = -0.0
                sd[f"{name}.U{sfx}"] = torch.tensor(Uf, dtype=torch.float32).to(dtype)
                sd[f"{name}.V{sfx}"] = torch.tensor(Vf, dtype=torch.float32).to(dtype)
                U = np.where(sd[f"{name}.U{sfx}"].float().numpy() < 0, -1.0, 1.0)
                V = np.where(sd[f"{name}.V{sfx}"].float().numpy() < 0, -1.0, 1.0)
            sc = {}
            for k, d in (("u1", m), ("u2", r), ("v1", r), ("v2", n)):
                t = torch.tensor(rng.standard_normal((1, d)) * 2.0, dtype=torch.float32).to(dtype)
                sd[f"{name}.{k}{sfx}"] = t
                sc[k] = t[0].double().numpy()
            refs[name].append(dict(U=U, V=V, **sc))
        sd[f"{name}.bias"] = torch.tensor(rng.standard_normal(m), dtype=torch.float32).to(dtype)
        sd[f"{name}._eff_bit_target"] = torch.tensor(-1.0).to(dtype)
        sd[f"{name}._split_dim_final"] = torch.tensor(r, dtype=torch.int64)
        sd[f"{name}._eff_bit_actual"] = torch.tensor(0.5).to(dtype)
    sd["model.embed_tokens.weight"] = torch.randn(7, 4).to(dtype)
    save_file(sd, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    res = any(P == 2 for *_, P in shapes) if residual_cfg is None else residual_cfg
    with open(os.path.join(tmp, "littlebit_config.json"), "w") as f:
        json.dump({"quant_func": "SmoothSign", "eff_bit": 0.1, "split_dim": 1024,
                   "residual": res, "kv_factor": 1.0, "min_split_dim": 8,
                   "quant_mod": "LittleBitLinear"}, f)
    return sd, refs


@pytest.mark.parametrize("packed,dtype", [(True, torch.bfloat16), (True, torch.float16),
                                          (False, torch.bfloat16), (False, torch.float32)])
def test_import_matches_littlebit_forward(rng, tmp_path, packed, dtype):
    sd, refs = littlebit_checkpoint(rng, str(tmp_path), SHAPES, packed=packed, dtype=dtype)
    layers, other, cfg = read_littlebit(tmp_path)
    assert sorted(layers) == sorted(refs)
    assert sorted(other) == ["model.embed_tokens.weight"]
    assert cfg["quant_func"] == "SmoothSign" and cfg["residual"] is True
    for name, paths in refs.items():
        L = layers[name]
        assert L["u"].shape[0] == len(paths)
        if dtype == torch.float32:
            # documented: l = float32(v1 * u2), one rounding of the exact product
            paths = [dict(p, v1=(p["v1"] * p["u2"]).astype(np.float32).astype(np.float64),
                          u2=np.ones_like(p["u2"])) for p in paths]
        close(reconstruct(L).numpy(), ref_littlebit_weight(paths), name)
        for p, ref in enumerate(paths):
            # orientation: S_U = sign(U), S_V = sign(V)^T
            assert np.array_equal(unpack_signs(L["u"][p], L["rank"]).numpy(), ref["U"]), name
            assert np.array_equal(unpack_signs(L["v"][p], L["rank"]).numpy(), ref["V"].T), name
            assert np.array_equal(L["h"][p].double().numpy(), ref["u1"])
            assert np.array_equal(L["g"][p].double().numpy(), ref["v2"])
            if dtype != torch.float32:   # bf16/f16 products are exact in float32
                assert np.array_equal(L["l"][p].double().numpy(), ref["v1"] * ref["u2"])
        assert torch.equal(L["bias"], sd[f"{name}.bias"].float())


def test_import_float32_product_rounding(rng, tmp_path):
    littlebit_checkpoint(rng, str(tmp_path), [(6, 9, 40, 2)], packed=True, dtype=torch.float32)
    layers, _, _ = read_littlebit(tmp_path)
    (L,) = layers.values()
    assert L["l"].dtype == torch.float32
    with pytest.raises(ValueError, match=re.escape("model.layers.0.self_attn.q_proj.v1")):
        read_littlebit(tmp_path, exact_scales=True)


@pytest.mark.parametrize("packed", [True, False])
def test_export_matches_littlebit_forward(rng, tmp_path, packed):
    layers = random_model(rng)
    write_littlebit(tmp_path, layers, {}, packed=packed)
    raw = load_file(os.path.join(tmp_path, "model.safetensors"))
    cfg = json.load(open(os.path.join(tmp_path, "littlebit_config.json")))
    R = max(L["rank"] for L in layers.values())
    for name, L in layers.items():
        ours = ref_blr_weight(L)
        close(reconstruct(L).numpy(), ours, f"reconstruct {name}")
        paths = []
        for sfx in ("", "_R") if cfg["residual"] else ("",):
            if packed:
                assert raw[f"{name}.U{sfx}_packed"].dtype == torch.int32
                assert raw[f"{name}.U{sfx}_shape"].tolist() == [L["u"].shape[1], R]
                assert raw[f"{name}.V{sfx}_shape"].tolist() == [R, L["v"].shape[1]]
                U = ref_lb_unpack(raw[f"{name}.U{sfx}_packed"].numpy(), R)
                V = ref_lb_unpack(raw[f"{name}.V{sfx}_packed"].numpy(), L["v"].shape[1])
                # rank padding (to the common R) is +1 signs with l = 0
                assert (U[:, L["rank"]:] == 1).all() and (V[L["rank"]:] == 1).all()
            else:
                U = np.sign(raw[f"{name}.U{sfx}"].double().numpy())
                V = np.sign(raw[f"{name}.V{sfx}"].double().numpy())
                assert set(np.unique(U)) <= {-1.0, 1.0}
            sc = {k: raw[f"{name}.{k}{sfx}"].double().numpy()[0] for k in ("u1", "u2", "v1", "v2")}
            assert all(raw[f"{name}.{k}{sfx}"].dtype == torch.bfloat16 for k in sc)
            paths.append(dict(U=U, V=V, **sc))
        close(ref_littlebit_weight(paths), ours, f"littlebit formula {name}")


def test_export_hand_pinned_orientation(tmp_path):
    """U rows packed along the rank, V rows (latents) packed along the inputs."""
    s = -torch.ones(33)
    s[[1, 3, 30]] = 1   # -1 at 0, 2, 4..29, 31, 32
    want = ref_lb_pack(s.numpy()[None, :]).tolist()
    u_layer = {"u": pack_signs(s.reshape(1, 1, 33)), "v": pack_signs(torch.ones(1, 2, 33)),
               "h": torch.ones(1, 1), "l": torch.ones(1, 33), "g": torch.ones(1, 2), "rank": 33,
               "bias": None}
    v_layer = {"u": pack_signs(torch.ones(1, 2, 1)), "v": pack_signs(s.reshape(1, 33, 1)),
               "h": torch.ones(1, 2), "l": torch.ones(1, 1), "g": torch.ones(1, 33), "rank": 1,
               "bias": None}
    write_littlebit(tmp_path / "u", {"a.u": u_layer}, {})
    write_littlebit(tmp_path / "v", {"a.v": v_layer}, {})
    assert load_file(str(tmp_path / "u" / "model.safetensors"))["a.u.U_packed"].tolist() == want
    assert load_file(str(tmp_path / "v" / "model.safetensors"))["a.v.V_packed"].tolist() == want


# ------------------------------------------------------------------ (c) round trip

@pytest.mark.parametrize("packed", [True, False])
def test_round_trip_identity_bf16(rng, tmp_path, packed):
    layers, others = random_model(rng), random_others(rng)
    write_littlebit(tmp_path, layers, others, {"quant_func": "SmoothSign", "split_dim": 3},
                    packed=packed)
    back, others2, cfg = read_littlebit(tmp_path)
    assert_same_layers(layers, back)
    assert sorted(others2) == sorted(others)
    for k, t in others.items():
        assert others2[k].dtype == t.dtype and torch.equal(others2[k], t), k
    # what their loader needs: one rank R for every linear from split_dim/min_split_dim with
    # eff_bit null (rounded down to a multiple of 8, 0 -> min_split_dim, at least min_split_dim)
    R = max(L["rank"] for L in layers.values())
    assert cfg["quant_func"] == "SmoothSign" and cfg["quant_mod"] == "LittleBitLinear"
    assert cfg["eff_bit"] is None and cfg["residual"] is True
    cand = (cfg["split_dim"] // 8) * 8 or cfg["min_split_dim"]
    assert max(cand, cfg["min_split_dim"]) == R


def test_round_trip_identity_float32(rng, tmp_path):
    layers = random_model(rng, f32=True)
    write_littlebit(tmp_path, layers, {}, dtype=torch.float32, lossless=True)
    back, _, _ = read_littlebit(tmp_path, exact_scales=True)
    assert_same_layers(layers, back)
    with pytest.raises(ValueError, match="not exactly representable"):
        write_littlebit(tmp_path / "b", layers, {}, dtype=torch.bfloat16, lossless=True)


def test_round_trip_single_path_model_and_file_forms(rng, tmp_path):
    layers = random_model(rng, shapes=[(9, 20, 16, 1), (20, 9, 16, 1)])
    others = random_others(rng)
    write_littlebit(tmp_path / "a", layers, others, model_config={"model_type": "llama"})
    cfg = json.load(open(tmp_path / "a" / "littlebit_config.json"))
    assert cfg["residual"] is False and cfg["split_dim"] == 16
    mc = json.load(open(tmp_path / "a" / "config.json"))
    assert mc["model_type"] == "llama" and mc["split_dim"] == 16 and mc["residual"] is False
    raw = load_file(str(tmp_path / "a" / "model.safetensors"))
    assert not any("_R" in k for k in raw)
    # the file itself; a sharded copy with an index; a torch .bin copy
    b1, _, _ = read_littlebit(tmp_path / "a" / "model.safetensors")
    assert_same_layers(layers, b1)
    shard = tmp_path / "s"
    shard.mkdir()
    keys = sorted(raw)
    parts = {"model-00001-of-00002.safetensors": keys[::2],
             "model-00002-of-00002.safetensors": keys[1::2]}
    for fname, ks in parts.items():
        save_file({k: raw[k] for k in ks}, str(shard / fname))
    json.dump({"metadata": {}, "weight_map": {k: f for f, ks in parts.items() for k in ks}},
              open(shard / "model.safetensors.index.json", "w"))
    b2, o2, _ = read_littlebit(shard)
    assert_same_layers(layers, b2)
    assert sorted(o2) == sorted(others)
    binp = tmp_path / "bin"
    binp.mkdir()
    torch.save(raw, binp / "pytorch_model.bin")
    b3, _, _ = read_littlebit(binp)
    assert_same_layers(layers, b3)
    # read -> write -> read with the returned config
    write_littlebit(tmp_path / "c", b1, o2, config_extra=read_littlebit(tmp_path / "a")[2])
    assert json.load(open(tmp_path / "c" / "config.json"))["model_type"] == "llama"
    assert_same_layers(layers, read_littlebit(tmp_path / "c")[0])


def test_padding_kept_when_no_longer_zero(rng, tmp_path):
    layers = random_model(rng, shapes=[(9, 20, 5, 1), (20, 9, 16, 2)])
    write_littlebit(tmp_path, layers, {})
    f = os.path.join(tmp_path, "model.safetensors")
    raw = load_file(f)
    raw["model.layers.0.mlp.proj0.u2"][0, 7] = 3.0      # a padded component, now live
    save_file(raw, f)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        back, _, _ = read_littlebit(tmp_path)
    assert any("proj0" in str(x.message) for x in w)
    L = back["model.layers.0.mlp.proj0"]
    assert L["rank"] == 16 and L["u"].shape[0] == 2
    paths = []
    for sfx in ("", "_R"):
        paths.append(dict(U=ref_lb_unpack(raw[f"model.layers.0.mlp.proj0.U{sfx}_packed"], 16),
                          V=ref_lb_unpack(raw[f"model.layers.0.mlp.proj0.V{sfx}_packed"], 20),
                          **{k: raw[f"model.layers.0.mlp.proj0.{k}{sfx}"].double().numpy()[0]
                             for k in ("u1", "u2", "v1", "v2")}))
    close(reconstruct(L).numpy(), ref_littlebit_weight(paths), "kept padding")
    assert_same_layers({"x": layers["model.layers.1.mlp.proj1"]},
                       {"x": back["model.layers.1.mlp.proj1"]})


# ------------------------------------------------------------------ (d) hostile files

NAME = "model.layers.1.self_attn.q_proj"     # (17, 40, 13, 2) in littlebit_checkpoint


def corrupt(tmp, rng, edit, packed=True):
    sd, _ = littlebit_checkpoint(rng, tmp, SHAPES[:3], packed=packed)
    edit(sd)
    save_file(sd, os.path.join(tmp, "model.safetensors"))


CASES = [
    ("u2 shape", f"{NAME}.u2", lambda sd: sd.__setitem__(f"{NAME}.u2", torch.ones(1, 14).bfloat16())),
    ("v2 1-D", f"{NAME}.v2", lambda sd: sd.__setitem__(f"{NAME}.v2", torch.ones(40).bfloat16())),
    ("U_packed shape", f"{NAME}.U_packed",
     lambda sd: sd.__setitem__(f"{NAME}.U_packed", torch.zeros(17, 2, dtype=torch.int32))),
    ("V_R_packed shape", f"{NAME}.V_R_packed",
     lambda sd: sd.__setitem__(f"{NAME}.V_R_packed", torch.zeros(12, 2, dtype=torch.int32))),
    ("U_packed dtype", f"{NAME}.U_packed",
     lambda sd: sd.__setitem__(f"{NAME}.U_packed", sd[f"{NAME}.U_packed"].long())),
    ("V_packed dtype", f"{NAME}.V_packed",
     lambda sd: sd.__setitem__(f"{NAME}.V_packed", sd[f"{NAME}.V_packed"].float())),
    ("U_shape dtype", f"{NAME}.U_shape",
     lambda sd: sd.__setitem__(f"{NAME}.U_shape", sd[f"{NAME}.U_shape"].int())),
    ("u1 dtype", f"{NAME}.u1", lambda sd: sd.__setitem__(f"{NAME}.u1", sd[f"{NAME}.u1"].double())),
    ("bias dtype", f"{NAME}.bias", lambda sd: sd.__setitem__(f"{NAME}.bias", sd[f"{NAME}.bias"].int())),
    ("bias shape", f"{NAME}.bias", lambda sd: sd.__setitem__(f"{NAME}.bias", torch.ones(16))),
    ("missing v1", f"{NAME}.v1", lambda sd: sd.pop(f"{NAME}.v1")),
    ("missing V_packed", f"{NAME}.V_packed", lambda sd: sd.pop(f"{NAME}.V_packed")),
    ("missing U_shape", f"{NAME}.U_shape", lambda sd: sd.pop(f"{NAME}.U_shape")),
    ("missing u1_R", f"{NAME}.u1_R", lambda sd: sd.pop(f"{NAME}.u1_R")),
    ("rank mismatch", f"{NAME}.V", lambda sd: (
        sd.__setitem__(f"{NAME}.V_shape", torch.tensor([12, 40])),
        sd.__setitem__(f"{NAME}.V_packed", sd[f"{NAME}.V_packed"][:12].clone()))),
    ("NaN scale", f"{NAME}.u1", lambda sd: sd[f"{NAME}.u1"].__setitem__((0, 3), float("nan"))),
    ("dense non-±1 V in a packed file", f"{NAME}.V", lambda sd: (
        sd.pop(f"{NAME}.V_packed"), sd.pop(f"{NAME}.V_shape"),
        sd.__setitem__(f"{NAME}.V", torch.full((13, 40), 0.5)))),
]


@pytest.mark.parametrize("what,key,edit", CASES, ids=[c[0] for c in CASES])
def test_corrupt_tensor_names_the_tensor(rng, tmp_path, what, key, edit):
    corrupt(str(tmp_path), rng, edit)
    with pytest.raises(ValueError, match=re.escape(key)):
        read_littlebit(tmp_path)


def test_corrupt_dense_nan(rng, tmp_path):
    corrupt(str(tmp_path), rng, lambda sd: sd[f"{NAME}.U"].__setitem__((2, 2), float("nan")),
            packed=False)
    with pytest.raises(ValueError, match=re.escape(f"{NAME}.U")):
        read_littlebit(tmp_path)


def test_residual_tensors_with_residual_false(rng, tmp_path):
    littlebit_checkpoint(rng, str(tmp_path), SHAPES[:2], residual_cfg=False)
    with pytest.raises(ValueError, match=re.escape(NAME)):
        read_littlebit(tmp_path)


def test_corrupt_files(rng, tmp_path):
    littlebit_checkpoint(rng, str(tmp_path), SHAPES[:2])
    f = os.path.join(tmp_path, "model.safetensors")
    data = open(f, "rb").read()
    open(f, "wb").write(data[: len(data) // 2])
    with pytest.raises(ValueError, match="model.safetensors"):
        read_littlebit(tmp_path)
    open(f, "wb").write(b"\xff" * 64)
    with pytest.raises(ValueError, match="model.safetensors"):
        read_littlebit(tmp_path)

    d = tmp_path / "idx"
    d.mkdir()
    json.dump({"weight_map": {"a": "../model.safetensors"}},
              open(d / "model.safetensors.index.json", "w"))
    with pytest.raises(ValueError, match=re.escape("../model.safetensors")):
        read_littlebit(d)

    d2 = tmp_path / "cfg"
    d2.mkdir()
    littlebit_checkpoint(rng, str(d2), SHAPES[:1])
    open(d2 / "littlebit_config.json", "w").write("[1, 2]")
    with pytest.raises(ValueError, match="littlebit_config.json"):
        read_littlebit(d2)
    json.dump({"residual": "yes"}, open(d2 / "littlebit_config.json", "w"))
    with pytest.raises(ValueError, match="residual"):
        read_littlebit(d2)
    json.dump({"residual": False, "bitrank": {"layers": {"x": {"rank": "7", "paths": 1}}}},
              open(d2 / "littlebit_config.json", "w"))
    with pytest.raises(ValueError, match="bitrank"):
        read_littlebit(d2)

    torch.save([torch.zeros(3)], tmp_path / "list.bin")
    with pytest.raises(ValueError, match="list.bin"):
        read_littlebit(tmp_path / "list.bin")


def test_write_rejects_bad_layers(rng, tmp_path):
    good = random_layer(rng, 6, 9, 10, 2)
    for key, bad in (("u", good["u"].int()), ("v", good["v"][:, :, :1]),
                     ("l", good["l"][:, :9]), ("h", good["h"].int()), ("rank", 11)):
        with pytest.raises(ValueError, match=re.escape("model.x")):
            write_littlebit(tmp_path, {"model.x": {**good, key: bad}}, {})
    with pytest.raises(ValueError, match="lm_head"):
        write_littlebit(tmp_path, {"lm_head": good}, {})
    with pytest.raises(ValueError, match=re.escape("model.x.weight")):
        write_littlebit(tmp_path, {"model.x.weight": good}, {})
    with pytest.raises(ValueError, match=re.escape("model.x.bias")):
        write_littlebit(tmp_path, {"model.x": good}, {"model.x.bias": torch.zeros(6)})
    big = {**good, "h": torch.full_like(good["h"], 1e5)}
    with pytest.raises(ValueError, match=re.escape("model.x.u1")):
        write_littlebit(tmp_path, {"model.x": big}, {}, dtype=torch.float16)
