"""Copy and reverse with coupled positions are exactly right (oracle: string slicing), on 10^5
digits with long runs of repeated digits; Proposition 5.2's search cannot fool them, but fools
the same weights without positions (docs/copying.md)."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from constructions.copying import CapacityError, build_model, max_digits_for, nope_twin, residual_basis, transform
from constructions.nope.search import Distinguished, coupled_pos_ids, find_counterexample, search
from lengthgen.decode import decided_argmax
from lengthgen.tasks import COPY, REVERSE

TASKS = {"copy": COPY, "reverse": REVERSE}


@functools.lru_cache(maxsize=None)
def model_for(task: str, n_digits: int):
    return build_model(task, n_digits=n_digits)


def teacher_exact(model, task, x: np.ndarray) -> bool:
    """One teacher-forced pass; every answer position must be decided and right."""
    inst = task.instance(x, start=1)
    with torch.inference_mode():
        logits = model(torch.tensor(inst.tokens[None, :-1]), torch.tensor(inst.pos_ids[None, :-1]),
                       logits_from=inst.prompt_len - 1)
    pred = decided_argmax(logits[0]).numpy()
    expected = np.concatenate([x[::-1] if task.reverse else x, [task.EOS]])  # string slicing, not the task's layout
    return bool(np.array_equal(pred, expected))


def test_layout_and_bound() -> None:
    labels = residual_basis(33).labels
    assert len(labels) == 33 and labels[:10] == [f"DIGIT[{k}]" for k in range(10)] and labels[-10:-5] == [f"POS[{i}]" for i in range(5)]
    assert max_digits_for(33) == 30 and max_digits_for(55) == 2**16 - 2
    model, meta = build_model("copy", d_model=27)
    assert meta["bound_digits"] == 2 and model.cfg.n_layers == 1 and model.cfg.n_heads == 1 and model.cfg.d_mlp == 0
    with pytest.raises(CapacityError, match="bound 2\\^2 - 2 = 2"):
        build_model("reverse", n_digits=3, d_model=27)


@pytest.mark.parametrize("name", ["copy", "reverse"])
def test_exhaustive_up_to_four_digits_at_the_bound(name: str) -> None:
    """Every digit string of length 1-4 (one batched pass per length) on a model whose bound
    (P = 3: 2^3 − 2 = 6) is close, and three strings at the bound."""
    model, _ = build_model(name, d_model=29)
    task = TASKS[name]
    for n in range(1, 5):
        xs = np.array([[int(c) for c in str(v).zfill(n)] for v in range(10**n)], dtype=np.uint8)
        insts = [task.instance(x, start=1) for x in xs]
        with torch.inference_mode():
            logits = model(torch.tensor(np.stack([i.tokens[:-1] for i in insts])),
                           torch.tensor(np.stack([i.pos_ids[:-1] for i in insts])), logits_from=n + 1)
        expected = np.concatenate([xs[:, ::-1] if task.reverse else xs, np.full((len(xs), 1), task.EOS)], axis=1)
        assert np.array_equal(decided_argmax(logits).numpy(), expected), (name, n)
    for x in ("314159", "000000", "999999"):  # n = 6 = the bound
        assert teacher_exact(model, TASKS[name], np.array([int(c) for c in x], dtype=np.uint8))


@pytest.mark.parametrize("name", ["copy", "reverse"])
@settings(max_examples=10)
@given(runs=st.lists(st.tuples(st.integers(0, 9), st.integers(1, 80)), min_size=1, max_size=8))
def test_greedy_runs_of_repeated_digits(name: str, runs: list[tuple[int, int]]) -> None:
    x = "".join(str(d) * k for d, k in runs)[:300]
    model, _ = model_for(name, 300)
    assert transform(model, name, x) == (x[::-1] if name == "reverse" else x)
    with pytest.raises(ValueError, match=f"this model was built for '{name}'"):
        transform(model, "copy" if name == "reverse" else "reverse", x)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["copy", "reverse"])
def test_exact_on_10_to_the_5_tokens(name: str) -> None:
    """50 000 digits (10^5 + 3 tokens): a run of 20 000 sevens, alternating runs, random digits."""
    n = 50_000
    rng = np.random.default_rng(0)
    x = np.concatenate([np.full(20_000, 7), np.repeat(rng.integers(0, 10, 100), 100), rng.integers(0, 10, n - 30_000)])
    model, meta = build_model(name, n_digits=n)
    assert meta["leak_bound"] <= 1e-3 and len(TASKS[name].instance(x.astype(np.uint8)).tokens) == 2 * n + 3
    assert teacher_exact(model, TASKS[name], x.astype(np.uint8))


@pytest.mark.parametrize("name", ["copy", "reverse"])
def test_proposition_5_2_search_distinguishes_the_coupled_model_and_fools_its_nope_twin(name: str) -> None:
    model, _ = model_for(name, 3)
    report = search(model, name, 3, pos_ids_fn=coupled_pos_ids(name, start=1))
    assert report.mode == "exhaustive" and report.certificate is None and report.pairs_compared > 0
    with pytest.raises(Distinguished):
        find_counterexample(model, name, 3, pos_ids_fn=coupled_pos_ids(name, start=1))
    twin = nope_twin(model)
    assert twin.cfg.n_layers == 1 and twin.cfg.n_heads == 1 and twin.cfg.d_model == model.cfg.d_model
    cert = find_counterexample(twin, name, 3)
    a, b = cert.prompt_a, cert.prompt_b
    assert a.text != b.text and sorted(a.text) == sorted(b.text) and a.text.endswith("=")
    assert cert.verify(twin) and TASKS[name].next_token(a.text) != TASKS[name].next_token(b.text)


def test_leak_bound_from_the_score_gap() -> None:
    """Every non-maximal key scores at least 2M below the maximal ones (hypercube codes differ in a
    bit), so the leaked mass is ≤ N·e^{−2M}; measured on a sequence with repeated digits."""
    for name in ("copy", "reverse"):
        model, meta = model_for(name, 300)
        inst = TASKS[name].instance("1" * 150 + "2" * 150, start=1)
        _, acts = model(torch.tensor(inst.tokens[None, :-1]), torch.tensor(inst.pos_ids[None, :-1]), return_cache=True)
        scores = acts["blocks.0.attn.hook_attn_scores"][0, 0].double()
        pattern = acts["blocks.0.attn.hook_pattern"][0, 0].double()
        M, P = meta["M"], meta["P"]
        for q in range(inst.prompt_len - 1, len(inst.tokens) - 1):
            row = scores[q, : q + 1]
            top = row >= M * P - 1e-3
            assert float(row.max()) == pytest.approx(M * P, abs=1e-3)
            assert float(row[~top].max()) <= M * P - 2 * M + 1e-3
            assert float(pattern[q, : q + 1][~top].sum()) <= len(inst.tokens) * math.exp(-2 * M) <= meta["leak_bound"]
