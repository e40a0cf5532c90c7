"""The chain of the multiplication certificate (constructions/multiplication/certify/margins.py,
docs/multiplication.md, "Certificate"): what it prints and how it decides, checked against the docs,
the model's weights, the design's attended sets and a float64 forward pass, at N = 1 (a certificate
in about a second) and with the steps before the MLP tables at N = 5:

* the answer classes are those of the docs: '=', c_0, c_1, c_i for 2 ≤ i ≤ n − 2, c_{n−1}, c_n, c_{n+1};
* ρ is printed on exactly the coordinates layer 3 and the readout read; |S| per head is the size of
  the design's attended sets; the heads that select by content alone are the ones whose keys read
  no position row;
* the position table must hold the IDs up to s + n + 2, and the message says so;
* a class with slack exactly 1 fails (> 1 passes), and the message of each failure names the class
  and the logit pair with its numbers (readout) or the unit (stability);
* the MLP tables cached for one model are not reused for a model whose layer-2 MLP differs.
"""
from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from constructions.multiplication import build_model, instance
from constructions.multiplication.certify import margins
from constructions.multiplication.certify.layers import Frame, layer1, layer2
from constructions.multiplication.certify.margins import AnswerResidual, answer_classes, answer_residual, certify, deviations
from constructions.multiplication.certify.weights import DIGITS, StructureError, Weights
from constructions.multiplication.layout import START_ID
from lengthgen.proof.interval import Iv
from multiplication_checks import wrong_pairs
from multiplication_oracle import designed_set, exceeded, float64_copy, measure

WIDTH = 69


def _docs_classes(n: int) -> list[str]:
    """The class of each answer position '=', c_0 … c_{n+1} (docs/multiplication.md, "Certificate")."""
    return ["=" if i == -1 else "middle" if 2 <= i <= n - 2 else f"c_{i}" for i in range(-1, n + 2)]


def _read_by_layer3(model) -> np.ndarray:
    """The residual coordinates the layer-3 MLP or the unembedding reads (a non-zero row)."""
    W_in, W_U = model.blocks[2].mlp.W_in.detach().numpy(), model.unembed.W_U.detach().numpy()
    return np.nonzero(np.any(W_in != 0, axis=1) | np.any(W_U != 0, axis=1))[0]


def _same_partition(signature: np.ndarray, names: list[str]) -> bool:
    return all((signature[j] == signature[k]) == (names[j] == names[k]) for j in range(len(names)) for k in range(len(names)))


@pytest.mark.parametrize("n", range(1, 9))
def test_answer_positions_fall_into_the_classes_of_the_docs(n: int) -> None:
    """With nothing read at all (no head, the same fixed part everywhere), the classes are set by
    where the answer position sits alone: which of a_{i+1} … a_{i−2} exist, the carries, '=' or a digit."""
    Q = n + 3
    i = np.arange(Q) - 1
    answer = AnswerResidual(Iv.exact(np.zeros((Q, 1))), [], [], i, i >= 0)
    classes = answer_classes(Frame.build(n, START_ID), answer)
    assert _same_partition(classes.signature, _docs_classes(n)), (n, classes.signature)


def test_the_built_model_at_n5_has_the_classes_of_the_docs_and_rho_on_what_layer3_reads() -> None:
    """Steps 1-5 of the chain on the built N = 5 model (no MLP tables): 7 classes, c_2 and c_3 in one;
    ρ on exactly the coordinates W_in of layer 3 or W_U read."""
    n = 5
    model = build_model(n_digits=n, d_model=WIDTH)[0]
    W = Weights.from_model(model)
    frame = Frame.build(n, START_ID)
    l1 = layer1(W, frame)
    l2 = layer2(W, frame, l1)
    dev = deviations(W, l1, l2)
    classes = answer_classes(frame, answer_residual(W, frame, l1, l2, dev.D))
    assert _same_partition(classes.signature, _docs_classes(n)) and classes.signature.max() == 6, classes.signature
    assert np.array_equal(dev.D[dev.read3], _read_by_layer3(model))


