"""Tests of bitrank.eval, bitrank.text and `python -m bitrank eval` (CPU only).

Every reference is computed here, independently of the code under test: ranks by
counting, Spearman's correlation in Python floats, perplexity by the Hugging Face
sliding-window loop on a float64 copy of the model, and closed forms where a model
is built to know the answer. Random data come from a fresh seed per run, printed
(pytest -s shows it; a failure's report shows it too)."""
import json
import math
import os
import random
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PYTHON_DIR not in sys.path:  # when no conftest.py has put it there
    sys.path.insert(0, PYTHON_DIR)

from bitrank import eval as ev  # noqa: E402
from bitrank import text as tx  # noqa: E402
from bitrank.__main__ import main  # noqa: E402

transformers = pytest.importorskip("transformers")


@pytest.fixture
def seed():
    s = int.from_bytes(os.urandom(4), "little")
    print(f"seed {s}")
    torch.manual_seed(s)
    random.seed(s)
    return s


# ------------------------------------------------------------------ ranks

def ref_ranks(x):
    """0-based mean ranks by counting: #less + (#equal − 1)/2, in Python floats."""
    x = [float(v) for v in x]
    return [sum(w < v for w in x) + (sum(w == v for w in x) - 1) / 2.0 for v in x]


def ref_spearman(a, b):
    ra, rb = ref_ranks(a), ref_ranks(b)
    ma, mb = math.fsum(ra) / len(ra), math.fsum(rb) / len(rb)
    num = math.fsum((p - ma) * (q - mb) for p, q in zip(ra, rb))
    den = math.sqrt(math.fsum((p - ma) ** 2 for p in ra) * math.fsum((q - mb) ** 2 for q in rb))
    return num / den


