"""trec_eval's measure names, read as stagebench's: ``ndcg_cut_10`` (or ``ndcg_cut.10``, trec_eval's
``-m`` spelling with one value) is ``nDCG@10``, ``recip_rank`` is ``RR``, ``rbp`` is
``RBP(graded=true,p=0.9)``. Each native family declares its trec_eval names
(:mod:`stagebench.metrics.families`); trec_eval names of measures ir_measures computes (``bpref``,
``set_P``, ``iprec_at_recall_0.10``) are read by ir_measures (:mod:`stagebench.metrics.delegate`).
The trec_eval 10 measures that neither can name are listed here with the reason, so that a refusal
says what the measure is and what is nearest (``tests/parity/test_trec_eval_suite.py`` counts them).
"""

from __future__ import annotations

import re

from stagebench.metrics.families import FAMILIES

#: trec_eval's names, lower-cased -> (family, whether the name takes ``_k``, the parameters it implies)
TREC_EVAL = {name.lower(): (f.name, cut, f.trec_eval_params) for f in FAMILIES
             for name, cut in zip(f.trec_eval, (True, False)) if name}  # fmt: skip
_TREC_RE = re.compile(r"^(?P<base>[A-Za-z]+(?:_[A-Za-z]+)*?)(?:[_.](?P<k>\d+))?$")

#: trec_eval 10 measures (``-m all_trec``) that neither stagebench nor ir_measures names, with why and
#: what is nearest
UNNAMED = {
    "runid": "the run's tag, not a measure",
    "relstring": "the relevance string of the top k, not a number",
    "gm_map": "AP averaged geometrically over the queries; stagebench averages every measure arithmetically "
              "(per query it is AP)",
    "gm_bpref": "bpref averaged geometrically over the queries (per query it is Bpref, which ir_measures computes)",
    "rprec_mult": "precision at a multiple of R; the nearest is Rprec (the multiple 1)",
    "utility": "a set utility with chosen weights; the nearest are Hits and NumRet",
    "11pt_avg": "the mean of the 11 interpolated precisions; each is IPrec@x (ir_measures)",
    "bing": "Sakai's binary G measure",
    "g": "Sakai's G measure",
    "ndcg_rel": "nDCG averaged over the ranks of the relevant documents",
    "rndcg": "nDCG at rank R",
    "relative_p": "P@k over min(k, R); the nearest is P@k",
    "num_nonrel_judged_ret": "the number of judged non-relevant documents retrieved; the nearest are NumRet, Hits and "
                             "Judged@k",
    "rbp_resid": "the RBP mass left on unjudged documents; RBP's bounds (eval --view bounds) give its range",
    "unj": "the share of the top k without a judgment: (min(k, NumRet) - k * Judged@k) / k",
}  # fmt: skip


def native_name(text: str) -> str | None:
    """``text`` written as stagebench writes it, when it is trec_eval's name of one of its measures
    (``ndcg_cut_10`` -> ``nDCG@10``, ``P.5`` -> ``P@5``, ``rbp`` -> ``RBP(graded=true,p=0.9)``), else None."""
    m = _TREC_RE.fullmatch(text.strip())
    found = TREC_EVAL.get(m["base"].lower()) if m else None
    if found is None or found[1] != (m["k"] is not None):
        return None
    family, _, params = found
    return family + (f"({params})" if params else "") + (f"@{int(m['k'])}" if m["k"] is not None else "")


def unnamed(text: str) -> str | None:
    """Why ``text``, a trec_eval 10 measure, has no name here (``gm_map``, ``relative_P_5``), else None."""
    m = _TREC_RE.fullmatch(text.strip()) or re.fullmatch(r"(?P<base>[A-Za-z0-9_]+?)(?:[_.][0-9.,=-]+)?", text.strip())
    return UNNAMED.get(m["base"].lower()) if m else None
