"""The ``stagebench`` command line."""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import signal
import sys
import typing
import time
import traceback
from pathlib import Path

from stagebench import api
from stagebench.cache import human_bytes
from stagebench.config import EvaluationConfig
from stagebench.params import coerce
from stagebench.data.synthetic import SyntheticSpec
from stagebench.errors import StagebenchError
from stagebench.report.tables import (check_text, comparison_text, matrix_csv, matrix_markdown, matrix_text, segments_csv,
                                     segments_markdown, segments_text)  # fmt: skip
from stagebench.reproductions import reproductions_markdown
from stagebench.results.check import Expected
from stagebench.judgments.design import DESIGNS, HOLE, HOLE_WHEN
from stagebench.judgments.grades import GRADE_MODELS
from stagebench.judgments.planning import STRATEGIES
from stagebench.results.segments import MIN_QUERIES
from stagebench.results.scoring import conventions_line
from stagebench.runtime.cluster.supervisor import (ClusterLost, connect_watched, output_log, report_finished,
                                                 report_lost, run_watched, watched)  # fmt: skip
from stagebench.version import __version__


def _parser_run(sub) -> None:
    """``stagebench run``'s arguments, beside its handler."""
    r = sub.add_parser("run", help="run a config's stages and write the stage table")
    r.add_argument("config")
    r.add_argument("--output", help="results folder (default: the config's output)")
    r.add_argument("--cache-dir", help=CACHE_DIR_HELP)
    r.add_argument("--recompute", action="store_true", help="ignore cached stage results and replace them")
    r.add_argument("--dry-run", action="store_true", help="say which stages the cache holds and what the others would "
                   "compute (a reranker's pairs), then stop: nothing is computed or written")  # fmt: skip
    r.add_argument("--engine", choices=("local", "ray"),
                   help="run every stage on this engine (with the config's engine: settings when they are of this "
                        "type); the results and the cache are the same either way (docs/scale.md)")  # fmt: skip
    r.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    config = api.load_config(args.config, engine=args.engine)
    if args.dry_run:
        sys.stdout.write(api.dry_run(config, args.output, cache_dir=args.cache_dir, recompute=args.recompute).text())
        return 0
    engine = config.ray_engine()
    if engine is not None and getattr(args, "argv", None) is not None:
        out = api.check_run(config, args.output, args.cache_dir)  # refused at once, before a child and a cluster start
        return run_watched(args.argv, config.path, engine, out, api.cache(args.cache_dir, config).remove_leftovers)
    if engine is not None and getattr(args, "watched", False):
        connect_watched(engine, f"{config.path}: engine")  # the watched child (stagebench.runtime.cluster.supervisor)
    result = api.run(config, args.output, cache_dir=args.cache_dir, recompute=args.recompute)
    sys.stdout.write(result.table_text)
    if result.judge_text:
        sys.stdout.write("\n" + result.judge_text + f"(the judge-filled stage table: {result.output / 'judge' / 'stage_table.txt'})\n")
    logging.getLogger("stagebench").info("results written to %s", result.output)
    return 0


def _parser_judge(sub) -> None:
    """``stagebench judge``'s arguments, beside its handler."""
    j = sub.add_parser("judge", help="grade a finished run folder's unjudged top documents with an LLM judge (its "
                       "agreement with the human labels measured) and write the judge-filled stage table")  # fmt: skip
    j.add_argument("run_dir")
    j.add_argument("--config", help="a config whose judge: section to use (default: the folder's own config's)")
    j.add_argument("--cache-dir", help=CACHE_DIR_HELP)
    j.set_defaults(func=_cmd_judge)


def _cmd_judge(args: argparse.Namespace) -> int:
    rendered = api.judge(args.run_dir, args.config, args.cache_dir)
    sys.stdout.write(rendered.judge_text + "\n" + (Path(args.run_dir) / "judge" / "stage_table.txt").read_text(encoding="utf-8"))
    return 0


def _declared(value, section: type, name: str, flag: str):
    """A flag's value checked by the declaration of the config key it stands for (one schema for
    both: ``compare --alpha`` is ``evaluation.alpha``): its type, range and finiteness."""
    return None if value is None else coerce(value, typing.get_type_hints(section, include_extras=True)[name], flag)


