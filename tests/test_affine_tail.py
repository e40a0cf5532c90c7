"""The affine tail (lengthgen.proof.affine) against float64 forward passes of an independent reference.

Random small tails (LayerNorm, GELU or ReLU MLP, final LayerNorm, unembedding) and random affine
sets wide enough that linearization errors are far above float noise: every point sampled from a
set (the vertices ε = ±1, the box corners and random interior points) must land inside each
stage's enclosure and inside the logit-difference enclosure.
"""
from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import mpmath
import numpy as np
import pytest

from lengthgen.proof import affine as A
from lengthgen.proof.trained_affine import tail_forms

EPS = 1e-5
TOL = 1e-9  # the reference's own float64 error is ~1e-14
ERF = np.vectorize(math.erf)


def ref_ln(x: np.ndarray, params) -> np.ndarray:
    if params is None:
        return x
    w, b = params
    cen = x - x.mean(-1, keepdims=True)
    return cen / np.sqrt((cen * cen).mean(-1, keepdims=True) + EPS) * w + b


def ref_act(x: np.ndarray, act: str) -> np.ndarray:
    return np.maximum(x, 0.0) if act == "relu" else x * 0.5 * (1.0 + ERF(x / math.sqrt(2.0)))


def random_tail(seed: int, act: str, d: int = 8, m: int = 24, V: int = 6, ln: bool = True) -> SimpleNamespace:
    rng = np.random.default_rng(seed)
    norm = (lambda: (1.0 + 0.3 * rng.standard_normal(d), 0.1 * rng.standard_normal(d))) if ln else (lambda: None)
    return SimpleNamespace(ln2=norm(), ln_final=norm(), act=act, fmt=None,  # the real-number function
                           W_in=rng.standard_normal((d, m)) / math.sqrt(d), b_in=0.3 * rng.standard_normal(m),
                           W_out=rng.standard_normal((m, d)) / math.sqrt(m), b_out=0.1 * rng.standard_normal(d),
                           W_U=rng.standard_normal((d, V)), b_U=0.1 * rng.standard_normal(V))


def random_form(seed: int, C: int = 3, k: int = 4, d: int = 8, scale: float = 0.01, box: float = 0.005) -> A.Affine:
    """Box 0: a pure zonotope, whose vertices reach the extremes of the linear part exactly, so a
    missing second-order remainder shows."""
    rng = np.random.default_rng(seed + 100)
    return A.Affine(rng.standard_normal((C, d)), scale * rng.standard_normal((C, k, d)), np.full((C, d), box))


def points(x: A.Affine, seed: int, n_random: int = 200) -> np.ndarray:
    """[C, P, d]: every ε vertex with both extreme box corners, and random interior points."""
    rng = np.random.default_rng(seed + 200)
    C, k, d = x.G.shape
    eps = [np.array(v) for v in itertools.product((-1.0, 1.0), repeat=k)]
    beta = [np.ones(d), -np.ones(d)]
    pts = [(e, s) for e in eps for s in beta] + [(rng.uniform(-1, 1, k), rng.uniform(-1, 1, d)) for _ in range(n_random)]
    return np.stack([x.c + np.einsum("k,ckd->cd", e, x.G) + s * x.b for e, s in pts], axis=1)


def reference(w: SimpleNamespace, pts: np.ndarray, target: np.ndarray) -> dict[str, np.ndarray]:
    y = ref_ln(pts, w.ln2)
    hidden = ref_act(y @ w.W_in + w.b_in, w.act)
    post = pts + hidden @ w.W_out + w.b_out
    logits = ref_ln(post, w.ln_final) @ w.W_U + w.b_U
    diff = np.take_along_axis(logits, target[:, None, None], axis=-1) - logits
    return {"ln2": y, "hidden": hidden, "mlp": post, "diff": diff}


def assert_inside(lo: np.ndarray, hi: np.ndarray, values: np.ndarray, what: str) -> None:
    """values [C, P, ...] inside [lo, hi] [C, ...]; and the enclosure is finite (a test that can fail)."""
    assert np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)), what
    below = lo[:, None] - TOL - values
    above = values - hi[:, None] - TOL
    assert below.max() <= 0 and above.max() <= 0, (what, below.max(), above.max())


