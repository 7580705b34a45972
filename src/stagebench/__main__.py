"""The ``stagebench`` command's entry (``python -m stagebench`` and the console script): a signal is
one line from the first instant the package can act (before it: the interpreter's own start and
stagebench/__init__.py, which imports nothing but its version; about 15 ms on 2 cores, README). Importing the command line takes a second or more (numpy, scipy,
the stages); Ctrl-C, SIGTERM or SIGHUP in that time would print Python's traceback of whatever
was being imported, so a handler goes in first and says one line. Once the command has reported
its outcome, what is left is the interpreter's exit (Ray's shutdown hook, where a run used Ray),
and a signal there would only interrupt it into a traceback: it is ignored."""

from __future__ import annotations

import _signal  # the C module: `signal` imports enum (milliseconds, more on a loaded machine) before any handler
import importlib
import os
import sys

#: the signals a terminal or a job scheduler sends to end a command, by name
NAMES = {_signal.SIGINT: "SIGINT", _signal.SIGTERM: "SIGTERM", _signal.SIGHUP: "SIGHUP"}
ENDING = tuple(NAMES)


def _during_start_up(signum: int, _frame) -> None:
    name = "interrupted" if signum == _signal.SIGINT else f"terminated ({NAMES.get(signum, signum)})"
    os.write(2, f"stagebench: {name} while starting: nothing was read or written\n".encode())
    os._exit(130 if signum == _signal.SIGINT else 128 + signum)

def main() -> int:
    before = {sig: _signal.signal(sig, _during_start_up) for sig in ENDING
              if _signal.getsignal(sig) is not _signal.SIG_IGN}  # a background job's ignored SIGINT stays ignored
    cli = importlib.import_module("stagebench.cli")  # the heavy imports, under the handler above
    for sig, handler in before.items():
        _signal.signal(sig, handler)
    try:
        return cli.main()
    finally:
        for sig in ENDING:  # the outcome is said; the interpreter's exit (Ray's atexit shutdown) is not interrupted
            _signal.signal(sig, _signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
