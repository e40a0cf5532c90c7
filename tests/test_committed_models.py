"""The committed small models do what README and docs/training.md state.

README reports exact match measured by ``lengthgen.evaluate`` on its own test set (seed 999, 1000
additions per length): the packed model is 100% exact at 5 digits and 99.2% at 15, the packed
q·k/√d model 98.2% at 15, and the same recipe without packing 0.2% at 15. This check is independent
of ``lengthgen.evaluate``: 1000 other additions per length from Python's ``random``, the expected
answer ``str(a + b)`` zero-padded to n + 1 digits and reversed (the paper's format), and the model
answering by greedy decoding (``lengthgen.decode``), not teacher forcing. Each threshold is the
README figure rounded down to what 1000 different additions can confirm (measured here: 99.3%,
98.6% and 0.2% at 15 digits).

The 2-layer N×2 multiplication model is checked the same way (greedy decoding of 1000 random
products per length against Python's ``a * b``), at lengths inside its training range.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from lengthgen.decode import greedy_generate_batch
from lengthgen.positions import addition_ids, coupled_addition_ids
from lengthgen.runs import load_trained
from lengthgen.tasks import ADDITION, MULTIPLICATION_NX2

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
PACKED = "addition_coupled_1l2h_packed"  # unscaled q·k, 50% of training rows hold two additions
PACKED_SCALED = "addition_coupled_1l2h_packed_scaled"  # the same with q·k/√d_head
UNPACKED = "addition_coupled_1l2h_unscaled"  # the same recipe as PACKED, one addition per row
SAMPLES = 1000
AT_15_DIGITS = {PACKED: 0.990, PACKED_SCALED: 0.980}  # README: 99.2% and 98.2% (lengthgen.evaluate's test set)
MULTIPLICATION = "multiplication_nx2_coupled_2l4h"  # 2 layers, 4 heads, trained on 1-5-digit a (docs/training.md)
#: digits of a -> least exact-match fraction on this file's 1000 products with b in 10..99 (measured: 69.3% at
#: 2 digits, 7.4% at 5; lengthgen.evaluate's own test set: 69.0% and 6.8%, docs/training.md)
MULTIPLICATION_IN_RANGE = {2: 0.66, 5: 0.05}


def greedy_exact_match(name: str, n: int, samples: int = SAMPLES, seed: int = 1234) -> float:
    """Fraction of random n-digit additions ``a + b`` whose greedily decoded answer (all n + 1
    reversed digits and the final ``$``) equals Python's ``a + b``."""
    model, notes, _ = load_trained(CHECKPOINTS / name)
    assert notes["positions"] == "coupled" and notes["train_digits"] == "1-5"
    return greedy_addition_match(model, n, samples, seed)


def greedy_addition_match(model: torch.nn.Module, n: int, samples: int = SAMPLES, seed: int = 1234,
                          scheme: str = "coupled") -> float:
    """:func:`greedy_exact_match` of a model in memory."""
    return float(np.mean([got == want for got, want in greedy_addition_answers(model, n, samples, seed, scheme)]))


def greedy_addition_answers(model: torch.nn.Module, n: int, samples: int, seed: int,
                            scheme: str = "coupled") -> list[tuple[str, str]]:
    """(greedily decoded answer, Python's answer) for random n-digit additions, both as the paper's
    reversed, zero-padded digits followed by ``$``; the IDs of ``scheme`` (the paper's coupling, or
    coupled-sink with the $ at the top carry's ID) from the evaluation start s = 2."""
    rng = random.Random(seed)
    pairs = [(rng.randrange(10 ** (n - 1), 10**n), rng.randrange(10 ** (n - 1), 10**n)) for _ in range(samples)]
    prompts = torch.as_tensor(np.stack([ADDITION.encode(f"${a}+{b}=") for a, b in pairs]))
    ids = torch.as_tensor(addition_ids(scheme, n, start=2))
    prompt_len = 2 * n + 3
    assert prompts.shape[1] == prompt_len
    rows = greedy_generate_batch(model, prompts, ids[:prompt_len].expand(samples, -1),
                                 ids[prompt_len:-1].expand(samples, -1), max_new_tokens=n + 2,
                                 stop_token=ADDITION.EOS)
    expected = [str(a + b).zfill(n + 1)[::-1] + "$" for a, b in pairs]
    return [(ADDITION.decode(row), want) for row, want in zip(rows, expected)]


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("name", [PACKED, PACKED_SCALED])
def test_packed_model_is_exact_in_range_and_generalizes_3x(name):
    if not (CHECKPOINTS / name).exists():
        pytest.fail(f"checkpoints/{name} is not committed")
    assert greedy_exact_match(name, 5) >= 0.999  # README: 100% at the longest trained length
    assert greedy_exact_match(name, 15) >= AT_15_DIGITS[name]  # 3x the trained length


