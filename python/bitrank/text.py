"""Text for calibration and evaluation: entries of Debian's `fortunes` package, or a
user's own text file.

Calibration and held-out text come from disjoint sets of fortune files, so a quality
figure measured on the held-out set is never measured on text the compression saw.
An entry is the text between lines holding only `%`; attribution lines ("-- Author")
are dropped, whitespace is collapsed, and entries that are mostly not letters (ASCII
art, tables) are skipped. Every selection is deterministic: files in sorted order,
entries shuffled with a fixed seed (the same seeds bench/minilm_e2e.py has always
used, so its numbers stay comparable).

The fortune directory is `FORTUNE_DIR` unless a function is given `fortune_dir`;
setting `bitrank.text.FORTUNE_DIR` changes the default for every function here.
"""
import os
import random
import re

FORTUNE_DIR = "/usr/share/games/fortunes"

CALIB_FILES = ["literature", "science", "computers", "education", "art", "food", "kids",
               "law", "medicine", "miscellaneous", "news", "pets", "sports", "work"]
HELDOUT_FILES = ["wisdom", "people", "platitudes", "humorists", "politics", "songs-poems",
                 "love", "magic", "definitions", "riddles", "translate-me", "goedel", "linux"]

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]*[A-Z0-9])")


class TextError(RuntimeError):
    """Text that cannot be had: a missing or unreadable file, an empty text. The message
    is one line meant for the user."""


class TextMissing(TextError):
    """The fortunes package is not installed."""


def available(names, fortune_dir=None):
    """The files of `names` that exist in fortune_dir (FORTUNE_DIR), sorted."""
    fortune_dir = fortune_dir or FORTUNE_DIR
    if not os.path.isdir(fortune_dir):
        raise TextMissing(f"{fortune_dir} is missing: install the text with "
                          "`apt-get install fortunes`")
    return sorted(n for n in set(names) if os.path.isfile(os.path.join(fortune_dir, n)))


def _mostly_letters(text, frac=0.6):
    chars = [c for c in text if not c.isspace()]
    return bool(chars) and sum(c.isalpha() for c in chars) >= frac * len(chars)


def read_entries(names, fortune_dir=None):
    """The cleaned entries of the named files (in the order given), one string each."""
    fortune_dir = fortune_dir or FORTUNE_DIR
    entries = []
    for name in names:
        with open(os.path.join(fortune_dir, name), encoding="utf-8", errors="replace") as f:
            raw = f.read()
        for block in re.split(r"^%\s*$", raw, flags=re.M):
            lines = [ln for ln in block.splitlines() if not ln.strip().startswith("--")]
            text = " ".join(" ".join(lines).split())
            if text and _mostly_letters(text):
                entries.append(text)
    return entries


