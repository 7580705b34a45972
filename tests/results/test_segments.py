"""Query segments: the built-in segmentations from their definitions, the per-segment changes and
p-values against an independent computation (the randomization test called directly, Holm written
here from its definition), the user file's errors, and `stagebench segments` on a real finished run."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from stagebench import stats
from stagebench.cli import main
from stagebench.config import load_config
from stagebench.errors import DataError, StagebenchError
from stagebench.pipeline import run_config
from stagebench.data.esci import read_sources
from stagebench.data.synthetic import SyntheticSpec, _make_products, _make_queries
from stagebench.errors import ConfigError
from stagebench.results.segments import count_segments, length_segments, negation_segments, read_segment_file, segment_table


def holm_by_definition(ps):
    """Holm's step-down: the i-th smallest p times (m - i), made monotone, capped at 1."""
    m = len(ps)
    order = np.argsort(ps, kind="stable")
    out, running = [0.0] * m, 0.0
    for i, j in enumerate(order):
        running = max(running, min(1.0, (m - i) * ps[j]))
        out[j] = running
    return out


def test_length_bins():
    texts = {"a": "dog", "b": "red dog leash", "c": "a b c d e f", "d": "one two three four five six seven eight", "e": ""}
    assert length_segments(texts, list(texts)) == {"a": "1-2 words", "b": "3-4 words", "c": "5-6 words",
                                                   "d": "7+ words", "e": "0 words"}  # fmt: skip


def test_counts_in_thirds_never_straddle_a_count():
    counts = {f"q{i}": n for i, n in enumerate([1, 1, 2, 3, 3, 3, 3, 4, 8, 9, 20, 20])}
    seg = count_segments(counts, "judged")
    by_count = {}
    for q, n in counts.items():
        by_count.setdefault(n, set()).add(seg[q])
    assert all(len(labels) == 1 for labels in by_count.values())  # one count, one segment
    # the edges are the counts at the 1/3 and 2/3 quantiles (lower: sorted positions 3 and 7): 3 and 4
    assert seg["q0"] == "judged 1-3" and seg["q7"] == "judged 4" and seg["q8"] == seg["q11"] == "judged 8-20"
    assert set(count_segments({"a": 5, "b": 5}, "relevant").values()) == {"relevant 5"}


def fake_run(n=60, seed=0):
    """Per-query values of three stages (c reranks b; b fuses a) whose gain differs by segment."""
    rng = np.random.default_rng(seed)
    qs = [f"q{i}" for i in range(n)]
    a = rng.uniform(0, 1, n)
    b = np.clip(a + rng.normal(0.0, 0.05, n), 0, 1)
    c = np.clip(b + np.where(np.arange(n) % 3 == 0, 0.2, 0.0) + rng.normal(0, 0.02, n), 0, 1)  # wins on segment "x"
    per_query = {s: {"m": dict(zip(qs, v))} for s, v in (("a", a), ("b", b), ("c", c))}
    stages = {"a": [], "b": ["a"], "c": ["b"]}
    seg = {q: ("x" if i % 3 == 0 else "y") for i, q in enumerate(qs)}
    seg["q1"] = "tiny"  # one query: too few to test
    seg.pop("q2")  # a scored query without a segment
    seg["elsewhere"] = "x"  # not a scored query
    return qs, per_query, stages, seg


