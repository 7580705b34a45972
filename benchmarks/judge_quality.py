"""The judging round with an LLM judge of known quality (issue 91): what `--predictor judge` buys a team at
each agreement between the judge and the truth.

For each agreement ``a`` a real OpenAI-compatible server on 127.0.0.1 (this script's, stdlib only) answers
the judge's prompts: it reads the query and the product back out of the prompt, finds the pair, and answers
the pair's true grade with chance ``a``, else a grade drawn from the true grades' shares (fixed per pair and
seed, so a rerun answers the same). Mixing the truth with draws from its own marginal makes every kappa,
quadratic-weighted included, ``a`` in expectation; the realised one and the confusion are recorded. The
truth is the world ``--hide`` makes (the folder's judged grades, every real hole irrelevant).

Then, on a copy of the folder (the original is never written):
1. ``stagebench judge`` (the real judge path: the openai backend, preflight, cache, retries) grades every
   pair in any stage's top 10 - the holes and, blind, every judged pair (``sample`` past their count), so
   that the hidden pairs have a judge's grade and the visible ones calibrate it;
2. ``plan-judgments --simulate --strategy sample --hide SHARE --predictor judge`` rounds at each budget:
   pairs settled, worst coverage, width over the oracle design's.
The same rounds with the folder's default grade model (its cross-encoder) are the row without a judge.

Usage (a results folder of a chain over a real catalog, e.g. Cranfield or the ESCI rows)::

    .venv/bin/python benchmarks/judge_quality.py build/worlds/cranfield --agreement 0.3,0.5,0.7,0.9 \\
        --budgets 100,300,1000 --rounds 200 --hide 0.7 --out results/judge_quality.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import shutil
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from stagebench import api
from stagebench.api.ground import ground
from stagebench.api.judging import judge_folder
from stagebench.config import parse_dataset
from stagebench.judge.grading import dataset_of
from stagebench.judge.scale import scale_for
from stagebench.judgments.design import DEFAULT, DESIGNS
from stagebench.judgments.planning import pool_holes
from stagebench.llm.listwise import shorten

PROMPT = re.compile(r"A shopper searched for: (.*?)\n\nProduct: (.*?)\n\nHow well does this product match", re.DOTALL)


def truth_world(folder: Path) -> tuple[dict, dict, object]:
    """(pair -> true grade for every pair in any stage's top 10, the (query text, shown product) -> pairs
    lookup, the scale the judge answers in)."""
    g = ground(folder)
    pooled = pool_holes(g.ranked, {}, g.queries, 10)
    truth = {(h.qid, h.docid): g.qrels.get(h.qid, {}).get(h.docid, 0) for h in pooled}
    ds = dataset_of(g.rf, parse_dataset(g.rf.manifest.config.get("dataset")), "the truth server")
    lookup: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for q, d in truth:
        key = (" ".join(ds.queries[q].split()), shorten(ds.doc_text.get(d, ""), 40))
        lookup.setdefault(key, []).append((q, d))
    grades = {x for docs in ds.qrels.values() for x in docs.values()}
    return truth, lookup, scale_for(g.rf.manifest.dataset.label_names, grades)


class TruthServer:
    """An OpenAI-compatible chat server on 127.0.0.1 answering every judge prompt from the truth at agreement
    ``a`` (module doc). Counts the prompts it could not place."""

    def __init__(self, truth: dict, lookup: dict, scale, a: float, seed: int) -> None:
        self.truth, self.lookup, self.scale, self.a, self.seed = truth, lookup, scale, a, seed
        grades = sorted(set(truth.values()) | set(scale.grades))
        counts = np.array([sum(1 for x in truth.values() if x == g) for g in grades], dtype=float)
        self.grades, self.shares = grades, counts / counts.sum()
        self.said: dict[tuple[str, str], int] = {}
        self.unplaced = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(self, code: int, body: dict) -> None:
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                user = next((m["content"] for m in reversed(body.get("messages", [])) if m.get("role") == "user"), "")
                self._send(200, {"choices": [{"message": {"role": "assistant", "content": server.answer(user)}}],
                                 "usage": {"prompt_tokens": len(user.split()), "completion_tokens": 1}})

        self.model = f"truth-judge-a{a:g}-s{seed}"
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def grade(self, pair: tuple[str, str]) -> int:
        """The pair's answer: fixed by the pair and the seed."""
        h = int.from_bytes(hashlib.sha256(f"{self.seed}|{pair[0]}|{pair[1]}".encode()).digest()[:8], "big")
        rng = random.Random(h)
        if rng.random() < self.a:
            return self.truth[pair]
        return int(rng.choices(self.grades, weights=self.shares)[0])

    def answer(self, user: str) -> str:
        m = PROMPT.search(user)
        pairs = self.lookup.get((" ".join(m.group(1).split()), m.group(2).strip())) if m else None
        if not pairs:
            self.unplaced += 1
            return "unsure"
        got = [self.grade(p) for p in pairs]  # texts shared by several pairs: the first one's answer
        for p in pairs:
            self.said[p] = got[0]
        return self.scale.name(got[0])

    def close(self) -> None:
        self.httpd.shutdown()


