"""``type: pyterrier``: a PyTerrier transformer as a stage.

A user function (or class) builds the transformer; the stage hands it PyTerrier's frames and
reads back its ranking::

    - name: pt_rerank
      type: pyterrier
      target: "my_pipelines:build"        # build(**kwargs) -> pyterrier.Transformer
      inputs: [bm25]                      # with an input: its top_n as ranked documents
      params: {top_n: 100, alpha: 0.5}    # stage keys + the builder's kwargs

With one input the transformer receives, per query, the input's top ``top_n`` documents as
ranked documents (``qid, query, docno, text, score, rank``: ``text`` is the indexed text,
``rank`` from 0 in trec_eval's order) and returns them rescored (``qid, docno, score``); the
candidates past ``top_n`` keep their input order below (the rerankers' merge). Without an
input it receives the queries (``qid, query``) and returns documents of the corpus, of which
the ``top_k`` best are kept. Whatever it returns is checked: the columns, finite scores, no
document twice, every document in the corpus, and a reranker's documents among its
candidates. PyTerrier (``pip install pyterrier``, its core, which needs no Java) is imported
when such a stage runs; the cached run keys on the builder module's source, the version of the
installed package that holds it, PyTerrier's version, and the files of any param that names a file
or folder (an index it opens by path: :func:`stagebench.rerank.plugins.target_identity`). A builder with a ``corpus`` argument
(a retriever that indexes) is handed the corpus as ``{"docno", "text"}`` dicts; when building
fails for a download (Terrier's jars, which ``pt.terrier`` fetches on first use), the error says
so and what to do offline.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import logging
import math
import urllib.error
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stagebench.cache import module_source_hash
from stagebench.errors import ConfigError, DataError, StagebenchError
from stagebench.optional import need
from stagebench.params import PositiveInt, build, param
from stagebench.rerank.merge import merge_head_tail, split_head
from stagebench.rerank.plugins import check_kwargs, import_target, target_identity
from stagebench.runs import Run, ranked
from stagebench.stages.base import Server, Stage, StageContext
from stagebench.runtime.progress import progress

log = logging.getLogger("stagebench")


@dataclass
class PyTerrierParams:
    target: str = param("", "the builder of the transformer, package.module:function (a stage key beside type)")
    top_n: PositiveInt = param(100, "with an input: candidates per query handed to the transformer; the rest keep "
                               "their order below")  # fmt: skip
    top_k: PositiveInt = param(1000, "without an input: documents kept per query")
    queries_per_call: PositiveInt = param(256, "queries per transform call (a transformer ranks each query alone)",
                                          affects=())  # fmt: skip
    kwargs: dict[str, Any] | None = param(None, "the builder's arguments: every other params key")


#: the params the stage takes; every other key goes to the builder
STAGE_KEYS = ("top_n", "top_k", "queries_per_call")
#: a builder that takes this argument is handed the corpus: ``{"docno", "text"}`` dicts, PyTerrier's
#: indexers' input (``text``: the indexed text of the dataset's template)
CORPUS = "corpus"


def _package_version(module: str) -> str:
    """The installed distribution and version that holds ``module`` (a plug-in's package), else ''
    (a module of the working tree, whose source the key already holds)."""
    spec = importlib.util.find_spec(module)
    origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
    if origin is None:
        return ""
    for name in sorted(importlib.metadata.packages_distributions().get(module.split(".")[0], [])):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        # the distribution that installed this very file (a top-level name can be shared: a stray "tests")
        if any(Path(dist.locate_file(f)).resolve() == origin for f in dist.files or () if f.name == origin.name):
            return f"{name}=={dist.version}"
    return ""


def _is_download(exc: BaseException) -> bool:
    """Whether building failed for a download (PyTerrier fetches Terrier's jars from Maven on first use)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, urllib.error.URLError) or type(e).__name__ in ("ConnectionError", "HTTPError", "URLError"):
            return True
        e = e.__cause__ or e.__context__
    return False


class PyTerrierStage(Stage):
    type_name = "pyterrier"
    Params = PyTerrierParams
    min_inputs, max_inputs = 0, 1
    reorders_input = True
    takes_target = True
    packages = ("pyterrier", "pandas")

    @classmethod
    def build_params(cls, raw: Any, where: str, target: str | None) -> PyTerrierParams:
        if not target:
            raise ConfigError(f"{where.rsplit('.', 1)[0]}.target: a pyterrier stage needs target: "
                              "'package.module:function' (a function that returns a pyterrier.Transformer)")  # fmt: skip
        raw = dict(raw or {})
        own = {k: raw.pop(k) for k in list(raw) if k in STAGE_KEYS}
        builder = import_target(target, where.rsplit(".", 1)[0] + ".target", needs_score=False)
        check_kwargs(builder, raw, where, supplied=(CORPUS,))
        base = build(PyTerrierParams, own, where)
        return PyTerrierParams(target=target, top_n=base.top_n, top_k=base.top_k,
                               queries_per_call=base.queries_per_call, kwargs=raw)  # fmt: skip

    def identity(self) -> dict:
        p: PyTerrierParams = self.params
        module = p.target.partition(":")[0]
        builder = import_target(p.target, f"stage {self.name}.target", needs_score=False)
        return {"builder_source": module_source_hash(module), "builder_package": _package_version(module),
                **target_identity(builder, p.kwargs or {})}  # fmt: skip

    def _transformer(self, ctx: StageContext) -> Any:
        p: PyTerrierParams = self.params
        pt = need("pyterrier", f"stage {self.name} (type: pyterrier)")
        builder = import_target(p.target, f"stage {self.name}.target", needs_score=False)
        kwargs = dict(p.kwargs or {})
        if CORPUS in inspect.signature(builder).parameters:  # a retriever indexes the corpus it is handed
            ds = ctx.dataset
            kwargs[CORPUS] = ({"docno": d, "text": ds.doc_text[d]} for d in ds.doc_ids)
        try:
            transformer = builder(**kwargs)
        except Exception as exc:
            if _is_download(exc):
                raise StagebenchError(f"stage {self.name}: {p.target}: PyTerrier could not download what it needs "
                                      f"(Terrier's jars, on first use of pt.terrier; {type(exc).__name__}: "
                                      f"{str(exc)[:160]}): run it once with internet, or copy a machine's ~/.pyterrier "
                                      "here; PyTerrier's pure-Python transformers need neither") from exc  # fmt: skip
            raise StagebenchError(f"stage {self.name}: {p.target} raised when building the transformer: "
                                  f"{type(exc).__name__}: {exc}") from exc  # fmt: skip
        if not isinstance(transformer, pt.Transformer):
            raise StagebenchError(f"stage {self.name}: {p.target} returned a {type(transformer).__name__}, not a "
                                  "pyterrier.Transformer")  # fmt: skip
        log.info("stage %s: PyTerrier %s transformer %s built by %s", self.name, pt.__version__, transformer, p.target)
        return transformer

    def __call__(self, ctx: StageContext, inputs: list[Run]) -> Run:
        p: PyTerrierParams = self.params
        transformer = self._transformer(ctx)
        qids = ctx.dataset.query_ids
        out: Run = {}
        with progress(len(qids), f"stage {self.name}: PyTerrier", "query") as bar:
            for i in range(0, len(qids), p.queries_per_call):
                batch = qids[i:i + p.queries_per_call]
                out.update(self._rank(ctx, transformer, batch, inputs))
                bar.update(len(batch))
        return out

    def server(self, ctx: StageContext) -> Server:
        transformer = self._transformer(ctx)
        return lambda qid, inputs: self._rank(ctx, transformer, [qid], inputs)

    def _rank(self, ctx: StageContext, transformer: Any, qids: list[str], inputs: list[Run]) -> Run:
        """The transformer on ``qids``: its frame built, its answer checked and turned into a run."""
        pd = need("pandas", f"stage {self.name} (type: pyterrier)")
        p: PyTerrierParams = self.params
        ds = ctx.dataset
        if inputs:
            heads, tails = split_head({q: inputs[0].get(q, {}) for q in qids}, p.top_n)
            rows = [{"qid": q, "query": ds.queries[q], "docno": d, "text": ds.doc_text[d], "score": float(s), "rank": r}
                    for q in qids for r, (d, s) in enumerate(ranked({d: inputs[0][q][d] for d in heads[q]}))]  # fmt: skip
            frame = pd.DataFrame(rows, columns=["qid", "query", "docno", "text", "score", "rank"])
        else:
            heads, tails = {}, {}
            frame = pd.DataFrame({"qid": qids, "query": [ds.queries[q] for q in qids]})
        if frame.empty:
            return {q: {} for q in qids}
        try:
            answer = transformer(frame)
        except Exception as exc:
            raise StagebenchError(f"stage {self.name}: the transformer raised: {type(exc).__name__}: {exc}") from exc
        scores = self._read(answer, qids, heads if inputs else None, ds.corpus)
        if not inputs:
            return {q: dict(ranked(scores[q])[: p.top_k]) for q in qids}
        return {q: merge_head_tail(scores[q], tails[q]) for q in qids}

    def _read(self, answer: Any, qids: list[str], heads: dict[str, list[str]] | None,
              corpus: Any) -> dict[str, dict[str, float]]:  # fmt: skip
        """``{qid: {docno: score}}`` from the transformer's frame, every row checked."""
        where = f"stage {self.name}: the transformer's answer"
        missing = [c for c in ("qid", "docno", "score") if not hasattr(answer, "columns") or c not in answer.columns]
        if missing:
            got = list(answer.columns) if hasattr(answer, "columns") else type(answer).__name__
            raise DataError(f"{where} lacks the column(s) {missing} (it has {got}); a transformer returns a frame "
                            "with qid, docno and score")  # fmt: skip
        scores: dict[str, dict[str, float]] = {q: {} for q in qids}
        head_sets = {q: set(h) for q, h in heads.items()} if heads is not None else None
        for q, d, s in zip(answer["qid"].astype(str), answer["docno"].astype(str), answer["score"]):
            if q not in scores:
                raise DataError(f"{where}: query {q!r} was not asked")
            try:
                s = float(s)
            except (TypeError, ValueError):
                raise DataError(f"{where}: query {q!r} document {d!r} has score {s!r}, not a number") from None
            if not math.isfinite(s):
                raise DataError(f"{where}: query {q!r} document {d!r} has score {s}, not finite")
            if d in scores[q]:
                raise DataError(f"{where}: query {q!r} has document {d!r} twice")
            if head_sets is not None and d not in head_sets[q]:
                raise DataError(f"{where}: query {q!r} has document {d!r}, which is not among the {len(head_sets[q])} "
                                "candidates it was given (a reranker reorders its candidates)")  # fmt: skip
            if head_sets is None and d not in corpus:
                raise DataError(f"{where}: query {q!r} has document {d!r}, which is not in the corpus")
            scores[q][d] = s
        if head_sets is not None:
            for q, h in head_sets.items():
                lost = h - scores[q].keys()
                if lost:
                    raise DataError(f"{where}: query {q!r} lost {len(lost)} of its candidates (e.g. {min(lost)!r}); a "
                                    "reranker returns every candidate it was given")  # fmt: skip
        return scores
