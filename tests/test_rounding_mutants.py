"""Tests for the float terms (src/lengthgen/proof/rounding.py, docs/certificate.md "Rounding
model"), part `rounding` of the mutation testing: Higham's γ_n in exact rationals, and the
embedding bounds against float32 sums done in numpy."""
from __future__ import annotations

import numpy as np
import pytest


def test_gamma_is_highams_constant() -> None:
    """γ_n = n·u/(1 − n·u) (Higham, section 3.1) at hand-checked points, in exact rationals: 0 for no
    operation, infinite (no guarantee) from n·u = 1 on."""
    from fractions import Fraction as F
    from lengthgen.proof.rounding import gamma

    u = 2.0**-24
    assert gamma(0, u) == 0.0 and gamma(-3, u) == 0.0
    for n in (1, 2, 27, 2**23):
        assert F(gamma(n, u)) == pytest.approx(F(n) * F(u) / (1 - F(n) * F(u)), rel=2.0**-52)
    assert gamma(2**24, u) == np.inf and gamma(2**24 + 1, u) == np.inf
    assert gamma(2**24 - 1, u) == pytest.approx(2.0**24 - 1, rel=1e-9)  # (1 − u)/u


U32 = 2.0**-24


def test_powers_of_two_and_zero() -> None:
    """(F1): a product by 0 or ±2^k is exact; _is_pow2_or_zero says which coordinate holds only those."""
    from lengthgen.proof.rounding import _is_pow2_or_zero

    for values in ([], [0.0], [0.5, -4.0, 0.0, 2.0**-30], [1.0]):
        assert _is_pow2_or_zero(np.array(values))
    for values in ([3.0], [0.5, 0.75], [-6.0, 0.0], [1 + 2.0**-23]):
        assert not _is_pow2_or_zero(np.array(values))


def test_embedding_bounds_contain_the_float32_sums() -> None:
    """(F1) for x = W_E[y] + W_pos[q], against float32 sums done in numpy for every (y, q): |x| ≤ mag
    (reached: the columns are non-negative), the rounding error ≤ err, which is reached within 1%
    by 1 + (1 + 2^-23) (a tie, rounded to even), and 0 where one of the two rows is 0 in that
    coordinate; ``exact_mult`` holds where every product by a float32 number is exact."""
    from lengthgen.proof.rounding import embed_bounds

    # column 5: a position part below 1 still rounds the sum (1 + 2^-24 is a tie, rounded to 1)
    W_E = np.array([[1.0, 0.0, 1.0, 3.0, 0.0, 1.0], [-2.0, 0.0, 0.5, 0.0, 0.0, 0.0]], dtype=np.float32)
    W_pos = np.array([[0.0, 0.5, 1 + 2.0**-23, 0.0, 0.75, 2.0**-24], [0.0, 0.25, 0.0, 0.0, -0.25, 0.0]],
                     dtype=np.float32)
    mag, err, exact_mult = embed_bounds(W_E.astype(np.float64), W_pos.astype(np.float64), U32)
    sums = np.array([[W_E[y].astype(np.float64) + W_pos[q] for q in range(2)] for y in range(2)])  # exact
    rounded = np.array([[(W_E[y] + W_pos[q]).astype(np.float64) for q in range(2)] for y in range(2)])
    assert np.array_equal(mag, np.abs(sums).max((0, 1)))
    measured = np.abs(rounded - sums).max((0, 1))
    assert np.all(measured <= err) and measured[2] >= 0.99 * err[2] and measured[5] >= 0.99 * err[5]
    assert list(err == 0) == [True, True, False, True, True, False]
    z = np.random.default_rng(0).uniform(-3, 3, 200).astype(np.float32)
    for r in range(6):
        values = np.concatenate([W_E[:, r], W_pos[:, r]])
        exact_products = all(np.array_equal((v * z).astype(np.float64), float(v) * z.astype(np.float64)) for v in values)
        assert exact_mult[r] == (exact_products and err[r] == 0), r
