"""rasp/certify/scores.py on whole heads: the margin, spread and pair count that a certificate
prints for one head, against a float64 forward pass and against counts made by hand.

What the tests pin:

* the printed margin and spread of a head are bounds of the measured ones (every input of the
  lengths run, float64 scores of tests/hook_oracle.py, intended keys from the RASP interpreter)
  and tight: within ``SLACK`` of them, on heads whose states are all reachable;
* the pair count (the size of the components that scores.py splits a head into) equals the
  count worked out by hand in each case, so a split that is too coarse or too fine shows;
* models changed by hand: the biases and the ``one`` rows moved around (the function and every
  score difference stay the same, so the margin must too), keys given a position bonus (a real
  spread, measured), a query entry that couples the query's token with the key's position (the
  model is really wrong and the certificate must FAIL), a tuple ``==`` whose nesting differs
  (the model compares flat parts, RASP compares tuples: FAIL).

Inputs are short (max_seq_len 3 or 4, three tokens) so that the file runs in a few seconds.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hook_oracle import reference_forward

from rasp import lib
from rasp.certify import certify
from rasp.certify import heads as heads_module
from rasp.core import Aggregate, Comparison, Full, Map, Select, SelectorWidth, SequenceMap, indices, tokens
from rasp.evaluate import evaluate
from rasp.tracr_ops import ConstantSelector
from rasp.weights import compile_to_transformer

SLACK = 1e-6           # printed bound vs measured value (the enclosures' own slack is ~1e-10)
ABC, NUM, N0 = ["a", "b", "c"], [1, 2, 3], [0, 1, 2]
EQ, LT, LEQ = Comparison.EQ, Comparison.LT, Comparison.LEQ


def measured(ct, program, vocab, n_max: int) -> dict:
    """``{(layer, head): (margin, spread)}`` measured on every input of 1..n_max tokens, with the
    certificate's definitions (heads.py's module docstring) applied to float64 scores: mean and
    max/min: selected >= BOS + m, BOS >= others + m, and for max/min each selected key above every
    selected key of a lower value; width: BOS and the selected keys >= others + m. The spread is
    the largest difference of two intended scores (max/min: two keys of one value)."""
    out: dict = {}
    for n in range(1, n_max + 1):
        batch = [list(x) for x in itertools.product(vocab, repeat=n)]
        _, acts = reference_forward(ct.model, torch.tensor([ct.encode(xs) for xs in batch]))
        for b, xs in enumerate(batch):
            ev = evaluate(program, xs, causal=True, fast=False)
            for layer, heads in enumerate(ct.heads):
                scores = acts[f"blocks.{layer}.attn.hook_attn_scores"][b].numpy()
                for h, spec in enumerate(heads):
                    sop = spec.node.sop
                    sel = ev.selector(sop.selector)
                    m, s = out.get((layer, h), (np.inf, 0.0))
                    for i in range(n):
                        row = scores[h, i + 1, :i + 2]
                        S = [j + 1 for j in range(i + 1) if sel[i][j]]
                        R = [j + 1 for j in range(i + 1) if not sel[i][j]]
                        gaps, spreads = [], []
                        if not isinstance(sop, Aggregate):
                            keep = [0] + S
                            gaps += [min(row[keep]) - max(row[R])] if R else []
                            spreads.append(max(row[keep]) - min(row[keep]))
                        else:
                            gaps += [row[0] - max(row[R])] if R else []
                            gaps += [min(row[S]) - row[0]] if S else []
                            if sop.reduce == "mean" and S:
                                spreads.append(max(row[S]) - min(row[S]))
                            elif sop.reduce != "mean":
                                vals, sign = ev.column(sop.sop), 1 if sop.reduce == "max" else -1
                                for j in S:
                                    lower = [k for k in S if sign * vals[k - 1] < sign * vals[j - 1]]
                                    gaps += [row[j] - max(row[lower])] if lower else []
                                    spreads.append(max(row[k] for k in S if vals[k - 1] == vals[j - 1]) - row[j])
                        out[layer, h] = (min([m] + gaps), max([s] + spreads))
    return out


def assert_tight(ct, program, vocab, n_max: int, slack: float = SLACK):
    """PASS, and every head's margin and spread within ``slack`` of (and on the safe side of) the
    measured ones. Returns the certificate."""
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    meas = measured(ct, program, vocab, n_max)
    for r in cert.heads:
        m, s = meas[r.layer, r.head]
        assert r.margin <= m + 1e-12 * abs(m) and (r.margin >= m - slack or m == r.margin == np.inf), (r, m)
        assert s - 1e-12 <= r.spread <= s + slack, (r, s)
    return cert


_A = SequenceMap(lambda t, i: t == "a" and i > 0, tokens, indices)     # an MLP's output
_B = SequenceMap(lambda t, i: t == "b" or i == 0, tokens, indices)

# (program, vocab, max_seq_len, pairs) -- pairs: sum over components of
# (query states) x (key-group states summed over the component's groups), counted by hand.
PROGRAMS = {
    # key (tok, pos) == query (tok, pos) splits into tok == tok (3 x 3) and pos == pos (4 x 4)
    "pair ==": (lambda: SelectorWidth(Select(lib.make_pair(tokens, indices), lib.make_pair(tokens, indices), EQ)),
                ABC, 4, 9 + 16),
    # (tok,) == (tok,): one part, 3 x 3
    "singleton ==": (lambda: SelectorWidth(Select(Map(lib.tuple_singleton, tokens), Map(lib.tuple_singleton, tokens), EQ)),
                     ABC, 4, 9),
    # (tok,) + (pos,) on both sides: flat, like the pair: 3 x 3 + 4 x 4
    "append ==": (lambda: SelectorWidth(Select(SequenceMap(lib.tuple_append, Map(lib.tuple_singleton, tokens), indices),
                                               SequenceMap(lib.tuple_append, Map(lib.tuple_singleton, tokens), indices), EQ)),
                  ABC, 4, 9 + 16),
    # a constant selector: one key-group state (no source) and one query state
    "constant": (lambda: SelectorWidth(ConstantSelector(True)), ABC, 4, 1),
    # nothing selected: BOS alone is intended, nothing spreads (spread 0, not -inf)
    "constant False": (lambda: SelectorWidth(ConstantSelector(False)), ABC, 3, 1),
    # tok == tok (3 x 3) and the constant conjunct's group of one state (1 x 1)
    "constant & ==": (lambda: SelectorWidth(ConstantSelector(True) & Select(tokens, tokens, EQ)), ABC, 4, 9 + 1),
    # key pos vs query tok, key tok vs query pos: the key's position and the query's position
    # must meet (visibility), so one component: (3 tok x 4 pos) x (4 + 3)
    "crossed": (lambda: SelectorWidth(Select(indices, tokens, EQ) & Select(tokens, indices, LT)), N0, 4, 12 * 7),
    # both groups compare the query's token (no query reads the position): 3 x (3 + 4)
    "two groups, one query": (lambda: SelectorWidth(Select(tokens, tokens, EQ) & Select(indices, tokens, LEQ)), N0, 4, 21),
    # max over two groups of one component, the rank (tokens) in the first: 3 x (3 + 4)
    "max, two groups": (lambda: Aggregate(Select(tokens, tokens, LEQ) & Select(indices, tokens, LEQ), tokens,
                                          reduce="max", default=0), NUM, 4, 21),
    # max over an And of two components: tok <= tok (3 x 3), pos < pos (4 x 4)
    "max over an And": (lambda: Aggregate(Select(tokens, tokens, LEQ) & Select(indices, indices, LT), tokens,
                                          reduce="max", default=0), NUM, 4, 9 + 16),
    # key token == query position, max of the key's position: every query s-op reads the
    # position, so the rank's group (key positions, no conjunct) joins the query's position
    # (visibility): one component of 4 query positions x (3 + 4)
    "max of positions, token == position": (lambda: Aggregate(Select(tokens, indices, EQ), indices, reduce="max", default=0),
                                            N0, 4, 4 * 7),
    # lasts: tok == tok (3 x 3); the rank (indices) is a key group that no query reaches (1 x 4)
    "lasts": (lambda: lib.lasts(tokens, tokens), NUM, 4, 9 + 4),
    # a categorical mean of tokens over tok == tok: 3 x 3 (keys of one value: the premise holds)
    "mean": (lambda: Aggregate(Select(tokens, tokens, EQ), tokens, default="_"), ABC, 4, 9),
    # two conjuncts on one key group (tok <= tok and tok >= tok: equal tokens): 3 x 3
    "two conjuncts, one group": (lambda: SelectorWidth(Select(tokens, tokens, LEQ) & Select(tokens, tokens, Comparison.GEQ)),
                                 NUM, 4, 9),
    # two s-ops computed by MLPs (values False/True), each compared with itself: two components
    # of 2 x 2 (merging the two computed sources would give one of 4 x 4)
    "two computed s-ops": (lambda: SelectorWidth(Select(_A, _A, EQ) & Select(_B, _B, EQ)), ABC, 3, 4 + 4),
    # Full(1) is token-wise with one value: 1 query state x 2 key tokens
    "constant query": (lambda: SelectorWidth(Select(tokens, Full(1), EQ)), [1, 2], 4, 2),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_margin_spread_and_pairs(name):
    """Splitting a head into components (scores.py) is exact: the printed margin and spread are
    those measured (within SLACK), and the pair count is the hand count above. Catches a
    selector split wrongly (tuple ``==``, And, constants), components joined or separated wrongly
    (pair count), extremes summed wrongly (margin) and a spread that is not the spread."""
    make, vocab, n, pairs = PROGRAMS[name]
    program = make()
    ct = compile_to_transformer(program, vocab, n)
    cert = assert_tight(ct, program, vocab, n)
    assert [r.pairs for r in cert.heads] == [pairs]


def test_budget_is_the_pair_count():
    """A head of exactly PAIR_BUDGET pairs passes and one pair more fails ``budget``: the count
    is the sum over components (9 + 16 for the pair ``==``, by hand), compared with ``>``."""
    make, vocab, n, pairs = PROGRAMS["pair =="]
    ct = compile_to_transformer(make(), vocab, n)
    old = heads_module.PAIR_BUDGET
    try:
        heads_module.PAIR_BUDGET = pairs
        assert certify(ct).verdict == "PASS"
        heads_module.PAIR_BUDGET = pairs - 1
        cert = certify(ct)
        assert (cert.verdict, cert.kind) == ("FAIL", "budget") and f"{pairs} (query state" in cert.reason
    finally:
        heads_module.PAIR_BUDGET = old


def _attn(ct):
    return ct.model.blocks[0].attn


def test_biases_and_one_rows_moved_leave_the_margin():
    """W_Q's ``one`` row moved into b_Q, and one vector c added to W_K's ``one`` row and another
    to b_K: every residual (BOS's included) holds 1 in ``one``, so q is unchanged and every key's
    score at a query gains the same q.c: score differences, the function and the measured margin
    are those of the unchanged model. Catches a bias added with the wrong sign or left out of
    BOS's key, and the key's ``one`` row counted twice."""
    for name in ("mean", "max, two groups", "crossed"):
        make, vocab, n, _ = PROGRAMS[name]
        program = make()
        ct = compile_to_transformer(program, vocab, n)
        attn, one = _attn(ct), ct.layout.one
        rng = np.random.default_rng(0)
        with torch.no_grad():
            attn.b_Q[0] += attn.W_Q[0, one]
            attn.W_Q[0, one] = 0.0
            attn.W_K[0, one] += torch.tensor(rng.integers(-4, 5, attn.W_K.shape[-1]), dtype=attn.W_K.dtype)
            attn.b_K[0] += torch.tensor(rng.integers(-4, 5, attn.b_K.shape[-1]), dtype=attn.b_K.dtype)
        assert float(attn.b_Q[0].detach().abs().max()) > 0 and float(attn.b_K[0].detach().abs().max()) > 0
        assert_tight(ct, program, vocab, n)


def _add_position_bonus(ct, scale: float) -> None:
    """Keys get a score bonus ``scale * j`` at position j: W_K rows of ``indices:j`` on the head
    dimension whose query is a constant (every query holds it; BOS has no position s-op)."""
    attn, lay = _attn(ct), ct.layout
    e, q = _constant_query_dim(attn, lay)
    with torch.no_grad():
        for j in range(ct.program.n):
            attn.W_K[0, lay.labels.index(f"indices:{j}"), e] += scale * j / q


def _constant_query_dim(attn, lay) -> tuple[int, float]:
    """The head dimension whose query is a constant (W_Q's column there is non-zero in the
    ``one`` row only, apart from the BOS row of the compiler's clean-up), and that constant; the
    head's other dimensions read s-ops."""
    W_Q = attn.W_Q[0].detach().numpy().copy()
    W_Q[lay.bos] = 0
    (e,) = [e for e in range(W_Q.shape[1]) if W_Q[lay.one, e] != 0 and np.count_nonzero(W_Q[:, e]) == 1]
    return e, float(W_Q[lay.one, e])


BONUS = {
    "mean over tok == tok and pos <= pos": (lambda: Aggregate(Select(tokens, tokens, EQ) & Select(indices, indices, LEQ),
                                                              tokens, default="_"), ABC, 4, 25),
    "max, two groups": PROGRAMS["max, two groups"],
    "max over an And": PROGRAMS["max over an And"],
    "lasts": PROGRAMS["lasts"],
}


@pytest.mark.parametrize("name", list(BONUS))
def test_position_bonus_spreads_the_scores(name):
    """Keys get a bonus of 0.05 j at position j (j = 0..3), so intended keys spread by up to
    0.15 and a rival may gain up to 0.15 on an intended key. Printed bounds: the margin lies
    between the unchanged model's measured margin minus 0.15 (the certificate enumerates key
    states independently of the query's token, so it may pair a rival with bonus 0.15 and an
    intended key with 0: worked out by hand) and the measured one; the spread between the
    measured spread and 0.15. Catches a group's lowest and highest scores swapped, or mixed up
    with its highest visible one, when the rest of a component is added to a max/min class, a
    rival summed over the wrong groups, and a spread that drops a group."""
    make, vocab, n, pairs = BONUS[name]
    program = make()
    base = measured(compile_to_transformer(program, vocab, n), program, vocab, n)[0, 0][0]
    ct = compile_to_transformer(program, vocab, n)
    _add_position_bonus(ct, 0.05)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    (row,), (m, s) = cert.heads, measured(ct, program, vocab, n)[0, 0]
    assert base - 0.15 - 1e-8 <= row.margin <= m, (row, base, m)
    assert s - 1e-12 <= row.spread <= 0.15 + 1e-8, (row, s)
    assert row.pairs == pairs


def test_query_token_coupled_to_key_position_fails():
    """shift_right(tokens, 1) with one W_Q entry added on the ``tokens:a`` row, on the head
    dimension where the key's position code sits: the score then has a term (query token) x (key
    position), so query token and key group are one component. The added weight makes a query
    'a' prefer the key at its own position over the one before it: the forward pass shows the
    wrong output, and the certificate must FAIL margin (a split that drops the coupled term would
    not see it)."""
    program = lib.shift_right(tokens, 1, "_")
    ct = compile_to_transformer(program, ABC, 3)
    attn, lay = _attn(ct), ct.layout
    shifted = next(nd.label for nd in ct.program.nodes if nd.kind == "position" and nd.sop.index_offset == 1)
    col = attn.W_K[0, lay.labels.index(f"{shifted}:1")].detach().numpy()
    e = int(np.argmax(np.abs(col)))                       # where the key's position is read
    with torch.no_grad():
        attn.W_Q[0, lay.labels.index("tokens:a"), e] += 200.0 * np.sign(col[e])
    assert ct.run(["b", "a", "a"]) != evaluate(program, ["b", "a", "a"], causal=True).column(program)
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "margin"), cert.text()


def test_a_small_query_token_coupling_is_counted_in_the_printed_margin():
    """The same coupling, 2 instead of 200: the model stays right, and the coupled term (query
    token 'a') x (key position) lowers some measured gaps by up to 2 x the position code. The
    printed margin must stay at or below the measured one (a split that left the query token in a
    component of its own would drop that term and print the uncoupled margin, above it) and be
    tight (the query token and the key position are enumerated together: no slack)."""
    program = lib.shift_right(tokens, 1, "_")
    ct = compile_to_transformer(program, ABC, 3)
    attn, lay = _attn(ct), ct.layout
    shifted = next(nd.label for nd in ct.program.nodes if nd.kind == "position" and nd.sop.index_offset == 1)
    col = attn.W_K[0, lay.labels.index(f"{shifted}:1")].detach().numpy()
    e = int(np.argmax(np.abs(col)))
    with torch.no_grad():
        attn.W_Q[0, lay.labels.index("tokens:a"), e] += 2.0 * np.sign(col[e])
    cert = certify(ct)
    margin, _ = measured(ct, program, ABC, 3)[0, 0]
    assert cert.passed, cert.text()
    assert margin < 79.0                                   # the coupling moved the measured margin
    assert margin - SLACK <= cert.heads[0].margin <= margin + SLACK


def test_a_key_s_op_outside_the_selector_is_scored_with_the_query_that_reads_it():
    """shift_right(tokens, 1) with a term (query token 'a') x (key token 'a') = 2 on the head's
    unused dimension: the key's token is in no conjunct, so it is a key group of its own, and only
    the query token's W_Q row shares a head dimension with it. They must be one component: the
    printed margin is then the measured one (lowered by the term for a query 'a' whose rival key
    is an 'a'); scored apart, the term would be lost and the margin printed above the measured."""
    program = lib.shift_right(tokens, 1, "_")
    ct = compile_to_transformer(program, ABC, 3)
    attn, lay = _attn(ct), ct.layout
    spare = np.nonzero(~(attn.W_Q[0].detach().numpy().any(0) | attn.W_K[0].detach().numpy().any(0)))[0]
    a = lay.labels.index("tokens:a")
    with torch.no_grad():
        attn.W_K[0, a, int(spare[0])] = 1.0
        attn.W_Q[0, a, int(spare[0])] = 2.0
    cert = certify(ct)
    margin, _ = measured(ct, program, ABC, 3)[0, 0]
    assert cert.passed, cert.text()
    assert margin < 79.0
    assert margin - SLACK <= cert.heads[0].margin <= margin + SLACK


def test_a_width_whose_bos_sits_inside_the_selected_keys_spread_prints_the_whole_spread():
    """A width of ``tokens <= tokens`` over 1 < 2 < 3 with key 1 raised by 2e-8 and BOS by 1e-8:
    for a query 3 the intended keys (BOS and keys 1, 2, 3) spread by 2e-8, while BOS is only 1e-8
    from either end (small enough for the decoder to stay within its tolerance). The printed spread must be the measured one (the selected keys' own spread,
    not only their distances to BOS)."""
    program = SelectorWidth(Select(tokens, tokens, LEQ))
    ct = compile_to_transformer(program, NUM, 3)
    attn, lay = _attn(ct), ct.layout
    WQ, WK = attn.W_Q[0].detach().numpy(), attn.W_K[0].detach().numpy()
    bos_col = int(np.nonzero(WK[lay.labels.index("tokens:BOS")])[0][-1])
    others = np.delete(WQ[:, bos_col], [lay.one, lay.labels.index("tokens:BOS")])
    assert not others.any() and WQ[lay.one, bos_col] != 0     # a non-BOS query's part there is constant
    c = float(WQ[lay.one, bos_col]) + 1e-8
    with torch.no_grad():                  # BOS's key holds 1 there (its score: c), key 1 now 2e-8 / c
        attn.W_Q[0, lay.one, bos_col] = c
        attn.W_K[0, lay.labels.index("tokens:1"), bos_col] = 2e-8 / c
    cert = certify(ct)
    _, spread = measured(ct, program, NUM, 3)[0, 0]
    assert cert.passed, cert.text()
    assert abs(spread - 2e-8) < 1e-11 and abs(cert.heads[0].spread - spread) < 1e-11


def test_a_max_whose_class_scores_depend_on_the_query_keeps_per_query_extremes():
    """"max over an And" with the lowest token's keys raised by 0.08 for every query and by 0.002
    more for a query holding the highest token (a term on the BOS column, where a non-BOS query's
    part is constant): within one class and one query the keys still score alike, so the measured
    spread is 0 and the printed one must be too; the class extremes must be taken per query state,
    not over all of them at once (which mixes the 0.002 into a spread and into the margin)."""
    make, vocab, n, _ = PROGRAMS["max over an And"]
    program = make()
    ct = compile_to_transformer(program, vocab, n)
    attn, lay = _attn(ct), ct.layout
    bos_col = int(np.nonzero(attn.W_K[0, lay.labels.index("tokens:BOS")].detach().numpy())[0][-1])
    with torch.no_grad():
        attn.W_K[0, lay.labels.index(f"tokens:{vocab[0]}"), bos_col] += 1e-3
        attn.W_Q[0, lay.labels.index(f"tokens:{vocab[-1]}"), bos_col] += 2.0
    cert = assert_tight(ct, program, vocab, n, slack=1e-9)
    assert cert.heads[0].spread < 1e-9


NESTED = {
    # key ((tok, pos), tok) against query (tok, pos, tok): equal flat parts, never equal tuples
    "pair of a pair vs flat": (lambda: lib.make_pair(lib.make_pair(tokens, indices), tokens),
                               lambda: SequenceMap(lib.tuple_append, lib.make_pair(tokens, indices), tokens)),
    # key (tok, (pos, tok)) against query (tok, pos, tok)
    "pair with a pair second": (lambda: lib.make_pair(tokens, lib.make_pair(indices, tokens)),
                                lambda: SequenceMap(lib.tuple_append, lib.make_pair(tokens, indices), tokens)),
    # key ((tok, pos),) against query (tok, pos)
    "singleton of a pair": (lambda: Map(lib.tuple_singleton, lib.make_pair(tokens, indices)),
                            lambda: lib.make_pair(tokens, indices)),
    # key ((tok, pos), tok) + (pos,) against query (tok, pos, tok, pos)
    "append to a nested tuple": (lambda: SequenceMap(lib.tuple_append, lib.make_pair(lib.make_pair(tokens, indices), tokens), indices),
                                 lambda: SequenceMap(lib.tuple_append, SequenceMap(lib.tuple_append, lib.make_pair(tokens, indices), tokens), indices)),
    # key (tok,) + ((pos, tok),) against query (tok, pos, tok)
    "append of a tuple": (lambda: SequenceMap(lib.tuple_append, Map(lib.tuple_singleton, tokens), lib.make_pair(indices, tokens)),
                          lambda: SequenceMap(lib.tuple_append, lib.make_pair(tokens, indices), tokens)),
}


@pytest.mark.parametrize("flip", [False, True], ids=["nested key", "nested query"])
@pytest.mark.parametrize("name", list(NESTED))
def test_tuple_equality_of_different_nesting_fails(name, flip):
    """A tuple ``==`` between tuples of equal flattened length but different nesting is never
    true in RASP; the compiler compares the flat parts, so its selector width counts keys that
    RASP does not (the forward pass shows it on ['a', 'a']). Only ``==`` of flat tuples may be
    split part by part: the certificate must FAIL margin here."""
    k, q = NESTED[name]
    k, q = (q(), k()) if flip else (k(), q())
    program = SelectorWidth(Select(k, q, EQ))
    ct = compile_to_transformer(program, ABC, 3)
    assert evaluate(program, ["a", "a"], causal=True).column(program) == [0, 0]
    assert ct.run(["a", "a"]) != [0, 0]
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "margin"), cert.text()


