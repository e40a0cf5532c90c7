"""Mutation testing of the proof code, one part at a time: ``make mutate PART=interval``
(docs/certificate.md, "Mutation testing").

mutmut (the ``mutate`` extra) changes one operator, constant or argument of a function at a time
(a *mutant*) and runs the part's tests against it. A mutant that no test notices (*survived*) is
either a gap in the tests or needs no test: equivalent (no behaviour can change), below the
resolution of any test, or the same on the CPU (the reason is written down in
``bench/results/mutation/equivalent.txt``). Each part has its own short test
selection, so that a part runs in minutes on two CPU cores; mutmut runs, for each mutant, only the
selected tests that call the mutated function, and gives each mutant a time limit of
``timeout_multiplier`` times those tests' duration plus ``timeout_constant`` seconds.

Writes ``bench/results/mutation/PART.md``: the counts (killed / survived / no tests / timeout),
the wall time, and every mutant that was not killed (file:line and the diff), equivalent or open.
``no tests``: no selected test calls the mutated function at all.

mutmut copies ``src``, ``constructions``, ``rasp``, ``docs``, ``README.md`` and ``Makefile`` (the constants and references tests read them) and ``checkpoints`` into ``mutants/`` (scratch, git-ignored) and
reads its settings from a ``setup.cfg`` that this script writes for the run and removes after it.
"""
from __future__ import annotations

import argparse
import ast
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "mutation"
EQUIVALENTS = RESULTS / "equivalent.txt"
CONFIG = ROOT / "setup.cfg"
MARK = "# written by bench/mutate.py for one run; removed after it"


@dataclass(frozen=True)
class Part:
    files: tuple[str, ...]
    tests: tuple[str, ...]
    # forkserver: a worker forked from mutmut's main process inherits torch's thread pool and hangs
    # once a test runs a torch kernel; "fork" is faster and safe where the tests do no torch work, or
    # with OMP_NUM_THREADS=1 (``run`` sets it for "fork"): then torch starts no pool to inherit
    isolation: str = "forkserver"
    # where one file is split between parts: mutmut's names (fnmatch patterns) of this part's
    # mutants; () is every mutant of its files. tests/test_mutation_parts.py checks that every
    # function of every mutated file is in exactly one part
    mutants: tuple[str, ...] = ()

    def holds(self, mutant: str) -> bool:
        return not self.mutants or any(fnmatch.fnmatchcase(mutant, p) for p in self.mutants)


