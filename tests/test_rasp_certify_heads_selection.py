"""rasp.certify.heads: the intended selection is the selector's own RASP predicate.

Pinned here: ``selection`` follows And, Or and Not at any depth (an And inside an Or or a Not is
not split into conjuncts, so it reaches ``selection`` whole), uniform constant selectors select
all or nothing, a matrix constant selector is refused in one line, ``_table`` gives the
predicate's Python value for every Comparison (``TRUE``/``FALSE`` on numbers, ints that float64
cannot hold). Expected values come from the RASP interpreter (through ``assert_bounds_hold``) or
from the predicates written out by hand.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from rasp_certify_checks import assert_bounds_hold

from rasp.certify import CertifyError, certify
from rasp.certify.heads import _table, selection
from rasp.certify.state import State
from rasp.core import Aggregate, Comparison, Map, Select, SelectorWidth, indices, numerical, tokens
from rasp.tracr_ops import ConstantSelector
from rasp.weights import compile_to_transformer

N = 4
NUM = [1, 2, 3]
T = tokens


def inputs(vocab: list, lengths=range(1, N + 1)) -> list[list[list]]:
    return [[list(x) for x in itertools.product(vocab, repeat=n)] for n in lengths]


def passes(prog, vocab: list, lengths=range(1, N + 1)):
    ct = compile_to_transformer(prog, vocab, N)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert_bounds_hold(ct, prog, cert, inputs(vocab, lengths))
    return cert


NESTED = {
    # (k < q and k != q) or k == q: the width counts keys with k <= q
    "And inside Or": lambda: SelectorWidth((Select(T, T, Comparison.LT) & Select(T, T, Comparison.NEQ))
                                           | Select(T, T, Comparison.EQ)),
    # not (k >= q and k <= q): keys with k != q
    "And inside Not": lambda: SelectorWidth(~(Select(T, T, Comparison.GEQ) & Select(T, T, Comparison.LEQ))),
    # an And whose first part is a Not of an And, the second on positions
    "Not of And, and positions": lambda: SelectorWidth(~(Select(T, T, Comparison.GEQ) & Select(T, T, Comparison.LEQ))
                                                       & Select(indices, indices, Comparison.LT)),
}


@pytest.mark.parametrize("name", list(NESTED))
def test_nested_selectors_pass_and_bounds_hold(name):
    """Widths of nested selectors over tokens 1..3: PASS with the margin of a width (80), and the
    float64 forward pass matches the interpreter and stays inside every bound."""
    cert = passes(NESTED[name](), NUM, range(1, 4))
    assert 79.99 <= cert.heads[0].margin <= 80.0


def _states(prog, vocab):
    ct = compile_to_transformer(prog, vocab, N)
    st = State(ct)
    states = [{"tok": t, "pos": p} for t in range(len(vocab)) for p in range(N)]
    return st, states


def test_selection_of_nested_selectors_against_the_predicates():
    """``selection`` on (token, position) states against the predicates written out: And inside
    Or, And inside Not, Or inside And, Not of Not."""
    lt, eq, geq, leq = (Select(T, T, c) for c in (Comparison.LT, Comparison.EQ, Comparison.GEQ, Comparison.LEQ))
    pos_lt = Select(indices, indices, Comparison.LT)
    prog = SelectorWidth((lt & pos_lt) | eq)
    st, S = _states(prog, NUM)
    cases = {
        (lt & pos_lt) | eq: lambda k, q, kp, qp: (k < q and kp < qp) or k == q,
        ~(geq & pos_lt): lambda k, q, kp, qp: not (k >= q and kp < qp),
        (lt | eq) & ~pos_lt: lambda k, q, kp, qp: (k < q or k == q) and not kp < qp,
        ~~(leq & ~eq): lambda k, q, kp, qp: k <= q and k != q,
    }
    for sel, want in cases.items():
        got = selection(st, sel, S, S)
        exp = np.array([[want(NUM[k["tok"]], NUM[q["tok"]], k["pos"], q["pos"]) for k in S] for q in S])
        assert got.dtype == bool and np.array_equal(got, exp), sel


def test_table_gives_python_comparisons():
    """``_table[query, key] = pred(key, query)``: TRUE and FALSE on numbers, and ints beyond 2^53
    (2^53 + 1 rounds to 2^53 in float64; 10^400 does not convert) compare as Python ints."""
    big = 2 ** 53
    assert _table(Comparison.TRUE, [1, 2], [3]).tolist() == [[True, True]]
    assert _table(Comparison.FALSE, [1, 2], [3, 4]).tolist() == [[False, False], [False, False]]
    assert _table(Comparison.LT, [big, big + 1], [big + 1]).tolist() == [[True, False]]
    assert _table(Comparison.EQ, [big, big + 1], [big]).tolist() == [[True, False]]
    assert _table(Comparison.GT, [10 ** 400, 1], [2]).tolist() == [[True, False]]
    assert _table(Comparison.LEQ, [0.5, 1, 2], [1]).tolist() == [[True, True, False]]


@pytest.mark.parametrize("vocab", [[2 ** 53, 2 ** 53 + 1], [1, 10 ** 400, 2]], ids=["2^53+1", "10^400"])
def test_order_of_large_ints_passes(vocab):
    """``SelectorWidth(tokens < tokens)`` over ints that float64 does not hold: the compiler
    codes them by rank and the model is right on every input (the interpreter agrees), so the
    certificate must pass; comparing them as floats (2^53 + 1 == 2^53) or converting 10^400 to a
    float (OverflowError) refused it."""
    passes(SelectorWidth(Select(T, T, Comparison.LT)), vocab, range(1, 4))


@pytest.mark.parametrize("pred", [Comparison.TRUE, Comparison.FALSE])
def test_constant_predicates_on_numbers_pass(pred):
    """``TRUE``/``FALSE`` predicates on positions: the width counts every key or none."""
    cert = passes(SelectorWidth(Select(indices, indices, pred)), NUM, range(1, 4))
    assert cert.heads[0].reduce == "width"


CONSTANT = {
    "mean over all": lambda: numerical(Aggregate(ConstantSelector(True), numerical(Map(lambda t: 1 if t == "a" else 0, T)),
                                                 default=0)),
    "mean over none": lambda: Aggregate(ConstantSelector(False), T, default="_"),
    "width of all": lambda: SelectorWidth(ConstantSelector(True)),
    "width of none": lambda: SelectorWidth(ConstantSelector(False)),
}


@pytest.mark.parametrize("name", list(CONSTANT))
def test_uniform_constant_selectors_pass(name):
    """ConstantSelector(True) selects every visible key and ConstantSelector(False) none: the
    programs pass and the bounds hold. A width of all keys has no rival key: margin inf, leak 0."""
    cert = passes(CONSTANT[name](), ["a", "b", "c"], range(1, 4))
    if name == "width of all":
        assert (cert.heads[0].margin, cert.heads[0].leak, cert.heads[0].tv) == (np.inf, 0.0, 0.0)


def test_a_matrix_constant_selector_is_refused():
    """A fixed selection matrix has no rule (the compiler does not compile one either): one line
    naming the selector and its type."""
    st, S = _states(SelectorWidth(Select(T, T, Comparison.EQ)), NUM)
    sel = ConstantSelector([[True, False], [True, True]])
    with pytest.raises(CertifyError, match=rf"^selector {sel.label!r}: no rule for a ConstantSelector$"):
        selection(st, sel, S, S)
