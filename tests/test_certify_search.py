"""The smallest certified M is real: it works on adversarial inputs
through the real model, and half of it fails there."""
from __future__ import annotations

import pytest
import torch

from constructions.addition import START_ID, build_model
from constructions.addition.certify.margins import certify
from constructions.addition.certify.search import smallest_sharpness, with_sharpness
from lengthgen.decode import decided_argmax
from lengthgen.tasks import ADDITION


def adversarial(n: int) -> list[tuple[str, str]]:
    """Carry chain, all 9s, alternating 9/0 (PRE_SUM jumps 18 <-> 0), all zeros."""
    alt = ("90" * n)[:n]
    return [("9" * n, "0" * (n - 1) + "1"), ("9" * n, "9" * n), (alt, alt), ("0" * n, "0" * n)]


def exact_on(model, n: int) -> list[bool]:
    """Teacher-forced decided argmax of the real model vs the digits of the Python integer a + b."""
    out = []
    for a, b in adversarial(n):
        inst = ADDITION.instance(a, b, start=START_ID)
        want = [ADDITION.vocabulary[ch] for ch in str(int(a) + int(b)).zfill(n + 1)[::-1]] + [ADDITION.EOS]
        with torch.inference_mode():
            logits = model(torch.tensor(inst.tokens[:-1])[None], torch.tensor(inst.pos_ids[:-1])[None],
                           logits_from=inst.prompt_len - 1)
        out.append(decided_argmax(logits[0]).tolist() == want)  # ties and near-ties are not exact
    return out


def test_with_sharpness_equals_build_model() -> None:
    model, _ = build_model(n_digits=20, d_model=27, dtype="float32")
    other, _ = build_model(n_digits=20, d_model=27, dtype="float32", M=3.21)
    got = with_sharpness(model, 3.21).state_dict()
    for name, tensor in other.state_dict().items():
        assert torch.equal(got[name], tensor), name


@pytest.mark.parametrize("n, d, dtype", [(30, 27, "float32"), (6, 23, "float64")])
def test_smallest_M_works_and_half_of_it_fails(n: int, d: int, dtype: str) -> None:
    model, meta = build_model(n_digits=n, d_model=d, dtype=dtype)
    search = smallest_sharpness(model, n, meta["M"], dtype, rel_tol=5e-3)
    assert search.M is not None and search.M_fail < search.M <= meta["M"]
    assert search.M - search.M_fail <= 5e-3 * search.M
    assert search.fail_reason == "leak"
    assert certify(build_model(n_digits=n, d_model=d, dtype=dtype, M=search.M)[0], n, dtype).passed
    assert not certify(build_model(n_digits=n, d_model=d, dtype=dtype, M=search.M_fail)[0], n, dtype).passed
    assert all(exact_on(build_model(n_digits=n, d_model=d, dtype=dtype, M=search.M)[0], n))
    assert not all(exact_on(build_model(n_digits=n, d_model=d, dtype=dtype, M=search.M / 2)[0], n))
