"""Every float term of :func:`lengthgen.proof.rounding.attention_float_terms` for one small hand-built
model, against the rounding model (docs/certificate.md, "Rounding model and the kernel assumption")
worked out in exact rationals, entry by entry, and its overflow and chain-length guards. Part
`rounding` of the mutation testing (docs/certificate.md, "Mutation testing").

The model is chosen so that every case of the model shows in some coordinate: a coordinate only
tokens write, one where token and position parts overlap (the sum rounds), one only attention
writes, one no layer writes but whose weights are non-zero, one only the FFN writes; two heads
writing one coordinate, a value column that is always 0 but has W_O entries, biases 0, 1 and others,
a hidden unit that is always 0, and magnitudes below and above 1."""
from __future__ import annotations

import math
from fractions import Fraction as F

import numpy as np
import pytest

from lengthgen.proof.rounding import attention_float_terms
from lengthgen.proof.weights import Weights

U = F(1, 2**24)  # float32's unit roundoff (F1)
INFL = 1 + F(1, 2**20)  # FLOAT_TERM_INFLATION, docs/certificate.md


def g(n: int) -> F:
    """Higham's γ_n = n·u/(1 − n·u), 0 for no operation (F1)."""
    return F(0) if n <= 0 else n * U / (1 - n * U)


def _model() -> Weights:
    """d = 6 (0: tokens only, 1: token + position, 2: attention only, 3: never written, 4: head 0 and
    the FFN, 5: FFN only), 2 heads of width 2, 3 hidden units (unit 2 always 0), 2 logits."""
    z = np.zeros
    W_E = np.array([[1, 0, 0, 0, 0, 0], [0.5, 1, 0, 0, 0, 0]], dtype=float)
    W_pos = np.array([[0, 0.5, 0, 0, 0, 0], [0, 0.25, 0, 0, 0, 0]], dtype=float)
    W_Q, W_K, W_V, W_O = z((2, 6, 2)), z((2, 6, 2)), z((2, 6, 2)), z((2, 2, 6))
    b_Q, b_K, b_V = z((2, 2)), z((2, 2)), z((2, 2))
    W_Q[0, 0, 0] = 2.0                                        # exact single product: no rounding
    W_K[0, 1, 0], W_K[0, 3, 0] = 3.0, 1.0                     # row 3 is never non-zero in x
    W_V[0, 1, 0] = 0.5
    W_O[0, 0, 2], W_O[0, 0, 4], W_O[0, 1, 2] = 1.0, 1.0, 7.0  # value column 1 of head 0 is always 0
    W_Q[1, 0, 0], W_Q[1, 1, 0], b_Q[1, 0] = 1.0, 1.0, 0.5
    W_K[1, 0, 0], b_K[1, 0] = 1.0, 1.0
    W_V[1, 0, 0] = 0.25
    W_O[1, 0, 0], W_O[1, 0, 2] = 0.5, 2.0
    b_O = np.array([0.5, 0, 0, 0, 0, 0])
    W_in = z((6, 3))
    W_in[0, 0], W_in[2, 0], W_in[3, 0], W_in[5, 0], W_in[1, 1] = 1.0, 0.5, 1.0, 3.0, 0.25
    b_in = np.array([1.0, 0.0, 0.0])
    W_out = z((3, 6))
    W_out[0, 0], W_out[0, 1], W_out[0, 4], W_out[0, 5], W_out[1, 1], W_out[2, 1] = 1.0, 0.5, 2.0**-4, 2.0**-5, 1.0, 1.0
    b_out = np.array([0, 1.0, 0, 0, 0, 0])
    W_U = z((6, 2))
    W_U[0, 0], W_U[1, 0], W_U[2, 0], W_U[3, 0], W_U[4, 0], W_U[5, 0], W_U[1, 1] = 4.0, 8.0, 1.0, 1.0, 1.0, 2.0, 0.5
    b_U = np.array([1.0, 0.0])
    return Weights(W_E, W_pos, W_Q, b_Q, W_K, b_K, W_V, b_V, W_O, b_O, W_in, b_in, W_out, b_out, W_U, b_U,
                   0.75, "float32", [f"r{i}" for i in range(6)], [f"u{i}" for i in range(3)])


