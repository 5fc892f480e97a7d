"""Calibration data for compress_model: token ids from ids, strings or a dataset."""
import torch


def _special_tokens(tokenizer):
    """(prefix, suffix): the special token ids the tokenizer puts around a text
    ([CLS] … [SEP] for BERT, <s> … for Llama), found by tokenizing one word with and
    without them (tokenizers do not all offer build_inputs_with_special_tokens)."""
    with_sp = list(tokenizer("a")["input_ids"])
    without = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    for i in range(len(with_sp) - len(without) + 1):
        if with_sp[i:i + len(without)] == without:
            return with_sp[:i], with_sp[i + len(without):]
    return [], []


def _texts_of(calibration):
    """The strings of a list of strings or of a dataset with a "text" column (or the
    first column of strings)."""
    if isinstance(calibration, str):
        return [calibration]
    if hasattr(calibration, "column_names"):  # a datasets.Dataset
        cols = calibration.column_names
        col = "text" if "text" in cols else None
        if col is None:
            for c in cols:
                if len(calibration) and isinstance(calibration[0][c], str):
                    col = c
                    break
        if col is None:
            raise ValueError(f"calibration dataset has no text column (columns: {cols})")
        return [t for t in calibration[col] if t]
    texts = list(calibration)
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("calibration: expected token ids, strings or a dataset")
    return texts


def _token_ids(texts, tokenizer):
    """Each text's token ids without special tokens, in order, tokenized 256 at a time
    (a generator: the stream cut stops reading once it has enough)."""
    for i in range(0, len(texts), 256):
        yield from tokenizer(texts[i:i + 256], add_special_tokens=False)["input_ids"]


def _one_text_per_row(texts, tokenizer, prefix, suffix, seq_len):
    """(ids, mask) [len(texts)][seq_len]: each text's tokens cut to fit between the
    special tokens, then padded with the tokenizer's pad token (mask 0 there). Texts
    with no token are dropped."""
    body = seq_len - len(prefix) - len(suffix)
    pad = getattr(tokenizer, "pad_token_id", None)
    ids = torch.full((len(texts), seq_len), 0 if pad is None else pad, dtype=torch.long)
    mask = torch.zeros((len(texts), seq_len), dtype=torch.long)
    row = 0
    for seq in _token_ids(texts, tokenizer):
        if not seq:
            continue
        toks = prefix + list(seq[:body]) + suffix
        ids[row, :len(toks)] = torch.tensor(toks, dtype=torch.long)
        mask[row, :len(toks)] = 1
        row += 1
    if row == 0:
        raise ValueError("calibration: every text is empty after tokenization")
    return ids[:row], mask[:row]


def calibration_ids(calibration, tokenizer=None, n_samples=None, seq_len=128, pack=True):
    """Token ids [N][L] (LongTensor) and attention mask [N][L] for the calibration.

    calibration is one of:
      - a LongTensor [N][L] or a list of equal-length id lists: used as they are
        (n_samples, if given, keeps the first n_samples rows);
      - a dict with "input_ids" (and optionally "attention_mask");
      - strings (a list, or a dataset with a text column) with a tokenizer: with pack
        the text is tokenized as one stream and cut into n_samples sequences of seq_len
        tokens; without pack each text is one sequence (the first n_samples texts),
        cut at seq_len and padded to it, its padding masked out: the form to calibrate
        a sentence encoder on sentences, the lengths it is used at. Each sequence is
        wrapped in the tokenizer's special tokens (as the model saw in training).
    Refuses calibration that yields no full sequence (a mistake, not a reason to run
    on nothing)."""
    mask = None
    if isinstance(calibration, dict):
        ids = torch.as_tensor(calibration["input_ids"])
        if "attention_mask" in calibration:
            mask = torch.as_tensor(calibration["attention_mask"])
    elif torch.is_tensor(calibration) or (isinstance(calibration, (list, tuple)) and calibration
                                           and isinstance(calibration[0], (list, tuple))
                                           and calibration[0] and isinstance(calibration[0][0], int)):
        ids = torch.as_tensor(calibration)
    else:
        if tokenizer is None:
            raise ValueError("calibration given as text needs a tokenizer (tokenizer=...)")
        texts = _texts_of(calibration)
        if not texts:
            raise ValueError("calibration: no text")
        n = n_samples or 128
        prefix, suffix = _special_tokens(tokenizer)
        body = seq_len - len(prefix) - len(suffix)
        if body < 1:
            raise ValueError(f"seq_len {seq_len} leaves no room for text after special tokens")
        if not pack:
            return _one_text_per_row(texts[:n_samples] if n_samples else texts,
                                     tokenizer, prefix, suffix, seq_len)
        need = n * body
        stream = []
        for seq in _token_ids(texts, tokenizer):
            stream.extend(seq)
            if len(stream) >= need:
                break
        seqs = [prefix + stream[k:k + body] + suffix
                for k in range(0, min(need, len(stream)) - body + 1, body)]
        seqs = [s for s in seqs if len(s) == seq_len]
        if not seqs:
            raise ValueError(f"calibration text has {len(stream)} tokens: not one sequence "
                             f"of {seq_len}")
        ids = torch.tensor(seqs, dtype=torch.long)
    if ids.dim() != 2 or ids.shape[0] < 1 or ids.shape[1] < 1:
        raise ValueError(f"calibration ids must be [samples][length], got {tuple(ids.shape)}")
    if n_samples is not None and torch.is_tensor(ids):
        ids = ids[:n_samples]
        mask = mask[:n_samples] if mask is not None else None
    if mask is None:
        mask = torch.ones_like(ids)
    if mask.shape != ids.shape:
        raise ValueError("calibration attention_mask and input_ids differ in shape")
    return ids.long(), mask.long()