def test_control_the_same_recipe_without_packing_fails_at_15_digits():
    """The check above can fail: one addition per row, otherwise identical, is exact at 5 digits
    and collapses at 15 (README: pairs of IDs more than 6 apart never meet in training)."""
    assert greedy_exact_match(UNPACKED, 5) >= 0.99  # README: 99.5%
    assert greedy_exact_match(UNPACKED, 15) < 0.01  # README: 0.2%


def greedy_product_match(name: str, n: int, samples: int = SAMPLES, seed: int = 1234) -> float:
    """Fraction of random products ``a * b`` (a with n digits, b in 10..99) whose greedily decoded
    answer (the n + 2 reversed digits and the final ``$``) equals Python's ``a * b``. The coupled IDs
    are written out from docs/training.md: with start s = 1 and e = s + n + 2, ``$`` gets 0, the
    digits of a get e − n .. e − 1, ``*`` and ``=`` get e, b_1 b_0 get e − 2, e − 1, and the answer
    c_0 c_1 .. gets e − 1, e − 2, .. down to s."""
    model, notes, _ = load_trained(CHECKPOINTS / name)
    assert (notes["task"], notes["positions"], notes["train_digits"]) == ("multiplication_nx2", "coupled", "1-5")
    rng = random.Random(seed)
    pairs = [(rng.randrange(10 ** (n - 1), 10**n), rng.randrange(10, 100)) for _ in range(samples)]
    prompts = torch.as_tensor(np.stack([MULTIPLICATION_NX2.encode(f"${a}*{b:02d}=") for a, b in pairs]))
    s, e = 1, 1 + n + 2
    ids = torch.tensor([0, *range(e - n, e), e, e - 2, e - 1, e, *range(e - 1, s - 1, -1)])
    prompt_len = n + 5
    assert prompts.shape[1] == prompt_len and len(ids) == prompt_len + n + 2
    rows = greedy_generate_batch(model, prompts, ids[:prompt_len].expand(samples, -1),
                                 ids[prompt_len:].expand(samples, -1), max_new_tokens=n + 3,
                                 stop_token=MULTIPLICATION_NX2.EOS)
    expected = [str(a * b).zfill(n + 2)[::-1] + "$" for a, b in pairs]
    return float(np.mean([MULTIPLICATION_NX2.decode(row) == want for row, want in zip(rows, expected)]))


def test_trained_multiplication_model_multiplies_in_range():
    """The 2-layer N×2 model beside the construction (figures/attention_multiplication_trained.png)
    multiplies 2- and 5-digit numbers by 10..99 as often as docs/training.md reports (far from always:
    it is a reduced recipe); a model that has not learned it (a fresh initialisation: 0%) fails this."""
    if not (CHECKPOINTS / MULTIPLICATION).exists():
        pytest.fail(f"checkpoints/{MULTIPLICATION} is not committed")
    for n, least in MULTIPLICATION_IN_RANGE.items():
        assert greedy_product_match(MULTIPLICATION, n) >= least, n


PACKED_50 = "addition_coupled_1l2h_packed_50"  # the packed recipe with a position table for 50 digits, 6000 steps


