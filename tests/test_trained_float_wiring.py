"""Where the float32 statement widens the trained-model certificate, and by exactly how much.

Torch's float32 kernels round far less than the worst cases that (F1)-(F5) allow, so a check
against the measured float32 pass (tests/test_trained_float_stages.py) cannot tell one term from
two: the scores' dot rounding alone already holds the measured scores, so dropping the softmax
shift would pass it. Here each step of a small random model is run with and without the float
format on the same inputs, and the difference must be the step's radius, computed independently
from the formulas of lengthgen.proof.trained_float (themselves pinned by hand with exact rationals
in tests/test_trained_float_kernels.py, and their kernel assumptions measured there): not less
(a term dropped) and not more than a few ulps (a term counted twice, or a wrong one).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from lengthgen.model import Transformer, TransformerConfig
from lengthgen.proof import affine as A
from lengthgen.proof.interval import Iv
from lengthgen.proof.trained import Layout, PositionCertifier
from lengthgen.proof.trained_affine import attention_form, differences, tail_forms
from lengthgen.proof.trained_float import FloatFormat
from lengthgen.proof.trained_tables import LN_EPS, OneLayer, Tables
from lengthgen.tasks import ADDITION

F32 = FloatFormat("float32")
N_KEYS = 11
TOL = 2e-6  # relative: FLOAT_TERM_INFLATION (1 + 2^-20) on gamma and theta


@pytest.fixture(scope="module")
def pair():
    return small_model_pair()


def small_model_pair() -> tuple[OneLayer, OneLayer]:
    """A small random 1-layer model (d_model 8, two heads, LayerNorm, GELU) without and with the
    float32 format."""
    torch.manual_seed(0)
    cfg = TransformerConfig(d_vocab=len(ADDITION.vocab), d_model=8, n_heads=2, d_head=4, d_mlp=16, n_ctx=12,
                            normalization="LN", act_fn="gelu")
    model = Transformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5 + (1.0 if p.dim() == 1 and p.shape[0] == 8 else 0.0))
    real, flt = OneLayer.from_model(model), OneLayer.from_model(model, F32)
    return real, flt


def widened_by(real: Iv, flt: Iv, radius: np.ndarray) -> None:
    """``flt`` is ``real`` widened by ``radius`` on both sides, to a relative TOL of the radius
    and a few spacings of the end points (the outward roundings of each widening)."""
    radius = np.broadcast_to(radius, real.lo.shape)
    for got, end in ((real.lo - flt.lo, flt.lo), (flt.hi - real.hi, flt.hi)):
        slack = 16 * np.spacing(np.abs(end))
        assert np.all(got >= radius * (1 - TOL) - slack), "a float term is missing"
        assert np.all(got <= radius * (1 + TOL) + slack), "a float term is too large"


def shared(real: OneLayer, fmt) -> Tables:
    """The real (token, ID) tables with the float format switched on only from here: the later
    steps of the two runs then read the same tables."""
    t = Tables.build(real, N_KEYS)
    out = Tables(t.resid, t.query, t.key, t.value, t.out, fmt, N_KEYS)
    if fmt is not None:
        out.attn_error = out.attention_error(real)  # the same weights
    return out


def test_scores_widen_by_the_dot_rounding_then_the_softmax_shift(pair):
    real, _ = pair
    t_r, t_f = shared(real, None), shared(real, F32)
    for h in range(real.n_heads):
        for qid in (3, 7):
            s = t_r.scores(h, qid)
            q = t_r.query[h][:, qid]
            k = t_r.key[h]
            kt = Iv(k.lo.reshape(-1, k.shape[-1]).T, k.hi.reshape(-1, k.shape[-1]).T)
            r1 = F32.score(q.mag(), kt.mag()).reshape(s.shape)
            mid = Iv(s.lo - r1, s.hi + r1)
            r2 = F32.score_shift(mid.mag().reshape(s.shape[0], -1).max(axis=1), N_KEYS)[:, None, None]
            widened_by(s, t_f.scores(h, qid), r1 + r2)


def test_the_attention_error_by_hand(pair):
    """Σ_h head_error(max|v_h|)·|W_O[h]| + γ_{H·e+1}·(Σ_h (max|v_h| + head_error)·|W_O[h]| + |b_O|)
    + H·e·2^-150, in exact rationals from the tables' largest values."""
    real, flt = pair
    t = Tables.build(flt, N_KEYS)
    H, e, d = real.W_O.shape
    u = Fraction(1, 2**24)
    gam = lambda n: n * u / (1 - n * u)  # noqa: E731
    theta = (1 + 2 * u) * (1 + u) * (1 + 3 * u) ** 4 / (1 - gam(N_KEYS)) - 1
    want = []
    v_max = [v.mag().reshape(-1, e).max(axis=0) for v in t.value]
    for j in range(d):
        moved = summed = Fraction(0)
        for h in range(H):
            for i in range(e):
                err = (theta + gam(N_KEYS) * (1 + theta)) * Fraction(v_max[h][i]) + N_KEYS * Fraction(1, 2**150)
                moved += err * abs(Fraction(real.W_O[h, i, j]))
                summed += (Fraction(v_max[h][i]) + err) * abs(Fraction(real.W_O[h, i, j]))
        want.append(moved + gam(H * e + 1) * (summed + abs(Fraction(real.b_O[j]))) + H * e * Fraction(1, 2**150))
    got = t.attn_error
    for j in range(d):
        assert want[j] <= Fraction(got[j]) <= want[j] * (1 + Fraction(1, 10**5)), j