def _proj(x_mag: list[F], x_err: list[F], exact: list[bool], col: np.ndarray, b: float) -> tuple[F, F]:
    """(F1) for one column of x @ W + b: the sum of its n terms within γ_n·Σ|terms|, except a single
    product by an exact ±2^k coordinate (exact), plus the propagated input error Σ|W|·err."""
    rows = [r for r in range(len(col)) if col[r] != 0 and x_mag[r] > 0]
    n = len(rows) + (b != 0)
    mag = sum((x_mag[r] * abs(F(col[r])) for r in rows), F(0)) + abs(F(b))
    exact_single = n == 1 and len(rows) == 1 and exact[rows[0]]
    err = (F(0) if exact_single else g(n) * mag) + sum((abs(F(col[r])) * x_err[r] for r in rows), F(0))
    return mag, err


def _exact_terms(W: Weights, n_keys: int, k_max: int) -> dict[str, list[F]]:
    """The rounding model's terms for ``W`` in float32, exact, entry by entry (no numpy arithmetic)."""
    d, d_mlp, H, E = W.W_E.shape[1], W.W_in.shape[1], W.W_Q.shape[0], W.W_Q.shape[2]
    e_mag = [max(abs(F(v)) for v in W.W_E[:, r]) for r in range(d)]
    p_mag = [max(abs(F(v)) for v in W.W_pos[:, r]) for r in range(d)]
    x_mag = [e_mag[r] + p_mag[r] for r in range(d)]
    x_err = [U * x_mag[r] if e_mag[r] > 0 and p_mag[r] > 0 else F(0) for r in range(d)]  # one rounded sum
    pow2 = lambda v: v == 0 or math.frexp(abs(v))[0] == 0.5
    exact = [x_err[r] == 0 and all(pow2(v) for v in (*W.W_E[:, r], *W.W_pos[:, r])) for r in range(d)]
    # (F3) exp 2u, one division u, RESCALES = 4 rescales of 3u each; (F2) the normalizer of k_max + 1 large terms
    theta = (2 + 1 + 3 * 4 + k_max + 1) * U
    score_err, score_mag = F(0), F(0)
    out_terms, out_prop, tail_base, n_out = [F(0)] * d, [F(0)] * d, [F(0)] * d, [0] * d
    for h in range(H):
        q = [_proj(x_mag, x_err, exact, W.W_Q[h][:, e], W.b_Q[h][e]) for e in range(E)]
        k = [_proj(x_mag, x_err, exact, W.W_K[h][:, e], W.b_K[h][e]) for e in range(E)]
        v = [_proj(x_mag, x_err, exact, W.W_V[h][:, e], W.b_V[h][e]) for e in range(E)]
        prods = [(qm + qe) * (km + ke) for (qm, qe), (km, ke) in zip(q, k)]
        n = sum(p != 0 for p in prods)
        s = F(W.scale)
        mag = sum(prods, F(0)) * s
        err = (g(n) if n > 1 else U) * mag
        err += s * sum((qe * (km + ke) + (qm + qe) * ke + qe * ke for (qm, qe), (km, ke) in zip(q, k)), F(0))
        err += U * mag if not pow2(W.scale) else 0
        err += 2 * 4 * U * (mag + F(math.log(max(n_keys, 2))))  # (F3): 8u·(S_max + ln N_keys)
        score_err, score_mag = max(score_err, err), max(score_mag, mag)
        for e in range(E):
            v_max, v_err = v[e][0] + v[e][1], v[e][1]
            # weights within θ (relative, both ways), value errors, (F2) merges of k_max large terms
            z_err = 2 * theta / (1 - theta) * v_max + (1 + theta) * v_err + (k_max - 1) * U * (1 + theta) * v_max
            for r in range(d):
                o = abs(F(W.W_O[h][e, r]))
                out_terms[r] += v_max * (1 + theta) * o
                out_prop[r] += z_err * o
                tail_base[r] += v_max * o
                n_out[r] += o > 0 and v_max > 0
    out_mag = [out_terms[r] + abs(F(W.b_O[r])) for r in range(d)]
    n_out = [n_out[r] + (W.b_O[r] != 0) for r in range(d)]
    resid_mag = [x_mag[r] + out_mag[r] for r in range(d)]
    resid_err = [x_err[r] + out_prop[r] + (g(n_out[r]) if n_out[r] > 1 else U if n_out[r] == 1 else 0) * out_mag[r]
                 + (U * resid_mag[r] if x_mag[r] > 0 and out_mag[r] > 0 else 0) for r in range(d)]

    def layer(mag: list[F], err: list[F] | None, Wm: np.ndarray, b: np.ndarray) -> tuple[list[F], list[F]]:
        """(F1) for mag @ |Wm| + |b| with one γ_n per output, n counting the terms that can be non-zero."""
        out_mag, out_err = [], []
        for c in range(Wm.shape[1]):
            rows = [r for r in range(len(mag)) if Wm[r, c] != 0 and mag[r] > 0]
            m = sum((mag[r] * abs(F(Wm[r, c])) for r in rows), F(0)) + abs(F(b[c]))
            out_mag.append(m)
            out_err.append(g(len(rows) + (b[c] != 0)) * m
                           + (sum((err[r] * abs(F(Wm[r, c])) for r in rows), F(0)) if err else 0))
        return out_mag, out_err

    pre_mag, pre_err = layer(resid_mag, None, W.W_in, W.b_in)  # beyond resid's own error; ReLU exact
    post_mag = [pre_mag[j] + pre_err[j] for j in range(d_mlp)]
    mo_mag, mo_err = layer(post_mag, pre_err, W.W_out, W.b_out)
    rp_mag = [resid_mag[r] + mo_mag[r] for r in range(d)]
    rp_err = [mo_err[r] + (U * rp_mag[r] if resid_mag[r] > 0 and mo_mag[r] > 0 else 0) for r in range(d)]
    _, lg_err = layer(rp_mag, rp_err, W.W_U, W.b_U)
    return {"score_error": [score_err], "score_magnitude": [score_mag], "softmax_rel": [theta],
            "resid_error": resid_err, "tail_base": tail_base, "tail_cap": [2 * n_keys * U * k_max],
            "pre_error": pre_err, "logit_error": [2 * max(lg_err)]}