def test_the_printed_certificate_of_the_one_digit_model() -> None:
    """PASS with reason "" and message "PASS"; every answer position in one class; per head the
    printed fields, |S| ∈ the sizes of the design's attended sets, position-free exactly when W_K
    reads no position row; ρ on exactly what layer 3 and the readout read."""
    n = 1
    model = build_model(n_digits=n, d_model=WIDTH, M=9.0)[0]
    cert = certify(model, n)
    assert (cert.n, cert.passed, cert.reason, cert.message) == (n, True, "", "PASS")
    assert sum(count for _, count, _, _, _ in cert.classes) == n + 3 == len(cert.classes)
    labels = model.annotations.residual
    inst = instance("7", 38)
    tokens, ids = inst.tokens[:-1], inst.pos_ids[:-1]
    heads = [(0, 0), (0, 1), *((1, h) for h in range(6))]
    for info, (layer, h) in zip(cert.heads, heads, strict=True):
        assert set(info) == {"name", "sizes", "gap", "leak", "eta", "tv", "position_free"}
        queries = range(len(tokens)) if layer == 0 else range(n + 4, len(tokens))
        assert info["sizes"] == sorted({len(designed_set(n, ids, tokens, layer, h, q)) for q in queries}), info
        W_K = model.blocks[layer].attn.W_K[h].detach().numpy()
        reads_position = any(labels[r].startswith("POS") for r in np.nonzero(np.any(W_K != 0, axis=1))[0])
        assert info["position_free"] is (not reads_position), info
    assert set(cert.rho) == {labels[c] for c in _read_by_layer3(model)}


def test_the_position_table_must_hold_the_ids_up_to_s_plus_n_plus_2(monkeypatch) -> None:
    """A model built for N = 2 holds IDs 0 … s + 4: N = 3 needs s + 5 and raises; N = 2 goes on to read
    the weights (here a StructureError at once: a FAIL with reason "structure")."""
    model = build_model(n_digits=2, d_model=WIDTH)[0]
    last = model.cfg.n_ctx - 1
    assert last == START_ID + 4
    with pytest.raises(ValueError) as err:
        certify(model, 3)
    assert str(err.value) == f"3-digit operands need position IDs up to {START_ID + 5}; the model's table stops at {last}"

    def refuse(*args, **kw):
        raise StructureError("not read")

    monkeypatch.setattr(margins.Weights, "from_model", refuse)
    cert = certify(model, 2)
    assert (cert.n, cert.passed, cert.reason, cert.message) == (2, False, "structure", "not read")


def test_slack_exactly_one_fails_and_the_message_names_the_binding_check(monkeypatch) -> None:
    """docs/multiplication.md: a class passes when its slack is > 1. Every class's check replaced by
    a fixed outcome: slack 1 fails with the check's reason, and the message names the class and then
    the logit pair, what it needs and its margin (readout) or the unit's sentence (stability)."""
    model = build_model(n_digits=1, d_model=WIDTH, M=9.0)[0]
    cache: dict = {}

    def outcome(slack: float, reason: str, where: str):
        fixed = margins.Check(slack, 0.375, 0.375 / slack, 2.0, 1.0, reason, where)
        monkeypatch.setattr(margins, "check", lambda *args: fixed)
        return certify(model, 1, cache=cache)

    cert = outcome(1.5, "", "logit(1) − logit(2)")
    assert cert.passed and cert.slack == 1.5 and cert.message == "PASS"
    cert = outcome(1.0, "readout", "logit(3) − logit(4)")
    assert not cert.passed and cert.reason == "readout", cert.message
    assert re.fullmatch(r".+ \(reads .+\): logit\(3\) − logit\(4\) needs 0\.375 but its hard-max margin is 0\.375 "
                        r"\(slack ×1\)", cert.message), cert.message
    cert = outcome(0.5, "stability", "layer-3 unit 7 keeps its sign")
    assert not cert.passed and cert.reason == "stability", cert.message
    assert re.fullmatch(r".+ \(reads .+\): layer-3 unit 7 keeps its sign", cert.message), cert.message


def _unit(model, prefix: str) -> int:
    return next(k for k, u in enumerate(model.annotations.mlp) if u.startswith(prefix))


