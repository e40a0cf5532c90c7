"""lengthgen.decode against hand-worked answers: the cases that mutation testing (make mutate PART=decode)
found unchecked. The model here has no layers: the logits at a position are ``A[token] + B[position ID]``
for two small tables chosen by hand, so every generated sequence below is worked out on paper from
the tables, not read off the code."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from lengthgen.decode import (
    DECISION_MARGIN, UNDECIDED, UndecidedPrediction, answer_to_int, decided_argmax, greedy_generate,
    greedy_generate_batch, teacher_forced_argmax,
)
from lengthgen.model import Transformer, TransformerConfig

V = 5  # tokens 0..4
SPECIAL = 9  # the position ID at which token 0 wins whatever was fed


def table_model(layers: int = 0) -> Transformer:
    """Logits ``A[t] + B[p]``: after token t the next is (t + 1) mod 5 by a margin of 1, except at
    position ID 9, where token 0 gets +2 (and so wins by 1), and at position ID 7, where token 4 gets
    +1: there it ties with the table's choice (undecided) unless that choice is 4 itself.
    ``layers=1`` adds a block whose weights are all zero (it adds nothing to the residual stream),
    so that decoding has keys and values to cache."""
    m = Transformer(TransformerConfig(d_vocab=V, d_model=2 * V, n_layers=layers, n_heads=1, d_head=2, d_mlp=4,
                                      n_ctx=16, dtype="float64"))
    A = torch.zeros(V, V, dtype=torch.float64)
    for t in range(V):
        A[t, (t + 1) % V] = 1.0
    B = torch.zeros(16, V, dtype=torch.float64)
    B[SPECIAL, 0] = 2.0
    B[7, 4] = 1.0
    with torch.no_grad():
        m.embed.W_E.zero_()
        m.embed.W_E[:, :V] = torch.eye(V, dtype=torch.float64)
        m.pos_embed.W_pos.zero_()
        m.pos_embed.W_pos[:, V:] = B
        m.unembed.W_U.zero_()
        m.unembed.W_U[:V] = A
        m.unembed.W_U[V:] = torch.eye(V, dtype=torch.float64)
        m.unembed.b_U.zero_()
    return m.eval()


@dataclass
class Decoder:
    """The table model and the decoding functions, on one of decoding's paths (a growing cache, or
    the fixed-size cache that CUDA graphs replay, which needs a layer)."""

    model: Transformer
    static_cache: bool

    def greedy(self, *args, **kwargs) -> list[int]:
        return greedy_generate(self.model, *args, static_cache=self.static_cache, **kwargs)

    def batch(self, *args, **kwargs) -> list[list[int]]:
        return greedy_generate_batch(self.model, *args, static_cache=self.static_cache, **kwargs)


@pytest.fixture(params=["growing cache", "static cache"])
def table(request: pytest.FixtureRequest) -> Decoder:
    static = request.param == "static cache"
    return Decoder(table_model(layers=int(static)), static)


def test_the_table_model_gives_the_hand_worked_logits() -> None:
    m = table_model()
    logits = m(torch.tensor([[2, 0]]), torch.tensor([[SPECIAL, 7]]))[0]
    assert logits.tolist() == [[2.0, 0, 0, 1, 0], [0, 1, 0, 0, 1]]


def test_generated_tokens_are_fed_back_at_the_given_position_ids(table: Decoder) -> None:
    """Prompt [1] at ID 0 predicts 2; 2 fed at ID 3 predicts 3; 3 fed at ID 9 predicts 0 (B wins);
    0 fed at ID 4 predicts 1; 1 fed at ID 5 predicts 2."""
    assert table.greedy([1], [0], new_pos_ids=[3, SPECIAL, 4, 5]) == [2, 3, 0, 1, 2]
    assert table.greedy([1], [0], new_pos_ids=[3, SPECIAL, 4, 5], max_new_tokens=3) == [2, 3, 0]
    assert table.greedy([1], [0], new_pos_ids=[3, SPECIAL, 4, 5], max_new_tokens=1) == [2]
    # the prompt's own position IDs count: the last prompt token sits at ID 9, so 0 comes first
    assert table.greedy([1, 1], [0, SPECIAL], new_pos_ids=[1, 2]) == [0, 1, 2]
    # no prompt IDs: 0..T-1, so the last of 10 prompt tokens sits at ID 9
    assert table.greedy([1] * 10, new_pos_ids=[1]) == [0, 1]


def test_default_new_position_ids_follow_the_prompt(table: Decoder) -> None:
    """Prompt of 7 tokens at IDs 0..6, then IDs 7, 8, 9, ...: 3 (prompt end) -> 4; 4 fed at ID 7 -> 0
    ties with 4 (A gives 1 to token 0, B[7] gives 1 to token 4): undecided, the row ends."""
    assert table.greedy([0, 0, 0, 0, 0, 0, 3], max_new_tokens=5) == [4, UNDECIDED]
    # 8 tokens at 0..7: 2 at ID 7 -> 3 + B[7]: tokens 3 and 4 both 1: undecided at once
    assert table.greedy([0] * 7 + [2], max_new_tokens=5) == [UNDECIDED]
    # 3 tokens at 0..2: 1 -> 2 (ID 2), 2 at ID 3 -> 3, 3 at 4 -> 4, 4 at 5 -> 0, 0 at 6 -> 1
    assert table.greedy([0, 0, 1], max_new_tokens=5) == [2, 3, 4, 0, 1]
    # 6 tokens at 0..5: 0 -> 1, 1 at 6 -> 2, 2 at 7 -> undecided (3 and 4 tie)
    assert table.greedy([0] * 6, max_new_tokens=5) == [1, 2, UNDECIDED]
    # 8 tokens at 0..7 ending in 3: 3 -> 4 (A and B[7] agree); 4 at 8 -> 0; 0 at 9 -> 0 (B[9]); 0 at 10 -> 1
    assert table.greedy([0] * 7 + [3], max_new_tokens=4) == [4, 0, 0, 1]


def test_stop_token_ends_a_row_and_is_kept(table: Decoder) -> None:
    assert table.greedy([1], [0], new_pos_ids=[1, 2, 3, 4, 5], stop_token=4) == [2, 3, 4]
    assert table.greedy([1], [0], new_pos_ids=[1, 2, 3, 4, 5], stop_token=2) == [2]
    assert table.greedy([1], [0], new_pos_ids=[1, 2, 3], stop_token=0) == [2, 3, 4, 0]


def test_a_batch_row_ends_alone_and_the_others_go_on(table: Decoder) -> None:
    """Row 0 stops at 4 after two steps, row 1 is undecided at the second step (fed 2 at ID 7), row 2
    runs to the end; ended rows are still fed (an undecided one as token 0) and their later tokens dropped."""
    prompts = torch.tensor([[2], [1], [0]])
    ids = torch.tensor([[1, 2, 3], [7, 1, 2], [1, 2, 3]])
    rows = table.batch(prompts, torch.zeros(3, 1, dtype=torch.long), ids, stop_token=4)
    assert rows == [[3, 4], [2, UNDECIDED], [1, 2, 3, 4]]
    rows = table.batch(prompts, None, ids)
    assert rows == [[3, 4, 0, 1], [2, UNDECIDED], [1, 2, 3, 4]]


def test_prompts_of_any_integer_type_and_the_margin_are_passed_on(table: Decoder) -> None:
    """A uint8 prompt (the tasks' digit arrays) is read as token IDs, not as a mask; every win in the
    table is by 1, so a margin of 1.5 leaves the first step undecided and one of 0.5 changes nothing."""
    ids = [3, SPECIAL, 4]
    assert table.greedy(np.array([1], dtype=np.uint8), np.array([0], dtype=np.uint8), new_pos_ids=ids) == [2, 3, 0, 1]
    assert table.greedy((1.0,), [0], new_pos_ids=ids) == [2, 3, 0, 1]
    assert table.greedy([1], [0], new_pos_ids=ids, margin=1.5) == [UNDECIDED]
    assert table.greedy([1], [0], new_pos_ids=ids, margin=0.5) == [2, 3, 0, 1]


def test_missing_lengths_and_position_ids_are_refused(table: Decoder) -> None:
    with pytest.raises(ValueError, match="max_new_tokens or new_pos_ids"):
        table.greedy([1])
    with pytest.raises(ValueError, match="no position ID given for generated token 2"):
        table.greedy([1], [0], new_pos_ids=[1], max_new_tokens=3)
    assert table.greedy([1], [0], new_pos_ids=[1], max_new_tokens=2) == [2, 3]


def test_progress_bar_reports_to_stderr(table: Decoder, capsys: pytest.CaptureFixture) -> None:
    assert table.greedy([1], [0], new_pos_ids=[1, 2]) == [2, 3, 4]
    assert capsys.readouterr().err == ""  # no bar unless asked for
    assert table.greedy([1], [0], new_pos_ids=[1, 2], progress=True) == [2, 3, 4]
    assert "greedy decoding" in capsys.readouterr().err


def test_teacher_forcing_uses_the_given_position_ids_from_first_on() -> None:
    """Tokens [1, 2, 3, 0] at IDs [0, 1, 9, 3]: positions 1 and 2 predict 3 and 0 (ID 9)."""
    m = table_model()
    assert teacher_forced_argmax(m, [1, 2, 3, 0], [0, 1, SPECIAL, 3], first=1).tolist() == [3, 0]
    assert teacher_forced_argmax(m, [1, 2, 3, 0], [0, 1, SPECIAL, 3], first=0).tolist() == [2, 3, 0]
    # default IDs 0..: token 2 at ID 7 is undecided
    assert teacher_forced_argmax(m, [0] * 7 + [2, 0], None, first=6).tolist() == [1, UNDECIDED]
    # token 1 at ID 9: token 0 wins by 1, which a margin of 1.5 does not accept
    assert teacher_forced_argmax(m, [1, 0], [SPECIAL, 0], first=0).tolist() == [0]
    assert teacher_forced_argmax(m, [1, 0], [SPECIAL, 0], first=0, margin=1.5).tolist() == [UNDECIDED]


def test_decided_argmax_margin_is_strict_and_one_token_is_always_decided() -> None:
    logits = torch.tensor([[1.5, 1.0], [1.0, 1.75], [0.0, 0.0], [-3.0, 0.0]], dtype=torch.float64)
    assert decided_argmax(logits, margin=0.5).tolist() == [UNDECIDED, 1, UNDECIDED, 1]
    assert decided_argmax(logits, margin=0.75).tolist() == [UNDECIDED, UNDECIDED, UNDECIDED, 1]
    assert decided_argmax(torch.tensor([[2.0], [-1.0]])).tolist() == [0, 0]
    assert decided_argmax(torch.zeros(2, 3, 1)).tolist() == [[0, 0, 0], [0, 0, 0]]
    # [batch, position, vocabulary]: the decision is over the last dimension only
    cube = torch.tensor([[[0.0, 2.0, 1.0], [5.0, 0.0, 4.5]], [[1.0, 1.0, 0.0], [0.0, 0.0, 3.0]]])
    assert decided_argmax(cube).tolist() == [[1, 0], [UNDECIDED, 2]]
    assert decided_argmax(cube, margin=0.75).tolist() == [[1, UNDECIDED], [UNDECIDED, 2]]
    # the gap is taken in float64: two float32 logits 2^-10 apart pass a margin just below it
    near = torch.tensor([1.0 + 2.0**-10, 1.0], dtype=torch.float32)
    assert decided_argmax(near, margin=2.0**-10 * (1 - 2.0**-30)).item() == 0
    assert decided_argmax(torch.tensor([0.0, 0.0, DECISION_MARGIN * 2])).item() == 2


def test_answer_to_int_reads_digits_least_significant_first() -> None:
    def decode(tokens):
        return "".join("E" if t == 10 else str(t) for t in tokens)
    assert answer_to_int([3, 2, 1], 10, decode, "p") == 123
    assert answer_to_int([3, 2, 1, 10], 10, decode, "p") == 123
    assert answer_to_int([0, 0, 9], 10, decode, "p") == 900
    assert answer_to_int([9], 10, decode, "p") == 9
    assert answer_to_int([0, 10], 10, decode, "p") == 0
    with pytest.raises(UndecidedPrediction, match=r"^12 \+ 3: the model's answer token 2 \(counting from the ones "
                       r"digit\) is undecided: its two largest logits are within the decision margin of lengthgen\.decode$"):
        answer_to_int([5, 1, UNDECIDED], 10, decode, "12 + 3")
    with pytest.raises(ArithmeticError, match="non-digit answer: '1E2'"):
        answer_to_int([1, 10, 2], 10, decode, "p")
    with pytest.raises(ArithmeticError, match="non-digit answer: ''"):
        answer_to_int([10], 10, decode, "p")
    with pytest.raises(ArithmeticError, match="non-digit"):
        answer_to_int([], 10, decode, "p")
    with pytest.raises(ArithmeticError, match="non-digit answer: '4E'"):
        answer_to_int([4, 10, 10], 10, decode, "p")
