"""Ray failures named for what they are (issue 71): the words Ray puts in a failure's chain, as
captured from a real cluster (``ray stop`` mid-stage, a driver with a token against a cluster
without one, a worker that died), read into one line each (a parser test: the exceptions are
scripted with Ray's own types and messages)."""

from __future__ import annotations

import pytest

ray_exceptions = pytest.importorskip("ray.exceptions", reason="Ray is not installed")

from stagebench.runtime.cluster.failures import failure_kind, ray_failure


def chained(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer from exc
    except BaseException as got:
        return got


def test_a_lost_cluster_an_auth_mismatch_and_a_dead_worker_are_each_one_line_saying_it_resumes():
    lost = chained(RuntimeError("Ray Data failed"), ray_exceptions.RayActorError(
        error_msg="The actor is dead because its owner has died. Owner Id: 01 Owner's node has crashed."))  # fmt: skip
    auth = chained(RuntimeError("map_batches failed"), ConnectionError(
        "RPC error: InvalidAuthToken: the request's authentication token does not match the cluster's"))  # fmt: skip
    # an actor `ray stop` cancelled reads as one the cluster never let start: lost (4 of 8 stops, issue 71)
    cancelled = chained(RuntimeError("map_batches failed"), ray_exceptions.RayActorError(
        error_msg="The actor never ran - it was cancelled before it started running."))  # fmt: skip
    died = chained(RuntimeError("map_batches failed"), ray_exceptions.RayActorError(
        error_msg="The actor died unexpectedly before finishing this task: exit code 1."))  # fmt: skip
    for exc, what in ((lost, "the Ray cluster at 127.0.0.1:6379 (from $RAY_ADDRESS), or a node of it, was lost during the stage"),
                      (cancelled, "the Ray cluster at 127.0.0.1:6379 (from $RAY_ADDRESS), or a node of it, was lost"),
                      (auth, "the driver's and the cluster's authentication do not match"),
                      (died, "a Ray worker failed: ")):  # fmt: skip
        line = ray_failure("stage cross_encoder: rerank", exc, "the Ray cluster at 127.0.0.1:6379 (from $RAY_ADDRESS)",
                           failure_kind(exc))  # fmt: skip
        assert line.startswith("stage cross_encoder: rerank: ") and what in line, line
        assert "the same command resumes" in line and "\n" not in line
    # a cluster that no longer accepts a connection is lost, whatever the words: after `ray stop` an actor
    # cancelled before it started reads as an authentication mismatch (1 of 5 stops, issue 71)
    for exc in (lost, auth, died):
        line = ray_failure("stage x", exc, "the Ray cluster at 127.0.0.1:6379 (from $RAY_ADDRESS)",
                           failure_kind(exc, answers=False))  # fmt: skip
        assert "the Ray cluster at 127.0.0.1:6379 (from $RAY_ADDRESS), or a node of it, was lost during the stage" in line
