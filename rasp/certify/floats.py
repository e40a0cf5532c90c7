"""The rounding of a float32 forward pass, for the float32 statement of :mod:`rasp.certify`.

In float32 the certificate proves the model right for every evaluation that obeys the rounding
model of :mod:`lengthgen.proof.rounding` ((F1) every operation and every dot product of ``n``
terms within ``gamma_n`` of the exact result of its rounded operands, in any order; (F3) ``exp``
within 2 ulp, one division, at most ``RESCALES`` rescalings of the partial sums and a running-max
perturbation of the scores), docs/certificate.md "Rounding model". The invariant of
:mod:`rasp.certify.state` then holds of the *float* residual: ``eps`` bounds the distance of the
computed residual from the exact encoding, rounding included. Each step adds to it:

* **scores** (:func:`score_error`): with ``X_d`` the largest ``|x_d|`` any position can hold
  (:func:`magnitudes`), ``q_e`` and ``k_e`` round by ``gamma_n`` times their magnitudes
  (:func:`lengthgen.proof.rounding.project_bounds`) and ``q . k`` by ``gamma_{d_head}`` times
  its own, plus (F3)'s ``2 RESCALES u (S_max + ln N)``
  (:func:`lengthgen.proof.rounding.score_bounds`): a bound ``ds`` on ``|s_float - s|`` for every
  pair. Two scores compared move by at most ``2 ds``: the head's margin shrinks and its spread
  grows by that much.
* **head outputs** (:func:`value_error`, :func:`output_error`): every value vector
  ``v = x W_V`` rounds by ``gamma_n`` times its magnitude (widened per key state, so the lookup
  check sees it); the softmax weights have relative error at most
  ``theta = gamma_{N + EXP_ULPS + 1 + 3 RESCALES}`` (exp, the normaliser's ``N`` positive terms,
  the division, the rescales); the weighted sum ``z = sum_k p_k v_k`` then errs by at most
  ``V (theta + gamma_{N + 3 RESCALES} (1 + theta))`` and ``z W_O`` by ``gamma_{d_head}`` times its
  magnitude more. A written dimension held exactly 0 before the head, so adding the head's output
  to the residual is exact.
* **MLPs** (:func:`mlp_error`): a pre-activation rounds by ``dp_i = gamma_n`` times its magnitude;
  ReLU is 1-Lipschitz and exact, so the output moves by ``sum_i dp_i |W_out[i, d]|`` and rounds by
  ``gamma_{units + 1}`` times its magnitude; the residual add is exact for the same reason.
* **logits** (:func:`logit_error`): ``gamma_{n}`` times the magnitude of ``x W_U + b_U``.

Every bound is a worst case over all positions, evaluated in float64 and then inflated by
``FLOAT_TERM_INFLATION`` and one step up (its own rounding, as in :mod:`lengthgen.proof.rounding`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lengthgen.proof import interval as I
from lengthgen.proof.rounding import (EXP_ULPS, FLOAT_TERM_INFLATION, MAX_FINITE, RESCALES, Projection, gamma,
                                      project_bounds, score_bounds)
from rasp.certify.state import Fail
from rasp.weights.precision import integer_coordinates

OVERFLOW = MAX_FINITE["float32"] / 4   # magnitudes this large could overflow float32 along the way


def inflate(x) -> np.ndarray:
    """An upper bound of the exact value of a bound evaluated in float64 (fewer than 2^31 roundings)."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x == 0, 0.0, I.up(x * FLOAT_TERM_INFLATION))


@dataclass
class Residual:
    """What every non-BOS position's float residual can hold, per dimension: ``X[d] >= |x_d|``;
    ``eps``; ``group[d]``, the one-hot s-op ``d`` belongs to (-1: none), of which one dimension
    holds ``1 + e`` and the others ``e`` (``|e| <= eps``); ``exact[d]``: ``x_d`` is an integer at
    every position (``eps[d] = 0`` and every value of its s-op encodes to integers)."""

    X: np.ndarray
    eps: np.ndarray
    group: np.ndarray
    exact: np.ndarray


