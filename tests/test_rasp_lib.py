"""RASP-L / tracr library helpers against plain Python."""
from __future__ import annotations

from hypothesis import given, strategies as st

from rasp import lib
from rasp.core import Map, indices, tokens
from rasp.evaluate import IncrementalEvaluator, evaluate

ints = st.lists(st.integers(0, 4), min_size=1, max_size=20)


def run(program, toks, causal=True):
    return evaluate(program, toks, causal=causal).column(program)


@given(toks=ints, k=st.integers(0, 4))
def test_shift_right(toks, k):
    expected = [toks[i - k] if i >= k else "E" for i in range(len(toks))]
    assert run(lib.shift_right(tokens, k, "E"), toks) == expected
    assert run(lib.shift_right(tokens, k, "E"), toks, causal=False) == expected


@given(toks=ints)
def test_index_select_cumsum_firsts_lasts(toks):
    n = len(toks)
    back = Map(lambda i: i // 2, indices)
    assert run(lib.index_select(tokens, back), toks) == [toks[i // 2] for i in range(n)]
    is_odd = Map(lambda t: t % 2 == 1, tokens)
    for causal in (True, False):
        assert run(lib.cumsum(is_odd), toks, causal) == [sum(t % 2 for t in toks[:i + 1]) for i in range(n)]
    assert run(lib.firsts(tokens, tokens), toks) == [toks.index(t) for t in toks]
    assert run(lib.lasts(tokens, tokens), toks) == list(range(n))           # causal: itself
    assert run(lib.lasts(tokens, tokens), toks, causal=False) == [
        max(j for j in range(n) if toks[j] == t) for t in toks]


@given(toks=ints)
def test_where_and_rasp_l_adapters(toks):
    prog = lib.where(lib.tok_map(tokens, lambda t: t > 2), tokens, lib.full(-1))
    assert run(prog, toks) == [t if t > 2 else -1 for t in toks]
    prog = lib.kqv(tokens, tokens, indices, lib.equals, default=0, reduction="max")
    assert run(prog, toks) == list(range(len(toks)))
    prog = lib.sel_width(lib.select(tokens, tokens, lib.leq))
    assert run(prog, toks) == [sum(t2 <= t for t2 in toks[:i + 1]) for i, t in enumerate(toks)]


@given(toks=ints)
def test_tracr_library_non_causal(toks):
    n = len(toks)
    assert run(lib.make_length(), toks, causal=False) == [n] * n
    assert run(lib.make_hist(), toks, causal=False) == [toks.count(t) for t in toks]
    assert run(lib.make_reverse(tokens), toks, causal=False) == toks[::-1]
    uniq = list(dict.fromkeys(toks))
    assert run(lib.make_sort_unique(tokens, tokens), uniq, causal=False) == sorted(uniq)


def masked_reference(s, n, offset, sep, null, edge):
    out = []
    for i in range(len(s)):
        end = i - offset
        gram = []
        for d in range(n - 1, -1, -1):
            if d and any(0 <= j < len(s) and s[j] == sep for j in range(end - d + 1, end + 1)):
                gram.append(null)
            else:
                gram.append(s[end - d] if end - d >= 0 else edge)
        out.append(tuple(gram))
    return out


@given(s=st.lists(st.sampled_from("ab|"), min_size=1, max_size=16), n=st.integers(1, 5),
       offset=st.integers(0, 1))
def test_masked_ngram_matches_its_definition(s, n, offset):
    prog = lib.masked_ngram(tokens, Map(lambda t: t == "|", tokens), n, offset=offset, null="_", edge="^")
    assert run(prog, s) == masked_reference(s, n, offset, "|", "_", "^")
    assert IncrementalEvaluator(prog).extend(s) == masked_reference(s, n, offset, "|", "_", "^")


def test_masked_ngram_hand_example():
    prog = lib.masked_ngram(tokens, Map(lambda t: t == "|", tokens), 3, null="_", edge="^")
    assert run(prog, list("ab|cd")) == [("^", "^", "a"), ("^", "a", "b"), ("_", "_", "|"),
                                        ("_", "|", "c"), ("|", "c", "d")]