def _positive_int(text: str, most: int = 1_000_000) -> int:
    """An argparse type: an integer in 1..``most`` (argparse names the flag in its one-line error)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= v <= most:
        raise argparse.ArgumentTypeError(f"{v} is out of range 1..{most:,}")
    return v


def _budgets(text: str) -> list[int]:
    return [_positive_int(x.strip()) for x in text.split(",")]


def _rates(text: str) -> list[float]:
    out = []
    for x in text.split(","):
        try:
            v = float(x)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{x.strip()!r} is not a number") from None
        if not 0 < v < 1:
            raise argparse.ArgumentTypeError(f"{x.strip()}: a share of the judgments kept, strictly between 0 and 1")
        out.append(v)
    return out


def _parser_incompleteness(sub) -> None:
    """``stagebench incompleteness``'s arguments, beside its handler."""
    inc = sub.add_parser("incompleteness", help="how each view of the unjudged documents ranks the stages when "
                         "judgments are taken away (and against the truth, when the rules judged the folder)")  # fmt: skip
    inc.add_argument("run_dir")
    inc.add_argument("--rates", type=_rates, default=[0.9, 0.7, 0.5, 0.3, 0.1],
                     help="shares of each query's judgments kept, comma separated (default 0.9,0.7,0.5,0.3,0.1)")
    inc.add_argument("--seeds", type=_positive_int, default=3, help="random draws per share (default 3)")
    inc.add_argument("--measure", help="the measure (default: nDCG@10 when scored, else the first)")
    inc.add_argument("--permutations", type=_positive_int, default=1000, help="randomization test permutations (default 1000)")
    inc.add_argument("--json", help="also write the results as JSON to this file")
    inc.add_argument("--plot", help="also write the tau-by-share plot (PNG) to this file")
    inc.add_argument("--report", action="store_true", help="keep the results in the folder and show them in its report.html")
    inc.set_defaults(func=_cmd_incompleteness)


def _cmd_incompleteness(args: argparse.Namespace) -> int:
    permutations = _declared(args.permutations, EvaluationConfig, "permutations", "--permutations")
    inc = api.incompleteness(args.run_dir, args.rates, args.seeds, args.measure, permutations, args.report,
                             json_path=args.json, plot_path=args.plot)  # fmt: skip
    sys.stdout.write(inc.text())
    return 0


def _parser_plan_judgments(sub) -> None:
    """``stagebench plan-judgments``'s arguments, beside its handler."""
    pj = sub.add_parser("plan-judgments", help="pick the unjudged pairs whose grades settle the most open stage orders "
                        "and write a worksheet for raters (CSV and JSONL); --simulate compares strategies")  # fmt: skip
    pj.add_argument("run_dir")
    pj.add_argument("--budget", type=_budgets, required=True, help="judgments to ask for (with --simulate: several, comma separated)")
    pj.add_argument("--output", help="the worksheet (.csv; the .jsonl beside it); never written over")
    pj.add_argument("--strategy", choices=list(STRATEGIES), default="plan",
                    help="; ".join(f"{s.name}{' (default)' if s.name == 'plan' else ''}: {s.what}" for s in STRATEGIES.values())
                    + " (docs/metrics.md#a-judging-round, #the-estimated-view)")  # fmt: skip
    pj.add_argument("--predictor", help="sample: the grade model: a stage whose scores to calibrate (default: the last "
                    "cross-encoder, else the last stage), or " + "; ".join(f"{m.name}: {m.what}" for m in GRADE_MODELS.values()))  # fmt: skip
    pj.add_argument("--aim", action="append", metavar="A=B", help="--strategy sample: aim the sample at the difference of "
                    "stages A and B (repeatable; default: the pairs the grade model predicts the budget can settle); "
                    "the plan says how many judgments each aimed pair needs if the model is right")  # fmt: skip
    pj.add_argument("--design", choices=DESIGNS, help="--strategy sample: hole (default): one judgment buys one hole "
                    f"in each query whose judged documents make at least {HOLE_WHEN:.0%}% of its expected ideal DCG (its "
                    "nDCG linearised: a small bias, measured), any other query judged whole; query: every query whose "
                    "ideal the holes can change judged whole (exactly unbiased); either way the rows never pass the "
                    "budget (docs/metrics.md#the-hole-design); with --simulate: only this design (default: both, side "
                    "by side)")  # fmt: skip
    pj.add_argument("--show-ranks", action="store_true", help="put each stage's rank of the pair in the worksheet "
                    "(default: blind, the raters do not see which stage found it)")  # fmt: skip
    pj.add_argument("--rounds", type=_positive_int, default=200, help="--simulate --strategy sample: rounds a budget (default 200)")
    pj.add_argument("--hide", type=float, help="--simulate --strategy sample: answer from this share of all pairs in "
                    "any stage's top k hidden as holes, judged or not, a real hole counting irrelevant (data without a "
                    "rules judge: Cranfield, real ESCI)")  # fmt: skip
    pj.add_argument("--depth", type=_positive_int, default=10, help="the pool: unjudged pairs in every stage's top DEPTH (default 10)")
    pj.add_argument("--measure", help="the measure whose stage orders to settle (default: nDCG@10 when scored)")
    pj.add_argument("--seed", type=int, default=0, help="random strategy: its seed")
    pj.add_argument("--simulate", action="store_true", help="answer each strategy's pairs with the folder's judge grades "
                    "(the rules judge: the truth) and count the stage pairs each settles")  # fmt: skip
    pj.add_argument("--seeds", type=_positive_int, default=3, help="--simulate: random strategy seeds (default 3)")
    pj.add_argument("--json", help="--simulate: also write the results as JSON to this file")
    pj.add_argument("--cache-dir", help="--strategy sample with a cross-encoder grade model: the cache its scores of "
                    "the pairs outside its pool go to (default: the folder's config's cache_dir, else "
                    ".stagebench-cache)")  # fmt: skip
    pj.set_defaults(func=_cmd_plan)


