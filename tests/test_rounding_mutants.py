"""Tests for the float terms (src/lengthgen/proof/rounding.py, docs/certificate.md "Rounding
model"), part `rounding` of the mutation testing: Higham's γ_n in exact rationals, and the
embedding bounds against float32 sums done in numpy."""
from __future__ import annotations

import math
from fractions import Fraction as F

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


def _close(got: float, want: F) -> bool:
    """``got`` equals the exact ``want`` to 2^-45 (float64 evaluation of a few dozen operations)."""
    return want == 0 and got == 0 or want != 0 and abs(F(got) / want - 1) <= F(1, 2**45)


def g32(n: int) -> F:
    """Higham's γ_n for float32, exact (section 3.1): n·u/(1 − n·u)."""
    return F(n) * F(U32) / (1 - F(n) * F(U32))


def test_projection_bounds_are_gamma_n_of_the_terms_exactly() -> None:
    """(F1) column by column, against γ_n·Σ|terms| + Σ|W|·err in exact rationals: a single product by a
    coordinate that only holds 0 or ±2^k is exact (err 0); a non-exact one rounds once (γ_1); a bias
    is one more term; rows where x is always 0 are no term; a column of zeros and bias 0 is exactly 0."""
    from lengthgen.proof.rounding import project_bounds

    u = F(U32)
    x_mag, x_err = np.array([1.0, 1.5, 0.0, 0.75]), np.array([0.0, 1.5 * U32, 0.0, 0.0])
    x_exact = np.array([True, False, False, False])
    W = np.array([[2.0, 0.0, 1.0, 0.5, 0.0, 0.0],
                  [0.0, 3.0, 0.0, 1.0, 0.0, 0.0],
                  [0.0, 0.0, 5.0, 0.0, 0.0, 0.0],
                  [0.0, 0.0, 0.0, -0.75, 0.0, 0.0]])
    b = np.array([0.0, 0.0, 1.0, -0.5, 0.25, 0.0])
    p = project_bounds(x_mag, x_err, x_exact, W, b, U32)
    mags = [F(2), F(9, 2), F(2), F(1, 2) + F(3, 2) + F(9, 16) + F(1, 2), F(1, 4), F(0)]
    errs = [F(0), g32(1) * F(9, 2) + 3 * F(3, 2) * u, g32(2) * 2, g32(4) * mags[3] + F(3, 2) * u, g32(1) / 4, F(0)]
    assert [F(m) for m in p.mag] == mags
    for e, (got, want) in enumerate(zip(p.err, errs)):
        assert _close(float(got), want), (e, float(got), float(want))


def test_a_bias_makes_a_single_exact_product_round() -> None:
    """1·x + 2^-24 in float32 for x = 1: the sum is a tie and rounds to 1, an error of u, which the
    bound (two terms: γ_2·(1 + u)) must contain, although the product alone is exact."""
    from lengthgen.proof.rounding import project_bounds

    x = np.float32(1.0)
    got = float(x * np.float32(1.0) + np.float32(U32))  # float32 arithmetic
    measured = abs(F(got) - (1 + F(U32)))
    assert measured == F(U32)
    p = project_bounds(np.array([1.0]), np.array([0.0]), np.array([True]), np.array([[1.0]]), np.array([U32]), U32)
    assert p.err[0] >= measured and _close(float(p.err[0]), g32(2) * (1 + F(U32)))


def test_score_bounds_are_the_rounding_model_exactly() -> None:
    """(F1) + (F3) for q·k·scale, in exact rationals: γ_n over the n non-zero products (u for one),
    the propagated projection errors, one more u for a scale that is not ±2^k, and the (F3)
    perturbation 8u·(S_max + ln N_keys), for N_keys = 2 (ln 2) and N_keys = 1 (taken as 2)."""
    from lengthgen.proof.rounding import Projection, score_bounds

    u, ln2 = F(U32), F(math.log(2))
    qm, qe = [F(2), F(1), F(0)], [F(1, 2**20), F(0), F(0)]
    km, ke = [F(3), F(1, 2), F(4)], [F(1, 2**22), F(1, 2**21), F(0)]
    q = Projection(np.array([float(x) for x in qm]), np.array([float(x) for x in qe]))
    k = Projection(np.array([float(x) for x in km]), np.array([float(x) for x in ke]))
    prods = [(a + da) * (c + dc) for a, da, c, dc in zip(qm, qe, km, ke)]
    prop = sum((da * (c + dc) + (a + da) * dc + da * dc for a, da, c, dc in zip(qm, qe, km, ke)), F(0))
    s = F(3, 4)  # not a power of two
    mag = sum(prods, F(0)) * s
    err, got_mag = score_bounds(q, k, 0.75, U32, n_keys=2)
    assert _close(got_mag, mag)
    assert _close(err, g32(2) * mag + s * prop + u * mag + 8 * u * (mag + ln2)), (err,)
    # one non-zero product, scale 1/2 (exact), one key
    q1 = Projection(np.array([1.5, 0.0]), np.array([U32, 0.0]))
    k1 = Projection(np.array([2.0, 0.0]), np.array([0.0, 0.0]))
    mag1 = (F(3, 2) + u) * 2 / 2
    err1, got_mag1 = score_bounds(q1, k1, 0.5, U32, n_keys=1)
    assert _close(got_mag1, mag1)
    assert _close(err1, u * mag1 + F(1, 2) * u * 2 + 8 * u * (mag1 + ln2)), (err1,)


