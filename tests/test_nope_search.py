"""Proposition 5.2 counterexample search (constructions.nope; docs/proposition-5-2.md).

Every certificate is re-checked here independently of the code under test: the permutation and
last-token conditions on the prompt *texts*, the correct answers from Python integer arithmetic and
string slicing, and the model's logits from a direct call."""
from __future__ import annotations

import copy
import dataclasses
import re
from collections import Counter

import numpy as np
import pytest
import torch

from constructions.addition import build_model
from constructions.nope import (
    BadInput, Certificate, Distinguished, ModelMismatchError, Prompt, coupled_pos_ids, find_counterexample, search,
)
from lengthgen.init import init_random_, random_transformer
from lengthgen.model import Transformer, TransformerConfig
from lengthgen.positions import coupled_addition_ids
from lengthgen.tasks import get_task

TASK_NAMES = ["addition", "multiplication_nx1", "multiplication_nx2", "copy", "reverse"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: threads only add contention on the shared 2-core CPU
    yield
    torch.set_num_threads(before)


def correct_next(task_name: str, prompt: str) -> str:
    """Independent oracle for the first answer token of a query prompt."""
    if task_name == "addition":
        a, b = re.fullmatch(r"\$(\d+)\+(\d+)=", prompt).groups()
        assert len(a) == len(b)
        return str(int(a) + int(b)).zfill(len(a) + 1)[::-1][0]
    if task_name.startswith("multiplication"):
        a, b = re.fullmatch(r"\$(\d+)\*(\d+)=", prompt).groups()
        assert len(b) == int(task_name[-1])
        return str(int(a) * int(b)).zfill(len(a) + len(b))[::-1][0]
    x = re.fullmatch(r"\$(\d+)=", prompt).group(1)
    return x[-1] if task_name == "reverse" else x[0]


def check_independently(cert: Certificate, model, task_name: str, pos_ids_fn=None) -> None:
    vocab = list(get_task(task_name).vocab)
    a, b = cert.prompt_a, cert.prompt_b
    assert cert.task == task_name
    assert [vocab[i] for i in a.ids] == list(a.text) and [vocab[i] for i in b.ids] == list(b.text)
    assert a.text != b.text and Counter(a.text) == Counter(b.text), "not a permutation"
    assert a.text[-1] == b.text[-1], "different last tokens"
    ca, cb = correct_next(task_name, a.text), correct_next(task_name, b.text)
    assert ca != cb, "same correct answer"
    assert (vocab[cert.correct_a], vocab[cert.correct_b]) == (ca, cb)
    tokens = torch.tensor([a.ids, b.ids])
    with torch.no_grad():
        out = model(tokens) if pos_ids_fn is None else model(tokens, pos_ids_fn(tokens))
    la, lb = out[:, -1].double()
    scale = float(max(la.abs().max(), lb.abs().max()))
    assert float((la - lb).abs().max()) <= 1e-5 * scale, "logits differ beyond float32 rounding"
    pa, pb = vocab[int(la.argmax())], vocab[int(lb.argmax())]
    assert pa != ca or pb != cb, "the model is right on both"
    assert set(cert.wrong_on) == {n for n, p, c in (("a", pa, ca), ("b", pb, cb)) if p != c}
    assert cert.max_logit_diff <= cert.tolerance == pytest.approx(cert.rtol * scale, rel=1e-6)
    if isinstance(model, torch.nn.Module):  # and really identical: a float64 copy agrees to ~1e-16
        with torch.no_grad():
            l64 = copy.deepcopy(model).double()(tokens)[:, -1]
        assert float((l64[0] - l64[1]).abs().max()) <= 1e-12 * float(l64.abs().max())
        assert cert.float64_diff is not None and cert.float64_diff <= 1e-12
    assert cert.verify(model, pos_ids_fn)


# (seed, d_model, n_heads, d_mlp, normalization, act_fn, n_digits)
CONFIGS = [
    (0, 16, 1, 32, None, "relu", 2),
    (1, 32, 2, 64, "LN", "gelu", 3),
    (2, 24, 3, 0, "LN", "relu", 2),
    (3, 48, 4, 96, None, "gelu", 4),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"seed{c[0]}-d{c[1]}-h{c[2]}-{c[4] or 'noLN'}-{c[5]}-n{c[6]}")
@pytest.mark.parametrize("task_name", TASK_NAMES)
def test_random_one_layer_nope_models_get_a_verified_certificate(task_name, config):
    seed, d_model, heads, d_mlp, norm, act, n = config
    model = random_transformer(len(get_task(task_name).vocab), d_model=d_model, n_heads=heads, d_mlp=d_mlp,
                               normalization=norm, act_fn=act, seed=seed)
    report = search(model, task_name, n, budget=2000, seed=seed)
    assert report.status == "counterexample" and report.proposition_applies is True
    check_independently(report.certificate, model, task_name)
    assert "Proposition 5.2 applies" in report.certificate.invariance


def test_longer_prompts_use_guided_random_search():
    model = random_transformer(13, seed=5, normalization="LN", act_fn="gelu")
    cert = find_counterexample(model, "addition", 40, budget=500, seed=1)
    assert len(cert.prompt_a.text) == 2 * 40 + 3
    check_independently(cert, model, "addition")
    report = search(model, "addition", 2, budget=20000)
    assert report.mode == "exhaustive"
    assert search(model, "addition", 3, budget=20000).mode == "random"  # 10^6 fillings > budget


@pytest.mark.parametrize("task_name,n", [(t, 3) for t in TASK_NAMES])
def test_two_layer_nope_is_reported_distinguished(task_name, n):
    model = random_transformer(len(get_task(task_name).vocab), n_layers=2, seed=11)
    with pytest.raises(Distinguished) as info:
        find_counterexample(model, task_name, n, budget=1500, seed=2)
    report = info.value.report
    assert report.certificate is None and report.status == "distinguished"
    assert report.proposition_applies is False and "does not apply" in report.model_note
    closest = report.closest
    assert Counter(closest.prompt_a.text) == Counter(closest.prompt_b.text)
    assert closest.max_logit_diff > 10 * closest.tolerance  # far from float rounding
    assert report.prompts_evaluated <= 1500 + 2


def test_exhaustive_mode_compares_every_pair():
    # copy, n = 2: the pairs are {xy, yx} with x != y: 45 of them, each with different answers
    model = random_transformer(len(get_task("copy").vocab), n_layers=2, seed=4)
    report = search(model, "copy", 2, budget=100)
    assert report.mode == "exhaustive" and report.status == "distinguished"
    assert report.pairs_compared == 45 and report.prompts_evaluated == 90
    assert "every pair of prompts $__=" in report.summary()


def test_theorem_5_1_construction_with_coupled_positions_is_distinguished():
    model, _ = build_model(n_digits=2)
    fn = coupled_pos_ids("addition")
    report = search(model, "addition", 2, budget=20000, pos_ids_fn=fn)
    assert report.mode == "exhaustive" and report.certificate is None
    # it adds correctly, so the closest pair differs by the one-hot readout: a logit gap of about 1
    c = report.closest
    assert c.max_logit_diff > 0.5 and not c.wrong_on
    assert (c.token(c.correct_a), c.token(c.correct_b)) == (correct_next("addition", c.prompt_a.text),
                                                            correct_next("addition", c.prompt_b.text))
    model3, _ = build_model(n_digits=3)
    with pytest.raises(Distinguished):
        find_counterexample(model3, "addition", 3, budget=600, pos_ids_fn=fn)


def test_coupled_pos_ids_match_the_tasks_rules():
    fn = coupled_pos_ids("addition")
    add = get_task("addition")
    tokens = torch.as_tensor(np.stack([add.encode("$653+049="), add.encode("$100+002=")]))
    assert fn(tokens).tolist() == [coupled_addition_ids(3, 2)[:9].tolist()] * 2 == [[0, 2, 3, 4, 5, 2, 3, 4, 5]] * 2
    task = get_task("reverse")
    assert coupled_pos_ids(task, start=5)(torch.as_tensor(task.encode("$4546=")[None])).tolist() == [[0, 5, 6, 7, 8, 9]]


def test_degenerate_models_outside_the_proposition_are_certified_only_when_truly_invariant():
    # a 2-layer NoPE model whose second block writes nothing is a 1-layer model in disguise
    model = random_transformer(13, n_layers=2, seed=6)
    with torch.no_grad():
        for p in model.blocks[1].parameters():
            p.zero_()
    cert = find_counterexample(model, "addition", 3, budget=500)
    check_independently(cert, model, "addition")
    assert "does not apply" in cert.invariance
    # learned positions that are all zero carry no information; random ones do
    learned = random_transformer(13, positional="learned", seed=7, n_ctx=32)
    with pytest.raises(Distinguished):
        find_counterexample(learned, "addition", 3, budget=500)
    with torch.no_grad():
        learned.pos_embed.W_pos.zero_()
    check_independently(find_counterexample(learned, "addition", 3, budget=500), learned, "addition")


def test_order_dependence_ten_times_the_tolerance_is_not_claimed():
    base = random_transformer(12, seed=8)

    def nudged(tokens):  # 1-layer NoPE plus 1e-4 × scale on the logit of the *first* digit: order-aware
        out = base(tokens).clone()
        scale = out[:, -1].abs().amax(dim=1)
        out[torch.arange(len(tokens)), -1, tokens[:, 1]] += 1e-4 * scale
        return out

    # in copy, every pair with different answers has different first digits, so every pair differs by
    # about 1e-4 × scale: ten times the float32 tolerance, never to be mistaken for rounding
    with pytest.raises(Distinguished) as info:
        find_counterexample(nudged, "copy", 3, budget=2000)
    report = info.value.report
    assert report.mode == "exhaustive" and report.proposition_applies is None  # a plain callable
    assert 5 < report.closest.max_logit_diff / report.closest.tolerance < 20
    check_independently(find_counterexample(base, "copy", 3, budget=2000), base, "copy")


def test_any_callable_bag_of_tokens_model_is_caught():
    gen = torch.Generator().manual_seed(0)
    table, last = torch.randn(13, 13, generator=gen), torch.randn(13, 13, generator=gen)

    def bag(tokens):  # logits from token counts and the last token only: order-blind by design
        counts = torch.nn.functional.one_hot(tokens, 13).double().cumsum(1)
        return counts @ table.double() + last.double()[tokens]

    cert = find_counterexample(bag, "multiplication_nx2", 2, budget=500)
    check_independently(cert, bag, "multiplication_nx2")


@pytest.fixture(scope="module")
def cert_and_model():
    model = random_transformer(13, seed=9, normalization="LN")
    return find_counterexample(model, "addition", 3, budget=500), model


def test_certificate_round_trips_through_json(cert_and_model):
    import json

    cert, model = cert_and_model
    again = Certificate.from_dict(json.loads(json.dumps(cert.to_dict())))
    assert again == cert and again.verify(model)


@pytest.mark.parametrize("tamper,problem", [
    (lambda c, t: {"prompt_b": dataclasses.replace(c.prompt_b, text=c.prompt_a.text[:-2] + "9=",
                                                   ids=tuple(t.encode(c.prompt_a.text[:-2] + "9=")))},
     "not permutations"),
    (lambda c, t: {"correct_b": (c.correct_b + 1) % 10}, "oracle's next token"),
    (lambda c, t: {"prompt_b": c.prompt_a, "correct_b": c.correct_a}, "identical"),
    (lambda c, t: {"prompt_a": dataclasses.replace(c.prompt_a, ids=c.prompt_b.ids)}, "does not encode"),
    (lambda c, t: {"logits_a": tuple(x + 1 for x in c.logits_a)}, "stored logits"),
])
def test_verify_rejects_tampered_certificates(cert_and_model, tamper, problem):
    cert, model = cert_and_model
    bad = dataclasses.replace(cert, **tamper(cert, get_task("addition")))
    assert not bad.verify(model)
    assert any(problem in p for p in bad.problems(model)), bad.problems(model)


def test_verify_rejects_other_models(cert_and_model):
    cert, _ = cert_and_model
    other = random_transformer(13, seed=10, normalization="LN")
    assert any("stored logits" in p for p in cert.problems(other))
    deeper = random_transformer(13, n_layers=2, seed=9)
    assert any("distinguishes" in p for p in cert.problems(deeper))


def test_verify_rejects_a_pair_with_different_last_tokens():
    # "$12=12" (next '$') and "$122=1" (next '2') are valid copy prompts and permutations of each
    # other with different answers, but they end in different tokens: Proposition 5.2 says nothing
    task, model = get_task("copy"), random_transformer(12, seed=0)
    a, b = "$12=12", "$122=1"
    assert Counter(a) == Counter(b) and task.next_token(a) != task.next_token(b)
    logits = model(torch.tensor(np.stack([task.encode(a), task.encode(b)])))[:, -1].tolist()
    cert = Certificate(task="copy", n_digits=2, prompt_a=Prompt(a, tuple(task.encode(a))),
                       prompt_b=Prompt(b, tuple(task.encode(b))), correct_a=11, correct_b=2, predicted_a=0,
                       predicted_b=0, logits_a=tuple(logits[0]), logits_b=tuple(logits[1]), max_logit_diff=0.0,
                       tolerance=0.0, rtol=1e-5)
    problems = cert.problems(model)
    assert problems == ["the prompts do not end in the same token"]


def test_bad_input_is_reported_clearly():
    model = random_transformer(13, seed=0)
    with pytest.raises(BadInput, match="unknown task 'division'"):
        search(model, "division", 3)
    with pytest.raises(BadInput, match="no permutation-sensitive pair exists with 1 digit.*a\\+b = b\\+a"):
        search(model, "addition", 1)
    with pytest.raises(BadInput, match="n_digits must be a positive integer"):
        search(model, "addition", 0)
    with pytest.raises(ModelMismatchError, match="vocabulary of 13 in / 13 out tokens, but copy has 12"):
        search(model, "copy", 3)
    with pytest.raises(ModelMismatchError, match=r"shape \(2, 9, 13\)|shape \(1, 9\)"):
        search(lambda t: model(t)[:, :, 0], "addition", 3)
    small = random_transformer(10, seed=0)
    with pytest.raises(ModelMismatchError, match="vocabulary of 10 in / 10 out tokens, but addition has 13"):
        search(small, "addition", 3)
    with pytest.raises(ModelMismatchError, match="the model failed .*token id out of range"):
        search(lambda t: small(t), "addition", 3)  # ids 10..12 are outside its table
    big = Transformer(TransformerConfig(d_vocab=13, d_model=8, d_head=4, d_mlp=8, positional="none", d_vocab_out=14))
    with pytest.raises(ModelMismatchError, match="13 in / 14 out"):
        search(big, "addition", 3)


def test_init_random_is_deterministic_and_fills_every_parameter():
    cfg = TransformerConfig(d_vocab=13, d_model=64, n_layers=2, n_heads=4, d_head=16, d_mlp=256,
                            positional="learned", normalization="LN")
    a, b, c = (init_random_(Transformer(cfg), s) for s in (3, 3, 4))
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb) and not torch.equal(pa, pc), name
        assert pa.abs().sum() > 0, name
    w_in = a.blocks[0].mlp.W_in  # fan-in 64: std 1/8
    assert 0.1 < float(w_in.detach().std()) < 0.15
    w_o = a.blocks[0].attn.W_O  # fan-in 4 heads × 16: std 1/8
    assert 0.1 < float(w_o.detach().std()) < 0.15


