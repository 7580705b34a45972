"""Weak baselines: what ``stagebench tune`` found for a stage, kept where a later run finds it.

A tuning (:mod:`stagebench.fitting.tune`) stores, for each stage it tuned, a ``tuning`` cache entry under
the key of that stage's default run on the test queries (:func:`key_parts`: the stage run's key,
the gain and the relevance threshold, so only a table scored the same way reads it). A run looks
its stages up (:func:`find`), records what it found in the manifest, and the stage table says,
beside its headroom columns, when a tuned variant beats a stage significantly and how much of each
later stage's gain over it would remain against the tuned one (:func:`notes`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stagebench.cache import Cache, make_key
from stagebench.record import TunedBaseline

KIND = "tuning"
FILE = "tuned.json"
#: the measure the headroom sentence uses when the tuning scored it
HEADLINE = "nDCG@10"


def key_parts(run_key: str, gain: Any, relevance_threshold: int) -> dict:
    return {"stage_run": run_key, "gain": gain, "relevance_threshold": relevance_threshold}


def store(cache: Cache, run_key: str, gain: Any, relevance_threshold: int, found: TunedBaseline) -> None:
    parts = key_parts(run_key, gain, relevance_threshold)
    text = json.dumps(found.to_json(), sort_keys=True, default=str) + "\n"
    cache.put(KIND, make_key(parts), lambda folder: (folder / FILE).write_text(text, encoding="utf-8"),
              {"stage": found.stage}, key_parts=parts)  # fmt: skip


def find(cache: Cache, run_key: str, gain: Any, relevance_threshold: int) -> TunedBaseline | None:
    """The latest tuning of the stage whose default run has ``run_key`` (None: never tuned)."""
    entry = cache.get(KIND, make_key(key_parts(run_key, gain, relevance_threshold)))
    if entry is None:
        return None
    return TunedBaseline.from_json(json.loads(Path(entry.file(FILE)).read_text(encoding="utf-8")))


def notes(found: Sequence[TunedBaseline], stages: Sequence[str], means: dict[str, dict[str, float]]) -> list[str]:
    """One note per tuned stage that its tuned variant beats significantly: the measures, and for
    each later stage how much of its gain over the stage would remain against the tuned variant.
    ``means``: stage -> measure -> the table's mean; a tuning whose default figures are not the
    table's (another query set) is named as such and not compared."""
    out = []
    for b in found:
        wins = b.beats()
        if b.stage not in means or not wins:
            continue
        here = means[b.stage]
        off = [m for m in b.measures if m in here and abs(here[m] - b.measures[m]["default"]) > 1e-6]
        if off:
            out.append(f"(!) {b.stage}: a tuning of this stage ({b.folder}) scored other figures for its default params "
                       f"({off[0]} {b.measures[off[0]]['default']:.4f} there, {here[off[0]]:.4f} here); not compared")  # fmt: skip
            continue
        beaten = ", ".join(f"{m} {b.measures[m]['tuned']:.4f} against {b.measures[m]['default']:.4f} (p {b.measures[m]['p_holm']:.2g})"
                           for m in wins)  # fmt: skip
        params = ", ".join(f"{k}={v}" for k, v in b.params.items())
        line = (f"(!) weak baseline: {b.stage} tuned by stagebench tune ({params}; chosen on {b.chosen_on}; {b.folder}) "
                f"is significantly better: {beaten}")  # fmt: skip
        m = HEADLINE if HEADLINE in b.measures and HEADLINE in here else wins[0]
        tuned = b.measures[m]["tuned"]
        later = list(stages)[list(stages).index(b.stage) + 1 :]
        parts = []
        for s in later:
            gain = means[s][m] - here[m]
            if gain <= 0:
                continue
            left = means[s][m] - tuned
            parts.append(f"{s} {gain:+.4f} -> {left:+.4f} ({100 * left / gain:.0f}% of it)" if left > 0 else
                         f"{s} {gain:+.4f} -> {left:+.4f} (none of it)")  # fmt: skip
        if parts:
            line += f". Each later stage's {m} gain over {b.stage}, against the tuned {b.stage} instead: " + "; ".join(parts)
        out.append(line)
    return out


def elsewhere(tuned_on: Sequence[tuple[str, str]], here: str | None) -> list[str]:
    """One note per stage whose config says its params were tuned on another dataset (``tuned_on``:
    (stage, dataset) pairs) than the one this run scored (``here``): copied params are not tuned
    params (``configs/default.yaml``'s BM25 is tuned to the synthetic data)."""
    return [f"(!) weak baseline: {stage}'s params were tuned on {there} (its tuned_on), not on this dataset ({here}): "
            "they are not tuned here; run stagebench tune on this dataset's own train queries (docs/baselines.md)"
            for stage, there in tuned_on if here and not _same_dataset(there, here)]  # fmt: skip


def _same_dataset(a: str, b: str) -> bool:
    return a == b or Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
