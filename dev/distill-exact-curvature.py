#!/usr/bin/env python3
"""How the exact-flip sign optimizer's `curvature` and `flip_budget` change whole-model
distillation on the Python tests' tiny Llama (random weights, compressed at 2 bpw), on
the CPU: the held-out loss at steps 0, 10 and 20 for each setting, beside the latent
signs and the signs frozen.

    BITRANK_LIBRARY=build/libbitrank.so PYTHONPATH=python OMP_WAIT_POLICY=PASSIVE \
        python3 dev/distill-exact-curvature.py [--seed N]
"""
import argparse
import copy
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python", "tests"))
ap = argparse.ArgumentParser()
ap.add_argument("--seed", type=int, default=1)
os.environ["BITRANK_TEST_SEED"] = str(ap.parse_args().seed)

import test_distill as T  # noqa: E402
from bitrank.distill import distill  # noqa: E402


def run(student, teacher, ids, **kw):
    rep = distill(copy.deepcopy(student), teacher, ids, steps=20, batch_size=4, eval_every=10,
                  engine="library", device="cpu", progress=False, seed=T.SEED, **kw)
    return [round(r[1], 4) for r in rep.eval_curve]


teacher, student, ids = T.pair(T.tiny_llama)
for curvature in (0.0125, 0.1, 1.0, 10.0):
    for budget in (2e-3, 2e-4):
        for lr in (5e-3, 0.0):
            print(f"exact curvature {curvature:g} flip_budget {budget:g} lr {lr:g}:",
                  run(student, teacher, ids, sign_mode="exact", flip_budget=budget,
                      curvature=curvature, lr=lr), flush=True)
print("latent:", run(student, teacher, ids))
print("signs frozen:", run(student, teacher, ids, sign_lr=0))