def qwk(a: list[int], b: list[int], grades: list[int]) -> float:
    """Quadratic-weighted Cohen's kappa of two graders."""
    k = len(grades)
    at = {g: i for i, g in enumerate(grades)}
    O = np.zeros((k, k))
    for x, y in zip(a, b):
        O[at[x], at[y]] += 1
    W = np.array([[(i - j) ** 2 for j in range(k)] for i in range(k)], dtype=float) / max((k - 1) ** 2, 1)
    E = np.outer(O.sum(1), O.sum(0)) / max(O.sum(), 1)
    return float(1 - (W * O).sum() / max((W * E).sum(), 1e-12))


def _widths(rows, pairs) -> str:
    """Each budget's mean interval width over the pairs."""
    return " / ".join(f"{np.mean([r.width[t] for t in pairs]):.3f}" for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder")
    ap.add_argument("--agreement", default="0.3,0.5,0.7,0.9")
    ap.add_argument("--budgets", default="100,300,1000")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--hide", type=float, default=0.7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--design", choices=DESIGNS, default=DEFAULT, help="the sampling design (default: the rounds' own)")
    ap.add_argument("--out", help="append the table to this Markdown file")
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    budgets = [int(x) for x in args.budgets.split(",")]
    truth, lookup, scale = truth_world(folder)
    grades = sorted(set(scale.grades))
    lines = [f"## {folder} (hide {args.hide}, {args.rounds} rounds a budget, {args.design} design)", "",
             "| grade model | QWK (realised) | judge = truth | pairs settled (median) " + " / ".join(map(str, budgets))
             + " | worst coverage | mean pair width | width / its oracle |", "|---|---|---|---|---|---|---|"]
    base = api.simulate_estimates(folder, budgets, rounds=args.rounds, hide=args.hide, seed=args.seed, designs=[args.design])
    first = next(iter(base.model))
    rows = [r for r in base.rows if r.predictor == first]
    lines.append(f"| {first} (no judge) | - | - | " + " / ".join(f"{np.median(r.settled_right):.0f}" for r in rows)
                 + " | " + " / ".join(f"{r.worst[1]:.3f}" for r in rows) + " | " + _widths(rows, base.pairs) + " | "
                 + " / ".join(f"{r.ratio():.2f}" for r in rows) + " |")
    notes: list[str] = []
    for a in [float(x) for x in args.agreement.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / folder.name
            shutil.copytree(folder, copy)
            server = TruthServer(truth, lookup, scale, a, args.seed)
            try:
                cfg = Path(tmp) / "judge.yaml"
                cfg.write_text(json.dumps({"judge": {
                    "backend": "openai", "model": server.model, "base_url": server.url, "depth": 10,
                    "sample": 10 ** 6, "max_doc_words": 40, "concurrency": 8, "backoff": 0.01,
                    "prompt": ""}}))  # fmt: skip
                t0 = time.perf_counter()
                judge_folder(copy, str(cfg), cache_dir=str(Path(tmp) / "cache"))
                took = time.perf_counter() - t0
            finally:
                server.close()
            said = [(server.said[p], truth[p]) for p in truth if p in server.said]
            k = qwk([x for x, _ in said], [y for _, y in said], grades)
            exact = np.mean([x == y for x, y in said])
            confusion = {f"{t}->{j}": sum(1 for x, y in said if (y, x) == (t, j)) for t in grades for j in grades}
            print(f"agreement {a}: judged {len(said)} pairs in {took:.0f}s, unplaced {server.unplaced}, QWK {k:.3f}, "
                  f"exact {exact:.3f}; confusion (truth->judge) {json.dumps(confusion)}", flush=True)
            cov = api.simulate_estimates(copy, budgets, rounds=args.rounds, hide=args.hide, seed=args.seed,
                                         predictor="judge", designs=[args.design])  # fmt: skip
            rows = [r for r in cov.rows if r.predictor == "judge"]
            lines.append(f"| judge, agreement {a:g} | {k:.3f} | {exact:.3f} | "
                         + " / ".join(f"{np.median(r.settled_right):.0f}" for r in rows) + " | "
                         + " / ".join(f"{r.worst[1]:.3f}" for r in rows) + " | " + _widths(rows, cov.pairs) + " | "
                         + " / ".join(f"{r.ratio():.2f}" for r in rows) + " |")
            notes.append(f"agreement {a:g}: {len(said):,} pairs judged through `stagebench judge` in {took:.0f} s; "
                         f"confusion, truth -> judge: {json.dumps(confusion)}")
            print(lines[-1], flush=True)
    text = "\n".join(lines + ["", *notes]) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