def _cmd_plan(args: argparse.Namespace) -> int:
    if args.simulate and STRATEGIES[args.strategy].sampled:
        cov = api.simulate_estimates(args.run_dir, args.budget, rounds=args.rounds, measure=args.measure,
                                     predictor=args.predictor, hide=args.hide, seed=args.seed, json_path=args.json,
                                     cache_dir=args.cache_dir,
                                     designs=[args.design] if args.design in DESIGNS else DESIGNS)  # fmt: skip
        sys.stdout.write(cov.text())
        return 0
    if args.simulate:
        sim = api.simulate_plans(args.run_dir, args.budget, depth=args.depth, seeds=args.seeds, measure=args.measure,
                                 json_path=args.json)  # fmt: skip
        sys.stdout.write(sim.text())
        return 0
    if len(args.budget) != 1:
        raise StagebenchError("--budget: one budget for a worksheet (several only with --simulate)")
    if not args.output:
        raise StagebenchError("--output: the worksheet's path (a .csv; the .jsonl is written beside it)")
    sheet = api.plan_judgments(args.run_dir, args.budget[0], args.output, strategy=args.strategy, depth=args.depth,
                               measure=args.measure, seed=args.seed, predictor=args.predictor,
                               show_ranks=args.show_ranks, cache_dir=args.cache_dir, aim=args.aim,
                               design=args.design or HOLE)  # fmt: skip
    for line in sheet.power:
        print(f"aimed at {line}")
    print(f"{sheet.pairs} pairs to judge: {sheet.csv} and {sheet.jsonl} (fill the grade column, then: stagebench "
          f"add-judgments {args.run_dir} {sheet.csv} --output NEW_DIR)")  # fmt: skip
    return 0


#: add-judgments' exit status when the folder was written but the round's estimated view was refused
ESTIMATE_REFUSED = 3


def _parser_add_judgments(sub) -> None:
    """``stagebench add-judgments``'s arguments, beside its handler."""
    aj = sub.add_parser("add-judgments", help="score a finished folder again with graded worksheets added to its qrels, "
                        "into a new folder with where each judgment came from")  # fmt: skip
    aj.add_argument("run_dir")
    aj.add_argument("worksheets", nargs="+", help="worksheets plan-judgments wrote, graded (CSV or JSONL)")
    aj.add_argument("--output", required=True, help="the new results folder (the source folder is left as it is)")
    aj.add_argument("--prefer", choices=["existing", "worksheet"],
                    help="when a worksheet grades a pair the folder's qrels grade differently: which wins (default: refuse)")
    aj.add_argument("--cache-dir", help="a sampling round's worksheet: the cache of the grade model's scores (as "
                    "plan-judgments --cache-dir; default: the folder's config's cache_dir, else .stagebench-cache)")  # fmt: skip
    aj.epilog = (f"exit status {ESTIMATE_REFUSED}: the judgments were added and the folder written, but a sampling "
                 "round's estimated view was refused (a drawn row ungraded, an edited probability, its record missing "
                 "or another round's); the line says why")  # fmt: skip
    aj.set_defaults(func=_cmd_add_judgments)


def _cmd_add_judgments(args: argparse.Namespace) -> int:
    added = api.add_judgments(args.run_dir, args.worksheets, args.output, args.prefer, args.cache_dir)
    sys.stdout.write(added.table_text)
    if added.estimate_refused:  # the judgments are in; the round's estimate is not: a pipeline must know
        print(f"stagebench: the judgments were added and written to {args.output}, but the estimated view was "
              f"refused: {added.estimate_refused}", file=sys.stderr)  # fmt: skip
        return ESTIMATE_REFUSED
    return 0


def _parser_table(sub) -> None:
    """``stagebench table``'s arguments, beside its handler."""
    t = sub.add_parser("table", help="re-score and re-render a finished run folder from its saved runs (no stage runs)")
    t.add_argument("run_dir")
    t.set_defaults(func=_cmd_table)


