"""One rule for "exact": teacher-forced checking and greedy decoding agree under every dtype.

Both apply :func:`lengthgen.decode.decided_argmax`: a prediction counts only when its logit beats
every other logit by the decision margin. Greedy decoding from the prompt then reproduces the
teacher-forced predictions up to and including the first wrong one, in float64, float32, float16
and bfloat16 (the dtypes of ``python -m constructions.addition --dtype``)."""
from __future__ import annotations

import functools

import pytest
import torch
from addition_recipes import short_operands
from hypothesis import example, given, settings
from hypothesis import strategies as st

from constructions.addition import UndecidedPrediction, add, answer_predictions, build_model, first_wrong_position
from constructions.addition.cli import DTYPES
from lengthgen.decode import UNDECIDED
from lengthgen.tasks import ADDITION

D_MODELS = (21, 22, 23, 25, 27, 29, 31)
MAX_DIGITS = 8


@functools.lru_cache(maxsize=None)
def model_for(d_model: int, dtype: str):
    model, _ = build_model(d_model=d_model, dtype=dtype)
    return model


@given(dtype=st.sampled_from(DTYPES), d_model=st.sampled_from(D_MODELS), a=short_operands(MAX_DIGITS),
       b=short_operands(MAX_DIGITS))
@example(dtype="bfloat16", d_model=23, a=9, b=9)
@settings(max_examples=40)
def test_teacher_and_greedy_agree(dtype: str, d_model: int, a: int, b: int) -> None:
    model = model_for(d_model, dtype)
    n = max(len(str(a)), len(str(b)))
    if n > model.cfg.n_ctx - 3:  # beyond the table of this d_model (refused by both, tested elsewhere)
        return
    teacher, expected = answer_predictions(model, a, b, "teacher")
    greedy, _ = answer_predictions(model, a, b, "greedy")
    wrong = first_wrong_position(teacher, expected)
    assert first_wrong_position(greedy, expected) == wrong
    if wrong is None:
        assert add(model, a, b) == a + b
    else:
        # greedy decoding follows the teacher's predictions up to and including the first wrong one
        assert greedy[: wrong + 1].tolist() == teacher[: wrong + 1].tolist()
        try:
            assert add(model, a, b) != a + b
        except UndecidedPrediction:
            assert greedy[-1] == UNDECIDED
        except ArithmeticError:  # a non-digit answer
            assert greedy[wrong] > 9


def test_a_bfloat16_near_tie_is_wrong_in_both_modes() -> None:
    """d_model = 23 in bfloat16 on 9 + 9: the first answer logits are (nearly) all equal. Neither
    mode may pick a digit: both predict UNDECIDED there, and add() refuses to answer."""
    model, _ = build_model(n_digits=1, d_model=23, dtype="bfloat16")
    teacher, expected = answer_predictions(model, 9, 9, "teacher")
    greedy, _ = answer_predictions(model, 9, 9, "greedy")
    assert expected.tolist()[:2] == [8, 1]
    assert teacher[0] == UNDECIDED and greedy.tolist() == [UNDECIDED]
    with pytest.raises(UndecidedPrediction, match="undecided"):
        add(model, 9, 9)


def test_build_model_without_arguments_is_adderboards_10_digit_model() -> None:
    """AdderBoard calls build_model() and add(model, a, b) with operands of up to 10 digits."""
    model, meta = build_model()
    assert meta["max_digits"] == 10 and model.cfg.d_model == 25  # 2^4 - 2 = 14 >= 10 > 2^3 - 2 = 6
    for a, b in [(9_999_999_999, 1), (9_999_999_999, 9_999_999_999), (0, 0), (1_234_567_890, 987_654_321)]:
        assert add(model, a, b) == a + b
    with pytest.raises(ValueError, match="table"):
        add(model, 10**10, 1)  # 11 digits: beyond the table of the 10-digit model
    assert answer_predictions(model, 5, 7, "greedy")[0].tolist() == [2, 1, ADDITION.EOS]
    assert torch.equal(build_model(n_digits=10)[0].pos_embed.W_pos, model.pos_embed.W_pos)
