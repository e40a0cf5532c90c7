"""Greedy decoding over a fixed-size key/value buffer (the path CUDA graphs replay) gives what the
growing cache gives, which the full forward pass pins (tests/test_model.py)."""
from __future__ import annotations

import random
import warnings

import pytest
import torch

from lengthgen.attention import visibility_mask
from lengthgen.decode import STOP_CHECK_EVERY, UNDECIDED, decided_argmax, greedy_generate, greedy_generate_batch
from lengthgen.kv_cache import KVCache, StaticKVCache
from lengthgen.model import Transformer, TransformerConfig

from test_model import random_model

WINDOWED = {"attn_windows": [3, None], "normalization": "LN"}


def full_forward_greedy(m: Transformer, prompt: list[int], steps: int) -> list[int]:
    """The reference: every step a full forward pass over the sequence so far and the decided
    argmax of its last position; it ends at an undecided step."""
    seq = list(prompt)
    for _ in range(steps):
        seq.append(int(decided_argmax(m(torch.tensor([seq]))[0, -1])))
        if seq[-1] == UNDECIDED:
            break
    return seq[len(prompt):]


@pytest.mark.parametrize("overrides", [{}, WINDOWED, {"d_vocab_out": 7}])
def test_static_steps_equal_full_forward_greedy(overrides: dict) -> None:
    m = random_model(**overrides)
    prompts = torch.randint(0, 7, (3, 5), generator=torch.Generator().manual_seed(5))
    for static in (False, True):
        rows = greedy_generate_batch(m, prompts, max_new_tokens=30, static_cache=static)
        for row, prompt in zip(rows, prompts.tolist()):
            assert row == full_forward_greedy(m, prompt, 30), static


def test_static_steps_with_coupled_position_ids_add_exactly() -> None:
    """The addition construction (position IDs given as data) decodes 60-digit sums exactly."""
    from constructions.addition.model import START_ID, build_model
    from lengthgen.tasks import ADDITION

    model, _ = build_model(n_digits=60, dtype="float64")
    rng = random.Random(3)
    for _ in range(3):
        a, b = rng.randrange(10**59, 10**60), rng.randrange(10**59, 10**60)
        inst = ADDITION.instance(a, b, start=START_ID)
        p = inst.prompt_len
        rows = greedy_generate_batch(model, torch.tensor(inst.tokens[:p])[None], torch.tensor(inst.pos_ids[:p])[None],
                                     torch.tensor(inst.pos_ids[p:])[None], stop_token=ADDITION.EOS, static_cache=True)
        digits = rows[0][:-1]
        assert rows[0][-1] == ADDITION.EOS and int("".join(map(str, digits[::-1]))) == a + b


def test_rows_end_at_their_own_stop_across_the_check_interval() -> None:
    """Rows end at different steps, some far beyond STOP_CHECK_EVERY: each keeps only its tokens up
    to its stop token, as the growing cache (which checks every step) gives."""
    steps = 2 * STOP_CHECK_EVERY + 5
    m = random_model(seed=1, n_ctx=steps + 4)
    prompts = torch.randint(0, 11, (6, 4), generator=torch.Generator().manual_seed(6))
    lengths = {}
    for stop in (0, 2, 10, 1):  # rows end at 20, 11, 4, 68, 11, 11 / ... / all at 1 / none ends
        plain = greedy_generate_batch(m, prompts, max_new_tokens=steps, stop_token=stop, static_cache=False)
        static = greedy_generate_batch(m, prompts, max_new_tokens=steps, stop_token=stop, static_cache=True)
        assert static == plain
        assert all(row[-1] == stop or len(row) == steps for row in static)
        lengths[stop] = sorted(len(row) for row in static)
    assert lengths[0][-1] > STOP_CHECK_EVERY and lengths[10] == [1] * 6 and lengths[1] == [steps] * 6


def test_running_out_of_position_ids() -> None:
    """Position IDs for fewer steps than asked: fine when every row has stopped by then (even
    between two checks), an error naming the token otherwise, on both paths."""
    m = random_model(seed=2)
    prompt = torch.tensor([[1, 2, 3]])
    first = greedy_generate_batch(m, prompt, max_new_tokens=1)[0][0]
    for static in (False, True):
        ids = torch.arange(3, 8)[None]  # IDs for 5 fed tokens: 6 tokens can be generated
        assert greedy_generate_batch(m, prompt, new_pos_ids=ids, max_new_tokens=50, stop_token=first,
                                     static_cache=static) == [[first]]
        never = next(t for t in range(11) if t not in full_forward_greedy(m, [1, 2, 3], 6))
        with pytest.raises(ValueError, match="no position ID given for generated token 6"):
            greedy_generate_batch(m, prompt, new_pos_ids=ids, max_new_tokens=50, stop_token=never, static_cache=static)