def magnitudes(st) -> Residual:
    """The :class:`Residual` of the state's invariant: the largest encoding of any value of the
    s-op owning ``d`` plus ``eps[d]``; 1 for ``one``; 0 for a dimension no computed s-op owns yet.
    A one-hot s-op's dimensions share its index in ``st.prog.nodes`` as their group label."""
    X = np.zeros(st.d)
    X[st.layout.one] = 1.0
    group = np.full(st.d, -1)
    for label, node in enumerate(st.prog.nodes):
        if id(node) not in st.status or not st.layout.dims.get(id(node)):
            continue
        # a token or position s-op's value set is its table's; a computed one enters st.status only
        # after its head or MLP check, which enumerates its value set: never None here
        for v in node.values:
            dims, lo, hi = st.encoding(node, v)
            X[dims] = np.maximum(X[dims], np.maximum(np.abs(lo), np.abs(hi)))
        if node.encoding == "onehot" and st.status[id(node)] == "full":
            group[list(st.layout.value_dims[id(node)].values())] = label     # its index among the nodes
    exact = np.array(integer_coordinates(st.layout)) & (st.eps == 0)
    return Residual(np.asarray(I.up(X + st.eps)), st.eps.copy(), group, exact)


def _projection(r: Residual, W: np.ndarray, b: np.ndarray, u: float) -> Projection:
    """``x W + b`` at every non-BOS position: per column, a bound on ``|x W + b|`` that counts a
    one-hot s-op's largest coefficient once (plus its ``eps`` terms), and the rounding
    ``gamma_n`` times it (``n`` the non-zero terms); none where every term is an integer and the
    bound is at most ``1/u`` (integer arithmetic the format holds exactly, in any order)."""
    mags, errs = np.zeros(W.shape[1]), np.zeros(W.shape[1])
    for e in range(W.shape[1]):
        rows = np.nonzero((W[:, e] != 0) & (r.X > 0))[0]
        w = np.abs(W[rows, e])
        loose = r.group[rows] < 0
        mag = float(np.sum(r.X[rows][loose] * w[loose]) + np.sum(r.eps[rows][~loose] * w[~loose]) + abs(b[e]))
        for g in np.unique(r.group[rows][~loose]):
            mag += float(w[r.group[rows] == g].max())
        mag = float(inflate(mag))
        n = len(rows) + (b[e] != 0)
        integer = (np.all(r.exact[rows]) and np.all(np.mod(W[rows, e], 1) == 0) and float(b[e]).is_integer()
                   and mag <= 1 / u)
        mags[e], errs[e] = mag, 0.0 if integer or n == 0 else gamma(int(n), u) * mag
    return _finite(Projection(mags, errs))


def _plain(xmag: np.ndarray, W: np.ndarray, b: np.ndarray, u: float) -> Projection:
    """``x W + b`` for ``|x| <= xmag`` (no structure known: BOS's residual, hidden units)."""
    return _finite(project_bounds(xmag, np.zeros_like(xmag), np.zeros(len(xmag), dtype=bool), W, b, u))


def _keys(r: Residual, bos: I.Iv, W: np.ndarray, b: np.ndarray, u: float) -> Projection:
    """A projection of the keys: the non-BOS positions' and BOS's, whichever is larger."""
    p, q = _projection(r, W, b, u), _plain(np.asarray(bos.mag()), W, b, u)
    return Projection(np.maximum(p.mag, q.mag), np.maximum(p.err, q.err))


def score_error(r: Residual, bos: I.Iv, WQ, bQ, WK, bK, u: float, n_keys: int) -> float:
    """``ds >= |s_float - s|`` for every (query, key) pair of one head (``attn_scale`` 1); the
    queries are non-BOS positions (BOS attends to itself alone whatever it scores)."""
    if u == 0:
        return 0.0
    err, _ = score_bounds(_projection(r, WQ, bQ, u), _keys(r, bos, WK, bK, u), 1.0, u, n_keys)
    return float(inflate(err))


def softmax_theta(u: float, n_keys: int) -> float:
    """Relative error of one softmax weight: exp (``EXP_ULPS``), the normaliser's ``n_keys``
    positive terms, the division and ``RESCALES`` rescalings of 3 operations each."""
    return gamma(n_keys + int(EXP_ULPS) + 1 + 3 * RESCALES, u)


def value_error(r: Residual, bos: I.Iv, WV: np.ndarray, u: float) -> np.ndarray:
    """Rounding of ``v = x W_V`` (no bias) per head dimension, at any key (BOS included)."""
    if u == 0:
        return np.zeros(WV.shape[1])
    return inflate(_keys(r, bos, WV, np.zeros(WV.shape[1]), u).err)