def test_segment_changes_and_p_values_equal_an_independent_computation():
    qs, per_query, stages, seg = fake_run()
    t = segment_table("f", "test", seg, per_query, stages, qs, ["m"], permutations=500, seed=7, alpha=0.05, min_queries=5)
    assert [s.label for s in t.segments] == ["tiny", "x", "y"] and t.unassigned == 1
    assert "1 queries of the segmentation are not scored queries" in t.notes[0]
    raw = []
    for s in t.segments:
        members = [q for q in qs if seg.get(q) == s.label]
        assert s.queries == len(members)
        for st in "abc":
            assert s.means[st]["m"] == pytest.approx(np.mean([per_query[st]["m"][q] for q in members]))
        assert [(c.stage, c.against) for c in s.changes["m"]] == [("b", "a"), ("c", "b")]
        for c in s.changes["m"]:
            x = [per_query[c.stage]["m"][q] for q in members]
            y = [per_query[c.against]["m"][q] for q in members]
            assert c.delta == pytest.approx(np.mean(x) - np.mean(y))
            if s.label == "tiny":
                assert c.p is None and c.p_holm is None and s.too_few
            else:
                assert c.p == stats.randomization_test(x, y, 500, 7)
                raw.append(c)
    # Holm over every tested (segment, stage, input) of the measure, written from its definition
    assert [c.p_holm for c in raw] == pytest.approx(holm_by_definition([c.p for c in raw]))
    x = t.segments[1]
    assert x.order["m"] == ["c", "b", "a"] or x.order["m"] == ["c", "a", "b"]
    assert x.changes["m"][1].significant(0.05) and x.changes["m"][1].delta > 0.15


def test_a_segment_of_exactly_min_queries_queries_is_tested_and_one_fewer_is_not():
    """``min_queries`` is the smallest segment tested (the boundary itself, both sides of it)."""
    qs, per_query, stages, _ = fake_run(n=30)
    seg = {q: ("five" if i < 5 else "four" if i < 9 else "rest") for i, q in enumerate(qs)}
    t = segment_table("f", "t", seg, per_query, stages, qs, ["m"], permutations=200, seed=3, alpha=0.05, min_queries=5)
    by = {s.label: s for s in t.segments}
    assert (by["five"].queries, by["four"].queries) == (5, 4)
    assert not by["five"].too_few and all(c.p is not None and c.p_holm is not None for c in by["five"].changes["m"])
    assert by["four"].too_few and all(c.p is None and c.p_holm is None for c in by["four"].changes["m"])
    members = qs[:5]
    c = by["five"].changes["m"][0]
    assert c.p == stats.randomization_test([per_query[c.stage]["m"][q] for q in members],
                                           [per_query[c.against]["m"][q] for q in members], 200, 3)  # fmt: skip


def test_segment_file_errors_name_the_file_and_line(tmp_path):
    good = tmp_path / "seg.tsv"
    good.write_text("# qid\tsegment\n1\tnegation\n2\tplain\n\n3\tplain\n", encoding="utf-8")
    assert read_segment_file(good) == {"1": "negation", "2": "plain", "3": "plain"}
    cases = {"1 negation\n": r"seg\.tsv, line 1: expected 'qid<TAB>segment'",
             "1\tneg\n1\tplain\n": r"line 2: query '1' is given segment 'plain' here and 'neg' earlier",
             "1\t \n": r"line 1: query '1': the segment is empty",
             "# nothing\n": r"seg\.tsv: no 'qid<TAB>segment' line"}  # fmt: skip
    for text, msg in cases.items():
        good.write_text(text, encoding="utf-8")
        with pytest.raises(DataError, match=msg):
            read_segment_file(good)


def test_too_small_min_queries_is_refused():
    qs, per_query, stages, seg = fake_run()
    with pytest.raises(StagebenchError, match="min_queries 1"):
        segment_table("f", "t", seg, per_query, stages, qs, ["m"], permutations=10, seed=1, alpha=0.05, min_queries=1)


