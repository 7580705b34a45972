"""The commands that run a config or give a results folder (``run``, ``table``, ``compare``, ``train-reranker``,
``tune``, ``validate``): each one's flags beside its handler, each handler one call of :mod:`stagebench.api`."""

from __future__ import annotations

import argparse
import logging
import sys

from stagebench import api
from stagebench.cli.flags import CACHE_DIR_HELP
from stagebench.config import test_settings
from stagebench.errors import StagebenchError
from stagebench.report.tables import comparison_text
from stagebench.runtime.cluster.supervisor import connect_watched, run_watched


def parser_run(sub) -> None:
    """``stagebench run``'s arguments, beside its handler."""
    r = sub.add_parser("run", help="run a config's stages and write the stage table")
    r.add_argument("config")
    r.add_argument("--output", help="results folder (default: the config's output)")
    r.add_argument("--cache-dir", help=CACHE_DIR_HELP)
    r.add_argument("--recompute", action="store_true", help="ignore cached stage results and replace them")
    r.add_argument("--dry-run", action="store_true", help="say which stages the cache holds, what the others would "
                   "compute (a reranker's pairs) and how long they should take on this machine (a short timed probe "
                   "of each model stage, its rates kept in the cache; with --recompute measured again), and with a "
                   "Ray engine whether its cluster answers, then stop: nothing of the run is computed or written, "
                   "nothing started on the cluster")  # fmt: skip
    r.add_argument("--engine", choices=("local", "ray"),
                   help="run every stage on this engine (with the config's engine: settings when they are of this "
                        "type); the results and the cache are the same either way (docs/scale.md)")  # fmt: skip
    r.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    config = api.load_config(args.config, engine=args.engine)
    if args.dry_run:
        plan = api.dry_run(config, args.output, cache_dir=args.cache_dir, recompute=args.recompute)
        sys.stdout.write(plan.text())
        if plan.engine_error:  # the run would end there: said as its error, and the exit says it
            raise StagebenchError(plan.engine_error)
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


def parser_table(sub) -> None:
    """``stagebench table``'s arguments, beside its handler."""
    t = sub.add_parser("table", help="re-score and re-render a finished run folder from its saved runs (no stage runs)")
    t.add_argument("run_dir")
    t.set_defaults(func=cmd_table)


def cmd_table(args: argparse.Namespace) -> int:
    sys.stdout.write(api.table(args.run_dir).table_text)
    return 0


def parser_compare(sub) -> None:
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
    c.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    permutations, seed, alpha = test_settings(args.permutations, args.seed, args.alpha, flags=True)
    pairs = {}
    for p in args.pair:
        sa, sep, sb = p.partition("=")
        if not sep or not sa or not sb:
            raise StagebenchError(f"--pair {p}: A_STAGE=B_STAGE, e.g. cross_encoder=ce_finetuned")
        pairs[sa] = sb
    sys.stdout.write(comparison_text(api.compare(args.run_dir_a, args.run_dir_b, permutations=permutations,
                                                 seed=seed, alpha=alpha, pairs=pairs, judgments=args.judgments)))  # fmt: skip
    return 0


def parser_train_reranker(sub) -> None:
    """``stagebench train-reranker``'s arguments, beside its handler."""
    tr = sub.add_parser("train-reranker", help="fine-tune a cross-encoder on the train split (the config's training: section)")
    tr.add_argument("config")
    tr.add_argument("--output", help="model folder (default: training.output)")
    tr.add_argument("--cache-dir", help="cache root for the hard-negative stage run")
    tr.set_defaults(func=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    report = api.train_reranker(args.config, args.output, args.cache_dir)
    d = report["data"]
    print(f"trained {report['output']} from {report['base_model']}: {d['train_pairs']} pairs from {d['train_queries']} "
          f"train queries, {report['steps']} steps in {report['train_seconds']} s")
    print(f"dev ({d['dev_queries']} queries held out of the {d['split']} split): before {report['dev_before']}, "
          f"after {report['dev_after']}")  # fmt: skip
    return 0


def parser_tune(sub) -> None:
    """``stagebench tune``'s arguments, beside its handler."""
    tu = sub.add_parser("tune", help="search the params of the stages a config's tune: section names, on queries held "
                        "apart from the test queries; write the tuned config and default against tuned (docs/baselines.md)")  # fmt: skip
    tu.add_argument("config")
    tu.add_argument("--output", help="the tuning folder (default: tune.output, else <output>-tuning)")
    tu.add_argument("--cache-dir", help=CACHE_DIR_HELP)
    tu.set_defaults(func=cmd_tune)


def cmd_tune(args: argparse.Namespace) -> int:
    result = api.tune(args.config, args.output, args.cache_dir)
    sys.stdout.write(result.text)
    logging.getLogger("stagebench").info("tuned config: %s", result.output / "tuned.yaml")
    return 0


def parser_validate(sub) -> None:
    """``stagebench validate``'s arguments, beside its handler."""
    v = sub.add_parser("validate", help="check a config without running it")
    v.add_argument("config")
    v.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    config = api.load_config(args.config)
    print(f"{args.config}: ok ({len(config.stages)} stages: {', '.join(s.name for s in config.stages)})")
    return 0