def test_rankdata_with_ties(seed):
    rng = np.random.default_rng(seed)
    for n in (1, 2, 7, 200):
        x = rng.integers(0, max(2, n // 4), n).astype(np.float64)  # many ties
        assert np.array_equal(ev.rankdata(x), np.array(ref_ranks(x)))
    x = rng.standard_normal(300)  # no ties: a permutation of 0..n-1
    assert sorted(ev.rankdata(x)) == list(range(300))
    assert np.array_equal(ev.rankdata(torch.tensor([3.0, 1.0, 3.0, 2.0])), [2.5, 0.0, 2.5, 1.0])


def test_spearman_against_reference(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 20, 400).astype(np.float64)
    b = a + rng.integers(0, 15, 400)  # correlated, with ties in both
    got = ev.spearman(a, b)
    assert 0.3 < got < 1.0
    assert got == pytest.approx(ref_spearman(a, b), abs=1e-12)
    c = rng.standard_normal(400)
    assert ev.spearman(c, np.exp(c)) == pytest.approx(1.0, abs=1e-12)  # monotone
    assert ev.spearman(c, -c ** 3) == pytest.approx(-1.0, abs=1e-12)
    assert math.isnan(ev.spearman(c, np.ones(400)))


# ------------------------------------------------------------------ embedding metrics

def unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_embedding_metrics_known_answers(seed):
    rng = np.random.default_rng(seed)
    n, p, d = 60, 40, 256
    e = unit(rng.standard_normal((n, d)))
    pa = unit(rng.standard_normal((p, d)))
    perm = rng.permutation(p)
    pb = unit(pa[perm] + 0.05 * rng.standard_normal((p, d)))  # pa[perm[i]] ≈ pb[i]
    m = ev.embedding_metrics(e, e, pa, pb)
    assert m["cos"] == pytest.approx(1.0, abs=1e-12)
    assert m["spearman"] == pytest.approx(1.0, abs=1e-12)
    # pa[i] retrieves pb[j] with perm[j] == i: right only where perm[i] == i
    assert m["top1"] == pytest.approx(np.mean(perm == np.arange(p)))
    assert ev.embedding_metrics(e, None, pa, unit(pa + 0.05 * rng.standard_normal((p, d))))[
        "top1"] == 1.0
    iu = np.triu_indices(n, 1)
    assert m["pairwise_cos"] == pytest.approx(float((e @ e.T)[iu].mean()), abs=1e-12)
    assert abs(m["pairwise_cos"]) < 0.05  # random directions in 256-d
    # a collapsed model: one direction for everything
    c = unit(np.ones((n, d)) + 1e-3 * rng.standard_normal((n, d)))
    mc = ev.embedding_metrics(c, e, c[:p], c[:p])
    assert mc["pairwise_cos"] > 0.999
    assert abs(mc["cos"]) < 0.1
    # the negated embeddings: cos −1, similarities unchanged (spearman 1)
    assert ev.embedding_metrics(-e, e, pa, pb)["cos"] == pytest.approx(-1.0, abs=1e-12)


class WordTokenizer:
    """A stand-in tokenizer: [CLS]=1, one id per whitespace word (a hash), [SEP]=2, pad 0."""

    def __init__(self, vocab):
        self.vocab = vocab

    def __call__(self, sentences, truncation=False, max_length=None, padding=False,
                 return_tensors=None, **_):
        ids = [[1] + [3 + zlib.crc32(w.encode()) % (self.vocab - 3) for w in s.split()] + [2]
               for s in sentences]
        if truncation and max_length:
            ids = [x[:max_length] for x in ids]
        mask = [[1] * len(x) for x in ids]
        if padding:
            width = max(len(x) for x in ids)
            mask = [m + [0] * (width - len(m)) for m in mask]
            ids = [x + [0] * (width - len(x)) for x in ids]
        enc = {"input_ids": ids, "attention_mask": mask}
        if return_tensors == "pt":
            enc = {k: torch.tensor(v) for k, v in enc.items()}
        return transformers.BatchEncoding(enc)


def tiny_bert(vocab=97):
    cfg = transformers.BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64,
                                  max_position_embeddings=64)
    return transformers.BertModel(cfg).eval()


def random_sentences(rng, n, lo=2, hi=20):
    return [" ".join(f"w{rng.integers(0, 500)}" for _ in range(rng.integers(lo, hi)))
            for _ in range(n)]


def test_embed_is_masked_mean_in_input_order(seed):
    rng = np.random.default_rng(seed)
    model, tok = tiny_bert(), WordTokenizer(97)
    sents = random_sentences(rng, 23)
    got = ev.embed(model, tok, sents, "cpu", seq_len=12, batch=5)  # padded, reordered batches
    assert got.dtype == torch.float64 and got.shape == (23, 32)
    with torch.no_grad():
        for i, s in enumerate(sents):  # alone: no padding at all
            x = tok([s], truncation=True, max_length=12, return_tensors="pt")
            h = model(**x).last_hidden_state[0].double().mean(0)
            assert torch.allclose(got[i], h / h.norm(), atol=2e-6), i


class Collapsed(torch.nn.Module):
    """An encoder that maps every token to (almost) the same vector."""

    def __init__(self, d=32):
        super().__init__()
        self.v = torch.nn.Parameter(torch.randn(d))
        self.config = transformers.PretrainedConfig(hidden_size=d)

    def forward(self, input_ids, attention_mask=None, **_):
        noise = 1e-4 * torch.randn(*input_ids.shape, self.v.numel())
        return transformers.modeling_outputs.BaseModelOutput(last_hidden_state=self.v + noise)


def test_embedding_fidelity(seed):
    rng = np.random.default_rng(seed)
    model, tok = tiny_bert(), WordTokenizer(97)
    sents = random_sentences(rng, 40, 6, 20)
    pairs = list(zip(random_sentences(rng, 15, 6, 12), random_sentences(rng, 15, 6, 12)))
    same = ev.embedding_fidelity(model, model, tok, sents, pairs, "cpu", seq_len=24)
    assert set(same) == {"cos", "spearman", "top1", "top1_reference", "pairwise",
                         "pairwise_reference"}
    assert same["cos"] == pytest.approx(1.0, abs=1e-6)  # f32 normalization
    assert same["spearman"] == pytest.approx(1.0, abs=1e-9)
    assert same["top1"] == same["top1_reference"]
    assert same["pairwise"] == pytest.approx(same["pairwise_reference"], abs=1e-9)
    ref = ev.embed_set(model, tok, sents, pairs, seq_len=24)
    col = ev.embedding_fidelity(Collapsed(), None, tok, sents, pairs, seq_len=24,
                                reference_embeddings=ref)
    assert col["pairwise"] > 0.999
    assert col["pairwise_reference"] == same["pairwise_reference"]
    assert col["top1"] < 0.5 and col["cos"] < 0.99


# ------------------------------------------------------------------ perplexity

def tiny_llama(vocab=128):
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=256,
                                   initializer_range=0.3)  # peaked logits: errors show
    return transformers.LlamaForCausalLM(cfg).eval()


