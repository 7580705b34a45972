"""An LLM judge for the documents nobody judged: its grade scale and prompt (:mod:`.scale`), asking it
(:mod:`.ask`); its agreement with the human labels is :mod:`stagebench.results.agreement`."""
