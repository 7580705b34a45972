"""Scoring a finished run: every stage's measures, significance against its inputs and the
baseline, ceilings, lost queries and label shares, as one typed :class:`~stagebench.table.StageTable`
(rendered by :mod:`stagebench.report`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from string import ascii_lowercase
from collections.abc import Sequence
from typing import Any

from stagebench import stats
from stagebench.metrics import Evaluation, Measure, evaluate, holes, parse_measure
from stagebench.metrics.delegate import described, ir_measures_version
from stagebench.metrics.compute import gain_map
from stagebench.record import LLMStats, Manifest, StageRecord
from stagebench.results import baselines, ceilings
from stagebench.results.depth import depth_sweep
from stagebench.runs import Run, rankings
from stagebench.table import CeilingCells, LLMCells, StageRow, StageTable


@dataclass
class Scored:
    """A scored run: its stage table, every significance comparison, the per-query values and the
    scored queries (the one query set every measure averages over)."""

    table: StageTable
    comparisons: list[dict]
    per_query: dict[str, dict[str, dict[str, float]]]  # stage -> measure -> qid -> value
    queries: list[str]
    judged_only_comparisons: list[dict] = field(default_factory=list)  # the significance tests of the judged-only view


def conventions_line(relevance_threshold: int, gain: Any, measures: Sequence[str] = ()) -> str:
    """The evaluation's conventions, for every table: the gain map, the relevance threshold, ties
    (nDCG_Burges's exponential gain only where ``measures`` has it)."""
    burges = "nDCG_Burges: exponential gain; " if any(m.startswith("nDCG_Burges") for m in measures) else ""
    return (f"nDCG: {gain_map(gain).describe()}; {burges}binary measures: relevant = grade >= {relevance_threshold}; "
            "ties: score desc, docid desc")  # fmt: skip


def stage_letter(i: int) -> str:
    return ascii_lowercase[i] if i < 26 else f"s{i}"


def comparisons_for(stages: list[StageRecord], baseline: str,
                    declared: Sequence[str] = ("inputs", "siblings", "baseline")) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:  # fmt: skip
    """The stage pairs ``declared`` (``evaluation.comparisons``) names, no pair twice: for each stage in
    order, against its inputs (a stage without inputs: the one listed before it), its earlier siblings
    (stages over the same input) and the baseline; then every pair (``all``) and the named ones (``A=B``).
    Returns (every pair, the head-to-head ones: siblings and named pairs, which the table shows first)."""
    names = [s.name for s in stages]
    pairs: list[tuple[str, str]] = []
    head: list[tuple[str, str]] = []

    def add(a: str, b: str, lead: bool = False) -> None:
        if a != b and (a, b) not in pairs and (b, a) not in pairs:
            pairs.append((a, b))
        if lead and a != b and (a, b) not in head and (b, a) not in head:
            head.append((a, b))

    for i, s in enumerate(stages[1:], start=1):
        if "inputs" in declared:
            for other in s.inputs or [names[i - 1]]:
                add(s.name, other)
        if "siblings" in declared and s.inputs:
            for other in stages[:i]:
                if list(other.inputs) == list(s.inputs):
                    add(s.name, other.name, lead=True)
        if "baseline" in declared:
            add(s.name, baseline)
    if "all" in declared:
        for i, a in enumerate(names):
            for b in names[:i]:
                add(a, b)
    for kind in declared:
        a, sep, b = (x.strip() for x in kind.partition("="))
        if sep:
            add(a, b, lead=True)
    return pairs, head


def comparisons_said(ev: Any, stages: list[StageRecord], baseline: str, head: list[tuple[str, str]]) -> str:
    """The notes' words for the family of comparisons the marks are corrected over."""
    declared = ev.comparisons
    parts = []
    if "all" in declared:
        parts.append("every other stage")
    if "inputs" in declared:
        parts.append("its inputs (a retriever: with the stage listed before it)")
    siblings = [f"{a} vs {b}" for a, b in head if any(s.name == a for s in stages) and f"{a}={b}" not in declared
                and f"{b}={a}" not in declared]  # fmt: skip
    if "siblings" in declared and siblings:
        parts.append(f"its siblings over the same input ({', '.join(siblings)})")
    if "baseline" in declared:
        parts.append(f"the baseline ({baseline})")
    named = [k for k in declared if "=" in k]
    if named:
        parts.append(f"as named ({', '.join(named)})")
    return "each stage is compared with " + (", with ".join(parts[:-1]) + " and with " + parts[-1] if len(parts) > 1 else parts[0])


def llm_cells(s: LLMStats) -> LLMCells:
    """An LLM stage's counts for the stage table (its timings stay in the manifest)."""
    return LLMCells(windows=s.windows, ok=s.ok, repaired=s.repaired, fallback=s.fallback, failed=s.failed,
                    repairs=dict(s.repairs), prompt_tokens=s.prompt_tokens, completion_tokens=s.completion_tokens,
                    cost=s.pricing.cost if s.pricing else None, method=s.method, low_mass=s.low_mass,
                    label_mass=s.label_mass)  # fmt: skip


def stage_evaluations(manifest: Manifest, qrels: dict, runs: dict[str, Run]) -> dict[str, Evaluation]:
    """Every stage's run scored as the main table scores it (unjudged documents as irrelevant)."""
    ev = manifest.evaluation
    return {s.name: evaluate(qrels, runs[s.name], ev.metrics, relevance_threshold=ev.relevance_threshold, gain=ev.gain)
            for s in manifest.stages}  # fmt: skip


def score_folder(manifest: Manifest, qrels: dict, runs: dict[str, Run]) -> Scored:
    """Score every stage of a folder: measures, significance, ceilings, labels; the stage table."""
    ev = manifest.evaluation
    rel, gain = ev.relevance_threshold, ev.gain
    stages = manifest.stages
    names = [s.name for s in stages]
    letters = {n: stage_letter(i) for i, n in enumerate(names)}
    ceiling_measure = parse_measure(ev.ceiling)
    evals = stage_evaluations(manifest, qrels, runs)
    metric_names = [m.name for m in evals[names[0]].measures]
    queries = evals[names[0]].scored_queries
    label_names = label_names_of(manifest, qrels, unnamed="grade {}")

    # significance: each stage vs the one before it and vs the baseline; Holm per metric; in the main
    # view (holes as irrelevant) and, from its own per-query values, in the judged-only view
    baseline = ev.baseline or names[0]
    pairs, head = comparisons_for(stages, baseline, ev.comparisons)
    comps, better = significance(evals, pairs, metric_names, queries, letters, ev)
    # the views of the holes, for stagebench's own measures (ir_measures' count a hole as irrelevant only)
    with_views = [m for m in evals[names[0]].measures if m.supports.views]
    delegated = [m for m in evals[names[0]].measures if not m.supports.views]
    judged = {n: evaluate(qrels, runs[n], with_views, relevance_threshold=rel, gain=gain, holes="judged_only")
              for n in names}  # fmt: skip
    judged_comps, judged_better = significance(judged, pairs, [m.name for m in with_views], queries, letters, ev)
    top = holes.top_grade(qrels, gain_map(gain))
    high = {n: evaluate(qrels, runs[n], with_views, relevance_threshold=rel, gain=gain, holes="top_grade")
            for n in names}  # fmt: skip
    viewed = [m.name for m in with_views if m.supports.holes_matter]
    bounded = {n: {m: _mean_bounds(evals[n].per_query[m], high[n].per_query[m], queries) for m in viewed}
               for n in names}  # fmt: skip
    unsettled = _unsettled(names, letters, {m.name: m for m in with_views if m.name in viewed}, bounded, runs, qrels,
                           queries, top, rel, gain)  # fmt: skip
    for m in delegated:  # no bounds: the holes settle none of its orders, so its every mark carries a "?"
        for n in names:
            unsettled[n][m.name] = [letters[o] for o in names if o != n]

    compared = head_to_head(head, comps, evals, queries, metric_names, letters, unsettled, ev)
    rows: list[StageRow] = []
    for s in stages:
        n = s.name
        e = evals[n]
        ceiling = None
        if s.is_reranker:
            depth = int(s.candidate_depth or 0)
            c = ceilings.ceiling(runs[s.inputs[0]], runs[n], qrels, queries, depth, rel, gain, ceiling_measure)
            ceiling = CeilingCells(depth=depth, pool_recall=round(c.pool_recall, 6), input=round(c.input, 6),
                                   achieved=round(c.achieved, 6), oracle=round(c.oracle, 6),
                                   change=round(c.achieved - c.input, 6),
                                   headroom_captured=None if c.headroom_captured is None else round(c.headroom_captured, 6),
                                   measure=ceiling_measure.name)  # fmt: skip
            lost = ceilings.lost(runs[s.inputs[0]], qrels, queries, rel, depth)
        else:
            lost = ceilings.lost(runs[n], qrels, queries, rel)
        rows.append(StageRow(
            stage=n, id=letters[n], type=s.type, inputs=list(s.inputs),
            metrics={m: round(v, 6) for m, v in e.means.items()},
            judged_only={m: round(judged[n].means[m], 6) for m in viewed},
            judged_only_better_than={m: sorted(v) for m, v in judged_better[n].items() if m in viewed},
            bounds={m: [round(x, 6) for x in bounded[n][m]] for m in viewed},
            unsettled={m: v for m, v in unsettled[n].items() if v},
            ci95={m: [round(x, 6) for x in stats.bootstrap_ci([e.per_query[m][q] for q in queries], ev.bootstrap,
                                                              ev.seed)] for m in metric_names},
            better_than={m: sorted(v) for m, v in better[n].items()}, queries=len(queries),
            queries_without_results=len(e.missing_queries), queries_excluded=e.excluded,
            recall={k: round(v, 6) for k, v in ceilings.recall_at(runs[n], qrels, queries, rel).items()},
            ceiling=ceiling, lost=lost,
            top10_labels={k: round(v, 6) for k, v in ceilings.top_labels(runs[n], qrels, queries, label_names).items()},
            llm=llm_cells(s.stats) if isinstance(s.stats, LLMStats) else None,
            depths=depth_sweep(s, runs, qrels, queries, rel, gain, ev, ceiling_measure) if s.depth_runs else None,
            compared=compared.get(n, {}),
        ))  # fmt: skip

    title = f"Stage table: {manifest.name}"
    ds = manifest.dataset
    first = evals[names[0]]
    scope = ds.corpus_scope + (" - only judged documents are indexed, which inflates recall"
                                  if ds.corpus_scope == "judged" else "")  # fmt: skip
    notes = [
        f"dataset: {ds.name} ({ds.documents:,} documents, corpus scope: {scope})",
        f"queries: {len(queries)} scored = every judged query with a positive grade, for every measure and threshold; "
        f"left out: {first.judged_without_positive} judged with no positive grade, "
        f"{first.unjudged_run_queries} in the runs but not judged",
        conventions_line(rel, gain, metric_names),
        f"significance: ^x = significantly better than stage x ({'paired randomization test, ' + str(ev.permutations) + ' permutations' if ev.test == 'randomization' else 'paired t-test'}, "
        f"seed {ev.seed}, Holm-Bonferroni over the {len(pairs)} comparisons of each metric, alpha {ev.alpha}); "
        f"{comparisons_said(ev, stages, baseline, head)}",
        "ceiling: for rerankers, N = candidate depth, pool R@N = recall of the candidates it received, oracle = nDCG@10 of "
        "their ideal order; lost = queries with no relevant document among the stage's candidates",
    ]  # fmt: skip
    share = sum(r.top10_labels.get("unjudged", 0.0) for r in rows) / len(rows)
    esci_eval = ", as the official ESCI evaluation does" if manifest.dataset_source[0] == "esci" else ""
    notes.append(f"unjudged documents (holes): {100 * share:.1f}% of the top-10 positions, averaged over the stages. "
                 "The main table counts a hole as irrelevant (trec_eval's default; a lower bound for P, R and RR, not "
                 "always for nDCG and AP, whose ideal a graded hole raises); 'judged only' removes holes before the cut "
                 f"at k (trec_eval -J{esci_eval}); 'bounds' span every hole "
                 f"irrelevant .. every hole at the top grade ({label_names.get(top, top)}), and where two stages' bounds "
                 "overlap the judgments do not settle their order (docs/metrics.md)")  # fmt: skip
    if any(r.llm for r in rows):
        notes.append("LLM reranking: calls are model requests (listwise: windows); listwise: ok = a complete "
                     "permutation, repaired = duplicates or unknown ids dropped / missing ones appended, fallback and "
                     "failed = the window kept its input order; pointwise / pairwise / setwise: ok = the label tokens "
                     "held at least half of the next-token probability (or the text named a label), low mass = less "
                     "(their relative probabilities still used), fallback = no label in the text (no preference), "
                     "label mass = the labels' mean share (docs/llm.md)")  # fmt: skip
    for r in rows:
        if r.llm is not None and r.llm.failed:
            notes.append(f"(!) {r.stage}: {r.llm.failed} of {r.llm.windows} LLM calls failed after every retry and were "
                         "accepted (failed_calls: accept): their products kept the input order (listwise, pointwise) "
                         "or the call said nothing (pairwise, setwise), so the row understates the model")  # fmt: skip
    if delegated:
        notes.append(f"computed by ir_measures {ir_measures_version()}: "
                     + ", ".join(f"{n} ({how})" for n, how in described(delegated, qrels, rel, gain_map(gain)).items())
                     + "; each under the conventions its name states (else the relevance threshold and gain above), "
                       "unjudged documents as irrelevant, over the same scored queries; they have no judged-only view "
                       "and no bounds, so their marks carry ? (not settled by the holes; docs/metrics.md)")  # fmt: skip
    notes += baselines.notes(manifest.tuned_baselines, names, {n: evals[n].means for n in names})
    notes += baselines.elsewhere(manifest.tuned_on, manifest.dataset_source[1])
    g = gain_map(gain)
    table = StageTable(rows, metric_names, title, notes, {"gain": g.as_json(), "gain_map": g.describe(),
                                                          "relevance_threshold": rel, "top_grade": top})  # fmt: skip
    per_query = {n: evals[n].per_query for n in names}
    return Scored(table, [c.as_dict() for c in comps], per_query, queries, [c.as_dict() for c in judged_comps])


def p_key(ev: Any) -> str:
    """The p-value the marks read: the evaluation's test, Holm-adjusted over the declared comparisons."""
    return "p_rand_holm" if ev.test == "randomization" else "p_t_holm"


def head_to_head(head: list[tuple[str, str]], comps: list[stats.PairTest], evals: dict, queries: list[str],
                 metric_names: list[str], letters: dict[str, str], unsettled: dict, ev: Any) -> dict[str, dict]:  # fmt: skip
    """For each head-to-head pair (a, b) (siblings, named pairs): stage a -> b -> measure -> the difference
    of the means, its bootstrap interval of the per-query differences adjusted as the p is - simultaneous
    over the comparisons the Holm correction is over (Bonferroni: level ``1 - alpha / m``, ``ci_level``), so
    an interval that excludes 0 sits beside a p below alpha, never beside one that says nothing - the
    Holm-adjusted p of the evaluation's test, wins/ties/losses over the queries, and whether the holes'
    bounds settle the order (``open`` where they do not, or the measure has no bounds)."""
    key = p_key(ev)
    by = {(c.a, c.b, c.metric): c for c in comps}
    family = {m: sum(1 for c in comps if c.metric == m) for m in metric_names}
    out: dict[str, dict] = {}
    for a, b in head:
        for m in metric_names:
            c = by.get((a, b, m))
            if c is None:  # named B=A where the family already holds A against B (an input, a sibling): turned round
                r = by[(b, a, m)]
                c = stats.PairTest(a, b, m, r.mean_b, r.mean_a, -r.t, r.p_t, r.p_rand, r.losses, r.ties, r.wins,
                                   r.p_t_holm, r.p_rand_holm)  # fmt: skip
            diffs = [evals[a].per_query[m][q] - evals[b].per_query[m][q] for q in queries]
            level = 1 - ev.alpha / family[m]
            lo, hi = stats.bootstrap_ci(diffs, ev.bootstrap, ev.seed, level=level)
            holes = "open" if letters[b] in unsettled.get(a, {}).get(m, []) else "settled"
            out.setdefault(a, {}).setdefault(b, {})[m] = {
                "difference": round(c.mean_a - c.mean_b, 6), "ci": [round(lo, 6), round(hi, 6)],
                "ci_level": round(level, 6), "comparisons": family[m],
                "p": getattr(c, key), "wins": c.wins, "ties": c.ties, "losses": c.losses, "holes": holes}
    return out


def significance(evals: dict, pairs: list[tuple[str, str]], metric_names: list[str], queries: list[str],
                 letters: dict[str, str], ev: Any) -> tuple[list[stats.PairTest], dict[str, dict[str, list[str]]]]:  # fmt: skip
    """Every compared pair on every measure (Holm over the pairs of each measure), and the letters
    each stage significantly beats under the evaluation's test."""
    comps: list[stats.PairTest] = []
    for m in metric_names:
        family = [stats.paired_test(a, b, m, [evals[a].per_query[m][q] for q in queries],
                                [evals[b].per_query[m][q] for q in queries], ev.permutations, ev.seed)
                  for a, b in pairs]  # fmt: skip
        for c, pt, pr in zip(family, stats.holm([c.p_t for c in family]), stats.holm([c.p_rand for c in family])):
            c.p_t_holm, c.p_rand_holm = pt, pr
        comps += family
    key = p_key(ev)
    better: dict[str, dict[str, list[str]]] = {n: {} for n in evals}
    for c in comps:
        if getattr(c, key) < ev.alpha and c.mean_a != c.mean_b:
            win, lose = (c.a, c.b) if c.mean_a > c.mean_b else (c.b, c.a)
            better[win].setdefault(c.metric, []).append(letters[lose])
    return comps, better


def _unsettled(names: list[str], letters: dict[str, str], measures: dict[str, Measure],
               bounded: dict[str, dict[str, tuple[float, float]]], runs: dict[str, Run], qrels: dict,
               queries: list[str], top: int, rel: int, gain: object) -> dict[str, dict[str, list[str]]]:  # fmt: skip
    """Stage -> measure -> the letters of the stages the judgments leave it unordered with: their
    bounds overlap, or, where they do not, the pair's own bounds over every grading of the holes
    (:func:`stagebench.metrics.holes.pair_bounds`) still hold 0. The two bounds each stage's
    row shows (every hole irrelevant, every hole at the top grade) are two gradings, not the
    extremes of nDCG over all of them (a hole at the top grade raises the ideal), so apart they
    would claim orders a grading of the holes reverses (issue 69)."""
    ranked: dict | None = None
    out: dict[str, dict[str, list[str]]] = {n: {m: [] for m in measures} for n in names}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            for m, measure in measures.items():
                open_ = holes.overlap(bounded[a][m], bounded[b][m])
                if not open_:
                    ranked = ranked if ranked is not None else rankings(runs, names, queries)
                    lo, hi = holes.pair_bounds(ranked, qrels, queries, measure, top, rel, gain, a, b)
                    open_ = lo <= 1e-12 and hi >= -1e-12
                if open_:
                    out[a][m].append(letters[b])
                    out[b][m].append(letters[a])
    return out


def _mean_bounds(low: dict[str, float], high: dict[str, float], queries: list[str]) -> tuple[float, float]:
    """The bounds of a measure's mean: the means of its per-query bounds (:func:`holes.bounds`)."""
    lo, hi = holes.bounds({q: low[q] for q in queries}, {q: high[q] for q in queries})
    n = len(queries)
    return sum(lo.values()) / n, sum(hi.values()) / n


def label_names_of(manifest: Manifest, qrels: dict, unnamed: str = "{}") -> dict[int, str]:
    """grade -> display label (E/S/C/I for ESCI); a dataset without names (e.g. BEIR): each grade
    formatted with ``unnamed``, highest first."""
    names = manifest.dataset.label_names
    return names or {g: unnamed.format(g) for g in sorted({g for docs in qrels.values() for g in docs.values()}, reverse=True)}
