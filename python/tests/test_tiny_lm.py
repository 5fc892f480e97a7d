"""The tiny-LM pieces: the KJV corpus (bitrank.kjv), held-out perplexity
(bitrank.eval.perplexity, token_stream) and the training script bench/tiny_lm/train.py.

None of them needs Debian's bible packages: the parser runs against a fake `bible`
program and the training against a small made-up corpus. Where the real program is
installed, one test also reads the whole KJV through it.
"""
import importlib.util
import json
import math
import os
import random
import subprocess
import sys

import pytest
import torch

from bitrank import kjv
from bitrank.eval import perplexity, token_stream

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN_PY = os.path.join(REPO, "bench", "tiny_lm", "train.py")

# What the real program prints, in small: an interactive session's banner, the
# Genesis 1:1 it shows at start, the prompt with the typed range, then the text with
# wrapped verses and multi-word and numbered book names.
FAKE_OUTPUT = """bible: Debian/BRS Release 4.36
Hit '?' for help.

Genesis 1

  1 In the beginning God created the heaven and the earth.
bible(KJV) [Gen1:1]> gen1:1-rev22:21

Genesis 1

  1 In the beginning God created the heaven and the earth.
  2 And the earth was without form, and void; and darkness was upon the face of
the deep. And the Spirit of God moved upon the face of the waters.
  3 And God said, Let there be light: and there was light.

Genesis 2

  1 Thus the heavens and the earth were finished, and all the host of them 2
Samuel 3
  2 And on the seventh day God ended his work.

Song of Solomon 1

  1 The song of songs, which is Solomon's.

1 John 1

  1 That which was from the beginning, which we have heard,
which we have seen with our eyes.
  10 the verse number is what the program printed, not its place
"""

FAKE_CHAPTERS = [
    ("Genesis", 1, "In the beginning God created the heaven and the earth. And the earth "
     "was without form, and void; and darkness was upon the face of the deep. And the "
     "Spirit of God moved upon the face of the waters. And God said, Let there be light: "
     "and there was light."),
    ("Genesis", 2, "Thus the heavens and the earth were finished, and all the host of "
     "them 2 Samuel 3 And on the seventh day God ended his work."),
    ("Song of Solomon", 1, "The song of songs, which is Solomon's."),
]


def fake_bible(tmp_path, output):
    """A `bible` program in tmp_path/usr/bin printing `output` (and recording its
    arguments in tmp_path/argv.json), with an empty bible.data in tmp_path/usr/lib."""
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "lib").mkdir()
    (tmp_path / "usr" / "lib" / "bible.data").write_bytes(b"")
    (tmp_path / "out.txt").write_text(output)
    program = tmp_path / "usr" / "bin" / "bible"
    program.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"json.dump(sys.argv[1:], open({str(tmp_path / 'argv.json')!r}, 'w'))\n"
        f"sys.stdout.write(open({str(tmp_path / 'out.txt')!r}).read())\n")
    program.chmod(0o755)
    return str(program)


@pytest.fixture
def no_kjv_env(monkeypatch):
    for name in ("BITRANK_KJV_TEXT", "BITRANK_KJV_BIBLE", "BITRANK_KJV_DATA"):
        monkeypatch.delenv(name, raising=False)


# --- bitrank.kjv -------------------------------------------------------------------

def test_parse_fake_program(tmp_path, no_kjv_env):
    # the last chapter's verse 10 after verse 1 is a parse error; the rest is checked
    # without it first
    good = FAKE_OUTPUT.split("\n1 John 1")[0]
    program = fake_bible(tmp_path, good)
    chapters = kjv.kjv_chapters(bible=program, expect=None)
    assert chapters == FAKE_CHAPTERS
    lib = str(tmp_path / "usr" / "lib")
    assert json.loads((tmp_path / "argv.json").read_text()) == ["-p", lib, kjv.WHOLE_TEXT]
    with pytest.raises(ValueError, match="3 chapters, not the KJV's 1189"):
        kjv.kjv_chapters(bible=program)


