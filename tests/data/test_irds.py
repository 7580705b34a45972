"""``loader: ir_datasets``, through ir_datasets' own code: its ``cranfield`` collection read from its
own cache layout (``$IR_DATASETS_HOME/cranfield/docs.txt, queries.txt, qrels.txt``, what it
extracts from the original archive), written here from the shared Cranfield data - the same
documents, queries and judgments the BEIR loader reads - so the two loaders can be compared."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import REPO, child_path, stagebench_cli

pytest.importorskip("ir_datasets", reason="the ir_datasets extra is not installed (pip install 'stagebench[irds]')")


def write_cranfield_cache(beir: Path, home: Path) -> None:
    """The shared BEIR Cranfield in the files ir_datasets' cranfield reads from its cache (the
    original cran.all.1400 / cran.qry / cranqrel layout; queries numbered 1..225 in file order)."""
    d = home / "cranfield"
    d.mkdir(parents=True)
    with open(d / "docs.txt", "w", encoding="utf-8") as f:
        for line in open(beir / "corpus.jsonl", encoding="utf-8"):
            r = json.loads(line)
            f.write(f".I {r['_id']}\n.T\n{r.get('title', '')}\n.A\n\n.B\n\n.W\n{r.get('text', '')}\n")
    queries = [json.loads(line) for line in open(beir / "queries.jsonl", encoding="utf-8")]
    assert [q["_id"] for q in queries] == [str(i) for i in range(1, len(queries) + 1)]
    with open(d / "queries.txt", "w", encoding="utf-8") as f:
        f.writelines(f".I {int(q['_id']):03d}\n.W\n{q['text']}\n" for q in queries)
    rows = (line.split() for line in open(beir / "qrels" / "test.tsv", encoding="utf-8").readlines()[1:])
    (d / "qrels.txt").write_text("".join(f"{q} {doc} {g}\n" for q, doc, g in rows))


def env(home: Path, **extra: str) -> dict[str, str]:
    """A stagebench command's environment: its own IR_DATASETS_HOME, no network (a proxy that
    refuses every connection, one try)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": child_path(), "IR_DATASETS_HOME": str(home),
            "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9", "IR_DATASETS_DL_TRIES": "1",
            **extra}  # fmt: skip


def config(tmp_path: Path, name: str, dataset: str) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"""name: {name}
output: {tmp_path / name}
cache_dir: {tmp_path / ('cache-' + name)}
dataset: {dataset}
stages:
  - {{name: bm25, type: bm25, params: {{top_k: 100}}}}
evaluation: {{metrics: [nDCG@10, RR@10, R@100, AP@100], latency_queries: 0, permutations: 200, bootstrap: 100}}
""")
    return p


@pytest.mark.slow
def test_ir_datasets_cranfield_gives_the_beir_loaders_stage_table(tmp_path, cranfield):
    home = tmp_path / "irds-home"
    write_cranfield_cache(cranfield, home)
    a = stagebench_cli("run", config(tmp_path, "irds", "{loader: ir_datasets, id: cranfield}"), env=env(home))
    assert a.returncode == 0, a.stderr[-3000:]
    b = stagebench_cli("run", config(tmp_path, "beir", f"{{loader: beir, path: {cranfield}}}"), env=env(home))
    assert b.returncode == 0, b.stderr[-3000:]
    ta, tb = (json.loads((tmp_path / n / "stage_table.json").read_text()) for n in ("irds", "beir"))
    assert ta == tb and ta[0]["nDCG@10"] > 0.3  # every value, interval and count of the table
    da, db = (json.loads((tmp_path / n / "manifest.json").read_text())["dataset"] for n in ("irds", "beir"))
    for key in ("fingerprint", "queries_fingerprint", "qrels_fingerprint", "documents", "queries", "judgments"):
        assert da[key] == db[key], key
    import ir_datasets

    assert da["name"] == "ir_datasets:cranfield" and da["source"] == f"ir_datasets {ir_datasets.__version__}: cranfield"
    assert da["text_template"] == "{title} {text}"  # the default over cranfield's own fields
    assert sorted(p.name for p in (home / "cranfield").iterdir()) == ["docs.txt", "qrels.txt", "queries.txt"]  # its
    # cache read as it is: no second copy of the corpus (ir_datasets' doc store is not built)