def test_the_packed_model_with_a_50_digit_table_generalizes_10x():
    """Trained on 1-5 digits, greedy exact match at 50 digits (10x) against Python's a + b: measured
    99.5% on this file's additions (lengthgen.evaluate's own set: 99.6%), and at 48 digits, its
    weakest length, 93.3% (94.4%); docs/training.md has every length. The control: the same
    configuration at its initialisation (seed 0, no training) gets none right."""
    if not (CHECKPOINTS / PACKED_50).exists():
        pytest.fail(f"checkpoints/{PACKED_50} is not committed")
    assert greedy_exact_match(PACKED_50, 5) >= 0.999
    assert greedy_exact_match(PACKED_50, 50) >= 0.985
    assert greedy_exact_match(PACKED_50, 48) >= 0.90
    from lengthgen.train import TrainConfig, build_model

    run = json.loads((CHECKPOINTS / PACKED_50 / "run.json").read_text())
    assert greedy_addition_match(build_model(TrainConfig(**run["config"])).eval(), 50, samples=200) < 0.01


PACKED_200 = "addition_coupled_1l2h_packed_200"  # the packed recipe on 1-30 digits, table for 200, 1200 steps on a GPU


def test_the_model_trained_on_30_digits_adds_200_digit_numbers():
    """Trained on 1-30 digits (1200 steps of 256 rows, one H100, 92 s; docs/training.md), greedy exact
    match at 200 digits (6.67x, the paper's headline ratio) against Python's a + b: lengthgen.evaluate
    measured 100.0% on its own 1000 additions; the same recipe with seed 2 got 99.7% and with seed 0
    5.8%. The control: the same configuration at its initialisation gets none right."""
    if not (CHECKPOINTS / PACKED_200).exists():
        pytest.fail(f"checkpoints/{PACKED_200} is not committed")
    model, notes, _ = load_trained(CHECKPOINTS / PACKED_200)
    assert (notes["positions"], notes["train_digits"]) == ("coupled", "1-30")
    assert greedy_addition_match(model, 30, samples=200) >= 0.99
    assert greedy_addition_match(model, 200) >= 0.99
    from lengthgen.train import TrainConfig, build_model

    run = json.loads((CHECKPOINTS / PACKED_200 / "run.json").read_text())
    assert greedy_addition_match(build_model(TrainConfig(**run["config"])).eval(), 200, samples=100) < 0.01


ENTROPY = "addition_coupled_1l2h_packed_entropy_010"  # 1-10 digits, table for 100, attention-entropy penalty 0.1
ENTROPY_COUNTEREXAMPLE = (8180032568, 9580096596)  # found by lengthgen.certify at N = 10 (docs/certificate.md)


def wrong_digits(model, a: int, b: int, scheme: str = "coupled") -> dict[int, tuple[str, str]]:
    """Greedy decoding of a + b (equal-length operands, the IDs of ``scheme`` from start 2) against Python's
    a + b: {answer position: (expected, written)} wherever the reversed answer or its final $
    differs (a missing token counts as written "")."""
    n = len(str(a))
    prompt = torch.as_tensor(ADDITION.encode(f"${a}+{b}="))[None]
    ids = torch.as_tensor(addition_ids(scheme, n, start=2))
    first = 2 * n + 3
    row = greedy_generate_batch(model, prompt, ids[None, :first], ids[None, first:-1], max_new_tokens=n + 2,
                                stop_token=ADDITION.EOS)[0]
    want, got = str(a + b).zfill(n + 1)[::-1] + "$", ADDITION.decode(row)
    return {i: (want[i], got[i:i + 1]) for i in range(len(want)) if got[i:i + 1] != want[i]}