@pytest.mark.parametrize("edit", [
    lambda m, L: m.blocks[1].mlp.W_in.__setitem__((L.index("B0"), _unit(m, "B1xA1_k1_on")), 5.0),
    lambda m, L: m.blocks[1].mlp.b_in.__setitem__(_unit(m, "B1xA1_k1_on"), 50.0),
    lambda m, L: m.blocks[1].mlp.W_out.__setitem__((_unit(m, "B1xA1_k1_on"), L.index("PROD")), 80.0),
    lambda m, L: m.blocks[1].mlp.b_out.__setitem__(L.index("PROD"), 50.0),
], ids=["W_in", "b_in", "W_out", "b_out"])
def test_cached_mlp_tables_are_not_reused_for_another_layer2_mlp(edit) -> None:
    """The built N = 1 model passes and fills the cache; one weight of its layer-2 MLP changed makes a
    model that a float64 forward pass shows wrong, and with the same cache the certificate must FAIL."""
    cache: dict = {}
    model = build_model(n_digits=1, d_model=WIDTH, M=9.0)[0]
    assert certify(model, 1, cache=cache).passed
    with torch.no_grad():
        edit(model, model.annotations.residual)
    pairs = [(str(a), b) for a in range(10) for b in (0, 7, 38, 99)]
    assert wrong_pairs(float64_copy(model), pairs)
    cert = certify(model, 1, cache=cache)
    assert not cert.passed, cert.message


def _disguise(model) -> None:
    """The same function at every answer position, with every term of the hard-max residual in use:
    layer-1 and layer-2 attention add output biases to A0 (10 and 7; a step of layer 3 lies 45 above a
    multiple of 100 of PROD = b_0·A0 + b_1·A1, so an A0 off by 10 or 7 shows at b_0 = 9) that the
    layer-2 MLP, layer 3 and the readout subtract again; the a heads' values read ONE (1 everywhere)
    and b_V takes it off; the b_0 head's value reads a position row, whose part at b_0's ID the
    layer-2 output bias takes off, and also writes its digit to IS_BOS, which nothing after layer 2
    reads (and which sorts just before ONE, which the MLPs do read)."""
    L = model.annotations.residual
    a0, one, unread, b0 = (L.index(k) for k in ("A0", "ONE", "IS_BOS", "B0"))
    blocks = model.blocks
    blocks[0].attn.b_O[a0] += 10.0
    blocks[1].attn.b_O[a0] += 7.0
    blocks[1].mlp.b_in -= 17.0 * blocks[1].mlp.W_in[a0]
    blocks[2].mlp.b_in -= 17.0 * blocks[2].mlp.W_in[a0]
    model.unembed.b_U -= 17.0 * model.unembed.W_U[a0]
    for h in range(2, 6):
        blocks[1].attn.W_V[h][one] += 1.0
        blocks[1].attn.b_V[h] -= 1.0
    attn = blocks[1].attn
    v = int(torch.nonzero(attn.W_O[0][:, b0])[0, 0])
    pos = L.index("POS[0]")
    id_b0 = int(instance("7", 38).pos_ids[len("7") + 3])
    attn.W_V[0][pos, v] += 0.5
    attn.b_O[b0] -= 0.5 * model.pos_embed.W_pos[id_b0, pos] * attn.W_O[0][v, b0]
    attn.W_O[0][v, unread] = 1.0


def test_a_disguised_model_passes_and_is_right_everywhere() -> None:
    """The disguised N = 1 model is right on all 1000 inputs (float64 forward pass), the certificate
    PASSes it and its Δ₁, Δ₁ + Δ₂ and ρ contain the deviations that pass measures: a hard-max residual that dropped or flipped a bias, the layer-1 output, a member's
    position or token part, or put a coordinate that nothing reads onto one that is read, does not."""
    model = build_model(n_digits=1, d_model=WIDTH, M=9.0, dtype="float64")[0]
    with torch.no_grad():
        _disguise(model)
    assert not wrong_pairs(model, [(str(a), b) for a in range(10) for b in range(100)])
    cert = certify(model, 1)
    assert cert.passed and cert.reason == "", cert.message
    m = measure(model, 1, [("9", 99), ("9", 9), ("5", 55), ("7", 38), ("0", 0)])
    assert not exceeded(m, cert) and m.rho["PROD"] > 0, exceeded(m, cert)


