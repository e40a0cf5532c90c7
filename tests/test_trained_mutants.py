"""The parts of the trained-model certificate that the end-to-end tests reach only in bulk, each
against an oracle of its own (Python integers, exact fractions, the keys of a real instance, values
worked out by hand, a float64 forward pass):

- :func:`lengthgen.proof.counterexamples.realize` and ``wrong_positions``: the operand pairs built
  from a local configuration, the answer positions a model misses;
- the windows, their configurations and their exact probability, ``refined_configurations`` for ``--widen-to``;
- the fixed and free keys, the window's widening, the decision at the margin, the refusals.

The enclosures themselves: tests/test_trained_enclosures.py.
"""
from __future__ import annotations

import copy
from fractions import Fraction
from itertools import product

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from constructions.addition.model import build_model
from lengthgen.proof.counterexamples import realize, wrong_positions
from lengthgen.proof.interval import Iv
from lengthgen.proof.trained import Layout, PositionResult, configurations, propagate, refined_configurations
from lengthgen.tasks import ADDITION

START = 2
DECISION_MARGIN = 1e-3  # the project's decision margin (docs): a literal, not read from the code


def layout(n: int) -> Layout:
    return Layout(n, START, ADDITION.vocab.index("$"), ADDITION.vocab.index("+"), ADDITION.vocab.index("="))


def certifier(n: int, model: torch.nn.Module, **options):
    """A :class:`~lengthgen.proof.trained.PositionCertifier` of ``model`` at N = n (its tables built)."""
    from lengthgen.proof.trained import PositionCertifier
    from lengthgen.proof.trained_tables import OneLayer, Tables

    w = OneLayer.from_model(model)
    return PositionCertifier(w, Tables.build(w), layout(n), **options)


@st.composite
def windows(draw):
    """(N, lo, window digits of a and b, carry into lo): a window anywhere, the lead included."""
    n = draw(st.integers(1, 7))
    lo = draw(st.integers(0, n - 1))
    width = draw(st.integers(1, n - lo))
    digit = lambda j: st.integers(1 if (j == n - 1 and n > 1) else 0, 9)  # noqa: E731
    a_w = [draw(digit(lo + i)) for i in range(width)]
    b_w = [draw(digit(lo + i)) for i in range(width)]
    carry = draw(st.integers(0, 1)) if lo > 0 else 0
    return n, lo, np.array(a_w), np.array(b_w), carry


