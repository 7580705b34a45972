"""The import graph's figures that docs/architecture.md's "Rooms" table reports: rooms (a package of
``src/stagebench``, or a module at its top), arrows (one room importing another, imports inside
functions counted), floors (the longest chain of arrows), the largest modules and the modules at the top.

    python benchmarks/rooms.py [REPO]
"""

from __future__ import annotations

import ast
import sys
from functools import lru_cache
from pathlib import Path


def modules(src: Path) -> dict[str, Path]:
    out = {}
    for p in src.rglob("*.py"):
        parts = list(p.relative_to(src.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def edges(mods: dict[str, Path]) -> set[tuple[str, str]]:
    """(module, the stagebench module it imports), ``from pkg import sub`` counting as ``pkg.sub``."""
    out = set()
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(n, ast.Import):
                targets = [a.name for a in n.names if a.name.startswith("stagebench")]
            elif isinstance(n, ast.ImportFrom):
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - n.level + 1] + [n.module or ""]).strip(".") \
                    if n.level else n.module or ""
                if not base.startswith("stagebench"):
                    continue
                targets = [base, *(f"{base}.{a.name}" for a in n.names if f"{base}.{a.name}" in mods)]
            else:
                continue
            for t in targets:
                while t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t not in (m, "stagebench"):
                    out.add((m, t))
    return out


def figures(repo: Path) -> dict:
    src = repo / "src" / "stagebench"
    mods = modules(src)
    room = {m: m.split(".")[1] for m in mods if m.count(".") >= 1 and m.split(".")[1] != "__main__"}
    arrows = {(room[a], room[b]) for a, b in edges(mods) if a in room and b in room and room[a] != room[b]}
    out: dict[str, set[str]] = {r: set() for r in set(room.values())}
    for a, b in arrows:
        out[a].add(b)

    @lru_cache(None)
    def height(r: str) -> int:
        return 1 + max((height(x) for x in out[r]), default=0)

    sizes = sorted(((len(p.read_text(encoding="utf-8").splitlines()), m.removeprefix("stagebench.")) for m, p in
                    mods.items()), reverse=True)[:10]  # fmt: skip
    top = sorted(p.stem for p in src.glob("*.py") if p.stem not in ("__init__", "__main__"))
    return {"rooms": len(out), "floors": max(map(height, out)), "arrows": len(arrows),
            "module_arrows": len(edges(mods)), "largest": sizes, "top": top}  # fmt: skip


if __name__ == "__main__":
    f = figures(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
    print(f"rooms {f['rooms']}, floors {f['floors']}, arrows between rooms {f['arrows']} (between modules "
          f"{f['module_arrows']}), modules at the top {len(f['top'])}")
    print("largest: " + ", ".join(f"{m} {n}" for n, m in f["largest"]))