def test_after_attention_adds_the_attention_error_and_the_residual_sum(pair):
    _, flt = pair
    t = Tables.build(flt, N_KEYS)
    x = Iv(np.full((3, 8), -1.0), np.linspace(-0.5, 2.0, 24).reshape(3, 8))
    moved = Iv(x.lo - t.attn_error, x.hi + t.attn_error)
    widened_by(x, t.after_attention(x), t.attn_error + F32.rounded(moved.mag()))


def test_the_logits_widen_by_both_logits_rounding(pair):
    """logit[t] − logit[o] widened by E_t + E_o, E_o = γ_{d+1}(Σ|x||W_U[:, o]| + |b_U[o]|) + d·2^-150."""
    real, flt = pair
    x = Iv.exact(np.random.default_rng(1).normal(size=(4, 8)))
    target = np.array([0, 3, 5, 3])
    lay = Layout(2, 2, ADDITION.EOS, ADDITION.PLUS, ADDITION.EQUALS)
    d_r = PositionCertifier(real, Tables.build(real, N_KEYS), lay)._differences(x, target)
    d_f = PositionCertifier(flt, Tables.build(flt, N_KEYS), lay)._differences(x, target)
    u = Fraction(1, 2**24)
    g = 9 * u / (1 - 9 * u)
    E = np.array([[float(g * (sum(abs(Fraction(x.lo[r, i])) * abs(Fraction(real.W_U[i, o])) for i in range(8))
                               + abs(Fraction(real.b_U[o]))) + 8 * Fraction(1, 2**150))
                   for o in range(real.W_U.shape[1])] for r in range(4)])
    widened_by(d_r, d_f, E[np.arange(4), target][:, None] + E)


def _form(C: int = 3, seed: int = 0) -> A.Affine:
    rng = np.random.default_rng(seed)
    return A.from_iv(Iv.exact(rng.normal(size=(C, 8))), 0.01 * rng.normal(size=(C, 2, 8)), np.full((C, 8), 0.001))


