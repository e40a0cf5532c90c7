"""Tests written for the survivors of the mutation part `multiplication` (bench/mutate.py), each
against the float64 forward pass (tests/multiplication_oracle.py) or worked out by hand: the biases
of the layer-2 MLP and of layer-3 attention, a layer-2 unit that reads no digit, the groups of
layer-2 units, and which unit or logit pair :func:`check` reports as binding; and step 3 alone on a
residual of one coordinate, where the groups, a hard-max tie and the part of an input that no digit
changes are worked out by hand.

A layer-2 MLP unit that reads no digit variable adds the same vector at every configuration of a
class. Where that vector lands on a coordinate that other units move (PROD), the hard-max
evaluation of layer 3 dropped it: a built model with one such unit adding 50 to PROD is wrong on
most products (the float64 pass says so), and the certificate PASSed it.
"""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from constructions.multiplication import build_model
from constructions.multiplication.certify.margins import certify
from constructions.multiplication.certify import mlp
from constructions.multiplication.certify.mlp import check
from constructions.multiplication.model import TASK
from lengthgen.proof.interval import Iv
from multiplication_checks import class_checks, wrong_pairs
from multiplication_oracle import measure

N = 2
PAIRS = [("99", b) for b in (0, 1, 9, 19, 90, 99)] + [("00", 0), ("55", 55), ("12", 34), ("37", 64)]


def _model():
    return build_model(n_digits=N, dtype="float64")[0]


def _idle_unit(model) -> int:
    """A layer-2 MLP unit that the construction leaves unused: no input weight, no bias, no output."""
    mlp = model.blocks[1].mlp
    unused = (~mlp.W_in.detach().numpy().any(0)) & (mlp.b_in.detach().numpy() == 0) & (~mlp.W_out.detach().numpy().any(1))
    return int(np.nonzero(unused)[0][0])


def test_a_layer2_unit_that_reads_no_digit_still_counts() -> None:
    """An idle unit switched on by its bias (b_in = 1) adds 50 to PROD at every position: the float64
    pass is wrong on most pairs, and the certificate must FAIL."""
    model = _model()
    u, prod = _idle_unit(model), model.annotations.residual.index("PROD")
    with torch.no_grad():
        model.blocks[1].mlp.b_in[u] = 1.0
        model.blocks[1].mlp.W_out[u, prod] = 50.0
    m = measure(model, N, PAIRS)
    assert len(m.wrong) > 10 and m.min_gap < 0
    cert = certify(model, N)
    assert not cert.passed and cert.reason == "hardmax", cert.message


def _biases_cancel(model) -> None:
    """b_out of the layer-2 MLP adds 64 to PROD and layer-3 attention's b_O subtracts it again."""
    prod = model.annotations.residual.index("PROD")
    model.blocks[1].mlp.b_out[prod] = 64.0
    model.blocks[2].attn.b_O[prod] = -64.0


def _bias_moves_a_threshold(model) -> None:
    """Unit B1xA1_k1_on reads −1000·ONE; its bias b_in = 64 and −1064·ONE give the same pre-activation."""
    unit = next(k for k, name in enumerate(model.annotations.mlp) if name.startswith("B1xA1_k1_on"))
    model.blocks[1].mlp.b_in[unit] = 64.0
    model.blocks[1].mlp.W_in[model.annotations.residual.index("ONE"), unit] -= 64.0


def _idle_unit_cancels_a_bias(model) -> None:
    """An idle unit on by its bias adds 50 to PROD; b_out of the layer-2 MLP subtracts 50."""
    u, prod = _idle_unit(model), model.annotations.residual.index("PROD")
    model.blocks[1].mlp.b_in[u] = 1.0
    model.blocks[1].mlp.W_out[u, prod] = 50.0
    model.blocks[1].mlp.b_out[prod] = -50.0


def _idle_unit_writes_one(model) -> None:
    """An idle unit on by its bias adds 1 to ONE (constant: it moves with no configuration), which
    layer 3 reads; layer-3 attention's b_O subtracts it again."""
    u, one = _idle_unit(model), model.annotations.residual.index("ONE")
    model.blocks[1].mlp.b_in[u] = 1.0
    model.blocks[1].mlp.W_out[u, one] = 1.0
    model.blocks[2].attn.b_O[one] = -1.0


def _layer3_bias_moves_a_threshold(model) -> None:
    """Layer-3 unit 0 reads −45·ONE; its bias b_in = 64 and −109·ONE give the same pre-activation."""
    one = model.annotations.residual.index("ONE")
    assert model.blocks[2].mlp.W_in[one, 0] != 0
    model.blocks[2].mlp.b_in[0] = 64.0
    model.blocks[2].mlp.W_in[one, 0] -= 64.0


