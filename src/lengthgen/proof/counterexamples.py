"""Turning unproven local configurations of the trained-model certificate into real counterexamples.

A configuration that the interval argument cannot prove is not yet a failure: the argument is
pessimal about every key outside the window. :func:`realize` builds operand pairs with exactly the
configuration's window digits and carry (the carry into the window forced by the digits just
below it: 9 + 1 carries whatever comes from below, 0 + 0 never does; every other digit random), and
:func:`wrong_positions` runs the real model on them, teacher-forced in float64, scoring every answer
position with the project's rule (:func:`lengthgen.decode.decided_argmax`, the same rule
``python -m lengthgen.evaluate`` applies). Targets come from the task's integer oracle.
"""
from __future__ import annotations

import copy

import numpy as np
import torch

from ..decode import UNDECIDED, decided_argmax
from ..model import Transformer
from ..positions import addition_ids
from ..tasks import ADDITION
from .trained import Layout


def realize(lay: Layout, lo: int, a_w: np.ndarray, b_w: np.ndarray, carry: int, rng: np.random.Generator
            ) -> tuple[str, str]:
    """Two N-digit operands (leading digit non-zero when N > 1) whose digits at significances
    lo, lo+1, … are ``a_w``/``b_w`` and whose carry into significance lo is ``carry``."""
    n = lay.n
    digits = [rng.integers(0, 10, size=n), rng.integers(0, 10, size=n)]  # index i = significance i
    for d, w in zip(digits, (a_w, b_w)):
        d[lo:lo + len(w)] = w
    if lo > 0:
        digits[0][lo - 1], digits[1][lo - 1] = (9, 1) if carry else (0, 0)
    if n > 1:
        for d in digits:
            if lo + len(a_w) <= n - 1 and d[n - 1] == 0:
                d[n - 1] = rng.integers(1, 10)
    return tuple("".join(str(int(x)) for x in d[::-1]) for d in digits)  # type: ignore[return-value]


@torch.inference_mode()
def wrong_positions(model: Transformer, pairs: list[tuple[str, str]], start: int, batch: int = 64,
                    dtype: torch.dtype = torch.float64, scheme: str = "coupled") -> list[dict[int, tuple[str, str]]]:
    """Per pair: {answer position r: (expected token, predicted token)} where the model in ``dtype``
    (float64 by default, the closest to its real-number function), teacher-forced on the IDs of
    ``scheme`` (``coupled`` or ``coupled-sink``), does not predict the true next token with the
    decision margin."""
    m64 = copy.deepcopy(model).to(dtype).eval()
    out: list[dict[int, tuple[str, str]]] = []
    for i in range(0, len(pairs), batch):
        insts = [ADDITION.instance(a, b, start=start) for a, b in pairs[i:i + batch]]
        tokens = torch.as_tensor(np.stack([x.tokens for x in insts]), device=model.device)
        pos = torch.as_tensor(np.stack([addition_ids(scheme, x.n, start) for x in insts]), device=model.device)
        first = insts[0].prompt_len - 1
        logits = m64(tokens[:, :-1], pos[:, :-1], logits_from=first)
        pred = decided_argmax(logits).cpu().numpy()
        target = tokens[:, first + 1:].cpu().numpy()
        for row in range(len(insts)):
            bad = np.flatnonzero(pred[row] != target[row])
            out.append({int(r): (ADDITION.decode([target[row, r]]),
                                 "undecided" if pred[row, r] == UNDECIDED else ADDITION.decode([pred[row, r]]))
                        for r in bad})
    return out
