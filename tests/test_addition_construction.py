"""Theorem 5.1's construction is exactly right (checks against Python integers).

Mechanism checks follow docs/theorem-5-1.md part by part: the position code, the heads' attention
sets, the feed-forward network on its whole finite domain and at every corner of the perturbation
box the error bound allows, then end to end. Every weight index goes through the named bases."""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
import torch
from addition_recipes import adversarial_pairs, operand_pairs
from hypothesis import example, given, settings

from constructions.addition import (
    EOS_RAMP, CapacityError, add, add_many, answer_predictions, build_model, d_model_for, first_wrong_position,
    head_basis, max_digits_for, mlp_basis, position_dims, residual_basis, weight_entries,
)
from constructions.addition.layout import eos_unit, trapezoid_units
from lengthgen.decode import teacher_forced_argmax
from lengthgen.tasks import ADDITION

MAX_DIGITS_CPU = 2000
PAPER_TOKEN_DIMS = 17  # Theorem 5.1: d = 17 + 2P


@functools.lru_cache(maxsize=None)
def model_for(n_digits: int | None = None, d_model: int | None = None, dtype: str = "float32"):
    return build_model(n_digits=n_digits, d_model=d_model, dtype=dtype)


def teacher_sum(model, a: int, b: int) -> int | None:
    """The model's sum via one teacher-forced pass (None if any answer token or EOS is wrong)."""
    inst = ADDITION.instance(str(a), str(b))
    pred = teacher_forced_argmax(model, inst.tokens, inst.pos_ids, inst.prompt_len - 1).cpu().numpy()
    if not np.array_equal(pred, inst.answer_tokens):
        return None
    return int("".join(str(int(t)) for t in pred[-2::-1]))


# ----------------------------------------------------------------- layout and the bound
def test_layout_is_17_plus_2P() -> None:
    token_dims = ["NUM", "IS_BOS", "FULL_ONES", "PRE_SUM", "PRE_CARRY", "PRE_EOS"]
    token_dims += [f"SUM[{k}]" for k in range(10)] + ["IS_EOS"]
    assert len(token_dims) == PAPER_TOKEN_DIMS
    for d in (21, 22, 23, 29, 64, 512):
        P = (d - PAPER_TOKEN_DIMS) // 2
        unused = ["UNUSED[0]"] if (d - PAPER_TOKEN_DIMS) % 2 else []
        expected = token_dims + [f"POS_1[{i}]" for i in range(P)] + [f"POS_2[{i}]" for i in range(P)] + unused
        assert residual_basis(d).labels == expected
    assert max_digits_for(512) == 2**247 - 2 and f"{float(max_digits_for(512)):.3e}" == "2.262e+74"
    assert max_digits_for(21) == 2 and d_model_for(62) == 29 and d_model_for(63) == 31


# --------------------------------- heads (docs/theorem-5-1.md, "Head 1", "Head 2")
def expected_sets(n: int, query: int) -> tuple[set[int], set[int]]:
    """Key indices each head should attend to from sequence index ``query`` (independent of the code)."""
    a = {i: 1 + (n - 1 - i) for i in range(n)}
    b = {i: n + 2 + (n - 1 - i) for i in range(n)}
    c = {i: 2 * n + 3 + i for i in range(n + 1)}
    plus, equals = n + 1, 2 * n + 2
    if query == equals:
        return {0, a[0], b[0]}, {0, plus, equals}
    i = query - (2 * n + 3)
    head1 = {0, a[i + 1], b[i + 1]} if i + 1 < n else {0}
    head2 = {0, a[i], b[i], c[i]} if i < n else {0, c[n]}
    return head1, head2


@given(pair=operand_pairs(40))
def test_heads_attend_to_exactly_the_theorem_sets(pair: tuple[int, int]) -> None:
    model, meta = model_for(n_digits=40)
    inst = ADDITION.instance(*map(str, pair))
    _, acts = model(torch.tensor(inst.tokens[None, :-1]), torch.tensor(inst.pos_ids[None, :-1]), return_cache=True)
    pattern = acts["blocks.0.attn.hook_pattern"][0].double()
    leak = meta["leak_bound"]
    for q in range(inst.prompt_len - 1, len(inst.tokens) - 1):
        for head, keys in enumerate(expected_sets(inst.n, q)):
            row = pattern[head, q]
            inside = row[sorted(keys)]
            assert float(row.sum() - inside.sum()) <= leak + 1e-6, (head, q)
            assert (inside - 1 / len(keys)).abs().max() <= leak + 1e-6, (head, q)


