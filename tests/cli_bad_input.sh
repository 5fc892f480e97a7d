#!/usr/bin/env bash
# `bitrank compress` on bad input: each case must fail with exit status 1, one line
# on stderr naming the file and the problem, and no output file (nor a stray
# temporary one). A valid file compresses, so the cases fail for their own reason.
# usage: tests/cli_bad_input.sh path/to/bitrank
set -u
BITRANK=${1:?usage: cli_bad_input.sh path/to/bitrank}
BITRANK=$(cd "$(dirname "$BITRANK")" && pwd)/$(basename "$BITRANK")
DIR=$(mktemp -d /tmp/bitrank-bad-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR" || exit 1
failures=0
passed=0

# mkst FILE HEADER_JSON DATA_KIND COUNT: a safetensors file with the header given
# and COUNT data bytes: random (finite f32 or f16 values), zero, or "nan" (f32 NaN
# first, then finite values).
mkst() {
    python3 - "$@" <<'EOF'
import json, random, struct, sys
path, header, kind, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
h = header.encode()
h += b" " * (-len(h) % 8)
rnd = random.Random(7)
if kind == "zero":
    data = bytes(count)
elif kind == "f16":
    data = b"".join(struct.pack("<e", rnd.gauss(0, 0.05)) for _ in range(count // 2))
else:
    data = b"".join(struct.pack("<f", rnd.gauss(0, 0.05)) for _ in range(count // 4))
    if kind == "nan":
        data = struct.pack("<f", float("nan")) + data[4:]
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + data[:count])
EOF
}

# expect_fail NAME OUTPUT PATTERN -- ARGS...: bitrank compress ARGS must exit 1
# with one stderr line matching PATTERN (grep -E) and leave no OUTPUT.
expect_fail() {
    local name=$1 out=$2 pattern=$3
    shift 4
    "$BITRANK" compress "$@" --quiet >stdout.txt 2>stderr.txt
    local rc=$?
    local lines
    lines=$(wc -l <stderr.txt)
    local why=""
    [ "$rc" -eq 1 ] || why="exit status $rc, expected 1"
    [ -z "$why" ] && [ "$lines" -ne 1 ] && why="$lines lines on stderr, expected 1"
    [ -z "$why" ] && ! grep -qE -- "$pattern" stderr.txt && why="message does not match /$pattern/"
    [ -z "$why" ] && [ -e "$out" ] && why="an output file $out was left"
    [ -z "$why" ] && ls -A | grep -qE '\.tmp|\.partial' && why="stray files: $(ls -A | tr '\n' ' ')"
    if [ -n "$why" ]; then
        echo "FAIL $name: $why"
        sed 's/^/    stderr: /' stderr.txt
        failures=$((failures + 1))
    else
        echo "ok   $name: $(cat stderr.txt)"
        passed=$((passed + 1))
    fi
    rm -f stdout.txt stderr.txt
}

W='"dtype":"F32","shape":[64,96],"data_offsets":[0,24576]'
mkst good.safetensors "{\"l.0.q.weight\":{$W},\"l.0.norm.weight\":{\"dtype\":\"F32\",\"shape\":[96],\"data_offsets\":[24576,24960]}}" f32 24960

# the valid file compresses (a control: the cases below fail for their reason)
if "$BITRANK" compress good.safetensors -o ok.safetensors --bpw 4 --steps 5 --tokens 64 --device cpu --quiet 2>err.txt && [ -s ok.safetensors ]; then
    echo "ok   control: a valid file compresses"
    passed=$((passed + 1))
else
    echo "FAIL control: the valid file did not compress: $(cat err.txt)"
    failures=$((failures + 1))
fi
rm -f ok.safetensors err.txt

expect_fail "missing input" out.safetensors "missing\.safetensors.*(No such file|cannot)" -- \
    missing.safetensors -o out.safetensors --device cpu
mkdir empty-dir
expect_fail "unreadable input (a directory without a model)" out.safetensors "empty-dir" -- \
    empty-dir -o out.safetensors --device cpu
echo "this is not a safetensors file, just some text" >text.safetensors
expect_fail "not safetensors" out.safetensors "text\.safetensors" -- \
    text.safetensors -o out.safetensors --device cpu
head -c 9000 good.safetensors >truncated.safetensors
expect_fail "truncated file" out.safetensors "truncated\.safetensors" -- \
    truncated.safetensors -o out.safetensors --device cpu
mkst lying.safetensors "{\"l.0.q.weight\":{\"dtype\":\"F32\",\"shape\":[64,96],\"data_offsets\":[0,99999999]}}" f32 24576
expect_fail "offsets past the end" out.safetensors "lying\.safetensors.*(offset|end|size)" -- \
    lying.safetensors -o out.safetensors --device cpu
mkst sizes.safetensors "{\"l.0.q.weight\":{\"dtype\":\"F32\",\"shape\":[64,97],\"data_offsets\":[0,24576]}}" f32 24576
expect_fail "size not shape times dtype" out.safetensors "sizes\.safetensors" -- \
    sizes.safetensors -o out.safetensors --device cpu
mkst ints.safetensors "{\"l.0.q.weight\":{\"dtype\":\"I32\",\"shape\":[64,96],\"data_offsets\":[0,24576]}}" zero 24576
expect_fail "unsupported dtype" out.safetensors "ints\.safetensors.*I32" -- \
    ints.safetensors -o out.safetensors --device cpu
mkst norms.safetensors "{\"l.0.norm.weight\":{\"dtype\":\"F32\",\"shape\":[96],\"data_offsets\":[0,384]}}" f32 384
expect_fail "nothing to compress" out.safetensors "norms\.safetensors.*nothing to compress" -- \
    norms.safetensors -o out.safetensors --device cpu
expect_fail "budget too small for the shape" out.safetensors "good\.safetensors.*l\.0\.q\.weight.*too small" -- \
    good.safetensors -o out.safetensors --bpw 0.1 --device cpu
mkst nan.safetensors "{\"l.0.q.weight\":{$W}}" nan 24576
expect_fail "NaN in a weight" out.safetensors "nan\.safetensors.*l\.0\.q\.weight.*NaN" -- \
    nan.safetensors -o out.safetensors --bpw 4 --device cpu
expect_fail "unwritable output (no such directory)" no-such-dir/out.safetensors "no-such-dir" -- \
    good.safetensors -o no-such-dir/out.safetensors --bpw 4 --steps 1 --device cpu
expect_fail "unwritable output (/proc)" /proc/bitrank-out.safetensors "/proc" -- \
    good.safetensors -o /proc/bitrank-out.safetensors --bpw 4 --steps 1 --device cpu
# a full disk: a file size limit makes writes fail with EFBIG (SIGXFSZ ignored)
(
    trap '' XFSZ
    ulimit -f 1 # 1 KiB: smaller than the output and the checkpoint files
    expect_fail "full output location (EFBIG)" full.safetensors "full\.safetensors|layer-" -- \
        good.safetensors -o full.safetensors --bpw 4 --steps 1 --tokens 64 --device cpu
    exit $failures
)
sub=$?
failures=$((failures + sub))
[ "$sub" -eq 0 ] && passed=$((passed + 1))
[ -e full.safetensors ] && { echo "FAIL full output location: output left"; failures=$((failures + 1)); }

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
