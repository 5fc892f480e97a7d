"""Model-level quality of a compressed model, measured with the model's own output on
held-out text (per-layer errors are a diagnostic; this is the figure that matters).

Two kinds of model, two measures:

  encoder  sentence embeddings (mean pooling over the attention mask, L2-normalized,
           as sentence-transformers does for all-MiniLM-L6-v2) compared with the
           original model's on held-out sentences: embedding_fidelity
  causal   perplexity of the running text: perplexity

Metric definitions (embedding_metrics; the same as bench/minilm_e2e.py has used):
  cos       mean cosine between a sentence's compressed and original embedding
  spearman  Spearman correlation of the two models' pairwise-similarity matrices
            (upper triangle, ties at their mean rank)
  top1      paired retrieval: the first sentence of each pair retrieves among all the
            pairs' second sentences, one model on both sides; the fraction that finds
            its own pair
  pairwise  mean cosine between different sentences (a collapse indicator: about 0.1
            for all-MiniLM-L6-v2, near 1 for a model that maps everything to one point)

Loading a compressed model goes through `bitrank.hf.load`, imported only when a path
is given, so this module imports (and its functions run on plain torch modules)
without it.
"""
import math
import os

import numpy as np
import torch

from . import text as _text

DEFAULT_ENCODER_SEQ_LEN = 128
DEFAULT_CAUSAL_SEQ_LEN = 512
DEFAULT_SENTENCES = 400
DEFAULT_PAIRS = 200


class EvalError(Exception):
    """A problem the user can fix (a missing model, a missing --reference, a bad
    option); its message is one line."""


# ------------------------------------------------------------------ embeddings

def _body(model):
    """The model's base transformer (BertModel inside BertForMaskedLM, or the model
    itself), whose output has last_hidden_state."""
    base = getattr(model, "base_model", None)
    return base if isinstance(base, torch.nn.Module) else model


def _model_device(model):
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


