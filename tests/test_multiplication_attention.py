"""The per-head bounds of the multiplication certificate (constructions/multiplication/certify/attention.py,
docs/multiplication.md, "Certificate") against a float64 softmax over points of the key and query
boxes the chain hands to :func:`head_attention`.

The heads are the built N = 2 model's, *disguised*: score scale 1/4 with W_Q × 4, the query's ``ONE``
row moved into b_Q, a b_K that shifts every score of a query by several units, and (position heads)
a row W_pos[0] that moves the first token's score. The built model has scale 1 and zero biases, so
an enclosure that forgot the scale, b_Q, b_K or the first token's position part agreed with it.
Every query position is a query (the chain asks layer 2 only at the answer positions), so a head
also selects the query itself and IDs that no key holds. Each printed bound must contain what the
softmax measures on random corners of the boxes: the leak λ (mass outside S over mass on S), the
spread η, the total variation to uniform on S and the score gap; |S| must be the count of S's keys.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from constructions.multiplication import build_model
from constructions.multiplication.certify import layers
from constructions.multiplication.certify.attention import Keys, head_attention
from constructions.multiplication.certify.layers import Frame, layer1, layer2
from constructions.multiplication.certify.weights import Layout, StructureError, Weights
from constructions.multiplication.layout import START_ID

N, WIDTH, TRIALS = 2, 69, 24


def _chain_calls(model, start: int, monkeypatch) -> list[dict]:
    """The arguments layers 1 and 2 of the chain pass to head_attention, one dict per working head."""
    calls = []

    def record(*args, **kw):
        names = ("W_Q", "b_Q", "W_K", "b_K", "W_pos", "scale", "keys", "q_pos", "q_content", "q_cls", "name")
        calls.append(dict(zip(names, args)) | kw)
        return head_attention(*args, **kw)

    monkeypatch.setattr(layers, "head_attention", record)
    W = Weights.from_model(model)
    frame = Frame.build(N, start)
    layer2(W, frame, layer1(W, frame))
    return calls


def _at_every_position(call: dict) -> dict:
    """The call with every position a query (the query boxes are the key boxes of its class)."""
    keys = call["keys"]
    return call | {"q_pos": np.arange(len(keys.ids)), "q_content": keys.content, "q_cls": keys.cls}


def _disguise(call: dict, rng: np.random.Generator, labels: list[str]) -> dict:
    """Scale 1/4 with W_Q × 4; b_Q = the ONE row (ONE is 1 in every box); b_K shifting the scores of
    the queries by 2 … 6; for a head whose keys read the ID, a W_pos[0] that moves the first token's
    score by about ±0.3."""
    one = labels.index("ONE")
    W_Q, W_K, W_pos = 4.0 * call["W_Q"], call["W_K"].copy(), call["W_pos"].copy()
    b_Q = call["b_Q"] + W_Q[one]
    W_Q[one] = 0.0
    keys = call["keys"]
    mid = keys.content.lo + 0.5 * (keys.content.hi - keys.content.lo)
    alpha = 0.25 * ((mid[keys.cls] + W_pos[keys.ids]) @ W_Q + b_Q)
    direction = alpha.mean(0)
    shift = alpha @ direction
    b_K = call["b_K"] + direction * (2.0 + 4.0 * rng.random()) / max(float(shift.min()), 1e-3)
    support = np.nonzero(np.any(W_K != 0, axis=1))[0]
    used = np.unique(keys.ids)
    if not np.all(W_pos[used][:, support] == W_pos[used[:1]][:, support]):  # position head: move the first key
        step = rng.standard_normal(len(support))
        move = alpha[1:] @ (step @ W_K[support]) if len(alpha) > 1 else np.ones(1)
        W_pos[0, support] += step * 0.3 / max(float(np.abs(move).max()), 1e-9)
    return call | {"W_Q": W_Q, "b_Q": b_Q, "b_K": b_K, "W_pos": W_pos, "scale": 0.25}


def _corner(box_lo: np.ndarray, box_hi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.where(rng.random(box_lo.shape) < 0.5, box_lo, box_hi)


def _attended(res, keys: Keys, k: int, q: int) -> list[int]:
    """Positions of S at query k (position q), as the bounds describe it."""
    if res.members is None:
        return [j for j in range(q + 1) if res.in_s[k, keys.cls[j]]]
    return ([0] if res.in_s[k, keys.cls[0]] else []) + [int(j) for j in res.members[k] if j >= 0]


def _measure(call: dict, res, rng: np.random.Generator) -> dict[str, float]:
    """Worst case over TRIALS random corners of every box: leak, spread, TV, gap (smallest)."""
    keys, W_pos = call["keys"], call["W_pos"]
    worst = {"leak": 0.0, "eta": 0.0, "tv": 0.0, "gap": np.inf}
    for _ in range(TRIALS):
        x_keys = _corner(keys.content.lo[keys.cls], keys.content.hi[keys.cls], rng) + W_pos[keys.ids]
        k_vec = x_keys @ call["W_K"] + call["b_K"]
        for k, q in enumerate(call["q_pos"]):
            c = call["q_cls"][k]
            x_q = _corner(call["q_content"].lo[c], call["q_content"].hi[c], rng) + W_pos[keys.ids[q]]
            scores = call["scale"] * (k_vec[: q + 1] @ (x_q @ call["W_Q"] + call["b_Q"]))
            S = _attended(res, keys, k, q)
            assert len(S) == len(set(S)) == res.size[k] > 0 and max(S) <= q, (call["name"], q, S, res.size[k])
            inside = np.zeros(q + 1, dtype=bool)
            inside[S] = True
            p = np.exp(scores - scores.max())
            p /= p.sum()
            worst["leak"] = max(worst["leak"], p[~inside].sum() / p[inside].sum())
            worst["eta"] = max(worst["eta"], scores[inside].max() - scores[inside].min())
            worst["tv"] = max(worst["tv"], 0.5 * np.abs(p - inside / inside.sum()).sum())
            if (~inside).any():
                worst["gap"] = min(worst["gap"], scores[inside].min() - scores[~inside].max())
    return worst


def _within(measured: float, bound: float) -> bool:
    return measured <= bound * (1 + 1e-9) + 1e-12


def _swap_ids(call: dict, j: int, k: int) -> dict:
    """The call on a layout whose positions j and k trade their IDs (the per-ID table rebuilt)."""
    keys = call["keys"]
    ids = keys.ids.copy()
    ids[[j, k]] = ids[[k, j]]
    table, m = Layout(N, ids, np.zeros_like(ids), np.zeros_like(ids)).positions_by_id()
    return call | {"keys": Keys(keys.cls, ids, keys.content, table, m)}


@pytest.mark.parametrize("start, swap", [(START_ID, False), (1, True)])
def test_disguised_heads_bound_the_float64_softmax(start: int, swap: bool, monkeypatch) -> None:
    """Every working head of layers 1 and 2, disguised, at every position of the N = 2 layout (start
    1 with the IDs of a_1 and the last answer digit traded: an a digit holds ID 1, which queries after
    it select): the printed leak, spread, TV and gap contain the float64 measurement and are nearly
    tight (η and the gap to 0.01, λ within 20×), |S| counts S, and a head is position-free exactly
    when its W_K reads no position row (docs/multiplication.md, "Heads": the separator and b heads)."""
    model = build_model(n_digits=N, d_model=WIDTH, M=9.0)[0]
    labels = model.annotations.residual
    rng = np.random.default_rng(start)
    for call in _chain_calls(model, start, monkeypatch):
        call = _at_every_position(_swap_ids(call, 1, -1) if swap else call)
        call = _disguise(call, rng, labels)
        res = head_attention(**call)
        reads = {labels[r] for r in np.nonzero(np.any(call["W_K"] != 0, axis=1))[0]}
        assert res.position_free is (not any(r.startswith("POS") for r in reads)), (call["name"], reads)
        m = _measure(call, res, rng)
        assert m["leak"] > 0 and _within(m["leak"], res.leak) and res.leak <= 20 * m["leak"], (call["name"], m, res)
        assert _within(m["eta"], res.spread_eta) and res.spread_eta <= m["eta"] + 0.01, (call["name"], m, res)
        assert _within(m["tv"], res.tv) and res.tv <= 1, (call["name"], m, res)
        assert m["gap"] + 1e-9 >= res.gap >= m["gap"] - 0.01, (call["name"], m, res)


def _separator_head(monkeypatch) -> dict:
    """Layer 1 head 0 of the built N = 2 model (the separators seen) at every position."""
    model = build_model(n_digits=N, d_model=WIDTH, M=9.0)[0]
    return _at_every_position(_chain_calls(model, START_ID, monkeypatch)[0])


def test_a_head_whose_keys_all_tie_is_uniform_and_a_blunt_one_has_tv_at_most_1(monkeypatch) -> None:
    """W_K = 0: every visible key scores 0, the softmax is uniform on all of them: λ = η = TV = 0 (to
    within subnormals: an enclosure of an exact 0 may be widened by 2^-1074).
    Scale 1/15: the digits score only about 1.2 below the separators and weigh more than S (λ > 1);
    TV, a total variation, is still at most 1 (and contains the measurement)."""
    call = _separator_head(monkeypatch)
    rng = np.random.default_rng(0)
    tied = call | {"W_K": np.zeros_like(call["W_K"])}
    res = head_attention(**tied)
    assert max(res.leak, res.spread_eta, res.tv) < 1e-300  # 0 up to the outward rounding of exact zeros
    assert res.size.tolist() == list(range(1, len(call["q_pos"]) + 1))
    assert _measure(tied, res, rng)["tv"] < 1e-12
    blunt = call | {"scale": call["scale"] / 15}
    res = head_attention(**blunt)
    m = _measure(blunt, res, rng)
    assert res.leak > 1 and res.tv == 1.0 and _within(m["leak"], res.leak) and _within(m["tv"], res.tv), (m, res)


@pytest.mark.parametrize("where", [[0, 4], [3]])
def test_id_0_must_be_held_by_the_first_token_alone(where: list[int], monkeypatch) -> None:
    """A head that selects an ID treats ID 0 as the first token's: ID 0 held also by position 4, or by
    position 3 instead of position 0, is outside the chain and FAILs (structure) with the head's name."""
    model = build_model(n_digits=N, d_model=WIDTH, M=9.0)[0]
    call = _at_every_position(_chain_calls(model, START_ID, monkeypatch)[1])  # layer 1 head 1
    ids = call["keys"].ids.copy()
    ids[0] = ids[1]
    ids[where] = 0
    table, m = Layout(N, ids, np.zeros_like(ids), np.zeros_like(ids)).positions_by_id()
    keys = Keys(call["keys"].cls, ids, call["keys"].content, table, m)
    with pytest.raises(StructureError) as err:
        head_attention(**(call | {"keys": keys}))
    assert str(err.value) == "layer 1 head 1: ID 0 must be held by the first token alone"


