"""Progress bars: one look everywhere, quiet when stderr is not a terminal (redrawn every 30 s).

A bar advances by units of a map (:meth:`stagebench.runtime.engine.Engine.map`); a unit that takes a
while (512 pairs of a cross-encoder call) also moves it from inside, batch by batch: the model's loop
calls :func:`tick` after each batch, and the map that runs the unit in this thread counts those ticks
toward the unit's size (:func:`ticking`). A tick with no map listening (a Ray worker, a thread of a
threaded map) does nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from tqdm.auto import tqdm

#: where :func:`tick` goes in this thread: the running unit's counter (None: nobody listens)
_listener: ContextVar[Callable[[int], None] | None] = ContextVar("stagebench_progress_listener", default=None)


def progress(total: int, desc: str, unit: str = "it", enabled: bool = True):
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, leave=False,
                mininterval=1.0 if sys.stderr.isatty() else 30.0)  # fmt: skip


def tick(n: int) -> None:
    """``n`` more items of the running unit done (a model batch): its bar moves now, not when the unit ends."""
    listener = _listener.get()
    if listener is not None:
        listener(n)


@contextmanager
def ticking(bar, size: int) -> Iterator[Callable[[], None]]:
    """One unit of ``size`` items run inside the block, ``bar`` moved by its :func:`tick` calls (never past
    ``size``); the function yielded moves the bar by what the ticks did not cover (call it when the unit is done)."""
    done = 0

    def listen(n: int) -> None:
        nonlocal done
        step = max(0, min(n, size - done))
        if step:
            done += step
            bar.update(step)

    def finish() -> None:
        listen(size - done)

    token = _listener.set(listen)
    try:
        yield finish
    finally:
        _listener.reset(token)