def ref_perplexity(model64, ids, seq_len, stride):
    """The Hugging Face sliding-window loop, float64: window [begin, end) scores its
    last end − prev_end tokens (labels −100 elsewhere), each from the tokens before
    it in the window."""
    total, count, prev_end, n = 0.0, 0, 0, len(ids)
    with torch.no_grad():
        for begin in range(0, n, stride):
            end = min(begin + seq_len, n)
            labels = ids[begin:end].clone()
            labels[:-(end - prev_end)] = -100
            logp = torch.log_softmax(model64(input_ids=ids[None, begin:end]).logits[0], -1)
            for j in range(1, end - begin):
                if labels[j] != -100:
                    total -= float(logp[j - 1, labels[j]])
                    count += 1
            prev_end = end
            if end == n:
                break
    return total / count, count


@pytest.mark.parametrize("n,seq_len,stride", [(301, 64, None), (256, 64, 64), (301, 64, 24),
                                              (130, 50, 50), (77, 128, None)])
def test_perplexity_against_float64_windows(seed, n, seq_len, stride):
    import copy
    model = tiny_llama()
    model64 = copy.deepcopy(model).double()
    ids = torch.randint(0, 128, (n,))
    ref_nll, ref_count = ref_perplexity(model64, ids, seq_len, stride or seq_len)
    got = ev.perplexity(model, None, ids, seq_len=seq_len, stride=stride)
    assert got["tokens"] == ref_count
    if stride is None:
        assert ref_count == n - math.ceil(n / seq_len)  # each window's first is unscored
    assert got["nll"] == pytest.approx(ref_nll, rel=2e-6)
    assert got["ppl"] == pytest.approx(math.exp(got["nll"]), rel=1e-12)
    assert 1.5 < got["ppl"]  # a random model does not know the text
    exact = ev.perplexity(model64, None, ids, seq_len=seq_len, stride=stride, batch=3)
    assert exact["nll"] == pytest.approx(ref_nll, rel=1e-11)


def test_perplexity_batches_and_max_tokens(seed):
    model, ids = tiny_llama(), torch.randint(0, 128, (400,))
    one = ev.perplexity(model, None, ids, seq_len=64, batch=1)
    many = ev.perplexity(model, None, ids, seq_len=64, batch=4)
    assert many["tokens"] == one["tokens"] and many["nll"] == pytest.approx(one["nll"], rel=1e-5)
    cut = ev.perplexity(model, None, ids, seq_len=64, max_tokens=150)
    assert cut == ev.perplexity(model, None, ids[:150], seq_len=64)
    assert cut["tokens"] == 150 - 3


class NextToken(torch.nn.Module):
    """A causal LM that gives logit a to token (x+1) mod V after token x, 0 elsewhere."""

    def __init__(self, vocab, a):
        super().__init__()
        self.vocab, self.a = vocab, a
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None):
        logits = torch.zeros(*input_ids.shape, self.vocab)
        logits.scatter_(-1, ((input_ids + 1) % self.vocab).unsqueeze(-1), self.a)
        return transformers.modeling_outputs.CausalLMOutput(logits=logits)


def test_perplexity_closed_form(seed):
    vocab, a = 50, random.uniform(0.5, 4.0)
    start = random.randrange(vocab)
    ids = (torch.arange(200) + start) % vocab  # every next token is the predicted one
    got = ev.perplexity(NextToken(vocab, a), None, ids, seq_len=32, stride=20)
    p = math.exp(a) / (math.exp(a) + vocab - 1)
    assert got["nll"] == pytest.approx(-math.log(p), rel=1e-6)
    assert got["tokens"] == 199  # with overlap, only the text's first token is unscored


