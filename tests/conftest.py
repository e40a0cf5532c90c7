"""Shared test settings: hypothesis profiles, the `gpu` marker, thread counts.

Profiles: `dev` (default locally),
`ci` (hypothesis' built-in profile, auto-loaded when CI is set, extended here) and `gpu`.
"""
from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

sys.set_int_max_str_digits(0)  # Python >= 3.11 refuses int<->str beyond 4300 digits
os.environ.setdefault("MPLBACKEND", "Agg")

settings.register_profile("dev", deadline=None, max_examples=20)
settings.register_profile("ci", parent=settings.get_profile("ci"), deadline=None, max_examples=25)
settings.register_profile(
    "gpu",
    parent=settings.get_profile("ci"),
    deadline=None,
    max_examples=50,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_configure(config: pytest.Config) -> None:
    import torch

    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)


@pytest.fixture(autouse=True, scope="module")
def _module_cache_per_session(request: pytest.FixtureRequest) -> None:
    """A test module's ``CACHE`` dict (certificate tables shared by its tests) starts empty in every
    pytest session: bench/mutate.py runs many sessions in one process (forked workers, ``--recheck``),
    and tables computed by the code of an earlier session would hide a change in the code under test."""
    cache = getattr(request.module, "CACHE", None)
    if isinstance(cache, dict):
        cache.clear()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # bench/mutate.py: run the tests in the order its part lists them (cheap, sharp ones first), so that
    # a killed mutant stops at its first failing test early (mutmut passes them in no fixed order)
    order = os.environ.get("LENGTHGEN_TEST_ORDER")
    if order:
        prefixes = order.split("\n")
        items.sort(key=lambda item: next((i for i, p in enumerate(prefixes) if item.nodeid.startswith(p)), len(prefixes)))
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="CUDA not available")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
