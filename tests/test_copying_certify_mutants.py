"""Tests that kill the mutants of the copy/reverse certificate
(constructions/copying/certify/margins.py) that the other tests let survive (docs/certificate.md,
"Mutation testing"). Each expectation comes from outside the certificate: the float64 forward pass
of tests/forward_oracle.py, or the task's coupling worked out by hand (docs/copying.md)."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from constructions.copying import build_model
from constructions.copying.certify.margins import certify
from lengthgen.tasks import COPY, REVERSE
from forward_oracle import forward64

N = 6
TASKS = {"copy": COPY, "reverse": REVERSE}


def _model(task: str, n: int = N):
    return build_model(task, n_digits=n, dtype="float64")[0]


def _predictions(task: str, model, x: np.ndarray, start: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """float64 argmax at every answer position (``=``, y_1 … y_n) and the right tokens there."""
    inst = TASKS[task].instance(x.astype(np.uint8), start=start)
    tok, pos = inst.tokens[:-1], inst.pos_ids[:-1]
    logits = forward64(model, tok, pos)["logits"][len(x) + 1:]
    expected = np.concatenate([x[::-1] if task == "reverse" else x, [COPY.EOS]])
    return logits.argmax(-1), expected


def _shift_token(model, which: str, token: int, amount: float) -> None:
    """Add ``amount`` to the logit of ``token`` through one bias (b_U, b_O or b_V), solved by least
    squares through the model's own W_O, W_U; the forward pass checks what it does."""
    a = model.blocks[0].attn
    W_U = model.unembed.W_U.detach().double().numpy()
    want = np.zeros(W_U.shape[1])
    want[token] = amount
    with torch.no_grad():
        if which == "b_U":
            model.unembed.b_U[token] += amount
        elif which == "b_O":
            a.b_O += torch.tensor(np.linalg.lstsq(W_U.T, want, rcond=None)[0])
        else:
            M = a.W_O[0].detach().double().numpy() @ W_U  # [d_head, V]
            a.b_V[0] += torch.tensor(np.linalg.lstsq(M.T, want, rcond=None)[0])


@pytest.mark.parametrize("which", ["b_U", "b_O", "b_V"])
@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_a_bias_that_makes_the_model_wrong_fails(task: str, which: str) -> None:
    """A bias that lifts '5' by 3 (the hard-max margins are 1 and 1.5): the forward pass predicts
    '5' where a 7 is due, so the certificate must fail at the hard-max limit, naming '5'."""
    model = _model(task)
    _shift_token(model, which, COPY.vocabulary["5"], 3.0)
    predicted, expected = _predictions(task, model, np.full(N, 7))
    assert np.any(predicted != expected) and set(predicted[predicted != expected]) == {COPY.vocabulary["5"]}
    cert = certify(model, task, N, "real")
    assert not cert.passed and cert.reason == "hardmax", cert.message
    assert "not proven to beat '5'" in cert.message


@pytest.mark.parametrize("which", ["b_U", "b_O", "b_V"])
def test_a_bias_that_keeps_the_model_right_passes(which: str) -> None:
    """Lifting '5' by 0.5 leaves every answer right (margins 1 and 1.5, checked on all digits):
    the certificate must still pass, and its tightest hard-max gap is 1 − 0.5 = 0.5."""
    model = _model("copy")
    _shift_token(model, which, COPY.vocabulary["5"], 0.5)
    for digit in range(10):
        predicted, expected = _predictions("copy", model, np.full(N, digit))
        assert np.array_equal(predicted, expected)
    cert = certify(model, "copy", N, "real")
    assert cert.passed, cert.message
    gaps = [float(c.where.split("gap ≥ ")[1].rstrip(")")) for c in cert.classes]
    assert min(gaps) == pytest.approx(0.5, abs=1e-9)


def _hand_description(task: str, n: int, j: int) -> str:
    """Answer position j (0: ``=``, j: y_j) of the task's coupling, in the certificate's words:
    y_j (j < n) and ``=`` attend the input digit the next token copies; y_n attends ``$`` alone."""
    query = "=" if j == 0 else f"y_{j}"
    if j == n:
        return f"query {query} -> S = {{$}}, predicts '$'"
    src = n - j if task == "reverse" else j + 1
    return f"query {query} -> S = {{$, x_{src}}}, predicts the digit of x_{src}"


@pytest.mark.parametrize("n", [3, 6])
@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_classes_by_hand(task: str, n: int) -> None:
    """The classes of the built model: ``=`` (1 position, the target digit free: 10 assignments),
    y_1 … y_{n−1} (n − 1 positions, query digit and target digit free: 100; at n = 3 for reverse,
    y_1 copies x_2 and its query holds x_3) and y_n (1 position, its own digit free: 10)."""
    cert = certify(_model(task, n), task, n, "real")
    assert cert.passed, cert.message
    got = [(c.description, c.positions, c.configs) for c in cert.classes]
    assert got == [(_hand_description(task, n, 0), 1, 10), (_hand_description(task, n, 1), n - 1, 100),
                   (_hand_description(task, n, n), 1, 10)]