def _cmd_table(args: argparse.Namespace) -> int:
    sys.stdout.write(api.table(args.run_dir).table_text)
    return 0


def _parser_show(sub) -> None:
    """``stagebench show``'s arguments, beside its handler."""
    sh = sub.add_parser("show", help="one query in a finished run folder: each stage's top 10 with grades and moves")
    sh.add_argument("run_dir")
    sh.add_argument("query_id")
    sh.set_defaults(func=_cmd_show)


def _cmd_show(args: argparse.Namespace) -> int:
    sys.stdout.write(api.show(args.run_dir, args.query_id))
    return 0


def _parser_compare(sub) -> None:
    """``stagebench compare``'s arguments, beside its handler."""
    c = sub.add_parser("compare", help="two run folders' stage tables side by side, with significance per matching stage")
    c.add_argument("run_dir_a", help="the first results folder (A)")
    c.add_argument("run_dir_b", help="the second results folder (B); each stage is compared with A's stage of the same name")
    c.add_argument("--permutations", type=int, default=10000, help="paired randomization test permutations")
    c.add_argument("--seed", type=int, default=42, help="the randomization test's seed")
    c.add_argument("--alpha", type=float, default=0.05, help="significance level, Holm-corrected over the matching stages")
    c.add_argument("--pair", action="append", default=[], metavar="A_STAGE=B_STAGE",
                   help="compare A's stage with B's of another name too (repeatable), e.g. cross_encoder=ce_finetuned")
    c.add_argument("--judgments", choices=["same", "each"], default="same",
                   help="same: refuse folders that judge a shared query differently; each: each folder under its own "
                   "qrels, as its table has it (a judging round's before and after)")  # fmt: skip
    c.set_defaults(func=_cmd_compare)


def _cmd_compare(args: argparse.Namespace) -> int:
    permutations, seed, alpha = (_declared(getattr(args, k), EvaluationConfig, k, f"--{k}") for k in ("permutations", "seed", "alpha"))
    pairs = {}
    for p in args.pair:
        sa, sep, sb = p.partition("=")
        if not sep or not sa or not sb:
            raise StagebenchError(f"--pair {p}: A_STAGE=B_STAGE, e.g. cross_encoder=ce_finetuned")
        pairs[sa] = sb
    sys.stdout.write(comparison_text(api.compare(args.run_dir_a, args.run_dir_b, permutations=permutations,
                                                 seed=seed, alpha=alpha, pairs=pairs, judgments=args.judgments)))  # fmt: skip
    return 0


def _parser_segments(sub) -> None:
    """``stagebench segments``'s arguments, beside its handler."""
    sg = sub.add_parser("segments", help="a finished run folder's stages within query segments (length, negation, "
                        "judged or relevant products, locale, source, or a qid<TAB>segment file), each stage's change "
                        "tested per segment")  # fmt: skip
    sg.add_argument("run_dir")
    sg.add_argument("--by", action="append", metavar="length|negation|judged|relevant|locale|source|FILE",
                    help="a built-in segmentation or a qid<TAB>segment file (or ESCI's query_id,source CSV); repeat for "
                         "several (default: the run's evaluation.segments, else length, negation, and judged and "
                         "relevant when the folder holds its qrels); locale and source: as the run stored them")  # fmt: skip
    sg.add_argument("--measure", help="the measure shown (default: the run's first); json and csv hold every measure")
    sg.add_argument("--format", choices=["text", "markdown", "csv", "json"], default="text")
    sg.add_argument("--min-queries", type=int, default=MIN_QUERIES, help="segments with fewer queries are not tested")
    sg.set_defaults(func=_cmd_segments)


def _cmd_segments(args: argparse.Namespace) -> int:
    if args.measure is None:
        measure = api.measure_of(args.run_dir)  # an error names the folder, as it is
    else:
        try:
            measure = api.measure_of(args.run_dir, args.measure)
        except StagebenchError as exc:
            raise StagebenchError(f"--measure {args.measure}: {exc}") from None
    found = api.segments(args.run_dir, args.by, args.min_queries)
    if args.format == "json":
        print(json.dumps([t.as_dict() for t in found], indent=2))
    elif args.format == "csv":
        sys.stdout.write(segments_csv(found))
    else:
        render = segments_markdown if args.format == "markdown" else segments_text
        sys.stdout.write("\n".join(render(t, measure) for t in found))
    return 0


def _parser_matrix(sub) -> None:
    """``stagebench matrix``'s arguments, beside its handler."""
    mx = sub.add_parser("matrix", help="a finished run's reranker-by-pool matrix (its config's matrix: section): "
                        "each reranker's nDCG@10 and headroom captured over each candidate pool")  # fmt: skip
    mx.add_argument("run_dir")
    mx.add_argument("--format", choices=["text", "markdown", "csv", "json"], default="text")
    mx.set_defaults(func=_cmd_matrix)


