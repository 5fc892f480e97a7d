#!/usr/bin/env bash
# `bitrank compress --devices LIST`: one job over several devices writes the same
# bytes as one device (here two CPU contexts against `--device cpu`: the
# several-device path without a GPU); a bad list is a usage error (exit 2, a
# message naming the item, no output), as is --device with --devices.
# usage: tests/cli_devices.sh path/to/bitrank
set -u
BITRANK=${1:?usage: cli_devices.sh path/to/bitrank}
BITRANK=$(cd "$(dirname "$BITRANK")" && pwd)/$(basename "$BITRANK")
TESTS=$(cd "$(dirname "$0")" && pwd) # st_write.py
DIR=$(mktemp -d /tmp/bitrank-devices-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR" || exit 1
failures=0
passed=0

# five linears of awkward shapes and a norm copied unchanged
BR_TESTS="$TESTS" python3 - <<'PY'
import os, sys, random
sys.path.insert(0, os.environ["BR_TESTS"])
from st_write import st
rnd = random.Random(17)
shapes = [(96, 70), (64, 100), (120, 40), (48, 48), (33, 65)]
tensors = [("blk.%d.mlp.weight" % i, [m, n], [rnd.gauss(0, 0.05) for _ in range(m * n)])
           for i, (m, n) in enumerate(shapes)]
tensors.append(("norm.weight", [64], [1.0] * 64))
st("model.safetensors", tensors)
PY
[ -s model.safetensors ] || { echo "FAIL: could not write the test model"; exit 1; }

ok() {
    echo "ok   $1"
    passed=$((passed + 1))
}
fail() {
    echo "FAIL $1"
    failures=$((failures + 1))
}

C=(compress model.safetensors --rank 16 --steps 6 --tokens 64 --quiet)
"$BITRANK" "${C[@]}" -o one.safetensors --device cpu 2>err1.txt
rc1=$?
"$BITRANK" "${C[@]}" -o two.safetensors --devices cpu,cpu 2>err2.txt
rc2=$?
if [ "$rc1" -ne 0 ] || [ "$rc2" -ne 0 ]; then
    fail "exit status $rc1 (--device cpu), $rc2 (--devices cpu,cpu): $(cat err1.txt err2.txt)"
elif cmp -s one.safetensors two.safetensors; then
    ok "--devices cpu,cpu writes the same bytes as --device cpu"
else
    fail "--devices cpu,cpu wrote other bytes: $(cmp one.safetensors two.safetensors)"
fi
[ -e two.safetensors.partial ] && fail "the checkpoint directory of a finished run is left"

# the table and the progress name the devices
"$BITRANK" compress model.safetensors --rank 16 --steps 2 --tokens 64 -o three.safetensors \
    --devices cpu,cpu,cpu >out3.txt 2>err3.txt
rc=$?
if [ "$rc" -eq 0 ] && grep -q "on 3 devices: cpu; cpu; cpu" err3.txt &&
    grep -q "on cpu, cpu, cpu" out3.txt && [ "$(grep -c '^\[[0-9]/5\]' err3.txt)" -eq 5 ]; then
    ok "three devices: every layer reported once, the devices named"
else
    fail "three devices: $(cat out3.txt err3.txt)"
fi

# expect PATTERN ARGS...: exit status 2, stderr matching PATTERN, no output.
expect() {
    local pattern=$1
    shift
    "$BITRANK" "${C[@]}" -o out.safetensors "$@" >stdout.txt 2>stderr.txt
    local rc=$? why=""
    [ "$rc" -eq 2 ] || why="exit status $rc, expected 2"
    [ -z "$why" ] && ! grep -qE -- "$pattern" stderr.txt && why="message does not match /$pattern/"
    [ -z "$why" ] && [ -e out.safetensors ] && why="an output file was left"
    [ -z "$why" ] && [ -e out.safetensors.partial ] && why="a checkpoint directory was made"
    if [ -n "$why" ]; then
        fail "$*: $why"
        sed 's/^/    stderr: /' stderr.txt
    else
        ok "$*: $(head -1 stderr.txt)"
    fi
    rm -rf stdout.txt stderr.txt out.safetensors out.safetensors.partial
}
expect "the list is empty" --devices ""
expect "item 2 is empty" --devices cpu,,cpu
expect "item 2 is empty" --devices cpu,
expect "item 1 'auto' picks one device" --devices auto,cpu
expect "item 2 'gpu1' is not a device: expected cpu, cuda, cuda:N or vulkan:N" --devices cpu,gpu1
expect "items 1 'cuda:0' and 2 'cuda' are the same device" --devices cuda:0,cuda
expect "items 1 'cuda:1' and 3 'cuda:1' are the same device" --devices cuda:1,cuda:0,cuda:1
expect "items 1 'cpu' and 2 'cuda:0' are different kinds of device" --devices cpu,cuda:0
expect "item 2 'vulkan' picks one device by itself" --devices vulkan:0,vulkan
expect "--device and --devices together" --device cpu --devices cpu,cpu

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