# --------------------------------- FFN on its whole domain (docs/theorem-5-1.md, "The feed-forward network")
def ffn_domain() -> list[tuple[dict[str, float], int]]:
    """Every reachable (PRE_SUM, PRE_CARRY, NUM, PRE_EOS) at an answer-predicting position, with the
    correct next token from integer arithmetic (10 stands for '$')."""
    cases = []
    for x in range(19):  # '=' predicts c_0 = (a_0 + b_0) mod 10
        cases.append(({"PRE_SUM": x, "PRE_CARRY": 0, "NUM": 0, "PRE_EOS": 1 / 3}, x % 10))
    for ai in range(10):
        for bi in range(10):
            for carry_in in (0, 1):
                ci = (ai + bi + carry_in) % 10
                carry = (ai + bi + carry_in) // 10
                for x in range(19):  # x = a_{i+1} + b_{i+1} (0 past the last digit)
                    cases.append(({"PRE_SUM": x, "PRE_CARRY": ai + bi + ci, "NUM": ci, "PRE_EOS": 0.25}, (x + carry) % 10))
    for cn in (0, 1):  # the overflow digit predicts EOS
        cases.append(({"PRE_SUM": 0, "PRE_CARRY": 2 * cn, "NUM": cn, "PRE_EOS": 0.5}, 10))
    return cases


# The error bound (docs/theorem-5-1.md, "The error bound"): with softmax leak δ < 1/620 the heads
# move PRE_SUM by at most 27δ, PRE_CARRY by 36δ and PRE_EOS by δ. Every corner of that box must
# leave SUM and IS_EOS exactly 0/1.
LEAK = 1 / 620
BOX = {"PRE_SUM": 27 * LEAK, "PRE_CARRY": 36 * LEAK, "PRE_EOS": LEAK}


def box_corners() -> list[dict[str, float]]:
    """The 8 corners of the perturbation box (each coordinate at its + or − bound)."""
    return [dict(zip(BOX, (sign * bound for sign, bound in zip(signs, BOX.values()))))
            for signs in itertools.product((-1, 1), repeat=len(BOX))]


def ffn_outputs(model, inputs: list[dict[str, float]]) -> torch.Tensor:
    """Residual after the feed-forward network for residual vectors given by named coordinates
    (FULL_ONES = 1 is added), computed in float64 with the model's weights."""
    basis = residual_basis(model.cfg.d_model)
    names = sorted({name for values in inputs for name in values})
    x = torch.zeros(len(inputs), model.cfg.d_model, dtype=torch.float64)
    x[:, basis.index("FULL_ONES")] = 1
    x[:, [basis.index(name) for name in names]] = torch.tensor(
        [[values.get(name, 0.0) for name in names] for values in inputs], dtype=torch.float64)
    block = model.blocks[0]
    with torch.no_grad():
        return x + block.mlp(x.to(model.cfg.torch_dtype)).double()


@pytest.mark.parametrize("perturbed", [False, True])
def test_ffn_is_exact_on_its_whole_domain(perturbed: bool) -> None:
    """One-hot SUM and IS_EOS are exactly 0/1 for every reachable input; with ``perturbed``, at
    every corner of the box the leak bound allows, for every reachable input."""
    model, _ = model_for(n_digits=40, dtype="float64")
    cases = ffn_domain()
    assert len(cases) == 19 + 200 * 19 + 2
    shifts = box_corners() if perturbed else [{}]
    inputs = [{**values, **{k: values[k] + shift[k] for k in shift}} for values, _ in cases for shift in shifts]
    wants = [want for _, want in cases for _ in shifts]
    resid = ffn_outputs(model, inputs)
    basis = residual_basis(model.cfg.d_model)
    sums = resid[:, [basis.index(f"SUM[{k}]") for k in range(10)]]
    eos = resid[:, basis.index("IS_EOS")]
    want = torch.tensor(wants)
    digit_rows = want != 10  # at EOS only IS_EOS matters: '$' scores 2, a digit at most 1
    expected_sums = torch.nn.functional.one_hot(want.clamp(max=9), 10).double() * digit_rows[:, None]
    expected_eos = (~digit_rows).double()
    bad_rows = (((sums - expected_sums).abs().amax(1) > 1e-9) & digit_rows) | ((eos - expected_eos).abs() > 1e-9)
    assert not bad_rows.any(), [inputs[i] for i in torch.nonzero(bad_rows)[:3, 0].tolist()]
    logits = resid @ model.unembed.W_U.detach()
    assert logits.argmax(-1).tolist() == [ADDITION.EOS if want == 10 else want for want in wants]