def test_a_float64_copy_exposes_order_effects_hidden_by_the_tolerance():
    """With a tolerance loose enough to swallow a 2-layer model's order effect (emulating rounding at
    long lengths), the module is still reported distinguished: its float64 copy tells the pair apart.
    A plain callable has no float64 copy, so there the claim rests on the tolerance alone."""
    model = random_transformer(13, n_layers=2, seed=0)
    report = search(model, "addition", 3, budget=600, rtol=1e-2)
    assert report.status == "distinguished"
    assert report.closest.identical and report.closest.float64_diff > 1e-4
    cert = find_counterexample(lambda t: model(t), "addition", 3, budget=600, rtol=1e-2)
    assert cert.float64_diff is None and cert.verify(lambda t: model(t), rtol=1e-2)
    problems = cert.problems(model, rtol=1e-2)
    assert any("float64 copy of the model distinguishes" in p for p in problems), problems


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_other_precisions(dtype):
    one = random_transformer(13, seed=1, dtype=dtype, normalization="LN")
    cert = find_counterexample(one, "addition", 3, budget=600)
    assert cert.rtol == {"float16": 0.0, "bfloat16": 0.0, "float64": 1e-12}[dtype]
    assert cert.max_logit_diff <= cert.tolerance and cert.verify(one)
    assert (cert.float64_diff is None) == (dtype == "float64")
    assert cert.float64_diff is None or cert.float64_diff < 1e-14
    with pytest.raises(Distinguished):
        find_counterexample(random_transformer(13, n_layers=2, seed=1, dtype=dtype), "addition", 3, budget=600)


def test_hard_alibi_windows_are_reported_as_outside_the_proposition():
    """A one-layer model without position embeddings but with a Hard-ALiBi window sees order (a key
    outside the window is hidden), so the proposition does not apply. (It may still be blind to
    particular pairs: then the certificate rests on its measured logits, as for any model.)"""
    cfg = TransformerConfig(d_vocab=13, d_model=32, n_layers=1, n_heads=2, d_head=16, d_mlp=64, positional="none",
                            attn_windows=[2, None])
    report = search(init_random_(Transformer(cfg), 0), "addition", 2)
    assert report.proposition_applies is False and "Hard-ALiBi attention windows" in report.model_note
    plain = search(init_random_(Transformer(dataclasses.replace(cfg, attn_windows=None)), 0), "addition", 2)
    assert plain.proposition_applies is True