def test_each_affine_tail_step_adds_its_rounding_to_the_box(pair):
    """From the same input form, each step of the float tail adds to the box exactly the rounding
    of its own input (LN2: (F4) on the input's box; W_in, W_out: (F1) on theirs; GELU: (F5); the
    residual sum: one rounding), and nothing to the generators."""
    real, flt = pair
    x = _form()
    fr, ff = dict(tail_forms(real, x)), dict(tail_forms(flt, x))
    ln2 = F32.layer_norm(x.box(), *real.ln2, LN_EPS)
    assert np.array_equal(ff["ln2"].G, fr["ln2"].G)
    widened_by(Iv(-fr["ln2"].b, fr["ln2"].b), Iv(-ff["ln2"].b, ff["ln2"].b), ln2)
    y = ff["ln2"]  # the float run's later steps read its own (wider) LN2 form
    pre = A.linear(y, real.W_in, real.b_in)
    pre.b = pre.b + F32.dot(y.box().mag(), real.W_in, real.b_in)
    hidden = A.activation(pre, "gelu")
    widened_by(Iv(-hidden.b, hidden.b), Iv(-ff["hidden"].b, ff["hidden"].b), F32.activation(pre.box(), "gelu"))
    out = A.linear_out(ff["hidden"], real.W_out, real.b_out)
    out.b = out.b + F32.dot(ff["hidden"].box().mag(), real.W_out, real.b_out)
    post = A.add(x, out)
    widened_by(Iv(-post.b, post.b), Iv(-ff["mlp"].b, ff["mlp"].b), F32.rounded(post.box().mag()))


def test_the_affine_differences_add_the_final_ln_and_the_logits_rounding(pair):
    real, flt = pair
    post = _form(seed=2)
    target = np.array([1, 4, 0])
    d_r = differences(real, post, target)
    box = post.box()
    ln_err = F32.layer_norm(box, *real.ln_final, LN_EPS)
    inner = A.differences(post, real.ln_final, LN_EPS, real.W_U, real.b_U, target, ln_err)
    rival = np.ones(inner.lo.shape, dtype=bool)
    rival[np.arange(3), target] = False
    assert np.all(inner.lo[rival] < d_r.lo[rival]) and np.all(inner.hi[rival] > d_r.hi[rival])  # the LN's rounding
    lnf = flt.norm("ln_final", box)
    err = F32.dot(lnf.mag(), real.W_U, real.b_U)
    widened_by(inner, differences(flt, post, target), err[np.arange(3), target][:, None] + err)


def test_the_attention_form_adds_the_attention_rounding_to_box_and_hull(pair):
    """attention_form with the float format: the same form as without it on the same (float)
    tables, its box and hull plus attention_rounding of the plain enclosure (N = 2, answer
    position 0, a one-significance window, so that the keys of the other are free)."""
    real, flt = pair
    lay = Layout(2, 2, ADDITION.EOS, ADDITION.PLUS, ADDITION.EQUALS)
    t = Tables.build(flt, N_KEYS)
    forms = []
    for w in (real, flt):
        cert = PositionCertifier(w, t, lay, max_width=1)
        p = cert.inputs(0)
        rows = np.arange(5)
        slots, tq = [(tok[rows], pid) for tok, pid in p.slots], p.query_tok[rows]
        resid = t.resid[:, p.qid][tq]
        forms.append(attention_form(cert, p.heads, slots, tq, resid))
    xr, xf = forms
    assert any(np.any(k["w_free"] > 0) for k in p.heads)  # some keys are free: the form has generators
    assert np.array_equal(xr.G, xf.G) and np.array_equal(xr.c, xf.c)
    plain = resid + real.b_O
    for k in p.heads:
        plain = plain + cert._head(k, slots, tq)[0]
    r = t.attention_rounding(plain)
    widened_by(Iv(-xr.b, xr.b), Iv(-xf.b, xf.b), r)
    widened_by(Iv(-xr.hull, xr.hull), Iv(-xf.hull, xf.hull), r)
    # the plain pass's residual after attention is the same sum, widened the same way
    got, _ = cert.after_attention(p.heads, slots, tq, p.qid)
    widened_by(plain, got, r)
