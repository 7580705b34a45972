"""The core install needs no model library: with torch, sentence-transformers, transformers,
faiss, onnxruntime, tokenizers, onnx, accelerate and datasets made unimportable, a BM25 run,
`table`, `eval`, `compare` and `check` all work - and a dense stage says which extra it needs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO, esci_config

pytestmark = pytest.mark.slow  # subprocesses with model libraries blocked

BLOCK = textwrap.dedent("""
    import importlib.abc, sys
    HEAVY = {"torch", "sentence_transformers", "transformers", "faiss", "onnxruntime", "tokenizers", "onnx",
             "accelerate", "datasets", "huggingface_hub"}

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in HEAVY:
                raise ImportError(f"No module named {name!r} (blocked: core install)")
            return None

    sys.meta_path.insert(0, Block())
    from stagebench.cli import main
""")


def core_only(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK + textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=cwd)  # fmt: skip


def test_bm25_run_table_eval_compare_check_without_model_libraries(tmp_path, small_synthetic):
    cfg = esci_config(tmp_path, small_synthetic, "  - {name: bm25, type: bm25, params: {top_k: 100}}\n"
                      "  - {name: stem, type: bm25, params: {top_k: 100, stemmer: english}}\n"
                      "  - {name: rrf, type: rrf, inputs: [bm25, stem]}", name="out")  # fmt: skip
    (tmp_path / "exp.yaml").write_text("stages: {bm25: {nDCG@10: 0.0}}\ntolerance: 1.0\n")
    out = tmp_path / "out"
    r = core_only(f"""
        codes = [main(["run", "{cfg}"]), main(["table", "{out}"]),
                 main(["eval", "{out}/qrels.trec", "{out}/runs/rrf.trec", "-m", "nDCG@10", "--json"]),
                 main(["compare", "{out}", "{out}"]), main(["check", "{out}", "{tmp_path / 'exp.yaml'}"])]
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
        print("RESULT", codes, heavy)
    """, cwd=REPO)
    assert "RESULT [0, 0, 0, 0, 0] []" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]
    rows = json.loads((out / "stage_table.json").read_text())
    assert [x["stage"] for x in rows] == ["bm25", "stem", "rrf"]


def test_a_dense_stage_without_the_neural_extra_says_what_to_install(tmp_path, small_synthetic):
    cfg = esci_config(tmp_path, small_synthetic, "  - {name: d, type: dense}", name="out")
    r = core_only(f"""
        print("RESULT", main(["run", "{cfg}"]))
    """, cwd=REPO)
    assert "RESULT 2" in r.stdout, r.stderr[-3000:]
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("stagebench: error:")]
    assert len(line) == 1 and "install it: pip install 'stagebench[neural]'" in line[0], r.stderr[-2000:]
    assert "Traceback" not in r.stderr
