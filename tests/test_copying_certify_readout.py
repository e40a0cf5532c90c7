"""The readout half of the copy/reverse certificate (constructions/copying/certify/margins.py, step
3 of its docstring; docs/copying.md, "Certificate"): the requirement Σ_r |W_U[r, t] − W_U[r, o]|·Δ[r]
against the hard-max margin, its float part, what a FAIL says, and weights or bounds that are not
finite. Each model is checked against the float64 forward pass of tests/forward_oracle.py (right
or wrong), or against the float32 model's own forward pass; none of the expectations is computed
by certificate code."""
from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pytest
import torch

from constructions.copying import build_model
from constructions.copying.certify.margins import certify
from constructions.copying.certify.search import with_sharpness
from lengthgen.tasks import COPY
from forward_oracle import forward64, hardmax64

N = 6
FIVE = COPY.vocabulary["5"]


def _model(M: float | None = None, d_model: int | None = None, dtype: str = "float64"):
    model = build_model("copy", n_digits=N, d_model=d_model, dtype=dtype)[0]
    return model if M is None else with_sharpness(model, "copy", M)


def _labels(model) -> tuple[list[str], list[str]]:
    return model.annotations.residual, model.annotations.head_dims[0]


def _instance(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    inst = COPY.instance(x.astype(np.uint8), start=1)
    return inst.tokens[:-1], inst.pos_ids[:-1], np.concatenate([x, [COPY.EOS]])


def _gaps(model, x: np.ndarray) -> np.ndarray:
    """float64 logit gaps right token − other token at ``=``, y_1 … y_n (+inf at the right token)."""
    tok, pos, expected = _instance(x)
    logits = forward64(model, tok, pos)["logits"][N + 1:]
    gaps = logits[np.arange(N + 1), expected][:, None] - logits
    gaps[np.arange(N + 1), expected] = np.inf
    return gaps


def _attended(T: int) -> list[list[int]]:
    """S from the coupling (copy): ``$`` and x_{j+1} at y_j (x_1 at ``=``), ``$`` alone at y_n."""
    return [[0] + ([] if not 0 <= t - (N + 1) < N else [t - N]) for t in range(T)]


@pytest.mark.parametrize("where", ["W_U", "b_U", "b_O"])
def test_a_weight_that_is_not_finite_fails(where: str) -> None:
    """NaN in W_U (COPIED[3] read as '5'), +inf in b_U['5'] or NaN in b_O (COPIED[3]): the float64
    forward pass gives a NaN or infinite logit and predicts a wrong token everywhere; real
    arithmetic does not cover such weights, so the certificate must FAIL (no comparison with NaN
    may read as "margin enough")."""
    model = _model()
    lab, _ = _labels(model)
    with torch.no_grad():
        if where == "W_U":
            model.unembed.W_U[lab.index("COPIED[3]"), FIVE] = float("nan")
        elif where == "b_U":
            model.unembed.b_U[FIVE] = float("inf")
        else:
            model.blocks[0].attn.b_O[lab.index("COPIED[3]")] = float("nan")
    tok, pos, expected = _instance(np.full(N, 7))
    with np.errstate(invalid="ignore"):
        logits = forward64(model, tok, pos)["logits"][N + 1:]
    assert not np.all(np.isfinite(logits)) and np.all(logits.argmax(-1) != expected)
    cert = certify(model, "copy", N, "real")
    # every certificate refuses non-finite weights up front, naming them (tests/test_certify_nonfinite.py)
    assert not cert.passed and cert.reason == "structure" and f"{where} has entries that are not finite" in cert.message


def test_an_overflowing_readout_row_still_counts_the_leak() -> None:
    """ID 1 (``=`` alone) carries a flag in the spare coordinate, which the head writes ×10^6 into
    COPIED[5]; no S holds ``=``, so at the hard-max limit nothing changes, but the leak onto ``=``
    lifts '5' past the right digit (forward pass). W_U's IS_BOS row, which is 0 at every answer
    position, reads ±10^308, so |W_U[IS_BOS, t] − W_U[IS_BOS, '5']| overflows to inf where the
    deviation is 0: that row adds exactly 0, and the certificate must still FAIL on the leak."""
    model = _model(d_model=d_model_with_spare())
    lab, hd = _labels(model)
    a = model.blocks[0].attn
    with torch.no_grad():
        model.pos_embed.W_pos[1, lab.index("UNUSED[0]")] = 1
        a.W_V[0, lab.index("UNUSED[0]"), hd.index("pos[0]")] = 1
        a.W_O[0, hd.index("pos[0]"), lab.index("COPIED[5]")] = 1e6
        model.unembed.W_U[lab.index("IS_BOS")] = -1e308
        model.unembed.W_U[lab.index("IS_BOS"), FIVE] = 1e308
    gaps = _gaps(model, np.full(N, 7))
    assert np.all(np.isfinite(gaps[:, FIVE])) and gaps[:, FIVE].min() < -30  # '5' wins where a 7 is due
    cert = certify(model, "copy", N, "real")
    assert not cert.passed and cert.reason == "leak", cert.message


def d_model_with_spare() -> int:
    """The width for N digits plus one: the construction's layout then has a spare coordinate."""
    return build_model("copy", n_digits=N)[0].cfg.d_model + 1


def test_a_readout_enclosure_that_overflows_to_nan_fails() -> None:
    """Finite weights whose products overflow float64: the spare coordinate holds 4 for every token
    and W_U reads it as 10^308 for every token, 1.1·10^308 for '5'. In real arithmetic every logit
    gains 4·W_U[spare] (nothing else writes or reads it), so '5' beats every other token by
    4·10^307 minus the built model's gap and is predicted everywhere: wrong. The enclosures of
    W_E·W_U have centre +inf and radius +inf, so their lower ends are inf − inf = NaN, and every
    gap's lower end is NaN; a NaN must count as "not proven", never as a margin (real arithmetic
    PASSed this model when NaN end points were compared as they are)."""
    model = _model(d_model=d_model_with_spare())
    lab, _ = _labels(model)
    spare = lab.index("UNUSED[0]")
    gaps = _gaps(model, np.full(N, 7))  # the built model: right token first by a finite gap
    a = model.blocks[0].attn
    assert not model.pos_embed.W_pos[:, spare].any() and not a.W_O[..., spare].any() and not a.W_Q[:, spare].any() \
        and not a.W_K[:, spare].any() and not a.W_V[:, spare].any()
    with torch.no_grad():
        model.embed.W_E[:, spare] = 4.0
        model.unembed.W_U[spare] = 1e308
        model.unembed.W_U[spare, FIVE] = 1.1e308
    offset = 4 * (Fraction(1.1e308) - Fraction(1e308))  # exact: what '5' gains over every other token
    assert all(Fraction(float(gaps[i, FIVE])) < offset for i in range(N + 1))  # so '5' wins everywhere
    with np.errstate(over="ignore", invalid="ignore"):  # the overflows are the point
        cert = certify(model, "copy", N, "real")
    assert not cert.passed and cert.reason == "hardmax" and "not proven to beat" in cert.message, cert.message


def test_a_pair_that_no_deviation_can_move_needs_nothing() -> None:
    """W_U['='] = W_U['$'] except 0.5 less on ONE, which the head never writes: logit('$') −
    logit('=') is 0.5 at every position for every attention (forward pass, also at M = 1), so the
    pair needs no margin beyond it and the certificate (real arithmetic) must PASS."""
    model = _model()
    lab, _ = _labels(model)
    EQ = COPY.vocabulary["="]
    with torch.no_grad():
        model.unembed.W_U[:, EQ] = model.unembed.W_U[:, COPY.EOS]
        model.unembed.W_U[lab.index("ONE"), EQ] -= 0.5
    for m in (model, with_sharpness(model, "copy", 1.0)):
        tok, pos, _ = _instance(np.arange(N) * 3 % 10)
        logits = forward64(m, tok, pos)["logits"]
        assert np.allclose(logits[:, COPY.EOS] - logits[:, EQ], 0.5, rtol=0, atol=1e-12)
    cert = certify(model, "copy", N, "real")
    assert cert.passed, cert.message


def test_the_requirement_counts_readout_weights_of_opposite_sign() -> None:
    """The spare coordinate U holds twice the attention on digit-0 keys (W_O), read as +200 for
    '0' and −200 for '5'; SINK_SHARE lowers '0' and '5' by 10 after the last digit (ONE adds it
    back elsewhere). At the hard-max limit U is 0 wherever a 0 is not due, so every answer is
    right there; at M = 3.6 the leak onto the 0s around a due 5 moves the gap of '5' over '0' by
    |200 − (−200)|·U, and the forward pass predicts 0 where the 5 is due. The certificate must
    FAIL on the leak (counting |200 + (−200)| = 0 for that pair would PASS it)."""
    model = _model(M=3.6, d_model=d_model_with_spare())
    lab, hd = _labels(model)
    U, zero = lab.index("UNUSED[0]"), COPY.vocabulary["0"]
    with torch.no_grad():
        model.blocks[0].attn.W_O[0, hd.index("val_DIGIT[0]"), U] = 2
        model.unembed.W_U[U, zero], model.unembed.W_U[U, FIVE] = 200, -200
        for t in (zero, FIVE):
            model.unembed.W_U[lab.index("SINK_SHARE"), t], model.unembed.W_U[lab.index("ONE"), t] = -10, 10
    x = np.zeros(N, dtype=int)
    x[2] = 5
    tok, pos, expected = _instance(x)
    hard = hardmax64(model, tok, pos, [_attended(len(tok))])["logits"][N + 1:]
    assert np.array_equal(hard.argmax(-1), expected)
    assert _gaps(model, x)[2, zero] < -0.15  # y_2 predicts 0 where x_3 = 5 is due
    cert = certify(model, "copy", N, "real")
    assert not cert.passed and cert.reason == "leak", cert.message


def test_the_float_part_contains_the_readout_rounding() -> None:
    """float64 with 2^20 added to every logit through W_U's ONE row: the argmax and the gaps are
    unchanged, but the readout rounds at 2^20. Measured: torch's float64 logit gaps against the
    same gaps read out exactly (fractions) from torch's own float64 residual. Every class's
    printed float part must contain that movement."""
    model = _model()
    lab, _ = _labels(model)
    with torch.no_grad():
        model.unembed.W_U[lab.index("ONE")] += 2.0 ** 20
    cert = certify(model, "copy", N, "float64")
    assert cert.passed, cert.message
    W_U = [[Fraction(float(v)) for v in row] for row in model.unembed.W_U.double().tolist()]
    b_U = [Fraction(float(v)) for v in model.unembed.b_U.double().tolist()]
    moved = 0.0
    for x in (np.arange(N) * 7 % 10, np.full(N, 9)):
        tok, pos, expected = _instance(x)
        logits, acts = model(torch.tensor(tok[None]), torch.tensor(pos[None]), return_cache=True)
        resid = acts["blocks.0.hook_resid_post"][0].double().tolist()
        for i, t in enumerate(range(N + 1, len(tok))):
            exact = [sum(Fraction(r) * W_U[k][v] for k, r in enumerate(resid[t])) + b_U[v] for v in range(len(b_U))]
            right = int(expected[i])
            for v in range(len(b_U)):
                got = float(logits[0, t, right]) - float(logits[0, t, v])
                moved = max(moved, abs(got - float(exact[right] - exact[v])))
    assert moved > 0  # the readout rounds measurably: the check can fail
    assert all(c.parts["float"] >= moved for c in cert.classes), (moved, [c.parts for c in cert.classes])


def test_float32_score_rounding_at_large_M_is_in_the_float_part() -> None:
    """float32 at M = 1000: the scores (≈ M·P = 3000) round at 2^-12, so '$' and the copied digit,
    tied in exact arithmetic, get unequal weights. The float32 model's pattern is then measurably
    off uniform on S, and its residual off the float64 hard-max limit; the printed TV and the
    printed Δ (leak + spread + float) must contain both."""
    model = _model(M=1000.0, dtype="float32")
    cert = certify(model, "copy", N, "float32")
    assert cert.passed, cert.message
    lab, _ = _labels(model)
    bound = np.array([sum(cert.deltas.get(label, {}).values()) for label in lab])
    tv = dev = 0.0
    for x in (np.arange(N), np.full(N, 7), np.arange(N) % 2 * 9):
        tok, pos, _ = _instance(x)
        _, acts = model(torch.tensor(tok[None]), torch.tensor(pos[None]), return_cache=True)
        pattern = acts["blocks.0.attn.hook_pattern"][0, 0].double().numpy()
        S = _attended(len(tok))
        hard = hardmax64(model, tok, pos, [S])["resid_mid"]
        r32 = acts["blocks.0.hook_resid_post"][0].double().numpy()
        for t in range(N + 1, len(tok)):
            uniform = np.zeros(t + 1)
            uniform[S[t]] = 1 / len(S[t])
            tv = max(tv, 0.5 * float(np.abs(pattern[t, : t + 1] - uniform).sum()))
            assert np.all(np.abs(r32[t] - hard[t]) <= bound), (np.abs(r32[t] - hard[t]).max(), bound.max())
            dev = max(dev, float(np.abs(r32[t] - hard[t]).max()))
    assert tv > 1e-5 and dev > 1e-5  # far above float32's value-path rounding (~1e-7)
    assert tv <= cert.heads[0]["tv"]


def test_a_deviation_bound_that_overflows_fails() -> None:
    """The head writes +10^308 (digit 1) and −10^308 (digit 2) into DIGIT[0], which W_U ignores:
    the forward pass is right, but the range of the head's output there, 2·10^308, overflows the
    float64 arithmetic the bound is computed in. The certificate (real arithmetic) cannot bound
    the deviation and must FAIL with reason "float", saying so, with its float terms."""
    model = _model()
    lab, hd = _labels(model)
    with torch.no_grad():
        model.blocks[0].attn.W_O[0, hd.index("val_DIGIT[1]"), lab.index("DIGIT[0]")] = 1e308
        model.blocks[0].attn.W_O[0, hd.index("val_DIGIT[2]"), lab.index("DIGIT[0]")] = -1e308
    for x in (np.arange(N) % 3, np.full(N, 2)):
        assert _gaps(model, x).min() > 0.99
    cert = certify(model, "copy", N, "real")
    assert (cert.passed, cert.reason, cert.message) == (False, "float", "a bound is not finite (overflow in the float term)")
    assert cert.float_terms is not None and cert.float_terms.dtype == "real"


def test_the_deviation_is_reported_where_the_head_writes() -> None:
    """Real arithmetic: the residual can only move where the head writes, W_O's COPIED[0..9] and
    SINK_SHARE (docs/copying.md), so the printed per-coordinate Δ lists exactly those."""
    cert = certify(_model(), "copy", N, "real")
    assert sorted(cert.deltas) == sorted([f"COPIED[{k}]" for k in range(10)] + ["SINK_SHARE"])


def test_a_readout_failure_says_where_and_why() -> None:
    """M = 1: the leak breaks the readout margin. The FAIL names the first class (in position
    order) at the smallest slack, the binding pair and its hard-max gap, the slack, the largest
    part of the requirement as the reason, and the three parts, in these words."""
    cert = certify(_model(M=1.0), "copy", N, "real")
    assert not cert.passed and cert.reason == "leak"
    first = next(c for c in cert.classes if c.slack == cert.slack)
    m = re.fullmatch(r"(.*): the logit gap of '(.)' over '(.)' \(gap ≥ (\S+)\) needs more than its margin allows "
                     r"\(slack ×(\S+)\); the requirement is mostly leak \(leak (\S+), spread (\S+), float (\S+)\)",
                     cert.message)
    assert m, cert.message
    assert m[1] == first.description and f"logit gap of '{m[2]}' over '{m[3]}' (gap ≥ {m[4]})" == first.where
    assert float(m[5]) == pytest.approx(cert.slack, rel=1e-2) and cert.slack < 1
    parts = [float(m[i]) for i in (6, 7, 8)]
    assert parts == pytest.approx(list(first.parts.values()), rel=1e-2) and parts[0] == max(parts)


def test_the_float_part_contains_the_value_path_rounding() -> None:
    """float32 with b_O = 2^16 on every COPIED[k] (and '$' lifted by as much through b_U, so every
    gap is unchanged): the attention output, ≈ 1 − leak, is added at 2^16 and rounds there. The
    float32 model's residual then differs from the float64 pass of the same weights by far more
    than the attention's own float part can explain; the printed Δfloat must contain it."""
    model = _model(dtype="float32")
    lab, _ = _labels(model)
    with torch.no_grad():
        for k in range(10):
            model.blocks[0].attn.b_O[lab.index(f"COPIED[{k}]")] = 2.0 ** 16
        model.unembed.b_U[COPY.EOS] += 2.0 ** 16
    cert = certify(model, "copy", N, "float32")
    assert cert.passed, cert.message
    bound = np.array([cert.deltas.get(label, {}).get("float", 0.0) for label in lab])
    moved = np.zeros(len(lab))
    for x in (np.arange(N), np.full(N, 7), np.arange(N) % 2 * 9):
        tok, pos, _ = _instance(x)
        _, acts = model(torch.tensor(tok[None]), torch.tensor(pos[None]), return_cache=True)
        r32 = acts["blocks.0.hook_resid_post"][0].double().numpy()
        moved = np.maximum(moved, np.abs(r32 - forward64(model, tok, pos)["resid_mid"])[N + 1:].max(0))
    assert moved.max() > 1e-4  # rounding at 2^16 (ulp 2^-7 in float32), far above the attention's float part
    assert np.all(moved <= bound), (moved.max(), bound.max())