def _bump_key(ct, pos: int, amount: float) -> None:
    """The key at position ``pos`` scores ``amount`` more at every query (W_K row ``indices:pos``
    on the head dimension whose query is a constant)."""
    attn, lay = _attn(ct), ct.layout
    e, q = _constant_query_dim(attn, lay)
    with torch.no_grad():
        attn.W_K[0, lay.labels.index(f"indices:{pos}"), e] += amount / q


def test_max_classes_close_together():
    """lasts(tokens, tokens) ranks the keys by position, 40 apart. Lower the key at position 3
    by 20: it still out-scores position 2 by 20 (measured), so the certificate must PASS with
    that margin, the gap of its top class to the class below (every class is checked, each
    against the highest score of all lower classes). Lower it by 45: the forward pass now picks
    position 2 on [1, 1, 1, 1] and the certificate must FAIL margin."""
    program = lib.lasts(tokens, tokens)
    ct = compile_to_transformer(program, NUM, 4)
    _bump_key(ct, 3, -20.0)
    cert = assert_tight(ct, program, NUM, 4)
    assert 20.0 - SLACK <= cert.heads[0].margin <= 20.0
    ct = compile_to_transformer(program, NUM, 4)
    _bump_key(ct, 3, -45.0)
    assert ct.run([1, 1, 1, 1]) == [0, 1, 2, 2]
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "margin"), cert.text()


def test_width_spread_around_bos():
    """A selector width whose keys get (j - 1.5) 1e-8 at position j: BOS (no bonus) lies in the
    middle of the intended scores; the printed spread must be the measured one within 1e-9."""
    make, vocab, n, _ = PROGRAMS["crossed"]
    program = make()
    ct = compile_to_transformer(program, vocab, n)
    for j in range(n):
        _bump_key(ct, j, 1e-8 * (j - 1.5))
    cert = assert_tight(ct, program, vocab, n, slack=1e-9)
    assert cert.heads[0].spread >= 1.4e-8
