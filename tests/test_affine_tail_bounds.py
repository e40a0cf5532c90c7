"""The affine tail's pieces (lengthgen.proof.affine) one by one: sound at adversarial points, and as
tight as the exact answer allows.

Soundness against float64 forward passes (LayerNorm with a large deviation from its centre, a form
that is only a box, the final LayerNorm's remainder in the logit differences, the ReLU triangle at
u = 0); tightness against exact values (the ReLU triangle's height u·|l|/(u − l), a polytope block
whose points reach only half the cube's Σ|G_j|) or an independent reference (the GELU relaxation
against the secant's range sampled in float64, the LayerNorm remainder shrinking as the square of
the radius), so that a bound made much wider than it needs to be fails too.
"""
from __future__ import annotations

import numpy as np
import pytest

from lengthgen.proof import affine as A
from tests.test_affine_tail import EPS, TOL, assert_inside, ref_act, ref_ln

# ε ∈ conv{e1, e2}: ε1 + ε2 = 1, ε ≥ 0; with G1 = v and G2 = −v the set is c + t·v, t ∈ [−1, 1]
SIMPLEX_EDGE = ((0, np.eye(2)),)


def edge_form(v: np.ndarray, **parts) -> A.Affine:
    """c = 0 and the two generators ±v in the block SIMPLEX_EDGE: |x − c| ≤ |v| exactly (the cube: 2|v|)."""
    return A.Affine(np.zeros((1, len(v))), np.stack([v, -v])[None], np.zeros((1, len(v))), blocks=SIMPLEX_EDGE, **parts)


def test_relu_triangle_is_the_exact_one():
    """g(x) − αx over [l, u] for ReLU: crossing zero, α = u/(u − l) and the range [0, u·|l|/(u − l)]
    (both ends reach the top, x = 0 the bottom); all negative (u ≤ 0, u = 0 included) α = 0 and all
    positive α = 1, both with the range {0}."""
    l = np.array([-1.0, -3.0, -0.25, -2.0, -1.0, 0.0, 0.5])
    u = np.array([3.0, 0.5, 0.75, -1.0, 0.0, 2.0, 4.0])
    alpha, nu = A.relax(l, u, "relu")
    cross = (l < 0) & (u > 0)
    height = np.where(cross, u * -l / np.where(cross, u - l, 1.0), 0.0)
    assert np.array_equal(alpha, np.where(cross, u / np.where(cross, u - l, 1.0), np.where(u <= 0, 0.0, 1.0)))
    assert np.all(nu.lo == 0.0)
    assert np.all(height <= nu.hi) and np.all(nu.hi <= height * (1 + 1e-15) + 1e-300)
    for x in (l, np.clip(0.0, l, u), u):
        rest = ref_act(x, "relu") - alpha * x
        assert np.all(nu.lo - TOL <= rest) and np.all(rest <= nu.hi + TOL)


def test_gelu_relaxation_is_within_a_few_times_the_best_slopes_range():
    """GELU on [l, u] ⊆ [−3, 3]: g(x) − αx stays in N at 1025 points, and N is at most 8 times as
    wide as the range of g(x) − s·x for the secant slope s (the best slope on a convex or concave
    piece; the mean-value form costs about 4 there, up to 6 near the inflection points ±√2), and
    never wider than g's own range on [l, u] (the flat relaxation)."""
    rng = np.random.default_rng(11)
    l = rng.uniform(-3, 2.5, 400)
    u = np.minimum(l + rng.exponential(0.4, 400), 3.0)
    alpha, nu = A.relax(l, u, "gelu")
    xs = l[:, None] + np.linspace(0, 1, 1025)[None] * (u - l)[:, None]
    gs = ref_act(xs, "gelu")
    rest = gs - alpha[:, None] * xs
    assert np.all(nu.lo[:, None] - TOL <= rest) and np.all(rest <= nu.hi[:, None] + TOL)
    secant = gs - ((gs[:, -1] - gs[:, 0]) / (u - l))[:, None] * xs
    best = secant.max(1) - secant.min(1)
    width = nu.hi - nu.lo
    assert np.all(width <= 8 * best + 1e-9), np.max(width / best)
    assert np.all(width <= 1.001 * (gs.max(1) - gs.min(1)) + 1e-6)  # layers.gelu: a 2e-7 bracket of its minimum


