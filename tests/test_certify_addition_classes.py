"""Answer positions of the Theorem 5.1 certificate (constructions/addition/certify/margins.py) share
a class, and a cached table, only when what they compute agrees: positions whose attended sets
differ are checked apart, and a cache shared between models or lengths hands out nothing that the
weights or the length changed (docs/certificate.md, "Mutation testing"). The oracle is the
float64 hard-max pass (tests/forward_oracle.py) or a certificate computed with a fresh cache."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import constructions.addition.certify.margins as margins
from constructions.addition import START_ID, build_model
from constructions.addition.certify.layout import Layout
from forward_oracle import addition_passes, hardmax64
from test_certify_addition_mutants import _numbers

N = 4


def _moved_head(L: Layout, row: int, sig: int):
    """head_bounds, with head 1 at answer row ``row`` attending a_sig and b_sig (and '$')."""
    real = margins.head_bounds
    a_pos, b_pos = 1 + (L.n - 1 - sig), L.n + 2 + (L.n - 1 - sig)

    def bounds(W, layout, h, *args, **kwargs):
        hb = real(W, layout, h, *args, **kwargs)
        if h == 0:
            members = hb.members.copy()
            assert (hb.size[row], np.sum(members[row] >= 0)) == (3, 2)
            members[row] = -1
            members[row, :2] = [b_pos, a_pos]
            hb = dataclasses.replace(hb, members=members)
        return hb
    return bounds


def test_a_position_whose_attended_set_differs_is_its_own_class(monkeypatch) -> None:
    """At n = 4, c_1 and c_2 have the same class (head 1 reads a_{k+1}, b_{k+1}). Given attention
    bounds in which head 1 at c_2 reads a_2, b_2 instead (the same roles, one significance lower),
    c_2 cannot know a_3 + b_3: the float64 hard-max pass on those sets is wrong on 1000 + 2000
    there, and the certificate must check c_2 on its own and FAIL (hardmax), not certify it with
    the class of c_1."""
    model = build_model(n_digits=N, dtype="float64")[0]
    L = Layout.build(N, START_ID)
    row = 3  # answer rows: '=', c_0, c_1, c_2, ...
    _, S, _, q, want, tok, pos = addition_passes(model, "1000", "2000", START_ID)
    a_pos, b_pos = 1 + (N - 1 - 2), N + 2 + (N - 1 - 2)
    assert sorted(S[0][q[row]]) == sorted([0, a_pos - 1, b_pos - 1])  # a_3, b_3 (the positions before)
    S[0][q[row]] = [0, a_pos, b_pos]
    hm = hardmax64(model, tok, pos, S)
    assert hm["logits"][q[row]].argmax() != want[row]
    monkeypatch.setattr(margins, "head_bounds", _moved_head(L, row, 2))
    cert = margins.certify(model, N, "real")
    assert cert.passed is False and cert.reason == "hardmax", cert.message
    assert cert.message.startswith("query c_2: head 1 -> {$, b_2, a_2}; head 2 -> {$, c_2, b_2, a_2}: ")


def test_a_cache_shared_between_lengths_gives_the_fresh_numbers() -> None:
    """The cache is shared between lengths (the command line certifies N and searches M with one):
    a 2-digit model certified at n = 1 and then at n = 2 with the same cache gets at n = 2 every
    number of a fresh certificate (the classes of one length are not those of another)."""
    model = build_model(n_digits=2, d_model=21, dtype="float64")[0]
    cache: dict = {}
    margins.certify(model, 1, "real", cache=cache)
    assert _numbers(margins.certify(model, 2, "real", cache=cache)) == _numbers(margins.certify(model, 2, "real"))


def _tilted() -> torch.nn.Module:
    """The built model with a positional effect on both the FFN and the readout: W_in reads
    POS_1[0], head 1's values read POS_1[1] into PRE_SUM, W_U reads POS_2[1] into '+' (by 0.1: '+'
    stays at least 0.9 below the right answer)."""
    from lengthgen.tasks import ADDITION

    model = build_model(n_digits=1, d_model=21, dtype="float64")[0]
    names = model.annotations.residual
    a, mlp = model.blocks[0].attn, model.blocks[0].mlp
    with torch.no_grad():
        mlp.W_in[names.index("POS_1[0]")] += 0.004 * mlp.W_in[names.index("PRE_SUM")]
        e = int(torch.argmax(a.W_O[0][:, names.index("PRE_SUM")].abs()))
        a.W_V[0][names.index("POS_1[1]"), e] += 0.01
        model.unembed.W_U[names.index("POS_2[1]"), ADDITION.PLUS] = 0.1
    return model


@pytest.mark.parametrize("which", ["pos_embed.W_pos", "blocks.0.attn.W_V", "blocks.0.attn.W_O", "blocks.0.mlp.W_in",
                                   "unembed.W_U"])
def test_a_shared_cache_recomputes_the_positional_effect_after_a_small_change(which: str) -> None:
    """The positional effect (W_pos[query] and the heads' W_pos·W_V·W_O, through W_in and W_U) is
    cached apart from the tables; with a model where it is not zero, a 1% change of any array it
    reads gives, with the shared cache, every number of a fresh certificate."""
    cache: dict = {}
    base = margins.certify(_tilted(), 1, "real", cache=cache)
    model = _tilted()
    with torch.no_grad():
        dict(model.named_parameters())[which].mul_(1.01)
    fresh = margins.certify(model, 1, "real")
    assert _numbers(fresh) != _numbers(base)
    assert _numbers(margins.certify(model, 1, "real", cache=cache)) == _numbers(fresh), which


@pytest.mark.parametrize("n", [4, 7])
def test_the_four_special_queries_never_share_a_class_with_an_interior_one(n: int) -> None:
    """With heads that attend nothing (no members), the rows of class_signature differ only by the
    four query kinds: ``=`` (k = -1, its token is not a digit), c_0 (no carry below), c_{n-1} and
    c_n (the operands' top). Each of those is alone; the interior ``1 <= k <= n - 2`` share one
    row. Worked out by hand: n + 2 answer positions, 4 + 1 distinct rows."""
    L = Layout.build(n, START_ID)
    empty = [type("H", (), {"members": np.full((len(L.queries), 2), -1)})() for _ in range(2)]
    sig = margins.class_signature(L, empty, n)
    rows = [tuple(r) for r in sig]
    k = np.arange(len(L.queries)) - 1
    special = {-1, 0, n - 1, n}
    assert len(rows) == n + 2 and len(set(rows)) == 5
    for i in range(len(rows)):
        same = {int(k[j]) for j in range(len(rows)) if rows[j] == rows[i]}
        assert same == ({int(k[i])} if int(k[i]) in special else set(range(1, n - 1)))
