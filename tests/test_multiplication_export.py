"""``python -m constructions.multiplication export``: the N×2 construction as an ordinary checkpoint
that multiplies like Python integers once reloaded, names its heads, and refuses bad input in one line."""
from __future__ import annotations

import random

import torch

from constructions.multiplication import build_model, multiply_many
from constructions.multiplication.cli import main as cli_main
from constructions.multiplication.export import export
from lengthgen.runs import head_roles, load_trained, read_json


def test_the_reloaded_checkpoint_multiplies_like_python(tmp_path):
    out = export(tmp_path / "mul", n_digits=9)
    model, notes, _ = load_trained(out)
    assert (notes["task"], notes["positions"], notes["kind"]) == ("multiplication_nx2", "coupled", "construction")
    built, _ = build_model(n_digits=9)
    assert all(torch.equal(p, q) for p, q in zip(model.state_dict().values(), built.state_dict().values()))
    rng = random.Random(7)
    pairs = [(rng.randrange(10 ** (n - 1), 10**n), rng.randrange(100)) for n in (1, 2, 5, 9) for _ in range(25)]
    assert multiply_many(model, pairs) == [a * b for a, b in pairs]
    roles = head_roles(model)
    assert roles is not None and len(roles) == 8 and roles[(1, 0)] == "b_0" and roles[(1, 2)] == "a_{i+1}"
    assert {layer for layer, _ in roles} == {0, 1}  # layer 3 has no attention
    assert read_json(out / "run.json")["config"]["max_digits"] == 9


def test_export_command_and_its_bad_input(tmp_path, capsys):
    target = tmp_path / "mul"
    assert cli_main(["export", str(target), "--digits", "4"]) == 0
    assert "wrote" in capsys.readouterr().out
    for argv, message in [(["export", str(target)], "already exists"), (["export"], "required"),
                          (["export", str(tmp_path / "x"), "--digits", "0"], "at least 1"),
                          (["export", str(tmp_path / "y"), "--d-model", "20"], "d_model must be at least 33")]:
        assert cli_main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and "Traceback" not in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mul"]
