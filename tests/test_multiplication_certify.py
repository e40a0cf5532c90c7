"""The multiplication certificate (docs/multiplication.md, "Certificate"): the bound agrees with what
build_model accepts, ``margins`` passes for the built models, each single break flips the verdict,
its deviation bounds contain the deviations of a float64 forward pass, and the CLI's exit codes."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from lengthgen.positions import hypercube_codes
from constructions.multiplication import CapacityError, build_model, instance
from constructions.multiplication.certify.bound import bound_lines, n_max, queried_ids
from constructions.multiplication.certify.cli import main
from constructions.multiplication.certify.margins import certify
from constructions.multiplication.certify.mlp import configurations, reachable_carries
from lengthgen.tasks import MULTIPLICATION_NX2
from constructions.multiplication.certify.search import smallest_sharpness, with_sharpness
from constructions.multiplication.layout import position_dims
from cli_checks import assert_one_line_error

CACHE: dict = {}  # the MLP tables do not depend on W_Q, W_K or N: one width shares them between the tests below
WIDTH = 69  # n_max(69) = 2042


@pytest.mark.parametrize("d", [37, 41, 45, 50, 53])
def test_bound_is_what_build_model_accepts(d: int) -> None:
    n = n_max(d)
    build_model(n_digits=n, d_model=d)
    with pytest.raises(CapacityError):
        build_model(n_digits=n + 1, d_model=d)
    P = position_dims(d)
    codes = lambda ids: {tuple(hypercube_codes([p], P)[0]) for p in ids}  # noqa: E731
    assert len(codes(queried_ids(n))) == len(queried_ids(n))  # every queried ID has its own code at n_max …
    assert len(codes(queried_ids(n + 1))) < len(queried_ids(n + 1))  # … and two collide one digit later
    assert f"n_max({d}) = 2^{P} − 6 = {n}" in "\n".join(bound_lines(d))


def test_reachable_carries_are_those_of_schoolbook_multiplication() -> None:
    seen = set()
    for a in range(0, 10**4, 7):
        for b in (9, 47, 99, 98, 19):
            carry = 0
            for digit in map(int, reversed(str(a).zfill(6))):
                column = digit * (b % 10) + carry
                seen.add(carry)
                carry = column // 10
    assert seen <= set(reachable_carries().tolist()) == set(range(18))


@pytest.mark.parametrize("n", [1, 2, 5])
def test_every_input_is_one_of_the_enumerated_configurations(n: int) -> None:
    """Each answer position of a real input (laid out by lengthgen.tasks, answer from Python integers)
    shows the certificate a local configuration that it enumerates, with the right target token."""
    rng = np.random.default_rng(n)
    carries = reachable_carries()
    tables = {i: configurations(i, n, carries) for i in range(-1, n + 2)}
    pairs = [("9" * n, 99), ("0" * n, 0)] + [("".join(rng.choice(list("0123456789"), n)), int(rng.integers(100)))
                                            for _ in range(16)]
    for a, b in pairs:
        inst = MULTIPLICATION_NX2.instance(a, str(b).zfill(2), start=2)
        answer = inst.tokens[n + 5: 2 * n + 8]  # c_0 … c_{n+1}, then '$'
        digit = lambda j: int(a[n - 1 - j]) if 0 <= j < n else 0  # noqa: E731
        for i in range(-1, n + 2):
            cfg = tables[i]
            hit = (cfg[("b", 0)] == b % 10) & (cfg[("b", 1)] == b // 10) & (cfg["target"] == answer[i + 1])
            for r in (1, 0, -1, -2):
                hit &= cfg[("a", r)] == digit(i + r)
            if i >= 0:
                hit &= cfg[("c", 0)] == answer[i]
            assert hit.any(), (a, b, i)


@pytest.mark.parametrize("n", [5, 50, 2000])
def test_passes_for_the_built_model(n: int) -> None:
    model, _ = build_model(n_digits=n, d_model=WIDTH)
    cert = certify(model, n, cache=CACHE)
    assert cert.passed and cert.reason == "" and cert.slack > 1, cert.message
    assert sum(count for _, count, _, _, _ in cert.classes) == n + 3  # '=' and c_0 … c_{n+1}


def _broken(edit, n: int = 2, M: float | None = None):
    model, _ = build_model(n_digits=n, M=M)
    labels = model.annotations.residual
    with torch.no_grad():
        edit(model, labels)
    return certify(model, n, cache=CACHE)


def test_the_unbroken_small_model_passes() -> None:
    assert _broken(lambda model, labels: None).passed


def test_fails_when_a_layer2_key_weight_is_halved() -> None:
    def edit(model, labels):  # the a_i head's sink key: '$' no longer ties with a_i
        model.blocks[1].attn.W_K[3][labels.index("IS_BOS")] *= 0.5
    cert = _broken(edit)
    assert not cert.passed and cert.reason == "hardmax", cert.message


def test_fails_when_a_layer3_ramp_moves_into_the_attainable_range() -> None:
    def edit(model, labels):  # the step at T = 100·3 + 45 moves to T = 305, which T reaches
        unit = model.annotations.mlp.index(next(u for u in model.annotations.mlp if u.endswith("T>300_45.0")))
        model.blocks[2].mlp.W_in[labels.index("ONE"), unit] += 40
    cert = _broken(edit)
    assert not cert.passed and cert.reason == "hardmax", cert.message


@pytest.mark.parametrize("edit, needle", [
    (lambda model, labels: model.blocks[0].mlp.W_out.__setitem__((0, labels.index("A0")), 1.0), "layer-1 MLP"),
    (lambda model, labels: model.blocks[0].attn.W_V[0].__setitem__((labels.index("NUM"), 0), 1.0), "depend on the digit"),
])
def test_fails_with_structure_when_the_chain_does_not_apply(edit, needle) -> None:
    cert = _broken(edit)
    assert not cert.passed and cert.reason == "structure" and needle in cert.message, cert.message


def test_fails_when_M_is_too_small() -> None:
    cert = _broken(lambda model, labels: None, M=3.0)
    assert not cert.passed and cert.reason in ("stability", "readout"), cert.message


def test_smallest_certified_M_passes_and_the_failing_one_fails() -> None:
    model, meta = build_model(n_digits=5, d_model=WIDTH)
    search = smallest_sharpness(model, 5, meta["M"], rel_tol=0.02, cache=CACHE)
    assert search.M is not None and search.M_fail is not None and search.M_fail < search.M < meta["M"]
    assert certify(with_sharpness(model, search.M), 5, cache=CACHE).passed
    assert not certify(with_sharpness(model, search.M_fail), 5, cache=CACHE).passed


def test_deviation_bounds_contain_those_of_a_float64_forward_pass() -> None:
    """At the hard-max limit B0 = b_0, B1 = b_1, A0 and A1 are the digit sums of docs/multiplication.md
    (computed here from Python integers); a float64 pass over the certified weights at a blunt M must
    stay within the bounds."""
    n, M = 12, 9.0
    model, _ = build_model(n_digits=n, d_model=WIDTH, M=M)
    cert = certify(model, n, cache=CACHE)
    assert cert.passed, cert.message
    model = model.to(torch.float64)  # the certified float32 weights, evaluated in float64
    labels = model.annotations.residual
    worst = {k: 0.0 for k in ("B0", "B1", "A0", "A1")}
    for a, b in (("9" * n, 99), ("123456789012", 87), ("909090909090", 19)):
        inst = instance(a, b)
        _, acts = model(torch.tensor(inst.tokens[None, :-1]), torch.tensor(inst.pos_ids[None, :-1]), return_cache=True)
        resid = acts["blocks.1.hook_resid_mid"][0].numpy()
        digit = lambda j: int(a[n - 1 - j]) if 0 <= j < n else 0  # noqa: E731
        for q in range(inst.prompt_len - 1, len(inst.tokens) - 1):
            i = q - (n + 5)
            want = {"B0": b % 10, "B1": b // 10, "A0": 100 * digit(i + 1) + 10 * digit(i) + digit(i - 1),
                    "A1": 100 * digit(i) + 10 * digit(i - 1) + digit(i - 2)}
            for k, v in want.items():
                worst[k] = max(worst[k], abs(float(resid[q, labels.index(k)]) - v))
    for k, v in worst.items():
        assert v <= cert.deltas[k], (k, v, cert.deltas[k])
        assert v >= cert.deltas[k] * 1e-3  # the pass does deviate (M is blunt), and the bound is within 1000×


@pytest.mark.parametrize("argv, needle", [
    (["frobnicate"], "invalid choice"),
    (["bound", "--d-model", "32"], "at least 33"),
    (["bound", "--table", "--max-d", "20"], "--max-d must be at least 33"),
    (["margins", "--digits", "0"], "positive"),
    (["margins", "--digits", "11", "--d-model", "41"], "beyond n_max(41)"),
    (["margins", "--digits", "5", "--d-model", "30"], "at least 33"),
    (["margins", "--digits", "5", "--M", "0"], "--M must be positive"),
    (["margins", "--digits", "5", "--dtype", "float32"], "exact real arithmetic only"),
    (["margins"], "required"),
])
def test_bad_input_is_one_line_and_exit_2(argv, needle, capsys) -> None:
    assert_one_line_error(main, argv, "python -m constructions.multiplication.certify", needle, capsys)


def test_margins_cli_pass_and_fail(capsys) -> None:
    assert main(["margins", "--digits", "3", "--no-search"]) == 0
    out = capsys.readouterr().out
    for needle in ("float rounding of a forward pass is NOT covered", "layer 2 head 5", "|Δ A0|", "slack ×",
                   "PASS (real arithmetic)"):
        assert needle in out, needle
    assert main(["margins", "--digits", "3", "--M", "2", "--no-search"]) == 1
    assert "FAIL" in capsys.readouterr().out.splitlines()[-1]


def test_bound_cli_prints_the_derivation(capsys) -> None:
    assert main(["bound", "--d-model", "93"]) == 0
    out = capsys.readouterr().out
    assert "n + 6 distinct non-zero IDs" in out and "n_max(93) = 2^17 − 6 = 131066" in out
    assert main(["bound", "--table", "--max-d", "45"]) == 0
    assert np.array_equal([int(line.split()[2]) for line in capsys.readouterr().out.splitlines()[1:] if int(line.split()[0]) >= 37],
                          [n_max(d) for d in range(37, 46)])


def test_the_low_answer_positions_enumerate_exactly_the_configurations_of_real_inputs() -> None:
    """At '=', c_0 and c_1 no carry comes from below the window (the carry into column 0 is 0), so
    the enumeration is not a superset there but exactly the configurations that the 10 000 real
    2-digit × 2-digit inputs show (Python integers); and no answer position lists a configuration
    twice (a duplicate costs a table row and proves nothing)."""
    n = 2
    tables = {i: configurations(i, n, reachable_carries()) for i in range(-1, n + 2)}
    names = [("a", 1), ("a", 0), ("a", -1), ("a", -2), ("b", 0), ("b", 1)]
    for i, cfg in tables.items():
        rows = list(zip(*(cfg[v] for v in names), cfg.get(("c", 0), cfg["target"]), cfg["target"]))
        assert len(set(rows)) == len(rows), i
    for i in (-1, 0, 1):
        cfg = tables[i]
        listed = set(zip(*(cfg[v] for v in names), cfg.get(("c", 0), cfg["target"]), cfg["target"]))
        seen = set()
        for a in range(100):
            for b in range(100):
                inst = MULTIPLICATION_NX2.instance(str(a).zfill(n), str(b).zfill(2), start=2)
                answer = inst.tokens[n + 5: 2 * n + 8]
                digit = lambda j: (a // 10**j) % 10 if 0 <= j < n else 0  # noqa: E731
                c0 = answer[i] if i >= 0 else answer[i + 1]
                seen.add((*(digit(i + r) for r in (1, 0, -1, -2)), b % 10, b // 10, c0, answer[i + 1]))
        assert listed == seen, (i, len(listed), len(seen))
