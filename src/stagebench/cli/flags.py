"""What several commands' flags share: a flag's value checked by the declaration it stands for, the
readers of counts, budgets and rates, the cache root's help."""

from __future__ import annotations

import argparse

from stagebench.params import declared  # noqa: F401 - the flags' check is the config's (params.declared)


def positive_int(text: str, most: int = 1_000_000) -> int:
    """An argparse type: an integer in 1..``most`` (argparse names the flag in its one-line error)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= v <= most:
        raise argparse.ArgumentTypeError(f"{v} is out of range 1..{most:,}")
    return v


def budgets(text: str) -> list[int]:
    return [positive_int(x.strip()) for x in text.split(",")]


def rates(text: str) -> list[float]:
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


CACHE_DIR_HELP = "cache root (default: $STAGEBENCH_CACHE, the config's cache_dir, .stagebench-cache)"


def gain_spec(text: str) -> str | dict[int, float]:
    """An argparse type: a gain map's name (linear, exponential, exp, esci) or a table ``G=V,G=V`` (trec_eval's
    ``-m ndcg.1=3,2=9,4=4.5``: grade -> gain)."""
    if "=" not in text:
        if text.lower() not in ("linear", "exponential", "exp", "esci"):
            raise argparse.ArgumentTypeError(f"{text!r}: linear, exponential, esci, or a table G=V,G=V (1=3,2=9,4=4.5)")
        return text
    table: dict[int, float] = {}
    for cell in text.split(","):
        g, _, v = cell.partition("=")
        try:
            grade, gain = int(g), float(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{cell.strip()!r}: a table cell is GRADE=GAIN (an integer = a number)") from None
        if grade in table:
            raise argparse.ArgumentTypeError(f"grade {grade} is given twice")
        table[grade] = gain
    return table

