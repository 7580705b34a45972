"""Planted bugs: small, realistic mistakes of each kind that issue 30 lists, each planted alone in a
copy of the source tree; the tests named for it must fail. ``make planted`` runs every bug (or
``--only NAME ...``) and writes ``planted.txt``: per bug, killed (the failing test named) or SURVIVED.

A bug is one exact text replacement in one file (``old`` must occur exactly once:
tests/test_planted_catalogue.py keeps the catalogue in step with the code). The copy shares the
repository's data, models and results through links and runs with ``PYTHONPATH`` pointing at its
own ``src``, so the planted code is what the tests (and their subprocesses) import.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
#: copied into the sandbox (the planted source and the tests); the rest is linked
COPIED = ("src", "tests", "examples", "configs", "pyproject.toml")
LINKED = ("data", "models", "results", "reproductions", "benchmarks", "docs", "README.md", "Makefile")


@dataclass(frozen=True)
class Bug:
    kind: str  # the kind of bug, as issue 30 groups them
    name: str
    file: str  # relative to the repository
    old: str
    new: str
    tests: tuple[str, ...]  # the tests that must fail (pytest ids or files)


DEPTH = ("tests/results/test_depth.py",)
LLM_KEYS = ("tests/llm/test_keys.py",)
COMPARE = ("tests/results/test_compare_check.py",)
EXPLORER = ("tests/report/test_explorer.py",)
TUNING = "tests/fitting/test_tune.py::"
DEFS = "tests/test_definitions.py::"
EST_DEFS = "tests/judgments/test_estimator_definitions.py::"
ESTIMATE = "tests/judgments/test_estimate.py::"
HOLES = "tests/judgments/test_hole_design.py::"

BUGS: tuple[Bug, ...] = (
    Bug("depth sweeps", "ceiling at the stage's top_n, not at each depth", "src/stagebench/results/depth.py",
        "c = ceilings.ceiling(inp, runs[name], qrels, queries, n, rel, gain, measure)",
        "c = ceilings.ceiling(inp, runs[name], qrels, queries, s.candidate_depth, rel, gain, measure)", DEPTH),
    Bug("depth sweeps", "depth p-values without Holm", "src/stagebench/results/depth.py",
        "holm = stats.holm([cmp.p_rand for _, _, cmp in rows])", "holm = [cmp.p_rand for _, _, cmp in rows]", DEPTH),
    Bug("depth sweeps", "depth significance from the uncorrected p", "src/stagebench/results/depth.py",
        "significant=bool(p < ev.alpha", "significant=bool(cmp.p_rand < ev.alpha", DEPTH),
    Bug("depth sweeps", "depths not in a reranker's run key", "src/stagebench/execute.py",
        "params = {k: v for k, v in params.items() if k not in stage.unkeyed_params}",
        "params = {k: v for k, v in params.items() if k not in stage.unkeyed_params and k != 'depths'}",
        ("tests/test_cache_keys.py",)),
    Bug("depth sweeps", "the LLM stage declares depths unkeyed", "src/stagebench/stages/llm_rerank.py",
        '"depend on N; identical windows come from the cache); the depth table",\n                                             affects=(RUN,))  # fmt: skip',
        '"depend on N; identical windows come from the cache); the depth table",\n                                             affects=())  # fmt: skip',
        ("tests/test_cache_keys.py", "tests/llm/test_keys.py")),
    Bug("cache keys", "a scoring param declared to affect the run only (pair scores shared across it)",
        "src/stagebench/stages/rerank.py",
        'max_length: PositiveInt = param(256, "tokens of query + document; longer pairs are truncated")',
        'max_length: PositiveInt = param(256, "tokens of query + document; longer pairs are truncated", affects=("run",))',
        ("tests/test_cache_keys.py::test_a_rerankers_own_params_affect_its_pair_scores",
         "tests/test_cache_declarations.py::test_a_cross_encoders_params_move_exactly_the_pair_scores_they_declare")),
    Bug("cache keys", "the embedding batch size left out of the embeddings key", "src/stagebench/stages/dense.py",
        '"a GPU wants 256-512: docs/models.md)")',
        '"a GPU wants 256-512: docs/models.md)", affects=("run",))',
        ("tests/test_cache_keys.py::test_the_embedding_batch_size_moves_embeddings_so_it_is_in_their_key",)),
    Bug("LLM cache keys", "temperature left out of the response key", "src/stagebench/llm/request.py",
        '"temperature": self.temperature, "seed": self.seed}', '"seed": self.seed}', LLM_KEYS),
    Bug("LLM cache keys", "seed left out of the response key", "src/stagebench/llm/request.py",
        '"temperature": self.temperature, "seed": self.seed}', '"temperature": self.temperature}', LLM_KEYS),
    Bug("LLM cache keys", "labels left out of the response key", "src/stagebench/llm/request.py",
        'out["labels"] = list(self.labels)', 'pass', LLM_KEYS),
    Bug("LLM cache keys", "max_new_tokens declared as not changing an answer", "src/stagebench/stages/llm_rerank.py",
        '"reasoning model needs more)")  # fmt: skip', '"reasoning model needs more)", affects=())  # fmt: skip', LLM_KEYS),
    Bug("LLM cost", "seconds per query divided by the calls", "src/stagebench/llm/windows.py",
        "seconds_per_query=round(wall_seconds / max(self.queries, 1), 3)",
        "seconds_per_query=round(wall_seconds / max(self.windows, 1), 3)", LLM_KEYS),
    Bug("LLM cost", "tokens per query divided by the calls", "src/stagebench/results/cost.py",
        "work = st.tokens / n_q", "work = st.tokens / max(st.windows, 1)", LLM_KEYS),
    Bug("Ray engine", "results matched to units by arrival order", "src/stagebench/runtime/cluster/workers.py",
        'i = int(row["i"])', "i = int(got.sum())", ("tests/runtime/test_engine_order.py::test_results_follow_their_units_whatever_order_they_finish_in",)),
    Bug("local engine", "threaded results in completion order", "src/stagebench/runtime/engine.py",
        "return [f.result() for f in futures]",
        "return [f.result() for f in __import__('concurrent.futures').futures.as_completed(futures)]",
        ("tests/runtime/test_engine_order.py::test_threaded_results_follow_their_units_whatever_order_they_finish_in",)),
    Bug("compare and check", "compare marks significance by the uncorrected p", "src/stagebench/results/compare.py",
        "significant=pr < alpha", "significant=c.p_rand < alpha", COMPARE),
    Bug("compare and check", "compare reports the uncorrected p", "src/stagebench/results/compare.py",
        "stats.holm([c.p_rand for _, c in family])", "[c.p_rand for _, c in family]", COMPARE),
    Bug("compare and check", "the stage table's letters from the uncorrected p", "src/stagebench/results/scoring.py",
        'return "p_rand_holm" if ev.test == "randomization" else "p_t_holm"',
        'return "p_rand" if ev.test == "randomization" else "p_t"', COMPARE),
    Bug("compare and check", "per-measure tolerances ignored", "src/stagebench/results/check.py",
        "tol = exp.tolerances.get(metric, exp.tolerance)", "tol = exp.tolerance", COMPARE),
    Bug("report and explorer", "cumulative cost counts only the stage", "src/stagebench/results/cost.py",
        "for x in upstream(r.stage)) / n_q", "for x in {r.stage}) / n_q", EXPLORER),
    Bug("report and explorer", "ranks in an input off by one", "src/stagebench/results/queries.py",
        "enumerate(order[name], start=1)", "enumerate(order[name])", EXPLORER),
    Bug("report and explorer", "moves drawn the wrong way", "src/stagebench/report/explorer.py",
        "arrow = UP if first > rank else DOWN", "arrow = DOWN if first > rank else UP", EXPLORER),
    Bug("report and explorer", "wins sorted the wrong way", "src/stagebench/results/queries.py",
        "key=lambda c: (-c[1], c[0]))[:n]", "key=lambda c: (c[1], c[0]))[:n]", EXPLORER),
    Bug("report and explorer", "losses sorted the wrong way", "src/stagebench/results/queries.py",
        "key=lambda c: (c[1], c[0]))[:n]\n", "key=lambda c: (-c[1], c[0]))[:n]\n", EXPLORER),
    Bug("report and explorer", "lost documents not limited to the candidate depth", "src/stagebench/results/queries.py",
        "pool = set(order[inputs[0]][:depth])", "pool = set(order[inputs[0]])", EXPLORER),
    Bug("report and explorer", "oracle pool ordered by raw grade, not gain", "src/stagebench/metrics/value.py",
        "return lambda d: g(judgments[d]) if d in judgments else 0.0",
        "return lambda d: float(judgments.get(d, 0))", DEPTH),
    Bug("statistics plumbing", "bootstrap seed not passed", "src/stagebench/results/scoring.py",
        "ev.bootstrap,\n                                                              ev.seed)]",
        "ev.bootstrap,\n                                                              42)]", EXPLORER),
    Bug("measures", "the ceilings read in nDCG@10 whatever evaluation.ceiling names", "src/stagebench/results/scoring.py",
        "ceiling_measure = parse_measure(ev.ceiling)", 'ceiling_measure = parse_measure("nDCG@10")',
        (DEPTH[0] + "::test_the_ceilings_and_the_sweep_are_read_in_the_measure_evaluation_ceiling_names",)),
    Bug("measures", "a measure ir_measures computes claims the views of the holes", "src/stagebench/metrics/delegate.py",
        "return replace(DELEGATED, provider=self.provider,", "return replace(Supports(), provider=self.provider,",
        ("tests/metrics/test_families.py::test_what_a_measure_supports_is_read_from_its_declaration",)),
    Bug("measures", "a delegated measure that reads the evaluation's gains does not say so", "src/stagebench/metrics/delegate.py",
        'reads_gain=takes and "gains" not in self.measure.params)', "reads_gain=False)",
        ("tests/metrics/test_families.py::test_a_delegated_measure_that_takes_the_evaluations_gains_says_so_and_is_refused_where_none_is_positive",)),
    Bug("statistics plumbing", "depth test seed not passed", "src/stagebench/results/depth.py",
        "ev.permutations,\n                                ev.seed)", "ev.permutations,\n                                42)", DEPTH),
    Bug("statistics plumbing", "compare seed not passed", "src/stagebench/results/compare.py",
        "permutations, seed)))", "permutations, 42)))", COMPARE),
    Bug("statistics plumbing", "segments test seed not passed", "src/stagebench/results/segments.py",
        "stats.randomization_test(a, b, permutations, seed) if", "stats.randomization_test(a, b, permutations, 42) if",
        COMPARE),
    Bug("statistics plumbing", "segments without Holm", "src/stagebench/results/segments.py",
        "stats.holm([p for _, p in tested])", "[p for _, p in tested]", COMPARE),
    Bug("statistics plumbing", "stage-table test seed not passed", "src/stagebench/results/scoring.py",
        "[evals[b].per_query[m][q] for q in queries], ev.permutations, ev.seed)",
        "[evals[b].per_query[m][q] for q in queries], ev.permutations, 42)", COMPARE),
    # issue 46: bugs that passed the fast layer and their modules' slow tests, one of each kind
    Bug("metrics", "F1@k's precision divided by the documents retrieved, not k", "src/stagebench/metrics/compute.py",
        "p, r = precision(ranking, judgments, cutoff, rel), recall(ranking, judgments, cutoff, rel)",
        "p, r = precision(ranking, judgments, min(cutoff, len(ranking)) or 1, rel), recall(ranking, judgments, cutoff, rel)",
        ("tests/parity/test_new_measures.py",)),
    Bug("metrics", "nDCG's ideal ordered by grade, not by gain", "src/stagebench/metrics/compute.py",
        "ideal_gains = sorted((g_of(g) for g in judgments.values()), reverse=True)",
        "ideal_gains = [g_of(g) for g in sorted(judgments.values(), reverse=True)]", ("tests/parity/test_new_measures.py",)),
    Bug("depth sweeps", "a head-dependent reranker's depths cut from the deepest pass", "src/stagebench/rerank/pointwise.py",
        "per_depth[n] = score([[(q, d) for d in heads[q][:n]] for q in qids]",
        "per_depth[n] = score([[(q, d) for d in heads[q]] for q in qids]", DEPTH),
    Bug("unjudged documents", "bounds that touch at one point counted as apart", "src/stagebench/metrics/holes.py",
        "return a[0] <= b[1] and b[0] <= a[1]", "return a[0] < b[1] and b[0] < a[1]", ("tests/parity/test_holes.py",)),
    Bug("unjudged documents", "no ? on a mark the bounds leave open", "src/stagebench/report/tables.py",
        'marks = "".join(x + ("?" if x in open_ else "") for x in r.better_than.get(m, []))',
        'marks = "".join(r.better_than.get(m, []))', COMPARE),
    Bug("unjudged documents", "judged-only letters from the main view's values", "src/stagebench/results/scoring.py",
        "judged_comps, judged_better = significance(judged, pairs,", "judged_comps, judged_better = significance(evals, pairs,",
        COMPARE),
    Bug("LLM judge", "a judge's grade replaces a human label in the filled qrels", "src/stagebench/judgments/pool.py",
        "        if j.purpose == HOLE and j.grade is not None and j.docid not in filled.get(j.qid, {}):\n"
        "            filled.setdefault(j.qid, {})[j.docid] = j.grade\n",
        "        if j.grade is not None:\n            filled.setdefault(j.qid, {})[j.docid] = j.grade\n"
        "        if j.purpose == HOLE and j.grade is not None:\n", ("tests/judge/test_judge.py",)),
    Bug("LLM judge", "the weighted kappa's interval bootstraps unweighted kappa", "src/stagebench/judgments/agreement.py",
        "v = kappa(h[idx], j[idx], k, 1)", "v = kappa(h[idx], j[idx], k, 0)", ("tests/judge/test_judge.py",)),
    Bug("segments", "a segment of exactly min_queries queries left untested", "src/stagebench/results/segments.py",
        "if len(qs) >= min_queries else None", "if len(qs) > min_queries else None", ("tests/results/test_segments.py",)),
    Bug("cache keys", "two recipes of one model variant share a key", "src/stagebench/models/variants.py",
        'parts = {"source": model.identity, "recipe": recipe, "code": code_identity(VARIANT_CODE),',
        'parts = {"source": model.identity, "code": code_identity(VARIANT_CODE),',
        ("tests/models/test_batch_invariance.py::test_the_int8_token_rewrite_keeps_the_model",)),
    Bug("report and explorer", "the latency front compares with the other stages' p50", "src/stagebench/results/cost.py",
        "p95 = [(lat[1], q) for", "p95 = [(lat[0], q) for", EXPLORER),
    Bug("LLM families", "pointwise ESCI grades of S and C swapped", "src/stagebench/llm/labels.py",
        '"esci": (("E", 3.0), ("S", 2.0), ("C", 1.0), ("I", 0.0)),', '"esci": (("E", 3.0), ("S", 1.0), ("C", 2.0), ("I", 0.0)),',
        ("tests/llm/test_families.py::test_pointwise_esci_orders_by_the_expected_grade_e3_s2_c1_i0",)),
    Bug("reranker by pool", "a cell's better and worse than its pool swapped", "src/stagebench/results/matrix.py",
        "c.oracle, c.headroom_captured, pool_row.id in row.better_than.get(measure, []),\n"
        "                                    row.id in pool_row.better_than.get(measure, [])))",
        "c.oracle, c.headroom_captured, row.id in pool_row.better_than.get(measure, []),\n"
        "                                    pool_row.id in row.better_than.get(measure, [])))",
        ("tests/results/test_matrix.py::test_a_cell_is_marked_better_or_worse_than_its_pool_as_the_stage_table_marks_it",)),
    Bug("tuning", "a k-fold decision is made on every query, its own fold's too", "src/stagebench/fitting/tune.py",
        "tuple(q for j, f in enumerate(folds) if j != i for q in f)", "tuple(q for f in folds for q in f)",
        (TUNING + "test_kfold_decisions_never_read_their_own_folds_judgments",)),
    Bug("tuning", "split tuning scored on the test split", "src/stagebench/fitting/tune.py",
        'return Held("split", ds, [Decision(tune.split, tuple(ids), None)],',
        'return Held("split", test, [Decision(tune.split, tuple(scored_query_ids(test.qrels)), None)],',
        (TUNING + "test_split_tuning_never_reads_the_test_judgments",)),
    Bug("tuning", "k1 keyed into the analysed corpus (a k1 grid analyses it per trial)", "src/stagebench/stages/bm25.py",
        'k1: NonNegativeFloat = param(1.5, "term-frequency saturation", affects=(RUN,))',
        'k1: NonNegativeFloat = param(1.5, "term-frequency saturation")',
        (TUNING + "test_kfold_decisions_never_read_their_own_folds_judgments",)),
    Bug("tuning", "the weak-baseline note's remaining gain measured against the untuned stage", "src/stagebench/results/baselines.py",
        "left = means[s][m] - tuned", "left = means[s][m] - here[m]",
        (TUNING + "test_a_run_finds_the_tuning_of_its_first_stage_and_says_its_baseline_is_weak",)),
    Bug("crash safety", "a cache entry's checksums not verified on read", "src/stagebench/cache.py",
        'if got != want["sha256"]:', 'if False and got != want["sha256"]:', ("tests/test_cache_corruption.py",)),
    Bug("crash safety", "a swap killed between its renames: the folder set aside never put back", "src/stagebench/files.py",
        "        if not target.exists():\n            log.info(\"putting back", "        if False:\n            log.info(\"putting back",
        ("tests/test_faults.py::test_the_judge_and_a_judging_round_survive_a_fault_at_every_kind_of_write",)),
    Bug("crash safety", "the judge writes into the finished folder in place", "src/stagebench/api/judging.py",
        "    with rewritten(rf.path) as tmp:  # the folder changes whole or not at all\n        atomic_write(tmp / JUDGMENTS, tsv)",
        "    for tmp in (rf.path,):  # in place\n        atomic_write(tmp / JUDGMENTS, tsv)",
        ("tests/test_faults.py::test_the_judge_and_a_judging_round_survive_a_fault_at_every_kind_of_write",)),
    # issue 72: the definitions of the judging round's newest parts (tests/test_definitions.py)
    Bug("definitions", "the judge's grade of a hole replaces a human label", "src/stagebench/judgments/pool.py",
        "if j.purpose == HOLE and j.grade is not None and j.docid not in filled.get(j.qid, {}):",
        "if j.purpose == HOLE and j.grade is not None:", (DEFS + "test_a_judges_grade_never_replaces_a_human_label_in_the_filled_qrels",)),
    Bug("definitions", "a pair whose lower bound is exactly 0 counts as settled", "src/stagebench/judgments/views.py",
        "out[(a, b)] = 1 if lo > 1e-12 else -1 if hi < -1e-12 else 0", "out[(a, b)] = 1 if lo >= 0 else -1 if hi < -1e-12 else 0",
        (DEFS + "test_a_pair_whose_difference_can_still_be_zero_is_not_settled",)),
    Bug("definitions", "unpaired bounds pair low with low and high with high", "src/stagebench/metrics/holes.py",
        "got = (min(va) - max(vb), max(va) - min(vb))", "got = (min(va) - min(vb), max(va) - max(vb))",
        (DEFS + "test_the_bounds_of_a_difference_of_unpaired_measures_pair_each_low_with_the_others_high",)),
    # issue 69's last round: the table's marks and the grade model's scores
    Bug("definitions", "the table's marks ask the stages' own bounds alone", "src/stagebench/results/scoring.py",
        "                if not open_:", "                if False:",
        ("tests/judgments/test_rounds.py::test_a_pair_the_stage_table_shows_ordered_keeps_its_order_under_every_grading_of_the_holes",)),
    Bug("definitions", "the grade model reads a reranker's tail placeholders as model scores", "src/stagebench/api/ground.py",
        "return {q: {d: x for d, x in docs.items() if d in head.get(q, ())} for q, docs in run.items()}",
        "return {q: dict(docs) for q, docs in run.items()}",
        (DEFS + "test_the_grade_model_reads_a_rerankers_scores_of_its_pool_only", "tests/judgments/test_pool_scores.py")),
    Bug("definitions", "depth pooling by a hole's worst rank", "src/stagebench/judgments/planning.py",
        "return sorted(holes, key=lambda h: h.best_rank)[:budget]",
        "return sorted(holes, key=lambda h: max(r for r in h.ranks.values() if r is not None))[:budget]",
        (DEFS + "test_depth_pooling_orders_a_hole_by_its_best_rank_over_the_stages",)),
    Bug("definitions", "a worksheet row naming an unknown query is accepted", "src/stagebench/judgments/worksheet.py",
        "elif qid not in queries:", "elif qid not in queries and False:",
        (DEFS + "test_a_worksheet_row_naming_a_query_the_folder_lacks_is_refused",)),
    Bug("definitions", "tau of an all-tied order against a strict one is 1", "src/stagebench/judgments/views.py",
        "return 1.0 if len(keys) < 2 or (len({a[k] for k in keys}) < 2 and len({b[k] for k in keys}) < 2) else 0.0",
        "return 1.0 if len(keys) < 2 or (len({a[k] for k in keys}) < 2 or len({b[k] for k in keys}) < 2) else 0.0",
        (DEFS + "test_kendalls_tau_of_an_order_that_ties_everything_against_a_strict_one_is_zero",)),
    Bug("definitions", "the irds default template needs only one of its fields", "src/stagebench/data/irds.py",
        "if set(template_fields(t)) <= set(fields):", "if set(template_fields(t)) & set(fields):",
        (DEFS + "test_the_irds_default_text_template_needs_every_one_of_its_fields",)),
    Bug("definitions", "the YAML boolean-key check lets off/no/false through", "src/stagebench/params.py",
        "if isinstance(key, bool):  # `on: x`", "if key is True:  # `on: x`",
        (DEFS + "test_every_key_yaml_reads_as_a_boolean_is_refused",)),
    Bug("definitions", "pyterrier ranks from 1", "src/stagebench/stages/pyterrier.py",
        "for r, (d, s) in enumerate(ranked({d: inputs[0][q][d] for d in heads[q]}))]",
        "for r, (d, s) in enumerate(ranked({d: inputs[0][q][d] for d in heads[q]}), start=1)]",
        ("tests/stages/test_pyterrier.py::test_a_pyterrier_reranker_reorders_the_head_and_keeps_the_tail_and_serves_as_it_ran",)),
    Bug("definitions", "a tie between trials goes to the latest", "src/stagebench/fitting/tune.py",
        "return max(range(len(means)), key=lambda n: (round(means[n], 12), -n))",
        "return max(range(len(means)), key=lambda n: (round(means[n], 12), n))",
        (DEFS + "test_a_tie_between_trials_goes_to_the_config_s_own_params",)),
    Bug("definitions", "a pair settled against the true order counted as true", "src/stagebench/judgments/planning.py",
        "right = sum(1 for (a, b), s in settled.items() if s and s == (true_values[a] > true_values[b]) - (true_values[a] < true_values[b]))",
        "right = sum(1 for (a, b), s in settled.items() if s)",
        (DEFS + "test_a_pair_settled_against_the_true_order_is_not_counted_as_true",)),
    Bug("definitions", "the rules judge grades by ESCI's default table", "src/stagebench/judge/rules.py",
        "grade = self.labels[letter]", 'grade = {"E": 3, "S": 2, "C": 1, "I": 0}[letter]',
        (DEFS + "test_the_rules_judge_grades_by_the_datasets_own_label_map",)),
    Bug("definitions", "tune keeps query ids found in both splits", "src/stagebench/fitting/tune.py",
        "                    ds = ds.subset(set(ds.queries) - set(overlap))\n", "",
        (DEFS + "test_a_query_id_in_both_the_tuning_and_the_test_split_never_tunes",)),
    # issue 69: the estimated view (tests/judgments/test_estimate.py)
    Bug("estimation", "the residuals not weighted by 1/pi", "src/stagebench/judgments/estimate.py",
        "+ (r[:, ~sure] / p[~sure]).sum(axis=1))", "+ r[:, ~sure].sum(axis=1))",
        (ESTIMATE + "test_the_estimator_is_unbiased_and_its_variance_estimate_too_over_every_possible_sample",)),
    Bug("estimation", "the variance without the finite-population factor", "src/stagebench/judgments/estimate.py",
        "each = (1 - p) / p**2 * r**2", "each = 1 / p**2 * r**2",
        (ESTIMATE + "test_the_estimator_is_unbiased_and_its_variance_estimate_too_over_every_possible_sample",)),
    Bug("estimation", "a query whose ideal can still change cut into single holes", "src/stagebench/judgments/estimate.py",
        "fixed = dcg(list(gains[:k])) if len(gains) >= k and gains[k - 1] >= top_gain else None",
        "fixed = dcg(list(gains[:k]))", (ESTIMATE + "test_the_frame_computes_ndcg_as_the_metrics_do_with_every_hole_graded",)),
    Bug("estimation", "no uniform share: a unit the model is sure of is never drawn", "src/stagebench/judgments/estimate.py",
        "pi = np.minimum(1.0, (1 - UNIFORM_SHARE) * active + UNIFORM_SHARE * uniform)", "pi = active",
        (ESTIMATE + "test_the_design_spends_the_budget_and_a_unit_the_model_is_sure_of_keeps_a_floor",)),
    # issue 78: each mechanic against its definition (tests/judgments/test_estimator_definitions.py)
    Bug("estimation", "the refit's residuals weighted by pi, not 1/pi", "src/stagebench/judgments/estimate.py",
        "np.full(b - a, 1.0 / pi[i])", "np.full(b - a, pi[i])",
        (EST_DEFS + "test_the_refit_is_weighted_by_1_over_pi_and_cross_fitted_over_two_halves",)),
    Bug("estimation", "the refit not cross-fitted: a unit corrected by a model its own grade fitted",
        "src/stagebench/judgments/estimate.py", "            other = owner != h", "            other = owner >= 0",
        (EST_DEFS + "test_the_refit_is_weighted_by_1_over_pi_and_cross_fitted_over_two_halves",)),
    Bug("estimation", "the variance floor computed but not applied", "src/stagebench/judgments/estimate.py",
        "    pooled = np.where(var > 0, (d * var + FLOOR_DF * floor) / (d + FLOOR_DF), floor)", "    pooled = var",
        (EST_DEFS + "test_the_variance_its_floor_and_the_degrees_of_freedom_by_their_formulas",)),
    # issue 91: the floor's prior and degrees of freedom, the plan's power by rehearsal
    Bug("estimation", "the model's claim left out of the floor's scale", "src/stagebench/judgments/estimate.py",
        "    s2 = ((w * x).sum(axis=1) + FLOOR_PRIOR * wbar) / np.maximum(w.sum(axis=1) + FLOOR_PRIOR * wbar, 1e-300)",
        "    s2 = (w * x).sum(axis=1) / np.maximum(w.sum(axis=1), 1e-300)",
        (ESTIMATE + "test_a_sure_grade_models_rare_surprises_do_not_collapse_the_interval",)),
    Bug("estimation", "the plan's 'settles with 80% power' a coin flip", "src/stagebench/judgments/power.py",
        "(scale * Z95 + Z80) * s < abs(d)", "(scale * Z95) * s < abs(d)",
        (ESTIMATE + "test_the_plans_power_holds_on_the_worlds_its_grade_model_makes",)),
    Bug("estimation", "Welch-Satterthwaite degrees of freedom in the thousands", "src/stagebench/judgments/estimate.py",
        "df = np.where(var > 0, var**2 / np.maximum((each**2).sum(axis=1), 1e-300), np.inf)",
        "df = np.full(len(var), 5000.0)",
        (EST_DEFS + "test_ten_equal_variance_terms_give_ten_degrees_of_freedom",)),
    Bug("estimation", "a query's ideal fixed when only its best judged grade is the top one",
        "src/stagebench/judgments/estimate.py", "gains[k - 1] >= top_gain", "gains[0] >= top_gain",
        (EST_DEFS + "test_the_fixed_ideal_rule_needs_k_judged_documents_at_the_top_grade",)),
    Bug("estimation", "a census left to the cross-fitted refit", "src/stagebench/judgments/estimate.py",
        "sure = p >= 1.0", "sure = p > 1.0", (ESTIMATE + "test_a_census_is_exact_whatever_the_model_and_the_refit",)),
    # issue 78: the hole design and the capped draw (tests/judgments/test_hole_design.py)
    Bug("estimation", "the ideal's change left out of the linearisation", "src/stagebench/judgments/linear.py",
        "lift = np.concatenate([[0.0], np.cumsum(steps * slopes)])", "lift = np.zeros(len(gains))",
        (HOLES + "test_the_linearisation_is_exact_at_a_sure_model_and_its_remainder_is_second_order",)),
    Bug("estimation", "a hole drawn with certainty still predicted, not known", "src/stagebench/judgments/linear.py",
        "dist[holes[sure]] = np.eye(len(gains))[levels[sure]]", "dist[holes[sure]] = dist[holes[sure]]",
        (HOLES + "test_a_census_is_exact_in_the_hole_design",)),
    Bug("estimation", "the capped draw's window one row short", "src/stagebench/judgments/capped.py",
        "        j = hi - r - c  # the later units' rows", "        j = hi - r - c - 1  # the later units' rows",
        (HOLES + "test_the_capped_draws_inclusion_probabilities_are_exact_over_every_subset",)),
    Bug("estimation", "the capped draw's working probabilities taken as its inclusion probabilities",
        "src/stagebench/judgments/capped.py", "    pi[open_] = pi_open\n", "    pi[open_] = p\n",
        (HOLES + "test_a_capped_draw_never_passes_the_budget_spends_95_percent_and_matches_its_probabilities",)),
    Bug("estimation", "the hole design cuts into holes the queries whose ideal rests on them", "src/stagebench/judgments/design.py",
        "whole = {q for q, x in shares.items() if x < HOLE_WHEN}", "whole = {q for q, x in shares.items() if x >= HOLE_WHEN}",
        (HOLES + "test_the_hole_design_judges_whole_the_queries_whose_ideal_rests_on_their_holes",)),
    Bug("estimation", "coverage counts an interval that holds either end", "src/stagebench/judgments/coverage.py",
        "(low <= theta + 1e-12) & (theta - 1e-12 <= high)", "(low <= theta + 1e-12) | (theta - 1e-12 <= high)",
        (EST_DEFS + "test_coverage_counts_an_interval_only_when_it_holds_the_truth_at_both_ends",)),
    # issue 81: the comparisons, the worksheet's grades, the measures' definitions, the cache's declarations
    Bug("definitions", "eval's marks from the t-test under a randomization-test header", "src/stagebench/results/experiment.py",
        'tests[m] = [(t, t.p_t_holm if test == "ttest" else t.p_rand_holm) for t in pairs]',
        "tests[m] = [(t, t.p_t_holm) for t in pairs]",
        ("tests/cli/test_eval_runs.py::test_the_marks_come_from_the_randomization_test_the_header_names",)),
    Bug("definitions", "compare --judgments same checks which documents are judged, not their grades",
        "src/stagebench/results/compare.py", "            if ra[q] != rb[q]:", "            if set(ra[q]) != set(rb[q]):",
        ("tests/results/test_compare_check.py::test_compare_refuses_folders_that_grade_a_shared_pair_differently",)),
    Bug("definitions", "a worksheet grade of 2.5 read as 2", "src/stagebench/judgments/worksheet.py",
        "if not (math.isfinite(x) and x.is_integer() and int(x) in scale):", "if not (math.isfinite(x) and int(x) in scale):",
        (DEFS + "test_a_worksheet_grade_between_two_grades_is_refused_not_rounded",)),
    Bug("definitions", "ERR's stopping probability grade / max_grade", "src/stagebench/metrics/compute.py",
        "stop = (2.0**g - 1.0) / scale if g > 0 else 0.0", "stop = g / max_grade if g > 0 else 0.0",
        ("tests/metrics/test_families.py::test_err_is_chapelles_cascade_by_hand",)),
    Bug("definitions", "nDCG_Burges under the evaluation's gain, not its fixed exponential one", "src/stagebench/metrics/value.py",
        "family.fixed_gain or measure.gain or gain", "measure.gain or gain",
        ("tests/metrics/test_gains.py::test_two_gains_in_one_table_and_names",)),
    Bug("definitions", "Holm's adjusted p-values not monotone", "src/stagebench/stats.py",
        "running = max(running, min(1.0, (m - rank) * pvalues[i]))", "running = min(1.0, (m - rank) * pvalues[i])",
        ("tests/test_stats.py::test_holm",)),
    Bug("definitions", "a pair whose bounds lie apart below 0 marked unsettled", "src/stagebench/judgments/views.py",
        "out[(a, b)] = 1 if lo > 1e-12 else -1 if hi < -1e-12 else 0", "out[(a, b)] = 1 if lo > 1e-12 else 0",
        (DEFS + "test_a_pair_whose_bounds_are_apart_is_settled_in_their_direction",)),
    Bug("estimation", "a round's record not checked against the folder's qrels", "src/stagebench/api/ground.py",
        'if file_digest(rf.path / "qrels.trec") != rec.qrels_sha256:', "if False:",
        (ESTIMATE + "test_a_second_round_is_drawn_from_the_folder_the_first_wrote_and_estimated_on_it",)),
    Bug("precision", "precision: auto runs bf16 autocast on an AVX512-BF16 or AMX CPU", "src/stagebench/runtime/devices.py",
        'return Placement(dev, "fp32", f"auto: {why}: fp32")',
        'return Placement(dev, "bf16" if cpu_has_bf16() and role != "generator" else "fp32", f"auto: {why}: fp32")',
        ("tests/runtime/test_devices.py::test_auto_is_fp32_on_every_cpu_class_and_says_which_class",)),
    Bug("precision", "a bi-encoder's bf16 padded to its batch's longest text (fixed shapes bypassed)",
        "src/stagebench/models/encoders.py",
        "if self.placement.precision in FIXED_SHAPE:\n            return self._encode_fixed(",
        "if not FIXED_SHAPE:\n            return self._encode_fixed(",
        ("tests/models/test_batch_invariance.py::test_a_bf16_bi_encoder_runs_in_fixed_shapes_and_its_batch_cannot_move_an_embedding",)),
    Bug("precision", "a cross-encoder's bf16 padded to its batch's longest pair (fixed shapes bypassed)",
        "src/stagebench/models/encoders.py",
        "if self.placement.precision in FIXED_SHAPE:\n            return self._predict_fixed(pairs)",
        "if not FIXED_SHAPE:\n            return self._predict_fixed(pairs)",
        ("tests/models/test_batch_invariance.py::test_a_bf16_cross_encoder_runs_in_fixed_shapes_and_its_batch_cannot_move_a_score",)),
    Bug("precision", "the ONNX export knows sentence-transformers' module names before version 6 only",
        "src/stagebench/models/variants.py", 'or m.rpartition(".")[2] not in EXPORTED_MODULES]', 'or m.count(".") != 2]',
        ("tests/models/test_batch_invariance.py::test_a_cross_encoder_saved_by_sentence_transformers_6_runs_exported_and_at_int8_token",)),
    Bug("precision", "a torch cross-encoder at fp32 on a CPU runs in torch, not its ONNX export", "src/stagebench/models/variants.py",
        'role in ("bi_encoder", "cross_encoder") and placement.kind == "cpu"', 'role == "bi_encoder" and placement.kind == "cpu"',
        ("tests/models/test_export.py::test_a_torch_cross_encoder_runs_its_checked_onnx_export",)),
    Bug("precision", "an export whose tokenizer.json tokenizes unlike the model's tokenizer is kept",
        "src/stagebench/models/variants.py", "    if [list(x) for x in want] != [", "    if False and [list(x) for x in want] != [",
        ("tests/models/test_export.py::test_a_cross_encoder_whose_export_tokenizes_otherwise_runs_in_torch_and_says_so",)),
    Bug("precision", "a torch model whose export fails its check stops the stage instead of running in torch",
        "src/stagebench/models/variants.py", 'if recipe != "export":\n            raise', 'if True:\n            raise',
        ("tests/models/test_export.py::test_a_cross_encoder_whose_export_tokenizes_otherwise_runs_in_torch_and_says_so",)),
    Bug("precision", "a stage's record names the export where its model ran in torch", "src/stagebench/stages/neural.py",
        "self._itself = ran is resolved", "self._itself = False",
        ("tests/models/test_export.py::test_a_cross_encoder_whose_export_tokenizes_otherwise_runs_in_torch_and_says_so",)),
    Bug("precision", "precision: auto runs the carrier's dynamic INT8, one activation scale per batch",
        "src/stagebench/runtime/devices.py", 'return Placement(dev, "int8-token", "auto: the dynamic INT8 ONNX graph',
        'return Placement(dev, "int8", "auto: the dynamic INT8 ONNX graph', ("tests/runtime/test_devices.py::test_onnx_precisions",)),
    Bug("cache keys", "the BM25 stemmer declared to affect the run only (an unstemmed index reused)", "src/stagebench/stages/bm25.py",
        'param(None, "a PyStemmer (Snowball) language, e.g. english")',
        'param(None, "a PyStemmer (Snowball) language, e.g. english", affects=("run",))',
        ("tests/test_cache_declarations.py::test_bm25_params_move_exactly_the_index_and_the_run_they_declare",)),
    Bug("cache keys", "the dense passage prefix declared to affect the run only (stale embeddings reused)",
        "src/stagebench/stages/dense.py", """param("", 'prepended to documents (e5: "passage: ")')""",
        """param("", 'prepended to documents (e5: "passage: ")', affects=("run",))""",
        ("tests/test_cache_declarations.py::test_dense_params_move_exactly_the_embeddings_they_declare",)),
    Bug("streams", "the last batches in flight handed back last first (outputs of one batch given to another)",
        "src/stagebench/models/encoders.py", """            while pending:
                yield pending.popleft().result()""", """            while pending:
                yield pending.pop().result()""",
        ("tests/models/test_streams_order.py", "tests/models/test_batch_invariance.py::test_the_streams_never_change_a_bit")),
    Bug("streams", "the dense server hands its engine task a query's text as a batch of its characters",
        "src/stagebench/stages/dense.py", "task([[p.query_prefix + ds.queries[qid]]])", "task([p.query_prefix + ds.queries[qid]])",
        ("tests/test_latency.py::test_model_stages_serve_one_query_exactly_as_their_batch_run_ranked_it",)),
    Bug("definitions", "compare of folders without runs takes any qrels fingerprint", "src/stagebench/results/compare.py",
        "    elif da.qrels_fingerprint != db.qrels_fingerprint:", "    elif False and da.qrels_fingerprint != db.qrels_fingerprint:",
        ("tests/results/test_comparisons.py::test_compare_refuses_folders_without_runs_scored_against_other_qrels",)),
    Bug("judging round", "a round's qrels digest checked only where its record names another folder",
        "src/stagebench/api/ground.py", '    if file_digest(rf.path / "qrels.trec") != rec.qrels_sha256:',
        '    if rec.folder != str(rf.path) and file_digest(rf.path / "qrels.trec") != rec.qrels_sha256:',
        (ESTIMATE + "test_a_round_is_refused_on_other_judgments_even_at_the_path_its_record_names",)),
    Bug("estimation", "the hole design's prior shift aimed at the drawn holes' unweighted shares",
        "src/stagebench/judgments/linear.py",
        "        w = np.concatenate([np.full(b - a, 1.0 / pi[i]) for i, (a, b) in zip(idx, spans)])",
        "        w = np.concatenate([np.full(b - a, 1.0) for i, (a, b) in zip(idx, spans)])",
        (EST_DEFS + "test_the_hole_designs_prior_shift_aims_at_the_drawn_holes_shares_weighted_by_1_over_pi",)),
    # issue 92: each behaviour where users reach it, planted at two places on its path
    Bug("judging round", "capped window not net of the sure units' rows (the exact probabilities)",
        "src/stagebench/judgments/capped.py", "lo_r, hi_r = max(0, lo - rows_sure), hi - rows_sure",
        "lo_r, hi_r = max(0, lo), hi", (HOLES + "test_a_capped_draw_with_sure_units_draws_the_rest_in_the_window_they_leave",)),
    Bug("judging round", "capped window not net of the sure units' rows (the draw)", "src/stagebench/judgments/capped.py",
        "        rows_sure = int(self.cost[sure].sum())", "        rows_sure = 0",
        (HOLES + "test_a_capped_draw_with_sure_units_draws_the_rest_in_the_window_they_leave",)),
    Bug("judging round", "the Sampler's query-design estimate without the floor", "src/stagebench/judgments/design.py",
        "variances=self.variances, fourths=self.fourths)  # fmt: skip", "variances=None, fourths=self.fourths)  # fmt: skip",
        (EST_DEFS + "test_the_sampler_every_command_goes_through_applies_the_floor_by_its_formula",)),
    Bug("judging round", "the estimate's floor dropped where the model's variances are given",
        "src/stagebench/judgments/estimate.py", "None if variances is None else fr.sensitivity(means, variances)", "None",
        (EST_DEFS + "test_the_sampler_every_command_goes_through_applies_the_floor_by_its_formula",)),
    Bug("judging round", "the refit's design matrix scaled by 1/pi (its target by 1/sqrt(pi))",
        "src/stagebench/judgments/estimate.py", "x]) * np.sqrt(weights)[:, None]", "x]) * weights[:, None]",
        (EST_DEFS + "test_the_sampler_every_command_goes_through_refits_by_weighted_least_squares",)),
    Bug("judging round", "the refit's weights 1/sqrt(pi)", "src/stagebench/judgments/estimate.py",
        "np.full(b - a, 1.0 / pi[i]) for i, (a, b) in zip(idx, spans)]) if spans else np.zeros(0)",
        "np.full(b - a, 1.0 / np.sqrt(pi[i])) for i, (a, b) in zip(idx, spans)]) if spans else np.zeros(0)",
        (EST_DEFS + "test_the_sampler_every_command_goes_through_refits_by_weighted_least_squares",)),
    Bug("judging round", "the learned model's features read the cross-encoder's run as it is (tail placeholders)",
        "src/stagebench/api/ground.py",
        'runs = {s: model_scores(g, s, cache_dir) if types.get(s) == "cross_encoder" else run for s, run in runs.items()}',
        "runs = dict(runs)",
        ("tests/judgments/test_pool_scores.py::test_the_learned_grade_models_features_read_the_models_scores_not_the_tails_placeholders",)),
    Bug("judging round", "a reranker's pool scores keep its tail", "src/stagebench/api/ground.py",
        "return {q: {d: x for d, x in docs.items() if d in head.get(q, ())} for q, docs in run.items()}",
        "return {q: dict(docs) for q, docs in run.items()}",
        ("tests/judgments/test_pool_scores.py::test_the_learned_grade_models_features_read_the_models_scores_not_the_tails_placeholders",)),
    Bug("devices", "fp32 on a GPU runs fp16 autocast (the placement says fp32)", "src/stagebench/runtime/devices.py",
        'return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(placement.precision)',
        'return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(placement.precision, torch.float16 if placement.kind == "cuda" else None)',
        ("tests/runtime/test_engine.py::test_auto_on_ray_gpu_workers_computes_in_fp32_for_every_model_stage_as_its_placement_says",)),
    Bug("devices", "a model's weights in fp16 on any GPU", "src/stagebench/runtime/devices.py",
        'if placement.precision == "fp16" or (placement.precision == "bf16" and placement.kind != "cpu"):',
        'if placement.kind == "cuda" or (placement.precision == "bf16" and placement.kind != "cpu"):',
        ("tests/runtime/test_engine.py::test_auto_on_ray_gpu_workers_computes_in_fp32_for_every_model_stage_as_its_placement_says",)),
    Bug("devices", "an LLM on Ray GPU workers at auto placed fp16", "src/stagebench/llm/chat.py",
        'placement = gpu_worker_placement(p.precision, "torch", label)',
        'placement = gpu_worker_placement("fp16" if p.precision == "auto" else p.precision, "torch", label)',
        ("tests/runtime/test_engine.py::test_auto_on_ray_gpu_workers_computes_in_fp32_for_every_model_stage_as_its_placement_says",)),
    Bug("models", "the streams hand the newest batch back first (with batches still to submit)",
        "src/stagebench/models/encoders.py", """                if len(pending) >= 2 * self.streams:
                    yield pending.popleft().result()""", """                if len(pending) >= 2 * self.streams:
                    yield pending.pop().result()""", ("tests/models/test_streams_order.py",)),
    Bug("models", "the dequantized-torch check compares the ONNX graph with itself", "src/stagebench/models/variants.py",
        "np.abs(onnx.predict(_PROBE_PAIRS, 8) - torch.predict(_PROBE_PAIRS, 8))",
        "np.abs(onnx.predict(_PROBE_PAIRS, 8) - onnx.predict(_PROBE_PAIRS, 8))", ("tests/models/test_onnx_weights.py::test_the_dequantized_torch_check_refuses_weights_that_score_otherwise",)),
    Bug("models", "the dequantized-torch check reads the ONNX check folder as the torch model", "src/stagebench/models/variants.py",
        'torch = STCrossEncoder(ResolvedModel(model.name, "sentence_transformers", str(folder), "check", "check"), 512, cpu, 1)',
        'torch = OnnxCrossEncoder(ResolvedModel(model.name, "onnx", str(check), "check", "check"), 512, cpu, 1)', ("tests/models/test_onnx_weights.py::test_the_dequantized_torch_check_refuses_weights_that_score_otherwise",)),
    # issue 94: a signal while the watched child starts
    Bug("ray", "a signal passed on to a starting child not remembered (taken for a lost cluster)",
        "src/stagebench/runtime/cluster/supervisor.py", "        passed.append(signum)\n", "        pass\n", ("tests/runtime/test_supervisor.py::test_a_signal_while_the_watched_child_starts_is_one_line_and_the_signals_exit",)),
    Bug("ray", "a child stopped by the user's signal judged as lost", "src/stagebench/runtime/cluster/supervisor.py",
        "if passed and said != LOST:", "if passed and said == LOST:", ("tests/runtime/test_supervisor.py::test_a_signal_while_the_watched_child_starts_is_one_line_and_the_signals_exit",)),
    # issue 94: concurrency and the busy-server rule across Ray's workers
    Bug("ray", "a server's units in blocks of a worker's share (queued at the first worker ready)",
        "src/stagebench/runtime/cluster/workers.py", "    return n, in_flight // n, 1\n",
        "    return n, in_flight // n, max(1, in_flight // n)\n",
        ("tests/runtime/test_engine_order.py::test_a_task_waiting_on_a_server_keeps_its_requests_in_flight_there",
         "tests/runtime/test_engine_order.py::test_results_follow_their_units_whatever_order_they_finish_in")),
    Bug("ray", "a worker's copy of the backend deaf to the others' answers", "src/stagebench/llm/http.py",
        "        seen = notes.latest() if notes is not None else None", "        seen = None", ("tests/llm/test_failing_servers.py::test_a_copy_of_the_backend_shared_by_ray_workers_hears_the_others_answers_and_counts_their_drops",)),
    Bug("ray", "a worker's copy counts its own drops only", "src/stagebench/llm/http.py",
        "allowance = self.timeout + self._dropped * self.sharers * service",
        "allowance = self.timeout + self._dropped * service", ("tests/llm/test_failing_servers.py::test_a_copy_of_the_backend_shared_by_ray_workers_hears_the_others_answers_and_counts_their_drops",)),
    Bug("ray", "a unit told to stop by another's failure raises as the map's error (Ray's wrapping)",
        "src/stagebench/runtime/cluster/workers.py", "                if kv._internal_kv_exists(stop_key):  # stopped because",
        "                if False:  # stopped because",
        ("tests/runtime/test_engine_order.py::test_results_follow_their_units_whatever_order_they_finish_in",)),
    Bug("definitions", "a folder's qrels fingerprint read as its corpus's (compare of folders without runs)",
        "src/stagebench/record.py", 'qrels_fingerprint=d.get("qrels_fingerprint"))', 'qrels_fingerprint=d.get("fingerprint"))',
        ("tests/results/test_comparisons.py::test_compare_refuses_folders_without_runs_scored_against_other_qrels",)),
    Bug("estimation", "the hole design's prior shift counts the drawn holes' grades unweighted",
        "src/stagebench/judgments/linear.py", "np.bincount(levels, weights=w, minlength=len(gains)) / w.sum()",
        "np.bincount(levels, minlength=len(gains)) / len(levels)",
        (EST_DEFS + "test_the_hole_designs_prior_shift_aims_at_the_drawn_holes_shares_weighted_by_1_over_pi",)),
    Bug("significance", "head-to-head p the raw randomization p", "src/stagebench/results/scoring.py",
        '"p": getattr(c, key)', '"p": c.p_rand',
        ("tests/results/test_comparisons.py::test_the_head_to_head_p_is_holm_over_its_family_where_holm_moves_it",)),
    Bug("significance", "Holm fields given the raw randomization p", "src/stagebench/results/scoring.py",
        "c.p_t_holm, c.p_rand_holm = pt, pr", "c.p_t_holm, c.p_rand_holm = pt, c.p_rand",
        ("tests/results/test_comparisons.py::test_the_head_to_head_p_is_holm_over_its_family_where_holm_moves_it",)),
    Bug("views", "fully judged stages left unordered (the pair bounds' and)", "src/stagebench/results/scoring.py",
        "open_ = lo <= 1e-12 and hi >= -1e-12", "open_ = lo <= 1e-12 or hi >= -1e-12",
        ("tests/results/test_comparisons.py::test_stages_the_judgments_fully_cover_are_ordered_whatever_their_values",)),
    Bug("views", "two stages' bounds taken to overlap when either end reaches the other (and -> or)",
        "src/stagebench/metrics/holes.py", "    return a[0] <= b[1] and b[0] <= a[1]", "    return a[0] <= b[1] or b[0] <= a[1]",
        ("tests/results/test_comparisons.py::test_stages_the_judgments_fully_cover_are_ordered_whatever_their_values",)),
    Bug("significance", "eval --baseline's interval at 90%", "src/stagebench/results/experiment.py",
        "lo, hi = bootstrap_ci(diffs, self.bootstrap, self.seed, level=self.level)",
        "lo, hi = bootstrap_ci(diffs, self.bootstrap, self.seed, level=0.9)",
        ("tests/cli/test_eval_runs.py::test_the_holm_fields_of_every_pair_are_its_adjusted_p_and_the_baseline_interval_is_adjusted_as_they_are",)),
    Bug("significance", "eval --baseline's interval level unadjusted", "src/stagebench/results/experiment.py",
        "return 1 - self.alpha / max(self.comparisons, 1)", "return 1 - self.alpha",
        ("tests/cli/test_eval_runs.py::test_the_holm_fields_of_every_pair_are_its_adjusted_p_and_the_baseline_interval_is_adjusted_as_they_are",)),
    Bug("bad input", "the API's compare takes any alpha", "src/stagebench/api/result.py",
        "permutations, seed, alpha = test_settings(permutations, seed, alpha)  # refused as compare's flags are", "pass",
        ("tests/test_api.py::test_the_python_api_refuses_what_the_command_line_refuses",)),
    Bug("bad input", "the shared test settings check nothing", "src/stagebench/config.py",
        "return tuple(declared(v, EvaluationConfig, k", "return tuple(v if True else declared(v, EvaluationConfig, k",
        ("tests/test_api.py::test_the_python_api_refuses_what_the_command_line_refuses",)),
)


def sandbox(root: Path) -> Path:
    """A copy of the repository at ``root/main`` (``root/shared`` links the shared data)."""
    main = root / "main"
    main.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache", ".hypothesis")
    for name in COPIED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, main / name, ignore=ignore)
        else:
            shutil.copy2(src, main / name)
    for name in LINKED:
        if (REPO / name).exists():
            (main / name).symlink_to(REPO / name)
    if SHARED.exists():
        (root / "shared").symlink_to(SHARED)
    return main


def plant(main: Path, bug: Bug) -> None:
    path = main / bug.file
    text = path.read_text(encoding="utf-8")
    if text.count(bug.old) != 1:
        raise SystemExit(f"{bug.name}: {bug.file} holds the planted text {text.count(bug.old)} times, not once")
    path.write_text(text.replace(bug.old, bug.new), encoding="utf-8")


def run_tests(main: Path, tests: tuple[str, ...], extra: list[str]) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(main / "src"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-rf", *extra, *tests]
    p = subprocess.run(cmd, cwd=main, env=env, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", help="bug names (substrings) to run")
    ap.add_argument("--tests", nargs="*", help="run these tests instead of each bug's own")
    ap.add_argument("--output", default=str(REPO / "planted.txt"))
    ap.add_argument("--clean", action="store_true", help="also run each bug's tests unplanted (they must pass)")
    ap.add_argument("--fast", action="store_true", help="leave out the tests marked slow")
    args = ap.parse_args()
    bugs = [b for b in BUGS if not args.only or any(o in b.name for o in args.only)]
    if not bugs:
        raise SystemExit(f"--only {' '.join(args.only)}: no planted bug's name holds it (names: benchmarks/planted.py)")
    lines, killed = [], 0
    extra = ["-m", "not slow"] if args.fast else []
    for b in bugs:
        tests = tuple(args.tests) if args.tests else b.tests
        with tempfile.TemporaryDirectory(prefix="planted-") as tmp:
            main_dir = sandbox(Path(tmp))
            if args.clean:
                rc, out = run_tests(main_dir, tests, extra)
                if rc != 0:
                    raise SystemExit(f"{b.name}: its tests fail without the bug:\n{out[-3000:]}")
            plant(main_dir, b)
            t0 = time.perf_counter()
            rc, out = run_tests(main_dir, tests, extra)
        failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", out, re.M)
        status = "killed" if rc == 1 and failed else "SURVIVED" if rc == 0 else f"error (pytest exit {rc})"
        killed += status == "killed"
        line = f"{status:<9} {b.kind:<20} {b.name:<60} {time.perf_counter() - t0:6.1f}s  {failed[0] if failed else ''}"
        print(line, flush=True)
        if status.startswith("error"):
            print(out[-2000:], flush=True)
        lines.append(line)
    summary = f"planted bugs killed: {killed} of {len(bugs)}"
    print(summary)
    Path(args.output).write_text("\n".join([*lines, summary]) + "\n", encoding="utf-8")
    return 0 if killed == len(bugs) else 1


if __name__ == "__main__":
    sys.exit(main())
