"""Each step of the float32 statement of the trained-model certificate holds torch's float32 value.

A committed checkpoint runs in float32 with hooks on 3-digit additions. Each step of the
certificate is fed, as exact points, the float32 values the model itself had before that step, and
must enclose what the model computed from them: the (token, ID) tables (the embedding sum, LN1,
the projections), the scores, the residual after attention (from tables holding the model's own
queries, keys and values), LN2, GELU, the MLP, the residual sum, the final LN and the logit
differences, in the plain pass and in the affine tail. The same steps without the float format
(the real-number function of the weights) must miss the float32 value somewhere, so each widening
is needed where it is: a step whose float part were dropped fails here. Terms far above what
torch's kernels round (the worst cases of γ_n, the softmax kernel's allowances) are pinned by
hand in tests/test_trained_float_kernels.py.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lengthgen.proof import affine as A
from lengthgen.proof import interval as I
from lengthgen.proof.interval import Iv
from lengthgen.proof.trained import Layout, PositionCertifier
from lengthgen.proof.trained_affine import attention_form, differences, tail_forms
from lengthgen.proof.trained_float import FloatFormat
from lengthgen.proof.trained_tables import LN_EPS, OneLayer, Tables
from lengthgen.runs import load_checkpoint
from lengthgen.tasks import ADDITION

N, START = 3, 2
PAIRS = [(123, 989), (999, 101), (500, 500), (371, 628), (100, 100), (987, 654)]  # leading digits 1-9
HOOKS = ("blocks.0.hook_resid_pre", "blocks.0.attn.hook_q", "blocks.0.attn.hook_k", "blocks.0.attn.hook_v",
         "blocks.0.attn.hook_attn_scores", "blocks.0.hook_resid_mid", "blocks.0.mlp.hook_pre",
         "blocks.0.mlp.hook_post", "blocks.0.hook_resid_post")
LAY = Layout(N, START, ADDITION.EOS, ADDITION.PLUS, ADDITION.EQUALS)
FIRST = ADDITION.instance("0" * N, "0" * N, start=START).prompt_len - 1  # the query of answer position 0


@pytest.fixture(scope="module")
@torch.no_grad()
def run():
    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", N)
    insts = [ADDITION.instance(str(a), str(b), start=START) for a, b in PAIRS]
    tokens = torch.as_tensor(np.stack([x.tokens for x in insts]))[:, :-1]
    pos = torch.as_tensor(np.stack([x.pos_ids for x in insts]))[:, :-1]
    logits, cache = model.run_with_cache(tokens, pos, names_filter=lambda name: name in HOOKS,
                                         return_cache_object=False)
    act = {k.split(".")[-1]: v for k, v in cache.items()}
    blk = model.blocks[0]
    # LayerNorm outputs are not hooked (a hook takes another path): the model's kernel on its inputs
    act["ln1"] = F.layer_norm(act["hook_resid_pre"], (model.cfg.d_model,), blk.ln1.w, blk.ln1.b, eps=LN_EPS)
    act["ln2"] = F.layer_norm(act["hook_resid_mid"], (model.cfg.d_model,), blk.ln2.w, blk.ln2.b, eps=LN_EPS)
    act["ln_final"] = F.layer_norm(act["hook_resid_post"], (model.cfg.d_model,), model.ln_final.w, model.ln_final.b,
                                   eps=LN_EPS)
    act = {k: v.double().numpy() for k, v in act.items()}
    n_keys = insts[0].tokens.shape[0]
    ws = {"float32": OneLayer.from_model(model, FloatFormat("float32")), "real": OneLayer.from_model(model)}
    return model, tokens.numpy(), pos.numpy(), logits.double().numpy(), act, ws, n_keys


def holds(x: Iv, value: np.ndarray) -> np.ndarray:
    return (x.lo <= value) & (value <= x.hi)


def check(enclose, measured: np.ndarray) -> None:
    """``enclose(label)`` is the step's enclosure with ("float32") and without ("real") the float
    format: the first holds ``measured`` everywhere, the second misses it somewhere."""
    assert np.all(holds(enclose("float32"), measured)), "the float32 step does not hold torch's float32 value"
    assert not np.all(holds(enclose("real"), measured)), "the real step holds the float32 value: a vacuous check"


def point(x: np.ndarray) -> Iv:
    return Iv.exact(x.reshape(-1, x.shape[-1]))


def rows(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1, x.shape[-1])


def test_the_tables_steps(run):
    """The embedding sum (in the built tables), LN1 and the three projections, each from points."""
    _, tokens, pos, _, act, ws, n_keys = run
    check(lambda k: Tables.build(ws[k], n_keys).resid[tokens, pos], act["hook_resid_pre"])
    check(lambda k: ws[k].norm("ln1", point(act["hook_resid_pre"])), rows(act["ln1"]))
    for name, W, b in (("hook_q", "W_Q", "b_Q"), ("hook_k", "W_K", "b_K"), ("hook_v", "W_V", "b_V")):
        for h in range(act[name].shape[2]):
            check(lambda k: ws[k].linear(point(act["ln1"]), getattr(ws[k], W)[h], getattr(ws[k], b)[h], I.affine),
                  rows(act[name][:, :, h]))


def point_tables(w: OneLayer, act: dict, tokens: np.ndarray, pos: np.ndarray, row: int, n_keys: int) -> Tables:
    """Tables whose entries at the (token, ID) pairs of input ``row`` hold that input's float32
    residual, queries (times the score scale, as the tables do), keys and values (0 elsewhere)."""
    V, P, d = w.W_E.shape[0], w.W_pos.shape[0], w.d_model
    t, p = tokens[row], pos[row]

    def table(values: np.ndarray, width: int) -> np.ndarray:
        out = np.zeros((V, P, width))
        out[t, p] = values
        return out
    resid = Iv.exact(table(act["hook_resid_pre"][row], d))
    q = [Iv.exact(table(act["hook_q"][row, :, h], w.W_Q.shape[2])) * w.scale for h in range(w.n_heads)]
    k = [Iv.exact(table(act["hook_k"][row, :, h], w.W_K.shape[2])) for h in range(w.n_heads)]
    v = [Iv.exact(table(act["hook_v"][row, :, h], w.W_V.shape[2])) for h in range(w.n_heads)]
    out = [I.matmul(Iv(x.lo.reshape(V * P, -1), x.hi.reshape(V * P, -1)), w.W_O[h]) for h, x in enumerate(v)]
    out = [Iv(o.lo.reshape(V, P, d), o.hi.reshape(V, P, d)) for o in out]
    tables = Tables(resid, q, k, v, out, w.fmt, n_keys)
    if w.fmt is not None:
        tables.attn_error = tables.attention_error(w)
    return tables


def test_scores(run):
    _, tokens, pos, _, act, ws, n_keys = run
    scores = act["hook_attn_scores"]  # [B, H, P, P], -inf above the diagonal
    i, j = np.tril_indices(tokens.shape[1])
    for b in range(len(tokens)):
        for h in range(scores.shape[1]):
            def enclose(k: str) -> Iv:
                t = point_tables(ws[k], act, tokens, pos, b, n_keys)
                s = [t.scores(h, int(pos[b, q])) for q in i]
                pick = lambda end: np.array([getattr(x, end)[tokens[b, q], tokens[b, kk], pos[b, kk]]  # noqa: E731
                                             for x, q, kk in zip(s, i, j)])
                return Iv(pick("lo"), pick("hi"))
            check(enclose, scores[b, h, i, j])


def config_row(p, a: int, b: int) -> int:
    da, db = ([(x // 10**j) % 10 for j in range(N)] for x in (a, b))
    key = (tuple(min(z) for z in zip(da, db)), tuple(max(z) for z in zip(da, db)))
    return next(i for i in range(len(p.a)) if (tuple(p.a[i]), tuple(p.b[i])) == key)


def test_residual_after_attention(run):
    """At the queries of answer positions 0, 1 and 2: the configuration's enclosure after attention
    (a window of all three significances, every key fixed) from tables holding the model's own
    float32 queries, keys and values, against the model's float32 residual after attention."""
    _, tokens, pos, _, act, ws, n_keys = run
    for r in (0, 1, 2):
        for row, (a, b) in enumerate(PAIRS):
            def enclose(k: str) -> Iv:
                cert = PositionCertifier(ws[k], point_tables(ws[k], act, tokens, pos, row, n_keys), LAY, max_width=N)
                p = cert.inputs(r)
                i = np.array([config_row(p, a, b)])
                return cert.after_attention(p.heads, [(tok[i], pid) for tok, pid in p.slots], p.query_tok[i], p.qid)[0]
            check(enclose, act["hook_resid_mid"][row, FIRST + r][None])


