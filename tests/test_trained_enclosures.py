"""The enclosures of the trained-model certificate against what the model really computes, each
with an oracle of its own: the free values' hull (:func:`lengthgen.proof.trained_affine.free_values`)
against points laid out by hand, each head's plain enclosure and the attention form against the
float64 model's own activations for every assignment of the free digits, the tail of a model
without an MLP against a float64 reference, random models of every covered shape against their
forward passes, and how the plain and the affine passes combine.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from lengthgen.proof.interval import Iv
from lengthgen.proof.trained_affine import free_values
from lengthgen.tasks import ADDITION
from tests.test_trained_mutants import DECISION_MARGIN, START, certifier


@pytest.mark.parametrize("scale,second", [(1.0, "high"), (1e-6, "high"), (1.0, "low")])
def test_free_values_on_a_segment_keep_one_axis_and_no_box(scale, second):
    """Free value vectors on a segment away from the origin, long or very short: the enclosure is the
    segment itself (one generator of half its length, a centre of width ~0 at its midpoint) and
    every vector is inside it; a basis from uncentred points, of the wrong rank or that drops a
    short axis would add a generator or a box. ``second``: where the second free key's values lie
    (their mean above or below the segment's midpoint, so that the midpoint lies on either side of
    the mean whichever way the axis points)."""
    start, step = np.array([3.0, -1.0, 2.0]) * scale, np.array([0.5, 0.25, -0.125]) * scale
    pts = np.zeros((10, 4, 3))
    for tok in range(10):
        for pid in range(4):
            pts[tok, pid] = start + (tok + pid) * step
    W_O = np.eye(3)
    other = (np.arange(3, 7), 3) if second == "high" else (np.arange(1, 5), 0)
    fv = free_values(Iv.exact(pts), [(np.arange(10), 1), other], W_O)
    lo_t, hi_t = 1, 10  # t = tok + pid over [1, 10] (ID 1), and [6, 9] (ID 3) or [1, 4] (ID 0)
    assert fv["gens"].shape[0] == 1
    g = fv["gens"][0]
    assert np.allclose(np.abs(g), np.abs(step) * (hi_t - lo_t) / 2, rtol=1e-12, atol=0)
    mid = start + step * (lo_t + hi_t) / 2
    tol = 1e-12 * scale
    assert np.all(fv["centre"].lo <= mid + tol) and np.all(mid - tol <= fv["centre"].hi)
    assert np.all(fv["centre"].hi - fv["centre"].lo < tol)
    for t in range(lo_t, hi_t + 1):  # each vector = centre + τ·g with |τ| ≤ 1 (up to rounding)
        v = start + t * step
        tau = np.dot(v - mid, g) / np.dot(g, g)
        assert abs(tau) <= 1 + 1e-12 and np.allclose(mid + tau * g, v, rtol=0, atol=tol)
    # the pyramid conv{(−1, 0), (1, τ_k)} of (2μ − 1, μ·τ): the apex, then one row per distinct value
    sign = np.sign(np.dot(step, g))
    taus = sorted({(t - (lo_t + hi_t) / 2) / ((hi_t - lo_t) / 2) for t in range(lo_t, hi_t + 1)})
    vertices = fv["vertices"]
    assert np.array_equal(vertices[0], [-1.0, 0.0]) and np.all(vertices[1:, 0] == 1.0)
    assert np.allclose(sorted(sign * vertices[1:, 1]), taus, rtol=0, atol=1e-12)


def test_free_values_that_are_all_equal_have_no_generator():
    pts = np.broadcast_to(np.array([1.0, 2.0, -3.0]), (10, 4, 3)).copy()
    fv = free_values(Iv.exact(pts), [(np.arange(10), 1), (np.arange(4), 2)], np.eye(3))
    assert fv["gens"].shape[0] == 0
    assert np.all(fv["centre"].lo <= pts[0, 0]) and np.all(pts[0, 0] <= fv["centre"].hi)
    assert np.all(fv["centre"].hi - fv["centre"].lo < 1e-12)


def test_the_tail_of_a_model_without_an_mlp_is_its_layer_norm():
    """No MLP: the forms are LN2 of the residual (which nothing reads) and the residual itself, and
    the logit differences enclose the float64 ones."""
    from tests.test_affine_tail import EPS, assert_inside, points, random_form, random_tail, ref_ln

    from lengthgen.proof import affine as A
    from lengthgen.proof.trained_affine import tail_forms

    w = random_tail(0, "gelu")
    w.W_in = w.b_in = w.W_out = w.b_out = None
    x = random_form(0)
    pts = points(x, 0)
    forms = tail_forms(w, x)
    assert [name for name, _ in forms] == ["ln2", "mlp"]
    for (name, form), ref in zip(forms, (ref_ln(pts, w.ln2), pts)):
        box = form.box()
        assert_inside(box.lo, box.hi, ref, name)
    target = np.arange(len(x.c)) % w.W_U.shape[1]
    logits = ref_ln(pts, w.ln_final) @ w.W_U + w.b_U
    diff = A.differences(forms[-1][1], w.ln_final, EPS, w.W_U, w.b_U, target)
    assert_inside(diff.lo, diff.hi, np.take_along_axis(logits, target[:, None, None], axis=-1) - logits, "differences")


def random_model(seed: int, normalization: str | None = "LN", act: str = "gelu", d_mlp: int = 16,
                 attn_scale: float | None = None) -> torch.nn.Module:
    """A float64 1-layer model of the addition vocabulary with every parameter random (the
    initialisation zeroes some, e.g. biases), LayerNorm gains near 1."""
    from lengthgen.model import Transformer, TransformerConfig

    torch.manual_seed(seed)
    cfg = TransformerConfig(d_vocab=len(ADDITION.vocab), d_model=12, n_heads=2, d_head=6, d_mlp=d_mlp, n_ctx=12,
                            act_fn=act, normalization=normalization, attn_scale=attn_scale, dtype="float64")
    model = Transformer(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.5)
            if name.endswith(".w"):
                p.add_(1.0)
    return model


@pytest.mark.parametrize("normalization,act,d_mlp,attn_scale", [
    ("LN", "gelu", 16, None), (None, "relu", 16, 2.0), ("LN", "relu", 0, None), (None, "gelu", 0, 3.0)])
def test_random_models_of_every_covered_shape_are_enclosed(normalization, act, d_mlp, attn_scale):
    """Random 1-layer models with and without LayerNorm, an MLP (GELU or ReLU) or the 1/sqrt(d_head)
    score scale: every real logit difference of every 1-digit pair (and of random 2-digit pairs)
    lies in its configuration's enclosure, and every miss is unproven (the float64 model is the
    oracle, through tests/test_certify_trained.py's ``assert_sound``). Such models get every sum
    wrong, so what this pins is the enclosures, not what they prove."""
    from tests.test_certify_trained import all_pairs, assert_sound

    model = random_model(int(d_mlp + (attn_scale or 0) * 10), normalization, act, d_mlp, attn_scale)
    for tail in ("interval", "both"):
        assert_sound(model, 1, all_pairs(1), exhaustive=True, tail=tail)
    rng = np.random.default_rng(0)
    pairs = [(int(a), int(b)) for a, b in zip(rng.integers(10, 100, 200), rng.integers(10, 100, 200))]
    assert_sound(model, 2, pairs, exhaustive=False, tail="interval")
    narrow = assert_sound(model, 2, pairs[:60], exhaustive=False, tail="both", max_width=1)  # free keys
    assert max(r.max_free_share for r in narrow["results"]) > 0.5


def test_the_attention_form_holds_free_values_anywhere_in_a_wide_centre_box():
    """The form encloses ``resid + b_O + Σ_h o_fixed + λ·(v_free − v_fixed)·W_O[h]`` for every
    λ ∈ [0, λ⁺] and every v_free in ``free_values``' set: with that set's centre box widened by
    ±0.05 (as a rank the float basis drops would widen it), a real free key's value moved to the
    corner of the box that pushes each output coordinate furthest must stay inside the form's own
    enclosure (without the plain pass's hull, which knows nothing of the widening)."""
    from lengthgen.proof.trained_affine import attention_form
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)
    cert = certifier(2, model, max_width=1, tail="affine")
    w = cert.w
    p = cert.inputs(3, sample=40)  # '$' at 2 digits: both heads give their free keys 1-4%
    widen = 0.05
    heads = []
    for k in p.heads:
        fv = dict(k["free_v"])
        fv["centre"] = Iv(fv["centre"].lo - widen, fv["centre"].hi + widen)
        heads.append({**k, "free_v": fv})
    resid = cert.t.resid[:, p.qid][p.query_tok]
    x = attention_form(cert, heads, p.slots, p.query_tok, resid)
    x.hull = None
    r = x.radius()
    point = resid.center_radius()[0] + w.b_O
    free_tok, free_id = cert._free_slots(3, *p.window)[0]  # one free key and a value it can carry
    for sign in (1, -1):  # both heads at λ⁺, their values at the corner that raises (lowers) output j
        total = point.copy()
        for h, k in enumerate(heads):
            fixed_o, lam = cert.fixed_mean(k, p.slots, p.query_tok, "eo")
            fixed_v, _ = cert.fixed_mean(k, p.slots, p.query_tok, "ev")
            assert lam.max() > 1e-3
            v_k = cert.t.value[h].center_radius()[0][free_tok[0], free_id]
            W = w.W_O[h]
            moved = (v_k[None] - fixed_v.center_radius()[0]) @ W + sign * (np.abs(W) * widen).sum(axis=0)[None]
            total = total + fixed_o.center_radius()[0] + lam[:, None] * moved
        assert np.all(np.abs(total - x.c) <= r + 1e-9), float((np.abs(total - x.c) - r).max())