def _unembed_bias_per_token(model) -> None:
    """b_U[t] = 8·t for every token t, and W_U reads ONE (1 at every position) as −8·t: each logit is
    unchanged, but the readout now has a bias and reads a coordinate that does not move."""
    one = model.annotations.residual.index("ONE")
    shift = 8.0 * torch.arange(model.unembed.b_U.shape[0], dtype=torch.float64)
    model.unembed.b_U[:] = shift
    model.unembed.W_U[one] = -shift


def _unembed_bias_for_all(model) -> None:
    """b_U = −3 for every token: each logit drops by 3, every difference between two stays."""
    model.unembed.b_U[:] = -3.0


def _readout_reads_layer3_input(model) -> None:
    """Layer-3 attention's b_O adds 4 to DIGIT[5], which W_U reads directly (the layer-3 MLP reads it
    not); the layer-3 MLP's b_out subtracts 4 again."""
    five = model.annotations.residual.index("DIGIT[5]")
    model.blocks[2].attn.b_O[five] = 4.0
    model.blocks[2].mlp.b_out[five] = -4.0


@pytest.mark.parametrize("edit", [_biases_cancel, _bias_moves_a_threshold, _idle_unit_cancels_a_bias, _idle_unit_writes_one,
                                  _layer3_bias_moves_a_threshold, _unembed_bias_per_token, _unembed_bias_for_all,
                                  _readout_reads_layer3_input])
def test_biases_that_cancel_exactly_keep_the_pass(edit) -> None:
    """Each edit leaves every layer-3 pre-activation and every difference of two logits exactly as it
    was (small integers: the float64 pass computes the same numbers), so the float64 pass is right
    and the certificate, which reads each bias where the model adds it, still PASSes with the slack
    of the built model. A bias left out, read with the wrong sign or from another layer, or a sum of
    two logits read as their difference, moves a margin by 3 or more and FAILs."""
    model = _model()
    built = certify(model, N)
    with torch.no_grad():
        edit(model)
    m = measure(model, N, PAIRS)
    assert not m.wrong and m.min_gap > 0.5
    cert = certify(model, N)
    assert cert.passed, cert.message
    assert cert.slack == pytest.approx(built.slack, rel=1e-6)  # the same margins and deviations


def test_every_layer2_unit_is_in_one_group() -> None:
    """The layer-2 MLP groups the certificate reports (those of the class that reads the most digits)
    partition the units: their sizes add up to d_mlp, and each group reads at most 4 digits."""
    model = _model()
    cert = certify(model, N)
    assert sum(size for _, size in cert.mlp2) == model.cfg.d_mlp
    assert all(len(key) <= 4 for key, _ in cert.mlp2) and len({key for key, _ in cert.mlp2}) == len(cert.mlp2)


def test_check_reports_the_binding_unit_and_logit_pair() -> None:
    """check() on the built model's tables, with one number changed by hand so that the ratio that
    binds is known: a layer-3 unit u ≠ 0 whose reserve is 0.5× its shift |W_in|ᵀρ (stability, slack
    0.5), then 1.5× (passes: slack 1.5, no reason), then a logit gap whose margin is 0.5× its
    requirement (readout, slack 0.5; at 1.5× it passes). With ρ = 0 nothing binds: no reason, a logit pair reported."""
    tables, rho = class_checks(_model(), N)
    t = tables[0]
    shift = np.abs(t.W3_abs).T @ rho  # the shift of every unit, float64 (the check rounds it up)
    base = check(t, rho)
    assert base.slack > 1 and base.reason == ""
    free = check(t, np.zeros_like(rho))
    assert free.slack > 1e300 and free.reason == "" and free.where.startswith("logit(")  # inf, rounded down
    u = int(np.nonzero((shift > 0) & (shift < 1) & (np.arange(len(shift)) > 0))[0][-1])
    for factor, reason in ((0.5, "stability"), (1.5, "")):
        reserve = t.reserve.copy()
        reserve[u] = factor * shift[u]
        res = check(dataclasses.replace(t, reserve=reserve), rho)
        assert res.slack == pytest.approx(factor, rel=1e-9) and res.reason == reason, res
        assert f"layer-3 unit {u} keeps its sign" in res.where
        assert res.reserve == reserve[u] and res.deviation == pytest.approx(shift[u], rel=1e-9)
    per = np.einsum("ptkr,r->ptk", t.slope, rho)
    need = per[t.pattern, t.target]
    finite = np.isfinite(t.margin) & (need > 0)
    g, k = map(int, np.argwhere(finite)[-1])
    for factor, reason in ((1.5, ""), (0.5, "readout")):
        margin = t.margin.copy()
        margin[g, k] = factor * need[g, k]
        res = check(dataclasses.replace(t, margin=margin), rho)
        assert res.slack == pytest.approx(factor, rel=1e-9) and res.reason == reason, res
    assert res.margin == margin[g, k] and res.need == pytest.approx(need[g, k], rel=1e-9)
    assert res.where == f"logit({TASK.vocab[int(t.target[g])]}) − logit({TASK.vocab[k]})"