def test_the_attention_form_holds_the_float32_residual_without_the_plain_box(run):
    """The affine tail's residual after attention (the fixed keys' mean as one generator per key,
    trained_affine.fixed_form), from the same tables, holds the model's float32 residual by its
    own generators and box: the plain pass's box, which the form keeps as a second bound, is
    dropped here. torch's float32 values lie far inside (its kernels round well below the worst
    cases), so this checks the form against measurement only; the generators' lengths and the box
    are pinned in rationals by tests/test_trained_fixed_form.py."""
    _, tokens, pos, _, act, ws, n_keys = run
    for r in (0, 2):
        for row, (a, b) in enumerate(PAIRS):
            def enclose(k: str) -> Iv:
                cert = PositionCertifier(ws[k], point_tables(ws[k], act, tokens, pos, row, n_keys), LAY, max_width=N)
                p = cert.inputs(r)
                i = np.array([config_row(p, a, b)])
                x = attention_form(cert, p.heads, [(tok[i], pid) for tok, pid in p.slots], p.query_tok[i],
                                   cert.t.resid[:, p.qid][p.query_tok[i]])
                return replace(x, hull=None).box()
            check(enclose, act["hook_resid_mid"][row, FIRST + r][None])


def test_the_plain_tail_steps(run):
    _, _, _, _, act, ws, _ = run
    check(lambda k: ws[k].norm("ln2", point(act["hook_resid_mid"])), rows(act["ln2"]))
    check(lambda k: ws[k].linear(point(act["ln2"]), ws[k].W_in, ws[k].b_in), rows(act["hook_pre"]))
    check(lambda k: ws[k].activation(point(act["hook_pre"])), rows(act["hook_post"]))
    # the MLP's output is not hooked apart from the sum: checked through the residual sum
    check(lambda k: ws[k].summed(ws[k].mlp(point(act["ln2"])) + point(act["hook_resid_mid"])),
          rows(act["hook_resid_post"]))
    check(lambda k: ws[k].norm("ln_final", point(act["hook_resid_post"])), rows(act["ln_final"]))
    assert np.all(holds(ws["float32"].tail(point(act["hook_resid_mid"])), rows(act["ln_final"])))