def _lift_through_embedding(model, token: int, lifted: int, amount: float, table: str = "W_E") -> None:
    """Add to W_E[token] (or W_pos[token], a position ID) a vector that W_U reads as +amount on ``lifted`` and that W_Q, W_K, W_V do
    not read (least squares): only the token's own logits move, not the attention or the values."""
    a = model.blocks[0].attn
    f = lambda t: t.detach().double().numpy()
    W_U = f(model.unembed.W_U)
    A = np.concatenate([W_U, f(a.W_Q[0]), f(a.W_K[0]), f(a.W_V[0])], axis=1)  # [d, V + 3·d_head]
    want = np.zeros(A.shape[1])
    want[lifted] = amount
    with torch.no_grad():
        rows = model.embed.W_E if table == "W_E" else model.pos_embed.W_pos
        rows[token] += torch.tensor(np.linalg.lstsq(A.T, want, rcond=None)[0])


@pytest.mark.parametrize("task", ["copy", "reverse"])
@pytest.mark.parametrize("query", ["=", "7"])
def test_a_query_token_that_makes_the_model_wrong_fails(task: str, query: str) -> None:
    """The query's own token (``=`` at the first answer position, a digit at y_j) lifts '5' by 3
    in its own logits: the forward pass predicts '5' there where a 7 is due, so the certificate
    must fail at the hard-max limit."""
    model = _model(task)
    _lift_through_embedding(model, COPY.vocabulary[query], COPY.vocabulary["5"], 3.0)
    predicted, expected = _predictions(task, model, np.full(N, 7))
    wrong = predicted != expected
    assert wrong[0] == (query == "=") and wrong[1:-1].all() == (query == "7")
    cert = certify(model, task, N, "real")
    assert not cert.passed and cert.reason == "hardmax", cert.message
    assert "not proven to beat '5'" in cert.message


@pytest.mark.parametrize("task", ["copy", "reverse"])
@pytest.mark.parametrize("answer", [0, 3])
def test_a_position_row_that_makes_the_model_wrong_fails(task: str, answer: int) -> None:
    """The position ID of one answer position (``=`` or y_3) lifts '5' by 3 in its own logits
    (the positional part of the logits): the forward pass predicts '5' there alone, so the
    certificate must fail at the hard-max limit."""
    model = _model(task)
    inst = TASKS[task].instance(np.full(N, 7, dtype=np.uint8), start=1)
    _lift_through_embedding(model, int(inst.pos_ids[N + 1 + answer]), COPY.vocabulary["5"], 3.0, table="W_pos")
    predicted, expected = _predictions(task, model, np.full(N, 7))
    assert list(np.nonzero(predicted != expected)[0]) == [answer]
    cert = certify(model, task, N, "real")
    assert not cert.passed and cert.reason == "hardmax", cert.message
    assert "not proven to beat '5'" in cert.message


def _failing(kind: str):
    """(model, dtype passed to certify, reason, message fragment) of one failure path: weights of
    the wrong shape, a key structure that breaks, a wrong model, a float32 overflow."""
    model = _model("copy")
    d = model.cfg.d_model
    if kind == "shape":  # an MLP: Weights.from_model refuses it
        import dataclasses
        from lengthgen.model import Transformer
        return Transformer(dataclasses.replace(model.cfg, d_mlp=4)), "real", "structure", "attention-only"
    if kind == "keys":  # two IDs with one key vector: the attention bound refuses it
        with torch.no_grad():
            model.pos_embed.W_pos[3] = model.pos_embed.W_pos[4]
        return model, None, "structure", "have the same key vector"
    if kind == "hardmax":
        _shift_token(model, "b_U", COPY.vocabulary["5"], 3.0)
        return model, "float64", "hardmax", "not proven to beat '5'"
    model32 = build_model("copy", n_digits=N, dtype="float32")[0]  # 1e38 in the residual: within 4x of 3.4e38
    with torch.no_grad():
        model32.blocks[0].attn.b_O[d - 1] = 1e38
    return model32, "float32", "float", "float32 overflow: magnitudes up to 1e+38"