def test_a_structure_fail_keeps_n_and_is_false() -> None:
    """A layer-1 MLP that writes (W_out ≠ 0) is outside the chain: FAIL with reason structure, for the
    N asked, and ``passed`` is False itself (not just falsy)."""
    model = _model()
    with torch.no_grad():
        model.blocks[0].mlp.W_out[0, 0] = 1.0
    cert = certify(model, N)
    assert cert.passed is False and cert.reason == "structure" and cert.n == N, cert


def test_a_layer3_unit_at_zero_in_the_hard_max_limit_fails_on_its_sign() -> None:
    """The on-unit of the step at T = 345 moved by 45 to T = 300, which T reaches: in the hard-max
    limit its pre-activation is 0 there, so the enclosure straddles 0 and the certificate must FAIL
    naming that unit (between T = 300 and 347 the step is now on: the float64 pass is wrong)."""
    model = _model()
    unit = next(k for k, name in enumerate(model.annotations.mlp) if name.endswith("T>300_45.0"))
    with torch.no_grad():
        model.blocks[2].mlp.W_in[model.annotations.residual.index("ONE"), unit] += 45
    assert wrong_pairs(model, [("01", 5), ("99", 99), ("37", 64)]) == [("01", 5), ("99", 99), ("37", 64)]
    cert = certify(model, N)
    assert not cert.passed and cert.reason == "hardmax", cert.message
    assert f"layer-3 unit {unit} changes sign inside the hard-max box" in cert.message, cert.message
    lo, hi = (float(x) for x in cert.message.split("pre-activation in [")[1].rstrip("])").split(", "))
    assert lo < 0 < hi and hi - lo < 1e-6


@pytest.mark.parametrize("i, n, reads, text", [
    (-1, 5, [("a", 1), ("b", 0), ("b", 1)], "'=' (reads a_(i+1), b_0, b_1)"),
    (1, 5, [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0)], "c_1 (reads a_i, a_(i+1), b_0, b_1, c_i)"),
    (2, 5, [("a", -2), ("a", -1)], "c_i, 2 ≤ i ≤ 3 (reads a_(i-2), a_(i-1))"),
    (3, 5, [("b", 1)], "c_i, 2 ≤ i ≤ 3 (reads b_1)"),
    (4, 5, [("a", -2)], "c_4 (reads a_(i-2))"),
    (2, 4, [], "c_i, 2 ≤ i ≤ 2 (reads no digit)"),
    (1, 2, [("c", 0)], "c_1 (reads c_i)"),
])
def test_class_descriptions(i: int, n: int, reads: list, text: str) -> None:
    """The class names printed with each FAIL and in the table of classes, worked out by hand:
    '=' is i = −1; c_0, c_1 and c_{n−1} … c_{n+1} are named, 2 ≤ i ≤ n − 2 share one name."""
    assert mlp.ClassSpec(i, n, None, dict.fromkeys(reads)).describe() == text


def test_a_table_splits_exactly_into_its_constant_and_varying_coordinates() -> None:
    """The MLP tables are split into what no digit changes (entry 0's enclosure) and the rest; the
    split must be exact: constant + varying part == every entry, coordinate by coordinate, with
    coordinates whose entries differ only in the lower end, only in the upper end, in both, or in
    neither (interval tables, not only exact ones)."""
    lo = np.array([[1.0, 2.0, 3.0, 4.0], [0.5, 2.0, 3.0, 4.0], [1.0, 2.0, 2.0, 4.0]])
    hi = np.array([[1.5, 2.5, 3.5, 4.5], [1.5, 2.75, 3.5, 4.5], [1.5, 2.5, 3.25, 4.5]])
    table = Iv(lo, hi)
    mask = mlp._varying(table)
    assert mask.tolist() == [True, True, True, False]  # lower end only, upper end only, both, neither
    const, var = mlp._split(table, mask)
    assert np.array_equal(const.lo + var.lo, lo) and np.array_equal(const.hi + var.hi, hi)
    assert np.array_equal(const.lo, [0.0, 0.0, 0.0, 4.0]) and np.array_equal(var.lo[:, 3], [0.0, 0.0, 0.0])