def _targets_and_measured(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    flat = rows(logits)
    target = np.resize(np.arange(10), len(flat))  # any tokens: the differences to every other logit
    return target, flat[np.arange(len(flat)), target][:, None] - flat


def test_logit_differences(run):
    _, _, _, logits, act, ws, n_keys = run
    target, measured = _targets_and_measured(logits)
    check(lambda k: PositionCertifier(ws[k], Tables.build(ws[k], n_keys), LAY)._differences(point(act["ln_final"]),
                                                                                             target), measured)


def test_the_affine_tail_steps_from_a_point(run):
    """The affine tail from a form with no generators at the model's float32 residual after
    attention: its LN2, hidden units and MLP-plus-residual forms hold the float32 values, and so
    do its logit differences (the final LN and the unembedding)."""
    _, _, _, logits, act, ws, _ = run
    target, measured = _targets_and_measured(logits)

    def forms(k: str) -> dict:
        x = A.from_iv(point(act["hook_resid_mid"]), np.zeros((len(target), 0, ws[k].d_model)),
                      np.zeros((len(target), ws[k].d_model)))
        return dict(tail_forms(ws[k], x))
    for name, key in (("ln2", "ln2"), ("hidden", "hook_post"), ("mlp", "hook_resid_post")):
        check(lambda k: forms(k)[name].box(), rows(act[key]))
    check(lambda k: differences(ws[k], forms(k)["mlp"], target), measured)
