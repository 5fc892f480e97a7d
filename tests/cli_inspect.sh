#!/usr/bin/env bash
# `bitrank inspect`: what it prints for valid files, and a one-line error naming the
# file with exit status 1 for bad ones. $1 is the bitrank binary; run from the
# repository root (the fuzz seed corpus doubles as fixtures).
set -u
bitrank="$1"
corpus="tests/fuzz/corpus"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# expect_ok FILE PATTERN...: exit 0 and every pattern (grep -E) in the output
expect_ok() {
    local file="$1"
    shift
    local out rc
    out="$("$bitrank" inspect "$file" 2>&1)"
    rc=$?
    [ "$rc" -eq 0 ] || fail "inspect $file: exit $rc: $out"
    for pat in "$@"; do
        grep -Eq -- "$pat" <<<"$out" || fail "inspect $file: no /$pat/ in:
$out"
    done
}

# expect_bad FILE PATTERN: exit 1, one line on stderr naming the file, matching PATTERN
expect_bad() {
    local file="$1" pat="$2" out err rc
    out="$("$bitrank" inspect "$file" 2>"$tmp/err")"
    rc=$?
    err="$(cat "$tmp/err")"
    [ "$rc" -eq 1 ] || fail "inspect $file: exit $rc, expected 1"
    [ -z "$out" ] || fail "inspect $file: printed to stdout: $out"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "inspect $file: error is not one line: $err"
    grep -Fq -- "$file" <<<"$err" || fail "inspect $file: error does not name the file: $err"
    grep -Eq -- "$pat" <<<"$err" || fail "inspect $file: error lacks /$pat/: $err"
}

# a plain file, every field shown
expect_ok "$corpus/valid_plain.safetensors" 'a\.weight +BF16 +\[2, 3\] +12 B' \
    'c +F4 +\[4\] +2 B' 'format +pt' '^total: 3 tensors'
# the BLR layout and a cortiq payload: rank, paths, bpw (2·(8·13 + 16·21)/40 = 22)
expect_ok "$corpus/valid_blr.safetensors" 'format +bitrank-blr' \
    'layers\.0\.mlp\.up_proj +5 × 8 +2 +8 +22\.0000' '\(cortiq payload\)' \
    '2 compressed linears: 80 weights at 22\.0000 bpw'
# the per-layer tensors are summarized, not listed
"$bitrank" inspect "$corpus/valid_blr.safetensors" | grep -q 'up_proj\.blr\.u' &&
    fail "inspect lists the BLR layer's tensors one by one"

# bad files
expect_bad "$tmp/missing.safetensors" 'cannot open'
expect_bad "$corpus/bad_overlap.safetensors" "overlap tensor 'a'"
expect_bad "$corpus/bad_past_end.safetensors" 'past the end of the 16-byte data section'
expect_bad "$corpus/bad_header_len.safetensors" 'header length .* larger than the file'
expect_bad "$corpus/bad_shape_overflow.safetensors" 'more than 2\^64 elements'
expect_bad "$corpus/bad_utf8.safetensors" 'UTF-8'
expect_bad "$corpus/bad_deep.safetensors" 'nested deeper'
expect_bad "$corpus/bad_blr_meta.safetensors" "tensor 'x\.blr\.v' is missing"
expect_bad "$corpus/bad_index_traversal.json" 'not a plain file name'
printf 'not a safetensors file' >"$tmp/junk.bin"
expect_bad "$tmp/junk.bin" 'not a safetensors file'
head -c 200 "$corpus/valid_blr.safetensors" >"$tmp/truncated.safetensors"
expect_bad "$tmp/truncated.safetensors" 'truncated'
mkdir "$tmp/empty"
expect_bad "$tmp/empty" 'neither model.safetensors.index.json nor model.safetensors'

# usage errors exit 2
"$bitrank" inspect >/dev/null 2>&1
[ $? -eq 2 ] || fail "inspect without a file: expected exit 2"
"$bitrank" inspect a b >/dev/null 2>&1
[ $? -eq 2 ] || fail "inspect with two files: expected exit 2"
"$bitrank" inspect --bogus x >/dev/null 2>&1
[ $? -eq 2 ] || fail "inspect --bogus: expected exit 2"

if [ "$failures" -ne 0 ]; then
    echo "cli_inspect: $failures failure(s)" >&2
    exit 1
fi
echo "cli_inspect: ok"