def test_every_float_term_of_a_small_model_is_the_rounding_model_exactly() -> None:
    """Each term is the exact value times FLOAT_TERM_INFLATION = 1 + 2^-20 (the cover for its own
    float64 evaluation), to 2^-40; a term that is exactly 0 stays 0 (no operation, or a product by
    0 or ±2^k). score_magnitude is the bare bound on |score|."""
    W = _model()
    ft = attention_float_terms(W, "float32", n_keys=4, k_max=2)
    assert ft.dtype == "float32" and ft.u == 2.0**-24 and ft.overflow is None
    ref = _exact_terms(W, 4, 2)
    assert [float(x) for x in ref["pre_error"]].count(0.0) == 1  # the dead unit
    assert ref["resid_error"][3] == 0 and all(ref["resid_error"][r] > 0 for r in (0, 1, 2, 4))
    for name, want in ref.items():
        got = np.atleast_1d(np.asarray(getattr(ft, name), dtype=float))
        assert got.shape == (len(want),), name
        factor = 1 if name == "score_magnitude" else INFL
        for i, (c, e) in enumerate(zip(got, want)):
            if e == 0:
                assert c == 0.0, (name, i)
            else:
                assert abs(F(c) / (e * factor) - 1) <= F(1, 2**40), (name, i, c, float(e))


