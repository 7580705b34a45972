"""The one exception type users see.

Every user-facing failure (bad config, bad data, bad input file) is raised as a
:class:`StagebenchError` whose message is one line naming the file, row or key.
The CLI prints it as ``stagebench: error: <message>`` and exits non-zero.
"""

from __future__ import annotations

import signal


class StagebenchError(Exception):
    """A user-facing error with a one-line message."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


class ConfigError(StagebenchError):
    """The config file is invalid (unknown key, wrong type, missing stage input...)."""


class DataError(StagebenchError):
    """An input data file is missing or malformed."""


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled as Ctrl-C is: every cleanup that Ctrl-C runs (the staging
    folder, temporary cache files) runs, and the exit code says which signal it was."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