def test_the_entropy_model_is_exact_on_samples_but_wrong_where_its_certificate_says():
    """Trained on 1-10 digits with the attention-entropy penalty (docs/training.md, "Sharp attention
    for proofs"). Greedy decoding against Python's a + b: 1000 random 10-digit additions all right
    (measured 100%), 98% at 30 digits (measured 98.2%). Yet it is not exact at 10 digits: the
    certificate's counterexample 8180032568 + 9580096596 = 17760129164 is answered with 8 instead
    of 6 at answer position 7 (the reversed answer's eighth digit), which no sample here hits.
    The control: the same configuration at its initialisation gets none right."""
    if not (CHECKPOINTS / ENTROPY).exists():
        pytest.fail(f"checkpoints/{ENTROPY} is not committed")
    model, notes, _ = load_trained(CHECKPOINTS / ENTROPY)
    assert (notes["positions"], notes["train_digits"]) == ("coupled", "1-10")
    assert greedy_addition_match(model, 10) == 1.0
    assert greedy_addition_match(model, 30) >= 0.98
    assert wrong_digits(model, *ENTROPY_COUNTEREXAMPLE) == {7: ("6", "8")}
    from lengthgen.train import TrainConfig, build_model

    run = json.loads((CHECKPOINTS / ENTROPY / "run.json").read_text())
    assert greedy_addition_match(build_model(TrainConfig(**run["config"])).eval(), 10, samples=200) < 0.01


def test_the_late_entropy_model_is_wrong_where_its_20_digit_certificate_says():
    """checkpoints/addition_coupled_1l2h_packed_entropy_001_late is proven exact up to 8 digits
    (tests/test_certify_trained.py runs the 5-digit proof); at 20 digits its certificate prints
    70449368736941935603 + 87934795118481106011, answered by greedy decoding with a 3 for the 2 at
    answer position 7 and right everywhere else (docs/training.md, "Sharp attention for proofs")."""
    name = "addition_coupled_1l2h_packed_entropy_001_late"
    model, notes, _ = load_trained(CHECKPOINTS / name)
    assert (notes["positions"], notes["train_digits"]) == ("coupled", "1-10")
    assert wrong_digits(model, 70449368736941935603, 87934795118481106011) == {7: ("2", "3")}


def test_a_second_seed_of_the_late_entropy_recipe_has_a_real_error_at_5_digits():
    """The same recipe with seed 1 (checkpoints/addition_coupled_1l2h_packed_entropy_001_late_seed1)
    is not proven exact at 5 digits: its certificate bounds exact match by 0.99932 and prints pairs
    such as 54004 + 56406 = 110410, whose top digit the model writes as 0 (a significance summing
    to exactly 10 under two 5s: the carry it makes is lost). Greedy decoding against Python's a + b
    shows the error and its 10-digit twin, while the seed-0 model of the same recipe is right on both."""
    seed1, notes, _ = load_trained(CHECKPOINTS / "addition_coupled_1l2h_packed_entropy_001_late_seed1")
    assert (notes["positions"], notes["train_digits"]) == ("coupled", "1-10")
    seed0, _, _ = load_trained(CHECKPOINTS / "addition_coupled_1l2h_packed_entropy_001_late")
    for a, b, top in ((54004, 56406, 4), (5400000004, 5600000006, 9)):
        assert wrong_digits(seed1, a, b) == {top: ("1", "0")}
        assert wrong_digits(seed0, a, b) == {}


def test_the_third_seed_of_the_late_entropy_recipe_is_right_where_seed_1_is_wrong():
    """Seed 2 of the same recipe (checkpoints/addition_coupled_1l2h_packed_entropy_001_late_seed2) is
    PROVEN_EXACT on every 10-digit addition (docs/training.md); independently of the certificate,
    greedy decoding against Python's a + b gets seed 1's two counterexamples and 200 random 10-digit
    additions right."""
    seed2, notes, _ = load_trained(CHECKPOINTS / "addition_coupled_1l2h_packed_entropy_001_late_seed2")
    assert (notes["positions"], notes["train_digits"]) == ("coupled", "1-10")
    rng = random.Random(10)
    pairs = [(54004, 56406), (5400000004, 5600000006)]
    pairs += [(rng.randrange(10**9, 10**10), rng.randrange(10**9, 10**10)) for _ in range(200)]
    assert [p for p in pairs if wrong_digits(seed2, *p)] == []


