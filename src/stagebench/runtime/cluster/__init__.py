"""The Ray wing: everything that knows Ray, kept apart from the engine interface
(:mod:`stagebench.runtime.engine`), which imports none of it.

* :mod:`.workers` - the Ray engine (actor pools over a stage's units) and :func:`~.workers.make_engine`;
* :mod:`.session` - connecting to a cluster for a run, Ray's output put aside into its log;
* :mod:`.auth` - token authentication, named before anything connects;
* :mod:`.failures` - what a failure under a stage is, in one line;
* :mod:`.supervisor` - the watched child a run on Ray runs in, and its parent.

The ``ray`` library itself is imported only when a run's engine is ``ray``, by the functions that use it.
"""