def test_out_of_range_ids_and_hooks_use_the_checked_path() -> None:
    """An out-of-range position ID is refused at the step that uses it, not silently looked up
    (the static path skips the checks only after checking every ID), and hooks see every step."""
    m = random_model(seed=2)
    ids = torch.tensor([[3, 4, 64]])
    with pytest.raises(ValueError, match="outside the position table"):
        greedy_generate_batch(m, torch.tensor([[1, 2, 3]]), new_pos_ids=ids, static_cache=True)
    with pytest.raises(ValueError, match="outside the position table"):  # a single ID is checked too
        greedy_generate_batch(m, torch.tensor([[1, 2, 3]]), new_pos_ids=torch.tensor([[64]]), static_cache=True)
    seen: list[int] = []
    m.add_hook("blocks.0.hook_resid_pre", lambda x, hook: seen.append(x.shape[1]))
    greedy_generate_batch(m, torch.tensor([[1, 2, 3]]), max_new_tokens=5, static_cache=True)
    assert seen == [3, 1, 1, 1, 1]


def test_static_cache_masks_what_is_not_written_and_the_window() -> None:
    """visible() is the rule of visibility_mask for the query at the filled position; the buffers
    are zero beyond the filled part, and append writes there."""
    cache = KVCache()
    k = torch.randn(1, 2, 4, 3, dtype=torch.float64)
    cache.append(0, k, k + 1)
    static = StaticKVCache(cache, capacity=10)
    assert int(static.filled) == 4 and static.capacity == 10 and static.filled.dtype == torch.long
    for window in (None, 1, 2, 5):
        assert torch.equal(static.visible(window), visibility_mask(4, 5, 0, 10, window, None))
    assert static._k[0][:, :, 4:].abs().sum() == 0 and static._v[0][:, :, 4:].abs().sum() == 0
    new = torch.full((1, 2, 1, 3), 7.0, dtype=torch.float64)
    keys, values = static.append(0, new, -new)
    assert torch.equal(keys[:, :, :4], k) and torch.equal(keys[:, :, 4:5], new) and torch.equal(values[:, :, 4:5], -new)
    assert keys[:, :, 5:].abs().sum() == 0
    static.advance()
    assert int(static.filled) == 5 and static.visible(2)[0].tolist() == [False] * 4 + [True, True] + [False] * 4
    with pytest.raises(ValueError, match="one position per step, not 4$"):
        static.append(0, k, k)
    with pytest.raises(ValueError, match="below the 4 positions"):
        StaticKVCache(cache, capacity=3)
    assert int(StaticKVCache(cache, capacity=4).filled) == 4  # room for no step: allowed
    with pytest.raises(ValueError, match="^a static cache starts from a filled KVCache"):
        StaticKVCache(KVCache(), capacity=4)
    with pytest.raises(ValueError, match="give the position IDs"):
        static.length


def test_undecided_step_ends_a_row_on_the_static_path() -> None:
    """A layer that attends uniformly and an unembedding that ties two tokens: the first step is
    undecided and the row is [UNDECIDED]."""
    m = Transformer(TransformerConfig(d_vocab=3, d_model=2, n_layers=1, n_heads=1, d_head=2, d_mlp=0, n_ctx=8,
                                      dtype="float64"))
    with torch.no_grad():
        m.unembed.W_U.zero_()
    assert greedy_generate_batch(m.eval(), torch.tensor([[0, 1]]), max_new_tokens=4, static_cache=True) == [[UNDECIDED]]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("overrides", [{}, WINDOWED])
