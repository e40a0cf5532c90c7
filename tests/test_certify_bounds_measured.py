"""Every bound the Theorem 5.1 addition certificate prints (docs/certificate.md, "What the tests
pin") contains what a float64 forward pass of the actual model measures (tests/forward_oracle.py:
softmax recomputed from the weights) on carry chains, all 9s, all zeros, alternating digits and
random operands — at the built M and at 1.01·M*, where the leak bound is nearly tight — and the
float terms contain what float32 rounding measurably moves."""
from __future__ import annotations

import functools
import re

import numpy as np
import pytest
import torch

from constructions.addition import START_ID, build_model
from constructions.addition.certify.margins import certify
from constructions.addition.certify.search import smallest_sharpness, with_sharpness
from lengthgen.tasks import ADDITION
from forward_oracle import addition_passes, attention_measures, params

N, D = 30, 27
REL = 1 + 1e-9  # the float64 measurement of an exactly tight bound may exceed it by rounding
RNG = np.random.default_rng(5)
PAIRS = [("9" * N, "0" * (N - 1) + "1"), ("9" * N, "9" * N), ("0" * N, "0" * N), ("90" * (N // 2),) * 2,
         ("1" * N, "8" * N)] + [tuple("".join(map(str, RNG.integers(0, 10, N))) for _ in range(2)) for _ in range(3)]


@functools.lru_cache(maxsize=None)
def _model(dtype: str, where: str):
    model, meta = build_model(n_digits=N, d_model=D, dtype=dtype)
    if where == "built":
        return model
    return with_sharpness(model, 1.01 * smallest_sharpness(model, N, meta["M"], dtype).M)


def _measured(model, a: str, b: str):
    """:func:`forward_oracle.addition_passes` at the evaluation start."""
    return addition_passes(model, a, b, START_ID)


def _gaps(logits: np.ndarray, want: np.ndarray) -> np.ndarray:
    return logits[np.arange(len(want)), want][:, None] - logits


def _deltas(cert, labels: list[str], sources: tuple[str, ...]) -> np.ndarray:
    return np.array([sum(cert.deltas.get(l, {}).get(s, 0.0) for s in sources) for l in labels])


@pytest.mark.parametrize("dtype, where", [("float64", "near_smallest"), ("float32", "near_smallest"),
                                          ("float32", "built")])
def test_printed_bounds_contain_the_float64_measurement(dtype: str, where: str) -> None:
    """Per head: leak λ, spread η, total variation; per residual coordinate: the deviation Δ from
    the hard-max limit; per hidden unit: the pre-activation change |W_in|ᵀΔ; per class: the slack
    against its binding margin and printed parts."""
    model = _model(dtype, where)
    cert = certify(model, N, dtype)
    assert cert.passed, cert.message
    labels = model.annotations.residual
    real = _deltas(cert, labels, ("leak", "spread"))
    W_in = params(model)["blocks.0.mlp.W_in"]
    H = len(cert.heads)
    worst = np.zeros((H, 3))
    for a, b in PAIRS:
        f, S, hm, q, want, _, _ = _measured(model, a, b)
        for h in range(H):
            for t in q:
                worst[h] = np.maximum(worst[h], attention_measures(f["scores"][h, t, : t + 1], f["pattern"][h, t, : t + 1],
                                                                   S[h][t]))
        dev = np.abs(f["resid_mid"] - hm["resid_mid"])[q]
        assert np.all(dev <= real * REL + 1e-12), (dev.max(0), real)
        assert np.all(np.abs(f["pre"] - hm["pre"])[q] <= np.abs(W_in).T @ real * REL + 1e-12)
        assert np.array_equal(hm["logits"][q].argmax(1), want)  # the hard-max limit is right, as certified
    for h, head in enumerate(cert.heads):
        assert worst[h, 0] <= head["leak"] * REL and worst[h, 1] <= head["eta"] * REL + 1e-15
        assert worst[h, 2] <= head["tv"] * REL
    for _, _, _, check in cert.classes:  # slack = binding margin / Σ printed parts (4 printed digits)
        margin = float(re.search(r"(?:gap|pre-activation\|) ([-0-9.e+]+)\)", check.where).group(1))
        assert check.slack <= margin / sum(check.parts.values()) * (1 + 1e-3), (check.where, check.parts)
        if "logit gap" in check.where:
            assert check.parts["float"] >= cert.float_terms.logit_error
    if where == "near_smallest":  # nearly tight: some head's leak bound within 2x of the measured leak
        assert min(head["leak"] / worst[h, 0] for h, head in enumerate(cert.heads) if worst[h, 0] > 0) < 2
        assert cert.slack < 1.2


@pytest.mark.parametrize("where", ["near_smallest", "built"])
def test_float_terms_contain_the_float32_movement(where: str) -> None:
    """The float32 model (torch) against the float64 pass of the same weights: resid_mid moves by
    less than Δfloat; the FFN pre-activations computed in float32 from the float32 resid_mid move by
    less than the printed pre-activation term; and the readout (FFN output, residual add, W_U)
    moves each logit gap by less than the readout term plus the pre-activation terms it carries."""
    model = _model("float32", where)
    cert = certify(model, N, "float32")
    labels = model.annotations.residual
    float_part = _deltas(cert, labels, ("float",))
    p = params(model)
    W_in, b_in, W_out, b_out = (p["blocks.0.mlp." + k] for k in ("W_in", "b_in", "W_out", "b_out"))
    W_U, b_U = p["unembed.W_U"], p["unembed.b_U"]
    wo_wu = W_out @ W_U
    tail = cert.float_terms.tail(max(head["leak"] for head in cert.heads))  # (F2) for the largest λ tail
    assert np.all(float_part >= cert.float_terms.resid_error + tail)  # Δfloat holds the value path and the tail
    moved = {"resid": 0.0, "pre": 0.0, "gap": 0.0}
    for a, b in PAIRS:
        f, _, _, q, want, tok, pos = _measured(model, a, b)
        logits, acts = model(torch.tensor(tok[None]), torch.tensor(pos[None]), return_cache=True)
        r32 = acts["blocks.0.hook_resid_mid"][0].double().numpy()[q]
        pre32 = acts["blocks.0.mlp.hook_pre"][0].double().numpy()[q]
        d_resid = np.abs(r32 - f["resid_mid"][q])
        assert np.all(d_resid <= float_part), (d_resid.max(0), float_part)
        pre_exact = r32 @ W_in + b_in
        d_pre = np.abs(pre32 - pre_exact)
        assert np.all(d_pre <= cert.float_terms.pre_error)
        exact_logits = (r32 + np.maximum(pre32, 0) @ W_out + b_out) @ W_U + b_U
        pre_term = np.abs(wo_wu[:, want].T[:, None, :] - wo_wu.T[None, :, :]) @ cert.float_terms.pre_error
        d_gap = np.abs(_gaps(logits[0].double().detach().numpy()[q], want) - _gaps(exact_logits, want))
        assert np.all(d_gap <= cert.float_terms.logit_error + pre_term)
        moved = {"resid": max(moved["resid"], d_resid.max()), "pre": max(moved["pre"], d_pre.max()),
                 "gap": max(moved["gap"], d_gap.max())}
    assert min(moved.values()) > 1e-9, moved  # float32 moves each stage measurably: the checks can fail


def _tilted() -> torch.nn.Module:
    """The built model with '$' scoring slightly above the digits it shares S with (a spread η > 0),
    and with the FFN and the first head's values reading a position coordinate (so the positional
    effect on W_in, through W_pos[query] and through W_pos[q]·W_V·W_O, is not zero)."""
    model, _ = build_model(n_digits=N, d_model=D, dtype="float64")
    L = model.annotations.residual
    a = model.blocks[0].attn
    with torch.no_grad():
        a.W_K[0][L.index("IS_BOS")] *= 1.00005
        model.blocks[0].mlp.W_in[L.index("POS_1[0]")] += 0.004 * model.blocks[0].mlp.W_in[L.index("PRE_SUM")]
        e = int(torch.argmax(a.W_O[0][:, L.index("PRE_SUM")].abs()))
        a.W_V[0][L.index("POS_1[1]"), e] += 0.01
    return model


def test_a_tilted_model_keeps_every_printed_bound_and_margin() -> None:
    """Real arithmetic (no float part may absorb anything): the spread term (e^η − 1)/4 against the
    measured total variation (nearly tight), and each class's printed ReLU and logit margins
    against the hard-max pre-activations and logit gaps measured at the positions it covers."""
    model = _tilted()
    cert = certify(model, N, "real")
    assert cert.passed, cert.message
    # real arithmetic: the float part is only the outward rounding of the leak, no place for a spread share
    assert all(parts["float"] <= 1e-9 * (parts["leak"] + parts["spread"]) for parts in cert.deltas.values())
    labels = model.annotations.residual
    real = _deltas(cert, labels, ("leak", "spread"))
    tv, stab, gap = 0.0, np.inf, np.inf
    for a, b in PAIRS:
        f, S, hm, q, want, _, _ = _measured(model, a, b)
        tv = max(tv, max(attention_measures(f["scores"][0, t, : t + 1], f["pattern"][0, t, : t + 1], S[0][t])[2] for t in q))
        assert np.all(np.abs(f["resid_mid"] - hm["resid_mid"])[q] <= real * REL + 1e-12)
        stab = min(stab, float(np.abs(hm["pre"][q]).min()))
        g = _gaps(hm["logits"][q], want)
        g[np.arange(len(q)), want] = np.inf
        gap = min(gap, float(g.min()))
    assert cert.heads[0]["tv"] * 0.6 < tv <= cert.heads[0]["tv"] * REL
    assert min(check.stab_margin for *_, check in cert.classes) <= stab * REL
    assert min(check.logit_margin for *_, check in cert.classes) <= gap * REL


def test_a_narrow_readout_margin_carries_every_float_term() -> None:
    """'$' raised to within 0.02 of the right digit's logit (gap measured in float64): the logit
    checks bind, and their slack must be the gap over all printed parts — the readout float term
    and the pre-activation terms it carries included — and the gap no larger than measured."""
    model, _ = build_model(n_digits=N, d_model=D, dtype="float32")
    gap = np.inf
    for a, b in PAIRS:
        _, _, hm, q, want, _, _ = _measured(model, a, b)
        digit = want != ADDITION.EOS
        gap = min(gap, float((hm["logits"][q][digit, want[digit]] - hm["logits"][q][digit, ADDITION.EOS]).min()))
    with torch.no_grad():
        model.unembed.b_U[ADDITION.EOS] += gap - 0.02
    cert = certify(model, N, "float32")
    assert cert.passed, cert.message
    binding = [check for *_, check in cert.classes if "logit gap to '$'" in check.where]
    assert binding and min(c.slack for c in binding) == cert.slack
    for check in binding:
        margin = float(re.search(r"\(gap ([-0-9.e+]+)\)", check.where).group(1))  # the binding gap, 4 digits
        assert margin <= 0.02 * 1.001 and check.logit_margin <= 0.02 * 1.001
        assert check.parts["float"] > cert.float_terms.logit_error  # + the pre-activation terms
        assert check.slack <= margin / sum(check.parts.values()) * (1 + 1e-3), (check.where, check.parts)