def test_the_first_tokens_content_class_must_hold_it_alone(monkeypatch) -> None:
    """A head that selects an ID scores the first token's class by the first token's own key: another
    position in that class (here position 3) would be scored as if it were the first token, so the
    head FAILs (structure) with its name instead."""
    model = build_model(n_digits=N, d_model=WIDTH, M=9.0)[0]
    call = _at_every_position(_chain_calls(model, START_ID, monkeypatch)[1])  # layer 1 head 1
    cls = call["keys"].cls.copy()
    cls[3] = cls[0]
    keys = Keys(cls, call["keys"].ids, call["keys"].content, call["keys"].pos_table, call["keys"].m_max)
    with pytest.raises(StructureError) as err:
        head_attention(**(call | {"keys": keys}))
    assert str(err.value) == "layer 1 head 1: the first token's content class must hold it alone"


def test_ids_with_one_key_vector_fail_with_the_heads_name(monkeypatch) -> None:
    """Layer 2 head 3 with W_K reading one position row: IDs share key vectors, and the error names
    the head as the chain does ("layer 2 head 3"), then the IDs."""
    model = build_model(n_digits=N, d_model=WIDTH, M=9.0)[0]
    labels = model.annotations.residual
    call = _chain_calls(model, START_ID, monkeypatch)[5]
    assert call["name"] == "layer 2 head 3"
    W_K = call["W_K"].copy()
    W_K[[k for k, label in enumerate(labels) if label.startswith("POS[") and label != "POS[0]"]] = 0.0
    with pytest.raises(StructureError) as err:
        head_attention(**(call | {"W_K": W_K}))
    assert re.fullmatch(r"layer 2 head 3: position IDs \d+ and \d+ have the same key vector \(W_pos·W_K is not injective "
                        r"on the IDs the format uses\)", str(err.value)), str(err.value)