def test_cuda_graph_steps_equal_full_forward_greedy(overrides: dict) -> None:
    m = random_model(**overrides)
    prompts = torch.randint(0, 11, (3, 5), generator=torch.Generator().manual_seed(5))
    expected = [full_forward_greedy(m, prompt, 40) for prompt in prompts.tolist()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a step that could not be recorded warns and goes on eagerly
        assert greedy_generate_batch(m.cuda(), prompts, max_new_tokens=40, cuda_graph=True) == expected


def test_static_steps_stay_on_the_masked_dense_path_beyond_the_dense_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """One query over a long buffer is O(capacity) on the dense path; the long kernels know
    nothing of the buffer's unwritten part, so the static steps must not switch to them."""
    import lengthgen.model as model_module

    m = random_model(**WINDOWED)
    prompts = torch.randint(0, 7, (2, 5), generator=torch.Generator().manual_seed(7))
    expected = greedy_generate_batch(m, prompts, max_new_tokens=20, static_cache=False)
    monkeypatch.setattr(model_module, "DENSE_ENTRIES_LIMIT", 4)
    assert greedy_generate_batch(m, prompts, max_new_tokens=20, static_cache=True) == expected


def static_caches_built(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records the capacity of every StaticKVCache that decoding builds from now on."""
    import lengthgen.decode as decode

    built: list[int] = []

    class Recorded(StaticKVCache):
        def __init__(self, cache: KVCache, capacity: int) -> None:
            built.append(capacity)
            super().__init__(cache, capacity)

    monkeypatch.setattr(decode, "StaticKVCache", Recorded)
    return built


def test_which_models_and_ids_take_the_static_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The static path skips the per-step ID checks, so it is taken only where every fed token and
    position ID is in range (and no hook would miss the steps of a recorded graph): a model with one
    layer or two, position IDs from 0, NoPE with IDs beyond its table; not with more output classes
    than input tokens, out-of-range IDs, a hook, no layer, or the CPU default."""
    built = static_caches_built(monkeypatch)
    prompt = torch.tensor([[1, 2, 3]])

    def path(m: Transformer, **kwargs) -> str:
        before = len(built)
        greedy_generate_batch(m, prompt, **{"max_new_tokens": 4, "static_cache": True, **kwargs})
        return "static" if len(built) > before else "growing"

    assert path(random_model(n_layers=1)) == "static" and built[-1] == 3 + 3
    assert path(random_model(n_layers=2), new_pos_ids=torch.tensor([[0, 0, 63]])) == "static" and built[-1] == 3 + 3
    assert path(random_model(positional="none", n_ctx=4), max_new_tokens=9) == "static"
    # IDs out of the table that no step reaches (2 tokens use one fed ID): checked, never used
    assert path(random_model(), new_pos_ids=torch.tensor([[3, -1]]), max_new_tokens=2) == "growing"
    assert path(random_model(), new_pos_ids=torch.tensor([[3, 64]]), max_new_tokens=2) == "growing"
    assert path(random_model(), new_pos_ids=torch.tensor([[3, 63]]), max_new_tokens=2) == "static"
    assert path(random_model(), static_cache=None) == "growing"  # the CPU's default
    assert path(random_model(d_vocab_out=12)) == "growing"
    assert path(Transformer(TransformerConfig(d_vocab=5, d_model=2, n_layers=0, n_ctx=8))) == "growing"
    m = random_model()
    m.add_hook("blocks.1.mlp.hook_post", lambda x, hook: x)
    assert path(m) == "growing"
    assert greedy_generate(random_model(), [1, 2, 3], max_new_tokens=4, static_cache=True) and built[-1] == 6


def test_more_output_classes_than_tokens_are_checked_when_fed_back() -> None:
    """An output class that is no input token is refused when fed back, on either path, never
    looked up out of the embedding's range."""
    m = random_model(d_vocab_out=12)
    with torch.no_grad():
        m.unembed.b_U[11] = 1e6  # token 11 always wins
    for static in (False, True):
        with pytest.raises(ValueError, match="token id out of range"):
            greedy_generate_batch(m, torch.tensor([[1, 2]]), max_new_tokens=3, static_cache=static)


def test_the_margin_reaches_the_static_steps() -> None:
    """Every margin gives the same rows on both paths; some margin ends a row at an undecided step
    after the first generated token (so the steps' own decisions are compared)."""
    m = random_model(seed=2, attn_windows=[3, None])
    prompts = torch.randint(0, 11, (4, 5), generator=torch.Generator().manual_seed(8))
    late_undecided = False
    for margin in (0.0, 0.3, 1.0):  # at 1.0 a row ends undecided at its 9th token
        plain = greedy_generate_batch(m, prompts, max_new_tokens=12, margin=margin, static_cache=False)
        assert greedy_generate_batch(m, prompts, max_new_tokens=12, margin=margin, static_cache=True) == plain
        late_undecided |= any(row[-1] == UNDECIDED and len(row) > 1 for row in plain)
    assert late_undecided


def test_a_growing_cache_grows_past_its_first_buffer() -> None:
    """A one-token prompt (a first buffer of 16 positions) with a head dimension of 32, decoded for
    40 steps: the buffer must grow whenever the positions outrun it."""
    m = random_model(d_head=32, n_ctx=64)
    prompt = [4]
    assert greedy_generate(m, prompt, max_new_tokens=40, static_cache=False) == full_forward_greedy(m, prompt, 40)