@pytest.mark.parametrize("dataset_id, line", [
    ("beir/no-such/test", "dataset.id 'beir/no-such/test': not an ir_datasets id (ir_datasets "),
    ("msmarco-passage/eval/small", "dataset.id 'msmarco-passage/eval/small': the collection has no qrels in "),
])  # fmt: skip
def test_an_unknown_id_and_one_without_qrels_are_one_line_before_any_download(dataset_id, line):
    from stagebench.data.irds import IrdsOptions, load_irds
    from stagebench.errors import DataError

    with pytest.raises(DataError) as err:
        load_irds(IrdsOptions(id=dataset_id))
    assert str(err.value).startswith(line) and "\n" not in str(err.value)


@pytest.mark.slow
def test_a_download_that_cannot_happen_offline_is_one_line_and_writes_nothing(tmp_path):
    cfg = config(tmp_path, "bad", "{loader: ir_datasets, id: beir/scifact/test}")
    r = stagebench_cli("run", cfg, env=env(tmp_path / "empty-home"))
    assert r.returncode == 2, r.stderr[-2000:]
    ours = [x for x in r.stderr.splitlines() if x.startswith("stagebench: error")]
    assert len(ours) == 1, r.stderr[-2000:]
    assert "dataset.id 'beir/scifact/test': ir_datasets needs to download its queries from https://" in ours[0]
    assert f"place the files under {tmp_path / 'empty-home'} (IR_DATASETS_HOME)" in ours[0]
    assert "Traceback" not in r.stderr and not (tmp_path / "bad").exists()
    assert "[INFO]" not in r.stderr and "[WARNING]" not in r.stderr, r.stderr[-2000:]  # ir_datasets' logging off the screen (issue 70)


def test_a_template_field_the_collection_lacks_is_named_with_its_fields():
    from stagebench.data.irds import _template

    with pytest.raises(Exception, match=r"dataset.text_template: field\(s\) \['abstract'\] are not fields of 'cranfield' "
                                        r"\(its fields: \['title', 'text', 'author', 'bib'\]\)"):
        _template("{title} {abstract}", ["title", "text", "author", "bib"], (), "text_template", "cranfield")
    assert _template(None, ["title", "text", "author", "bib"], ("{title} {text}",), "text_template", "c") == "{title} {text}"
    assert _template(None, ["body", "url"], ("{title} {text}", "{body}"), "text_template", "c") == "{body}"
    assert _template(None, ["a", "b"], ("{title} {text}",), "text_template", "c") == "{a} {b}"



@pytest.mark.slow
def test_a_damaged_cache_file_is_one_line_whatever_ir_datasets_raises(tmp_path, cranfield):
    """A docs file garbled in ir_datasets' cache made its reader raise a TypeError from deep inside
    ``docs_iter`` (issue 67): it is one line naming the collection, the error and what to do, like a qrels
    read error, and nothing is written. (A command of its own: ir_datasets fixes its home at import.)"""
    home = tmp_path / "irds-home"
    write_cranfield_cache(cranfield, home)
    docs = home / "cranfield" / "docs.txt"
    docs.write_text(".T\na record without its .I line\n.W\ntext\n" + docs.read_text(encoding="utf-8"), encoding="utf-8")
    r = stagebench_cli("run", config(tmp_path, "damaged", "{loader: ir_datasets, id: cranfield}"), env=env(home))
    ours = [x for x in r.stderr.splitlines() if "stagebench: error" in x]
    assert r.returncode == 2 and len(ours) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "dataset.id 'cranfield': ir_datasets could not read its documents (TypeError: " in ours[0]
    assert f"a file of its cache under {home} (IR_DATASETS_HOME) may be damaged" in ours[0]
    assert not (tmp_path / "damaged").exists()
