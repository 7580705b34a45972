"""Issue 94's server cases on a real local Ray cluster (``engine: ray``, 2 workers), each a real ``stagebench
run`` against tests/llm/plain_server.py's OpenAI-compatible server on 127.0.0.1, measured at the server:

* ``slow12``: 12 queries, a server answering each request in 1 s, ``concurrency: 4`` - requests in flight.
* ``hang4``: 4 queries, a server that never answers, ``concurrency: 4, timeout: 4`` - how many of the 4
  queries were asked (requests in flight at once) before the run failed, and when.
* ``serial8``: 8 queries, a server answering one request at a time in 1.5 s, ``concurrency: 4, timeout: 4,
  retries: 3`` - exit status and line (busy is not hung).

    python benchmarks/ray_llm_server.py [--cases slow12 hang4 serial8] [--out build/ray_llm_server]

Prints one row a case: exit status, seconds, the most requests in flight at the server, requests sent, and
the run's error line (if any). Needs the ray extra (make install) and data/synthetic-esci (make data)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.llm.plain_server import MODEL, PlainServer  # noqa: E402

CASES = {  # name: (server mode, its delay, queries, llm params)
    "slow12": ("slow", 1.0, 12, {"concurrency": 4}),
    "hang4": ("hang", 0.0, 4, {"concurrency": 4, "timeout": 4, "retries": 1}),
    "serial8": ("serial", 1.5, 8, {"concurrency": 4, "timeout": 4, "retries": 3}),
}


def config(out: Path, name: str, url: str, queries: int, llm: dict) -> Path:
    params = {"backend": "openai", "base_url": url, "model": MODEL, "top_n": 10, "window": 10, "stride": 10, **llm}
    cfg = out / f"{name}.yaml"
    cfg.write_text(f"""name: {name}
output: {out / name}
cache_dir: {out / name}-cache
dataset: {{loader: esci, path: {REPO / 'data' / 'synthetic-esci'}, split: test, max_queries: {queries}}}
engine: {{type: ray, address: null, num_workers: 2, local_cpus: 2}}
stages:
  - {{name: bm25, type: bm25, params: {{top_k: 20}}}}
  - {{name: llm, type: llm_rerank, inputs: [bm25], params: {params}}}
evaluation: {{metrics: [nDCG@10], permutations: 100, latency_queries: 0}}
""")
    return cfg


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--out", default=str(REPO / "build" / "ray_llm_server"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}  # fmt: skip
    print(f"{'case':<8}  {'exit':>4}  {'seconds':>7}  {'most in flight':>14}  {'sent':>4}  line")
    for name in args.cases:
        mode, delay, queries, llm = CASES[name]
        with PlainServer(mode, delay=delay) as srv:
            cfg = config(out, name, srv.url, queries, llm)
            t0 = time.monotonic()
            p = subprocess.run([sys.executable, "-m", "stagebench", "run", str(cfg)], env=env, capture_output=True,
                               text=True, cwd=REPO)  # fmt: skip
            took = time.monotonic() - t0
            errors = [line for line in p.stderr.splitlines() if line.startswith("stagebench: error:")]
            print(f"{name:<8}  {p.returncode:>4}  {took:>7.1f}  {srv.most_in_flight:>14}  {len(srv.posts):>4}  "
                  f"{errors[0][:200] if errors else ''}", flush=True)  # fmt: skip
            (out / f"{name}.log").write_text(p.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
