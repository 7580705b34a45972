"""Progress bars: one look everywhere, quiet when stderr is not a terminal (redrawn every 30 s)."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


def progress(total: int, desc: str, unit: str = "it", enabled: bool = True):
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, leave=False,
                mininterval=1.0 if sys.stderr.isatty() else 30.0)  # fmt: skip