def test_parse_rejects_verse_out_of_order():
    with pytest.raises(ValueError, match="verse 10 of 1 John 1 follows verse 1"):
        kjv.parse_bible_output(FAKE_OUTPUT)
    with pytest.raises(ValueError, match="no chapter heading"):
        kjv.parse_bible_output("  1 In the beginning\n")


def test_missing_program_and_data(tmp_path, no_kjv_env, monkeypatch):
    with pytest.raises(FileNotFoundError, match="not an executable"):
        kjv.kjv_chapters(bible=str(tmp_path / "nothing"))
    monkeypatch.setenv("BITRANK_KJV_BIBLE", str(tmp_path / "nothing"))
    with pytest.raises(FileNotFoundError, match=r"\$BITRANK_KJV_BIBLE"):
        kjv.kjv_chapters()
    monkeypatch.delenv("BITRANK_KJV_BIBLE")
    program = fake_bible(tmp_path, FAKE_OUTPUT)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="apt-get install bible-kjv bible-kjv-text"):
        kjv.kjv_chapters(bible=program, datadir=str(tmp_path / "empty"))


def test_text_copy_round_trip(tmp_path, no_kjv_env, monkeypatch):
    path = str(tmp_path / "kjv.txt")
    assert kjv.write_kjv_text(path, FAKE_CHAPTERS) == 3
    line = open(path).read().splitlines()[2]
    assert line == "Song of Solomon\t1\tThe song of songs, which is Solomon's."
    assert kjv.read_kjv_text(path) == FAKE_CHAPTERS
    monkeypatch.setenv("BITRANK_KJV_TEXT", path)
    assert kjv.kjv_chapters(expect=3) == FAKE_CHAPTERS
    with pytest.raises(ValueError, match="3 chapters"):
        kjv.kjv_chapters()
    assert kjv.corpus_sha256(kjv.read_kjv_text(path)) == kjv.corpus_sha256(FAKE_CHAPTERS)

    (tmp_path / "bad.txt").write_text("Genesis\t1\tIn the beginning\nGenesis 2 no tabs\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: not"):
        kjv.read_kjv_text(str(tmp_path / "bad.txt"))
    monkeypatch.setenv("BITRANK_KJV_TEXT", str(tmp_path / "missing.txt"))
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        kjv.kjv_chapters()


def _real_bible():
    try:
        program = kjv.find_bible()
        kjv.find_datadir(program)
        return program
    except FileNotFoundError:
        return None


@pytest.mark.skipif(_real_bible() is None,
                    reason="Debian's bible-kjv / bible-kjv-text not installed")
def test_real_program(no_kjv_env):
    chapters = kjv.kjv_chapters()
    assert len(chapters) == 1189
    assert chapters[0][:2] == ("Genesis", 1)
    assert chapters[0][2].startswith("In the beginning God created the heaven and the earth. ")
    assert chapters[-1][:2] == ("Revelation", 22)
    assert chapters[-1][2].endswith("The grace of our Lord Jesus Christ be with you all. Amen.")
    assert len({book for book, _, _ in chapters}) == 66
    train, test = kjv.kjv_split(chapters)
    assert (len(train), len(test)) == (1129, 60)
    assert not set(train) & set(test)


SHIPPED = os.path.join(REPO, "data", "tiny-lm")


@pytest.mark.skipif(_real_bible() is None and not os.environ.get("BITRANK_KJV_TEXT"),
                    reason="no KJV: Debian's bible-kjv / bible-kjv-text, or $BITRANK_KJV_TEXT")