def split_sentences(text):
    """The sentences of one entry (a split after . ! ? before a capital or digit)."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def shuffled(entries, seed):
    """A copy of entries in the order of random.Random(seed).shuffle."""
    out = list(entries)
    random.Random(seed).shuffle(out)
    return out


def calibration_entries(seed=0, fortune_dir=None):
    """(file names, calibration entries in a seeded random order)."""
    names = available(CALIB_FILES, fortune_dir)
    return names, shuffled(read_entries(names, fortune_dir), seed)


def heldout_files(fortune_dir=None):
    """The held-out fortune files present, none of them a calibration file."""
    return [n for n in available(HELDOUT_FILES, fortune_dir) if n not in CALIB_FILES]


def heldout_entries(seed=0, fortune_dir=None):
    """(file names, held-out entries in a seeded random order)."""
    names = heldout_files(fortune_dir)
    return names, shuffled(read_entries(names, fortune_dir), seed)


def other_files(fortune_dir=None):
    """The fortune files of fortune_dir (FORTUNE_DIR) that are neither held out nor in
    CALIB_FILES, sorted: Debian's package ships about sixteen more (`fortunes`,
    `startrek`, `tao`, ...), text to calibrate on when CALIB_FILES' is not enough. A
    fortune file is a plain file whose name has no dot (not its .dat index)."""
    fortune_dir = fortune_dir or FORTUNE_DIR
    available([], fortune_dir)  # the directory's check
    known = set(CALIB_FILES) | set(HELDOUT_FILES)
    return sorted(n for n in os.listdir(fortune_dir)
                  if "." not in n and n not in known
                  and os.path.isfile(os.path.join(fortune_dir, n)))


def calibration_sentences(n=None, seed=0, extra=(), all_files=True, min_words=6,
                          max_words=60, fortune_dir=None):
    """(file names, sentences): the distinct sentences of min_words..max_words words of
    the calibration files (with all_files also other_files'), then of the texts of
    `extra` (say the KJV's chapters, bitrank.kjv), shuffled together with seed; the
    first n (all when n is None). A sentence that occurs in a held-out entry is never
    one of them, whichever file it comes from (the package repeats some entries
    across files)."""
    names = available(CALIB_FILES, fortune_dir)
    if all_files:
        names += other_files(fortune_dir)
    held = set()
    for entry in read_entries(heldout_files(fortune_dir), fortune_dir):
        held.update(split_sentences(entry))
    sents, seen = [], set(held)
    for text in list(read_entries(names, fortune_dir)) + [" ".join(t.split()) for t in extra]:
        for s in split_sentences(text):
            if min_words <= len(s.split()) <= max_words and s not in seen:
                seen.add(s)
                sents.append(s)
    sents = shuffled(sents, seed)
    return names, sents if n is None else sents[:n]


def select_sentences(entries, n_sents, n_pairs, min_words=6, max_words=60):
    """(sentences, pairs) taken from entries in their order. Sentences have
    min_words..max_words words and are distinct; a pair is two consecutive such
    sentences of one entry, and no sentence is in two pairs. Stops at the first entry
    after both lists are full."""
    sents, pairs, seen, seen_pair = [], [], set(), set()
    for entry in entries:
        if len(sents) >= n_sents and len(pairs) >= n_pairs:
            break
        ok = [s for s in split_sentences(entry) if min_words <= len(s.split()) <= max_words]
        for s in ok:
            if len(sents) < n_sents and s not in seen:
                seen.add(s)
                sents.append(s)
        parts = split_sentences(entry)
        for a, b in zip(parts, parts[1:]):
            if (len(pairs) < n_pairs and a != b and not {a, b} & seen_pair
                    and all(min_words <= len(s.split()) <= max_words for s in (a, b))):
                seen_pair.update((a, b))
                pairs.append((a, b))
    return sents, pairs


def heldout_set(n_sents, n_pairs, seed=0, min_words=6, max_words=60, fortune_dir=None):
    """(file names, sentences, pairs) from the held-out files (select_sentences over
    the held-out entries shuffled with seed)."""
    names, entries = heldout_entries(seed, fortune_dir)
    sents, pairs = select_sentences(entries, n_sents, n_pairs, min_words, max_words)
    return names, sents, pairs


def heldout_text(seed=0, fortune_dir=None):
    """(file names, the held-out entries joined by blank lines): the default running
    text of a causal language model's perplexity."""
    names, entries = heldout_entries(seed, fortune_dir)
    return names, "\n\n".join(entries)


def load_text(path=None):
    """The text of the UTF-8 file at path (undecodable bytes replaced), or with path
    None the fortunes' held-out text (heldout_text). Raises TextError with a one-line
    message when the file is missing, unreadable or holds only whitespace."""
    if path is None:
        return heldout_text()[1]
    if os.path.isdir(path):
        raise TextError(f"{path}: is a directory, not a text file")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        raise TextError(f"{path}: no such file") from None
    except OSError as e:
        raise TextError(f"{path}: cannot read: {e.strerror or e}") from None
    if not text.strip():
        raise TextError(f"{path}: holds no text")
    return text


def paragraphs(text):
    """The paragraphs of a user's text (separated by blank lines), whitespace collapsed:
    the entries select_sentences takes sentences and pairs from."""
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]