def full_form(seed: int) -> A.Affine:
    """Two rows with generators (two of them in the block SIMPLEX_EDGE), a box, a diagonal block with
    rows R [m, d] and a hull that is below the form's radius in half the coordinates."""
    rng = np.random.default_rng(seed)
    C, d, m = 3, 6, 4
    v = rng.normal(size=(C, d))
    G = np.concatenate([np.stack([v, -v], 1), 0.1 * rng.normal(size=(C, 2, d))], axis=1)
    x = A.Affine(rng.normal(size=(C, d)), G, 0.05 * rng.uniform(size=(C, d)), D=0.2 * rng.uniform(size=(C, m)),
                 R=rng.normal(size=(m, d)), blocks=SIMPLEX_EDGE)
    x.hull = np.where(np.arange(d) % 2 == 0, 0.5, 10.0) * x.radius()
    return x


def test_rows_describe_the_same_sets_as_the_whole_form():
    """Affine.rows keeps each row's generators, box, diagonal block (with the shared R), hull and the
    polytope blocks: the radius of the rows picked is the radius of those rows, bit for bit."""
    x = full_form(0)
    keep = np.array([True, False, True])
    radius = x.radius()
    y = x.rows(keep)
    assert y.R is x.R and y.blocks == x.blocks
    assert np.array_equal(y.radius(), radius[keep])
    assert np.array_equal(x.rows(np.array([2, 0])).radius(), radius[[2, 0]])


def test_a_polytope_block_halves_the_radius_through_every_step():
    """The set c + t·v, t ∈ [−1, 1], written with ε in SIMPLEX_EDGE: its radius is |v| (the cube's
    would be 2|v|), and the block is kept by folded, add, and the logit differences (without
    LayerNorm: exactly |v·(W_U[:, t] − W_U[:, o])| either side of c's)."""
    rng = np.random.default_rng(4)
    v = rng.normal(size=6)
    x = edge_form(v)
    near = lambda got, exact: np.all(exact <= got) and np.all(got <= exact * (1 + 1e-12) + 1e-300)  # noqa: E731
    assert near(x.radius()[0], np.abs(v))
    D, R = 0.1 * rng.uniform(size=(1, 3)), rng.normal(size=(3, 6))
    assert near(A.folded(edge_form(v, D=D, R=R)).radius()[0], np.abs(v) + np.abs(D[0]) @ np.abs(R))
    box = A.Affine(np.zeros((1, 6)), np.zeros((1, 2, 6)), np.full((1, 6), 0.25), blocks=SIMPLEX_EDGE)
    assert near(A.add(x, box).radius()[0], np.abs(v) + 0.25)
    W_U = rng.normal(size=(6, 4))
    diff = A.differences(x, None, EPS, W_U, np.zeros(4), np.array([1]))
    half = np.abs(v @ (W_U[:, [1]] - W_U))
    assert near((diff.hi - diff.lo)[0] / 2, half)


def test_folded_writes_the_diagonal_block_out_and_keeps_the_box_and_the_hull():
    """folded: the activation's identity rows (R None) and W_out's rows R both become generators;
    every vertex of the set, box corners included, lies in the folded box; the hull still caps it."""
    rng = np.random.default_rng(5)
    for R in (None, rng.normal(size=(4, 6))):
        m = 6 if R is None else 4
        x = A.Affine(rng.normal(size=(2, 6)), 0.1 * rng.normal(size=(2, 2, 6)), 0.3 * rng.uniform(size=(2, 6)),
                     D=0.2 * rng.uniform(size=(2, m)), R=R)
        f = A.folded(x)
        assert f.D is None and f.G.shape[1] == 2 + m
        rows = x.D[:, :, None] * (np.eye(m) if R is None else R)[None]
        pts = []
        for _ in range(300):
            e, eta, beta = (rng.choice([-1.0, 1.0], size=(2, n)) for n in (2, m, 6))
            pts.append(x.c + np.einsum("ck,ckd->cd", e, x.G) + np.einsum("cm,cmd->cd", eta, rows) + beta * x.b)
        box = f.box()
        assert_inside(box.lo, box.hi, np.stack(pts, 1), "folded form")
        x.hull = 0.5 * x.radius()
        assert np.all(A.folded(x).radius() <= x.hull)


