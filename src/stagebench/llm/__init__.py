"""LLMs as rerankers and judges: chat backends (an OpenAI-compatible server, or a transformers model in
process) behind one request type, the listwise windows and their prompt, the label-reading families
(pointwise, pairwise, setwise) and their scheme kernels. Used by the LLM reranking stage
(:mod:`stagebench.stages.llm_rerank`) and the judge (:mod:`stagebench.judge`) alike."""