@settings(max_examples=300, deadline=None)
@given(windows(), st.integers(0, 2**32 - 1))
def test_realized_pairs_hold_the_window_the_carry_and_the_leading_digit(case, seed):
    n, lo, a_w, b_w, carry = case
    a, b = realize(layout(n), lo, a_w, b_w, carry, np.random.default_rng(seed))
    for text, w in ((a, a_w), (b, b_w)):
        assert len(text) == n and text.isdigit()
        assert n == 1 or text[0] != "0"  # an N-digit operand, as lengthgen.evaluate samples them
        value = int(text)
        assert [(value // 10**(lo + i)) % 10 for i in range(len(w))] == list(w)
    assert int((int(a) % 10**lo) + (int(b) % 10**lo) >= 10**lo) == carry  # Python-integer carry into lo


def test_realized_pairs_vary_outside_the_window():
    """Digits outside the window are random, so that different tries are different pairs."""
    pairs = {realize(layout(6), 2, np.array([3, 4]), np.array([5, 6]), 1, np.random.default_rng(s)) for s in range(20)}
    assert len(pairs) > 10


@torch.inference_mode()
def test_wrong_positions_are_the_positions_the_float64_model_misses():
    """The construction with blunt attention (M = 3: some sums come out wrong): each pair's wrong
    positions are exactly those where the float64 model's top logit is not the true digit of the
    Python sum by more than the margin, with the tokens named."""
    n = 4
    model, _ = build_model(n_digits=n, M=3.0)
    rng = np.random.default_rng(3)
    pairs = [(str(a), str(b)) for a, b in zip(rng.integers(1000, 10**4, 295), rng.integers(1000, 10**4, 295))]
    found = wrong_positions(model, pairs, START, batch=7)  # 295 = 42·7 + 1: a last batch of one pair
    assert len(found) == len(pairs)
    m64 = copy.deepcopy(model).to(torch.float64)
    for (a, b), bad in zip(pairs, found):
        truth = str(int(a) + int(b)).zfill(n + 1)[::-1] + "$"
        inst = ADDITION.instance(a, b, start=START)
        logits = m64(torch.as_tensor(inst.tokens[None, :-1]), torch.as_tensor(inst.pos_ids[None, :-1]))[0]
        answer = logits[inst.prompt_len - 1:].numpy()
        expect = {}
        for r, ch in enumerate(truth):
            row = answer[r]
            t = ADDITION.vocab.index(ch)
            others = np.delete(row, t)
            if not row[t] - others.max() > DECISION_MARGIN:
                top = int(np.argmax(row))
                second = np.sort(row)[-2]
                pred = ADDITION.vocab[top] if row[top] - second > DECISION_MARGIN else "undecided"
                expect[r] = (ch, pred)
        assert bad == expect, (a, b)
    assert sum(map(len, found)) > 0  # the model really misses some


def test_configurations_are_every_window_assignment_with_its_multiplicity():
    """Unordered per significance (a ≤ b), each standing for 1 or 2 ordered ones: the ordered
    expansion is exactly the product of the digit sets (leading digit non-zero) and the carries."""
    for n, lo, hi in ((1, 0, 0), (3, 0, 1), (3, 1, 2), (4, 2, 2)):
        lay = layout(n)
        a, b, carry, mult = configurations(lay, lo, hi)
        seen: dict[tuple, int] = {}
        for x, y, k, m in zip(a, b, carry, mult):
            assert np.all(x <= y)
            key = (tuple(x), tuple(y), int(k))
            assert key not in seen
            seen[key] = int(m)
            assert m == 2 ** int(np.sum(x != y))
        sets = [range(1 if (j == n - 1 and n > 1) else 0, 10) for j in range(lo, hi + 1)]
        ordered = set(product(product(*sets), product(*sets), (0, 1) if lo > 0 else (0,)))
        expanded = {(xa, xb, k) for (x, y, k) in seen
                    for swap in product((0, 1), repeat=len(x))
                    for xa, xb in [(tuple(q if s else p for p, q, s in zip(x, y, swap)),
                                    tuple(p if s else q for p, q, s in zip(x, y, swap)))]}
        assert expanded == ordered
        assert int(mult.sum()) == len(ordered)


def test_propagate_is_school_addition():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 10, (50, 4)), rng.integers(0, 10, (50, 4))
    carry = rng.integers(0, 2, 50)
    c, top = propagate(a, b, carry)
    for i in range(50):
        x = sum(int(d) * 10**j for j, d in enumerate(a[i]))
        y = sum(int(d) * 10**j for j, d in enumerate(b[i]))
        total = x + y + int(carry[i])
        assert [(total // 10**j) % 10 for j in range(4)] == list(c[i]) and total // 10**4 == top[i]



def test_realized_pairs_reach_every_digit_outside_the_window():
    """Outside the window (and the digit below it that forces the carry) every digit occurs: 1–9 at
    the lead, 0–9 elsewhere, in both operands."""
    n, lo = 5, 2
    seen = [[set(), set()] for _ in range(n)]
    rng = np.random.default_rng(0)
    for _ in range(400):
        for k, text in enumerate(realize(layout(n), lo, np.array([4]), np.array([4]), 1, rng)):
            for j, ch in enumerate(reversed(text)):
                seen[j][k].add(int(ch))
    for j in (0, 3):
        assert seen[j] == [set(range(10))] * 2, j
    assert seen[n - 1] == [set(range(1, 10))] * 2


def refines_by_integers(parent_failed, pwin, lo, hi, a, b, carry) -> np.ndarray:
    """The oracle of :func:`refined_configurations`: rebuild the pair's digits as integers, read the parent's window
    digits and the carry into it with Python arithmetic."""
    plo, phi = pwin
    failed = {(tuple(int(x) for x in fa), tuple(int(x) for x in fb), int(fc)) for fa, fb, fc in parent_failed}
    out = []
    for x, y, k in zip(a, b, carry):
        # significances lo..hi of two integers whose part below lo sums to exactly k·10^lo
        av = sum(int(d) * 10**(lo + i) for i, d in enumerate(x)) + (10**lo - 1 if k else 0)
        bv = sum(int(d) * 10**(lo + i) for i, d in enumerate(y)) + (1 if k else 0)
        digits = lambda v: tuple((v // 10**j) % 10 for j in range(plo, phi + 1))  # noqa: E731
        c_in = int((av % 10**plo) + (bv % 10**plo) >= 10**plo)
        da, db = digits(av), digits(bv)
        out.append((tuple(map(min, zip(da, db))), tuple(map(max, zip(da, db))), c_in) in failed)
    return np.array(out)


@pytest.mark.parametrize("pwin,win", [((2, 2), (1, 3)), ((2, 3), (1, 3)), ((1, 1), (1, 2)), ((3, 3), (1, 3)),
                                      ((0, 0), (0, 1)), ((1, 1), (0, 2)), ((3, 4), (2, 4))])
def test_refined_configurations_are_exactly_those_inside_an_unproven_one(pwin, win):
    """Against the integer oracle (the lead digit 1-9 at significance 4 of 5 digits): every refined
    configuration is inside, each once, with :func:`configurations`' multiplicity; of 3000 random
    configurations of the wider window, exactly those the oracle accepts are refined ones."""
    lay = layout(5)
    rng = np.random.default_rng(sum(pwin) + 7 * sum(win))
    pa, pb, pc, _ = configurations(lay, *pwin)
    pick = rng.choice(len(pa), size=min(25, len(pa)), replace=False)
    parent = PositionResult(0, pwin, len(pa), 0, Fraction(0), [(pa[i], pb[i], int(pc[i])) for i in pick])
    a, b, carry, mult = configurations(lay, *win)
    ra, rb, rc, rm = refined_configurations(lay, parent, *win)
    assert ra.shape == rb.shape == (len(rc), win[1] - win[0] + 1) and rc.shape == rm.shape and len(rc)
    assert ra.dtype == rb.dtype == rc.dtype == rm.dtype == np.int64  # configurations' form: integer counts
    got = [(tuple(x), tuple(y), int(k)) for x, y, k in zip(ra, rb, rc)]
    assert len(got) == len(set(got)) and np.all(ra <= rb)
    assert np.array_equal(rm, 2 ** np.sum(ra < rb, axis=1))  # as configurations counts ordered ones
    some = rng.choice(len(rc), size=min(2000, len(rc)), replace=False)
    assert refines_by_integers(parent.failed, pwin, *win, ra[some], rb[some], rc[some]).all()
    rows = rng.choice(len(a), size=min(3000, len(a)), replace=False)
    inside = refines_by_integers(parent.failed, pwin, *win, a[rows], b[rows], carry[rows])
    refined = set(got)
    assert np.array_equal(inside, [(tuple(a[i]), tuple(b[i]), int(carry[i])) in refined for i in rows])
    none = refined_configurations(lay, PositionResult(0, pwin, len(pa), len(pa), Fraction(0), []), *win)
    assert all(len(x) == 0 and x.dtype == np.int64 for x in none) and none[0].shape == (0, win[1] - win[0] + 1)


def test_refining_refuses_a_window_that_does_not_contain_the_parent():
    lay = layout(5)
    parent = PositionResult(0, (2, 3), 1, 0, Fraction(0), [])
    with pytest.raises(ValueError, match=r"window \[1, 2\] does not contain the window \[2, 3\]"):
        refined_configurations(lay, parent, 1, 2)


@pytest.mark.parametrize("n,window", [(3, (1, 2)), (3, (2, 2)), (3, (0, 1)), (2, (1, 1))])
def test_the_mass_of_configurations_is_the_share_of_operand_pairs_that_have_them(n, window):
    """The exact probability of a set of configurations (the accuracy bound subtracts these) against
    a count over every N-digit operand pair: all of a window's configurations have mass 1, a random
    subset the share of pairs whose digits and carry fall in it."""
    from lengthgen.proof.trained import PositionCertifier

    lay = layout(n)
    cert = PositionCertifier.__new__(PositionCertifier)
    cert.lay = lay
    lo, hi = window
    a, b, carry, mult = configurations(lay, lo, hi)
    assert cert._mass(lo, hi, carry, mult) == 1
    rng = np.random.default_rng(n + lo)
    pick = rng.random(len(a)) < 0.3
    pick[np.flatnonzero(carry == 1)[:3]] = True  # some carry-1 configurations, where there are any
    def key(x, y, k):  # one integer per (a ≤ b digits, carry)
        return ((x * 10 + y) * 100 ** np.arange(x.shape[1])).sum(axis=1) * 2 + k
    first = 10 ** (n - 1) if n > 1 else 0
    A, B = np.meshgrid(np.arange(first, 10**n), np.arange(first, 10**n), indexing="ij")
    A, B = A.ravel(), B.ravel()
    da = np.stack([(A // 10**j) % 10 for j in range(lo, hi + 1)], axis=1)
    db = np.stack([(B // 10**j) % 10 for j in range(lo, hi + 1)], axis=1)
    c_in = ((A % 10**lo) + (B % 10**lo) >= 10**lo).astype(int)
    hits = int(np.isin(key(np.minimum(da, db), np.maximum(da, db), c_in), key(a[pick], b[pick], carry[pick])).sum())
    assert cert._mass(lo, hi, carry[pick], mult[pick]) == Fraction(hits, len(A))


def test_the_reported_free_share_is_zero_where_the_window_holds_every_key():
    """At 2 digits the windows (width 2) of answer positions 0 and 3 hold both significances: no key
    is free, so the reported share is exactly 0; with width 1 they have free keys and the share is
    a real one, below 5% for this checkpoint."""
    from lengthgen import certify as cli
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)
    results = cli.certify(model, 2, START, tail="interval", positions=[0, 3])
    assert [r.window for r in results] == [(0, 1), (0, 1)]
    assert all(r.max_free_share == 0.0 for r in results)
    narrow = cli.certify(model, 2, START, max_width=1, tail="interval", positions=[0, 3])
    assert all(0.0 < r.max_free_share < 0.05 for r in narrow)


def test_a_gap_exactly_at_the_decision_margin_is_not_proven():
    """W_U = 0 and b_U one-hot at '$' with 10⁻³: at the last answer position every logit of the
    float64 model is exact and '$' leads by exactly the margin, which lengthgen.evaluate scores as
    undecided (wrong). The certificate's enclosure is exact there up to its outward rounding, and
    it must not prove it."""
    from tests.test_certify_trained import all_pairs, assert_sound

    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 1)
    model = copy.deepcopy(model).to(torch.float64)
    with torch.no_grad():
        model.unembed.W_U.zero_()
        model.unembed.b_U.zero_()
        model.unembed.b_U[ADDITION.EOS] = DECISION_MARGIN
    for tail in ("interval", "both"):
        out = assert_sound(model, 1, all_pairs(1), exhaustive=True, tail=tail)
        last = out["results"][-1]
        assert last.r == 2 and last.proven == 0 and last.unproven_mass == 1
        gaps = np.sort(last.enclosures[3], axis=1)[:, 1]  # the target's own entry is 0
        assert np.all(gaps <= DECISION_MARGIN) and np.all(gaps >= DECISION_MARGIN * (1 - 1e-15))


def test_each_answer_position_needs_the_significances_of_its_query_and_target():
    """Worked out by hand: '=' predicts c_0 (significance 0); c_{r−1} predicts c_r, which reads a_r,
    b_r and the carry from below (r − 1, r); c_{N−1} predicts c_N, the carry out of significance
    N − 1, and c_N predicts '$' (both: N − 1)."""
    for n in range(1, 6):
        lay = layout(n)
        expect = [(0, 0)] + [(r - 1, r) for r in range(1, n)] + [(n - 1, n - 1), (n - 1, n - 1)]
        assert [lay.needed(r) for r in range(n + 2)] == expect, n


def test_the_certifier_defaults_are_the_commands():
    """Built without options (as benchmarks do), a certifier uses python -m lengthgen.certify's
    defaults: window width 2, the decision margin 10⁻³, both tails, no enclosures kept."""
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 1)
    cert = certifier(1, model)
    assert (cert.max_width, cert.margin, cert.tail, cert.keep) == (2, 1e-3, "both", False)
    assert cert.certify(0).enclosures is None


def test_fixed_and_free_keys_are_the_keys_a_real_input_shows_the_query():
    """For every answer position and window, the certifier's keys are those of a real instance: the
    fixed ones (non-digits, the window's digits, the query) with the instance's tokens, the free
    ones (digits outside the window: an operand's 1-9 at the lead, 0-9 elsewhere and for answer
    digits) at the instance's IDs, as many of each as the prompt and the answer so far hold."""
    from lengthgen.proof.trained import PositionCertifier

    rng = np.random.default_rng(5)
    for n in (1, 3, 4):
        lay = layout(n)
        cert = PositionCertifier.__new__(PositionCertifier)
        cert.lay = lay
        for r in range(n + 2):
            need_lo, need_hi = lay.needed(r)
            for lo in range(0, need_lo + 1):
                for hi in range(need_hi, min(n, lo + 2)):  # widths up to 2
                    a, b, carry, _ = configurations(lay, lo, hi)
                    i = int(rng.integers(len(a)))
                    c, top = propagate(a[i:i + 1], b[i:i + 1], carry[i:i + 1])
                    fixed = sorted((int(t[0]), pid) for t, pid in cert._fixed_slots(r, lo, hi, a[i:i + 1], b[i:i + 1], c, top))
                    free = sorted((pid, tuple(int(x) for x in toks)) for toks, pid in cert._free_slots(r, lo, hi))
                    A, B = realize(lay, lo, a[i], b[i], int(carry[i]), rng)
                    inst = ADDITION.instance(A, B, start=START)
                    shown = range(inst.prompt_len + r)  # the query attends to itself and everything before
                    want_fixed, want_free = [], []
                    for p in shown:
                        tok, pid = int(inst.tokens[p]), int(inst.pos_ids[p])
                        sig = START + n - 1 - pid
                        if tok < 10 and 0 <= sig < n and not lo <= sig <= hi:
                            lead = p < inst.prompt_len and sig == n - 1 and n > 1
                            want_free.append((pid, tuple(range(1 if lead else 0, 10))))
                        else:
                            want_fixed.append((tok, pid))
                    assert fixed == sorted(want_fixed), (n, r, lo, hi)
                    assert free == sorted(want_free), (n, r, lo, hi)


def test_the_window_widens_toward_the_neighbour_whose_digit_keys_score_highest():
    """N = 4, answer position 2 needs significances {1, 2}; with room for one more, the window takes
    0 or 3, whichever ID's digit keys can score higher against some query, in some head; at an edge
    it takes the only neighbour, and it never grows past the width or the operands."""
    from lengthgen.proof.trained import PositionCertifier

    lay = layout(4)
    cert = PositionCertifier.__new__(PositionCertifier)
    cert.lay = lay

    def scores(heavy_id: int, head: int) -> list[Iv]:
        out = []
        for h in range(2):
            hi = np.zeros((13, 13, 12))
            if h == head:
                hi[4, 7, heavy_id] = 5.0  # one query token, one digit key token
                hi[4, 10:, lay.id_of(0) + lay.id_of(3) - heavy_id] = 9.0  # non-digit keys there: ignored
            out.append(Iv(hi - 1.0, hi))
        return out

    for width, heavy, head, want in ((3, 0, 0, (0, 2)), (3, 3, 1, (1, 3)), (2, 0, 0, (1, 2)), (4, 3, 0, (0, 3))):
        cert.max_width = width
        assert cert._window(2, scores(lay.id_of(heavy), head)) == want, (width, heavy)
    cert.max_width = 3
    assert cert._window(0, scores(lay.id_of(3), 0)) == (0, 2)  # {0}: only 1 lies next to it, then 2
    cert.max_width = 9
    assert cert._window(5, scores(lay.id_of(0), 1)) == (0, 3)  # '$' after c_4: at most every significance


def test_a_sample_of_configurations_is_evenly_spaced_from_first_to_last():
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)
    cert = certifier(2, model, max_width=1)
    full = cert.inputs(0)
    C = len(full.a)
    assert C == 55
    for k, rows in ((3, [0, 27, 54]), (5, [0, 13, 27, 40, 54]), (1000, list(range(C)))):
        part = cert.inputs(0, sample=k)
        for name in ("a", "b", "carry", "mult", "query_tok", "target"):
            assert np.array_equal(getattr(part, name), getattr(full, name)[rows]), (k, name)


def test_scores_that_underflow_every_fixed_key_are_refused():
    """Queries 1000 times sharper: some configuration's fixed keys all score more than 745 below the
    reference (the best score a fixed key could have), so their softmax weights underflow to 0 in
    floats; the certificate refuses the model instead of dividing by an enclosure of 0."""
    from lengthgen import certify as cli
    from lengthgen.proof.weights import StructureError
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 1)
    model = copy.deepcopy(model).to(torch.float64)
    with torch.no_grad():
        model.blocks[0].attn.W_Q.mul_(1000.0)
    with pytest.raises(StructureError, match=r"^attention scores of one query span more than e\^745: the fixed keys' "
                                             r"softmax weight underflows, which this certificate does not handle$"):
        cli.certify(model, 1, START, tail="interval")


@pytest.mark.parametrize("change,message", [
    ({"positional": "none"}, "covers causal models with learned positions and no Hard-ALiBi windows"),
    ({"attn_windows": [3, None]}, "covers causal models with learned positions and no Hard-ALiBi windows"),
    ({"causal": False}, "covers causal models with learned positions and no Hard-ALiBi windows"),
    ({"attn_scale": 0.0}, "attn_scale must be positive, got 0.0"),
    ({"attn_scale": -2.0}, "attn_scale must be positive, got -2.0"),
    ({"n_layers": 2}, "covers 1-layer models; this one has 2"),
])
def test_models_outside_the_covered_shape_are_refused(change, message):
    """Each shape the argument does not cover (no positions, windows that hide keys, keys after the
    query, a zero or negative score divisor, a second layer) is refused, one at a time."""
    from lengthgen.model import Transformer, TransformerConfig
    from lengthgen.proof.trained_tables import OneLayer
    from lengthgen.proof.weights import StructureError

    base = dict(d_vocab=len(ADDITION.vocab), d_model=8, n_heads=2, d_head=4, d_mlp=8, n_ctx=12, normalization="LN")
    with pytest.raises(StructureError, match=message):
        OneLayer.from_model(Transformer(TransformerConfig(**{**base, **change})))
    OneLayer.from_model(Transformer(TransformerConfig(**base)))  # the same model without the change is covered


def test_refining_tells_apart_configurations_whose_digit_codes_could_run_together():
    """Significance by significance (a ≤ b): (9, 9) then (0, 0) is not (0, 8) then (0, 1), although
    a code that gave a digit pair more than 100 values would add them up alike."""
    parent = PositionResult(0, (1, 2), 1, 0, Fraction(0), [(np.array([0, 0]), np.array([8, 1]), 0)])
    a, b, carry, mult = refined_configurations(layout(4), parent, 1, 3)
    assert {tuple(x[:2]) + tuple(y[:2]) for x, y in zip(a, b)} == {(0, 0, 8, 1)} and set(carry) == {0}
    assert len(a) == 45 and sorted(set(mult)) == [4, 8]  # the lead digits above (1-9): each unordered pair once


def test_an_unknown_tail_is_refused_by_name():
    from lengthgen.proof.trained import PositionCertifier

    with pytest.raises(ValueError, match=r"^tail must be one of interval, both, affine, not 'plain'$"):
        PositionCertifier(None, None, layout(1), tail="plain")


def test_the_leading_digit_outside_the_window_is_uniform_on_1_to_9():
    """As lengthgen.evaluate samples N-digit operands: each of 1-9 about 1/9 of the time."""
    rng = np.random.default_rng(11)
    lead = [realize(layout(3), 0, np.array([5]), np.array([7]), 0, rng)[0][0] for _ in range(30000)]
    share = {d: lead.count(str(d)) / len(lead) for d in range(10)}
    assert share[0] == 0 and all(abs(share[d] - 1 / 9) < 0.0075 for d in range(1, 10)), share