def test_the_affine_pass_reaches_every_row_it_is_given():
    """``_tighten`` sends every unproven row through the affine tail, chunk after chunk: given 300
    rows with no bound at all (more than two chunks), each comes back finite."""
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)
    cert = certifier(2, model, tail="affine")
    p = cert.inputs(1, sample=300)  # c_0 predicts c_1: window (0, 1), no free keys
    assert len(p.a) == 300
    diff = Iv(np.full((300, cert.V), -np.inf), np.full((300, cert.V), np.inf))
    cert._tighten(diff, np.arange(300), p.heads, p.slots, p.query_tok, p.target, p.qid)
    assert np.all(np.isfinite(diff.lo)) and np.all(np.isfinite(diff.hi))


def test_both_tails_are_the_plain_pass_tightened_by_the_affine_one_where_it_fails():
    """``tail="both"``: the plain enclosure where it proves the configuration, its intersection with
    the affine tail's own enclosure (``tail="affine"``) where it does not; and the smallest margin
    reported is the smallest lower end over the proven configurations' other tokens."""
    from lengthgen import certify as cli
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)
    runs = {tail: cli.certify(model, 2, START, max_width=1, keep_enclosures=True, tail=tail, positions=[2])
            for tail in ("interval", "affine", "both")}
    for plain, affine, both in zip(*runs.values()):
        target = np.argmin(np.abs(plain.enclosures[3]) + np.abs(plain.enclosures[4]), axis=1)  # its own entry: [0, 0]
        low = plain.enclosures[3].copy()
        low[np.arange(len(low)), target] = np.inf
        proven_plain = low.min(axis=1) > DECISION_MARGIN
        assert proven_plain.any() and not proven_plain.all()  # c_1 at 2 digits, window {1}: 148 of 162
        expect_lo = np.where(proven_plain[:, None], plain.enclosures[3], np.fmax(plain.enclosures[3], affine.enclosures[3]))
        expect_hi = np.where(proven_plain[:, None], plain.enclosures[4], np.fmin(plain.enclosures[4], affine.enclosures[4]))
        # the same numbers up to the float rounding of batched products (rows are batched differently)
        assert np.allclose(both.enclosures[3], expect_lo, rtol=1e-9, atol=1e-12)
        assert np.allclose(both.enclosures[4], expect_hi, rtol=1e-9, atol=1e-12)
        assert np.abs(affine.enclosures[3] - both.enclosures[3]).max() > 1e-3  # the affine tail alone, not both
        low_both = both.enclosures[3].copy()
        low_both[np.arange(len(low)), target] = np.inf
        proven = low_both.min(axis=1) > DECISION_MARGIN
        assert both.min_margin == pytest.approx(low_both[proven].min(), rel=1e-9)


