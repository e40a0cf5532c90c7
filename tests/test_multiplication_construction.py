"""The N×2 multiplication construction is exactly right (oracle: Python integers).

Mechanism checks follow docs/multiplication.md: the coupled IDs on a worked example, the layer-1
segment flags, each layer-2 head's attention set, both MLPs on their whole finite domains, then
end to end (exhaustive for small a, property-based long carry chains, the capacity bound)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings, strategies as st
from multiplication_checks import all_pairs, expected_sets, model_for, wrong_pairs

from constructions.multiplication import (
    CapacityError, build_model, check_operands, d_model_for, instance, max_digits_for, multiply, multiply_many,
)
from constructions.multiplication.heads import MUL_SCALE
from constructions.multiplication import UndecidedPrediction
from constructions.multiplication.layout import position_dims, residual_basis


# ----------------------------------------------------------------- format and layout
def test_coupled_ids_on_a_worked_example() -> None:
    """$653*49= 31997 -> answer reversed and padded to N + 2 = 5 digits: 7 9 9 1 3 $. With s = 2,
    e = s + N + 2 = 7: a -> 4 5 6, '*' -> 7, b -> 5 6, '=' -> 7, answer 6 5 4 3 2, '$' -> 0."""
    inst = instance(653, 49)
    assert "".join("0123456789*=$"[t] for t in inst.tokens) == "$653*49=79913$"
    assert inst.pos_ids.tolist() == [0, 4, 5, 6, 7, 5, 6, 7, 6, 5, 4, 3, 2, 0]
    assert inst.prompt_len == 8


def test_layout_is_25_plus_4P_and_the_bound() -> None:
    for d in (33, 36, 41, 93, 512):
        P = (d - 25) // 4
        labels = residual_basis(d).labels
        assert len(labels) == d and labels[:5] == ["NUM", "IS_BOS", "ONE", "IS_STAR", "IS_EQ"]
        assert labels[14:25] == [f"DIGIT[{k}]" for k in range(10)] + ["IS_EOS"]
        assert labels[25 : 25 + P] == [f"POS[{i}]" for i in range(P)]
        assert labels[25 + 3 * P : 25 + 4 * P] == [f"POS_PLUS2[{i}]" for i in range(P)]
    assert max_digits_for(41) == 10 and max_digits_for(93) == 2**17 - 6
    assert d_model_for(10) == 41 and d_model_for(11) == 45 and d_model_for(100_000) == 93


def test_position_dims_are_floor_of_d_minus_25_over_4() -> None:
    """P = ⌊(d−25)/4⌋, counted independently: the residual labels minus the 25 named token
    dimensions leave four position blocks of P labels each and fewer than 4 unused ones. At
    d ≡ 1 (mod 4) the formula ⌊(d−26)/4⌋ would be one too small."""
    token_names = ["NUM", "IS_BOS", "ONE", "IS_STAR", "IS_EQ", "SEEN_STAR", "SEEN_EQ", "NEXT_SEP",
                   "B0", "B1", "A0", "A1", "EOS_PRE", "PROD"] + [f"DIGIT[{k}]" for k in range(10)] + ["IS_EOS"]
    assert len(token_names) == 25
    for d in (33, 34, 36, 37, 41, 45, 46, 93, 94, 512):
        labels = residual_basis(d).labels
        assert labels[:25] == token_names
        blocks = {name: sum(1 for x in labels if x.startswith(name + "[")) for name in
                  ("POS", "POS_MINUS1", "POS_PLUS1", "POS_PLUS2", "UNUSED")}
        P = blocks["POS"]
        assert blocks["POS_MINUS1"] == blocks["POS_PLUS1"] == blocks["POS_PLUS2"] == P
        assert 25 + 4 * P + blocks["UNUSED"] == d and blocks["UNUSED"] < 4
        assert P == (d - 25) // 4 and position_dims(d) == P
        assert max_digits_for(d) == 2**P - 6
    assert position_dims(37) == 3 and (37 - 26) // 4 == 2  # where the two formulas part
    for d in (37, 41):
        assert build_model(d_model=d)[1]["P"] == (d - 25) // 4
    assert "P = ⌊(d−25)/4⌋" in build_model.__doc__


def test_the_docs_bound_table_matches_both_formulas() -> None:
    """docs/multiplication.md's bound table, row by row, against 2^⌊(d−34)/6⌋ − 3 (the paper's
    theorem, d ≥ 46) and 2^⌊(d−25)/4⌋ − 6 (this layout) in Python integers."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "multiplication.md").read_text()
    table = text[text.index("The bound for a few widths"):]
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \| ([^|]+) \|$", table.split("\n\n")[1], re.M)
    assert [int(d) for d, _, _ in rows] == [37, 46, 64, 93, 128, 256, 512]

    def check(cell: str, exponent: int, minus: int) -> None:
        m = re.fullmatch(r"2\^(\d+) − (\d+) (=|≈) ([\d.]+)(?: × 10\^(\d+))?", cell.strip())
        assert m, cell
        assert (int(m[1]), int(m[2])) == (exponent, minus), cell
        value = 2**exponent - minus
        if m[3] == "=":
            assert int(m[4]) == value and m[5] is None, cell
        else:
            assert f"{value:.2e}" == f"{m[4]}e+{int(m[5]):02d}", cell

    for d, paper, ours in rows:
        d = int(d)
        if d < 46:
            assert paper.strip() == "—"
        else:
            check(paper, (d - 34) // 6, 3)
        check(ours, (d - 25) // 4, 6)
        assert max_digits_for(d) == 2 ** ((d - 25) // 4) - 6


def test_an_undecided_step_raises_undecided_prediction() -> None:
    """Greedy decoding stops at a step without a margin; multiply reports it instead of failing
    while turning the answer into digits. Two real cases: a model whose logits all tie (its
    unembedding zeroed), and the bfloat16 model, where 1 × 36 rounds the ones digit to a near-tie."""
    tied, _ = build_model(n_digits=2)
    with torch.no_grad():
        tied.unembed.W_U.zero_()
    with pytest.raises(UndecidedPrediction, match="12 × 34: the model's answer token 0 "):
        multiply(tied, 12, 34)
    with pytest.raises(UndecidedPrediction, match="undecided"):
        multiply_many(tied, [(12, 34)])
    low, _ = build_model(n_digits=1, dtype="bfloat16")
    with pytest.raises(UndecidedPrediction, match="1 × 36: the model's answer token 1 "):
        multiply(low, 1, 36)
    with pytest.raises(UndecidedPrediction, match="1 × 36"):
        multiply_many(low, [(2, 3), (1, 36)])
    assert multiply(build_model(n_digits=1)[0], 1, 36) == 36  # float32 decides it


# ----------------------------------------------------------------- layer 1: segment flags
def test_segment_flags() -> None:
    model, _ = model_for(n_digits=6)
    inst = instance("402917", 38)
    _, acts = model(torch.tensor(inst.tokens[None, :-1]), torch.tensor(inst.pos_ids[None, :-1]), return_cache=True)
    basis = residual_basis(model.cfg.d_model)
    flags = acts["blocks.0.hook_resid_post"][0][:, [basis.index(f) for f in ("SEEN_STAR", "SEEN_EQ", "NEXT_SEP")]]
    n = inst.n
    want = [[0, 0, 0]] * (n + 1) + [[0.5, 0, 0], [0.5, 0, 0], [0.5, 0, 0.5], [1 / 3, 1 / 3, 0], [1 / 3, 1 / 3, 2 / 3]]
    want += [[1 / 3, 1 / 3, 0]] * (n + 1)  # c_1 .. c_{N+1} ($ is dropped: it predicts nothing)
    assert torch.allclose(flags.double(), torch.tensor(want, dtype=torch.float64), atol=1e-6)


# ----------------------------------------------------------------- layer 2: attention sets
@settings(max_examples=8)
@given(a=st.integers(0, 10**12 - 1), b=st.integers(0, 99))
@example(a=10**12 - 1, b=99)
def test_layer2_heads_attend_to_exactly_the_designed_sets(a: int, b: int) -> None:
    model, meta = model_for(n_digits=12)
    inst = instance(str(a).zfill(12), b)
    _, acts = model(torch.tensor(inst.tokens[None, :-1]), torch.tensor(inst.pos_ids[None, :-1]), return_cache=True)
    pattern = acts["blocks.1.attn.hook_pattern"][0].double()
    for q in range(inst.prompt_len - 1, len(inst.tokens) - 1):
        for head, keys in enumerate(expected_sets(inst.n, q)):
            row = pattern[head, q]
            inside = row[sorted(keys)]
            assert float(row.sum() - inside.sum()) <= 1e-5, (head, q)
            assert (inside - 1 / len(keys)).abs().max() <= 1e-5, (head, q)


# ----------------------------------------------------------------- MLPs on their whole domains
def mlp_out(model, layer: int, values: dict[str, torch.Tensor]) -> torch.Tensor:
    basis = residual_basis(model.cfg.d_model)
    rows = len(next(iter(values.values())))
    x = torch.zeros(rows, model.cfg.d_model, dtype=torch.float64)
    x[:, basis.index("ONE")] = 1
    for name, value in values.items():
        x[:, basis.index(name)] = value.double()
    with torch.no_grad():
        return x + model.blocks[layer].mlp(x.to(model.cfg.torch_dtype)).double()


@pytest.mark.parametrize("jitter", [0.0, 1e-4])
def test_product_mlp_is_exact_on_every_digit_and_three_digit_number(jitter: float) -> None:
    model, _ = model_for(n_digits=10, dtype="float64")
    b, A = torch.meshgrid(torch.arange(10.0, dtype=torch.float64), torch.arange(1000.0, dtype=torch.float64), indexing="ij")
    b, A = b.reshape(-1), A.reshape(-1)
    noise = torch.linspace(-jitter, jitter, len(b), dtype=torch.float64)
    out = mlp_out(model, 1, {"B0": b + noise, "A0": A - noise, "B1": b.flip(0), "A1": A})
    want = b * A + b.flip(0) * A
    basis = residual_basis(model.cfg.d_model)
    assert (out[:, basis.index("PROD")] - want).abs().max() <= 1e-9 + jitter * (MUL_SCALE + 20)


@pytest.mark.parametrize("jitter", [0.0, 35.0])
def test_digit_mlp_is_exact_for_every_reachable_T(jitter: float) -> None:
    """Consistent inputs give T = 100K + r with K ≤ 179 and −17 ≤ r ≤ 9 (docs/multiplication.md;
    checked against Python integers in test_the_digit_identity). DIGIT is the exact one-hot of
    K mod 10 for every such T, also when T is off by up to 35 (the margin is 36); IS_EOS is 1
    exactly when EOS_PRE = 1/2."""
    model, _ = model_for(n_digits=10, dtype="float64")
    K, r = torch.meshgrid(torch.arange(180), torch.arange(-17, 10), indexing="ij")
    K, r = K.reshape(-1), r.reshape(-1)
    T = (100 * K + r).double()
    shift = jitter * torch.where(torch.arange(len(T)) % 2 == 0, 1.0, -1.0).double()
    eos = torch.tensor([-0.5, 0.0, 0.5], dtype=torch.float64).repeat(len(T) // 3 + 1)[: len(T)]
    out = mlp_out(model, 2, {"PROD": T + shift, "EOS_PRE": eos + shift / 500})
    basis = residual_basis(model.cfg.d_model)
    digits = out[:, [basis.index(f"DIGIT[{k}]") for k in range(10)]]
    assert (digits - torch.nn.functional.one_hot(K % 10, 10).double()).abs().max() <= 1e-9
    assert torch.equal(out[:, basis.index("IS_EOS")].round(), (eos == 0.5).double())


def test_the_digit_identity() -> None:
    """c_{i+1} = ⌊(T + 54)/100⌋ mod 10 with T − 100·⌊(T + 54)/100⌋ in [−17, 9], for every a < 2000,
    b < 100 and every answer-predicting position (Python integers only, no model)."""
    rs = set()
    for a in range(2000):
        digits = [int(x) for x in str(a)[::-1]]
        for b in range(100):
            c = [int(x) for x in str(a * b).zfill(len(digits) + 2)[::-1]]
            at = lambda seq, j: seq[j] if 0 <= j < len(seq) else 0  # noqa: E731
            for i in range(-1, len(digits) + 1):
                A0 = 100 * at(digits, i + 1) + 10 * at(digits, i) + at(digits, i - 1)
                A1 = 100 * at(digits, i) + 10 * at(digits, i - 1) + at(digits, i - 2)
                T = (b % 10) * A0 + (b // 10) * A1 - 10 * at(c, i)
                K = (T + 54) // 100
                assert K % 10 == c[i + 1], (a, b, i)
                rs.add(T - 100 * K)
    assert min(rs) == -17 and max(rs) == 9


# ----------------------------------------------------------------- end to end
def test_exhaustive_one_and_two_digit_a_every_b() -> None:
    model, _ = model_for(n_digits=3)
    pairs = [(str(a), b) for a in range(10) for b in range(100)] + all_pairs(2)
    assert wrong_pairs(model, pairs) == []


@pytest.mark.slow
def test_exhaustive_three_digit_a_every_b() -> None:
    """All 10^5 pairs a < 1000 (as 3 digits, leading zeros included) × b < 100."""
    model, _ = model_for(n_digits=3)
    assert wrong_pairs(model, all_pairs(3)) == []


def test_greedy_decoding_matches_python_integers() -> None:
    model, _ = model_for(n_digits=12)
    rng = np.random.default_rng(5)
    pairs = [(int(rng.integers(10**11, 10**12)), int(rng.integers(0, 100))) for _ in range(12)] + [(999_999_999_999, 99), (0, 0), (7, 0)]
    assert multiply_many(model, pairs) == [a * b for a, b in pairs]
    assert multiply(model, 123456789012, 97) == 123456789012 * 97


@st.composite
def long_carry_pairs(draw) -> tuple[str, int]:
    """a built from runs of 9s, 0s, 5s and random digits (10^n − 1 among them); b up to 99."""
    runs = draw(st.lists(st.tuples(st.sampled_from("9905r"), st.integers(1, 60)), min_size=1, max_size=6))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a = "".join(("".join(map(str, rng.integers(0, 10, length))) if kind == "r" else kind * length) for kind, length in runs)
    return a[:120], draw(st.sampled_from([99, 98, 91, 89, 11, 9, 1, 0]) | st.integers(0, 99))


@given(pair=long_carry_pairs())
@settings(max_examples=10)
@example(pair=("9" * 120, 99))
@example(pair=("9" * 119 + "1", 99))
def test_long_carry_chains(pair: tuple[str, int]) -> None:
    model, _ = model_for(n_digits=120)
    assert wrong_pairs(model, [pair]) == []


def test_the_bound_is_reached_and_one_digit_more_is_refused() -> None:
    """d = 41 (P = 4) holds N ≤ 2^4 − 6 = 10: exact at N = 10, refused at 11."""
    model, meta = build_model(d_model=41)
    assert meta["bound_digits"] == 10 and meta["max_digits"] == 10
    rng = np.random.default_rng(1)
    pairs = [("9" * 10, 99), ("0" * 10, 99)] + [("".join(map(str, rng.integers(0, 10, 10))), int(rng.integers(0, 100))) for _ in range(300)]
    assert wrong_pairs(model, pairs) == []
    with pytest.raises(CapacityError, match="bound 2\\^4 - 6 = 10"):
        build_model(n_digits=11, d_model=41)
    with pytest.raises(CapacityError, match="table stops"):
        check_operands(model, 11)
    assert build_model(n_digits=11)[1]["d_model"] == 45


def _index(model, label: str) -> int:
    return residual_basis(model.cfg.d_model).index(label)


PERTURBATIONS = {  # (layer-2 head 0 = b_0, head 3 = a_i; head dims: pos[P], sink, type, val_0, val_1)
    "a_i's head loses its segment penalty": lambda m: m.blocks[1].attn.W_K[3, :, -3].zero_(),
    "a product unit's bias moves by 300": lambda m: m.blocks[1].mlp.W_in[_index(m, "ONE"), 5].add_(300.0),
    "a_i's weight in A1 drops by 10%": lambda m: m.blocks[1].attn.W_O[3, -2, _index(m, "A1")].mul_(0.9),
    "the readout of digit 7 is cut": lambda m: m.unembed.W_U[_index(m, "DIGIT[7]"), 7].zero_(),
}


@pytest.mark.parametrize("name", sorted(PERTURBATIONS))
def test_a_perturbed_weight_is_caught(name: str) -> None:
    model, _ = build_model(n_digits=3)
    with torch.no_grad():
        PERTURBATIONS[name](model)
    assert wrong_pairs(model, all_pairs(2)[::7]), f"perturbing {name} went unnoticed"
