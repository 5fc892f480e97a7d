"""The King James Bible as a training and evaluation corpus, one text per chapter.

The text comes from Debian's packages `bible-kjv` (the `bible` program) and
`bible-kjv-text` (its data, /usr/lib/bible.data); the KJV text itself is public
domain. Install them with

    apt-get install bible-kjv bible-kjv-text

Machines without them (a GPU machine with no network) read a plain-text copy
instead, made once where the packages are:

    python -m bitrank.kjv kjv.txt          # or write_kjv_text("kjv.txt")
    BITRANK_KJV_TEXT=kjv.txt ...           # kjv_chapters() then reads that file

The plain-text format holds one chapter per line, `Book<TAB>chapter<TAB>text`, in
canonical order (Genesis 1 first, Revelation 22 last), UTF-8 (the text is ASCII).

A chapter's text is its verses in order, joined by single spaces: the verse numbers,
the chapter headings, the program's prompts and banner and its line wrapping are
removed, the words and punctuation are kept as printed.

Only the Python standard library is used here.
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys

KJV_CHAPTERS = 1189
"""Chapters of the 66 books of the Protestant canon, the `bible` program's whole text."""

TEST_EVERY = 20
"""kjv_split: every TEST_EVERY-th chapter (global index i with i % TEST_EVERY == 0) is
held out."""

WHOLE_TEXT = "gen1:1-rev22:21"
"""The `bible` program's reference for its whole text."""

INSTALL_HINT = "apt-get install bible-kjv bible-kjv-text"

# A chapter heading of the pretty-printed output: "Genesis 1", "1 Samuel 3",
# "Song of Solomon 8". It always follows a blank line, which tells it from a
# wrapped verse line that happens to end in a number.
_HEADING = re.compile(r"^((?:[123] )?[A-Z][A-Za-z]*(?: [A-Za-z]+)*) (\d+)$")
# A verse's first line: indented verse number, a space, the text.
_VERSE = re.compile(r"^\s+(\d+) (.*)$")
# The interactive prompt, "bible(KJV) [Gen1:1]> ", and what was typed after it (a
# transcript of an interactive session has them).
_PROMPT = re.compile(r"^bible\([^)]*\) \[[^\]]*\]>")


def parse_bible_output(output):
    """The chapters in the pretty-printed output of the `bible` program.

    Returns a list of (book, chapter_number, text) in the order the chapters first
    appear. Lines before the first chapter heading (the program's banner) and prompt
    lines are skipped; a chapter printed again replaces its earlier copy (an
    interactive session prints Genesis 1:1 at its start, before the text asked for).
    Raises ValueError on text that is not such output: a verse before any heading,
    verse numbers that do not run 1, 2, 3, ..., an empty chapter.
    """
    chapters = {}  # (book, number) -> list of verse texts; dicts keep first-seen order
    verses = None
    key = None
    after_break = True  # the previous line was blank, a prompt, or the start
    for lineno, raw in enumerate(output.splitlines(), 1):
        line = raw.rstrip()
        if not line or _PROMPT.match(line):
            after_break = True
            continue
        heading = _HEADING.match(line) if after_break else None
        after_break = False
        if heading:
            key = (heading.group(1), int(heading.group(2)))
            verses = chapters[key] = []
            continue
        if verses is None:
            continue  # the banner before the first heading
        verse = _VERSE.match(line)
        if verse:
            number = int(verse.group(1))
            if number != len(verses) + 1:
                raise ValueError(f"bible output line {lineno}: verse {number} of {key[0]} "
                                 f"{key[1]} follows verse {len(verses)}")
            verses.append(verse.group(2).strip())
        elif verses:
            verses[-1] += " " + line.strip()  # a wrapped verse goes on
        else:
            raise ValueError(f"bible output line {lineno}: text before the first verse of "
                             f"{key[0]} {key[1]}: {line!r}")
    if not chapters:
        raise ValueError("no chapter heading (like 'Genesis 1') in the bible output")
    result = []
    for (book, number), chapter_verses in chapters.items():
        if not chapter_verses:
            raise ValueError(f"bible output: {book} {number} has no verses")
        result.append((book, number, " ".join(" ".join(chapter_verses).split())))
    return result


def find_bible(bible=None):
    """The path of the `bible` program: `bible`, else $BITRANK_KJV_BIBLE, else `bible`
    on PATH, else /usr/bin/bible. Raises FileNotFoundError when there is none."""
    given = bible or os.environ.get("BITRANK_KJV_BIBLE")
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            what = "bible" if bible else "$BITRANK_KJV_BIBLE"
            raise FileNotFoundError(f"{what} = {given!r} is not an executable file")
        return given
    found = shutil.which("bible")
    if found:
        return found
    if os.access("/usr/bin/bible", os.X_OK):
        return "/usr/bin/bible"
    raise FileNotFoundError(
        "the KJV's `bible` program is not installed (not on PATH, no /usr/bin/bible): "
        f"{INSTALL_HINT}, or point $BITRANK_KJV_BIBLE at it, or $BITRANK_KJV_TEXT at a "
        "text copy made by bitrank.kjv.write_kjv_text")


