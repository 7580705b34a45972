"""The judging round on a finished run: the pool of unjudged pairs and the judge's grades of them
(:mod:`.pool`), the views of the holes and the paired bounds (:mod:`.views`), the plan of which pairs
to judge next (:mod:`.planning`), the worksheet raters fill and that comes back (:mod:`.worksheet`),
the incompleteness experiment (:mod:`.incompleteness`), the judge's agreement with the humans
(:mod:`.agreement`); the commands on a folder are :mod:`stagebench.api.judging`. The grader itself is
:mod:`stagebench.judge`.
"""
