"""The grader: an LLM judge (or the generator's rules) for the documents nobody judged - its grade scale
and prompt (:mod:`.scale`), asking it (:mod:`.ask`), the rules (:mod:`.rules`), and grading a run or a
finished folder (:mod:`.grading`). What the grades are used for - the judging round, its views, plans,
worksheets and agreement - is :mod:`stagebench.judgments`."""