def test_the_third_seed_is_wrong_where_its_20_digit_certificate_says():
    """Past its proof: at 20 digits the certificate of seed 2 (``--digits 20``, bound 0.642 with a
    window of two significances) prints pairs it really gets wrong, all at answer position 13, e.g.
    37885208948624325759 + 36274018144787762414, whose carry into c_13 (a_12 + b_12 = 8 + 8) is
    lost; greedy decoding against Python's a + b shows it, and seed 0 of the recipe is right there.
    Why, in the weights (docs/training.md): at the query c_12 (ID 9) the head that should read the
    two 8s at ID 9 puts more than half its attention on b_0 = 4 at ID 21, 12 IDs away, a distance
    that no addition of 1-10 digits holds; with b_0 = 5 that key takes almost nothing."""
    seed2, _, _ = load_trained(CHECKPOINTS / "addition_coupled_1l2h_packed_entropy_001_late_seed2")
    seed0, _, _ = load_trained(CHECKPOINTS / "addition_coupled_1l2h_packed_entropy_001_late")
    a, b = 37885208948624325759, 36274018144787762414
    assert wrong_digits(seed2, a, b) == {13: ("2", "1")}
    assert wrong_digits(seed0, a, b) == {}
    n, query, b0 = 20, 2 * 20 + 3 + 12, 2 * 20 + 1           # c_12's position; b_0's (last digit of b)
    ids = torch.as_tensor(coupled_addition_ids(n, start=2))
    assert (int(ids[query]), int(ids[b0])) == (9, 21)
    shares = []
    for last in (4, 5):
        text = f"${a}+{b - 4 + last}=" + str(a + b).zfill(n + 1)[::-1][:13]
        tokens = torch.as_tensor(ADDITION.encode(text))[None]
        with torch.no_grad():
            _, cache = seed2(tokens, ids[None, :tokens.shape[1]], return_cache=True)
        shares.append(float(cache["blocks.0.attn.hook_pattern"][0, 0, query, b0]))
    assert shares[0] > 0.5 and shares[1] < 0.01, shares


COPYING = {  # (task, seed): checkpoint, trained on 1-10 digits with packed rows (docs/training.md)
    (task, seed): f"{task}_coupled_1l2h_packed_100" + (f"_seed{seed}" if seed else "")
    for task in ("copy", "reverse") for seed in (0, 1, 2)}


def greedy_copy_match(model: torch.nn.Module, name: str, n: int, samples: int = 200, seed: int = 1234) -> float:
    """Fraction of random n-digit strings x whose greedily decoded answer after ``$x=`` is x (copy) or
    x reversed (reverse) followed by ``$``, with the task's coupled IDs at the evaluation start s = 1."""
    from lengthgen.tasks import get_task

    task = get_task(name)
    rng = random.Random(seed)
    xs = ["".join(rng.choice("0123456789") for _ in range(n)) for _ in range(samples)]
    prompts = torch.as_tensor(np.stack([task.encode(f"${x}=") for x in xs]))
    ids = torch.as_tensor(task.coupled_ids(n, 1))
    rows = greedy_generate_batch(model, prompts, ids[:n + 2].expand(samples, -1), ids[n + 2:].expand(samples, -1),
                                 max_new_tokens=n + 1, stop_token=task.EOS)
    want = [(x[::-1] if name == "reverse" else x) + "$" for x in xs]
    return float(np.mean([task.decode(row) == w for row, w in zip(rows, want)]))


@pytest.mark.parametrize("name, seed", sorted(COPYING))
def test_packed_copy_and_reverse_models_are_exact_at_10x_their_trained_length(name, seed):
    """Trained on 1-10 digits with two problems in half the rows, three seeds per task
    (docs/training.md): lengthgen.evaluate measured at least 99% at every length up to 100; here greedy
    decoding of 200 other 100-digit strings against string slicing, and the same configuration at its
    initialisation, which gets none right."""
    from lengthgen.model import Transformer

    model, notes, _ = load_trained(CHECKPOINTS / COPYING[name, seed])
    assert (notes["task"], notes["positions"], notes["train_digits"]) == (name, "coupled", "1-10")
    config = json.loads((CHECKPOINTS / COPYING[name, seed] / "run.json").read_text())["config"]
    assert (config["seed"], config["data_seed"]) == (seed, seed)
    assert greedy_copy_match(model, name, 100) >= 0.99
    torch.manual_seed(0)
    assert greedy_copy_match(Transformer(model.cfg), name, 100, samples=20) == 0.0