def test_the_tail_cap_and_softmax_term_follow_the_key_counts() -> None:
    """(F2): the tail cap is 2·N_keys·u·k_max; θ grows by u per extra large key."""
    W = _model()
    for n_keys, k_max in ((3, 5), (1000, 1)):
        ft = attention_float_terms(W, "float32", n_keys=n_keys, k_max=k_max)
        ref = _exact_terms(W, n_keys, k_max)
        assert abs(F(ft.tail_cap) / (ref["tail_cap"][0] * INFL) - 1) <= F(1, 2**40)
        assert abs(F(ft.softmax_rel) / (ref["softmax_rel"][0] * INFL) - 1) <= F(1, 2**40)


def _single(d: int = 1, d_mlp: int = 0, **arrays: np.ndarray) -> Weights:
    """A one-head model with d_head = 1: every weight 0 unless given."""
    shapes = {"W_E": (1, d), "W_pos": (1, d), "W_Q": (1, d, 1), "b_Q": (1, 1), "W_K": (1, d, 1), "b_K": (1, 1),
              "W_V": (1, d, 1), "b_V": (1, 1), "W_O": (1, 1, d), "b_O": (d,), "W_in": (d, d_mlp), "b_in": (d_mlp,),
              "W_out": (d_mlp, d), "b_out": (d,), "W_U": (d, 1), "b_U": (1,)}
    a = {k: np.asarray(arrays.get(k, np.zeros(s)), dtype=float).reshape(s) for k, s in shapes.items()}
    return Weights(**a, scale=1.0, dtype="float16", labels=[f"r{i}" for i in range(d)],
                   mlp_labels=[f"u{i}" for i in range(d_mlp)])


@pytest.mark.parametrize("where", ["score", "resid", "pre", "post"])
def test_magnitudes_within_4x_of_the_largest_finite_value_are_flagged(where: str) -> None:
    """float16 (largest finite 65504): a magnitude of 65504/4 = 16376 in the scores, the residual, the
    FFN pre-activations or the residual after the FFN, each alone, is flagged; 16000 is not."""
    for big, flagged in ((16376.0, True), (16000.0, False)):
        W = {"score": _single(W_E=[1.0], W_Q=[big / 2], W_K=[2.0]),
             "resid": _single(W_E=[big]),
             "pre": _single(d_mlp=1, W_E=[1.0], W_in=[big]),
             "post": _single(W_E=[1.0], b_out=[big - 1])}[where]
        ft = attention_float_terms(W, "float16", n_keys=4, k_max=1)
        if flagged:
            assert ft.overflow is not None and "within 4x of the largest finite float16" in ft.overflow, where
        else:
            assert ft.overflow is None, where


def test_an_infinite_residual_magnitude_is_flagged_even_when_later_ones_are_nan() -> None:
    """float64 weights whose token and position parts sum past the largest double: resid_mag is
    infinite, and ∞·0 in the FFN makes the later magnitudes NaN; the overflow is still reported."""
    W = _single(d=2, d_mlp=1, W_E=[[1.5e308, 0.0]], W_pos=[[1.5e308, 0.0]], W_in=[[0.0], [1.0]], b_out=[0.0, 1.0])
    with np.errstate(invalid="ignore", over="ignore"):
        ft = attention_float_terms(W, "float64", n_keys=4, k_max=1)
    assert ft.overflow is not None and "inf" in ft.overflow


def test_chains_of_2_to_the_31_roundings_are_refused() -> None:
    """docs/certificate.md: the inflation 1 + 2^-20 covers chains of fewer than 2^31 roundings; a chain
    is counted as 64 per residual coordinate plus one per key, so d = 1 allows N_keys = 2^31 − 64."""
    W = _single(W_E=[1.0])
    attention_float_terms(W, "float16", n_keys=2**31 - 64, k_max=1)
    with pytest.raises(ValueError, match=r"^the float term's own rounding is only bounded for fewer than 2\^31 "
                                         r"operations per chain$"):
        attention_float_terms(W, "float16", n_keys=2**31 - 63, k_max=1)