def test_add_sums_the_boxes_and_refuses_forms_over_other_blocks():
    rng = np.random.default_rng(6)
    x = A.Affine(rng.normal(size=(2, 5)), np.zeros((2, 1, 5)), np.full((2, 5), 0.5))
    y = A.Affine(rng.normal(size=(2, 5)), np.zeros((2, 1, 5)), np.full((2, 5), 0.25))
    assert np.all(A.add(x, y).radius() >= 0.75)
    T = np.eye(1)
    with pytest.raises(AssertionError):
        A.add(A.Affine(x.c, x.G, x.b, blocks=((0, T),)), y)
    with pytest.raises(AssertionError):
        A.add(A.Affine(x.c, x.G, x.b, blocks=((0, T),)), A.Affine(y.c, y.G, y.b, blocks=((1, T),)))


def ln_forms(seed: int, spread: float, scale: float, box: float, k: int = 3, d: int = 8) -> A.Affine:
    """Rows c = 1 + spread·N(0, 1) (|u0| about spread·√d: small spread, a LayerNorm near its eps) with
    k generators of size ``scale`` and a box ``box``."""
    rng = np.random.default_rng(seed)
    return A.Affine(1.0 + spread * rng.normal(size=(4, d)), scale * rng.normal(size=(4, k, d)), np.full((4, d), box))


@pytest.mark.parametrize("spread,scale,box,k,reach", [
    (1.0, 0.2, 0.0, 1, 0.3), (1.0, 0.05, 0.0, 1, 0.3), (0.001, 0.001, 0.0, 1, 0.3), (0.005, 0.002, 0.0, 1, 0.2),
    (1.0, 0.3, 0.0, 3, 0.01), (1.0, 0.0, 0.2, 0, 0.01), (0.05, 0.0, 0.01, 0, 1e-7), (1.0, 0.2, 0.1, 2, 0.01)])
def test_layer_norm_remainder_holds_far_from_the_centre(spread, scale, box, k, reach):
    """|LN(x) − LN(c) − (x − c)J| ≤ rem at points of the set (half of them vertices ε = ±1 with box
    corners ±b), for deviations up to a fifth of |u0| (the second-order terms count) and for q near
    eps (spread 0.001: s near 1/√eps), and for forms that are only a box. One generator: the float64
    error comes within ``reach`` of rem (the samples come near the bound: not vacuous)."""
    rng = np.random.default_rng(7)
    x = ln_forms(5, spread, scale, box, k)
    d = x.c.shape[1]
    params = (1.0 + 0.3 * rng.normal(size=d), rng.normal(size=d))
    _, J, rem = A.mean_value_ln(x, params, EPS)
    worst = 0.0
    for i in range(400):
        draw = (lambda n: rng.choice([-1.0, 1.0], size=(4, n))) if i % 2 else (lambda n: rng.uniform(-1, 1, (4, n)))
        dx = np.einsum("ck,ckd->cd", draw(k), x.G) + draw(d) * x.b
        err = np.abs(ref_ln(x.c + dx, params) - ref_ln(x.c, params) - np.einsum("cj,cji->ci", dx, J))
        assert np.all(err <= rem + TOL)
        worst = max(worst, float((err / rem).max()))
    assert worst > reach, worst


def test_layer_norm_remainder_is_second_order():
    """With eps = 0.1 (a float Jacobian built with the wrong eps would be off by about eps/q): shrinking
    the form tenfold shrinks the remainder about a hundredfold (second order), down to the float
    terms of the Jacobian, about 1e-15 of the radius."""
    rng = np.random.default_rng(8)
    d = 8
    params = (1.0 + 0.3 * rng.normal(size=d), rng.normal(size=d))
    rems = []
    for scale in (1e-3, 1e-4):
        x = A.Affine(np.linspace(-1, 1, d)[None], scale * np.eye(d)[None, :3],
                     np.full((1, d), scale / 2))
        rems.append(A.mean_value_ln(x, params, 0.1)[2])
    assert np.all(rems[1] <= rems[0] / 50), (rems[1] / rems[0]).max()


