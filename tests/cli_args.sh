#!/usr/bin/env bash
# `bitrank compress` / `bitrank demo` argument parsing: malformed values are usage
# errors (exit 2, a message naming the option), never silently reinterpreted (octal,
# hex, a sign after a space, a float overflowing to infinity); a report location
# that cannot be written fails before any work (exit 1, no output).
# usage: tests/cli_args.sh path/to/bitrank
set -u
BITRANK=${1:?usage: cli_args.sh path/to/bitrank}
BITRANK=$(cd "$(dirname "$BITRANK")" && pwd)/$(basename "$BITRANK")
DIR=$(mktemp -d /tmp/bitrank-args-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR" || exit 1
failures=0
passed=0

# a valid 64×96 f32 linear
python3 - <<'EOF'
import json, random, struct
rnd = random.Random(5)
h = json.dumps({"l.0.q.weight": {"dtype": "F32", "shape": [64, 96],
                                 "data_offsets": [0, 64 * 96 * 4]}}).encode()
h += b" " * (-len(h) % 8)
data = b"".join(struct.pack("<f", rnd.gauss(0, 0.05)) for _ in range(64 * 96))
open("good.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + data)
EOF

# expect RC PATTERN CMD ARGS...: exit status RC, stderr matching PATTERN, no out.safetensors.
expect() {
    local want=$1 pattern=$2
    shift 2
    "$BITRANK" "$@" >stdout.txt 2>stderr.txt
    local rc=$? why=""
    [ "$rc" -eq "$want" ] || why="exit status $rc, expected $want"
    [ -z "$why" ] && ! grep -qE -- "$pattern" stderr.txt && why="message does not match /$pattern/"
    [ -z "$why" ] && [ -e out.safetensors ] && why="an output file was left"
    if [ -n "$why" ]; then
        echo "FAIL $*: $why"
        sed 's/^/    stderr: /' stderr.txt
        failures=$((failures + 1))
    else
        echo "ok   $*: $(head -1 stderr.txt)"
        passed=$((passed + 1))
    fi
    rm -rf stdout.txt stderr.txt out.safetensors out.safetensors.partial
}

C=(compress good.safetensors -o out.safetensors --device cpu --quiet --bpw 4 --tokens 32)
expect 2 "--rank" "${C[@]}" --rank 0x20
expect 2 "--rank: '040'" "${C[@]}" --rank 040 # decimal 40, not octal 32
expect 2 "--steps" "${C[@]}" --steps ""
expect 2 "--tokens" "${C[@]}" --tokens " 64"
expect 2 "--seed" "${C[@]}" --seed " -5"
expect 2 "--seed" "${C[@]}" --seed +5
expect 2 "--lr" "${C[@]}" --lr 1e300
expect 2 "--sign-lr" "${C[@]}" --sign-lr 1e39
expect 2 "--bpw" "${C[@]}" --bpw abc
expect 2 "--bpw" "${C[@]}" --bpw -1
expect 1 "no-such-dir/report\.html" "${C[@]}" --steps 1 --report no-such-dir/report.html
expect 2 "--steps" demo --device cpu --steps ""

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
