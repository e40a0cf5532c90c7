"""The adversarial search of the trained-model certificate (``lengthgen.certify --attack``).

Oracles: greedy decoding against Python's a + b, the exhaustive forward passes of
tests/test_certify_trained.py, and :func:`lengthgen.proof.counterexamples.wrong_positions` (the
project's decision rule); never the search's own margins alone. And the search must catch a proof
that claims too much: a doctored certificate result raises UnsoundProof.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from lengthgen import certify as cli
from lengthgen.decode import DECISION_MARGIN
from lengthgen.evaluate import main as evaluate_main
from lengthgen.proof.attack import MarginOracle, UnsoundProof, as_strings, attack, attack_answer, carries_into, \
    configuration_of, descend, random_pairs
from lengthgen.proof.counterexamples import realize, wrong_positions
from lengthgen.runs import checkpoint_notes, load_checkpoint, with_notes, write_checkpoint
from tests.cli_checks import assert_one_line_error
from tests.test_certify_trained import START, all_pairs, planted_defect, wrong_matrix
from tests.test_committed_models import wrong_digits

SINK50 = "checkpoints/addition_coupled_sink_1l2h_packed_50_entropy_late"
SCHEME = "coupled-sink"


@pytest.fixture(scope="module")
def sink50():
    """The 1-5-digit sink model with the late entropy penalty at 10 digits, and its certificate at
    answer position 9 (window significances 8..9), which it leaves unproven on all of its 16200
    configurations, some of them really wrong (docs/certificate.md)."""
    model, _, _ = load_checkpoint(SINK50, 10)
    lay = cli.addition_layout(10, START, SCHEME)
    (res,) = cli.certify(model, 10, START, positions=[9], scheme=SCHEME)
    return model, lay, res


@pytest.fixture(scope="module")
def sink50_position_1(sink50):
    """The same model's certificate at answer position 1, which proves all but 6 of its 10000
    configurations (smallest proven margin 0.0105); the model is wrong on some of those 6
    (3333333309 + 3333333302)."""
    model, lay, _ = sink50
    (res,) = cli.certify(model, 10, START, positions=[1], scheme=SCHEME)
    return model, lay, res


def test_margins_agree_with_the_decision_rule(sink50):
    """margin ≤ the decision margin exactly where wrong_positions (the rule of lengthgen.evaluate)
    says the answer at position 9 is wrong: on random pairs and on the pairs the search ends at."""
    model, lay, res = sink50
    rng = np.random.default_rng(1)
    a, b = random_pairs(lay, 60, rng)
    oracle = MarginOracle(model, lay, 9, SCHEME)
    a2, b2, _ = descend(oracle, a[:20].copy(), b[:20].copy(), 0, 0, 2, rng)
    a, b = np.concatenate([a, a2]), np.concatenate([b, b2])
    m = oracle.margins(a, b)
    wrong = [9 in w for w in wrong_positions(model, [as_strings(x, y) for x, y in zip(a, b)], START, scheme=SCHEME)]
    assert list(m <= DECISION_MARGIN) == wrong
    assert any(wrong) and not all(wrong)  # both sides of the rule are exercised (measured: 0 and 7 of 80)


def test_descent_keeps_the_window_and_its_carry_and_only_lowers_the_margin(sink50):
    model, lay, res = sink50
    rng = np.random.default_rng(2)
    lo, hi = res.window
    pairs = [realize(lay, lo, *cfg, rng) for cfg in res.failed[:12]]
    a = np.array([[int(x) for x in p[0][::-1]] for p in pairs])
    b = np.array([[int(x) for x in p[1][::-1]] for p in pairs])
    oracle = MarginOracle(model, lay, 9, SCHEME)
    start = oracle.margins(a, b)
    a2, b2, m = descend(oracle, a, b, lo, hi - lo + 1, 2, rng)
    assert [configuration_of(x, y, lo, hi) for x, y in zip(a2, b2)] == [configuration_of(x, y, lo, hi) for x, y in zip(a, b)]
    assert np.array_equal(carries_into(a2, b2, lo), carries_into(a, b, lo))
    assert np.all(a2[:, -1] > 0) and np.all(b2[:, -1] > 0)  # leading digits stay non-zero
    assert np.array_equal(m, oracle.margins(a2, b2)) and np.all(m <= start) and np.any(m < start)


def test_carries_into_is_school_addition():
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 10, size=(2, 200, 6))
    for lo in range(7):
        want = [int(int("".join(map(str, x[:lo][::-1])) or "0") + int("".join(map(str, y[:lo][::-1])) or "0") >= 10**lo)
                for x, y in zip(a, b)]
        assert carries_into(a, b, lo).tolist() == want


def test_the_search_finds_real_errors_and_they_are_wrong_when_decoded_greedily(sink50):
    """At answer position 9 the search from 10 random pairs and inside 10 unproven configurations,
    two sweeps each, ends at pairs the model answers wrong (measured: 4, the smallest margin −23.3,
    all from the random starts); greedy decoding of each against Python's a + b disagrees, and each
    lies in a configuration the certificate left unproven."""
    model, lay, res = sink50
    out = attack(model, lay, res, SCHEME, 10, sweeps=2)
    assert out.wrong_pairs and out.global_min_margin <= DECISION_MARGIN
    unproven = {(tuple(map(int, a)), tuple(map(int, b)), c) for a, b, c in res.failed}
    for a, b in out.wrong_pairs:
        assert wrong_digits(model, int(a), int(b), SCHEME), (a, b)
        da, db = (np.array([int(x) for x in s[::-1]]) for s in (a, b))
        assert configuration_of(da, db, *res.window) in unproven


def test_a_proof_that_claims_too_much_is_caught(sink50_position_1):
    """The search against a doctored result: one that lists none of its configurations as
    unproven (a proof of everything), and one whose proven margin is raised above what the model
    keeps (measured: 200 random pairs, all in proven configurations, have margins of 0.55 to 18.1)."""
    model, lay, res = sink50_position_1
    assert res.failed and np.isfinite(res.min_margin)
    attack(model, lay, res, SCHEME, 10, sweeps=2)  # the real result passes
    with pytest.raises(UnsoundProof, match="answer position 1: .* was proven"):
        attack(model, lay, dataclasses.replace(res, failed=[]), SCHEME, 10, sweeps=2)
    with pytest.raises(UnsoundProof, match="proven with a margin of at least 30"):
        attack(model, lay, dataclasses.replace(res, min_margin=30.0), SCHEME, 10, sweeps=2)


def test_the_planted_defect_is_found_from_random_pairs():
    """Two-digit construction with one unit rewired (tests/test_certify_trained.py): the search
    from random pairs finds wrong pairs, and exactly the pairs the exhaustive forward pass marks
    wrong at that position are among them or have larger margins."""
    n = 2
    model = planted_defect(n)
    results = cli.certify(model, n, START)
    attacks = cli.attack_positions(model, n, START, results, 30)
    wrong = wrong_matrix(model, all_pairs(n), n)
    truly_wrong = {(r, f"{a:02d}", f"{b:02d}") for k, (a, b) in enumerate(all_pairs(n)) for r in range(n + 2)
                   if wrong[k, r]}
    found = {(x.r, a, b) for x in attacks for a, b in x.wrong_pairs}
    assert found and found <= truly_wrong


def test_cli_attack_json_and_report(tmp_path, capsys):
    model = planted_defect(2)
    with_notes(model, checkpoint_notes(task="addition", positions="coupled", name="planted", kind="construction"))
    write_checkpoint(tmp_path / "planted", model, {"made_by": "test"})
    argv = ["--checkpoint", str(tmp_path / "planted"), "--digits", "2", "--attack", "10"]
    assert cli.main(argv + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for p in out["positions"]:
        x = p["attack"]
        assert set(x) == {"configurations", "min_margin", "worst_pair", "global_min_margin", "global_worst_pair"}
        assert x["configurations"] <= 10 and (p["proven"] < p["configurations"]) == (x["configurations"] > 0)
        assert (x["min_margin"] is None) == (x["configurations"] == 0)
        assert len(x["global_worst_pair"]) == 2
    assert any(p["attack"]["global_min_margin"] <= DECISION_MARGIN for p in out["positions"])
    first = out["counterexamples"][0]
    assert out["reproduce"] == (f"python -m lengthgen.evaluate --checkpoint {tmp_path / 'planted'} --a {first['a']} "
                                f"--b {first['b']}")
    assert evaluate_main(out["reproduce"].split()[3:]) == 1  # the printed command: the model really is wrong there
    assert cli.main(argv) == 0
    assert "adversarial search from random pairs, every digit free: smallest answer margin" in capsys.readouterr().out


def test_cli_attack_must_not_be_negative(capsys):
    assert_one_line_error(cli.main, ["--checkpoint", "checkpoints/addition_coupled_1l2h", "--digits", "3",
                                     "--attack", "-1"], cli.PROG, "--attack at least 0", capsys)


class StubOracle:
    """A margin that a descent free to change the carry into significance ``lo`` would lower by
    flipping it (−10 where the carry differs from the one the row started with), minus a little
    for every large digit; counts its calls."""

    def __init__(self, n: int, lo: int, start_carry: np.ndarray, flat: bool = False):
        self.lay = cli.addition_layout(n, START)
        self.lo, self.start_carry, self.flat, self.calls = lo, start_carry, flat, 0

    def margins(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        self.calls += 1
        if self.flat:
            return np.zeros(len(a))
        k = len(a) // len(self.start_carry)
        flipped = carries_into(a, b, self.lo) != np.repeat(self.start_carry, k)
        return -10.0 * flipped - (a.sum(axis=1) + b.sum(axis=1)) / 1000


def test_descent_never_trades_the_carry_into_the_window_for_a_lower_margin():
    rng = np.random.default_rng(4)
    lay = cli.addition_layout(6, START)
    a, b = random_pairs(lay, 40, rng)
    lo = 3
    carry = carries_into(a, b, lo)
    assert 0 < carry.sum() < len(carry)  # both carries start somewhere
    a2, b2, m = descend(StubOracle(6, lo, carry), a, b, lo, 2, 3, rng)
    assert np.array_equal(carries_into(a2, b2, lo), carry) and np.all(m > -10)
    assert np.all(a2[:, lo + 2:] == 9) and np.all(b2[:, lo + 2:] == 9)  # the free digits above did move


def test_a_sweep_that_lowers_nothing_ends_the_descent():
    rng = np.random.default_rng(5)
    lay = cli.addition_layout(6, START)
    a, b = random_pairs(lay, 4, rng)
    oracle = StubOracle(6, 0, np.zeros(4, dtype=np.int64), flat=True)
    descend(oracle, a, b, 0, 2, 5, rng)
    assert oracle.calls == 1 + 2 * 4  # the start, then one sweep over 2 operands × 4 free digits


def test_the_whole_answer_search_finds_errors_without_a_proof(sink50):
    """attack_answer (no certificate): 10 random 10-digit pairs descended on the smallest margin
    over every answer position end at pairs the model answers wrong (measured: 6 of 10), each
    wrong when decoded greedily against Python's a + b; the worst position it names is one where
    the per-position margin is that smallest one."""
    model, lay, _ = sink50
    out = attack_answer(model, lay, SCHEME, 10, sweeps=2)
    assert out.wrong_pairs and out.min_margin <= DECISION_MARGIN
    for a, b in out.wrong_pairs:
        assert wrong_digits(model, int(a), int(b), SCHEME), (a, b)
    oracle = MarginOracle(model, lay, None, SCHEME)
    da, db = (np.array([[int(x) for x in s[::-1]]]) for s in out.worst_pair)
    per_position = oracle.position_margins(da, db)[0]
    assert per_position.shape == (12,) and per_position[out.worst_position] == per_position.min()
    assert per_position.min() == pytest.approx(out.min_margin, abs=1e-9)  # one row alone: other float blocking


def test_whole_answer_margins_are_the_smallest_of_the_single_position_ones(sink50):
    model, lay, _ = sink50
    a, b = random_pairs(lay, 8, np.random.default_rng(6))
    whole = MarginOracle(model, lay, None, SCHEME).position_margins(a, b)
    single = np.stack([MarginOracle(model, lay, r, SCHEME).margins(a, b) for r in range(12)], axis=1)
    assert np.allclose(whole, single, rtol=0, atol=1e-9)


def test_cli_no_proof(capsys):
    argv = ["--checkpoint", SINK50, "--digits", "10", "--no-proof", "--attack", "6", "--json", "--counterexamples", "2"]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] is None and out["digits"] == 10
    assert set(out["attack"]) == {"starts", "min_margin", "worst_pair", "worst_position", "wrong_pairs"}
    assert out["attack"]["wrong_pairs"] >= 1 and 1 <= len(out["counterexamples"]) <= 2
    assert evaluate_main(out["reproduce"].split()[3:]) == 1
    capsys.readouterr()
    assert_one_line_error(cli.main, ["--checkpoint", SINK50, "--digits", "10", "--no-proof"], cli.PROG,
                          "--no-proof runs only the adversarial search: give --attack K", capsys)


def test_counterexamples_include_the_searched_pairs(sink50):
    """At position 9 the random realizations of the first 40 unproven configurations find no
    wrong pair (measured); with the search's pairs added, find_counterexamples prints them, each
    confirmed wrong there by its own forward pass."""
    model, lay, res = sink50
    assert cli.find_counterexamples(model, 10, START, [res], 10, scheme=SCHEME) == []
    searched = attack(model, lay, res, SCHEME, 10, sweeps=2)
    found = cli.find_counterexamples(model, 10, START, [res], 10, scheme=SCHEME, attacks=[searched])
    assert found and {(c["a"], c["b"]) for c in found} <= set(searched.wrong_pairs)
    assert all(c["answer_position"] == 9 for c in found)


def test_the_random_starts_are_held_to_the_proof_too(sink50_position_1, monkeypatch):
    """With a descent that always ends inside unproven configurations, only the check of the
    random starts (which lie in proven ones) can catch a raised proven margin."""
    import lengthgen.proof.attack as attack_module

    model, lay, res = sink50_position_1
    stuck = [realize(lay, res.window[0], *res.failed[0], np.random.default_rng(0))]
    a = np.array([[int(x) for x in stuck[0][0][::-1]]])
    b = np.array([[int(x) for x in stuck[0][1][::-1]]])

    def into_unproven(oracle, a0, b0, *args, **kwargs):
        k = len(a0)
        return np.repeat(a, k, axis=0), np.repeat(b, k, axis=0), oracle.margins(np.repeat(a, k, axis=0),
                                                                                 np.repeat(b, k, axis=0))

    monkeypatch.setattr(attack_module, "descend", into_unproven)
    attack(model, lay, res, SCHEME, 5)
    with pytest.raises(UnsoundProof, match="proven with a margin of at least 30"):
        attack(model, lay, dataclasses.replace(res, min_margin=30.0), SCHEME, 5)
