"""Pointwise and listwise reranking: the head/tail merge, pointwise scoring, plug-ins, LLM windows and chat backends (the stages are :mod:`stagebench.stages`)."""