def test_shipped_model_is_what_its_log_says():
    """data/tiny-lm: its corpus is this corpus, and its held-out perplexity here (CPU,
    fp32) is the one train_log.json recorded on the GPU that trained it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    log = json.load(open(os.path.join(SHIPPED, "train_log.json")))
    chapters = kjv.kjv_chapters()
    assert kjv.corpus_sha256(chapters) == log["corpus"]["sha256"]
    tok = AutoTokenizer.from_pretrained(SHIPPED)
    model = AutoModelForCausalLM.from_pretrained(SHIPPED, dtype=torch.float32)
    assert sum(p.numel() for p in model.parameters()) == log["model"]["parameters"]
    _, test_texts = kjv.kjv_split(chapters)
    ids = torch.tensor(token_stream(test_texts, tok))
    assert ids.numel() == log["corpus"]["test_tokens"]
    r = perplexity(model, None, ids, seq_len=log["args"]["seq_len"])
    assert r["tokens"] == log["heldout_tokens"]
    assert r["ppl"] == pytest.approx(log["heldout_ppl_stored_fp16"], rel=2e-3)


def test_split():
    chapters = [(f"Book{i // 30}", i % 30 + 1, f"text {i}") for i in range(1189)]
    train, test = kjv.kjv_split(chapters)
    assert test == [f"text {i}" for i in range(0, 1189, 20)]
    assert train == [f"text {i}" for i in range(1189) if i % 20]
    assert (len(train), len(test)) == (1129, 60)
    assert not set(train) & set(test)
    assert kjv.kjv_split(chapters) == (train, test)


# --- bitrank.eval's perplexity ------------------------------------------------------------

def tiny_llama(seed=0, vocab=97):
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                         intermediate_size=64, max_position_embeddings=64,
                         tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    # larger weights than the init's: predictions far from uniform, so a wrongly
    # counted token shows
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(5)
    return model


class Wrapped(torch.nn.Module):
    """A linear replaced by another module (computing the same): perplexity() must not
    care what the model's layers are."""

    def __init__(self, linear):
        super().__init__()
        self.weight = torch.nn.Parameter(linear.weight.detach().clone())

    def forward(self, x):
        return x @ self.weight.t()


def test_perplexity_of_replaced_layers_and_mode():
    # the counting itself is tested against float64 in test_eval.py
    model = tiny_llama()
    gen = torch.Generator().manual_seed(1)
    stream = torch.randint(0, 97, (100,), generator=gen)
    base = perplexity(model, None, stream, seq_len=32)
    model.train()
    again = perplexity(model, None, stream, seq_len=32)
    assert model.training  # the mode is restored
    assert again["nll"] == pytest.approx(base["nll"], rel=1e-6)  # and dropout was off
    layer = model.model.layers[0]
    layer.self_attn.q_proj = Wrapped(layer.self_attn.q_proj)
    layer.mlp.down_proj = Wrapped(layer.mlp.down_proj)
    assert perplexity(model, None, stream, seq_len=32)["nll"] == pytest.approx(base["nll"],
                                                                                rel=1e-6)


