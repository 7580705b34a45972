"""The LLM judge against a real OpenAI-compatible server on 127.0.0.1 (llm-katan's echo backend,
which repeats the prompt), through the command line: inside ``stagebench run``, a rerun that asks
nothing, a kill -9 that resumes, and ``stagebench judge`` on a finished folder."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import stagebench_cli
from tests.llm.test_server import env, katan

pytestmark = pytest.mark.slow


def judge_config(tmp_path: Path, dataset: Path, url: str, name: str = "t", judge: bool = True, **extra) -> Path:
    prompt = tmp_path / "judge-prompt.txt"
    # the echo server repeats the prompt, so its answer carries the one label the prompt names
    prompt.write_text("Exact\n{query}\n{document}")
    section = {"backend": "openai", "model": "echo-model", "base_url": url, "api_key_env": "KATAN_KEY", "depth": 3,
               "sample": 6, "prompt": str(prompt), "max_doc_words": 40, "backoff": 0.01, **extra}  # fmt: skip
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"""name: {name}
output: {tmp_path / name}
cache_dir: {tmp_path / 'cache'}
dataset: {{loader: esci, path: {dataset}, split: test, max_queries: 4}}
stages:
  - {{name: bm25, type: bm25, params: {{top_k: 30}}}}
  - {{name: bm25b, type: bm25, params: {{top_k: 30, k1: 0.6, b: 0.3}}}}
evaluation: {{metrics: [nDCG@10, P@10]}}
""" + (f"judge: {json.dumps(section)}\n" if judge else ""))
    return cfg


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_the_judge_in_a_run_then_a_rerun_that_asks_nothing(tmp_path, small_synthetic):
    with katan(tmp_path) as url:
        cfg = judge_config(tmp_path, small_synthetic, url)
        r = stagebench_cli("run", cfg, env=env())
        assert r.returncode == 0, r.stderr[-3000:]
        out = tmp_path / "t"
        j = manifest(out)["judge"]
        asked = j["holes"] + j["sample"]
        assert j["holes"] > 0 and j["sample"] == 6 and j["from_cache"] == 0
        assert j["outcomes"]["failed"] == 0 and j["outcomes"]["repaired"] + j["outcomes"]["ok"] > 0
        assert j["identity"]["llm"]["base_url"] == url and "KATAN_KEY" not in json.dumps(j["identity"])
        for f in ("judge/judgments.tsv", "judge/stage_table.txt", "judge/stage_table.json", "judge/agreement.txt",
                  "judge/qrels.filled.trec", "judge/qrels.filled.source.tsv"):  # fmt: skip
            assert f in manifest(out)["files"], f
        sources = (out / "judge" / "qrels.filled.source.tsv").read_text().splitlines()
        assert sum(line.endswith("\tjudge") for line in sources) == j["outcomes"]["ok"] + j["outcomes"]["repaired"] - sum(
            1 for line in (out / "judge" / "judgments.tsv").read_text().splitlines() if "\tsample\t" in line and
            line.split("\t")[3] != "")  # fmt: skip
        assert "NOT human judgments" in (out / "judge" / "stage_table.txt").read_text()
        assert "id=\"judge\"" in (out / "report.html").read_text()
        first = {f: (out / f).read_bytes() for f in ("judge/stage_table.txt", "judge/qrels.filled.trec",
                                                     "judge/agreement.json")}  # fmt: skip
        r = stagebench_cli("run", cfg, env=env())
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"{asked} from the cache, 0 asked" in r.stderr
    again = manifest(out)["judge"]
    assert again["from_cache"] == asked
    for f, data in first.items():
        if f != "judge/agreement.json":  # it holds this run's seconds
            assert (out / f).read_bytes() == data, f


def test_stagebench_judge_on_a_finished_folder_and_a_kill_9_that_resumes(tmp_path, small_synthetic):
    with katan(tmp_path, "--latency-ms", "150") as url:
        plain = judge_config(tmp_path, small_synthetic, url, judge=False)
        assert stagebench_cli("run", plain, env=env()).returncode == 0
        out = tmp_path / "t"
        before = manifest(out)
        assert "judge" not in before and "judge/judgments.tsv" not in before["files"]
        with_judge = judge_config(tmp_path, small_synthetic, url, name="j", concurrency=1)
        proc = subprocess.Popen([sys.executable, "-m", "stagebench", "judge", str(out), "--config", str(with_judge)],
                                env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        answers = tmp_path / "cache" / "llm"
        deadline = time.monotonic() + 120
        while not (answers.is_dir() and len([p for p in answers.iterdir() if not p.name.startswith(".")]) >= 4):
            assert proc.poll() is None and time.monotonic() < deadline, "the judge ended before it could be killed"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        done = len([p for p in answers.iterdir() if not p.name.startswith(".")])
        assert manifest(out) == before  # the folder is untouched by the killed judge
        r = stagebench_cli("judge", out, "--config", with_judge, env=env())
        assert r.returncode == 0, r.stderr[-3000:]
    j = manifest(out)["judge"]
    # every answer stored before the kill is read back, none asked twice (pairs whose prompt is the same are one entry)
    total = j["holes"] + j["sample"]
    assert done <= j["from_cache"] < total
    assert f"{j['from_cache']} from the cache, {total - j['from_cache']} asked" in r.stderr
    assert "Agreement with the human labels" in r.stdout and "Judge-filled stage table" in r.stdout
    assert stagebench_cli("table", out, env=env()).returncode == 0  # every file verifies and re-renders