def test_the_free_keys_output_box_is_the_hull_of_their_real_outputs():
    """Answer position 0 at 2 digits with a one-significance window: the free keys are a_1 and b_1
    (1-9 at ID s). Per head, the plain pass's box of their head outputs is the coordinate-wise hull
    of value·W_O over those tokens, computed here from the model's own modules in float64: it
    contains each and is reached on every coordinate (within 10⁻⁹)."""
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)
    m64 = copy.deepcopy(model).to(torch.float64)
    cert = certifier(2, model, max_width=1, tail="interval")
    p = cert.inputs(0)
    assert p.window == (0, 0)
    attn = m64.blocks[0].attn
    with torch.no_grad():
        toks = torch.arange(1, 10)
        resid = m64.embed.W_E[toks] + m64.pos_embed.W_pos[START]  # a_1 / b_1: the leading digits, ID s
        x = m64.blocks[0].ln1(resid)
        for h, k in enumerate(p.heads):
            outs = ((x @ attn.W_V[h] + attn.b_V[h]) @ attn.W_O[h]).numpy()
            box = k["box"]
            assert np.all(box.lo <= outs.min(0) + 1e-12) and np.all(outs.max(0) <= box.hi + 1e-12)
            assert np.allclose(box.lo, outs.min(0), atol=1e-9) and np.allclose(box.hi, outs.max(0), atol=1e-9)