def test_the_perturbation_box_is_the_margin() -> None:
    """The box is tight: its PRE_SUM/PRE_CARRY corners move t by just under the 0.05 margin."""
    worst_t = BOX["PRE_SUM"] + BOX["PRE_CARRY"] / 10
    assert 0.049 < worst_t < 0.05 and len(box_corners()) == 8


# ----------------------------------------------------------------- end to end
def test_every_pair_up_to_two_digits_by_greedy_decoding() -> None:
    model, _ = model_for(n_digits=2)
    assert model.cfg.d_model == 21  # 2 digits is exactly the bound of d = 21
    pairs = [(a, b) for a in range(100) for b in range(100)]
    sums = add_many(model, pairs)
    assert [(a, b) for (a, b), s in zip(pairs, sums) if s != a + b] == []
    assert [add(model, a, b) for a, b in pairs[::997]] == [a + b for a, b in pairs[::997]]  # batch == single


def test_adderboard_edge_cases() -> None:
    model, _ = model_for(n_digits=30)
    assert add(model, 9_999_999_999, 1) == 10_000_000_000
    for a, b in [(0, 0), (1_111_111_111, 8_888_888_889), (9_999_999_999, 9_999_999_999), (5, 5)]:
        assert add(model, a, b) == a + b


@given(pair=operand_pairs(30))
@settings(max_examples=15)
def test_greedy_decoding_random_and_carry_chains(pair: tuple[int, int]) -> None:
    model, _ = model_for(n_digits=30)
    assert add(model, *pair) == sum(pair)


