"""Per-module scores of a ``mutmut results --all true`` listing (``make mutation`` writes it to
mutation.txt): killed / mutants per module, then the overall score, then the surviving mutants
(``mutmut show NAME`` prints one's diff)."""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path


def main(path: str = "mutation.txt") -> int:
    status: dict[str, str] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        name, sep, st = line.strip().rpartition(": ")
        if sep:
            status[name] = st
    by_module: dict[str, Counter] = defaultdict(Counter)
    for name, st in status.items():
        by_module[name.rsplit(".", 1)[0]][st] += 1
    print(f"{'module':<36} {'killed':>7} {'mutants':>8} {'score':>7}   other outcomes")
    for module, c in sorted(by_module.items()):
        total = sum(c.values())
        other = ", ".join(f"{k} {v}" for k, v in sorted(c.items()) if k != "killed")
        print(f"{module:<36} {c['killed']:>7} {total:>8} {100 * c['killed'] / total:>6.1f}%   {other}")
    killed = sum(st == "killed" for st in status.values())
    print(f"mutation score: {100 * killed / max(len(status), 1):.1f}% killed of {len(status)}")
    survivors = sorted(n for n, st in status.items() if st not in ("killed", "no tests"))
    print(f"\nnot killed, with tests that reach them ({len(survivors)}; `mutmut show NAME`):")
    print("\n".join(survivors))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