@pytest.mark.parametrize("which", ["packed", "random"])
@torch.inference_mode()
def test_each_heads_plain_enclosure_holds_its_real_output_for_every_free_assignment(which):
    """Answer position 0 at 2 digits, window {0}: a_1 and b_1 are free. For every configuration and
    all 81 leading digit pairs, each head's output (hook_z·W_O of the float64 model) lies in the
    plain pass's enclosure of that head; the random model gives its free keys most of the weight
    (λ⁺ > 0.5), the trained one little (its extremes must still be inside)."""
    from lengthgen.runs import load_checkpoint

    model = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)[0] if which == "packed" else random_model(3)
    m64 = copy.deepcopy(model).to(torch.float64)
    cert = certifier(2, model, max_width=1, tail="interval")
    w = cert.w
    p = cert.inputs(0)
    pairs = [(10 * x + int(p.a[i, 0]), 10 * y + int(p.b[i, 0])) for i in range(len(p.a))
             for x in range(1, 10) for y in range(1, 10)]
    insts = [ADDITION.instance(str(a), str(b), start=START) for a, b in pairs]
    tokens = torch.as_tensor(np.stack([x.tokens for x in insts]))
    pos = torch.as_tensor(np.stack([x.pos_ids for x in insts]))
    _, cache = m64.run_with_cache(tokens, pos, names_filter="blocks.0.attn.hook_z", return_cache_object=False)
    z = cache["blocks.0.attn.hook_z"][:, insts[0].prompt_len - 1].numpy()  # [pairs, heads, d_head] at '='
    largest = 0.0
    for h, k in enumerate(p.heads):
        real = (z[:, h] @ w.W_O[h]).reshape(len(p.a), 81, -1)
        enc, lam = cert._head(k, p.slots, p.query_tok)
        largest = max(largest, float(lam.max()))
        assert np.all(enc.lo[:, None] - 1e-9 <= real) and np.all(real <= enc.hi[:, None] + 1e-9), h
    assert largest > (0.5 if which == "random" else 1e-3)


def test_free_values_in_a_plane_keep_each_axis_half_range():
    """Free values on a 3 × 5 grid in a plane of R^4 (spacings 1 and 0.25 along orthogonal unit
    vectors): two generators whose lengths are the half-ranges 1 and 0.5, each axis on its own."""
    u = np.array([1.0, 1.0, 0.0, 0.0]) / np.sqrt(2.0)
    v = np.array([0.0, 0.0, 3.0, 4.0]) / 5.0
    pts = np.zeros((15, 1, 4))
    for k, (i, j) in enumerate((i, j) for i in range(3) for j in range(5)):
        pts[k, 0] = np.array([2.0, -1.0, 0.5, 1.0]) + i * 1.0 * u + j * 0.25 * v
    fv = free_values(Iv.exact(pts), [(np.arange(15), 0)], np.eye(4))
    assert fv["gens"].shape[0] == 2
    assert sorted(np.linalg.norm(fv["gens"], axis=1)) == pytest.approx([0.5, 1.0], rel=1e-12)
    assert np.all(fv["centre"].hi - fv["centre"].lo < 1e-12)


def test_the_attention_form_is_never_wider_than_the_plain_pass():
    """Per coordinate, the form's radius is at most the distance from its centre to the ends of the
    plain pass's enclosure of the same residual (both enclose it; the narrower one is kept)."""
    from lengthgen.proof.trained_affine import attention_form
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)
    cert = certifier(2, model, max_width=1, tail="affine")
    w = cert.w
    p = cert.inputs(3)
    resid = cert.t.resid[:, p.qid][p.query_tok]
    x = attention_form(cert, p.heads, p.slots, p.query_tok, resid)
    plain = resid + w.b_O
    for k in p.heads:
        plain = plain + cert._head(k, p.slots, p.query_tok)[0]
    assert np.all(x.radius() <= np.maximum(plain.hi - x.c, x.c - plain.lo) * (1 + 1e-15))