def _cmd_matrix(args: argparse.Namespace) -> int:
    t = api.matrix(args.run_dir)
    render = {"text": matrix_text, "markdown": matrix_markdown, "csv": matrix_csv,
              "json": lambda t: json.dumps(t.as_dict(), indent=2) + "\n"}[args.format]  # fmt: skip
    sys.stdout.write(render(t))
    return 0


def _parser_train_reranker(sub) -> None:
    """``stagebench train-reranker``'s arguments, beside its handler."""
    tr = sub.add_parser("train-reranker", help="fine-tune a cross-encoder on the train split (the config's training: section)")
    tr.add_argument("config")
    tr.add_argument("--output", help="model folder (default: training.output)")
    tr.add_argument("--cache-dir", help="cache root for the hard-negative stage run")
    tr.set_defaults(func=_cmd_train)


def _cmd_train(args: argparse.Namespace) -> int:
    report = api.train_reranker(args.config, args.output, args.cache_dir)
    d = report["data"]
    print(f"trained {report['output']} from {report['base_model']}: {d['train_pairs']} pairs from {d['train_queries']} "
          f"train queries, {report['steps']} steps in {report['train_seconds']} s")
    print(f"dev ({d['dev_queries']} queries held out of the {d['split']} split): before {report['dev_before']}, "
          f"after {report['dev_after']}")  # fmt: skip
    return 0


def _parser_tune(sub) -> None:
    """``stagebench tune``'s arguments, beside its handler."""
    tu = sub.add_parser("tune", help="search the params of the stages a config's tune: section names, on queries held "
                        "apart from the test queries; write the tuned config and default against tuned (docs/baselines.md)")  # fmt: skip
    tu.add_argument("config")
    tu.add_argument("--output", help="the tuning folder (default: tune.output, else <output>-tuning)")
    tu.add_argument("--cache-dir", help=CACHE_DIR_HELP)
    tu.set_defaults(func=_cmd_tune)


def _cmd_tune(args: argparse.Namespace) -> int:
    result = api.tune(args.config, args.output, args.cache_dir)
    sys.stdout.write(result.text)
    logging.getLogger("stagebench").info("tuned config: %s", result.output / "tuned.yaml")
    return 0


def _parser_check(sub) -> None:
    """``stagebench check``'s arguments, beside its handler."""
    k = sub.add_parser("check", help="compare a run folder's metrics with expected values (exit 1 on FAIL)")
    k.add_argument("run_dir")
    k.add_argument("expected", help="expected-values YAML, e.g. results/default/expected.yaml")
    k.add_argument("--update", action="store_true", help="write EXPECTED from RUN_DIR instead (on purpose)")
    k.add_argument("--tolerance", type=float, default=None,
                   help="with --update: the absolute tolerance to pin (default: the replaced file's, else 0.001)")
    k.add_argument("--stored-table", action="store_true",
                   help="read the metrics from stage_table.json (verified against the manifest) instead of recomputing "
                        "them from the run files; for a folder that holds its tables only")  # fmt: skip
    k.set_defaults(func=_cmd_check)


def _cmd_check(args: argparse.Namespace) -> int:
    if args.update:
        tolerance = _declared(args.tolerance, Expected, "tolerance", "--tolerance")
        api.pin(args.run_dir, args.expected, tolerance=tolerance, stored_table=args.stored_table)
        print(f"wrote {args.expected} from {args.run_dir}")
        return 0
    checked = api.check(args.run_dir, args.expected, stored_table=args.stored_table)
    sys.stdout.write(check_text(checked.rows, args.run_dir, args.expected, checked.source))
    return 1 if checked.failed else 0


def _parser_reproduce(sub) -> None:
    """``stagebench reproduce``'s arguments, beside its handler."""
    rp = sub.add_parser("reproduce", help="run the published tables under reproductions/ whose inputs are here, "
                        "check them, print and write the matrix")  # fmt: skip
    rp.add_argument("names", nargs="*", help="reproductions to run (default: all)")
    rp.add_argument("--root", default=".", help="the repository holding reproductions/ (default: here)")
    rp.add_argument("--output-root", default="build/reproductions", help="where each reproduction's results go")
    rp.add_argument("--matrix", default="results/reproductions.md", help="the Markdown matrix written")
    rp.add_argument("--cache-dir", help="cache root (default: $STAGEBENCH_CACHE, each config's cache_dir, .stagebench-cache)")
    rp.set_defaults(func=_cmd_reproduce)


