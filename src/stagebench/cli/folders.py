"""The commands that read a finished results folder (``show``, ``segments``, ``matrix``, ``check``) and upkeep
(``reproduce``, ``cache``, ``generate-data``): each one's flags beside its handler."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from stagebench import api
from stagebench.cache import human_bytes
from stagebench.cli.flags import declared
from stagebench.data.synthetic import SyntheticSpec
from stagebench.errors import StagebenchError
from stagebench.report.tables import (check_text, matrix_csv, matrix_markdown, matrix_text, segments_csv, segments_markdown, segments_text)
from stagebench.reproductions import reproductions_markdown
from stagebench.results.check import Expected
from stagebench.results.segments import MIN_QUERIES


def parser_show(sub) -> None:
    """``stagebench show``'s arguments, beside its handler."""
    sh = sub.add_parser("show", help="one query in a finished run folder: each stage's top 10 with grades and moves")
    sh.add_argument("run_dir")
    sh.add_argument("query_id")
    sh.set_defaults(func=cmd_show)


def cmd_show(args: argparse.Namespace) -> int:
    sys.stdout.write(api.show(args.run_dir, args.query_id))
    return 0


def parser_segments(sub) -> None:
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
    sg.set_defaults(func=cmd_segments)


def cmd_segments(args: argparse.Namespace) -> int:
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


def parser_matrix(sub) -> None:
    """``stagebench matrix``'s arguments, beside its handler."""
    mx = sub.add_parser("matrix", help="a finished run's reranker-by-pool matrix (its config's matrix: section): "
                        "each reranker's nDCG@10 and headroom captured over each candidate pool")  # fmt: skip
    mx.add_argument("run_dir")
    mx.add_argument("--format", choices=["text", "markdown", "csv", "json"], default="text")
    mx.set_defaults(func=cmd_matrix)


def cmd_matrix(args: argparse.Namespace) -> int:
    t = api.matrix(args.run_dir)
    render = {"text": matrix_text, "markdown": matrix_markdown, "csv": matrix_csv,
              "json": lambda t: json.dumps(t.as_dict(), indent=2) + "\n"}[args.format]  # fmt: skip
    sys.stdout.write(render(t))
    return 0


def parser_check(sub) -> None:
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
    k.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    if args.update:
        tolerance = declared(args.tolerance, Expected, "tolerance", "--tolerance")
        api.pin(args.run_dir, args.expected, tolerance=tolerance, stored_table=args.stored_table)
        print(f"wrote {args.expected} from {args.run_dir}")
        return 0
    checked = api.check(args.run_dir, args.expected, stored_table=args.stored_table)
    sys.stdout.write(check_text(checked.rows, args.run_dir, args.expected, checked.source))
    return 1 if checked.failed else 0


def parser_reproduce(sub) -> None:
    """``stagebench reproduce``'s arguments, beside its handler."""
    rp = sub.add_parser("reproduce", help="run the published tables under reproductions/ whose inputs are here, "
                        "check them, print and write the matrix")  # fmt: skip
    rp.add_argument("names", nargs="*", help="reproductions to run (default: all)")
    rp.add_argument("--root", default=".", help="the repository holding reproductions/ (default: here)")
    rp.add_argument("--output-root", default="build/reproductions", help="where each reproduction's results go")
    rp.add_argument("--matrix", default="results/reproductions.md", help="the Markdown matrix written")
    rp.add_argument("--cache-dir", help="cache root (default: $STAGEBENCH_CACHE, each config's cache_dir, .stagebench-cache)")
    rp.set_defaults(func=cmd_reproduce)


def cmd_reproduce(args: argparse.Namespace) -> int:
    outcomes = api.reproduce(args.root, args.names, args.output_root, args.matrix, args.cache_dir)
    sys.stdout.write(reproductions_markdown(outcomes))
    logging.getLogger("stagebench").info("matrix written to %s", args.matrix)
    return 1 if any(o.failed for o in outcomes) else 0


def parser_cache(sub) -> None:
    """``stagebench cache``'s arguments, beside its handler."""
    ca = sub.add_parser("cache", help="list or prune the stage cache")
    ca.add_argument("--cache-dir", help="cache root (default: $STAGEBENCH_CACHE or .stagebench-cache)")
    csub = ca.add_subparsers(dest="cache_command", required=True)
    csub.add_parser("ls", help="list entries: kind, key, size, last use, compute time, integrity")
    pr = csub.add_parser("prune", help="remove partial and corrupt entries (and, with options, old or all ones)")
    pr.add_argument("--older-than", type=float, metavar="DAYS", help="also remove entries unused for DAYS days")
    pr.add_argument("--all", action="store_true", help="remove every entry")
    pr.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    ca.set_defaults(func=cmd_cache)


def cmd_cache(args: argparse.Namespace) -> int:
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


def parser_generate_data(sub) -> None:
    """``stagebench generate-data``'s arguments, beside its handler."""
    g = sub.add_parser("generate-data", help="write the synthetic ESCI-style dataset (official parquet layout)")
    g.add_argument("--output", default="data/synthetic-esci", help="the dataset folder to write (never over a folder stagebench did not write)")
    g.add_argument("--seed", type=int, default=13, help="the generator's seed: the same seed writes the same bytes")
    g.add_argument("--products", type=int, default=20000, help="products in the catalog")
    g.add_argument("--test-queries", type=int, default=500, help="queries of the test split (scored by stagebench run)")
    g.add_argument("--train-queries", type=int, default=2000, help="queries of the train split (tuning, training)")
    g.set_defaults(func=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
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
