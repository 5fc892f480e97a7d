#!/usr/bin/env bash
# `bitrank compress` refuses what would destroy its input or its result, before
# any work: an output (-o) that is the input, one of its shards or its index, or a
# calibration file; a report (--report) that is one of those or the output —
# compared by identity (another spelling, a link), not by string. Each refusal is
# exit status 1, one line on stderr, the input unchanged and nothing created.
# Error messages print a tensor name's control characters escaped (\xNN), never
# raw. A run killed with SIGKILL leaves a temporary file that the next run on the
# same output removes (a live process's is kept).
# usage: tests/cli_foot_guns.sh path/to/bitrank
set -u
BITRANK=${1:?usage: cli_foot_guns.sh path/to/bitrank}
BITRANK=$(cd "$(dirname "$BITRANK")" && pwd)/$(basename "$BITRANK")
TESTS=$(cd "$(dirname "$0")" && pwd) # st_write.py
DIR=$(mktemp -d /tmp/bitrank-guns-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
LOG=$DIR/log # stdout and stderr of the runs, outside the directory they work in
mkdir "$DIR/work" "$LOG"
cd "$DIR/work" || exit 1
failures=0
passed=0

BR_TESTS="$TESTS" python3 - <<'EOF'
import json, os, random, struct, sys
sys.path.insert(0, os.environ["BR_TESTS"])
from st_write import st
rnd = random.Random(11)
def gauss(n):
    return [rnd.gauss(0, 0.05) for _ in range(n)]
st("in.safetensors", [("l.0.q.weight", [64, 96], gauss(64 * 96)),
                      ("l.0.norm.weight", [96], gauss(96))])
st("acts.safetensors", [("l.0.q.weight", [128, 96], gauss(128 * 96))])
os.mkdir("model")
st("model/model-00001-of-00002.safetensors", [("l.0.q.weight", [64, 96], gauss(64 * 96))])
st("model/model-00002-of-00002.safetensors", [("l.0.k.weight", [64, 96], gauss(64 * 96))])
json.dump({"metadata": {}, "weight_map": {
    "l.0.q.weight": "model-00001-of-00002.safetensors",
    "l.0.k.weight": "model-00002-of-00002.safetensors"}},
    open("model/model.safetensors.index.json", "w"))
# a tensor whose name holds an escape sequence (ESC [ 2 J: clear the screen), of a
# dtype that cannot be compressed: the error message names it
name = "l.0.\x1b[2J.weight"
h = json.dumps({name: {"dtype": "I32", "shape": [64, 96], "data_offsets": [0, 64 * 96 * 4]}})
h = h.encode()
h += b" " * (-len(h) % 8)
open("escape.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + bytes(64 * 96 * 4))
# two layers that take a few seconds, to be killed in
st("slow.safetensors", [("blk.0.a.weight", [256, 256], gauss(256 * 256)),
                        ("blk.0.b.weight", [256, 384], gauss(256 * 384))])
EOF
ln -s in.safetensors link.safetensors
ln in.safetensors hard.safetensors
mkdir sub
snapshot() { cat in.safetensors acts.safetensors model/* | md5sum; }
BEFORE=$(snapshot)

# refused NAME PATTERN ARGS...: bitrank ARGS exits 1 with one stderr line matching
# PATTERN (grep -E), the inputs unchanged, and nothing new in the directory.
refused() {
    local name=$1 pattern=$2
    shift 2
    local listing
    listing=$(ls -A . model sub | tr '\n' ' ')
    "$BITRANK" "$@" >"$LOG/stdout" 2>"$LOG/stderr"
    local rc=$? why=""
    [ "$rc" -eq 1 ] || why="exit status $rc, expected 1"
    [ -z "$why" ] && [ "$(wc -l <"$LOG/stderr")" -ne 1 ] && why="$(wc -l <"$LOG/stderr") lines on stderr"
    [ -z "$why" ] && ! grep -qE -- "$pattern" "$LOG/stderr" && why="message does not match /$pattern/"
    [ -z "$why" ] && [ "$(snapshot)" != "$BEFORE" ] && why="an input changed"
    [ -z "$why" ] && [ "$(ls -A . model sub | tr '\n' ' ')" != "$listing" ] &&
        why="files changed: $(ls -A . model sub | tr '\n' ' ')"
    if [ -n "$why" ]; then
        echo "FAIL $name: $why"
        sed 's/^/    stderr: /' "$LOG/stderr"
        failures=$((failures + 1))
    else
        echo "ok   $name: $(cat "$LOG/stderr")"
        passed=$((passed + 1))
    fi
}

C=(--bpw 4 --steps 2 --tokens 64 --device cpu --quiet)
refused "output is the input" "in\.safetensors.*input file itself" \
    compress in.safetensors -o in.safetensors "${C[@]}"
refused "output is the input, spelt ./" "input file itself" \
    compress in.safetensors -o ./in.safetensors "${C[@]}"
refused "output is the input, spelt sub/.." "input file itself" \
    compress in.safetensors -o sub/../in.safetensors "${C[@]}"
refused "output is a link to the input" "link\.safetensors.*input file itself" \
    compress in.safetensors -o link.safetensors "${C[@]}"
refused "output is a hard link of the input" "hard\.safetensors.*input file itself" \
    compress in.safetensors -o hard.safetensors "${C[@]}"
refused "output is a shard" "model-00002-of-00002\.safetensors.*one of the files of the input" \
    compress model -o model/model-00002-of-00002.safetensors "${C[@]}"
refused "output is the index" "model\.safetensors\.index\.json.*one of the files" \
    compress model -o model/model.safetensors.index.json "${C[@]}"
refused "output is the calibration file" "acts\.safetensors.*output is the input file itself" \
    compress in.safetensors -o acts.safetensors --calib acts.safetensors "${C[@]}"
refused "report is the input" "in\.safetensors.*report is the input file itself" \
    compress in.safetensors -o out.safetensors --report in.safetensors "${C[@]}"
refused "report is a shard" "report is .*model-00001-of-00002\.safetensors" \
    compress model -o out.safetensors --report model/model-00001-of-00002.safetensors "${C[@]}"
refused "report is the output" "report\.html.*report is the output file" \
    compress in.safetensors -o report.html --report sub/../report.html "${C[@]}"
export BITRANK_DATA=$DIR/work/in.safetensors
refused "demo: output is its input" "input file itself" \
    demo --device cpu --steps 1 --quiet -o ./in.safetensors
unset BITRANK_DATA

# a tensor name's control characters are escaped in the error message
"$BITRANK" compress escape.safetensors -o out.safetensors "${C[@]}" >/dev/null 2>"$LOG/stderr"
if grep -q $'\x1b' "$LOG/stderr"; then
    echo "FAIL escaped name: an ESC byte reached stderr"
    failures=$((failures + 1))
elif ! grep -qF 'l.0.\x1b[2J.weight' "$LOG/stderr"; then
    echo "FAIL escaped name: the name is not in the message: $(cat "$LOG/stderr")"
    failures=$((failures + 1))
else
    echo "ok   escaped name: $(cat "$LOG/stderr")"
    passed=$((passed + 1))
fi

# temporary files of dead writers of the same output are removed by the next run
# on it; a live process's, another output's and other names stay
dead=$(sh -c 'echo $$')
touch ".ok.safetensors.tmp-$dead-AbC123" ".ok.safetensors.tmp-$$-XyZ789" \
    ".other.safetensors.tmp-$dead-AbC123"
if "$BITRANK" compress in.safetensors -o ok.safetensors "${C[@]}" 2>"$LOG/stderr" &&
    [ ! -e ".ok.safetensors.tmp-$dead-AbC123" ] && [ -e ".ok.safetensors.tmp-$$-XyZ789" ] &&
    [ -e ".other.safetensors.tmp-$dead-AbC123" ]; then
    echo "ok   stale temporary files: a dead writer's removed, the others kept"
    passed=$((passed + 1))
else
    echo "FAIL stale temporary files: $(ls -A | tr '\n' ' ') $(cat "$LOG/stderr")"
    failures=$((failures + 1))
fi
rm -f .ok.safetensors.tmp-* .other.safetensors.tmp-* ok.safetensors

# a run killed with SIGKILL, then resumed: the resumed run's success leaves no
# temporary file of the killed one (nor a checkpoint directory)
S=(compress slow.safetensors -o slow-out.safetensors --rank 32 --steps 200 --tokens 128 --device cpu --quiet)
"$BITRANK" "${S[@]}" 2>/dev/null &
pid=$!
for _ in $(seq 3000); do
    ls -A | grep -q '^\.slow-out\.safetensors\.tmp' && break
    sleep 0.01
done
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
left=$(ls -A | grep '^\.slow-out\.safetensors\.tmp' | tr '\n' ' ')
if [ -z "$left" ]; then
    echo "FAIL killed then resumed: the run ended before it could be killed (no temporary file seen)"
    failures=$((failures + 1))
elif ! "$BITRANK" "${S[@]}" --resume 2>"$LOG/stderr"; then
    echo "FAIL killed then resumed: the resume failed: $(cat "$LOG/stderr")"
    failures=$((failures + 1))
elif [ -n "$(find . -name '.*.tmp-*')" ] || [ -e slow-out.safetensors.partial ]; then
    echo "FAIL killed then resumed: left behind: $(find . -name '.*.tmp-*' -o -name '*.partial' | tr '\n' ' ')"
    failures=$((failures + 1))
else
    echo "ok   killed then resumed: the killed run's $left is gone"
    passed=$((passed + 1))
fi

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