def _cmd_reproduce(args: argparse.Namespace) -> int:
    outcomes = api.reproduce(args.root, args.names, args.output_root, args.matrix, args.cache_dir)
    sys.stdout.write(reproductions_markdown(outcomes))
    logging.getLogger("stagebench").info("matrix written to %s", args.matrix)
    return 1 if any(o.failed for o in outcomes) else 0


def _parser_cache(sub) -> None:
    """``stagebench cache``'s arguments, beside its handler."""
    ca = sub.add_parser("cache", help="list or prune the stage cache")
    ca.add_argument("--cache-dir", help="cache root (default: $STAGEBENCH_CACHE or .stagebench-cache)")
    csub = ca.add_subparsers(dest="cache_command", required=True)
    csub.add_parser("ls", help="list entries: kind, key, size, last use, compute time, integrity")
    pr = csub.add_parser("prune", help="remove partial and corrupt entries (and, with options, old or all ones)")
    pr.add_argument("--older-than", type=float, metavar="DAYS", help="also remove entries unused for DAYS days")
    pr.add_argument("--all", action="store_true", help="remove every entry")
    pr.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    ca.set_defaults(func=_cmd_cache)


def _cmd_cache(args: argparse.Namespace) -> int:
    cache = api.cache(args.cache_dir)
    if args.cache_command == "ls":
        rows = cache.list()
        print(f"cache {cache.root.resolve()}: {len(rows)} entries, {human_bytes(sum(r['bytes'] for r in rows))}")
        now = time.time()
        for r in rows:
            m = r["meta"]
            what = (f"{m.get('stage', '')} ({m.get('type', '')})" if r["kind"] == "runs" else m.get("model", "")) or "-"
            state = "PARTIAL" if r["partial"] else (cache.verify(r["kind"], r["key"]) and "CORRUPT") or "ok"
            age = (now - r["last_used"]) / 86400
            comp = m.get("seconds")
            print(f"{r['kind']:<11} {r['key'][:16]:<16} {human_bytes(r['bytes']):>9}  used {age:5.1f}d ago  "
                  f"{'-' if comp is None else f'{comp:.1f}s':>8}  {state:<7} {what}")  # fmt: skip
        return 0
    gone = cache.prune(older_than_days=args.older_than, everything=args.all, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for r in gone:
        print(f"{verb} {r['kind']}/{r['key']} ({human_bytes(r['bytes'])}): {r['reason']}")
    print(f"{verb} {len(gone)} entries, {human_bytes(sum(r['bytes'] for r in gone))}")
    return 0


def _parser_validate(sub) -> None:
    """``stagebench validate``'s arguments, beside its handler."""
    v = sub.add_parser("validate", help="check a config without running it")
    v.add_argument("config")
    v.set_defaults(func=_cmd_validate)


def _cmd_validate(args: argparse.Namespace) -> int:
    config = api.load_config(args.config)
    print(f"{args.config}: ok ({len(config.stages)} stages: {', '.join(s.name for s in config.stages)})")
    return 0


def _parser_generate_data(sub) -> None:
    """``stagebench generate-data``'s arguments, beside its handler."""
    g = sub.add_parser("generate-data", help="write the synthetic ESCI-style dataset (official parquet layout)")
    g.add_argument("--output", default="data/synthetic-esci", help="the dataset folder to write (never over a folder stagebench did not write)")
    g.add_argument("--seed", type=int, default=13, help="the generator's seed: the same seed writes the same bytes")
    g.add_argument("--products", type=int, default=20000, help="products in the catalog")
    g.add_argument("--test-queries", type=int, default=500, help="queries of the test split (scored by stagebench run)")
    g.add_argument("--train-queries", type=int, default=2000, help="queries of the train split (tuning, training)")
    g.set_defaults(func=_cmd_generate)


def _cmd_generate(args: argparse.Namespace) -> int:
    spec = SyntheticSpec(seed=args.seed, n_products=args.products, n_test_queries=args.test_queries,
                         n_train_queries=args.train_queries)  # fmt: skip
    flags = {"seed": "--seed", "n_products": "--products", "n_test_queries": "--test-queries",
             "n_train_queries": "--train-queries"}  # fmt: skip
    for name, why in spec.problems():
        raise StagebenchError(f"{flags[name]} {getattr(spec, name)}: {why}")
    stats = api.generate_data(args.output, seed=args.seed, products=args.products, test_queries=args.test_queries,
                              train_queries=args.train_queries)  # fmt: skip
    print(json.dumps(stats, indent=2))
    return 0


def _parser_eval(sub) -> None:
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
    e.add_argument("--gain", choices=("linear", "exponential", "exp", "esci"), default="linear",
                   help="nDCG gain map (default linear; esci: the official task-1 gains, docs/metrics.md)")
    e.add_argument("--view", choices=("irrelevant", "judged-only", "bounds", "all"), default="irrelevant",
                   help="what an unjudged document counts as: irrelevant (default, as trec_eval), judged-only (removed "
                        "before the cut, as trec_eval -J), bounds (low: every one irrelevant, high: every one at the "
                        "top grade), all (the three side by side); docs/metrics.md")  # fmt: skip
    e.add_argument("-J", dest="view", action="store_const", const="judged-only", help="the same as --view judged-only")
    e.add_argument("--json", action="store_true", help="print one JSON object: measure -> mean (bounds: [low, high]; "
                   "all: measure -> view -> mean)")  # fmt: skip
    e.add_argument("--per-query", action="store_true", help="also print per-query values")
    e.set_defaults(func=_cmd_eval)


def _cmd_eval(args: argparse.Namespace) -> int:
    if len(args.run) == 1 and args.baseline:
        raise StagebenchError("--baseline: give two or more run files, one of them the baseline")
    if len(args.run) > 1:
        if args.json or args.view != "irrelevant":
            raise StagebenchError("several runs: --json and --view are for one run (the table of several shows the "
                                  "judged-only view and the bounds beside the main one)")  # fmt: skip
        permutations, seed, alpha = (_declared(getattr(args, k), EvaluationConfig, k, f"--{k}")
                                     for k in ("permutations", "seed", "alpha"))  # fmt: skip
        exp = api.compare_runs(args.qrels, args.run, args.metrics, relevance_threshold=args.rel, gain=args.gain,
                               permutations=permutations, seed=seed, alpha=alpha, queries=args.queries,
                               max_per_query=args.max_per_query, baseline=args.baseline)  # fmt: skip
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="stagebench", description="Benchmark multi-stage search ranking pipelines.")
    p.add_argument("--version", action="version", version=f"stagebench {__version__}")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors on stderr")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="on an error, also print the traceback (as STAGEBENCH_DEBUG=1 does)")  # fmt: skip
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    _explained(sub)
    return p


