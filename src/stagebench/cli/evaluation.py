"""``stagebench eval``: TREC run files scored against TREC qrels, one or several side by side."""

from __future__ import annotations

import argparse
import json
import sys

from stagebench import api
from stagebench.cli.flags import gain_spec
from stagebench.config import test_settings
from stagebench.errors import StagebenchError
from stagebench.results.scoring import conventions_line


def parser_eval(sub) -> None:
    """``stagebench eval``'s arguments, beside its handler."""
    e = sub.add_parser("eval", help="score a TREC run file against TREC qrels; several run files side by side, each "
                       "pair tested for significance (as ranx compare, pt.Experiment)")  # fmt: skip
    e.add_argument("qrels")
    e.add_argument("run", nargs="+")
    e.add_argument("--permutations", type=int, default=10000, help="several runs: paired randomization test permutations")
    e.add_argument("--seed", type=int, default=42, help="several runs: the randomization test's seed")
    e.add_argument("--alpha", type=float, default=0.05, help="several runs: significance level, Holm over the pairs")
    e.add_argument("--baseline", help="several runs: test every run against this one (its file, or its name: the file's "
                   "name without extension) instead of every pair, with each difference's interval and wins/ties/losses "
                   "(as pt.Experiment's baseline=)")  # fmt: skip
    e.add_argument("-m", "--metric", dest="metrics", action="extend", nargs="+", required=True,
                   help="measure names, e.g. -m nDCG@10 RR@10 R@100 (repeatable)")  # fmt: skip
    e.add_argument("--rel", type=int, default=1, help="relevance threshold for binary measures and for ir_measures' "
                   "measures whose name gives no rel (default 1, as trec_eval -l)")  # fmt: skip
    e.add_argument("--queries", choices=("judged", "run"), default="judged",
                   help="which queries are averaged: judged (default: every judged query with a positive grade, one "
                        "the run lacks scored on an empty ranking, as trec_eval -c) or run (only those the run holds, "
                        "trec_eval's default; with several runs, those every run holds)")  # fmt: skip
    e.add_argument("-c", dest="queries", action="store_const", const="judged", help="the same as --queries judged")
    e.add_argument("-M", dest="max_per_query", type=int, default=None, metavar="N",
                   help="keep each query's top N documents of each run (trec_eval's order), as trec_eval -M N")
    e.add_argument("--gain", type=gain_spec, default="linear",
                   help="nDCG gain map: linear (default), exponential, esci (the official task-1 gains, docs/metrics.md), "
                        "or a table G=V,G=V as trec_eval's -m ndcg.1=3,2=9,4=4.5 (a grade of the qrels not listed keeps "
                        "its own value as gain, 0 for grades <= 0, as trec_eval)")  # fmt: skip
    e.add_argument("--test", choices=("randomization", "ttest"), default="randomization",
                   help="several runs: the test whose Holm-adjusted p marks significance (both are computed; "
                        "evaluation.test in a config)")  # fmt: skip
    e.add_argument("--view", choices=("irrelevant", "judged-only", "bounds", "all"), default="irrelevant",
                   help="what an unjudged document counts as: irrelevant (default, as trec_eval), judged-only (removed "
                        "before the cut, as trec_eval -J), bounds (low: every one irrelevant, high: every one at the "
                        "top grade), all (the three side by side); docs/metrics.md")  # fmt: skip
    e.add_argument("-J", dest="view", action="store_const", const="judged-only", help="the same as --view judged-only")
    e.add_argument("--json", action="store_true", help="print one JSON object: measure -> mean (bounds: [low, high]; "
                   "all: measure -> view -> mean)")  # fmt: skip
    e.add_argument("--per-query", action="store_true", help="also print per-query values")
    e.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    if len(args.run) == 1 and args.baseline:
        raise StagebenchError("--baseline: give two or more run files, one of them the baseline")
    if len(args.run) > 1:
        if args.json or args.view != "irrelevant":
            raise StagebenchError("several runs: --json and --view are for one run (the table of several shows the "
                                  "judged-only view and the bounds beside the main one)")  # fmt: skip
        permutations, seed, alpha = test_settings(args.permutations, args.seed, args.alpha, flags=True)
        exp = api.compare_runs(args.qrels, args.run, args.metrics, relevance_threshold=args.rel, gain=args.gain,
                               permutations=permutations, seed=seed, alpha=alpha, queries=args.queries,
                               max_per_query=args.max_per_query, baseline=args.baseline, test=args.test)  # fmt: skip
        sys.stdout.write(exp.text())
        if args.per_query:
            print("\n# run\tmeasure\tquery\tvalue")
            print("\n".join(exp.per_query_lines()))
        return 0
    args.run = args.run[0]
    result = api.evaluate_files(args.qrels, args.run, args.metrics, relevance_threshold=args.rel, gain=args.gain,
                                view=args.view, queries=args.queries, max_per_query=args.max_per_query)  # fmt: skip
    _eval_header(args, result.evaluation, result.delegated, list(result.delegated) if args.view != "irrelevant" else [])
    if result.views is not None:
        return _eval_views(args, result.views)
    ev = result.evaluation
    means = ev.means
    if args.json:
        print(json.dumps({k: round(v, 6) for k, v in means.items()}))
        return 0
    if args.per_query:
        for q in ev.scored_queries:
            for name in means:
                print(f"{name}\t{q}\t{ev.per_query[name][q]:.4f}")
    for name, v in means.items():
        print(f"{name}\tall\t{v:.4f}")
    return 0


