"""Helpers shared by the multiplication tests: laid-out batches and an exact-match count whose
oracle is Python integer arithmetic (via ``lengthgen.tasks``' layout, checked against a hand-worked
example in test_multiplication_construction.py)."""
from __future__ import annotations

import functools

import numpy as np

from constructions.multiplication import build_model, instance, teacher_predictions
from constructions.multiplication.certify.layers import Frame, layer1, layer2
from constructions.multiplication.certify.margins import certify, deviations
from constructions.multiplication.certify.weights import Weights
from constructions.multiplication.layout import START_ID


@functools.lru_cache(maxsize=None)
def model_for(n_digits: int | None = None, d_model: int | None = None, dtype: str = "float32"):
    return build_model(n_digits=n_digits, d_model=d_model, dtype=dtype)


def all_pairs(width: int) -> list[tuple[str, int]]:
    """Every a with ``width`` digits (leading zeros included) times every b < 100."""
    return [(str(a).zfill(width), b) for a in range(10**width) for b in range(100)]


def wrong_pairs(model, pairs: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Pairs whose teacher-forced decided predictions differ anywhere from a·b's digits and '$'."""
    insts = [instance(a, b) for a, b in pairs]
    preds = teacher_predictions(model, insts)
    wrong = []
    for (a, b), inst, pred in zip(pairs, insts, preds):
        digits = [int(t) for t in pred[:-1][::-1]] if len(pred) else []
        if any(d < 0 or d > 9 for d in digits) or pred[-1] != inst.tokens[-1] or int("".join(map(str, digits))) != int(a) * b:
            wrong.append((a, b))
    return wrong


def expected_sets(n: int, query: int) -> list[set[int]]:
    """Keys each layer-2 head should attend to from the query at sequence index ``query``
    (the token c_i, i = query − (n + 5); '=' is i = −1), computed from the layout alone."""
    a = {j: n - j for j in range(n)}  # a_j sits at index n − j ('$' is index 0)
    b = {0: n + 3, 1: n + 2}
    i = query - (n + 5)

    def a_set(j: int) -> set[int]:
        return {0, a[j]} if 0 <= j < n else {0}

    return [{b[0]}, {b[1]}, a_set(i + 1), a_set(i), a_set(i - 1), a_set(i - 2)]


def class_checks(model, n: int) -> tuple[list, np.ndarray]:
    """The layer-3 tables of every answer class of a model the certificate passes (read from
    certify's cache), and the deviation box ρ, for tests of ``mlp.check`` alone."""
    cache: dict = {}
    assert certify(model, n, cache=cache).passed
    W = Weights.from_model(model)
    frame = Frame.build(n, START_ID)
    l1 = layer1(W, frame)
    dev = deviations(W, l1, layer2(W, frame, l1))
    return list(cache.values()), dev.rho