@given(pair=operand_pairs(MAX_DIGITS_CPU))
@example(pair=(10**MAX_DIGITS_CPU - 1, 1))
@example(pair=(10**MAX_DIGITS_CPU - 1, 10**MAX_DIGITS_CPU - 1))
@example(pair=(5 * (10**MAX_DIGITS_CPU - 1) // 9, 4 * (10**MAX_DIGITS_CPU - 1) // 9 + 1))
def test_teacher_forced_long_operands(pair: tuple[int, int]) -> None:
    model, _ = model_for(n_digits=MAX_DIGITS_CPU)
    assert teacher_sum(model, *pair) == sum(pair)


@pytest.mark.parametrize("n", [1, 7, 64, 500])
def test_adversarial_carry_chains(n: int) -> None:
    model, _ = model_for(n_digits=MAX_DIGITS_CPU)
    for a, b in adversarial_pairs(n):
        assert teacher_sum(model, a, b) == a + b, (a, b)


@pytest.mark.parametrize("P", [2, 3, 4, 6])
def test_the_bound_is_tight_for_the_table(P: int) -> None:
    """n = 2^P − 2 works (the largest position ID is 2^P); n = 2^P − 1 is refused clearly."""
    d = PAPER_TOKEN_DIMS + 2 * P
    n = 2**P - 2
    model, _ = build_model(d_model=d)
    for a, b in adversarial_pairs(n)[:3]:
        assert add(model, a, b) == a + b
    with pytest.raises(CapacityError, match=f"bound 2\\^{P} - 2 = {n}"):
        build_model(n_digits=n + 1, d_model=d)
    with pytest.raises(CapacityError, match="table"):
        add(model, 10 ** (n + 1) - 1, 1)


def test_greedy_and_teacher_agree_on_a_wrong_model() -> None:
    """The equivalence the CLI relies on also holds when the model is wrong."""
    model, _ = build_model(n_digits=8)
    carry_value = head_basis(position_dims(model.cfg.d_model)).index("val_NUM")
    with torch.no_grad():
        model.blocks[0].attn.W_O[1, carry_value, :] = 0  # the carry head no longer writes PRE_CARRY
    a, b = 59999999, 1
    teacher, expected = answer_predictions(model, a, b, "teacher")
    greedy, _ = answer_predictions(model, a, b, "greedy")
    wrong = first_wrong_position(teacher, expected)
    assert wrong is not None and first_wrong_position(greedy, expected) == wrong
    assert greedy[: wrong + 1].tolist() == teacher[: wrong + 1].tolist()


# ----------------------------------------------------------------- a wrong construction is caught
def _perturbed(name: str) -> torch.nn.Module:
    model, _ = build_model(n_digits=6, dtype="float64")
    basis, units = residual_basis(model.cfg.d_model), mlp_basis()
    head = head_basis(position_dims(model.cfg.d_model))
    traps = [units.index(unit) for unit in trapezoid_units()]
    mlp, attn = model.blocks[0].mlp, model.blocks[0].attn
    with torch.no_grad():
        if name == "carry threshold":  # the NUM coefficient of t: -0.2 -> -0.15 moves the carry decision
            mlp.W_in[basis.index("NUM"), traps] = -0.15
        elif name == "head-1 scale":
            attn.W_O[0, head.index("val_NUM"), basis.index("PRE_SUM")] = 2.9
        elif name == "eos ramp":
            mlp.W_in[basis.index("FULL_ONES"), units.index(eos_unit(EOS_RAMP[0]))] = -0.3
        elif name == "sharpness":
            attn.W_Q.mul_(0.2)
    return model


@pytest.mark.parametrize("name", ["carry threshold", "head-1 scale", "eos ramp", "sharpness"])
def test_one_wrong_weight_is_caught(name: str) -> None:
    model = _perturbed(name)
    pairs = [(a, b) for n in range(1, 7) for a, b in adversarial_pairs(n)]
    pairs += [(a, b) for a in range(0, 100, 3) for b in range(0, 100, 7)]
    assert any(teacher_sum(model, a, b) != a + b for a, b in pairs)


def test_describe_names_every_dimension() -> None:
    model, meta = model_for(n_digits=30)
    text = model.describe()
    for label in residual_basis(model.cfg.d_model).labels:
        assert label in text
    assert "POS_2[0] -> pos[0]" in text and "carry" in text and f"M={meta['M']:.4g}" in text
    assert math.isclose(meta["M"], 0.5 * math.log(1000 * (3 * 30 + 5)))
    assert position_dims(model.cfg.d_model) == 5


# ----------------------------------------------------------------- GPU: 10^5 and 10^6 digits
@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("n", [10**5, 10**6])
def test_gpu_long_operands(n: int) -> None:
    model, _ = build_model(n_digits=n, device="cuda")
    pairs = [(10**n - 1, 1), (10**n - 1, 10**n - 1)]
    rng = np.random.default_rng(n)
    digits = lambda: "".join(map(str, [rng.integers(1, 10)] + list(rng.integers(0, 10, n - 1))))
    pairs.append((int(digits()), int(digits())))
    for a, b in pairs:
        assert teacher_sum(model, a, b) == a + b


def independent_position_table(d_model: int, n_positions: int) -> torch.Tensor:
    """W_pos written out from the definition, one coordinate at a time: ID p ≥ 1 has v_p[i] = −1
    if bit i of p − 1 is set, else +1; v_0 = 0; row p holds v_p in POS_1 and v_{p−1} in POS_2."""
    P = (d_model - PAPER_TOKEN_DIMS) // 2
    basis = residual_basis(d_model)
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    for p in range(n_positions):
        for block, q in (("POS_1", p), ("POS_2", p - 1)):
            if q >= 1:
                for i in range(P):
                    table[p, basis.index(f"{block}[{i}]")] = -1.0 if (q - 1) >> i & 1 else 1.0
    return table


@pytest.mark.parametrize("d_model, n_digits", [(21, 2), (22, 1), (23, 6), (29, 40), (33, 254)])
def test_position_table_is_the_hypercube_code(d_model: int, n_digits: int) -> None:
    """The model's W_pos (and the entry-by-entry W_pos of weight_entries) against the definition."""
    model, _ = build_model(n_digits=n_digits, d_model=d_model, dtype="float64")
    n_positions = model.cfg.n_ctx
    expected = independent_position_table(d_model, n_positions)
    assert torch.equal(model.pos_embed.W_pos, expected)
    assert torch.equal(weight_entries(d_model, 1.0, n_positions)["W_pos"].tensor(), expected)


def test_hypercube_codes_separate_every_pair_of_ids() -> None:
    """⟨v_p, v_q⟩ = P for p = q and ≤ P − 2 otherwise: the score gap 2M of both heads."""
    P = 4
    d_model = PAPER_TOKEN_DIMS + 2 * P
    codes = independent_position_table(d_model, 2**P + 1)[1:, residual_basis(d_model).block("POS_1")]
    dots = codes @ codes.T
    assert torch.equal(dots.diagonal(), torch.full((2**P,), float(P), dtype=torch.float64))
    assert (dots[~torch.eye(2**P, dtype=torch.bool)] <= P - 2).all()
