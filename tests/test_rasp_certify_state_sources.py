"""rasp.certify's enumeration of states (rasp/certify/state.py: ``key_of``, ``State.base``,
``State.sources``): which sources a table ranges over, and how many states that gives.

What is pinned:

* token representatives are kept apart by the *type* of the token-wise values as well (``1``
  and ``1.0`` are equal in Python, but a Map may tell them apart): merging them skips a token
  the model gets wrong;
* a table ranges over exactly the sources its s-ops read: token classes, positions only where
  some s-op reads the position, and a computed s-op over its own value set (not through its
  inputs); the printed state counts are worked out by hand;
* the position is a source of a derived s-op (a nested tuple) that reads it through a child,
  and of a table whose *first* input reads it while the last does not.

Expected values come from the RASP interpreter (rasp.evaluate), the float64 forward pass of
tests/hook_oracle.py (``assert_bounds_hold``) and counts derived by hand in the comments.
"""
from __future__ import annotations

import pytest
from rasp_certify_checks import all_inputs, assert_bounds_hold, shift

from rasp import lib
from rasp.certify import certify
from rasp.core import Aggregate, Comparison, Map, Select, SequenceMap, indices, tokens
from rasp.evaluate import evaluate
from rasp.weights import compile_to_transformer

ABC = ["a", "b", "c"]
N = 4




def test_token_values_equal_in_python_but_of_another_type_are_separate_states():
    """Fault: token classes merged by ``==`` alone (``key_of`` without the type), so that
    token 'b' (whose token-wise value is ``1.0``) is taken for token 'a' (value ``1``).

    The compiler's value set of ``m`` is ``{1}`` (a Python set: ``1 == 1.0``), so its table for
    ``type(m).__name__`` knows only ``'int'``; the model answers ``'int'`` at token 'b', where
    the interpreter says ``'float'``. The certificate must FAIL (lookup: ``'float'`` is not in
    the value set), not PASS by checking token 'a' alone."""
    m = Map(lambda t: 1 if t == "a" else 1.0, tokens)
    program = SequenceMap(lambda x, i: type(x).__name__, m, indices)
    ct = compile_to_transformer(program, ABC, N)
    assert evaluate(program, ["b"], causal=True, fast=False).column(program) == ["float"]
    assert ct.run(["b"]) == ["int"]                               # the model is wrong there
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "lookup"), cert.text()
    assert "'float'" in cert.reason


def _chain():
    """``agg = shift(tokens)`` (4 values: '_', 'a', 'b', 'c'); ``same = (agg == tokens)`` (an
    MLP, values False/True); ``late = same and i > 1`` (an MLP reading ``same`` and the position)."""
    agg = shift(tokens)
    same = SequenceMap(lambda a, t: a == t, agg, tokens)
    return SequenceMap(lambda x, i: bool(x and i > 1), same, indices)


def test_tables_range_over_exactly_the_sources_they_read():
    """Fault: a table enumerates sources its s-ops do not read (the position for a token-wise
    s-op or for a computed one, or always), or enumerates an MLP-computed s-op through its inputs
    (agg x tokens x positions) instead of over its own value set: more states than needed, so
    programs run over COMBO_BUDGET / PAIR_BUDGET that need not.

    Counts by hand (vocabulary a, b, c; max_seq_len 4):
    * ``same``'s MLP reads ``agg`` (4 values) and the token (3 classes): 4 * 3 = 12 states;
    * ``late``'s MLP reads ``same`` (2 values) and the position (4): 2 * 4 = 8 states;
    * the shift head: query positions 0..3 times key positions 0..3 = 16 pairs.
    Every bound is also checked against the float64 forward pass on all inputs."""
    program = _chain()
    ct = compile_to_transformer(program, ABC, N)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert [r.states for r in cert.mlps] == [4 * 3, 2 * 4]
    assert [r.pairs for r in cert.heads] == [4 * 4]
    assert_bounds_hold(ct, program, cert, all_inputs(ABC, 3))


def test_a_width_over_tokens_ranges_over_token_classes_only():
    """Fault: a token-wise s-op counted as reading the position. ``make_hist``'s width head
    compares tokens with tokens: 3 query classes * 3 key classes = 9 pairs (no positions); its
    decoding MLP reads the width, whose value set is 0..4 (max_seq_len 4): 5 states."""
    ct = compile_to_transformer(lib.make_hist(), ABC, N)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert [r.pairs for r in cert.heads] == [3 * 3]
    assert [r.states for r in cert.mlps] == [4 + 1]


def test_a_nested_tuple_reads_the_position_through_its_child():
    """Fault: a derived s-op (here the nested tuple ``((t, i), t)``, which a selector compares
    whole, since it is not flat) said to read the position only when one of its children is a
    computed s-op. Its key group must enumerate positions, or the certificate cannot even
    evaluate the tuple (KeyError). Expected: PASS, every bound holding on all inputs; the head's
    pairs are the query states (3 tokens * 4 positions = 12) times the key states (12): 144."""
    pair = SequenceMap(lib.tuple_pair, tokens, indices)
    nested = SequenceMap(lib.tuple_pair, pair, tokens)
    program = Aggregate(Select(nested, nested, Comparison.EQ), tokens, reduce="max", default=0)
    ct = compile_to_transformer(program, [1, 2, 3], N)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert [r.pairs for r in cert.heads] == [(3 * 4) * (3 * 4)]
    assert_bounds_hold(ct, program, cert, all_inputs([1, 2, 3], 3))


def test_a_table_whose_first_input_reads_the_position_enumerates_it():
    """Fault: whether the position is a source taken from the last s-op read alone. The MLP of
    ``f(i, agg)`` reads the position first and the shifted token last; it must range over
    4 positions * 4 values of ``agg`` = 16 states, and PASS with its bounds holding."""
    program = SequenceMap(lambda i, a: a if i % 2 else "_", indices, shift(tokens))
    ct = compile_to_transformer(program, ABC, N)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert [r.states for r in cert.mlps] == [4 * 4]
    assert_bounds_hold(ct, program, cert, all_inputs(ABC, 3))


@pytest.mark.gpu
def test_weights_on_an_accelerator_are_read_on_the_host():
    """Fault: the weights not brought to the host before ``.numpy()`` (a model on a GPU then
    cannot be certified at all). The certificate of a model moved to CUDA must PASS as on the CPU."""
    ct = compile_to_transformer(lib.shift_right(tokens, 1, "_"), ABC, N)
    ct.model.to("cuda")
    assert certify(ct).verdict == "PASS"