#: what a positional argument is, wherever a command takes it under this name
ARGUMENTS = {
    "config": "a YAML config (docs/config.md), e.g. configs/default.yaml",
    "run_dir": "a results folder stagebench run wrote, e.g. results/default",
    "query_id": "a query id of the folder's scored queries",
    "qrels": "a TREC qrels file (qid 0 docid grade)",
    "run": "TREC run files (qid Q0 docid rank score tag); several: side by side, each pair tested",
    "format": "the output format",
    "cache_command": "ls: list the entries; prune: remove partial and corrupt ones",
}

#: one example a command, printed at the end of its --help
EXAMPLES = {
    "run": "stagebench run configs/default.yaml",
    "table": "stagebench table results/default",
    "show": "stagebench show results/default 0",
    "compare": "stagebench compare results/default results/default-trained",
    "segments": "stagebench segments results/default --by length --by negation",
    "matrix": "stagebench matrix results/matrix",
    "train-reranker": "stagebench train-reranker configs/default-trained.yaml",
    "tune": "stagebench tune configs/tune-bm25.yaml",
    "check": "stagebench check results/default results/default/expected.yaml",
    "reproduce": "stagebench reproduce --matrix build/reproductions.md",
    "cache": "stagebench cache ls",
    "validate": "stagebench validate configs/default.yaml",
    "generate-data": "stagebench generate-data --output data/synthetic-esci",
    "judge": "stagebench judge results/default --config configs/judge.yaml",
    "incompleteness": "stagebench incompleteness results/judging --report",
    "plan-judgments": "stagebench plan-judgments results/judging --strategy sample --budget 300 --output round1.csv",
    "add-judgments": "stagebench add-judgments results/judging round1.csv --output results/judging-round1",
    "eval": "stagebench eval qrels.trec bm25.trec dense.trec rrf.trec -m nDCG@10 RR@10",
}