def test_perplexity_of_texts():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    words = ["<unk>", "</s>"] + [f"w{i}" for i in range(95)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", unk_token="<unk>")
    rng = random.Random(0)
    texts = [" ".join(f"w{rng.randrange(95)}" for _ in range(rng.randrange(5, 40)))
             for _ in range(6)]
    stream = token_stream(texts, tokenizer)
    # each text's words, then eos
    expect = []
    for t in texts:
        expect += [words.index(w) for w in t.split()] + [1]
    assert stream == expect
    model = tiny_llama()
    assert perplexity(model, None, torch.tensor(stream), seq_len=16)["tokens"] == \
        len(expect) - (len(expect) + 15) // 16


# --- bench/tiny_lm/train.py --------------------------------------------------------

def _train_module():
    spec = importlib.util.spec_from_file_location("tiny_lm_train", TRAIN_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lr_schedule():
    f = _train_module().lr_factor
    assert f(0, 0.0, 10, 0.1) == pytest.approx(0.1)
    assert f(9, 0.01, 10, 0.1) == pytest.approx(0.1 + 0.45 * (1 + math.cos(0.01 * math.pi)))
    assert f(500, 0.5, 10, 0.1) == pytest.approx(0.55)
    assert f(999, 1.0, 10, 0.1) == pytest.approx(0.1)
    assert f(999, 1.7, 10, 0.1) == pytest.approx(0.1)  # past a time limit: the floor


def fake_corpus(path, chapters=41):
    """A made-up corpus in bitrank.kjv's text format: sentences of a small vocabulary."""
    rng = random.Random(0)
    words = ("and the lord said unto moses behold i will send thee into land of milk honey "
             "they went out city gate people heard his voice").split()
    rows = []
    for i in range(chapters):
        sentences = []
        for _ in range(rng.randrange(3, 8)):
            sentence = " ".join(rng.choice(words) for _ in range(rng.randrange(4, 12)))
            sentences.append(sentence.capitalize() + ".")
        rows.append((f"Book{i // 10}", i % 10 + 1, " ".join(sentences)))
    kjv.write_kjv_text(str(path), rows)
    return rows


def test_train_smoke(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    rows = fake_corpus(tmp_path / "corpus.txt")
    out = tmp_path / "tiny-lm"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("BITRANK_KJV_TEXT", None)
    done = subprocess.run(
        [sys.executable, TRAIN_PY, "--corpus-text", str(tmp_path / "corpus.txt"),
         "--out", str(out), "--device", "cpu", "--steps", "6", "--batch-size", "4",
         "--seq-len", "32", "--vocab-size", "320", "--warmup", "2", "--log-every", "2",
         "--eval-every", "3"],
        capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "steps/s" in done.stdout and "held-out ppl" in done.stdout

    names = set(os.listdir(out))
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "train_log.json"} <= names
    log = json.loads((out / "train_log.json").read_text())
    assert log["steps"] == 6 and log["seed"] == 0 and log["stopped_by"] == "steps"
    assert [e["step"] for e in log["losses"]] == [2, 4, 6]
    assert [e["step"] for e in log["validation"]] == [3, 6]
    best = min(log["validation"], key=lambda e: e["nll"])
    assert log["kept_step"] == best["step"]
    assert log["corpus"]["validation_chapters"] == 2
    assert log["corpus"]["chapters"] == 41 and log["corpus"]["test_chapters"] == 3
    assert log["corpus"]["sha256"] == kjv.corpus_sha256(rows)
    # the tied embedding once, 6 blocks of attention, MLP and two norms, the final norm
    block = 4 * 256 * 256 + 3 * 256 * 768 + 2 * 256
    assert log["model"]["parameters"] == 320 * 256 + 6 * block + 256
    for key in ("heldout_ppl", "heldout_ppl_stored_fp16", "wall_seconds", "steps_per_second",
                "device"):
        assert key in log
    assert log["versions"]["torch"] == torch.__version__

    tokenizer = AutoTokenizer.from_pretrained(out)
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (0, 1, 2)
    assert tokenizer("Behold the lord")["input_ids"][0] == 0
    assert tokenizer.decode(tokenizer("Behold the lord")["input_ids"], skip_special_tokens=True) \
        == "Behold the lord"
    model = AutoModelForCausalLM.from_pretrained(out)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.tie_word_embeddings and model.config.vocab_size == 320
    assert (model.config.hidden_size, model.config.num_hidden_layers,
            model.config.num_attention_heads, model.config.intermediate_size) == (256, 6, 4, 768)
    from safetensors import safe_open
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}
        assert "lm_head.weight" not in f.keys()  # tied: stored once

    # the stored model on the held-out chapters: the figure the log reports
    _, test_texts = kjv.kjv_split(rows)
    r = perplexity(model.float(), None, torch.tensor(token_stream(test_texts, tokenizer)),
                   seq_len=32)
    assert r["ppl"] == pytest.approx(log["heldout_ppl_stored_fp16"], rel=1e-4)
    assert r["tokens"] == log["heldout_tokens"]
