"""The judge's and the judging round's commands (``judge``, ``incompleteness``, ``plan-judgments``,
``add-judgments``): each one's flags beside its handler, each a call of :mod:`stagebench.api.judging`'s verbs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stagebench import api
from stagebench.cli.flags import declared, positive_int, budgets, rates, CACHE_DIR_HELP
from stagebench.config import EvaluationConfig
from stagebench.errors import StagebenchError
from stagebench.judgments.design import DEFAULT as DEFAULT_DESIGN, DESIGNS, HOLE_WHEN
from stagebench.judgments.grades import GRADE_MODELS
from stagebench.judgments.planning import STRATEGIES


def parser_judge(sub) -> None:
    """``stagebench judge``'s arguments, beside its handler."""
    j = sub.add_parser("judge", help="grade a finished run folder's unjudged top documents with an LLM judge (its "
                       "agreement with the human labels measured) and write the judge-filled stage table")  # fmt: skip
    j.add_argument("run_dir")
    j.add_argument("--config", help="a config whose judge: section to use (default: the folder's own config's)")
    j.add_argument("--cache-dir", help=CACHE_DIR_HELP)
    j.set_defaults(func=cmd_judge)


def cmd_judge(args: argparse.Namespace) -> int:
    rendered = api.judge(args.run_dir, args.config, args.cache_dir)
    sys.stdout.write(rendered.judge_text + "\n" + (Path(args.run_dir) / "judge" / "stage_table.txt").read_text(encoding="utf-8"))
    return 0


def parser_incompleteness(sub) -> None:
    """``stagebench incompleteness``'s arguments, beside its handler."""
    inc = sub.add_parser("incompleteness", help="how each view of the unjudged documents ranks the stages when "
                         "judgments are taken away (and against the truth, when the rules judged the folder)")  # fmt: skip
    inc.add_argument("run_dir")
    inc.add_argument("--rates", type=rates, default=[0.9, 0.7, 0.5, 0.3, 0.1],
                     help="shares of each query's judgments kept, comma separated (default 0.9,0.7,0.5,0.3,0.1)")
    inc.add_argument("--seeds", type=positive_int, default=3, help="random draws per share (default 3)")
    inc.add_argument("--measure", help="the measure (default: nDCG@10 when scored, else the first)")
    inc.add_argument("--permutations", type=positive_int, default=1000, help="randomization test permutations (default 1000)")
    inc.add_argument("--json", help="also write the results as JSON to this file")
    inc.add_argument("--plot", help="also write the tau-by-share plot (PNG) to this file")
    inc.add_argument("--report", action="store_true", help="keep the results in the folder and show them in its report.html")
    inc.set_defaults(func=cmd_incompleteness)


def cmd_incompleteness(args: argparse.Namespace) -> int:
    permutations = declared(args.permutations, EvaluationConfig, "permutations", "--permutations")
    inc = api.incompleteness(args.run_dir, args.rates, args.seeds, args.measure, permutations, args.report,
                             json_path=args.json, plot_path=args.plot)  # fmt: skip
    sys.stdout.write(inc.text())
    return 0