#: seed -> checkpoint trained on 1-10-digit additions with 2 to 6 problems in half the rows (``--pack-problems 6``,
#: docs/training.md, "Six problems per packed row")
PACKED_SIX = {seed: "addition_coupled_1l2h_pack6_100" + (f"_seed{seed}" if seed else "") for seed in (0, 1, 2)}
#: the same data with at most two problems per row (and a late entropy penalty, which leaves 100-digit exact match
#: where the run without it has it: 95.0% against 95.5%, docs/training.md)
PACKED_TWO_100 = "addition_coupled_1l2h_packed_entropy_001_late"


def load_packed_six(seed: int) -> torch.nn.Module:
    model, notes, _ = load_trained(CHECKPOINTS / PACKED_SIX[seed])
    assert (notes["task"], notes["positions"], notes["train_digits"]) == ("addition", "coupled", "1-10")
    config = json.loads((CHECKPOINTS / PACKED_SIX[seed] / "run.json").read_text())["config"]
    assert (config["seed"], config["data_seed"], config["pack_problems"], config["max_digits"]) == (seed, seed, 6, 100)
    return model


def test_addition_trained_on_10_digits_with_six_problems_per_row_is_right_at_100_digits():
    """Seed 0: lengthgen.evaluate measured at least 99% at every length from 1 to 100
    (bench/results/addition_pack6_seeds.json); here greedy decoding of 1000 other 100-digit additions
    against Python's a + b (measured 100%), and the same configuration at its initialisation, which
    gets none right."""
    from lengthgen.model import Transformer

    model = load_packed_six(0)
    assert greedy_addition_match(model, 100) >= 0.99
    torch.manual_seed(0)
    assert greedy_addition_match(Transformer(model.cfg), 100, samples=20) == 0.0


@pytest.mark.parametrize("seed, least, most", [(1, 0.95, 1.0), (2, 0.0, 0.10)])
def test_the_other_two_seeds_err_only_at_the_top_carry_and_the_end(seed, least, most):
    """Seeds 1 and 2 of the same recipe miss 99% at 100 digits (lengthgen.evaluate: 96.6% and 4.9%;
    docs/training.md); on 1000 other 100-digit additions decoded greedily (measured 97.6% and 4.2%)
    their answers still have the 100 lower digits right at least 99% of the time (measured 100% and
    99.5%): what they get wrong is the top carry c_100 or the `$` after it."""
    answers = greedy_addition_answers(load_packed_six(seed), 100, SAMPLES, seed=1234)
    exact = np.mean([got == want for got, want in answers])
    assert least <= exact <= most
    assert np.mean([got[:100] == want[:100] for got, want in answers]) >= 0.99


def test_the_same_data_with_two_problems_per_row_is_not_99_percent_right_at_100_digits():
    """The control for the seed-0 test above: at most two problems per packed row, otherwise the
    same data (1-10 digits, a table for 100, half the rows packed; trained 8000 steps with a late
    entropy penalty), falls below the threshold on the same 1000 additions (measured 93.6%; seed 0 of the six-problem recipe: 100%)."""
    model, notes, _ = load_trained(CHECKPOINTS / PACKED_TWO_100)
    config = json.loads((CHECKPOINTS / PACKED_TWO_100 / "run.json").read_text())["config"]
    assert (notes["train_digits"], config["pack_problems"], config["max_digits"]) == ("1-10", 2, 100)
    assert greedy_addition_match(model, 100) < 0.97


SINK_50 = "addition_coupled_sink_1l2h_packed_50"  # + _seed1, _seed2: 1-5 digits, table for 50, $ at the top carry's ID
SINK_100 = "addition_coupled_sink_1l2h_pack6_100"  # _seed1, _seed2: the six-problem recipe, $ at the top carry's ID


