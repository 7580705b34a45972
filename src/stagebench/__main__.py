"""The ``stagebench`` command's entry (``python -m stagebench`` and the console script): a signal is
one line from the first instant. Importing the command line takes a second or more (numpy, scipy,
the stages); Ctrl-C, SIGTERM or SIGHUP in that time would print Python's traceback of whatever
was being imported, so a handler goes in first and says one line. Once the command has reported
its outcome, what is left is the interpreter's exit (Ray's shutdown hook, where a run used Ray),
and a signal there would only interrupt it into a traceback: it is ignored."""

from __future__ import annotations

import importlib
import os
import signal
import sys

#: the signals a terminal or a job scheduler sends to end a command
ENDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _during_start_up(signum: int, _frame) -> None:
    name = "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
    os.write(2, f"stagebench: {name} while starting: nothing was read or written\n".encode())
    os._exit(130 if signum == signal.SIGINT else 128 + signum)


def main() -> int:
    before = {sig: signal.signal(sig, _during_start_up) for sig in ENDING
              if signal.getsignal(sig) is not signal.SIG_IGN}  # a background job's ignored SIGINT stays ignored
    cli = importlib.import_module("stagebench.cli")  # the heavy imports, under the handler above
    for sig, handler in before.items():
        signal.signal(sig, handler)
    try:
        return cli.main()
    finally:
        for sig in ENDING:  # the outcome is said; the interpreter's exit (Ray's atexit shutdown) is not interrupted
            signal.signal(sig, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