def test_two_heads_reading_one_digit_add_their_terms() -> None:
    """_terms by hand: two heads whose attended sets hold the same digit a_i (|S| = 2 and 4) and a digit
    query: a_i adds T₁/2 + T₂/4, the query's own digit its embedding on D."""
    D = np.array([1, 3])
    W_E = np.arange(13 * 4, dtype=np.float64).reshape(13, 4)
    t1, t2 = np.arange(20.0).reshape(10, 2), np.full((10, 2), 8.0)
    reads = [margins.DigitReads(Iv.exact(t1), np.array([[0, -1]]), np.array([2])),
             margins.DigitReads(Iv.exact(t2), np.array([[-1, 0]]), np.array([4]))]
    answer = AnswerResidual(Iv.exact(np.zeros((1, 2))), reads, [("a", 0)], np.array([0]), np.array([True]))
    terms = margins._terms(0, answer, True, SimpleNamespace(W_E=W_E), D)
    assert list(terms) == [("a", 0), ("c", 0)]
    exact, got = t1 / 2 + t2 / 4, terms[("a", 0)]  # an enclosure: outward-rounded by a few ulps
    assert np.all(got.lo <= exact) and np.all(exact <= got.hi) and np.allclose(got.hi - got.lo, 0, atol=1e-12)
    assert np.array_equal(terms[("c", 0)].lo, W_E[DIGITS][:, D])


def test_cached_tables_are_not_reused_for_other_variables(monkeypatch) -> None:
    """The MLP tables of a class are computed for its variables: the same rows naming other variables
    (every a digit one place up) must not be answered from the cache."""
    model = build_model(n_digits=1, d_model=WIDTH, M=9.0)[0]
    W = Weights.from_model(model)
    frame = Frame.build(1, START_ID)
    l1 = layer1(W, frame)
    l2 = layer2(W, frame, l1)
    dev = deviations(W, l1, l2)
    answer = answer_residual(W, frame, l1, l2, dev.D)
    classes = answer_classes(frame, answer)
    made = []
    tables = SimpleNamespace(hardmax_error="", n_configs=1, n_groups=1, mlp2_groups=[])
    monkeypatch.setattr(margins, "class_tables", lambda W, spec, *args: made.append(spec) or tables)
    monkeypatch.setattr(margins, "check", lambda *args: margins.Check(2.0, 1.0, 0.5, 1.0, 0.5, "", ""))
    cache: dict = {}
    shifted = dataclasses.replace(answer, variables=[(v, k + (v == "a")) for v, k in answer.variables])
    for a in (answer, shifted):
        margins.check_classes(W, margins.Certificate(1, True, "", "PASS"), dev, a, classes, cache)
    n_classes = int(classes.signature.max()) + 1
    assert len(made) == 2 * n_classes


def test_the_mlp_tables_key_changes_with_every_array_the_tables_read() -> None:
    """The cache key of the MLP tables (``_mlp_digest``) covers each array the tables read: changing
    any one entry that they read must change the key, or a second model that differs only there
    would be certified with the first one's tables."""
    import copy

    model = build_model(n_digits=1, d_model=WIDTH, M=9.0)[0]
    W = Weights.from_model(model)
    frame = Frame.build(1, START_ID)
    l1 = layer1(W, frame)
    dev = deviations(W, l1, layer2(W, frame, l1))
    D, cols = dev.D, dev.D[dev.read3]
    base = margins._mlp_digest(W, D, dev.read3)
    edits = {  # (array, index of one entry the tables read)
        "W_in[1]": (lambda w: w.W_in[1], (D[0], 0)), "b_in[1]": (lambda w: w.b_in[1], (0,)),
        "W_out[1]": (lambda w: w.W_out[1], (0, cols[0])), "b_out[1]": (lambda w: w.b_out[1], (cols[0],)),
        "W_in[2]": (lambda w: w.W_in[2], (cols[0], 0)), "b_in[2]": (lambda w: w.b_in[2], (0,)),
        "W_out[2]": (lambda w: w.W_out[2], (0, cols[0])), "W_U": (lambda w: w.W_U, (cols[0], 0)),
        "b_out[2]": (lambda w: w.b_out[2], (cols[0],)), "b_O[2]": (lambda w: w.b_O[2], (cols[0],)),
        "b_U": (lambda w: w.b_U, (0,)),
    }
    for name, (array, index) in edits.items():
        changed = copy.deepcopy(W)
        array(changed)[index] += 0.5
        assert margins._mlp_digest(changed, D, dev.read3) != base, name