def load_sink(name: str, seed: int, train_digits: str) -> torch.nn.Module:
    path = CHECKPOINTS / (name if seed == 0 else f"{name}_seed{seed}")
    model, notes, _ = load_trained(path)
    assert (notes["positions"], notes["train_digits"]) == ("coupled-sink", train_digits)
    return model


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_seed_with_the_sink_is_99_percent_right_at_50_digits(seed):
    """docs/training.md, "A sink for the top carry": trained on 1-5 digits (4000 steps of 128 rows)
    with $ at the top carry's ID, every seed is at least 99% exact at every length up to 50
    (lengthgen.evaluate, bench/results/addition_sink50_seeds.json). Here greedy decoding of 500 other
    50-digit additions against Python's a + b. The control: the committed model of the paper's
    rule with twice the batch and 1.5 times the steps (addition_coupled_1l2h_packed_50) fails the
    same threshold at 48 digits."""
    assert greedy_addition_match(load_sink(SINK_50, seed, "1-5"), 50, samples=500, scheme="coupled-sink") >= 0.99


def test_the_paper_rule_control_misses_the_sink_threshold_at_48_digits():
    model, notes, _ = load_trained(CHECKPOINTS / "addition_coupled_1l2h_packed_50")
    assert notes["positions"] == "coupled"
    assert greedy_addition_match(model, 48, samples=500) < 0.99


def test_the_sink_model_needs_its_dollar_at_the_top_carry_id():
    """The same weights fed the paper's IDs ($ at 0): the top carry has no key at the ID it reads,
    and exact match at 50 digits collapses, so the $ at ID s - 1 is what the model uses there."""
    model = load_sink(SINK_50, 0, "1-5")
    answers = greedy_addition_answers(model, 50, 200, seed=1234, scheme="coupled")
    assert np.mean([got == want for got, want in answers]) < 0.5
    assert np.mean([got[:50] == want[:50] for got, want in answers]) >= 0.99  # the lower digits stay right


@pytest.mark.parametrize("seed", [0, 2])
def test_two_seeds_of_the_six_problem_recipe_with_the_sink_are_right_at_100_digits(seed):
    """Seed 2 of the six-problem recipe breaks from 17 digits under the paper's rule (4.9% at 100,
    nearly all at the top carry); the same seed and data with $ at the top carry's ID, and seed 0 of
    the same recipe, decode 1000 other 100-digit additions right (measured 100% each; lengthgen.evaluate
    finds both 100% at every length 1-100, bench/results/addition_sink100_seeds.json)."""
    assert greedy_addition_match(load_sink(SINK_100, seed, "1-10"), 100, scheme="coupled-sink") >= 0.99


def test_the_third_seed_of_the_six_problem_recipe_with_the_sink_does_not_learn_its_range():
    """Seed 1 with the sink did not learn even its training range (97.5% at 10 digits,
    docs/training.md): at most 70% at 100 (measured 61.6%)."""
    answers = greedy_addition_answers(load_sink(SINK_100, 1, "1-10"), 100, 500, seed=1234, scheme="coupled-sink")
    assert np.mean([got == want for got, want in answers]) <= 0.70


def test_the_sink_model_with_the_entropy_penalty_is_wrong_where_its_10_digit_certificate_says():
    """checkpoints/addition_coupled_sink_1l2h_packed_50_entropy_late is proven exact at 5 digits
    (tests/test_certify_trained.py), and its 10-digit certificate prints pairs it really gets
    wrong, e.g. 8100032502 + 9556796509 with answer digit c_1 = 1 written as 4
    (bench/results/certify_trained/sink50_entropy_late_n10.json). Greedy decoding against Python's
    a + b shows it; the same recipe without the penalty is right there."""
    model = load_sink("addition_coupled_sink_1l2h_packed_50_entropy_late", 0, "1-5")
    assert wrong_digits(model, 8100032502, 9556796509, "coupled-sink") == {1: ("1", "4")}
    assert wrong_digits(load_sink(SINK_50, 0, "1-5"), 8100032502, 9556796509, "coupled-sink") == {}


def test_the_sink_recipe_with_the_entropy_penalty_is_right_at_50_digits():
    """checkpoints/addition_coupled_sink_1l2h_pack6_100_entropy_late_seed2: the six-problem sink
    recipe, seed 2, with the late entropy penalty (docs/training.md). lengthgen.evaluate finds it
    100% at every length 1-52 and 97.6% at 100; here greedy decoding of 1000 other 50-digit
    additions against Python's a + b (at least 99%; measured 100%)."""
    model = load_sink("addition_coupled_sink_1l2h_pack6_100_entropy_late_seed2", 0, "1-10")
    assert greedy_addition_match(model, 50, scheme="coupled-sink") >= 0.99


