"""Pointwise reranking: candidates scored pair by pair (a cross-encoder or a plug-in), the head/tail
merge every reranker shares, and the plug-in protocol (the stages are :mod:`stagebench.stages`; LLM
reranking is :mod:`stagebench.llm`)."""