def output_error(V: np.ndarray, WO: np.ndarray, u: float, n_keys: int) -> np.ndarray:
    """Per residual dimension (columns of ``WO``), the rounding of ``z W_O`` with
    ``z = sum_k p_k v_k`` beyond the exact ``sum_k p_k (v_k W_O)``; ``V[e] >= |v_e|`` over every
    key (already widened by :func:`value_error`)."""
    if u == 0:
        return np.zeros(WO.shape[1])
    theta = softmax_theta(u, n_keys)
    dz = V * (theta + gamma(n_keys + 3 * RESCALES, u) * (1 + theta))
    absO = np.abs(WO)
    n = np.count_nonzero(absO * ((V + dz)[:, None] > 0), axis=0)
    rounding = np.array([gamma(int(c), u) for c in n]) * ((V + dz) @ absO)
    return inflate(dz @ absO + rounding)


def mlp_error(r: Residual, W_in, b_in, W_out, b_out, u: float) -> np.ndarray:
    """Per output column of ``W_out``, the float error of ``ReLU(x W_in + b_in) W_out + b_out``
    beyond the exact function of the float input, at every non-BOS position."""
    if u == 0:
        return np.zeros(W_out.shape[1])
    pre = _projection(r, W_in, b_in, u)
    post = _plain(pre.mag + pre.err, W_out, b_out, u)          # pre.mag + pre.err >= |ReLU(pre_float)|
    return inflate(pre.err @ np.abs(W_out) + post.err)


def logit_error(r: Residual, W_U, b_U, u: float) -> np.ndarray:
    """Per class, the rounding of ``x W_U + b_U`` at every non-BOS position."""
    if u == 0:
        return np.zeros(W_U.shape[1])
    return inflate(_projection(r, W_U, b_U, u).err)


def widen(x: I.Iv, err) -> I.Iv:
    """``x`` widened by ``err`` on each side (outward); ``x`` itself where ``err`` is 0."""
    if not np.any(err):
        return x
    return I.Iv(I.down(x.lo - err), I.up(x.hi + err))


def affine_error(x: I.Iv, W: np.ndarray, b: np.ndarray | None, u: float) -> np.ndarray:
    """Per column, the rounding of ``x W + b`` for ``x`` in the box ``x`` (one row: BOS's)."""
    if u == 0:
        return np.zeros(W.shape[1])
    bias = np.zeros(W.shape[1]) if b is None else b
    return inflate(_plain(np.asarray(x.mag()).reshape(-1), W, bias, u).err)


def add_error(total: I.Iv, u: float) -> np.ndarray:
    """The rounding of one addition whose exact result lies in ``total``."""
    return inflate(u * np.asarray(total.mag())) if u else np.zeros(total.shape)


def bos_attention(x: I.Iv, W_V: np.ndarray, W_O: np.ndarray, u: float) -> I.Iv:
    """BOS's residual after an attention layer (``W_V`` ``[heads, d, e]``): BOS attends to itself
    alone, so each head adds ``(x W_V) W_O``; in float32 the value rounds (:func:`affine_error`),
    the one-key softmax and ``W_O`` round (:func:`output_error` with one key), and so does the
    residual addition (:func:`add_error`), BOS's dimensions not being 0 in general."""
    out = I.Iv.exact(np.zeros(x.shape))
    for WV, WO in zip(W_V, W_O):
        v = widen(I.affine(x, WV), affine_error(x, WV, None, u))
        out = out + widen(I.matmul(v, WO), output_error(np.asarray(v.mag()), WO, u, 1))
    total = x + out
    return widen(total, add_error(total, u))


def bos_mlp(x: I.Iv, W_in, b_in, W_out, b_out, u: float) -> I.Iv:
    """BOS's residual after an MLP: ``x + ReLU(x W_in + b_in) W_out + b_out``, each affine map and
    the residual addition widened by its float32 rounding."""
    pre = widen(I.affine(x, W_in, b_in), affine_error(x, W_in, b_in, u)).relu()
    total = x + widen(I.affine(pre, W_out, b_out), affine_error(pre, W_out, b_out, u))
    return widen(total, add_error(total, u))


def _finite(p: Projection) -> Projection:
    """``p``, unless its magnitudes could overflow float32 (then (F1) does not hold)."""
    big = float(np.max(p.mag + p.err, initial=0.0))
    if not big < OVERFLOW:
        raise Fail("float", f"float32 values up to {big:.3g} could overflow (the rounding model needs them "
                            f"below {OVERFLOW:.3g})")
    return p