def parser_plan_judgments(sub) -> None:
    """``stagebench plan-judgments``'s arguments, beside its handler."""
    pj = sub.add_parser("plan-judgments", help="pick the unjudged pairs whose grades settle the most open stage orders "
                        "and write a worksheet for raters (CSV and JSONL); --simulate compares strategies")  # fmt: skip
    pj.add_argument("run_dir")
    pj.add_argument("--budget", type=budgets, required=True, help="judgments to ask for (with --simulate: several, comma separated)")
    pj.add_argument("--output", help="the worksheet (.csv; the .jsonl beside it); never written over")
    pj.add_argument("--strategy", choices=list(STRATEGIES), default="plan",
                    help="; ".join(f"{s.name}{' (default)' if s.name == 'plan' else ''}: {s.what}" for s in STRATEGIES.values())
                    + " (docs/metrics.md#a-judging-round, #the-estimated-view)")  # fmt: skip
    pj.add_argument("--predictor", help="sample: the grade model: a stage whose scores to calibrate (default: the last "
                    "cross-encoder, else the last stage), or " + "; ".join(f"{m.name}: {m.what}" for m in GRADE_MODELS.values()))  # fmt: skip
    pj.add_argument("--aim", action="append", metavar="A=B", help="--strategy sample: aim the sample at the difference of "
                    "stages A and B (repeatable; default: the folder's head-to-head pairs - siblings over one input and the pairs "
                    "evaluation.comparisons names - else the pairs the grade model predicts the budget can settle); the "
                    "plan says how many judgments settle each aimed pair with 80%% power if the model is right")  # fmt: skip
    pj.add_argument("--design", choices=DESIGNS, help="--strategy sample: query (default): every query whose ideal "
                    "the holes can change judged whole (exactly unbiased); hole: one judgment buys one hole in each query "
                    f"whose judged documents make at least {HOLE_WHEN:.0%}% of its expected ideal DCG (its nDCG "
                    "linearised: a small bias, measured), any other query judged whole; either way the rows never pass the "
                    "budget (docs/metrics.md#the-hole-design); with --simulate: only this design (default: both, side "
                    "by side)")  # fmt: skip
    pj.add_argument("--show-ranks", action="store_true", help="put each stage's rank of the pair in the worksheet "
                    "(default: blind, the raters do not see which stage found it)")  # fmt: skip
    pj.add_argument("--rounds", type=positive_int, default=200, help="--simulate --strategy sample: rounds a budget (default 200)")
    pj.add_argument("--hide", type=float, help="--simulate --strategy sample: answer from this share of all pairs in "
                    "any stage's top k hidden as holes, judged or not, a real hole counting irrelevant (data without a "
                    "rules judge: Cranfield, real ESCI)")  # fmt: skip
    pj.add_argument("--depth", type=positive_int, default=10, help="the pool: unjudged pairs in every stage's top DEPTH (default 10)")
    pj.add_argument("--measure", help="the measure whose stage orders to settle (default: nDCG@10 when scored)")
    pj.add_argument("--seed", type=int, default=0, help="random strategy: its seed")
    pj.add_argument("--simulate", action="store_true", help="answer each strategy's pairs with the folder's judge grades "
                    "(the rules judge: the truth) and count the stage pairs each settles")  # fmt: skip
    pj.add_argument("--seeds", type=positive_int, default=3, help="--simulate: random strategy seeds (default 3)")
    pj.add_argument("--json", help="--simulate: also write the results as JSON to this file")
    pj.add_argument("--cache-dir", help="--strategy sample with a cross-encoder grade model: the cache its scores of "
                    "the pairs outside its pool go to (default: the folder's config's cache_dir, else "
                    ".stagebench-cache)")  # fmt: skip
    pj.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
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
                               design=args.design or DEFAULT_DESIGN)  # fmt: skip
    for line in sheet.power:
        print(f"aimed at {line}")
    print(f"{sheet.pairs} pairs to judge: {sheet.csv} and {sheet.jsonl} (fill the grade column, then: stagebench "
          f"add-judgments {args.run_dir} {sheet.csv} --output NEW_DIR)")  # fmt: skip
    return 0


#: add-judgments' exit status when the folder was written but the round's estimated view was refused
ESTIMATE_REFUSED = 3


def parser_add_judgments(sub) -> None:
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
    aj.set_defaults(func=cmd_add_judgments)


def cmd_add_judgments(args: argparse.Namespace) -> int:
    added = api.add_judgments(args.run_dir, args.worksheets, args.output, args.prefer, args.cache_dir)
    sys.stdout.write(added.table_text)
    if added.estimate_refused:  # the judgments are in; the round's estimate is not: a pipeline must know
        print(f"stagebench: the judgments were added and written to {args.output}, but the estimated view was "
              f"refused: {added.estimate_refused}", file=sys.stderr)  # fmt: skip
        return ESTIMATE_REFUSED
    return 0