def test_stagebench_segments_on_a_finished_run(tmp_path, small_synthetic, capsys):
    cfg = tmp_path / "s.yaml"
    cfg.write_text(f"name: s\noutput: {tmp_path / 's'}\ncache_dir: {tmp_path / 'cache'}\n"
                   f"dataset: {{loader: esci, path: {small_synthetic}, split: test}}\nstages:\n"
                   "  - {name: bm25, type: bm25, params: {top_k: 100}}\n"
                   "  - {name: stem, type: bm25, params: {top_k: 100, stemmer: english}}\n"
                   "  - {name: rrf, type: rrf, inputs: [bm25, stem]}\n"
                   "evaluation: {metrics: [nDCG@10, R@100], permutations: 300, bootstrap: 200, segments: [length, judged]}\n")  # fmt: skip
    result = run_config(load_config(cfg))
    out = result.output
    rows = list(csv.DictReader(open(out / "per_query.csv", encoding="utf-8")))
    qids = [r["qid"] for r in rows if r["stage"] == "rrf"]
    seg_file = tmp_path / "mine.tsv"
    seg_file.write_text("".join(f"{q}\t{'even' if i % 2 == 0 else 'odd'}\n" for i, q in enumerate(qids)), encoding="utf-8")
    assert main(["segments", str(out), "--by", str(seg_file), "--format", "json"]) == 0
    (t,) = json.loads(capsys.readouterr().out)
    assert [s["label"] for s in t["segments"]] == ["even", "odd"]
    value = {(r["stage"], r["qid"]): float(r["nDCG@10"]) for r in rows}
    for s in t["segments"]:
        members = [q for i, q in enumerate(qids) if (i % 2 == 0) == (s["label"] == "even")]
        for stage in ("bm25", "stem", "rrf"):
            assert s["means"][stage]["nDCG@10"] == pytest.approx(np.mean([value[(stage, q)] for q in members]), abs=1e-6)
        assert [(c["stage"], c["against"]) for c in s["changes"]["nDCG@10"]] == [("rrf", "bm25"), ("rrf", "stem")]
    assert main(["segments", str(out), "--measure", "R@100"]) == 0
    text = capsys.readouterr().out
    assert "Segments: query length in words (R@100" in text and "judged products per query" in text
    assert "rrf vs bm25" in text and "order" in text
    assert main(["segments", str(out), "--measure", "P@5"]) == 2
    err = capsys.readouterr().err
    assert "--measure P@5: " in err and "was scored with nDCG@10, R@100" in err

    # the run wrote the segments table of each segmentation it names, as the command computes it
    written = json.loads((out / "segments.json").read_text())
    assert [t["by"] for t in written] == ["length", "judged"]
    for t in written:
        assert main(["segments", str(out), "--by", t["by"], "--format", "json"]) == 0
        assert json.loads(capsys.readouterr().out) == [t]
    assert "Segments: query length in words (nDCG@10" in (out / "segments.txt").read_text()
    html = (out / "report.html").read_text()
    assert 'id="segments"' in html and 'alt="segments.png"' in html
    assert (out / "plots" / "segments.png").stat().st_size > 5_000
    rows = list(csv.DictReader(open(out / "segments.csv", encoding="utf-8")))
    assert {r["by"] for r in rows} == {"length", "judged"} and {r["measure"] for r in rows} == {"nDCG@10", "R@100"}


def test_a_segmentation_named_twice_or_unknown_is_refused_at_load(tmp_path, small_synthetic):
    bad = tmp_path / "mine.tsv"
    bad.write_text("1\tx\n2 y\n", encoding="utf-8")
    for value, msg in (("[length, length]", "a segmentation is listed twice"),
                       ("[lenght]", r"\[0\]: 'lenght' is neither a built-in segmentation \(length, negation, judged"),
                       (f"[length, {bad}]", r"\[1\]: .*mine\.tsv, line 2: expected 'qid<TAB>segment'")):  # fmt: skip
        cfg = tmp_path / "bad.yaml"
        cfg.write_text(f"name: b\noutput: {tmp_path / 'b'}\ndataset: {{loader: esci, path: {small_synthetic}, split: test}}\n"
                       "stages:\n  - {name: bm25, type: bm25}\n"
                       f"evaluation: {{segments: {value}}}\n")  # fmt: skip
        with pytest.raises(ConfigError, match=rf"bad\.yaml.*evaluation\.segments.*{msg}"):
            load_config(cfg)