def find_datadir(bible, datadir=None):
    """The directory holding bible.data for the program `bible`: `datadir`, else
    $BITRANK_KJV_DATA, else <prefix>/lib beside the program's <prefix>/bin (an unpacked
    package), else /usr/lib. Raises FileNotFoundError when it lacks bible.data."""
    given = datadir or os.environ.get("BITRANK_KJV_DATA")
    if given:
        candidates = [given]
    else:
        prefix = os.path.dirname(os.path.dirname(os.path.abspath(bible)))
        candidates = [os.path.join(prefix, "lib"), "/usr/lib"]
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, "bible.data")):
            return os.path.abspath(candidate)
    raise FileNotFoundError(
        f"no bible.data in {' or '.join(candidates)} (the KJV text of the `bible` "
        f"program, Debian's bible-kjv-text): {INSTALL_HINT}, or pass its directory")


def bible_output(bible=None, datadir=None):
    """The whole text as the `bible` program prints it (pretty-printed)."""
    program = find_bible(bible)
    data = find_datadir(program, datadir)
    if any(c.isspace() for c in data):
        # the program's -p takes a space-separated list of directories
        raise ValueError(f"the bible data directory {data!r} has whitespace in its path, "
                         "which the program's -p cannot take: copy bible.data* elsewhere")
    # the reference goes on the command line: no prompt, no banner, no waiting on stdin
    done = subprocess.run([program, "-p", data, WHOLE_TEXT], stdin=subprocess.DEVNULL,
                          capture_output=True)
    if done.returncode != 0 or not done.stdout.strip():
        err = done.stderr.decode("utf-8", "replace").strip()
        raise ValueError(f"{program} -p {data} {WHOLE_TEXT} failed (exit {done.returncode})"
                         + (f": {err}" if err else ", printing nothing"))
    return done.stdout.decode("utf-8")


def format_kjv_text(chapters):
    """The plain-text form of `chapters`: one `Book<TAB>chapter<TAB>text` line each."""
    lines = []
    for book, number, text in chapters:
        if "\t" in book or "\n" in book or "\t" in text or "\n" in text:
            raise ValueError(f"{book} {number}: a tab or newline cannot be stored in a line")
        lines.append(f"{book}\t{int(number)}\t{text}\n")
    return "".join(lines)


def corpus_sha256(chapters):
    """sha256 (hex) of format_kjv_text(chapters) in UTF-8: the same for a chapter list
    read from the program and from a text copy of it."""
    return hashlib.sha256(format_kjv_text(chapters).encode("utf-8")).hexdigest()


def read_kjv_text(path):
    """The chapters of a plain-text copy (the format of write_kjv_text), in file order.
    Blank lines are skipped. Raises FileNotFoundError or ValueError (with the line)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"KJV text file {path!r} does not exist (make it with "
                                "`python -m bitrank.kjv FILE` where the bible program is)")
    chapters = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 3 or not fields[1].isdigit() or not fields[2].strip():
                raise ValueError(f"{path}:{lineno}: not 'Book<TAB>chapter<TAB>text'")
            chapters.append((fields[0], int(fields[1]), fields[2]))
    if not chapters:
        raise ValueError(f"KJV text file {path!r} holds no chapter")
    return chapters


def write_kjv_text(path, chapters=None, bible=None, datadir=None):
    """Writes `chapters` (default: kjv_chapters(bible, datadir)) to `path` in the
    plain-text format, replacing the file whole. Returns the number of chapters."""
    if chapters is None:
        chapters = kjv_chapters(bible, datadir)
    text = format_kjv_text(chapters)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)  # no half-written copy under the real name
    return len(chapters)


def kjv_chapters(bible=None, datadir=None, text=None, expect=KJV_CHAPTERS):
    """All chapters of the KJV as a list of (book, chapter_number, text).

    Where from, first that applies:
      - the `bible` program (find_bible(bible), its data in find_datadir(.., datadir))
        when `bible` or `datadir` is given;
      - the plain-text copy `text`, else $BITRANK_KJV_TEXT when set;
      - the `bible` program found by find_bible() (with find_datadir()'s data).
    `expect` is the number of chapters there must be (the whole Bible's 1189; None
    checks nothing): a short or garbled source raises ValueError rather than giving a
    smaller corpus. A missing program, data file or text file raises
    FileNotFoundError saying how to install or make it.
    """
    text = None if (bible or datadir) else (text or os.environ.get("BITRANK_KJV_TEXT"))
    if text:
        chapters, source = read_kjv_text(text), text
    else:
        chapters, source = parse_bible_output(bible_output(bible, datadir)), "bible output"
    if expect is not None and len(chapters) != expect:
        raise ValueError(f"{source}: {len(chapters)} chapters, not the KJV's {expect}")
    return chapters


def kjv_split(chapters):
    """(train_texts, test_texts) of `chapters` (kjv_chapters' list, or any list of
    (book, number, text)).

    Deterministic and independent of everything but the order: the chapter of global
    index i (0-based over the list, canonical order for kjv_chapters) is test when
    i % TEST_EVERY == 0 (i = 0, 20, 40, ...: Genesis 1, Genesis 21, ...), else train.
    Over the 1189 chapters that is 60 test and 1129 train chapters, spread over the
    whole Bible. Each list keeps the chapters' order.
    """
    train, test = [], []
    for i, (_book, _number, text) in enumerate(chapters):
        (test if i % TEST_EVERY == 0 else train).append(text)
    return train, test


def main(argv=None):
    """python -m bitrank.kjv OUT.txt: writes the plain-text copy for machines without
    the bible packages."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m bitrank.kjv OUT.txt   (writes the KJV, one chapter a line)",
              file=sys.stderr)
        return 2
    chapters = kjv_chapters()
    write_kjv_text(argv[0], chapters)
    print(f"{argv[0]}: {len(chapters)} chapters, {os.path.getsize(argv[0])} bytes, "
          f"sha256 {corpus_sha256(chapters)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
