#!/usr/bin/env bash
# `bitrank demo` leaves nothing behind but its output: a run that fails after a
# layer was checkpointed, or is interrupted, removes its temporary directory (the
# checkpoint included) and never suggests --resume, which the demo does not take;
# a run that succeeds keeps only its output. Runs on a small stand-in for the
# embedded default (BITRANK_DATA) with a Gram file beside it.
# usage: tests/cli_demo.sh path/to/bitrank
set -u
BITRANK=${1:?usage: cli_demo.sh path/to/bitrank}
BITRANK=$(cd "$(dirname "$BITRANK")" && pwd)/$(basename "$BITRANK")
TESTS=$(cd "$(dirname "$0")" && pwd) # st_write.py
DIR=$(mktemp -d /tmp/brdemo-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR" || exit 1
mkdir tmp
export TMPDIR=$DIR/tmp # the demo's temporary directory goes here
failures=0
passed=0

# model.safetensors: layers a (256×256, fast) then b (768×768, slow enough to be
# interrupted in); good.gram / bad.gram: Grams for a and b, the bad one with a
# negative diagonal element in b's, which the job refuses before any layer trains.
BR_TESTS="$TESTS" python3 - <<'EOF'
import os, sys
sys.path.insert(0, os.environ["BR_TESTS"])
from st_write import st
import random
rnd = random.Random(3)
def gauss(n):
    return [rnd.gauss(0, 0.05) for _ in range(n)]
st("model.safetensors", [("blk.0.a.weight", [256, 256], gauss(256 * 256)),
                         ("blk.0.b.weight", [768, 768], gauss(768 * 768))])
n = 768
diag = [1.0 + rnd.random() for _ in range(n)]
good = [0.0] * (n * n)
for i in range(n):
    good[i * n + i] = diag[i]
bad = list(good)
bad[5 * n + 5] = -0.5
ga = [0.0] * (256 * 256)
for i in range(256):
    ga[i * 256 + i] = 1.0 + rnd.random()
st("good.gram", [("blk.0.a.weight", [256, 256], ga), ("blk.0.b.weight", [n, n], good)])
st("bad.gram", [("blk.0.a.weight", [256, 256], ga), ("blk.0.b.weight", [n, n], bad)])
EOF
export BITRANK_DATA=$DIR/model.safetensors
use_gram() { cp "$1" model.gram.safetensors; }

# check NAME RC_WANT STDERR_PATTERN [OUTPUT]: the last run's exit status, its
# stderr, no --resume in it, nothing left in $TMPDIR but (on success, default
# output) the output, no OUTPUT.partial beside an -o output.
check() {
    local name=$1 want=$2 pattern=$3 out=${4:-}
    local why=""
    [ "$rc" -eq "$want" ] || why="exit status $rc, expected $want"
    [ -z "$why" ] && [ -n "$pattern" ] && ! grep -qE -- "$pattern" stderr.txt &&
        why="stderr does not match /$pattern/"
    [ -z "$why" ] && grep -q -- "--resume" stderr.txt && why="stderr suggests --resume"
    local left
    left=$(cd tmp && find . -mindepth 1 | sort | tr '\n' ' ')
    if [ -z "$why" ] && [ "$want" -ne 0 ] && [ -n "$left" ]; then
        why="left in \$TMPDIR: $left"
    fi
    if [ -z "$why" ] && [ "$want" -eq 0 ] && [ -z "$out" ]; then
        # only the demo directory and the output in it
        [[ "$left" =~ ^\./bitrank-demo-[A-Za-z0-9]{6}\ \./bitrank-demo-[A-Za-z0-9]{6}/minilm-l6-block3\.blr\.safetensors\ $ ]] ||
            why="\$TMPDIR holds '$left', expected the output alone"
    fi
    if [ -z "$why" ] && [ -n "$out" ]; then
        [ -e "$out.partial" ] && why="$out.partial was left"
        [ -z "$why" ] && [ -n "$left" ] && why="left in \$TMPDIR: $left"
        [ -z "$why" ] && ls -A | grep -q '\.tmp-' && why="a temporary file was left: $(ls -A)"
        [ -z "$why" ] && [ "$want" -ne 0 ] && [ -e "$out" ] && why="an output $out was left"
        [ -z "$why" ] && [ "$want" -eq 0 ] && [ ! -s "$out" ] && why="no output $out"
    fi
    if [ -n "$why" ]; then
        echo "FAIL $name: $why"
        sed 's/^/    stderr: /' stderr.txt
        failures=$((failures + 1))
    else
        echo "ok   $name"
        passed=$((passed + 1))
    fi
    rm -rf tmp/* "$out" "$out.partial"
}

# a bad Gram for layer b: refused before any layer, default output, then -o
use_gram bad.gram
"$BITRANK" demo --device cpu --steps 3 --quiet >stdout.txt 2>stderr.txt
rc=$?
check "failed run, default output" 1 "bad.gram|model.gram.safetensors.*negative"
"$BITRANK" demo --device cpu --steps 3 --quiet -o out.safetensors >stdout.txt 2>stderr.txt
rc=$?
check "failed run, -o" 1 "negative" out.safetensors

# interrupted while b trains (a is checkpointed by then): SIGINT cancels cleanly
use_gram good.gram
for variant in default -o; do
    args=(demo --device cpu --steps 1000000)
    out=""
    if [ "$variant" = -o ]; then
        out=out.safetensors
        args+=(-o "$out")
    fi
    "$BITRANK" "${args[@]}" >stdout.txt 2>stderr.txt &
    pid=$!
    # wait (up to 120 s) for layer a's checkpoint, then interrupt
    for _ in $(seq 1200); do
        [ -n "$(find tmp . -name layer-00000.safetensors 2>/dev/null)" ] && break
        sleep 0.1
    done
    kill -INT "$pid" 2>/dev/null
    wait "$pid"
    rc=$?
    check "interrupted run, $variant output" 1 "interrupted; no output written" $out
done

# success: the output and nothing else
"$BITRANK" demo --device cpu --steps 3 --quiet >stdout.txt 2>stderr.txt
rc=$?
check "successful run, default output" 0 ""
"$BITRANK" demo --device cpu --steps 3 --quiet -o out.safetensors >stdout.txt 2>stderr.txt
rc=$?
check "successful run, -o" 0 "" out.safetensors

echo "cli_demo: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