def _eval_header(args: argparse.Namespace, ev, delegated: dict[str, str], unviewed: list[str] = ()) -> None:  # type: ignore[assignment]
    """The lines on stderr that say how ``eval`` scored: gain, threshold, view, query set, and which
    measures ir_measures computed (and as what, under the conventions)."""
    excluded = ", ".join(f"{n} {why}" for why, n in ev.excluded.items())
    view = {"irrelevant": "unjudged documents count as irrelevant",
            "judged-only": "unjudged documents removed before the cut at k (trec_eval -J)",
            "bounds": "bounds: every unjudged document irrelevant .. every one at the top grade",
            "all": "unjudged documents: as irrelevant, judged only (trec_eval -J), and the bounds"}[args.view]  # fmt: skip
    if ev.queries == "judged":
        which = (f"{len(ev.scored_queries)} scored queries (every judged query with a positive grade, as trec_eval -c; "
                 f"--queries run for trec_eval's default), {len(ev.missing_queries)} of them without results (scored "
                 "on an empty ranking)")  # fmt: skip
    else:
        which = (f"{len(ev.scored_queries)} scored queries (the judged queries with a positive grade the run holds, "
                 "as trec_eval without -c)")  # fmt: skip
    cut = f"; each query's top {args.max_per_query} only (-M)" if args.max_per_query else ""
    print(f"# {conventions_line(args.rel, args.gain, args.metrics)}; {view}; {which}{cut}; 'all' is the mean over "
          f"them; left out: {excluded}", file=sys.stderr)  # fmt: skip
    if delegated:
        named = ", ".join(f"{n} ({how})" for n, how in delegated.items())
        print(f"# delegated to ir_measures {api.ir_measures_version()}: {named} (ir_measures' own implementation, "
              f"relevant = grade >= {args.rel} where the name gives no rel; unjudged documents as irrelevant; the same "
              "scored queries)", file=sys.stderr)  # fmt: skip
    if unviewed:
        print(f"# no judged-only view and no bounds for {', '.join(unviewed)} (ir_measures counts an unjudged document "
              "as irrelevant): shown in the main view only", file=sys.stderr)  # fmt: skip


def _eval_views(args: argparse.Namespace, views: api.HoleViews) -> int:
    """``eval --view bounds|all``: per measure the bounds (and with ``all`` the main and judged-only
    values beside them); a measure the holes cannot move (Judged@k) has the same value everywhere."""
    rows = views.means
    if args.json:
        out = {n: ([round(r["low"], 6), round(r["high"], 6)] if args.view == "bounds" else
                   {k: round(v, 6) for k, v in r.items()}) for n, r in rows.items()}  # fmt: skip
        print(json.dumps(out))
        return 0
    if args.per_query:
        bounds = {name: views.bounds(name) for name in rows}
        low, judged = views.irrelevant.per_query, views.judged_only.per_query
        for q in views.scored_queries:
            for name in rows:
                lo, hi = bounds[name][q]
                extra = "" if args.view == "bounds" else f"\t{low[name][q]:.4f}\t{judged[name][q]:.4f}"
                print(f"{name}\t{q}{extra}\t{lo:.4f}\t{hi:.4f}")
    if args.view == "all":
        print("# measure\tqueries\tirrelevant\tjudged_only\tlow\thigh")
    for name, r in rows.items():
        extra = "" if args.view == "bounds" else f"\t{r['irrelevant']:.4f}\t{r['judged_only']:.4f}"
        print(f"{name}\tall{extra}\t{r['low']:.4f}\t{r['high']:.4f}")
    return 0