def segment(spread: float, radial: bool, a: float, d: int = 8) -> tuple[A.Affine, tuple[np.ndarray, np.ndarray]]:
    """The form c + t·v, t ∈ [−1, 1], c = spread·z (z centred), v = a·spread times z (radial) or
    times a centred direction orthogonal to z of the same length; and LayerNorm parameters."""
    rng = np.random.default_rng(3)
    z = rng.normal(size=d)
    z -= z.mean()
    o = rng.normal(size=d)
    o -= o.mean()
    o -= (o @ z) / (z @ z) * z
    params = (1.0 + 0.3 * rng.normal(size=d), rng.normal(size=d))
    v = a * spread * (z if radial else o * np.linalg.norm(z) / np.linalg.norm(o))
    return A.Affine(spread * z[None], v[None, None], np.zeros((1, d))), params


@pytest.mark.parametrize("spread,radial,a,reach", [(1.0, False, 0.1, 0.9), (0.001, False, 0.3, 0.8),
                                                   (0.001, True, 0.5, 0.38), (0.001, True, 0.8, 0.3)])
def test_layer_norm_remainder_is_reached_across_and_along_u0(spread, radial, a, reach):
    """The segment c + t·v, t ∈ [−1, 1]: v orthogonal to u0 (Δs is then all second order,
    −s³|Δu|²/(2d), which rem's first term bounds to leading order: the error reaches 0.9 of it), or
    v = a·u0 where q is near eps (|u0|²/d ≈ eps/10: the Taylor remainder of s in q counts, with s
    at the segment's smallest q). The float64 error stays below rem and comes within ``reach`` of it
    (along u0 within 10% of what the remainder reaches: a Δq bound a half larger shows)."""
    x, params = segment(spread, radial, a)
    _, J, rem = A.mean_value_ln(x, params, EPS)
    dx = np.linspace(-1, 1, 2001)[:, None] * x.G[0, 0]
    err = np.abs(ref_ln(x.c + dx, params) - ref_ln(x.c, params) - dx @ J[0])
    assert np.all(err <= rem + TOL)
    assert (err / rem).max() > reach, (err / rem).max()


def test_logit_differences_carry_the_final_layer_norms_remainder():
    """The segment across u0 (the LayerNorm remainder is reached there) through the final LayerNorm
    and W_U: the logit differences of the float64 forward pass along it stay inside the enclosure,
    which the linear part alone (LN(c) and (x − c)·J·U) would not hold at both ends."""
    x, params = segment(1.0, False, 0.3)
    rng = np.random.default_rng(9)
    W_U, b_U = rng.normal(size=(8, 5)), rng.normal(size=5)
    target = np.array([2])
    diff = A.differences(x, params, EPS, W_U, b_U, target)
    logits = ref_ln(x.c + np.linspace(-1, 1, 2001)[:, None] * x.G[0, 0], params) @ W_U + b_U
    assert_inside(diff.lo, diff.hi, (logits[:, target] - logits)[None], "logit differences")
    _, J, rem = A.mean_value_ln(x, params, EPS)
    U = W_U[:, target] - W_U
    centre, lin = ref_ln(x.c, params)[0] @ U, np.abs(x.G[0, 0] @ J[0] @ U)
    outside = (logits[:, target] - logits < centre - lin) | (logits[:, target] - logits > centre + lin)
    assert outside[:, [o for o in range(5) if o != 2]].any(axis=0).all()