@pytest.mark.parametrize("kind", ["shape", "keys", "hardmax", "overflow"])
def test_a_failed_certificate_says_what_was_certified(kind: str) -> None:
    """A FAIL names the task, n, d_model and the dtype checked (the model's own when none is
    given), is False (not merely falsy), gives the reason and a message that names the fault, and
    keeps the float terms once they exist (hardmax, float)."""
    model, dtype, reason, fragment = _failing(kind)
    cert = certify(model, "copy", N, dtype)
    assert (cert.task, cert.n, cert.d_model) == ("copy", N, model.cfg.d_model)
    assert cert.dtype == (dtype or "float64") and cert.passed is False
    assert cert.reason == reason and fragment in cert.message, cert.message
    assert (cert.float_terms is not None) == (kind in ("hardmax", "overflow"))
    if kind == "overflow":
        assert cert.float_terms.dtype == "float32"


def test_bad_arguments_raise_with_the_numbers() -> None:
    """A dtype outside real/float64/float32 and an n whose position IDs run past the table: the
    model built for 6 digits has 9 position rows (IDs 0–8); 8 digits use IDs up to 9 (the task's
    own instance), 7 digits up to 8, which fits."""
    model = _model("copy")
    assert model.cfg.n_ctx == 9
    with pytest.raises(ValueError, match=r"^dtype must be one of real, float64, float32, got 'bfloat16'$"):
        certify(model, "copy", N, "bfloat16")
    assert COPY.instance(np.zeros(8, dtype=np.uint8), start=1).pos_ids.max() == 9
    with pytest.raises(ValueError, match=r"^8 digits need position IDs up to 9; the model's table stops at 8$"):
        certify(model, "copy", 8, "real")
    certify(model, "copy", 7, "real")  # fits: no error (whether it passes is another matter)


def test_a_shared_cache_never_hides_a_changed_weight() -> None:
    """``cache`` keeps tables between calls (the smallest-M search): it must be filled, and a
    model that differs in W_pos, W_U, a bias or W_E (made wrong, checked by the forward pass) must still FAIL
    with the cache of the right model."""
    cache: dict = {}
    right = _model("copy")
    assert certify(right, "copy", N, "real", cache=cache).passed and cache
    inst = COPY.instance(np.full(N, 7, dtype=np.uint8), start=1)
    by_pos = _model("copy")
    _lift_through_embedding(by_pos, int(inst.pos_ids[N + 1]), COPY.vocabulary["5"], 3.0, table="W_pos")
    by_unembed = _model("copy")
    W_pos = by_unembed.pos_embed.W_pos.detach().numpy()
    W_E = by_unembed.embed.W_E.detach().numpy()
    r = int(np.argmax(np.where(np.abs(W_E).max(0) == 0, np.abs(W_pos[inst.pos_ids[N + 1]]), 0)))
    assert W_pos[inst.pos_ids[N + 1], r] != 0  # a position coordinate that no token writes
    with torch.no_grad():
        by_unembed.unembed.W_U[r, COPY.vocabulary["5"]] += 3.0 / W_pos[inst.pos_ids[N + 1], r] * 10
    by_bias = []
    for which in ("b_U", "b_O", "b_V"):
        by_bias.append(_model("copy"))
        _shift_token(by_bias[-1], which, COPY.vocabulary["5"], 3.0)
    by_embed = _model("copy")
    _lift_through_embedding(by_embed, COPY.vocabulary["7"], COPY.vocabulary["5"], 3.0)
    for wrong in (by_pos, by_unembed, *by_bias, by_embed):
        predicted, expected = _predictions("copy", wrong, np.full(N, 7))
        assert np.any(predicted != expected)
        cert = certify(wrong, "copy", N, "real", cache=cache)
        assert not cert.passed, cert.message


def test_too_many_free_digits_names_the_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the enumeration limit lowered to 1, ``=`` (1 free digit) is enumerated and y_1 (its own
    digit x_1 and the copied x_2: 2 free digits) is refused, in these words; the float terms,
    computed before the classes, are kept (as for a hard-max FAIL)."""
    from constructions.copying.certify import margins
    monkeypatch.setattr(margins, "MAX_FREE_DIGITS", 1)
    cert = margins.certify(_model("copy"), "copy", N, "float64")
    assert cert.reason == "structure" and cert.message == (
        "query y_1 -> S = {$, x_2}, predicts the digit of x_2: an answer position depends on 2 input digits "
        "(at most 1 are enumerated)")
    assert cert.float_terms is not None and cert.float_terms.dtype == "float64"


def test_the_hardmax_failure_names_the_free_digits() -> None:
    """The hard-max failure of a '5'-lifting b_U names the free digits of the failing assignment:
    one digit per free input digit, comma-separated, as printed by the task's digits."""
    model = _model("copy")
    _shift_token(model, "b_U", COPY.vocabulary["5"], 3.0)
    cert = certify(model, "copy", N, "real")
    import re
    assert re.search(r"\(free digits [0-46-9](, [0-9])*; gap ≥ -[0-9.]+\)$", cert.message), cert.message