class _Help(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """A command's --help: its description as written, every option's default beside its help (where
    it has one and the help does not say it already)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


def _explained(sub) -> None:
    """Every command's --help says what it does (its one-line help), what each argument is, each
    option's default, and one example (``tests/cli/test_help.py`` holds every command to it)."""
    said = {a.dest: a.help for a in sub._choices_actions}
    for name, parser in sub.choices.items():
        parser.description = parser.description or said.get(name)
        parser.formatter_class = _Help
        if name in EXAMPLES:
            parser.epilog = (f"{parser.epilog}\n\n" if parser.epilog else "") + f"example:\n  {EXAMPLES[name]}"
        for action in parser._actions:
            if not action.help and action.dest in ARGUMENTS:
                action.help = ARGUMENTS[action.dest]


#: the subcommands, in the order --help lists them (each one's arguments are declared beside its handler)
COMMANDS = (
    _parser_run, _parser_table, _parser_show, _parser_compare, _parser_segments, _parser_matrix,
    _parser_train_reranker, _parser_tune, _parser_check, _parser_reproduce, _parser_cache, _parser_validate,
    _parser_generate_data, _parser_judge, _parser_incompleteness, _parser_plan_judgments, _parser_add_judgments,
    _parser_eval,
)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled as Ctrl-C is: every cleanup that Ctrl-C runs (the staging
    folder, temporary cache files) runs, and the exit code says which signal it was."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _terminate(signum: int, _frame) -> None:
    raise Terminated(signum)


def _on_signals() -> dict:
    """SIGTERM and SIGHUP raise :class:`Terminated` in the main thread while a command runs
    (the previous handlers are returned, to put back, with SIGINT's: :func:`_hold_signals`)."""
    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            old[sig] = signal.signal(sig, _terminate)
        except ValueError:  # not the main thread (stagebench called from a thread): leave signals alone
            return {}
    old[signal.SIGINT] = signal.getsignal(signal.SIGINT)
    return old


def _hold_signals() -> None:
    """While an interruption is being reported (and the command's cleanup finishes), a second Ctrl-C
    or SIGTERM is ignored: the first one's line is the outcome, not a traceback of the second."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except ValueError:  # not the main thread
            return


CACHE_DIR_HELP = "cache root (default: $STAGEBENCH_CACHE, the config's cache_dir, .stagebench-cache)"

#: commands whose work goes through the stage cache as it finishes: what they write, what resumes
RESUMABLE = {"run": ("results folder", "stage"), "train-reranker": ("model folder", "stage"),
             "tune": ("tuning folder", "trial")}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    old = _on_signals()
    code = 1  # an exception that escapes: Python prints it and exits with 1
    try:
        if args.command == "run":
            args.watched = watched()
            if not args.watched:
                args.argv = argv  # a run on Ray is run in a watched child (stagebench.runtime.cluster.supervisor)
        code = _main(args)
        return code
    finally:
        aside = output_log()  # Ray's output of a watched run: kept only where a line names it
        lost = getattr(args, "lost", False)
        if aside is not None and not lost and str(aside) not in getattr(args, "said", ""):
            aside.unlink(missing_ok=True)
        if lost:
            report_lost()  # the parent says it, as when Ray's core ends this process first
        else:
            report_finished(code)
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _main(args: argparse.Namespace) -> int:
    # our own progress at INFO; third-party libraries (faiss, transformers) only at WARNING
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname).1s %(message)s",
                        datefmt="%H:%M:%S", stream=sys.stderr)  # fmt: skip
    logging.getLogger("stagebench").setLevel(logging.WARNING if args.quiet else logging.INFO)
    debug = args.verbose or os.environ.get("STAGEBENCH_DEBUG", "") not in ("", "0")
    try:
        return args.func(args)
    except ClusterLost as exc:
        if getattr(args, "watched", False):
            logging.getLogger("stagebench").debug("the cluster went away: %s", exc)
            args.lost = True
            return 2
        return _fail(str(exc), debug)
    except StagebenchError as exc:
        args.said = str(exc)
        return _fail(str(exc), debug)
    except KeyboardInterrupt as exc:
        _hold_signals()  # main() puts the handlers back once the line is said
        if args.command in RESUMABLE:
            folder, step = RESUMABLE[args.command]
            kept = (f"no {folder} was written or changed; every {step} that finished is in the cache, so the "
                    f"same command resumes after the last finished {step}")  # fmt: skip
        else:
            kept = "nothing was changed"
        if isinstance(exc, Terminated):
            return _fail(f"terminated ({exc.args[0]}): {kept}", debug, code=128 + exc.signum)
        return _fail(f"interrupted: {kept}", debug, code=130)
    except MemoryError:
        kept = ("no results folder was written or changed; finished stages are in the cache" if args.command == "run"
                else "nothing was changed")  # fmt: skip
        return _fail(f"out of memory while running {args.command} ({kept}); give it more memory, or fewer queries, "
                     "documents or a smaller batch_size", debug)  # fmt: skip
    except BrokenPipeError:  # `stagebench cache ls | head`: the reader left; exit as a shell does on SIGPIPE
        _silence_stdout()
        return 141
    except OSError as exc:  # file, permission and disk-full errors: one line naming the file
        where = exc.filename if exc.filename is not None else "stagebench"
        what = "no space left on the device" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        return _fail(f"{where}: {what}", debug)


def _fail(message: str, debug: bool, code: int = 2) -> int:
    if debug:
        traceback.print_exc()
    print(f"stagebench: error: {' '.join(message.split())}", file=sys.stderr)
    return code


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