def _terms(**kw) -> "FloatTerms":
    from lengthgen.proof.rounding import FloatTerms

    base = dict(dtype="float32", u=U32, score_error=2.0**-10, score_magnitude=12.5, softmax_rel=18 * U32,
                resid_error=np.array([0.0, 2.0**-20]), tail_base=np.array([1.0, 0.0, 3.0]), tail_cap=0.7,
                pre_error=np.zeros(0), logit_error=1e-6)
    return FloatTerms(**{**base, **kw})


def test_the_tail_is_2_min_2_lambda_cap_times_the_base() -> None:
    """(F2): 2·min(2λ, cap)·base per leak λ and coordinate, times the inflation 1 + 2^-20 (and one
    ulp up); 0 where the base is 0. A float32 leak gives what its float64 value gives (the cap is
    not rounded to float32)."""
    ft = _terms()
    lam = np.array([2.0**-10, 0.5])
    t = ft.tail(lam)
    assert t.shape == (2, 3)
    want = [[2 * min(2 * F(x), F(0.7)) * F(b) for b in (1.0, 0.0, 3.0)] for x in lam]
    for row, wrow in zip(t, want):
        for got, w in zip(row, wrow):
            assert (got == 0) if w == 0 else (w < F(got) <= w * (1 + F(1, 2**19))), (got, float(w))
    assert np.array_equal(ft.tail(np.float32(0.5)), ft.tail(0.5))
    assert np.array_equal(ft.tail(np.array([0.5], dtype=np.float32)), ft.tail(np.array([0.5])))


def test_describe_prints_each_term() -> None:
    """The five lines of the certificate's float-term summary, with u as a power of two and the
    largest entry of each array; an FFN without hidden units prints 0."""
    ft = _terms()
    assert ft.describe() == [
        "unit roundoff u = 2^-24 (float32); rounding model (F1)-(F3), see docs/certificate.md",
        "score rounding at magnitude 12.5 (≈ M·P): |Δscore| ≤ 0.000977",
        "softmax (exp, normalizer sum, division, rescales): relative ≤ 1.07e-06 per weight",
        "value path (W_V, weighted sum, W_O, residual add): |Δresid| ≤ 9.54e-07 (+ tail ≤ 2·min(2λ, 0.7)·3)",
        "FFN and readout: |Δpre-activation| ≤ 0, |Δlogit gap| ≤ 1e-06",
    ]
    assert ft.describe()[4] == "FFN and readout: |Δpre-activation| ≤ 0, |Δlogit gap| ≤ 1e-06"
    assert _terms(pre_error=np.array([0.25, 0.5]), u=2.0**-8, dtype="bfloat16").describe()[::4] == [
        "unit roundoff u = 2^-8 (bfloat16); rounding model (F1)-(F3), see docs/certificate.md",
        "FFN and readout: |Δpre-activation| ≤ 0.5, |Δlogit gap| ≤ 1e-06"]


def test_real_arithmetic_has_no_float_term() -> None:
    """--dtype real: every term 0, arrays of the residual and hidden widths, no overflow; its tail is 0."""
    from lengthgen.proof.rounding import zero_terms

    ft = zero_terms(5, 3)
    assert ft.dtype == "real" and ft.overflow is None
    assert [ft.u, ft.score_error, ft.score_magnitude, ft.softmax_rel, ft.tail_cap, ft.logit_error] == [0.0] * 6
    for arr, n in ((ft.resid_error, 5), (ft.tail_base, 5), (ft.pre_error, 3)):
        assert isinstance(arr, np.ndarray) and arr.shape == (n,) and not arr.any()
    assert not ft.tail(np.array([0.5, 1.0])).any()


def test_a_long_float32_sum_reaches_gamma_n_within_two_percent() -> None:
    """(F1) is attained: 1 followed by 63 terms just under half an ulp of 1 (2^-24·(1 − 2^-10)), added
    one by one in float32 (one of the orders the bound covers), loses each of them: an error of
    63·2^-24·(1 − 2^-10), at least 98% of the bound γ_64·Σ|terms| and never more."""
    from lengthgen.proof.rounding import project_bounds

    t = np.float32(U32 * (1 - 2.0**-10))
    x = np.array([1.0] + [float(t)] * 63)
    s = np.float32(1.0)
    for v in x[1:]:
        s = np.float32(s + np.float32(v))  # float32 arithmetic, left to right
    measured = sum((F(v) for v in x), F(0)) - F(float(s))
    assert F(float(s)) == 1 and measured == 63 * F(float(t))
    p = project_bounds(x, np.zeros(64), np.zeros(64, dtype=bool), np.ones((64, 1)), np.zeros(1), U32)
    bound = F(float(p.err[0]))
    assert measured <= bound and measured >= F(98, 100) * bound