SEARCHED_100 = [  # (a, b, answer position wrong) found by `lengthgen.certify --no-proof --attack 8` on seed 0
    ("1474777497747274754777749747970977777749747477409497997954497996499945749999949797997974953997729775",
     "8474777447747474744977747977977979779747727297800449777495479774274849174744797479774799545777749774", 100),
    ("7998448444444444494443948449444444444480444444494444448444494444444444444444004444444444444444444439",
     "1890440444444444394444940439444444444408444444394444440444394444444444444444884444444444444444444449", 0),
]


@pytest.mark.parametrize("a, b, position", SEARCHED_100)
def test_the_adversarial_search_breaks_the_model_that_sampling_calls_right(a, b, position):
    """Seed 0 of the six-problem recipe under the paper's rule is right on 999 of 1000 sampled
    100-digit additions, yet the adversarial search of lengthgen.certify (no proof, 8 descents)
    ends every descent at a pair it answers wrong
    (bench/results/certify_trained/attack_pack6_100_n100_no_proof.json): greedy decoding against
    Python's a + b is wrong at the answer position the search named, the top carry or even the
    units digit. The same seed with the sink is right on both (its own search found no error,
    smallest margin 13.6)."""
    assert position in wrong_digits(load_packed_six(0), int(a), int(b))
    assert not wrong_digits(load_sink(SINK_100, 0, "1-10"), int(a), int(b), "coupled-sink")


def test_a_weaker_late_penalty_keeps_the_length_but_the_search_finds_an_error_at_10_digits():
    """The six-problem sink recipe, seed 2, with --attn-entropy 0.003 from 75% of the steps:
    lengthgen.evaluate measured 100% on 1000 10-digit additions and 99.7% at 100
    (bench/results/addition_sink_pack6_entropy_0003_late_seed2_eval.json); here 300 other 100-digit
    additions decoded greedily (at least 98%; measured 100%). Yet the adversarial search of its 10-digit
    certificate found 6865000696 + 6841005366 = 13706006062 answered with 8 for the 7 at answer
    position 8 (bench/results/certify_trained/attack_sink_pack6_entropy_0003_late_seed2_n10.json):
    greedy decoding confirms it; the same seed without the penalty is right there."""
    model = load_sink("addition_coupled_sink_1l2h_pack6_100_entropy_0003_late", 2, "1-10")
    assert greedy_addition_match(model, 100, samples=300, scheme="coupled-sink") >= 0.98
    assert wrong_digits(model, 6865000696, 6841005366, "coupled-sink") == {8: ("7", "8")}
    assert not wrong_digits(load_sink(SINK_100, 2, "1-10"), 6865000696, 6841005366, "coupled-sink")


SEARCHED_50 = {  # seed: (a, b, answer position wrong), from `lengthgen.certify --digits 50 --no-proof --attack 8`
    0: ("55555555555555555555555555555555555452525555555555", "55555555555555555555555555555555555432529555555555", 14),
    1: ("11111111111111111113510000000100111010010100010110", "11111111111111111113101111111011000001101011101001", 30),
    2: ("16255526125856255262252508328111521208522825252582", "12255526125756255252252518528111021677622825952582", 50),
}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_seed_of_the_1_to_5_digit_sink_recipe_has_errors_that_sampling_misses(seed):
    """Each seed of the 1-5-digit sink recipe is at least 99% right at every sampled length up to 50
    (test above), yet the whole-answer adversarial search (8 descents, 41 s each) ends 4, 8 and 6 of
    its 8 descents at 50-digit additions it answers wrong
    (bench/results/certify_trained/attack_sink50_seed*_n50_no_proof.json). Greedy decoding against
    Python's a + b is wrong at the position the search named."""
    a, b, position = SEARCHED_50[seed]
    assert position in wrong_digits(load_sink(SINK_50, seed, "1-5"), int(a), int(b), "coupled-sink")
