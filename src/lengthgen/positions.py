"""Position-ID rules. Positions are data handed to the model with the tokens.

``coupled_addition_ids`` is the position-coupling rule of Cho et al. 2024 (Section 3, Figure 2) for the
format ``$ a_{n-1}..a_0 + b_{n-1}..b_0 = c_0..c_n $`` (docs/training.md, "Data formats"): equal
significance shares an ID, ``+``/``=`` share one, ``$`` gets 0. With start ``s``:

    a_i, b_i, c_i  ->  s + n - 1 - i        +, =  ->  s + n        $  ->  0

so the operands read ``s, s+1, .., s+n-1``, the answer counts down from ``s+n-1`` to ``s-1``. The
paper's worked example (Table 9, s = 2): ``$653+049=2070$`` -> ``0 2 3 4 5 2 3 4 5 4 3 2 1 0``.
"""
from __future__ import annotations

import numpy as np


def plain_position_ids(length: int, start: int = 0) -> np.ndarray:
    """Ordinary absolute positions ``start, start+1, ...`` (the APE baseline)."""
    return np.arange(start, start + length, dtype=np.int64)


def coupled_addition_ids(n: int, start: int = 2) -> np.ndarray:
    """IDs of the full sequence ``$ a + b = c $`` (3n + 5 tokens) for operands of length ``n``.

    ``start`` (s) must be at least 2 so that the overflow digit c_n (ID s - 1) stays non-zero; the
    largest ID is ``s + n``. Training draws ``start`` at random (see :func:`random_start`)."""
    if n < 1:
        raise ValueError("operand length n must be at least 1")
    if start < 2:
        raise ValueError("start ID s must be >= 2 (ID 0 is reserved for $ and the overflow digit gets s-1)")
    operand = np.arange(start, start + n, dtype=np.int64)
    sep = np.array([start + n], dtype=np.int64)
    answer = np.arange(start + n - 1, start - 2, -1, dtype=np.int64)
    zero = np.zeros(1, dtype=np.int64)
    return np.concatenate([zero, operand, sep, operand, sep, answer, zero])


def coupled_sink_addition_ids(n: int, start: int = 2) -> np.ndarray:
    """The ``coupled-sink`` rule: :func:`coupled_addition_ids` with both ``$`` moved from ID 0 to the
    overflow digit's ID ``s − 1``.

    Not in the paper (an addition of this project, docs/training.md, "A sink for the top carry"). Under
    the paper's rule the query that predicts c_n (the token c_{n−1}, ID s) reads ID s − 1, where no
    token of the prompt lies, so what it attends to instead depends on the length. Here the opening
    ``$`` lies at ID s − 1 at every length and every start: the digits of that column are "absent",
    and the same key tells the query c_n (ID s − 1) that the answer is complete. Example (n = 3, s = 2):
    ``$653+049=2070$`` -> ``1 2 3 4 5 2 3 4 5 4 3 2 1 1``."""
    ids = coupled_addition_ids(n, start)
    ids[[0, -1]] = start - 1
    return ids


def addition_ids(scheme: str, n: int, start: int = 2) -> np.ndarray:
    """The IDs of an n-digit addition under ``scheme``: ``coupled`` (the paper's rule) or ``coupled-sink``."""
    if scheme == "coupled":
        return coupled_addition_ids(n, start)
    if scheme == "coupled-sink":
        return coupled_sink_addition_ids(n, start)
    raise ValueError(f"addition_ids lays out coupled or coupled-sink IDs, not {scheme!r}")


def max_coupled_id(n: int, start: int = 2) -> int:
    """Largest position ID used by an n-digit addition starting at ``start``: ``s + n``."""
    return start + n


def random_start(rng: np.random.Generator, n: int | np.ndarray, max_id: int, size: int | None = None) -> np.ndarray | int:
    """Random start offset for training (the authors' "random shift"):
    uniform over ``2 .. max_id - n`` so every ID of the sequence lies in ``1 .. max_id``."""
    if np.any(max_id - np.asarray(n) < 2):
        raise ValueError(f"a position table with largest ID {max_id} cannot hold {n}-digit operands (needs {n + 2})")
    return rng.integers(2, max_id - n + 1, size=size)


def hypercube_codes(ids: np.ndarray, P: int) -> np.ndarray:
    """The hypercube position code of Theorem 5.1 (docs/theorem-5-1.md): rows
    v_p = ((−1)^{bit_i(p−1)})_{i<P} for p ≥ 1 and v_p = 0 for p ≤ 0.
    ⟨v_p, v_q⟩ = P − 2·Hamming(p−1, q−1) for p, q ≥ 1."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1, 1)
    bits = ((ids - 1) >> np.arange(P, dtype=np.int64)) & 1
    return np.where(ids >= 1, 1 - 2 * bits, 0).astype(np.int8)


def hypercube_code(p: int, P: int) -> list[int]:
    """v_p for one ID (see :func:`hypercube_codes`)."""
    return hypercube_codes(np.array([p]), P)[0].tolist()
