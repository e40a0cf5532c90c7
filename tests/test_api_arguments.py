"""The Python API as a user calls it: a wrong argument is a TypeError or ValueError that names the
argument and what is allowed, raised before anything large is allocated."""
from __future__ import annotations

import pytest

import constructions.copying as copying
import constructions.multiplication as multiplication
from constructions.addition import add, add_many, build_model
from lengthgen.resources import ResourceError


@pytest.fixture(scope="module")
def model():
    return build_model(n_digits=3)[0]


@pytest.mark.parametrize("build", [build_model, multiplication.build_model,
                                   lambda **kw: copying.build_model("copy", **kw)], ids=["addition", "mult", "copy"])
@pytest.mark.parametrize("kwargs, error, message", [
    (dict(n_digits=2.5), TypeError, "n_digits must be a whole number (int), got 2.5 of type float"),
    (dict(n_digits="10"), TypeError, "n_digits must be a whole number (int), got '10' of type str"),
    (dict(n_digits=True), TypeError, "n_digits must be a whole number (int), got True"),
    (dict(d_model=40.0), TypeError, "d_model must be a whole number"),
    (dict(n_digits=3, dtype="float8"), ValueError, "dtype must be one of float32, float64, float16, bfloat16"),
    (dict(n_digits=3, dtype="int32"), ValueError, "dtype must be one of"),
    (dict(n_digits=3, device="tpu"), ValueError, "unknown device 'tpu': choose cpu or cuda"),
])
def test_build_model_names_the_bad_argument(build, kwargs, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        build(**kwargs)


def test_cuda_without_cuda_is_a_value_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="CUDA is not available"):
        build_model(n_digits=3, device="cuda")


def test_a_position_table_beyond_memory_is_refused_before_allocating(monkeypatch):
    from lengthgen import resources

    monkeypatch.setattr(resources, "available_bytes", lambda: 8 * 10**9)
    with pytest.raises(ResourceError, match="position table of 1000000000003 rows"):
        build_model(n_digits=10**12)


@pytest.mark.parametrize("a, b, error, message", [
    (True, 3, TypeError, "a must be a non-negative int or a string of decimal digits, got True of type bool"),
    (2.5, 1, TypeError, "a must be a non-negative int or a string of decimal digits, got 2.5"),
    (1, None, TypeError, "b must be a non-negative int"),
    (-1, 2, ValueError, "a is negative; only non-negative integers are allowed"),
    ("12x", 2, ValueError, "a has a non-digit character 'x'"),
])
def test_add_names_the_bad_operand(model, a, b, error, message):
    with pytest.raises(error, match=message):
        add(model, a, b)
    with pytest.raises(error, match=message):
        add_many(model, [(a, b)])


@pytest.mark.parametrize("wrong, hint", [(None, "got NoneType"), ("pair", "unpack it")])
def test_add_and_multiply_need_a_model(model, wrong, hint):
    bad = (model, {}) if wrong == "pair" else wrong
    with pytest.raises(TypeError, match=f"model must be a lengthgen Transformer, .*{hint}"):
        add(bad, 1, 2)
    with pytest.raises(TypeError, match=f"model must be a lengthgen Transformer, .*{hint}"):
        multiplication.multiply(bad, 1, 2)


def test_multiplication_build_model_without_arguments_multiplies_ten_digit_numbers():
    mult, meta = multiplication.build_model()
    assert meta["max_digits"] == 10
    a = 9_876_543_210
    assert multiplication.multiply(mult, a, 97) == a * 97
