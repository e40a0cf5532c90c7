"""examples/sampled_vs_adversarial.py: sampling calls both models exact, the search breaks one."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from cli_checks import assert_one_line_error

PATH = Path(__file__).resolve().parents[1] / "examples" / "sampled_vs_adversarial.py"


def example():
    spec = importlib.util.spec_from_file_location("sampled_vs_adversarial", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_search_breaks_the_paper_rule_model_and_not_the_sink_one(capsys):
    """At 30 digits, 20 samples and 2 descents (about 12 s): both models are 100% on the samples;
    both descents end wrong on the paper-rule model (measured margin −23.4, at the top carry) and
    none on the sink model (measured 15.0); each printed pair is wrong by greedy decoding."""
    assert example().main(["--digits", "30", "--starts", "2", "--samples", "20"]) == 0
    paper, *pairs, sink = capsys.readouterr().out.strip().splitlines()
    assert "100.0% of 20 sampled" in paper and "2 of 2 descents wrong" in paper
    assert len(pairs) == 2 and all("greedy decoding writes" in line for line in pairs)
    assert "100.0% of 20 sampled" in sink and "0 of 2 descents wrong" in sink


def test_bad_input_is_one_line(capsys):
    assert_one_line_error(example().main, ["--digits", "101"], "python examples/sampled_vs_adversarial.py",
                          "--digits must be 1-100", capsys)
    assert_one_line_error(example().main, ["--starts", "x"], "python examples/sampled_vs_adversarial.py",
                          "expected a whole number", capsys)
