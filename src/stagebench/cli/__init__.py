"""The ``stagebench`` command line: :func:`main`, the parser every command adds itself to, what each
``--help`` says, and how an error, an interruption or a closed pipe ends a command. The commands are
grouped as :mod:`stagebench.api` groups its verbs: :mod:`.result`, :mod:`.folders`, :mod:`.judging`,
:mod:`.evaluation` (and :mod:`.flags`, what their flags share); each command's flags sit beside its
handler, and each handler is one call of a public function of :mod:`stagebench.api`."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
import traceback

from stagebench.cli.evaluation import parser_eval
from stagebench.cli.folders import (parser_cache, parser_check, parser_generate_data, parser_matrix, parser_reproduce,
                                    parser_segments, parser_show)
from stagebench.cli.judging import parser_add_judgments, parser_incompleteness, parser_judge, parser_plan_judgments
from stagebench.cli.result import parser_compare, parser_run, parser_table, parser_train_reranker, parser_tune, parser_validate
from stagebench.errors import StagebenchError, Terminated
from stagebench.runtime.cluster.supervisor import ClusterLost, output_log, report_finished, report_lost, watched
from stagebench.version import __version__


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
    parser_run, parser_table, parser_show, parser_compare, parser_segments, parser_matrix,
    parser_train_reranker, parser_tune, parser_check, parser_reproduce, parser_cache, parser_validate,
    parser_generate_data, parser_judge, parser_incompleteness, parser_plan_judgments, parser_add_judgments,
    parser_eval,
)


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