def test_negation_rule():
    texts = {"a": "running shoes without leather", "b": "phone case not red", "c": "leather-free belt", "d": "notebook sleeve",
             "e": "no show socks", "f": "bag w/o strap", "g": "nonstick pan", "h": "any color but blue",
             "i": "dog collar other than groyarix", "j": "other brand"}  # fmt: skip
    got = negation_segments(texts, list(texts))
    assert [q for q, s in got.items() if s == "negation"] == ["a", "b", "c", "e", "f", "h", "i"]
    assert got["d"] == got["g"] == "no negation"


def test_sources_csv_read_as_a_segment_file_and_its_errors(tmp_path):
    f = tmp_path / "shopping_queries_dataset_sources.csv"
    f.write_text("query_id,source\n0,negations\n1,other\n2,behavioral\n", encoding="utf-8")
    assert read_segment_file(f) == read_sources(f) == {"0": "negations", "1": "other", "2": "behavioral"}
    for text, msg in (("query_id,src\n0,x\n", "missing required column"), ("query_id,source\n0,a\n0,b\n", "line 3: query '0' has two sources"),
                      ("query_id,source\n0,\n", "line 2: query '0' has an empty source")):  # fmt: skip
        f.write_text(text, encoding="utf-8")
        with pytest.raises(DataError, match=msg):
            read_sources(f)


def test_generator_plants_negation_queries_as_it_says():
    import random

    spec = SyntheticSpec(seed=3, n_products=3000, n_test_queries=300, n_train_queries=0)
    rng = random.Random(spec.seed)
    products = _make_products(spec, rng)
    rows = _make_queries(spec, products, rng)
    by_id = {p["product_id"]: p for p in products}
    negated = {r["query_id"]: r for r in rows if r["negation"]}
    assert 0.08 < len(negated) / 300 < 0.3  # about one query in seven
    texts = {r["query_id"]: r["query"] for r in rows}
    assert {q for q, s in negation_segments(texts, list(texts)).items() if s == "negation"} == set(negated)
    planted = 0
    for q, r in negated.items():
        attr, value = r["excluded"]
        assert value.lower() in r["query"]
        judged = [(by_id[x["product_id"]], x["esci_label"]) for x in rows if x["query_id"] == q]
        exact = [p for p, lab in judged if lab == "E"]
        assert exact and all(p[attr] != value for p in exact)  # an E product never has the excluded value
        for p, lab in judged:
            if p[attr] == value and all(p[a] == v for a, v in r["constraints"].items()):
                assert lab == "I"  # meets the constraints with the excluded value: judged irrelevant
                planted += 1
    assert planted > len(negated)  # the pools hold those hard negatives