def embed(model, tokenizer, sentences, device=None, seq_len=DEFAULT_ENCODER_SEQ_LEN,
          batch=64, on_batch=None):
    """Mean-pooled, L2-normalized sentence embeddings, float64 on the CPU [N][hidden].

    Each sentence is tokenized with the tokenizer's special tokens, truncated to
    seq_len tokens; the last hidden state is averaged over the attention mask and
    normalized. Batches hold sentences of similar length (less padding); the output
    keeps the input order. device: where the inputs go (default: the model's).
    on_batch(attention_mask), when given, is called before each batch's forward (a
    hook for recorders of layer inputs that keep only the real tokens)."""
    sentences = list(sentences)
    device = device if device is not None else _model_device(model)
    body = _body(model)
    if not sentences:
        return torch.zeros(0, getattr(model.config, "hidden_size", 0), dtype=torch.float64)
    ids = tokenizer(sentences, truncation=True, max_length=seq_len)["input_ids"]
    order = np.argsort([len(x) for x in ids], kind="stable")
    out = None
    with torch.no_grad():
        for i in range(0, len(sentences), batch):
            idx = order[i:i + batch]
            enc = tokenizer([sentences[j] for j in idx], padding=True, truncation=True,
                            max_length=seq_len, return_tensors="pt").to(device)
            if on_batch is not None:
                on_batch(enc["attention_mask"].bool())
            h = body(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            e = torch.nn.functional.normalize(e, dim=-1).double().cpu()
            if out is None:
                out = torch.zeros(len(sentences), e.shape[1], dtype=torch.float64)
            out[torch.as_tensor(idx)] = e
    return out


def _f64(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def rankdata(x):
    """Ranks (0-based) of the 1-D array x; tied values get their mean rank."""
    x = _f64(x)
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    starts = np.r_[0, np.flatnonzero(xs[1:] != xs[:-1]) + 1]
    ends = np.r_[starts[1:], len(xs)]
    ranks = np.empty(len(x))
    ranks[order] = np.repeat((starts + ends - 1) / 2.0, ends - starts)
    return ranks


def spearman(a, b):
    """Spearman's rank correlation of a and b: Pearson's of their ranks (ties at mean
    rank); nan when either is constant."""
    ra, rb = rankdata(a), rankdata(b)
    ra -= ra.mean()
    rb -= rb.mean()
    den = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / den) if den > 0 else float("nan")


def embedding_metrics(e, e_ref, pa, pb):
    """Metrics of embeddings e [N][d] (rows L2-normalized) and of pair embeddings pa,
    pb [P][d] (first and second sentences, the same model): {"top1", "pairwise_cos"},
    plus {"cos", "spearman"} against the reference embeddings e_ref [N][d] of the same
    sentences unless e_ref is None. Definitions in the module docstring."""
    e, pa, pb = _f64(e), _f64(pa), _f64(pb)
    iu = np.triu_indices(len(e), k=1)
    sim = (e @ e.T)[iu]
    retrieved = np.argmax(pa @ pb.T, axis=1)
    out = {
        "top1": float(np.mean(retrieved == np.arange(len(pa)))),
        "pairwise_cos": float(sim.mean()),
    }
    if e_ref is not None:
        e_ref = _f64(e_ref)
        out["cos"] = float(np.mean(np.sum(e * e_ref, axis=1)))
        out["spearman"] = spearman(sim, (e_ref @ e_ref.T)[iu])
    return out


def embed_set(model, tokenizer, sentences, pairs, device=None,
              seq_len=DEFAULT_ENCODER_SEQ_LEN, batch=64):
    """{"sentences", "first", "second"}: the embeddings of the sentences and of the
    pairs' first and second sentences. Computed once for a reference model, it can be
    passed to several embedding_fidelity calls."""
    kw = dict(device=device, seq_len=seq_len, batch=batch)
    return {"sentences": embed(model, tokenizer, sentences, **kw),
            "first": embed(model, tokenizer, [a for a, _ in pairs], **kw),
            "second": embed(model, tokenizer, [b for _, b in pairs], **kw)}


def embedding_fidelity(model, reference_model, tokenizer, sentences, pairs, device=None,
                       seq_len=DEFAULT_ENCODER_SEQ_LEN, batch=64, reference_embeddings=None):
    """How well model's sentence embeddings reproduce reference_model's:
    {"cos", "spearman", "top1", "top1_reference", "pairwise", "pairwise_reference"}.

    sentences: the held-out sentences (cos, spearman, pairwise); pairs: (first, second)
    sentence pairs (top1). reference_embeddings: embed_set of the reference on the
    same sentences and pairs, to skip recomputing it (reference_model may then be
    None)."""
    if len(sentences) < 2 or not pairs:
        raise EvalError(f"embedding fidelity needs at least 2 sentences and 1 pair; "
                        f"got {len(sentences)} and {len(pairs)}")
    ref = reference_embeddings
    if ref is None:
        if reference_model is None:
            raise EvalError("embedding fidelity needs a reference model")
        ref = embed_set(reference_model, tokenizer, sentences, pairs, device, seq_len, batch)
    got = embed_set(model, tokenizer, sentences, pairs, device, seq_len, batch)
    m = embedding_metrics(got["sentences"], ref["sentences"], got["first"], got["second"])
    r = embedding_metrics(ref["sentences"], None, ref["first"], ref["second"])
    return {"cos": m["cos"], "spearman": m["spearman"],
            "top1": m["top1"], "top1_reference": r["top1"],
            "pairwise": m["pairwise_cos"], "pairwise_reference": r["pairwise_cos"]}


# ------------------------------------------------------------------ perplexity

def token_ids(tokenizer, text):
    """The 1-D LongTensor of text's token ids: text itself when it is already a 1-D
    integer tensor (no tokenizer needed), else the tokenizer's ids of the whole text
    with its special tokens (a BOS first, for the tokenizers that add one)."""
    if isinstance(text, torch.Tensor):
        if text.dim() != 1 or text.dtype.is_floating_point or text.dtype == torch.bool:
            raise EvalError(f"token ids must be a 1-D integer tensor, got {text.dtype} "
                            f"of shape {list(text.shape)}")
        return text.long().cpu()
    if tokenizer is None:
        raise EvalError("perplexity of a string needs a tokenizer")
    return torch.tensor(tokenizer(text, verbose=False)["input_ids"], dtype=torch.long)


def token_stream(texts, tokenizer):
    """The token ids (a list of ints) of `texts` joined into one running text: each
    text's default encoding (its special tokens included, e.g. a leading <s>), then
    the tokenizer's eos (when it has one) unless the encoding already ends with it.
    The tiny LM was trained on its chapters joined so (bench/tiny_lm/train.py)."""
    if isinstance(texts, str):
        texts = [texts]
    eos = getattr(tokenizer, "eos_token_id", None)
    stream = []
    # verbose=False: a text longer than the tokenizer's model_max_length is fine
    # here, it is cut into windows afterwards
    for ids in tokenizer(list(texts), verbose=False)["input_ids"]:
        stream.extend(ids)
        if eos is not None and (not ids or ids[-1] != eos):
            stream.append(eos)
    return stream


def windows(n_tokens, seq_len, stride=None):
    """[(begin, end, first_target)] of the sliding-window evaluation of n_tokens tokens.

    Window k covers tokens begin..end-1 (begin = k·stride, end = min(begin + seq_len,
    n_tokens)) and scores the tokens first_target..end-1, the ones no earlier window
    scored, each predicted from the tokens of its window before it. stride None or
    seq_len: non-overlapping windows, each scoring all its tokens but its first (which
    has no context in the window). A smaller stride gives every scored token at least
    seq_len − stride tokens of context. The first token of the text is never scored."""
    stride = seq_len if stride is None else stride
    if seq_len < 2:
        raise EvalError(f"the window length must be at least 2 tokens, got {seq_len}")
    if not 1 <= stride <= seq_len:
        raise EvalError(f"the stride must be 1..{seq_len} (the window length), got {stride}")
    out, prev_end = [], 0
    for begin in range(0, max(n_tokens - 1, 0), stride):
        end = min(begin + seq_len, n_tokens)
        first = max(prev_end, begin + 1)
        if end > first:
            out.append((begin, end, first))
        prev_end = end
        if end == n_tokens:
            break
    return out


def perplexity(model, tokenizer, text, seq_len=DEFAULT_CAUSAL_SEQ_LEN, stride=None,
               device=None, max_tokens=None, batch=4):
    """Perplexity of a causal language model on one running text:
    {"ppl", "nll", "tokens"}.

    text: a string (tokenized as one stream by tokenizer) or a 1-D LongTensor of token
    ids (tokenizer may then be None); max_tokens keeps only its first max_tokens
    tokens. The text is cut into windows of seq_len tokens advancing by stride
    (default seq_len: non-overlapping; see `windows`). nll is the natural-log negative
    log-likelihood averaged over the predicted tokens (log-softmax in float32 or
    wider), ppl = exp(nll), tokens the number of predicted tokens. Windows of equal
    length run batch at a time. device: where the inputs go (default: the model's)."""
    ids = token_ids(tokenizer, text)
    if max_tokens is not None:
        if max_tokens < 2:
            raise EvalError(f"max_tokens must be at least 2, got {max_tokens}")
        ids = ids[:max_tokens]
    spans = windows(len(ids), seq_len, stride)
    if not spans:
        raise EvalError(f"the text has {len(ids)} token(s): nothing to predict")
    device = device if device is not None else _model_device(model)
    total, count = 0.0, 0
    was_training = model.training
    model.eval()  # dropout off; the caller's mode is restored, whatever happens
    try:
        with torch.no_grad():
            i = 0
            while i < len(spans):
                length = spans[i][1] - spans[i][0]
                group = [spans[i]]
                while (len(group) < batch and i + len(group) < len(spans)
                       and spans[i + len(group)][1] - spans[i + len(group)][0] == length):
                    group.append(spans[i + len(group)])
                i += len(group)
                x = torch.stack([ids[b:e] for b, e, _ in group]).to(device)
                logits = model(input_ids=x, attention_mask=torch.ones_like(x)).logits
                for row, (b, e, first) in enumerate(group):
                    # logits[row, j] predicts token b + j + 1: keep the targets first..e-1
                    lg = logits[row, first - b - 1:e - b - 1]
                    lg = lg.float() if lg.dtype in (torch.float16, torch.bfloat16) else lg
                    logp = torch.log_softmax(lg, dim=-1)  # one row at a time: [targets][vocab]
                    target = x[row, first - b:].unsqueeze(-1)
                    total += float(-logp.gather(-1, target).double().sum())
                    count += e - first
                del logits
    finally:
        model.train(was_training)
    nll = total / count
    return {"ppl": math.exp(nll), "nll": nll, "tokens": count}


# ------------------------------------------------------------------ evaluate

def resolve_device(device):
    """A torch device string for "cpu", "cuda", "cuda:N" or "auto" (CUDA when usable)."""
    device = device or "auto"
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise EvalError(f"device {device}: CUDA is not available here (use --device cpu)")
    if device != "cpu" and not device.startswith("cuda"):
        raise EvalError(f"device {device!r}: not one of cpu, cuda, cuda:N, auto")
    return device


def _first_line(e):
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def _check_path(path, what):
    if not os.path.exists(path):
        raise EvalError(f"{path}: no such file or directory ({what})")


def model_kind(model_or_config):
    """"causal" when the config's architectures (or, without them, the model's class
    name) name a causal LM ("CausalLM" or "LMHead"), else "encoder"."""
    config = getattr(model_or_config, "config", model_or_config)
    names = list(getattr(config, "architectures", None) or [])
    if not names and isinstance(model_or_config, torch.nn.Module):
        names = [type(model_or_config).__name__]
    return "causal" if any("CausalLM" in n or "LMHead" in n for n in names) else "encoder"


def _model_dir(path):
    """The directory holding path's config.json and tokenizer: path itself, or the
    directory of a file (the CLI's output file beside the original's config)."""
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def kind_of_path(path):
    """model_kind of the config.json beside the model at path, or None without one."""
    try:
        from transformers import AutoConfig
        return model_kind(AutoConfig.from_pretrained(_model_dir(path)))
    except Exception:  # no config or an unreadable one: bitrank.load will say
        return None


def load_compressed(path, device=None):
    """The transformers model of a bitrank-compressed checkpoint, through bitrank.load
    (a directory written by bitrank.save_pretrained, or the CLI's output file beside
    the original model's config.json)."""
    _check_path(path, "the compressed model")
    try:
        from bitrank.hf import load
    except Exception as e:  # ImportError, or the library failing to load
        raise EvalError(f"cannot load {path}: bitrank.hf.load is not available "
                        f"({_first_line(e)})") from None
    import inspect
    try:  # straight onto the device where the loader takes one
        takes_device = "device" in inspect.signature(load).parameters
    except (TypeError, ValueError):
        takes_device = False
    try:
        return load(path, device=device) if takes_device and device else load(path)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise EvalError(f"{path}: cannot load the compressed model: {_first_line(e)}") from None


def load_reference(path, kind):
    """The original model at path: AutoModelForCausalLM for kind "causal", AutoModel
    for "encoder" (kind "auto": from its config)."""
    _check_path(path, "the reference model")
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
    try:
        if kind == "auto":
            kind = model_kind(AutoConfig.from_pretrained(path))
        cls = AutoModelForCausalLM if kind == "causal" else AutoModel
        return cls.from_pretrained(path)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise EvalError(f"{path}: cannot load the reference model: {_first_line(e)}") from None


def load_tokenizer(*paths):
    """The tokenizer of the first of paths (directories) that has one."""
    from transformers import AutoTokenizer
    tried = []
    for p in paths:
        if isinstance(p, str) and os.path.exists(p) and _model_dir(p) not in tried:
            tried.append(_model_dir(p))
    for p in tried:
        try:
            return AutoTokenizer.from_pretrained(p)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    raise EvalError("no tokenizer found in " + (", ".join(tried) if tried else
                                                 "any model directory given"))


def evaluate(model, reference=None, kind="auto", text=None, device="auto", seq_len=None,
             max_tokens=None, stride=None, sentences=DEFAULT_SENTENCES, pairs=DEFAULT_PAIRS,
             tokenizer=None, batch=None):
    """Evaluates a compressed model; the `bitrank eval` command. Returns a dict
    (JSON-serializable) with "kind" and, for kind "causal", "compressed" and
    "reference" (perplexity dicts; reference None without one), for kind "encoder",
    "fidelity" (embedding_fidelity).

    model: a compressed checkpoint's path (loaded with bitrank.load) or a model.
    reference: the original model, a directory or a model; required for an encoder.
    kind: "auto" (model_kind), "encoder" or "causal".
    text: a user text (a string) or None for the fortunes' held-out text; an encoder
    takes up to `sentences` sentences and `pairs` pairs from its paragraphs (or from
    the held-out fortune set), a causal LM reads it as one stream.
    seq_len: tokens per sentence (encoder, default 128) or per window (causal, default
    512, at most the model's max_position_embeddings); max_tokens, stride: perplexity's.
    tokenizer: default the one in the compressed model's directory, else the
    reference's."""
    if kind not in ("auto", "encoder", "causal"):
        raise EvalError(f"kind {kind!r}: not one of auto, encoder, causal")
    device = resolve_device(device)
    model_path = model if isinstance(model, str) else None
    ref_path = reference if isinstance(reference, str) else None
    if model_path is not None:
        _check_path(model_path, "the compressed model")
    if ref_path is not None:
        _check_path(ref_path, "the reference model")
    if kind == "auto" and model_path is not None:
        kind = kind_of_path(model_path) or "auto"  # known before the (slow) load
    if kind == "encoder" and reference is None:
        raise EvalError("an encoder is evaluated against its original: pass "
                        "--reference ORIGINAL_DIR")
    if model_path is not None:
        model = load_compressed(model_path, device)
    kind = model_kind(model) if kind == "auto" else kind
    if kind == "encoder" and reference is None:
        raise EvalError("an encoder is evaluated against its original: pass "
                        "--reference ORIGINAL_DIR")
    if ref_path is not None:
        reference = load_reference(ref_path, kind)
    if tokenizer is None and (model_path or ref_path):
        tokenizer = load_tokenizer(model_path, ref_path)
    if tokenizer is None:
        raise EvalError("no tokenizer: give a model directory or tokenizer=")
    model = model.to(device).eval()
    if reference is not None:
        reference = reference.to(device).eval()
    source = "fortunes held-out" if text is None else "user text"

    if kind == "encoder":
        seq_len = seq_len or DEFAULT_ENCODER_SEQ_LEN
        if text is None:
            files, sents, prs = _text.heldout_set(sentences, pairs, seed=0)
            source = f"fortunes held-out ({len(files)} files)"
        else:
            sents, prs = _text.select_sentences(_text.paragraphs(text), sentences, pairs)
        fid = embedding_fidelity(model, reference, tokenizer, sents, prs, device, seq_len,
                                 batch or 64)
        return {"kind": kind, "text": source, "sentences": len(sents), "pairs": len(prs),
                "seq_len": seq_len, "fidelity": fid}

    max_pos = getattr(model.config, "max_position_embeddings", None)
    if seq_len is None:
        seq_len = min(DEFAULT_CAUSAL_SEQ_LEN, max_pos or DEFAULT_CAUSAL_SEQ_LEN)
    elif max_pos and seq_len > max_pos:
        raise EvalError(f"window of {seq_len} tokens: the model holds at most {max_pos} "
                        "(max_position_embeddings)")
    if text is None:
        files, text = _text.heldout_text()
        source = f"fortunes held-out ({len(files)} files)"
    kw = dict(seq_len=seq_len, stride=stride, device=device, max_tokens=max_tokens,
              batch=batch or 4)
    out = {"kind": kind, "text": source, "seq_len": seq_len,
           "stride": stride or seq_len,
           "compressed": perplexity(model, tokenizer, text, **kw),
           "reference": perplexity(reference, tokenizer, text, **kw) if reference is not None
           else None}
    return out