def _layer3_on_one_coordinate(x: list[float], targets: list[int], w3: list[float], b3: list[float], w_u: list[float],
                              const: float = 0.0):
    """Step 3 (``mlp._layer3``) on a residual with one coordinate that layer 3 and the readout read:
    at configuration j it is ``const + x[j]`` (``const``: the part no digit changes). Layer 3 has
    units with weights ``w3`` on it and biases ``b3`` and writes nothing; logit(k) = w_u[k]·x, no bias."""
    W = SimpleNamespace(W_in={2: np.array([w3])}, b_in={2: np.array(b3, dtype=np.float64)},
                        W_out={2: np.zeros((len(w3), 1))}, b_out={2: np.zeros(1)},
                        W_U=np.array([w_u], dtype=np.float64), b_U=np.zeros(len(w_u)))
    values = np.array(x, dtype=np.float64)[:, None]
    parts = [(Iv.exact(values), np.arange(len(x)))]
    return mlp._layer3(W, np.array([0]), np.array(targets), Iv.exact([const]), np.array([True]), parts,
                       len(x), [])


def test_configurations_share_a_group_where_their_layer3_inputs_round_to_one_grid_point() -> None:
    """Inputs 0 and 2^-12 round to the grid point 0 of the 2^-10 grid, 1 and 1 + 3·2^-13 to 1024·2^-10,
    and 3 twice, but with two different targets: 4 groups of the 6 configurations (worked out by hand;
    an exact input has an enclosure of width 0, the others one of a few ulps)."""
    tables = _layer3_on_one_coordinate([0.0, 2.0**-12, 1.0, 1.0 + 3 * 2.0**-13, 3.0, 3.0], [1, 1, 1, 1, 1, 2],
                                       w3=[1.0], b3=[0.5], w_u=[0.0, 1.0, 1.0])
    assert tables.n_groups == 4 and sorted(tables.target.tolist()) == [1, 1, 1, 2]


def test_a_hard_max_tie_between_two_logits_is_a_fail() -> None:
    """logit = (0, 0, −x) at x = 2 with target 0: tokens 0 and 1 tie exactly (margin 0, the only margin
    ≤ 0), which must be reported as the pair the hard-max limit does not separate. With logit =
    (x, 0, −x) the margins are 2 and 4 (lower bounds within an enclosure's width) and nothing is reported."""
    tie = _layer3_on_one_coordinate([2.0], [0], w3=[0.0], b3=[0.0], w_u=[0.0, 0.0, -1.0])
    assert tie.margin[0, :2].tolist() == [np.inf, 0.0] and 2 - 1e-12 < tie.margin[0, 2] <= 2
    assert tie.hardmax_error == ("the hard-max limit does not separate token 0 from token 1 on a group of "
                                 "configurations (margin lower bound 0)")
    apart = _layer3_on_one_coordinate([2.0], [0], w3=[0.0], b3=[0.0], w_u=[1.0, 0.0, -1.0])
    assert apart.hardmax_error == "" and apart.margin[0, 0] == np.inf
    assert 2 - 1e-12 < apart.margin[0, 1] <= 2 and 4 - 1e-12 < apart.margin[0, 2] <= 4


def test_the_part_of_a_layer3_input_that_no_digit_changes_counts_once() -> None:
    """The input is 4 + x with x ∈ {0, 1}; the unit's pre-activation 6 − (4 + x) ∈ {2, 1} never changes
    sign and stays ≥ 1 from 0 (hand). Counting the 4 a second time, even as the interval [0, 4], would
    move it to [−3, 1], a sign change."""
    tables = _layer3_on_one_coordinate([0.0, 1.0], [0, 0], w3=[-1.0], b3=[6.0], w_u=[1.0, 0.0], const=4.0)
    assert tables.hardmax_error == ""
    assert 1 - 1e-12 < tables.reserve[0] <= 1


def test_the_table_of_classes_counts_the_configurations_of_the_low_answer_positions() -> None:
    """At N = 2 (hand count): '=' sees a_0, b_0, b_1, 10^3 configurations; c_0 and c_1 see a_0, a_1,
    b_0, b_1, 10^4 each (the carry into column 1 follows from a_0·b_0)."""
    cert = certify(_model(), N)
    assert [(name.split()[0], n_cfg) for name, _, n_cfg, *_ in cert.classes[:3]] == [("'='", 1000), ("c_0", 10_000),
                                                                                       ("c_1", 10_000)]
