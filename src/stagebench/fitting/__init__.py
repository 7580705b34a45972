"""Learning from queries held apart from the test queries: ``train`` fine-tunes a cross-encoder on
the train split (``stagebench train-reranker``; the kernel is ``finetune``), ``tune`` searches stage params on another split
or by k-fold cross-validation (``stagebench tune``)."""