def test_the_float_part_adds_the_readout_term() -> None:
    """float32: each class's float part is the residual's float deviation read out (positive: the
    residual rounds, tests/test_copying_certify_bounds.py) plus the readout's own term, so it is
    strictly above the readout term alone."""
    model = build_model("copy", n_digits=N, dtype="float32")[0]
    cert = certify(model, "copy", N, "float32")
    assert cert.passed and cert.float_terms.logit_error > 0
    assert all(c.parts["float"] > cert.float_terms.logit_error * (1 + 1e-6) for c in cert.classes)


def test_a_passed_certificate_says_what_was_certified() -> None:
    """A PASS names the task, n, d_model and dtype, says "PASS", and gives per head the attended
    set sizes (2: '$' and one digit; 1: '$' alone at y_n), the score gap, leak, spread and TV."""
    model = _model("reverse")
    cert = certify(model, "reverse", N, "float64")
    assert (cert.task, cert.n, cert.d_model, cert.dtype) == ("reverse", N, model.cfg.d_model, "float64")
    assert cert.passed is True and cert.reason == "" and cert.message == "PASS"
    assert list(cert.heads[0]) == ["sizes", "gap", "leak", "eta", "tv"] and cert.heads[0]["sizes"] == [1, 2]
    assert cert.heads[0]["tv"] >= cert.heads[0]["leak"] > 0 and cert.heads[0]["gap"] > 0


def _set(model, name: str, row: str, col: str, value: float) -> None:
    """One entry of head 1's W_V or W_O, or of W_U, by its row and column labels."""
    lab, hd = model.annotations.residual, model.annotations.head_dims[0]
    with torch.no_grad():
        if name == "W_U":
            model.unembed.W_U[lab.index(row), COPY.vocabulary[col]] = value
        elif name == "W_V":
            model.blocks[0].attn.W_V[0, lab.index(row), hd.index(col)] = value
        else:
            model.blocks[0].attn.W_O[0, hd.index(row), lab.index(col)] = value


def test_a_shared_cache_never_hides_a_changed_value_path() -> None:
    """The tables kept between calls are keyed by every weight they read. After the right model
    has filled the cache, a model that differs from it in one entry of W_V, W_O or W_U, which
    makes it predict '5' where a 7 is due (checked by the forward pass), must FAIL: the value of
    the token 7 also written into COPIED[5] (through W_V or W_O), the query token 7 read as '5'
    (W_U), or the position codes read into COPIED[5] (W_V; W_O, after a model whose W_V reads them
    into a head dimension that W_O ignores, which changes nothing)."""
    cache: dict = {}
    assert certify(_model("copy"), "copy", N, "real", cache=cache).passed
    wrong = []
    for name, row, col, value in [("W_V", "DIGIT[7]", "val_DIGIT[5]", 1.5), ("W_O", "val_DIGIT[7]", "COPIED[5]", 3.0),
                                  ("W_U", "DIGIT[7]", "5", 3.0), ("W_V", "POS[0]", "val_DIGIT[5]", 3.0)]:
        wrong.append(_model("copy"))
        _set(wrong[-1], name, row, col, value)
    reads_pos = _model("copy")
    _set(reads_pos, "W_V", "POS[0]", "pos[0]", 1.0)
    for x in (np.full(N, 7), np.arange(N) % 2 * 7):
        assert np.array_equal(*_predictions("copy", reads_pos, x))
    assert certify(reads_pos, "copy", N, "real", cache=cache).passed
    wrong.append(copy.deepcopy(reads_pos))
    _set(wrong[-1], "W_O", "pos[0]", "COPIED[5]", 3.0)
    for model in wrong:
        predicted, expected = _predictions("copy", model, np.full(N, 7))
        assert np.any(predicted != expected)
        cert = certify(model, "copy", N, "real", cache=cache)
        assert not cert.passed, cert.message


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_the_certified_start_id_is_the_one_given(task: str) -> None:
    """Position ID 1 lifts '5' by 3 in its own logits. With start ID 1 it is ``=``'s ID (copy) or
    x_1's and y_n's (reverse), and the forward pass predicts '5' there; with start ID 2 no token
    holds it and every answer is right. So 5 digits must PASS from start 2 and FAIL from start 1."""
    model, n = _model(task), N - 1
    _lift_through_embedding(model, 1, COPY.vocabulary["5"], 3.0, table="W_pos")
    for x in (np.full(n, 7), np.arange(n) * 2 % 10):
        assert np.any(np.not_equal(*_predictions(task, model, x, start=1)))
        assert np.array_equal(*_predictions(task, model, x, start=2))
    assert certify(model, task, n, "real", start=2).passed
    assert certify(model, task, n, "real", start=1).reason == "hardmax"