def mutant_names(path: str, numbers: Iterable[int] = (1,)) -> list[str]:
    """mutmut's names of mutants ``numbers`` of each function and method of the file at ``path``
    (mutants of a function ``f`` of module ``m`` are ``m.x_f__mutmut_K``; of a method,
    ``m.xǁClassǁf__mutmut_K``)."""
    module = path.removeprefix("src/").removesuffix(".py").replace("/", ".")
    functions = []
    for node in ast.parse((ROOT / path).read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append(f"{module}.x_{node.name}")
        elif isinstance(node, ast.ClassDef):
            functions += [f"{module}.xǁ{node.name}ǁ{f.name}" for f in node.body
                          if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return [f"{f}__mutmut_{k}" for f in functions for k in numbers]


def unmatched_selection(name: str, patterns: list[str]) -> str | None:
    """Why ``--mutants patterns`` cannot be a run of part ``name`` (None when each pattern names a
    mutant of it): a misspelt pattern would run nothing, and one naming another part's function
    of a shared file would run mutants that this part's report leaves out. Mutant numbers 1 to
    999 of each function are tried, and every number written in a pattern."""
    for pattern in patterns:
        numbers = sorted(set(range(1, 1000)) | {int(k) for k in re.findall(r"\d+", pattern)})
        owners = [other for other, p in PARTS.items() for path in p.files
                  if any(p.holds(m) and fnmatch.fnmatchcase(m, pattern) for m in mutant_names(path, numbers))]
        if name not in owners:
            where = f"it names mutants of part {owners[0]}" if owners else "it names no mutant of any part"
            return f"--mutants {pattern!r} selects no mutant of part {name}: {where}"
    return None


def functions(module: str, *names: str, cls: str | None = None) -> tuple[str, ...]:
    """mutmut's name patterns of the mutants of these functions (or of these methods of ``cls``)."""
    return tuple(f"{module}.x{'ǁ' + cls + 'ǁ' if cls else '_'}{n}__mutmut_*" for n in names)


# The tests of parts `proof` and `rounding` (src/lengthgen/proof/: the attention bound, 666 mutants,
# and the float terms, 613, split so that each runs in about an hour on two shared cores), in the
# order they run (``run`` passes it to tests/conftest.py; mutmut's is arbitrary): the unit tests with
# exact oracles first, then certificates of small built models, about 6 s in all. The whole of
# tests/test_certify_margins.py (27 s, its 20000-digit case alone 5 s) would make each surviving
# mutant cost half a minute.
PROOF_TESTS = (
    ("tests/test_proof_mutants.py", "tests/test_certify_constants.py")
    + tuple(f"tests/test_certify_structure.py::test_{t}" for t in (
        "two_ids_with_one_key_vector_fail", "a_key_coordinate_with_too_many_values_fails",
        "key_vectors_spanning_more_than_2_to_the_62_fail", "an_attended_id_that_depends_on_the_query_digit_fails",
        "models_outside_the_covered_shape_fail"))
    + tuple(f"tests/test_certify_margins.py::test_{t}" for t in (
        "fails_when_a_position_code_is_perturbed", "fails_hardmax_when_the_output_scale_is_perturbed",
        "passes_for_the_built_model[1-21-float32]"))
    + ("tests/test_copying_certify.py::test_margins_pass_for_built_models[float32-copy]",
       "tests/test_certify_margins.py::test_an_overflowing_float_term_fails_instead_of_passing")
    + tuple(f"tests/test_certify_bounds_measured.py::test_{t}" for t in (
        "printed_bounds_contain_the_float64_measurement[float32-built]",
        "float_terms_contain_the_float32_movement[built]", "a_narrow_readout_margin_carries_every_float_term"))
)

# The tests of part `addition` (the Theorem 5.1 certificate: 1294 mutants), cheap and sharp first:
# PASS at one digit, FAIL for each reason on a broken model, the bounds against the rounding
# emulation (within 10x of it: a bound made smaller or larger dies) and against the float64 forward
# pass of the built float32 model, about 9 s in all under load. The other tests of
# tests/test_certify_bounds_measured.py (the narrow readout margin, the float32 movement, the
# tilted model, the smallest-M cases: 2-7 s each) and of tests/test_certify_margins.py (the
# 20000-digit case, the bfloat16 and float64 repeats) would make each of some 300 surviving mutants
# cost twice as much; ``--recheck`` runs the survivors against them.
ADDITION_TESTS = (
    tuple(f"tests/test_certify_margins.py::test_{t}" for t in (
        "passes_for_the_built_model[1-21-float32]", "fails_hardmax_when_the_output_scale_is_perturbed",
        "fails_when_a_position_code_is_perturbed", "layout_matches_the_task_format",
        "an_overflowing_float_term_fails_instead_of_passing", "bounds_dominate_emulated_activations[2.5-float32-True]",
        "fails_with_leak_when_M_is_too_small[real]", "fails_spread_when_the_sink_key_is_perturbed"))
    + ("tests/test_certify_bounds_measured.py::test_printed_bounds_contain_the_float64_measurement[float32-built]",
       # written for the first run's survivors (wrong models the float64 pass exposes, classes by hand), 13 s
       "tests/test_certify_addition_mutants.py",
       # written for the fresh run's survivors (the FFN tables against oracles, the verdicts, the classes and
       # caches with a positional effect), about 10 s
       "tests/test_certify_ffn_tables.py", "tests/test_certify_addition_verdicts.py",
       "tests/test_certify_addition_classes.py")
)

# The tests of the rasp parts: compiled models against the interpreter and plain-Python oracles.
# The first runs (docs/certificate.md) had tests/test_rasp_weights_compiler.py and _programs.py
# only (about 2.5 s); the others were written for their survivors (the documented scores and
# defaults, the interface, the MLPs, the magnitude guard: about 6 s; the analysis' refusals and
# limits, and its paths against the interpreter: about 5 s; affine forms and folding, the order
# of a lookup's inputs, an int equal to a float: about 1 s)
RASP_TESTS = ("tests/test_rasp_weights_guards.py", "tests/test_rasp_weights_compact.py",
              "tests/test_rasp_weights_heads.py", "tests/test_rasp_weights_api.py",
              "tests/test_rasp_weights_mlp.py",
              "tests/test_rasp_weights_precision.py", "tests/test_rasp_weights_limits.py",
              "tests/test_rasp_weights_compiler.py", "tests/test_rasp_weights_programs.py",
              "tests/test_rasp_weights_graph.py", "tests/test_rasp_weights_affine.py", "tests/test_rasp_weights_maxmin.py",
              "tests/test_rasp_weights_strides.py", "tests/test_rasp_weights_or_not.py",
              "tests/test_rasp_weights_shared_means.py", "tests/test_rasp_weights_compiler_paths.py",
              "tests/test_rasp_weights_order.py::test_order_widths_over_large_value_sets_count_exactly",
              "tests/test_rasp_weights_order.py::test_widths_count_by_bits_past_128_values",
              "tests/test_rasp_weights_scale.py::test_an_int_and_an_equal_float_select_each_other")
# the binary-code equalities on small inputs (the 15 000-token compile, 5 s, and the 200-position
# sorts of tests/test_rasp_weights_order.py, 1-4 s, are left to ``--recheck``)
RASP_TESTS += tuple(f"tests/test_rasp_weights_binary.py::test_{t}" for t in (
    "the_threshold_is_the_documented_literal", "minus_one_does_not_alias_the_largest_index",
    "the_threshold_is_where_beta_times_the_code_squared_reaches_2_to_the_40",
    "float32_weights_compare_bits_from_terms_of_2_to_the_11", "program_p_in_float32_is_exact",
    "a_selector_width_compares_ordinal_codes_by_bits_at_any_size",
    "an_atom_with_a_side_that_cannot_carry_bits_keeps_the_quadratic_form",
    "an_equality_of_large_tokens_compiles_exactly_at_the_default_threshold",
    "an_aggregate_copies_the_bits_of_its_value_and_of_its_default",
    "measured_leak_of_a_binary_equality_is_below_the_documented_bound",
    "program_p_with_binary_codes_matches_the_simulator", "terms_exactly_at_the_threshold_compare_bits",
    "an_atom_below_the_threshold_does_not_stop_the_next_one"))
# the compile options onehot_max and binary_from, and where codes of values that are not integers go
RASP_TESTS += tuple(f"tests/test_rasp_weights_codes.py::test_{t}" for t in (
    "every_program_equals_the_interpreter_with_compile_options",
    "tracr_library_programs_equal_the_interpreter_with_compile_options",
    "onehot_max_must_be_a_count", "values_that_are_not_integers_get_codes_below_every_integer",
    "binary_from_zero_puts_every_equality_that_can_on_bits"))
# flat tables (plateau): the tables in rationals, a moved input, the refusals (under 1 s)
RASP_TESTS += ("tests/test_rasp_weights_plateau.py",)

# The tests of part `multiplication` (the N×2 certificate), cheap and sharp first: PASS at N = 2, every
# printed bound against the float64 forward pass at N = 2 (blunt M and M near the smallest certified),
# FAIL where that pass is wrong, FAIL for each reason (hardmax, stability/readout, each structure check),
# the configurations against Python integers and the overflowing enclosures, then the tests written for
# the survivors of the first runs (step 3 on a one-coordinate residual, the table split, the configurations
# of the low answer positions against all 10 000 real inputs, the binding unit of check): about 16 s in all
# under load. The N = 5, d = 69 cases (the built model, the smallest-M search, M near it: 15-20 s to build
# the MLP tables of the class that reads the whole window) and the unit reading five digits (10 s)
# would make each surviving mutant cost a minute, and the eight bias edits of
# tests/test_multiplication_certify_mutants.py take 14 s; ``--recheck`` runs the survivors against them.
_SOUND = "tests/test_multiplication_certify_soundness.py::test_"
MULTIPLICATION_TESTS = (
    tuple(f"tests/test_multiplication_certify.py::test_{t}" for t in (
        "the_unbroken_small_model_passes", "fails_when_a_layer2_key_weight_is_halved",
        "fails_when_a_layer3_ramp_moves_into_the_attainable_range", "fails_when_M_is_too_small",
        "fails_with_structure_when_the_chain_does_not_apply"))
    + (f"{_SOUND}every_printed_bound_contains_the_measured_quantity[2-9.0]",
       f"{_SOUND}every_printed_bound_contains_the_measured_quantity[2-6.4]",
       f"{_SOUND}fails_where_the_forward_pass_is_wrong[2-3.0-pair1]")
    + tuple(f"{_SOUND}each_structure_check_fails_its_broken_model[{c}]" for c in (
        "layer1_mlp_writes", "extra_layer3_head", "layer1_values_read_the_digit", "b0_head_ignores_its_keys",
        "a_head_prefers_the_answer"))
    + ("tests/test_multiplication_certify.py::test_reachable_carries_are_those_of_schoolbook_multiplication",
       "tests/test_multiplication_certify.py::test_every_input_is_one_of_the_enumerated_configurations[1]",
       "tests/test_multiplication_certify.py::test_every_input_is_one_of_the_enumerated_configurations[2]",
       "tests/test_multiplication_certify_overflow.py",
       "tests/test_multiplication_certify.py::test_the_low_answer_positions_enumerate_exactly_the_configurations_of_real_inputs")
    + tuple(f"tests/test_multiplication_certify_mutants.py::test_{t}" for t in (
        "a_table_splits_exactly_into_its_constant_and_varying_coordinates",
        "configurations_share_a_group_where_their_layer3_inputs_round_to_one_grid_point",
        "a_hard_max_tie_between_two_logits_is_a_fail", "the_part_of_a_layer3_input_that_no_digit_changes_counts_once",
        "class_descriptions", "a_structure_fail_keeps_n_and_is_false",
        "a_layer3_unit_at_zero_in_the_hard_max_limit_fails_on_its_sign", "a_layer2_unit_that_reads_no_digit_still_counts",
        "every_layer2_unit_is_in_one_group", "the_table_of_classes_counts_the_configurations_of_the_low_answer_positions",
        "check_reports_the_binding_unit_and_logit_pair"))
)

# The tests of part `multiplication-chain` (margins.py and attention.py: 1153 mutants): the tests written for
# its first run's survivors first (about 13 s under load: every working head disguised with a score scale,
# biases and a moved first-token position row against a float64 softmax; the chain's classes, messages,
# slack and printed fields at N = 1 and N = 5; a disguised N = 1 model that must PASS), then those of part
# `multiplication`. The MLP-table cache across models (6 s) runs only in the full suite.
_CHAIN = "tests/test_multiplication_certify_chain.py::test_"
MULTIPLICATION_CHAIN_TESTS = (
    ("tests/test_multiplication_attention.py",)
    + tuple(f"{_CHAIN}{t}" for t in (
        "answer_positions_fall_into_the_classes_of_the_docs", "two_heads_reading_one_digit_add_their_terms",
        "the_position_table_must_hold_the_ids_up_to_s_plus_n_plus_2",
        "the_built_model_at_n5_has_the_classes_of_the_docs_and_rho_on_what_layer3_reads",
        "the_printed_certificate_of_the_one_digit_model", "slack_exactly_one_fails_and_the_message_names_the_binding_check",
        "cached_tables_are_not_reused_for_other_variables", "the_mlp_tables_key_changes_with_every_array_the_tables_read",
        "a_disguised_model_passes_and_is_right_everywhere"))
    + MULTIPLICATION_TESTS
)

# The tests of parts `trained` and `tail` (the certificate of trained 1-layer addition checkpoints,
# ``python -m lengthgen.certify``), cheap and exact first: the layer enclosures against mpmath and
# exact rationals, the affine tail against forward passes, the attention form against every free key
# assignment, then the certificate itself (the bound below the exhaustive accuracy of each committed
# checkpoint at one digit, near ties, the planted defect, the split over a wider window, the
# construction through the generic path, the command line): about 15 s in all; since the float32
# statement also its wiring and its steps against torch's float32 values (about 11 s), which the float
# branches of trained.py, trained_tables.py and trained_affine.py need (each broken by hand: killed there)
TRAINED_TESTS = (
    "tests/test_trained_fixed_form.py", "tests/test_trained_float_wiring.py", "tests/test_trained_float_steps.py", "tests/test_trained_float_stages.py",
    "tests/test_proof_layers.py", "tests/test_affine_tail.py", "tests/test_trained_attention_form.py",
    "tests/test_trained_mutants.py", "tests/test_trained_enclosures.py", "tests/test_log_length_attention.py",
    *(f"tests/test_certify_trained.py::test_{t}" for t in (
        "near_ties_within_the_decision_margin_are_not_proven", "affine_tail_encloses_forward_passes_with_pessimal_keys",
        "planted_defect_is_found_with_a_real_counterexample", "construction_proven_exact_through_the_generic_path",
        "committed_checkpoints_bound_below_exhaustive_accuracy",
        "widening_certifies_the_unproven_configurations_split_over_the_wider_window",
        "a_position_left_unproven_is_certified_again_with_a_wider_window", "cli_json_fields_and_counterexamples",
        "cli_bad_input_is_one_line", "cli_refuses_two_layers_and_corrupt_files")),
    "tests/test_certify_nonfinite.py::test_the_trained_model_certificate_refuses_a_non_finite_weight",
    "-m", "not slow",  # the 2-digit exhaustive case (7 s); it and the leaky construction (9 s) are for --recheck
)

PARTS = {
    "interval": Part(
        ("src/lengthgen/proof/interval.py",),
        ("tests/test_certify_interval.py", "tests/test_interval_mutants.py"),
        isolation="fork",
    ),
    "decode": Part(
        ("src/lengthgen/decode.py", "src/lengthgen/kv_cache.py"),
        (
            "tests/test_decode_mutants.py",
            "tests/test_decode_decided.py",
            "tests/test_static_decoding.py",
            "tests/test_model.py::test_kv_cache_decoding_equals_full_forward",
            "tests/test_model.py::test_greedy_generate_is_argmax_of_full_forward",
            "tests/test_model.py::test_decided_argmax_needs_a_margin",
            "tests/test_model.py::test_greedy_decoding_ends_at_an_undecided_step",
            "tests/test_addition_decided.py::test_a_bfloat16_near_tie_is_wrong_in_both_modes",
        ),
    ),
    # src/lengthgen/proof/: the attention bound (keys, attention: 666 mutants) and the float terms
    # (rounding: 613 mutants) are two parts, each of which runs in about an hour on two shared cores
    "proof": Part(
        ("src/lengthgen/proof/attention.py", "src/lengthgen/proof/keys.py"),
        PROOF_TESTS,
    ),
    "rounding": Part(("src/lengthgen/proof/rounding.py",),
                     ("tests/test_rounding_mutants.py", "tests/test_rounding_terms.py", *PROOF_TESTS)),
    "addition": Part(
        ("constructions/addition/certify/margins.py", "constructions/addition/certify/ffn.py"),
        ADDITION_TESTS,
        isolation="fork",  # safe with one OpenMP thread (``run`` sets it); forkserver imports torch per mutant
    ),
    # the N×2 certificate in two parts, each about an hour on two shared cores: the MLP tables and the
    # readout check (mlp.py: 946 mutants), and the chain with its attention bounds (1153 mutants)
    "multiplication": Part(
        ("constructions/multiplication/certify/mlp.py",),
        MULTIPLICATION_TESTS,
        isolation="fork",  # one OpenMP thread (``run`` sets it); the test modules' CACHE starts empty per session
    ),
    "multiplication-chain": Part(
        ("constructions/multiplication/certify/margins.py", "constructions/multiplication/certify/attention.py"),
        MULTIPLICATION_CHAIN_TESTS,
        isolation="fork",
    ),
    "copying": Part(
        ("constructions/copying/certify/margins.py",),
        # each under 1 s; the near_smallest and float32-movement cases of the bounds file run the
        # smallest-M search (0.5-0.7 s each): one of them is kept, for the tightness of leak and slack
        tuple(f"tests/test_copying_certify.py::test_{t}" for t in (
            "a_lowered_sink_key_fails", "a_removed_readout_margin_fails", "too_small_M_fails_with_leak",
            "margins_pass_for_built_models[real-copy]",
            "certified_attention_bound_contains_the_measured_deviation[copy]"))
        + tuple(f"tests/test_copying_certify_bounds.py::test_{t}" for t in (
            *(f"printed_bounds_contain_the_float64_measurement[{c}-built]"
              for c in ("copy-float64", "copy-float32", "reverse-float64", "reverse-float32")),
            "printed_bounds_contain_the_float64_measurement[copy-float32-near_smallest]",
            "the_spread_bound_is_tight_for_a_tilted_sink", "float_terms_contain_the_float32_movement[built]"))
        + tuple(f"tests/test_certify_structure.py::test_{t}" for t in (
            "two_ids_with_one_key_vector_fail", "a_key_coordinate_with_too_many_values_fails",
            "key_vectors_spanning_more_than_2_to_the_62_fail", "an_attended_id_that_depends_on_the_query_digit_fails",
            "more_free_digits_than_enumerated_fail", "models_outside_the_covered_shape_fail"))
        + ("tests/test_certify_constants.py::test_the_softmax_term_uses_the_promised_constants",
           "tests/test_copying_certify_mutants.py", "tests/test_copying_certify_two_heads.py",
           "tests/test_copying_certify_readout.py"),
    ),
    # the certificate of trained checkpoints in four parts, each under an hour on two shared cores
    # (one part of 2043 mutants ran 5061 s and was stopped before 389 of them): the argument at one
    # answer position (PositionCertifier's enclosures, about 580 mutants, each calling most of the
    # tests); the statement around it (the layout, the configurations of a window and their
    # probabilities, the widening, each position's verdict, the counterexamples: about 540); the
    # weights and the (token, ID) tables (trained_tables.py, 525); the affine forms after attention
    # (trained_affine.py, 650)
    "trained": Part(
        ("src/lengthgen/proof/trained.py",), TRAINED_TESTS, isolation="fork",
        mutants=functions("lengthgen.proof.trained", "__init__", "_fixed_slots", "_free_slots", "_window", "inputs",
                          "after_attention", "_tighten", "_head_constants", "fixed_mean", "_head", "_differences",
                          cls="PositionCertifier")),
    "trained-statement": Part(
        ("src/lengthgen/proof/trained.py", "src/lengthgen/proof/counterexamples.py"), TRAINED_TESTS, isolation="fork",
        mutants=(*functions("lengthgen.proof.trained", "carry_probability", "configurations", "_configurations",
                            "propagate", "refined_configurations"),
                 *functions("lengthgen.proof.trained", "certify", "_mass", cls="PositionCertifier"),
                 "lengthgen.proof.trained.xǁLayoutǁ*", "lengthgen.proof.counterexamples.*")),
    "trained-tables": Part(("src/lengthgen/proof/trained_tables.py",), TRAINED_TESTS, isolation="fork"),
    # the adversarial search beside the certificate (--attack, --no-proof): about 70 s per test run
    "attack": Part(("src/lengthgen/proof/attack.py",), ("tests/test_certify_attack.py",), isolation="fork"),
    "trained-affine": Part(("src/lengthgen/proof/trained_affine.py",), TRAINED_TESTS, isolation="fork"),
    # the float32 statement of the trained-model certificate: the formulas by hand and the kernels
    # measured (under 1 s), each step's widening exactly (1 s), each step against torch's float32
    # pass (10 s) and the whole statement against it (10 s)
    "trained-float": Part(("src/lengthgen/proof/trained_float.py",),
                          ("tests/test_trained_float_kernels.py", "tests/test_trained_float_wiring.py",
                           "tests/test_trained_float_stages.py", "tests/test_certify_trained_float.py"),
                          isolation="fork"),
    "tail": Part(("src/lengthgen/proof/affine.py", "src/lengthgen/proof/layers.py"),
                 ("tests/test_affine_tail_bounds.py", "tests/test_proof_layers_edges.py", *TRAINED_TESTS),
                 isolation="fork"),
    # the RASP -> weights compiler (rasp/weights/, about 2500 mutants) in three parts by file, each
    # under an hour on two shared cores: heads, residual layout and assembly (1094); MLPs, affine
    # maps and value sets (670); the analysis (779)
    **{name: Part(files, RASP_TESTS, isolation="fork") for name, files in (
        ("rasp-attention", ("rasp/weights/heads.py", "rasp/weights/layout.py", "rasp/weights/assemble.py")),
        ("rasp-mlp", ("rasp/weights/mlp.py", "rasp/weights/affine.py", "rasp/weights/values.py")),
        ("rasp-graph", ("rasp/weights/graph.py", "rasp/weights/selectors.py", "rasp/weights/order.py")))},
    # the compiler's magnitude guard (rasp/weights/precision.py, 150 mutants): each bound against
    # values worked out by hand (written for the first run's survivors), large integer values
    # refused or compiled exactly against the interpreter, the refusals' reasons and limits, and the
    # programs of the compiler tests, which must still compile (about 2 s)
    # the certificate of compiled programs (rasp/certify/): the PASS programs against the float64
    # forward pass and the interpreter, and one broken weight per check (about 1.5 s); since the
    # first run also the tests written for its survivors, one pair of files per module (heads,
    # scores, mlps, state, run: margins and spreads against the float64 pass, tight; the helpers
    # against exact rationals; about 5 s); program P's file (20 s) is for --recheck; the MLPs read
    # through a linear combination (linear_states.py) with their own file (about 2 s)
    "rasp-certify": Part(
        ("rasp/certify/state.py", "rasp/certify/heads.py", "rasp/certify/scores.py", "rasp/certify/mlps.py",
         "rasp/certify/linear_states.py", "rasp/certify/run.py"),
        ("tests/test_rasp_certify.py", "tests/test_rasp_certify_fails.py", "tests/test_rasp_certify_linear_states.py",
         *(f"tests/test_rasp_certify_{m}.py" for m in (
             "heads_selection", "heads_writes", "heads_bounds", "value_parts", "scores_helpers", "scores_mutants",
             "mlps_arith", "mlps_tables", "state_sources", "state_boxes", "run_checks", "run_readout")),
         # the float32 branches (about 9 s): rechecks with them killed 75 survivors of the third run
         "tests/test_rasp_certify_floats_contract.py", "tests/test_rasp_certify_float32.py"),
        isolation="fork"),
    # the float32 statement of rasp.certify: its bounds by hand (0.6 s), the contracts the end-to-end
    # tests cannot see (magnitudes against the invariant, group labels, the edges of the integer
    # shortcut and of the overflow check: about 1 s; written for the first run's survivors) and the
    # float32 certificates of compiled programs against their float32 forward pass (about 8 s)
    "rasp-floats": Part(
        ("rasp/certify/floats.py",),
        ("tests/test_rasp_certify_floats.py", "tests/test_rasp_certify_floats_contract.py",
         "tests/test_rasp_certify_float32.py"),
        isolation="fork"),
    # the CSR kernels for mostly-zero weights (lengthgen.sparse): equal to the dense products, never
    # under autograd, stale copies refused, every matrix multiplied sparse (about 5 s)
    "sparse": Part(("src/lengthgen/sparse.py",), ("tests/test_sparse_kernels.py",)),
    "rasp-precision": Part(
        ("rasp/weights/precision.py",),
        ("tests/test_rasp_weights_precision_bounds.py", "tests/test_rasp_weights_precision.py",
         "tests/test_rasp_weights_limits.py", "tests/test_rasp_weights_compiler.py"),
        isolation="fork"),
}


def write_config(part: Part) -> None:
    if CONFIG.exists() and not CONFIG.read_text().startswith(MARK):
        sys.exit(f"{CONFIG.name} exists and was not written by this script; not touching it")
    lines = [MARK, "[mutmut]", "source_paths =", "    src", "    constructions", "    rasp", "also_copy =", "    docs", "    checkpoints", "    README.md", "    Makefile", "only_mutate ="]
    lines += [f"    {f}" for f in part.files]
    lines += ["pytest_add_cli_args_test_selection ="] + [f"    {t}" for t in part.tests]
    lines += ["pytest_add_cli_args =", "    -p", "    no:cacheprovider"]
    lines += [f"process_isolation = {part.isolation}", "timeout_multiplier = 10.0", "timeout_constant = 10.0", ""]
    CONFIG.write_text("\n".join(lines))


UNRUN = ("not checked", "check was interrupted by user")  # mutmut's statuses of a mutant never run


def _selected(name: str, patterns: list[str] | None) -> bool:
    return patterns is None or any(fnmatch.fnmatchcase(name, p) for p in patterns)


def last_selection(name: str) -> list[str] | None:
    """The ``--mutants`` patterns of the last run of part ``name`` in mutants/ (None: a full run), so
    that ``--recheck`` and ``--report-only`` after a selected run stay within its mutants and write
    ``PART-selected.md``, never the full part's report."""
    path = ROOT / "mutants" / f"{name}.selected"
    return path.read_text().split("\n") if path.exists() else None


def collect(part: Part, selected: list[str] | None = None) -> list[Mutant]:
    """Every mutant of ``part`` in the last run (with ``selected``, those whose names match one of
    the patterns) with its status, and the diff of those run and not killed (mutmut 3.8's own functions, in this
    process: one ``mutmut show`` per mutant would start Python each time)."""
    from mutmut import configuration
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.file_utils import walk_mutatable_files

    configuration.reset_config()
    mutants = []
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        for key, code in data.exit_code_by_key.items():
            if not (part.holds(key) and _selected(key, selected)):
                continue
            m = Mutant(key, status_by_exit_code[code])
            if m.status != "killed" and m.status not in UNRUN:
                m.diff = get_diff_for_mutant(key, path=path)
                locate(m)
            mutants.append(m)
    return mutants


@dataclass
class Mutant:
    name: str
    status: str
    diff: str = ""
    path: str = ""
    function: str = ""
    line: int = 0

    @property
    def change(self) -> list[str]:
        """The diff's changed lines ('- old', '+ new'), stripped: the mutant's identity."""
        return [f"{s[0]} {s[1:].strip()}" for s in self.diff.splitlines()
                if s[:1] in "+-" and not s.startswith(("---", "+++"))]


def function_name(mutant: str) -> str:
    """``pkg.mod.xǁIvǁ__add____mutmut_3`` -> ``Iv.__add__``; ``pkg.mod.x_gamma__mutmut_1`` -> ``gamma``."""
    local = re.sub(r"__mutmut_\d+$", "", mutant.rsplit(".", 1)[1])
    if local.startswith("xǁ"):
        return ".".join(local[2:].split("ǁ"))
    return local[2:]


def locate(m: Mutant) -> None:
    """File and line of the mutated line, from the diff's hunk and the function's ``def`` line."""
    m.path = re.search(r"^--- (\S+)", m.diff, re.M).group(1)
    m.function = function_name(m.name)
    tree = ast.parse((ROOT / m.path).read_text())
    defs = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            defs |= {f"{node.name}.{f.name}": f.lineno for f in node.body if isinstance(f, ast.FunctionDef)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defs[node.name] = node.lineno
    body = m.diff.split("\n@@", 1)[1].splitlines()
    line = int(re.match(r" -(\d+)", body[0]).group(1))
    for text in body[1:]:
        if text.startswith("-"):
            break
        line += 1
    m.line = defs.get(m.function, 1) + line - 1


def read_equivalents() -> dict[tuple[str, str, tuple[str, ...]], str]:
    """Blocks separated by blank lines: ``path: function``, the diff's ``-``/``+`` lines, the reason."""
    known = {}
    text = EQUIVALENTS.read_text() if EQUIVALENTS.exists() else ""
    for block in re.split(r"\n\s*\n", text):
        rows = [r for r in block.strip().splitlines() if not r.startswith("#")]
        if not rows:
            continue
        path, function = (s.strip() for s in rows[0].split(":", 1))
        change = tuple(f"{r[0]} {r[1:].strip()}" for r in rows[1:] if r[:1] in "+-")
        reason = " ".join(r.strip() for r in rows[1:] if r[:1] not in "+-")
        known[(path, function, change)] = reason
    return known


def report(name: str, part: Part, mutants: list[Mutant], seconds: float, command: str | None = None) -> str:
    counts = {s: sum(m.status == s for m in mutants) for s in ("killed", "survived", "no tests", "timeout")}
    # a run stopped part-way (killed, or out of time) leaves mutants that were never run: listed
    # apart, by function, never as open and never as killed
    unrun = [m for m in mutants if m.status in UNRUN]
    other = len(mutants) - sum(counts.values()) - len(unrun)
    known = read_equivalents()
    left = sorted((m for m in mutants if m.status not in ("killed", "timeout", *UNRUN)),
                  key=lambda m: (m.path, m.line))
    equivalent = [(m, known[(m.path, m.function, tuple(m.change))]) for m in left
                  if (m.path, m.function, tuple(m.change)) in known]
    open_ = [m for m in left if (m.path, m.function, tuple(m.change)) not in known]
    kinds = {}
    for _, why in equivalent:  # "equivalent: ...", "below resolution: ...", "cpu-only: ..."
        kind = why.split(":", 1)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    known_text = "".join(f"{n} {kind}, " for kind, n in sorted(kinds.items()))
    summary = (f"{name}: {len(mutants)} mutants, killed {counts['killed']}, survived {counts['survived']}, "
               f"no tests {counts['no tests']}, timeout {counts['timeout']}, other {other}, not run {len(unrun)}; "
               f"of those not killed: {known_text}{len(open_)} open; {seconds:.0f} s wall")
    command = command or f"make mutate PART={name}"
    out = [f"# Mutation testing: part `{name}`", "", f"Written by `{command}` (bench/mutate.py).",
           "", "Mutated: " + ", ".join(f"`{f}`" for f in part.files),
           "Tests: " + " ".join(f"`{t}`" for t in part.tests), "", summary, ""]
    rechecks = ROOT / "mutants" / f"{name}.recheck"
    if rechecks.exists():  # --recheck: survivors run again against newer tests, counted as killed above
        out += ["Killed after the run (`--recheck`, each survivor or mutant without tests against the tests named):", ""]
        out += [f"- {line}" for line in rechecks.read_text().splitlines()] + [""]
    if unrun:
        by_function: dict[str, int] = {}
        for m in unrun:
            by_function[function_name(m.name)] = by_function.get(function_name(m.name), 0) + 1
        out += [f"Not run ({len(unrun)}: the run was stopped before them), by function: "
                + ", ".join(f"`{f}` {n}" for f, n in sorted(by_function.items())), ""]
    out += [f"## Open ({len(open_)}): a test should kill these, or they go to equivalent.txt with a reason", ""]
    for m in open_:
        out += [f"### {m.path}:{m.line} `{m.function}` ({m.status})", "", "```diff", m.diff.strip(), "```", ""]
    out += [f"## Known ({len(equivalent)}): equivalent and the like, see bench/results/mutation/equivalent.txt", ""]
    out += [f"- {m.path}:{m.line} `{m.function}`: `{' / '.join(m.change)}`: {why}" for m, why in equivalent]
    (RESULTS / f"{name}.md").write_text("\n".join(out) + "\n")
    return summary


def run(name: str, report_only: bool = False, selected: list[str] | None = None) -> str:
    """One part: a fresh run (every mutant, or with ``selected`` only the mutants whose names match
    one of those patterns, e.g. a function changed since the part's last full run, reported apart
    in ``PART-selected.md``), or with ``report_only`` the report of the last one."""
    part = PARTS[name]
    write_config(part)
    try:
        if report_only:  # the mutants/ of the last run: after editing equivalent.txt, say
            timing = ROOT / "mutants" / f"{name}.seconds"
            if not timing.exists():
                sys.exit(f"mutants/ holds no run of part {name}: run it first")
            seconds = float(timing.read_text())
            selected = last_selection(name)
        else:
            shutil.rmtree(ROOT / "mutants", ignore_errors=True)  # a fresh run: no results of another part
            (ROOT / "mutants").mkdir()
            start = time.monotonic()
            with open(ROOT / "mutants" / f"{name}.log", "w") as log:
                # tests/conftest.py runs the selected tests in the part's order (mutmut's is arbitrary)
                env = {**os.environ, "LENGTHGEN_TEST_ORDER": "\n".join(t for t in part.tests if not t.startswith("-"))}
                if part.isolation == "fork":  # torch starts no OpenMP pool that a forked worker would wait on
                    env["OMP_NUM_THREADS"] = "1"
                subprocess.run([sys.executable, "-m", "mutmut", "run", *(selected or part.mutants)], cwd=ROOT, stdout=log,
                               stderr=subprocess.STDOUT, env=env)
            seconds = time.monotonic() - start
            (ROOT / "mutants" / f"{name}.seconds").write_text(f"{seconds:.1f}\n")
            if selected:
                (ROOT / "mutants" / f"{name}.selected").write_text("\n".join(selected))
        mutants = collect(part, selected)
    finally:
        CONFIG.unlink(missing_ok=True)
    if not mutants:
        sys.exit(f"mutmut ran no mutants; see mutants/{name}.log")
    if not selected:
        return report(name, part, mutants, seconds)
    command = f"python bench/mutate.py {name} --mutants " + " ".join(f"'{p}'" for p in selected)
    return report(f"{name}-selected", part, mutants, seconds, command)


def recheck(name: str, tests: list[str], only: str = "*") -> None:
    """After a run: each survivor of part ``name`` against ``tests`` (tests written for the survivors),
    one pytest session per mutant in this process, mutmut's trampoline choosing the mutant by
    ``MUTANT_UNDER_TEST``. A mutant that fails them is recorded as killed in mutants/ (the tests
    must keep no state between sessions, e.g. no cache of a certificate's result). Mutants that had
    no tests (no selected test called their function) are run too: the new tests may call it; so
    are those a stopped run never reached ("not checked"), which are then killed or survived.
    ``only``: a pattern (fnmatch) of the survivors' names to recheck, e.g. ``*ffn_check*``, so that
    each group runs only the tests written for it."""
    import json

    import pytest
    from mutmut.stats import status_by_exit_code

    metas = [p for f in PARTS[name].files for p in (ROOT / "mutants").glob(f + ".meta")]
    if not (ROOT / "mutants" / f"{name}.seconds").exists() or not metas:
        sys.exit(f"mutants/ holds no run of part {name}: run it first")
    shutil.copytree(ROOT / "tests", ROOT / "mutants" / "tests", dirs_exist_ok=True)  # the tests as they are now
    os.chdir(ROOT / "mutants")
    args = ["-x", "-q", "-p", "no:cacheprovider", "--rootdir=.", "-o", "addopts=", *tests]

    def session(mutant: str) -> int:
        os.environ["MUTANT_UNDER_TEST"] = mutant
        return int(pytest.main(args))

    if session("") != 0:
        sys.exit(f"{' '.join(tests)} fail on the code without mutants")
    killed, checked, selection = [], 0, last_selection(name)
    for meta in metas:
        data = json.loads(meta.read_text())
        for key, code in data["exit_code_by_key"].items():
            status = status_by_exit_code[code]
            if (status in ("survived", "no tests", *UNRUN) and fnmatch.fnmatchcase(key, only)
                    and PARTS[name].holds(key) and _selected(key, selection)):  # after --mutants: its mutants
                checked += 1
                if session(key) != 0:
                    data["exit_code_by_key"][key] = 1
                    killed.append(key)
                elif status in UNRUN:       # never run before: now it has, and survived
                    data["exit_code_by_key"][key] = 0
        meta.write_text(json.dumps(data, indent=4))
    os.chdir(ROOT)
    log = ROOT / "mutants" / f"{name}{'-selected' if selection else ''}.recheck"  # read by the report of that name
    which = "" if only == "*" else f" ({only})"
    log.write_text((log.read_text() if log.exists() else "") + f"{' '.join(tests)}: {checked} not killed before{which}, {len(killed)} killed\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=[*PARTS, "all"], help="which part to mutate (all: one after another)")
    parser.add_argument("--report-only", action="store_true",
                        help="no new run: write the report again from the last run's mutants/ (same part)")
    parser.add_argument("--recheck", nargs="+", metavar="TEST",
                        help="no new run: the last run's survivors against these tests, then the report")
    parser.add_argument("--only", default="*", metavar="PATTERN",
                        help="with --recheck: only the survivors whose mutant name matches (fnmatch), e.g. '*ffn_check*'")
    parser.add_argument("--mutants", nargs="+", metavar="NAME",
                        help="a fresh run of only the mutants with these names (mutmut's, * as a wildcard), e.g. "
                             "'rasp.weights.heads.x_compact*': report in bench/results/mutation/PART-selected.md")
    args = parser.parse_args()
    if args.mutants and (args.report_only or args.recheck or args.part == "all"):
        parser.error("--mutants is a fresh run of one part: not with --report-only, --recheck or all")
    if args.mutants and (why := unmatched_selection(args.part, args.mutants)):
        parser.error(why)
    os.chdir(ROOT)  # mutmut reads setup.cfg and mutants/ from the working directory
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name in PARTS if args.part == "all" else [args.part]:
        if args.recheck:
            write_config(PARTS[name])
            try:
                recheck(name, args.recheck, args.only)
            finally:
                CONFIG.unlink(missing_ok=True)
        print(run(name, args.report_only or bool(args.recheck), args.mutants), flush=True)


if __name__ == "__main__":
    main()
