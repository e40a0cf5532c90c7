"""The float32 statement's widening of single steps that tests/test_trained_float_wiring.py does
not reach: a projection with its bias, the tables' three projections, the activation of a ReLU
model, a model without an MLP or without a final LayerNorm, and the command's stderr.

As there, each step runs with and without the float format on the same inputs and the difference
must be the step's radius from the formulas of lengthgen.proof.trained_float (pinned by hand in
tests/test_trained_float_kernels.py); a radius that would be the same with the term under test
dropped is first shown to differ, so that each check can fail.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

from lengthgen.model import Transformer, TransformerConfig
from lengthgen.proof import affine as A
from lengthgen.proof import interval as I
from lengthgen.proof.interval import Iv
from lengthgen.proof.trained_affine import differences
from lengthgen.proof.trained_float import FloatFormat, widen
from lengthgen.proof.trained_tables import LN_EPS, OneLayer, Tables
from lengthgen.tasks import ADDITION
from test_trained_float_wiring import N_KEYS, widened_by

F32 = FloatFormat("float32")


def _pair(**cfg_changes) -> tuple[OneLayer, OneLayer]:
    """A small random model (biases far from 0), as OneLayer in real and in float32 arithmetic."""
    torch.manual_seed(1)
    cfg = TransformerConfig(**{"d_vocab": len(ADDITION.vocab), "d_model": 8, "n_heads": 2, "d_head": 4, "d_mlp": 16,
                               "n_ctx": 12, "normalization": "LN", "act_fn": "gelu", **cfg_changes})
    model = Transformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5 + (1.0 if p.dim() == 1 else 0.0))
    return OneLayer.from_model(model), OneLayer.from_model(model, F32)


def _inputs(rows: int = 3, d: int = 8) -> Iv:
    lo = np.linspace(-1.5, 1.0, rows * d).reshape(rows, d)
    return Iv(lo, lo + 0.25)


def test_a_projection_widens_by_its_dot_rounding_with_the_bias():
    real, flt = _pair()
    x = _inputs()
    radius = F32.dot(x.mag(), real.W_in, real.b_in)
    assert np.all(radius > F32.dot(x.mag(), real.W_in, None) * (1 + 1e-3))   # the bias counts
    widened_by(real.linear(x, real.W_in, real.b_in), flt.linear(x, real.W_in, real.b_in), radius)


def test_the_tables_queries_keys_and_values_widen_by_their_projections_rounding():
    """Per head, key and value of every (token, ID) are the real projection of the float LN1
    output widened by γ_{d+1}(|LN1|·|W| + |b|); the query is that times the scale (an enclosure)."""
    real, flt = _pair()
    t_f = Tables.build(flt, N_KEYS)
    V, P, d = t_f.resid.shape      # the embedding sum, already widened by its rounding
    flat = Iv(t_f.resid.lo.reshape(-1, d), t_f.resid.hi.reshape(-1, d))
    ln1 = widen(real.norm("ln1", flat), F32.layer_norm(flat, *real.ln1, LN_EPS))
    rows = lambda x: Iv(x.lo.reshape(V * P, -1), x.hi.reshape(V * P, -1))  # noqa: E731
    for h in range(real.n_heads):
        for name, got, W, b in (("query", t_f.query[h], real.W_Q[h], real.b_Q[h]), ("key", t_f.key[h], real.W_K[h],
                                real.b_K[h]), ("value", t_f.value[h], real.W_V[h], real.b_V[h])):
            radius = F32.dot(ln1.mag(), W, b)
            assert np.all(radius > F32.dot(ln1.mag(), W, None) * (1 + 1e-3))   # the bias counts
            exact = I.affine(ln1, W, b)
            if name == "query":     # widened, then times the scale's enclosure
                want = widen(exact, radius) * real.scale
                assert np.array_equal(rows(got).lo, want.lo) and np.array_equal(rows(got).hi, want.hi), h
            else:
                widened_by(exact, rows(got), radius)


def test_relu_is_exact_in_float32_and_gelu_widens_by_its_kernel_bound():
    x = _inputs()
    real, flt = _pair(act_fn="relu")
    widened_by(real.activation(x), flt.activation(x), np.zeros(x.shape))   # an outward ulp at most
    real, flt = _pair()
    radius = F32.activation(x, "gelu")
    assert np.all(radius > 0)
    widened_by(real.activation(x), flt.activation(x), radius)


def test_a_model_without_an_mlp_adds_exactly_zero():
    real, flt = _pair(d_mlp=0)
    x = _inputs()
    for w in (real, flt):
        out = w.mlp(x)
        assert out.lo.shape == x.shape and np.all(out.lo == 0) and np.all(out.hi == 0)


def test_the_differences_of_a_model_without_layer_norm_widen_by_the_logits_rounding_only():
    real, flt = _pair(normalization=None)
    assert real.ln_final is None
    rng = np.random.default_rng(2)
    post = A.from_iv(Iv.exact(rng.normal(size=(3, 8))), 0.01 * rng.normal(size=(3, 2, 8)), np.full((3, 8), 0.001))
    target = np.array([1, 4, 2])
    d_r, d_f = differences(real, post, target), differences(flt, post, target)
    box = post.box()
    want = flt.round_logits(d_r, box.mag(), target)
    assert np.array_equal(d_f.lo, want.lo) and np.array_equal(d_f.hi, want.hi)


def test_a_float32_certificate_that_gives_a_radius_up_warns_nothing():
    """Where a float radius is given up (+inf), the logit differences hold inf − inf: read as no
    bound, without numpy's RuntimeWarning on the user's stderr (the unscaled checkpoint at one
    digit has such configurations: with the warning switched on, this fails)."""
    from lengthgen.certify import main

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert main(["--checkpoint", "checkpoints/addition_coupled_1l2h_unscaled", "--digits", "1",
                     "--dtype", "float32", "--json"]) in (0, 1)
