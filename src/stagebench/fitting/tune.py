"""``stagebench tune``: a config's stage params searched on queries held apart from the test queries.

For each stage the ``tune:`` section names, in pipeline order, every trial (a grid, or a seeded
random draw under the ``trials`` budget; trial 0 is always the config's own params) is run through
the stage cache (:func:`stagebench.execute.run_stage`) and scored on the tuning queries:

* ``queries: split``: the queries of another split of the dataset (``train``); the test split is
  loaded only after every choice is made, to score default against tuned;
* ``queries: kfold``: the test queries cut into k seeded folds; fold f's params are chosen on the
  other folds' queries and its test figure is read on fold f only, so the tuned column is a
  cross-validated estimate in which no query helped choose the params it is scored with.

A decision reads only its own queries' judgments (``tests/fitting/test_tune.py`` changes the judgments
of the queries a decision must not see, and checks the decision does not move). Later stages are
tuned with earlier tuned stages at their chosen params. Because every trial run is a cache entry,
a killed tuning resumes where it stopped, and a BM25 grid over k1 and b analyses the corpus once
(the cached index is the analysed corpus, :class:`stagebench.stages.bm25.TermCounts`).

The tuning folder (``<output>-tuning`` unless ``tune.output`` says otherwise) holds ``tuning.json``
(everything, and the sha256 of the other files), ``trials.tsv`` (the tuning curve), ``tuned.yaml``
(the config with the tuned params, runnable) and ``table.md`` (default against tuned on the test
queries, with a paired randomization test per measure, Holm-corrected over the measures).
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import time
import typing
from collections import Counter
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import yaml

from stagebench.cache import Cache, cache_root
from stagebench.config import Config, StageConfig, TuneConfig, trial_stage, tune_space
from stagebench.data import LOADERS, Dataset
from stagebench.errors import ConfigError, DataError
from stagebench.execute import context, make_stage, run_in, stage_key
from stagebench.files import atomic_write, check_apart, check_destination, check_writable, inventory
from stagebench.files import STAGING_MARK, remove_staging, staging, swap_in
from stagebench.metrics import Evaluation, evaluate, scored_query_ids
from stagebench.metrics.names import Measure, parse_measure
from stagebench.params import Range
from stagebench.pipeline import read_dataset
from stagebench.record import TUNED, TUNING_RECORD, TunedBaseline
from stagebench.results import baselines
from stagebench.runs import Run
from stagebench.runtime.cluster.session import ray_session
from stagebench.stats import paired_test, holm
from stagebench.runtime.progress import progress

log = logging.getLogger("stagebench")

RECORD = TUNING_RECORD


@dataclass(frozen=True)
class Decision:
    """One choice of params: made on ``decide_on`` (query ids whose judgments it may read), its
    test figure read on ``report_on`` (kfold: the fold left out; split: None, every test query)."""

    name: str
    decide_on: tuple[str, ...]
    report_on: tuple[str, ...] | None


@dataclass
class Held:
    """The queries tuning decisions read: their dataset (split: the tuning split's; kfold: the test
    dataset) and the decisions made on them."""

    mode: str
    dataset: Dataset
    decisions: list[Decision]
    why: str

    def describe(self) -> dict:
        out: dict = {"mode": self.mode, "why": self.why, "decisions": {}}
        for d in self.decisions:
            out["decisions"][d.name] = {"decide_on": len(d.decide_on),
                                        "report_on": None if d.report_on is None else list(d.report_on)}  # fmt: skip
        return out


def held_queries(config: Config, tune: TuneConfig, test: Dataset) -> Held:
    """The tuning queries: the ``split`` (never the test split) where the loader has it and it has
    judged queries, else (``auto``) or by request (``kfold``) seeded folds of the test queries."""
    opts = config.dataset.options
    has_split = hasattr(opts, "split")
    why = ""
    if tune.queries in ("split", "auto"):
        if not has_split:
            why = f"the {config.dataset.loader} loader has no split option"
        elif getattr(opts, "split") == tune.split:
            raise ConfigError(f"{config.path}: tune.split: {tune.split!r} is the split the table reports (dataset.split); "
                              "tuning on the test queries is refused (use queries: kfold to cross-validate over them)")  # fmt: skip
        else:
            kwargs: dict[str, Any] = {"split": tune.split}
            if hasattr(opts, "max_queries"):
                kwargs["max_queries"] = None
            try:
                ds = LOADERS[config.dataset.loader].load(replace(opts, **kwargs))
            except DataError as exc:
                ds, why = None, f"split {tune.split!r} cannot be loaded ({exc})"
            if ds is not None:
                overlap = sorted(set(ds.queries) & set(test.queries))
                if overlap:  # a query id in both splits: its judgments must not tune
                    log.warning("tune: %d query id(s) of split %r are test queries too (e.g. %s); left out of tuning",
                                len(overlap), tune.split, overlap[0])  # fmt: skip
                    ds = ds.subset(set(ds.queries) - set(overlap))
                ids = scored_query_ids(ds.qrels)
                if not ids:
                    why = f"split {tune.split!r} has no query with a positive judgment"
                else:
                    if tune.max_queries is not None and len(ids) > tune.max_queries:
                        ids = sorted(random.Random(tune.seed).sample(ids, tune.max_queries))
                        ds = ds.subset(ids)
                    return Held("split", ds, [Decision(tune.split, tuple(ids), None)],
                                f"the {len(ids)} judged queries of split {tune.split!r}")  # fmt: skip
        if tune.queries == "split":
            raise ConfigError(f"{config.path}: tune.queries: split: {why}")
    ids = scored_query_ids(test.qrels)
    if len(ids) < tune.folds:
        raise ConfigError(f"{config.path}: tune.folds: {tune.folds} folds need at least as many judged test queries "
                          f"(there are {len(ids)})")  # fmt: skip
    order = list(ids)
    random.Random(tune.seed).shuffle(order)
    folds = [sorted(order[i :: tune.folds]) for i in range(tune.folds)]
    decisions = [Decision(f"fold {i + 1}", tuple(q for j, f in enumerate(folds) if j != i for q in f), tuple(fold))
                 for i, fold in enumerate(folds)]  # fmt: skip
    reason = f"{tune.folds}-fold cross-validation over the {len(ids)} judged test queries"
    return Held("kfold", test, decisions, f"{reason} ({why})" if why else reason)


def combinations(space: dict[str, list[Any]], search: str, trials: int, seed: int, base: Any) -> list[dict[str, Any]]:
    """The trials of one stage: ``{}`` (the config's own params) first, then the grid in declared
    order or ``trials`` seeded draws from it, less any that equals the config's params."""
    keys = list(space)
    sizes = [len(space[k]) for k in keys]
    total = 1
    for n in sizes:
        total *= n
    if search == "grid":
        picks = list(itertools.product(*(space[k] for k in keys)))
    else:
        picks = []
        for index in sorted(random.Random(seed).sample(range(total), min(trials, total))):
            combo = []
            for n, k in zip(reversed(sizes), reversed(keys)):
                combo.append(space[k][index % n])
                index //= n
            picks.append(tuple(reversed(combo)))
    out: list[dict[str, Any]] = [{}]
    for combo in picks:
        a = dict(zip(keys, combo))
        if all(getattr(base, k, object()) == v for k, v in a.items()):
            continue  # the config's own params: trial 0
        out.append(a)
    return out


@dataclass
class Ran:
    """A stage run through :class:`Chain`: the run, its digest, its cache key, computed or cached."""

    run: Run
    digest: str
    key: str
    status: str


class Chain:
    """A config's stages run through the stage cache on one dataset; the runs of stages other trials
    build on are kept in memory (a trial's own run is scored and let go)."""

    def __init__(self, ds: Dataset, cache: Cache) -> None:
        self.ds = ds
        self.cache = cache
        self.kept: dict[str, tuple[Run, str]] = {}  # stage key -> (run, digest)

    def run(self, scs: dict[str, StageConfig], name: str, keep: bool = True) -> Ran:
        """Stage ``name`` of ``scs`` (with the inputs it needs) through the cache."""
        sc = scs[name]
        ins = [self.run(scs, i) for i in sc.inputs]
        stage = make_stage(sc)
        key, _ = stage_key(sc, stage, self.ds, [r.digest for r in ins])
        if key in self.kept:
            run, digest = self.kept[key]
            return Ran(run, digest, key, "cached")
        stage.preflight()
        ran = run_in(sc, stage, context(sc, self.ds, self.cache), [r.run for r in ins], [r.digest for r in ins])
        if keep:
            self.kept[key] = (ran.run, ran.record.run_digest)
        return Ran(ran.run, ran.record.run_digest, key, ran.record.status)


@dataclass
class TuneResult:
    output: Path
    record: dict
    text: str
    counts: dict[str, int] = field(default_factory=dict)


def _params(sc: StageConfig) -> dict:
    return asdict(sc.params) if is_dataclass(sc.params) else dict(sc.params or {})


def _per_query(ev: Evaluation, name: str, ids: list[str]) -> dict[str, float]:
    values = ev.per_query[name]
    return {q: values.get(q, 0.0) for q in ids}


def run_tune(config: Config, output: str | Path | None = None, cache_dir: str | None = None) -> TuneResult:
    """Run ``config``'s ``tune:`` section (see the module doc)."""
    t = config.tune
    if t is None:
        raise ConfigError(f"{config.path}: tune: the config has no tune: section (docs/baselines.md)")
    out = Path(output or t.output or f"{config.output}-tuning")
    cache = Cache(cache_root(cache_dir, config.cache_dir))
    check_destination(out, TUNED)
    check_apart(out, "tuning folder", cache.root, "cache")
    check_writable(cache.root, "cache")
    with ray_session(config.ray_engine(), f"{config.path}: engine"):
        return _tune(config, t, out, cache)


def _tune(config: Config, t: TuneConfig, out: Path, cache: Cache) -> TuneResult:
    t0 = time.perf_counter()
    measure = parse_measure(t.measure)
    test = read_dataset(config.dataset)
    held = held_queries(config, t, test)
    log.info("tune: trials chosen by %s on %s", measure.name, held.why)
    own = {sc.name: (i, sc) for i, sc in enumerate(config.stages)}
    stages_raw = config.raw["stages"]
    tuning_chain = Chain(held.dataset, cache)
    # decision -> stage -> the assignment chosen for it (the config's params: {})
    chosen: dict[str, dict[str, dict]] = {d.name: {} for d in held.decisions}
    trials_out: list[dict] = []
    choices_out: dict[str, dict] = {}
    counts: Counter = Counter()
    scs_of: dict[str, dict[str, StageConfig]] = {}  # json of a decision's choices -> its stage configs

    def stage_configs(choice: dict[str, dict]) -> dict[str, StageConfig]:
        sig = json.dumps(choice, sort_keys=True, default=str)
        if sig not in scs_of:
            scs = {sc.name: sc for sc in config.stages}
            for name, a in choice.items():
                i, sc = own[name]
                if a:
                    scs[name] = trial_stage(stages_raw, i, a, sc.engine, config.training, f"tune ({name})")
            scs_of[sig] = scs
        return scs_of[sig]

    for name in t.stages:
        i, base = own[name]
        space = tune_space(t, base)
        trials = combinations(space, t.search, t.trials, t.seed, base.params)
        cap = _trial_cap(base, measure)
        # decisions that share their earlier choices share their trial runs
        groups: dict[str, list[Decision]] = {}
        for d in held.decisions:
            groups.setdefault(json.dumps(chosen[d.name], sort_keys=True, default=str), []).append(d)
        values: dict[str, list[dict[str, float]]] = {}  # group -> trial -> qid -> value
        with progress(len(trials) * len(groups), f"tune {name}", "trial") as bar:
            for sig, ds_ in groups.items():
                upstream = dict(chosen[ds_[0].name])
                values[sig] = []
                for n, a in enumerate(trials):
                    scs = dict(stage_configs(upstream))
                    full = {**a, **cap}
                    scs[name] = trial_stage(stages_raw, i, full, base.engine, config.training, f"tune ({name})") \
                        if full else base  # fmt: skip
                    started = time.perf_counter()
                    got = tuning_chain.run(scs, name, keep=False)
                    run, status = got.run, got.status
                    ids = scored_query_ids(held.dataset.qrels)
                    ev = evaluate(held.dataset.qrels, run, [measure], relevance_threshold=config.evaluation.relevance_threshold,
                                  gain=config.evaluation.gain)  # fmt: skip
                    pq = _per_query(ev, measure.name, ids)
                    values[sig].append(pq)
                    counts[status] += 1
                    means = {d.name: _mean(pq, d.decide_on) for d in ds_}
                    trials_out.append({"stage": name, "trial": n, "params": a, "upstream": upstream, "status": status,
                                       "seconds": round(time.perf_counter() - started, 3), "means": means})  # fmt: skip
                    log.info("tune %s: trial %d/%d %s: %s %s (%s)", name, n + 1, len(trials), _show(a) or "(config's params)",
                             measure.name, " ".join(f"{v:.4f}" for v in means.values()), status)  # fmt: skip
                    bar.update(1)
                for d in ds_:
                    best = best_trial([_mean(values[sig][n], d.decide_on) for n in range(len(trials))])
                    chosen[d.name][name] = trials[best]
                    choices_out.setdefault(name, {})[d.name] = {
                        "trial": best, "params": trials[best], "mean": round(_mean(values[sig][best], d.decide_on), 6),
                        "config_mean": round(_mean(values[sig][0], d.decide_on), 6)}  # fmt: skip
        log.info("tune %s: chosen %s", name, "; ".join(f"{d}: {_show(c['params']) or 'the config params'}"
                                                     for d, c in choices_out[name].items()))  # fmt: skip

    # only now the test split's judgments are read (kfold: each fold's own queries, under the params chosen without them)
    tuned_params = {name: _consensus([chosen[d.name][name] for d in held.decisions], trials_out, name)
                    for name in t.stages}  # fmt: skip
    edges = {name: grid_edges(tune_space(t, own[name][1]), tuned_params[name], own[name][1].params) for name in t.stages}
    for name, at in edges.items():
        for key, value in at.items():
            log.warning("tune %s: %s=%s is at the edge of the values tried; the best may lie beyond it (widen "
                        "tune.space.%s.%s)", name, key, value, name, key)  # fmt: skip
    test_chain = Chain(test, cache) if held.mode == "split" else tuning_chain
    test_ids = scored_query_ids(test.qrels)
    ev_kw = dict(relevance_threshold=config.evaluation.relevance_threshold, gain=config.evaluation.gain)
    table: dict[str, dict] = {}
    default_scs = {sc.name: sc for sc in config.stages}
    default_keys: dict[str, str] = {}
    for name in t.stages:
        default_ran = test_chain.run(default_scs, name)
        default_ev = evaluate(test.qrels, default_ran.run, config.measures, **ev_kw)
        tuned_pq: dict[str, dict[str, float]] = {m.name: {} for m in config.measures}
        for d in held.decisions:
            ev = evaluate(test.qrels, test_chain.run(stage_configs(chosen[d.name]), name).run, config.measures, **ev_kw)
            for m in config.measures:
                pq = _per_query(ev, m.name, test_ids)
                keep = test_ids if d.report_on is None else d.report_on
                tuned_pq[m.name].update({q: pq[q] for q in keep})
        rows = {}
        for m in config.measures:
            a = [tuned_pq[m.name][q] for q in test_ids]
            b = list(_per_query(default_ev, m.name, test_ids).values())
            c = paired_test("tuned", "default", m.name, a, b, config.evaluation.permutations, config.evaluation.seed)
            rows[m.name] = {"default": round(c.mean_b, 6), "tuned": round(c.mean_a, 6), "p": round(c.p_rand, 6),
                            "wins": c.wins, "losses": c.losses}  # fmt: skip
        for m_name, p in zip(rows, holm([r["p"] for r in rows.values()])):
            rows[m_name]["p_holm"] = round(p, 6)
            rows[m_name]["significant"] = p < config.evaluation.alpha
        table[name] = {"queries": len(test_ids), "measures": rows}
        default_keys[name] = default_ran.key

    seconds = round(time.perf_counter() - t0, 3)
    record = {
        "config": config.path, "name": config.name, "measure": measure.name, "stages": list(t.stages),
        "search": {"kind": t.search, "trials": t.trials, "seed": t.seed},
        "queries": held.describe(), "gain": str(config.evaluation.gain), "relevance_threshold": config.evaluation.relevance_threshold,
        "unjudged": "irrelevant (trec_eval's default)", "trials": trials_out, "chosen": choices_out,
        "tuned_params": tuned_params, "at_grid_edge": edges, "test": table, "alpha": config.evaluation.alpha,
        "counts": {"trials": sum(counts.values()), "computed": counts["computed"], "cached": counts["cached"]},
        "seconds": seconds,
    }  # fmt: skip
    text = tune_text(record)
    partial = staging(out)
    try:
        atomic_write(partial / "trials.tsv", trials_tsv(trials_out, measure.name))
        atomic_write(partial / "tuned.yaml", tuned_yaml(config, tuned_params, record))
        atomic_write(partial / "table.md", text)
        atomic_write(partial / RECORD, json.dumps({**record, "files": inventory(partial, leave_out={STAGING_MARK})},
                                                  indent=1, default=str) + "\n")  # fmt: skip
        check_destination(out, TUNED)
        swap_in(partial, out)
    except BaseException:
        remove_staging(partial)
        raise
    for name in t.stages:  # where a later `stagebench run` of a config with this stage finds it (its weak-baseline note)
        found = TunedBaseline(stage=name, params=tuned_params[name], chosen_on=held.why, measures=table[name]["measures"],
                              folder=str(out))  # fmt: skip
        baselines.store(cache, default_keys[name], config.evaluation.gain, config.evaluation.relevance_threshold, found)
    log.info("tune: %d trials, %d computed, %d from the cache [%.1fs]; written to %s", sum(counts.values()),
             counts["computed"], counts["cached"], seconds, out)  # fmt: skip
    return TuneResult(out, record, text, dict(counts))


def _trial_cap(sc: StageConfig, measure: Measure) -> dict[str, int]:
    """A first stage's trials keep only the depth the measure reads (``top_k`` cut to its cutoff):
    the measure is the same, and a grid of 80 BM25 trials over 2,000 queries stores 80 x 10 lines
    a query instead of 80 x 1,000. Stages with inputs keep their params (fusion reads every input)."""
    top_k = getattr(sc.params, "top_k", None)
    if sc.inputs or measure.cutoff is None or not isinstance(top_k, int) or top_k <= measure.cutoff:
        return {}
    return {"top_k": measure.cutoff}


def grid_edges(space: dict[str, list[Any]], chosen: dict[str, Any], params: Any) -> dict[str, Any]:
    """The chosen numeric params that sit at the low or high end of three or more values tried,
    unless that end is as far as the param may go (b = 1: its declared range ends there)."""
    hints = typing.get_type_hints(type(params), include_extras=True) if is_dataclass(params) else {}
    out = {}
    for key, value in chosen.items():
        nums = [v for v in space.get(key, []) if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(nums) < 3 or not isinstance(value, (int, float)) or value not in (min(nums), max(nums)):
            continue
        rng = next((e for e in typing.get_args(hints.get(key)) if isinstance(e, Range)), None)
        if rng is not None and value in (rng.ge, rng.le):
            continue
        out[key] = value
    return out


def _mean(pq: dict[str, float], ids: tuple[str, ...] | list[str]) -> float:
    return sum(pq.get(q, 0.0) for q in ids) / len(ids) if ids else 0.0


def best_trial(means: Sequence[float]) -> int:
    """The trial with the highest mean (to 12 decimals); a tie goes to the earliest, so the config's own
    params (trial 0) win any tie: tuning never moves a stage for nothing."""
    return max(range(len(means)), key=lambda n: (round(means[n], 12), -n))


def _show(a: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in a.items())


def _consensus(choices: list[dict], trials: list[dict], name: str) -> dict:
    """The params the tuned config gets: split: the one choice; kfold: the one most folds chose
    (a tie: the earliest trial)."""
    keyed = Counter(json.dumps(c, sort_keys=True, default=str) for c in choices)
    top = max(keyed.values())
    order = [json.dumps(tr["params"], sort_keys=True, default=str) for tr in trials if tr["stage"] == name]
    best = min((k for k, n in keyed.items() if n == top), key=order.index)
    return json.loads(best)


def trials_tsv(trials: list[dict], measure: str) -> str:
    decisions = sorted({d for tr in trials for d in tr["means"]}, key=lambda d: (len(d), d))
    lines = ["\t".join(["stage", "trial", "params", "upstream", "status", "seconds", *(f"{measure} ({d})" for d in decisions)])]
    for tr in trials:
        lines.append("\t".join([tr["stage"], str(tr["trial"]), json.dumps(tr["params"], sort_keys=True),
                                json.dumps(tr["upstream"], sort_keys=True), tr["status"], f"{tr['seconds']:.3f}",
                                *(f"{tr['means'][d]:.6f}" if d in tr["means"] else "" for d in decisions)]))  # fmt: skip
    return "\n".join(lines) + "\n"


def tuned_yaml(config: Config, tuned: dict[str, dict], record: dict) -> str:
    """The config with the tuned params over its own, without ``tune:``, writing to ``<output>-tuned``."""
    raw = json.loads(json.dumps(config.raw, default=str))
    raw.pop("tune", None)
    raw["name"] = f"{config.name}-tuned"
    raw["output"] = f"{config.output}-tuned"
    for s in raw["stages"]:
        if s.get("name") in tuned and tuned[s["name"]]:
            s["params"] = {**(s.get("params") or {}), **tuned[s["name"]]}
            where = (raw.get("dataset") or {}).get("path") or (raw.get("dataset") or {}).get("id")
            if where:
                s["tuned_on"] = where  # a run of this file on another dataset says the params are not tuned there
    q = record["queries"]
    head = [f"# {config.path} with the params `stagebench tune` chose ({record['measure']}; {q['why']})."]
    if q["mode"] == "kfold":
        head.append("# Each fold's params were chosen on the other folds; these are the params most folds chose. The")
        head.append("# cross-validated test figures are in table.md: a run of this file on the same test queries is")
        head.append("# optimistic, as its params saw those queries' judgments in the other folds.")
    return "\n".join(head) + "\n" + yaml.safe_dump(raw, sort_keys=False, allow_unicode=True)


def tune_text(record: dict) -> str:
    """Default against tuned on the test queries, one block per tuned stage (Markdown)."""
    q = record["queries"]
    lines = [f"# Tuning of {record['name']}: {', '.join(record['stages'])}", "",
             f"Chosen by {record['measure']} on {q['why']}; {record['counts']['trials']} trials. "
             f"Gain {record['gain']}, relevance threshold {record['relevance_threshold']}, unjudged documents count as "
             f"{record['unjudged']}."]  # fmt: skip
    for name in record["stages"]:
        ch = record["chosen"][name]
        lines += ["", f"## {name}", "", "| decision | params chosen | " + f"{record['measure']} (tuning queries) | config's params |",
                  "|---|---|---:|---:|"]  # fmt: skip
        for d, c in ch.items():
            lines.append(f"| {d} | {_show(c['params']) or 'the config params'} | {c['mean']:.4f} | {c['config_mean']:.4f} |")
        row = record["test"][name]
        tuned_desc = _show(record["tuned_params"][name]) or "the config params"
        kind = "cross-validated: each fold under the params chosen on the other folds" if q["mode"] == "kfold" else \
            f"params: {tuned_desc}"  # fmt: skip
        lines += ["", f"Test queries ({row['queries']}), default against tuned ({kind}); p: paired randomization test, "
                  f"Holm over the measures; * significant at {record['alpha']}:", "",
                  "| measure | default | tuned | change | p (Holm) | wins / losses |", "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for m, r in row["measures"].items():
            star = " *" if r["significant"] else ""
            lines.append(f"| {m} | {r['default']:.4f} | {r['tuned']:.4f}{star} | {r['tuned'] - r['default']:+.4f} | "
                         f"{r['p_holm']:.4g} | {r['wins']} / {r['losses']} |")  # fmt: skip
        if q["mode"] == "kfold":
            lines += ["", f"tuned.yaml gets the params most folds chose: {tuned_desc}."]
        if record["at_grid_edge"].get(name):
            lines += ["", f"At the edge of the values tried (the best may lie beyond): {_show(record['at_grid_edge'][name])}."]
    return "\n".join(lines) + "\n"