def test_from_iv_puts_the_centres_radius_into_the_box():
    """The attention's centre is an interval (the residual's enclosure, not only a rounding): every
    point of [lo, hi] plus the generators and the box lies in the form's box."""
    rng = np.random.default_rng(10)
    lo = rng.normal(size=(2, 5))
    hi = lo + rng.uniform(0.5, 1.0, size=(2, 5))
    G, b = 0.1 * rng.normal(size=(2, 3, 5)), np.full((2, 5), 0.05)
    box = A.from_iv(A.Iv(lo, hi), G, b).box()
    ends = [end + s * (np.abs(G).sum(1) + b) for end, s in ((lo, -1.0), (hi, 1.0))]
    assert_inside(box.lo, box.hi, np.stack(ends, 1), "from_iv")


def test_layer_norm_remainder_uses_the_polytope_block():
    """The segment c + t·v written with one generator, and with ±v in SIMPLEX_EDGE: the same set.
    The block's remainder stays within 2.2 times the one generator's (norm_bound sees the cube's
    2|v|, which costs up to 1.85 here); |u0·Δx| bounded over the cube instead (2|u0·v|) costs 2.5
    to 3.9."""
    x, params = segment(1.0, False, 0.1)
    v = x.G[0, 0] + 0.05 * (x.c[0] - x.c[0].mean())  # some of it along u0: u0·Δx is not 0
    one = A.mean_value_ln(A.Affine(x.c, v[None, None], x.b), params, EPS)[2]
    two = A.mean_value_ln(A.Affine(x.c, np.stack([v, -v])[None], x.b, blocks=SIMPLEX_EDGE), params, EPS)[2]
    assert np.all(two <= 2.2 * one), (two / one).max()


@pytest.mark.parametrize("d,tau", [(64, 0.3), (256, 0.38)])
def test_layer_norm_remainder_holds_where_u_shrinks_toward_zero(d, tau):
    """u0 = e0 − e1 (q0 = 2/d) and v = −τ·u0 + 0.1·e2: toward t = 1 the set shrinks u by a factor
    1 − τ, q drops by about 2τ·q0 and s grows by more than its first-order change s0·τ. Coordinate 2
    (u0_2 = 0) moves by Δu_2·Δs: rem covers it only through the Taylor remainder (3/8)·s_max⁵·Δq² at
    the smallest q of the set (without it, or with s_max at q0 + Δq or at q ≥ 1, the float64 error
    exceeds rem by 7-12%)."""
    u0 = np.zeros(d)
    u0[0], u0[1] = 1.0, -1.0
    v = -tau * u0
    v[2] = 0.1
    params = (np.ones(d), np.zeros(d))
    x = A.Affine(u0[None], v[None, None], np.zeros((1, d)))
    _, J, rem = A.mean_value_ln(x, params, EPS)
    dx = np.linspace(-1, 1, 401)[:, None] * v
    err = np.abs(ref_ln(u0 + dx, params) - ref_ln(u0, params) - dx @ J[0])
    assert np.all(err <= rem + TOL)


def test_the_change_of_the_mean_square_is_bounded_where_it_is_attained():
    """|Δq| for q = |u|²/d with Δu along u0: Δq = (2|u0||Δu| + |Δu|²)/d exactly (worked out in
    rationals), so the bound from A = |u0·Δu| and Q = |Δu|² must reach it; dropping or flipping
    either term falls short. Three widths, three directions."""
    from fractions import Fraction

    for u0, scale in (([1, -1], 2), ([3, -1, -2], Fraction(1, 2)), ([5, 1, -2, -4], Fraction(3, 4))):
        d = len(u0)
        du = [scale * v for v in u0]  # Δu = scale·u0 (centred as u0 is)
        A_exact = sum(Fraction(a) * b for a, b in zip(u0, du))
        Q_exact = sum(b * b for b in du)
        dq_exact = (sum((a + b) ** 2 for a, b in zip(u0, du)) - sum(Fraction(a) ** 2 for a in u0)) / d
        assert dq_exact == (2 * A_exact + Q_exact) / d
        bound = A.q_change_bound(np.array([float(A_exact)]), np.array([float(Q_exact)]), d)
        assert Fraction(float(bound[0])) >= dq_exact
        assert float(bound[0]) <= float(dq_exact) * (1 + 1e-14)  # and not much more