def test_perplexity_restores_the_mode_when_the_model_fails():
    class Fails(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            raise RuntimeError("out of memory, say")

    m = Fails().train()
    with pytest.raises(RuntimeError, match="out of memory"):
        ev.perplexity(m, None, torch.arange(40) % 7, seq_len=16)
    assert m.training


def test_windows_cover_each_token_once(seed):
    for _ in range(50):
        n, seq_len = random.randint(2, 300), random.randint(2, 64)
        stride = random.randint(1, seq_len)
        spans = ev.windows(n, seq_len, stride)
        scored = [t for b, e, f in spans for t in range(f, e)]
        assert sorted(scored) == scored and len(set(scored)) == len(scored)
        assert all(b < f and e - b <= seq_len for b, e, f in spans)
        if stride < seq_len:
            assert scored == list(range(1, n))
    with pytest.raises(ev.EvalError):
        ev.windows(100, 64, 65)
    with pytest.raises(ev.EvalError):
        ev.perplexity(tiny_llama(), None, torch.tensor([5]), seq_len=8)
    with pytest.raises(ev.EvalError):
        ev.perplexity(tiny_llama(), None, torch.zeros(2, 8, dtype=torch.long), seq_len=8)


# ------------------------------------------------------------------ text

def test_select_sentences_and_load_text(tmp_path):
    para = ("One two three four five six. Seven eight nine ten eleven twelve! "
            "Short one. Thirteen fourteen fifteen sixteen seventeen eighteen?")
    sents, pairs = tx.select_sentences(tx.paragraphs(para + "\n\n \n" + para), 10, 10)
    assert sents == ["One two three four five six.", "Seven eight nine ten eleven twelve!",
                     "Thirteen fourteen fifteen sixteen seventeen eighteen?"]
    assert pairs == [("One two three four five six.", "Seven eight nine ten eleven twelve!")]
    f = tmp_path / "t.txt"
    f.write_text("hello\n")
    assert tx.load_text(str(f)) == "hello\n"
    for bad in (tmp_path / "missing.txt", tmp_path):
        with pytest.raises(tx.TextError, match=str(bad)):
            tx.load_text(str(bad))
    (tmp_path / "blank.txt").write_text(" \n\n")
    with pytest.raises(tx.TextError, match="no text"):
        tx.load_text(str(tmp_path / "blank.txt"))


def write_fortunes(d, files):
    """A fortune directory: each file's entries separated by % lines, a .dat beside it."""
    d.mkdir()
    for name, entries in files.items():
        (d / name).write_text("\n%\n".join(entries) + "\n%\n")
        (d / f"{name}.dat").write_bytes(b"\0" * 8)
    return str(d)


def test_calibration_sentences_never_hold_a_heldout_sentence(tmp_path):
    shared = "This sentence is in a held-out file and in another one."
    d = write_fortunes(tmp_path / "f", {
        "science": ["Alpha beta gamma delta epsilon zeta. " + shared, "Too short."],
        "wisdom": [shared + " Held out words only here and nowhere else."],
        "startrek": ["Space the final frontier of the ship and crew.",
                     "Alpha beta gamma delta epsilon zeta."],  # a repeat: kept once
    })
    assert tx.other_files(d) == ["startrek"]
    names, sents = tx.calibration_sentences(fortune_dir=d)
    assert names == ["science", "startrek"]
    assert sorted(sents) == ["Alpha beta gamma delta epsilon zeta.",
                             "Space the final frontier of the ship and crew."]
    names, sents = tx.calibration_sentences(fortune_dir=d, all_files=False,
                                            extra=["In the beginning God created the heaven "
                                                   "and the earth. " + shared])
    assert names == ["science"]
    assert sorted(sents) == ["Alpha beta gamma delta epsilon zeta.",
                             "In the beginning God created the heaven and the earth."]
    assert tx.calibration_sentences(1, fortune_dir=d)[1] == \
        tx.calibration_sentences(fortune_dir=d)[1][:1]
    with pytest.raises(tx.TextMissing):
        tx.other_files(str(tmp_path / "nowhere"))
    # the CLIs' default text: entries, or with --per-text these sentences
    import argparse
    from bitrank.cli_compress import calibration_text
    old = tx.FORTUNE_DIR
    tx.FORTUNE_DIR = d
    try:
        assert calibration_text(argparse.Namespace(calib=None, per_text=True)) == \
            tx.calibration_sentences(seed=0)[1]
        assert calibration_text(argparse.Namespace(calib=None, per_text=False)) == \
            tx.calibration_entries(seed=0)[1]
    finally:
        tx.FORTUNE_DIR = old


def test_calibration_ids_one_text_per_row(seed):
    from bitrank.calib import calibration_ids
    rng = np.random.default_rng(seed)
    texts = random_sentences(rng, 9, 1, 14) + [""]
    class Tokenizer(WordTokenizer):  # one that leaves out [CLS] [SEP] when asked
        pad_token_id = 0

        def __call__(self, sentences, add_special_tokens=True, **kw):
            one = isinstance(sentences, str)
            enc = super().__call__([sentences] if one else sentences, **kw)
            if not add_special_tokens:
                enc["input_ids"] = [x[1:-1] for x in enc["input_ids"]]
            return {k: v[0] for k, v in enc.items()} if one else enc
    tok = Tokenizer(97)
    ids, mask = calibration_ids(texts, tok, None, 10, pack=False)
    assert ids.shape == mask.shape == (9, 10)  # the empty text dropped
    for row, text in enumerate(texts[:9]):
        want = tok([text])["input_ids"][0]
        want = want[:9] + [2] if len(want) > 10 else want  # cut inside [CLS] ... [SEP]
        assert ids[row, :len(want)].tolist() == want
        assert mask[row].tolist() == [1] * len(want) + [0] * (10 - len(want))
        assert ids[row, len(want):].eq(0).all()
    ids3, mask3 = calibration_ids(texts, tok, 3, 10, pack=False)
    assert torch.equal(ids3, ids[:3]) and torch.equal(mask3, mask[:3])
    with pytest.raises(ValueError, match="empty"):
        calibration_ids(["", ""], tok, None, 10, pack=False)


# ------------------------------------------------------------------ the CLI

def run_cli(capsys, *argv):
    try:
        rc = main(list(argv))
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_cli_argument_errors(capsys, tmp_path):
    rc, _, err = run_cli(capsys, "eval")
    assert rc == 1 and "COMPRESSED" in one_line(err)
    rc, _, err = run_cli(capsys, "eval", str(tmp_path / "nope"))
    assert rc == 1 and "nope: no such file or directory" in one_line(err)
    rc, _, err = run_cli(capsys, "eval", str(tmp_path), "--kind", "encoder")
    assert rc == 1 and "--reference" in one_line(err)
    rc, _, err = run_cli(capsys, "eval", str(tmp_path), "--reference", str(tmp_path / "orig"))
    assert rc == 1 and "orig: no such file" in one_line(err)
    rc, _, err = run_cli(capsys, "eval", str(tmp_path), "--text", str(tmp_path / "t.txt"))
    assert rc == 1 and "t.txt" in one_line(err)
    rc, _, err = run_cli(capsys, "eval", str(tmp_path), "--seq-len", "0")
    assert rc == 1 and "--seq-len" in one_line(err)
    rc, _, err = run_cli(capsys, "eval", str(tmp_path), "--kind", "decoder")
    assert rc == 1 and "--kind" in one_line(err)
    rc, _, err = run_cli(capsys, "eval", str(tmp_path), "--json", str(tmp_path / "x" / "o.json"))
    assert rc == 1 and "o.json" in one_line(err)
    rc, _, err = run_cli(capsys, "frobnicate")
    assert rc == 1 and "frobnicate" in one_line(err)


def test_cli_optional_subcommands(capsys, tmp_path, monkeypatch):
    import argparse
    from bitrank import __main__ as bm
    add, run = bm._optional("ghost", "bitrank.no_such_module")
    p = argparse.ArgumentParser()
    add(p)
    with pytest.raises(bm.UserError, match="not available.*no_such_module is not installed"):
        run(p.parse_args(["x", "--y", "1"]))
    (tmp_path / "broken_bitrank_mod.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(bm.UserError, match="not available.*boom"):
        bm._optional("broken", "broken_bitrank_mod")[1](None)
    table = dict(bm.subcommands(), ghost=bm._optional("ghost", "bitrank.no_such_module"))
    monkeypatch.setattr(bm, "subcommands", lambda: table)
    rc, _, err = run_cli(capsys, "ghost", "x", "--y")
    assert rc == 1 and "not available" in one_line(err)
    for name in ("compress", "demo"):  # registered: their own arguments, or the stand-in's
        assert name in table


def test_cli_subprocess_no_traceback(tmp_path):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "bitrank", "eval", str(tmp_path / "missing")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "missing: no such file" in one_line(r.stderr)


# ------------------------------------------------------------------ end to end

WORDS = [f"w{i}" for i in range(60)]


def word_level_tokenizer(path):
    """A real (saved, AutoTokenizer-loadable) word-level tokenizer over WORDS."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    vocab = {w: i for i, w in enumerate(specials + WORDS + [".", "!", "?"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]",
                                                pad_token="[PAD]", cls_token="[CLS]",
                                                sep_token="[SEP]")
    fast.save_pretrained(path)
    return len(vocab)


def random_text(rng, paragraphs=30):
    out = []
    for _ in range(paragraphs):
        sents = [" ".join(rng.choice(WORDS, rng.integers(6, 15))).capitalize() + "."
                 for _ in range(rng.integers(2, 5))]
        out.append(" ".join(sents))
    return "\n\n".join(out)


@pytest.fixture
def fake_load(monkeypatch):
    """bitrank.hf.load as transformers' AutoModelForCausalLM/AutoModel loader (the real
    one is another module's; here the evaluation around it is tested)."""
    import types
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    def load(path):
        causal = ev.model_kind(AutoConfig.from_pretrained(path)) == "causal"
        return (AutoModelForCausalLM if causal else AutoModel).from_pretrained(path)
    module = types.ModuleType("bitrank.hf")
    module.load = load
    monkeypatch.setitem(sys.modules, "bitrank.hf", module)


def test_cli_eval_causal_end_to_end(seed, tmp_path, capsys, fake_load):
    rng = np.random.default_rng(seed)
    mdir = tmp_path / "model"
    vocab = word_level_tokenizer(mdir)
    model = tiny_llama(vocab)
    model.config.architectures = ["LlamaForCausalLM"]
    model.save_pretrained(mdir)
    tfile = tmp_path / "text.txt"
    tfile.write_text(random_text(rng))
    out = tmp_path / "r.json"
    rc, stdout, err = run_cli(capsys, "eval", str(mdir), "--reference", str(mdir), "--text",
                              str(tfile), "--device", "cpu", "--seq-len", "48",
                              "--max-tokens", "400", "--json", str(out))
    assert rc == 0, err
    r = json.loads(out.read_text())
    assert r["kind"] == "causal" and "ppl" in stdout
    tok = transformers.AutoTokenizer.from_pretrained(mdir)
    want = ev.perplexity(model, tok, tfile.read_text(), seq_len=48, max_tokens=400)
    assert r["compressed"]["tokens"] == want["tokens"] == 400 - math.ceil(400 / 48)
    assert r["compressed"]["nll"] == pytest.approx(want["nll"], rel=1e-5)
    assert r["reference"]["nll"] == pytest.approx(want["nll"], rel=1e-5)


def test_cli_eval_encoder_end_to_end(seed, tmp_path, capsys, fake_load):
    rng = np.random.default_rng(seed)
    mdir = tmp_path / "enc"
    vocab = word_level_tokenizer(mdir)
    tiny_bert(vocab).save_pretrained(mdir)
    tfile = tmp_path / "text.txt"
    tfile.write_text(random_text(rng))
    out = tmp_path / "r.json"
    rc, stdout, err = run_cli(capsys, "eval", str(mdir), "--reference", str(mdir), "--text",
                              str(tfile), "--device", "cpu", "--json", str(out))
    assert rc == 0, err
    r = json.loads(out.read_text())
    assert r["kind"] == "encoder" and r["pairs"] >= 10 and r["sentences"] >= 40
    f = r["fidelity"]
    assert f["cos"] == pytest.approx(1.0, abs=1e-6) and f["top1"] == f["top1_reference"]
    assert "spearman" in stdout
    rc, _, err = run_cli(capsys, "eval", str(mdir), "--text", str(tfile), "--device", "cpu")
    assert rc == 1 and "--reference" in one_line(err)  # auto: an encoder needs its original