def test_dataset_segments_stored_in_the_folder_and_source_without_its_file_refused(tmp_path, small_synthetic, capsys):
    import shutil

    mine = tmp_path / "mine.tsv"
    src = read_sources(small_synthetic / "shopping_queries_dataset_sources.csv")
    mine.write_text("".join(f"{q}\t{'low' if int(q) < 20 else 'high'}\n" for q in src), encoding="utf-8")
    cfg = tmp_path / "s.yaml"
    body = ("stages:\n  - {name: bm25, type: bm25, params: {top_k: 100}}\n"
            "  - {name: stem, type: bm25, params: {top_k: 100, stemmer: english}}\n"
            f"evaluation: {{metrics: [nDCG@10], permutations: 200, bootstrap: 100, segments: [negation, locale, source, {mine}]}}\n")  # fmt: skip
    cfg.write_text(f"name: s\noutput: {tmp_path / 's'}\ncache_dir: {tmp_path / 'cache'}\n"
                   f"dataset: {{loader: esci, path: {small_synthetic}, split: test}}\n" + body)  # fmt: skip
    out = run_config(load_config(cfg)).output
    written = json.loads((out / "segments.json").read_text())
    assert [t["by"] for t in written] == ["negation", "locale", "source", str(mine)]
    seg = {t["by"]: {s["label"]: s["queries"] for s in t["segments"]} for t in written}
    # the generator's own record of its negation queries (the sources file) and the word rule agree
    assert seg["source"] == {"negations": seg["negation"]["negation"], "other": seg["negation"]["no negation"]}
    assert seg["locale"] == {"us": 40} and seg[str(mine)] == {"high": 20, "low": 20}
    stored = (out / "query_segments.tsv").read_text()
    assert {line.split("\t")[0] for line in stored.splitlines()} == {"locale", "source", str(mine)}
    mine.unlink()  # the folder holds what it needs: the segments render again without the user's file
    assert main(["table", str(out)]) == 0
    capsys.readouterr()
    assert json.loads((out / "segments.json").read_text()) == written
    assert main(["segments", str(out), "--by", "source", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [written[2]]
    (out / "query_segments.tsv").write_text(stored.replace("negations", "other"))  # not what the run wrote
    assert main(["segments", str(out), "--by", "source"]) == 2
    assert "query_segments.tsv" in capsys.readouterr().err
    (out / "query_segments.tsv").write_text(stored)

    # a file none of whose queries the run scored: one line, exit 2
    stray = tmp_path / "stray.tsv"
    stray.write_text("nope\tx\n", encoding="utf-8")
    assert main(["segments", str(out), "--by", str(stray)]) == 2
    assert "no query of it is a scored query of the run" in capsys.readouterr().err

    # source named, and no sources file beside the data: refused before any stage runs
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in ("shopping_queries_dataset_examples.parquet", "shopping_queries_dataset_products.parquet"):
        shutil.copy(small_synthetic / f, bare / f)
    cfg.write_text(f"name: s\noutput: {tmp_path / 't'}\ncache_dir: {tmp_path / 'cache2'}\n"
                   f"dataset: {{loader: esci, path: {bare}, split: test}}\n" + body.replace(f", {mine}", ""))  # fmt: skip
    with pytest.raises(ConfigError, match=r"evaluation\.segments\[2\]: source: the dataset gives no query source"):
        run_config(load_config(cfg))
    assert not (tmp_path / "cache2").exists() or not any((tmp_path / "cache2").rglob("*.trec"))


def test_esci_loader_gives_each_query_its_locale_and_source(tmp_path, small_synthetic):
    import pandas as pd

    from stagebench.data.esci import EsciOptions, load_esci

    ex = pd.read_parquet(small_synthetic / "shopping_queries_dataset_examples.parquet")
    pr = pd.read_parquet(small_synthetic / "shopping_queries_dataset_products.parquet")
    es = ex["query_id"] % 3 == 0  # a third of the queries become Spanish ones, over Spanish copies of the products
    ex.loc[es, "product_locale"] = "es"
    ex.to_parquet(tmp_path / "shopping_queries_dataset_examples.parquet", index=False)
    pd.concat([pr, pr.assign(product_locale="es")]).to_parquet(tmp_path / "shopping_queries_dataset_products.parquet", index=False)
    (tmp_path / "shopping_queries_dataset_sources.csv").write_text(
        "query_id,source\n" + "".join(f"{q},{'behavioral' if q % 2 else 'other'}\n" for q in sorted(set(ex["query_id"]))))
    ds = load_esci(EsciOptions(path=str(tmp_path), locale=None, split="test"))
    want = {str(q): "es" if q % 3 == 0 else "us" for q in set(ex[ex["split"] == "test"]["query_id"])}
    assert ds.query_groups["locale"] == want
    assert ds.query_groups["source"] == {q: "behavioral" if int(q) % 2 else "other" for q in want}
    sub = ds.subset(["3", "4"])
    assert sub.query_groups == {"locale": {"3": "es", "4": "us"}, "source": {"3": "behavioral", "4": "other"}}
