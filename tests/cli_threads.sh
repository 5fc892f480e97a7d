#!/usr/bin/env bash
# `bitrank compress --device cpu` writes the same bytes whatever the thread count:
# one OpenMP and one OpenBLAS thread, then three of each (OpenBLAS takes at most
# the core count from the environment, so on 2 cores or more the two runs split
# the work differently; tests/test_compress.c forces 4 BLAS threads on any
# machine). The layers have awkward sizes (OpenBLAS's threaded GEMM differs from
# its serial one when K is not a multiple of 32) and input Grams given as factors
# [k][n] (Σ = FᵀF on the host), so the job runs every host BLAS and LAPACK call:
# the Gram's Cholesky factor and its inverse, QR, SVD, GEMMs.
# usage: tests/cli_threads.sh path/to/bitrank
set -u
BITRANK=${1:?usage: cli_threads.sh path/to/bitrank}
BITRANK=$(cd "$(dirname "$BITRANK")" && pwd)/$(basename "$BITRANK")
TESTS=$(cd "$(dirname "$0")" && pwd) # st_write.py
DIR=$(mktemp -d /tmp/brthreads-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR" || exit 1

BR_TESTS="$TESTS" python3 - <<'EOF'
import os, sys
sys.path.insert(0, os.environ["BR_TESTS"])
from st_write import st
import math, random
rnd = random.Random(11)
def gauss(n, s=0.05):
    return [rnd.gauss(0, s) for _ in range(n)]
def factor(k, n):  # inputs with log-normal channel scales
    scale = [math.exp(rnd.gauss(0, 1)) for _ in range(n)]
    return [scale[j] * rnd.gauss(0, 1) for _ in range(k) for j in range(n)]
st("model.safetensors", [("blk.0.a.weight", [200, 529], gauss(200 * 529)),
                         ("blk.0.b.weight", [384, 300], gauss(384 * 300))])
st("model.gram.safetensors", [("blk.0.a.weight", [400, 529], factor(400, 529)),
                              ("blk.0.b.weight", [200, 300], factor(200, 300))])
EOF
[ -s model.safetensors ] || { echo "FAIL: could not write the test model"; exit 1; }

failures=0
for t in 1 3; do
    OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$BITRANK" compress model.safetensors \
        -o "out$t.safetensors" --gram model.gram.safetensors --device cpu --steps 4 --tokens 100 \
        --quiet 2>"stderr$t.txt"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "FAIL: $t thread(s): exit status $rc: $(cat "stderr$t.txt")"
        failures=$((failures + 1))
    fi
done
if [ "$failures" -eq 0 ]; then
    if cmp -s out1.safetensors out3.safetensors; then
        echo "ok   the outputs of 1 and 3 threads are the same bytes"
    else
        echo "FAIL: the outputs of 1 and 3 threads differ: $(cmp out1.safetensors out3.safetensors)"
        failures=1
    fi
fi
[ "$failures" -eq 0 ] && echo "cli_threads: all passed"
exit "$failures"