@pytest.mark.parametrize("act,ln,box", [("gelu", True, 0.005), ("relu", True, 0.005), ("gelu", False, 0.005),
                                        ("gelu", True, 0.0), ("relu", True, 0.0)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_affine_enclosures_contain_forward_passes(act, ln, box, seed):
    w = random_tail(seed, act, ln=ln)
    x = random_form(seed, box=box)
    target = np.arange(len(x.c)) % w.W_U.shape[1]
    ref = reference(w, points(x, seed), target)
    for name, form in tail_forms(w, x):
        box = form.box()
        assert_inside(box.lo, box.hi, ref[name], name)
    diff = A.differences(tail_forms(w, x)[-1][1], w.ln_final, EPS, w.W_U, w.b_U, target)
    assert_inside(diff.lo, diff.hi, ref["diff"], "logit differences")
    # not vacuous: the enclosure is within a few times the spread the samples reach
    spread = ref["diff"].max(axis=1) - ref["diff"].min(axis=1)
    assert np.all(diff.hi - diff.lo <= 300 * spread + 1e-6), (diff.hi - diff.lo, spread)


def test_affine_beats_plain_intervals_on_correlated_sets():
    """One direction of change (a single generator) in d = 8: the interval box of the set loses the
    direction, the affine form keeps it; the logit enclosure is several times narrower."""
    from lengthgen.proof.interval import Iv
    from lengthgen.proof.layers import affine_exact, gelu, layer_norm

    w = random_tail(5, "gelu")
    x = random_form(5, k=1, scale=0.1)
    target = np.zeros(len(x.c), dtype=np.int64)
    aff = A.differences(tail_forms(w, x)[-1][1], w.ln_final, EPS, w.W_U, w.b_U, target)
    box = x.box()
    post = box + affine_exact(gelu(affine_exact(layer_norm(box, *w.ln2, EPS), w.W_in, w.b_in)), w.W_out, w.b_out)
    final = layer_norm(post, *w.ln_final, EPS)
    plain = Iv(np.empty_like(aff.lo), np.empty_like(aff.hi))
    for r in range(len(x.c)):
        d = affine_exact(final[r:r + 1], w.W_U[:, [0]] - w.W_U) + (w.b_U[0] - w.b_U)
        plain.lo[r], plain.hi[r] = d.lo[0], d.hi[0]
    assert np.median((plain.hi - plain.lo) / (aff.hi - aff.lo)) > 3


def test_gelu_slope_range_and_constants():
    old = mpmath.mp.dps
    mpmath.mp.dps = 40
    try:
        peak = mpmath.ncdf(mpmath.sqrt(2)) + mpmath.sqrt(2) * mpmath.npdf(mpmath.sqrt(2))
        assert A.GP_MAX >= peak and A.GP_MAX - peak < 1e-6 and A.GP_MIN <= 1 - peak
    finally:
        mpmath.mp.dps = old
    rng = np.random.default_rng(0)
    l = rng.uniform(-6, 6, 400)
    u = l + rng.exponential(1.0, 400)
    rng_iv = A.gelu_slope_range(l, u)
    t = np.linspace(0, 1, 257)
    xs = l[:, None] + t[None] * (u - l)[:, None]
    slope = 0.5 * (1 + ERF(xs / math.sqrt(2))) + xs * np.exp(-xs * xs / 2) / math.sqrt(2 * math.pi)
    assert np.all(rng_iv.lo[:, None] - 1e-12 <= slope) and np.all(slope <= rng_iv.hi[:, None] + 1e-12)
    assert np.all(rng_iv.hi - rng_iv.lo <= slope.max(1) - slope.min(1) + 1e-4)  # tight: about the sampled range


@pytest.mark.parametrize("act", ["gelu", "relu"])
def test_relaxation_holds_pointwise(act):
    rng = np.random.default_rng(3)
    l = rng.uniform(-5, 5, 300)
    u = l + rng.exponential(1.5, 300)
    alpha, nu = A.relax(l, u, act)
    xs = l[:, None] + np.linspace(0, 1, 513)[None] * (u - l)[:, None]
    rest = ref_act(xs, act) - alpha[:, None] * xs
    assert np.all(nu.lo[:, None] - TOL <= rest) and np.all(rest <= nu.hi[:, None] + TOL)


@pytest.mark.parametrize("seed", range(4))
def test_layernorm_remainder_counts_the_mlp_generators(seed):
    """After the MLP the form carries a diagonal block (each hidden unit's relaxation error η_i·D_i
    times W_out's row R_i) beside its generators: the final LayerNorm's first-order term |u0·Δx| and
    its remainder must count it. Forms made of that block alone (no G, no box): at every sampled
    point x, |LN(x) − LN(c) − (x − c)J| ≤ rem, and :func:`apply_ln`'s box holds LN(x)."""
    rng = np.random.default_rng(seed)
    d, m, worst = 8, 6, 0.0
    for _ in range(40):
        c = rng.normal(size=(1, d))  # small deviations: the remainder is second order, |u0·Δx| first order
        x = A.Affine(c, np.zeros((1, 0, d)), np.zeros((1, d)), D=np.abs(rng.normal(size=(1, m))) * rng.uniform(0.005, 0.05),
                     R=rng.normal(size=(m, d)))
        params = (rng.normal(size=d), rng.normal(size=d))
        _, J, rem = A.mean_value_ln(x, params, EPS)
        box = A.apply_ln(x, params, EPS).box()
        eta = rng.choice([-1.0, 1.0], size=(200, m)) * rng.uniform(size=(200, m)) ** 0.2  # mostly near vertices
        dx = (eta * x.D[0]) @ x.R
        exact = ref_ln(c + dx, params)
        err = np.abs(exact - ref_ln(c, params) - dx @ J[0])
        worst = max(worst, float((err / rem[0]).max()))
        assert_inside(box.lo, box.hi, exact[None], "LN of a form with a diagonal block")
    assert worst <= 1.0, worst
    assert worst > 0.05  # the samples come near the bound: the test can see a remainder that is too small


def test_norm_bound_holds_and_is_exact_for_aligned_generators():
    """|x − c| over the set: sampled vertices stay below :func:`norm_bound` (generators, the MLP's
    diagonal block with rows R or the identity, the box); generators that all point along one v
    (including the box corner b = β·|v|) reach it exactly: (g + ΣD + β)·|v|."""
    rng = np.random.default_rng(7)
    for R in (rng.normal(size=(5, 8)), None):
        m = 5 if R is not None else 8
        x = A.Affine(rng.normal(size=(2, 8)), 0.1 * rng.normal(size=(2, 3, 8)), 0.02 * rng.uniform(size=(2, 8)),
                     D=0.05 * rng.uniform(size=(2, m)), R=R)
        rows = x.D[:, :, None] * (np.eye(m) if R is None else R)[None]
        H = np.concatenate([x.G, rows], axis=1)
        for _ in range(300):
            e = rng.choice([-1.0, 1.0], size=(2, H.shape[1]))
            dx = np.einsum("cp,cpd->cd", e, H) + rng.choice([-1.0, 1.0], size=(2, 8)) * x.b
            assert np.all(np.linalg.norm(dx, axis=1) <= A.norm_bound(x))
    v = rng.normal(size=8)
    g, D, beta = 0.3, np.array([0.1, 0.2, 0.05]), 0.07
    aligned = A.Affine(np.zeros((1, 8)), g * v[None, None], beta * np.abs(v)[None], D=D[None], R=np.stack([v] * 3))
    reach = (g + D.sum() + beta) * np.linalg.norm(v)
    assert reach <= A.norm_bound(aligned)[0] <= reach * (1 + 1e-12)
    D8 = rng.uniform(0.1, 1, size=8)  # identity rows and a generator equal to D: the vertex ε = η = 1 gives 2·|D|
    same = A.Affine(np.zeros((1, 8)), D8[None, None], np.zeros((1, 8)), D=D8[None])
    reach = 2 * np.linalg.norm(D8)
    assert reach <= A.norm_bound(same)[0] <= reach * (1 + 1e-12)


def test_a_polytope_block_bounds_every_point_and_reaches_a_vertex():
    """gen_abs: for generators whose ε lie in conv(rows of T) (the attention's pyramid), every convex
    combination of T's rows stays within the bound, a vertex reaches it (up to the 4u slack of float
    vertex coordinates), and it is never above the cube's Σ|G_j|; generators outside the block add
    their Σ|G_j|."""
    rng = np.random.default_rng(3)
    C, k, n = 2, 7, 5
    G = rng.normal(size=(C, k, n))
    T = np.concatenate([[[-1.0, 0, 0, 0]], np.concatenate([np.ones((6, 1)), rng.uniform(-1, 1, (6, 3))], axis=1)])
    bound = A.gen_abs(G, ((1, T),))
    outside = np.abs(G[:, [0, 5, 6]]).sum(1)
    assert np.all(bound <= A.sum_up(np.abs(G), 1)) and np.all(bound >= outside)
    reach = outside + np.abs(np.einsum("kj,cjn->ckn", T, G[:, 1:5])).max(1)
    assert np.all(reach <= bound) and np.all(bound <= reach * (1 + 1e-12) + 1e-12)
    for _ in range(200):
        alpha = rng.dirichlet(np.ones(len(T)))
        eps = np.concatenate([rng.choice([-1.0, 1.0], size=(C, 1)), np.broadcast_to(alpha @ T, (C, 4)),
                              rng.choice([-1.0, 1.0], size=(C, 2))], axis=1)
        assert np.all(np.abs(np.einsum("ck,ckn->cn", eps, G)) <= bound)
