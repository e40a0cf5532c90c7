"""Proposition 5.2's search on the multiplication construction (docs/proposition-5-2.md). The
construction's leak bounds are proven by its certificate (tests/test_multiplication_certify.py)."""
from __future__ import annotations

from multiplication_checks import model_for


def test_proposition_5_2_search_distinguishes_the_construction_and_fools_its_nope_twin() -> None:
    """The construction (coupled IDs, 3 layers) tells every permutation pair of 2-digit prompts
    apart; the same weights without positions — here cut to one layer, Proposition 5.2's setting —
    are fooled."""
    from constructions.copying import nope_twin
    from constructions.nope.search import coupled_pos_ids, find_counterexample, search

    model, _ = model_for(n_digits=2)
    report = search(model, "multiplication_nx2", 2, pos_ids_fn=coupled_pos_ids("multiplication_nx2", start=2))
    assert report.mode == "exhaustive" and report.certificate is None and report.pairs_compared > 0
    twin = nope_twin(model)
    twin.blocks = twin.blocks[:1]
    twin.cfg.n_layers = 1
    cert = find_counterexample(twin, "multiplication_nx2", 2)
    assert cert.verify(twin) and sorted(cert.prompt_a.text) == sorted(cert.prompt_b.text)
