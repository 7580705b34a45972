"""What a Ray failure under a stage is - the cluster or a node lost, an authentication mismatch, a
worker that died - told from the words and types in its exception chain, and the one line each
gets (every one says the same command resumes: every finished stage is in the cache)."""

from __future__ import annotations

import socket
from typing import Literal



from stagebench.errors import StagebenchError
from stagebench.optional import need


class RayFailed(StagebenchError):
    """A stage's work lost to Ray itself (the cluster, a node, authentication, a worker's
    process), as opposed to a stagebench error a unit raised: :func:`ray_session` names the file
    that holds Ray's own messages about it."""


class ClusterLost(RayFailed):
    """The cluster (or a node of it) went away under a stage: a watched run leaves its line to the
    parent (:mod:`stagebench.runtime.supervisor`), which says it the same way whether the driver
    saw the loss or Ray's core ended the driver first."""


def root_cause(exc: BaseException) -> BaseException:
    seen = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, StagebenchError):
            return cur
        cur = getattr(cur, "cause", None) or cur.__cause__
    return exc


#: what Ray says, anywhere in a failure's chain, when the cluster or a node went away under a run
LOST_WORDS = ("owner has died", "node has crashed", "node died", "raylet", "gcs", "connection to the cluster",
         "failed to connect", "cluster was lost", "ray stop", "the driver is disconnected",
         "cancelled before it started running")
#: ... and when the driver's and the cluster's authentication do not match
#: (an actor "cancelled before it started running" is what `ray stop` mid-stage leaves, 4 times in 8; a
#: driver whose token the cluster's workers cannot answer is named before any stage: check_workers_answer)
AUTH_WORDS = ("invalidauthtoken", "authentication", "auth token", "unauthenticated")


def chain_of(exc: BaseException) -> list[BaseException]:
    """An exception and its causes (Ray's ``cause`` attribute, then Python's own links), each once."""
    chain, seen, cur = [], set(), exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        chain.append(cur)
        cur = getattr(cur, "cause", None) or cur.__cause__ or cur.__context__
    return chain


def ray_failure(desc: str, exc: BaseException, cluster: str = "the Ray cluster",
                kind: Literal["lost", "auth", "worker"] = "worker") -> str:  # fmt: skip
    """One line for a Ray failure under a stage, naming what it is (``kind``: :func:`failure_kind`):
    the cluster (or a node) lost, an authentication mismatch between driver and cluster, or a worker
    that died; each says that the same command resumes (every finished stage is in the cache). Ray's
    own tracebacks stay in the exception chain (``--verbose`` prints it), not on the screen."""
    chain = chain_of(exc)
    last = str(chain[-1]).strip().splitlines()
    detail = f"{type(chain[-1]).__name__}: {last[-1][:200] if last else ''}"
    resume = "nothing of this stage was written; the same command resumes (finished stages come from the cache)"
    if kind == "lost":
        return (f"{desc}: {cluster}, or a node of it, was lost during the stage (ray stop, or its head or a node "
                f"died; {detail}); {resume}, once the cluster is back")  # fmt: skip
    if kind == "auth":
        return (f"{desc}: the Ray workers never started: the driver's and the cluster's authentication do not match "
                f"(RAY_AUTH_MODE / the token on both sides; {detail}); {resume}")  # fmt: skip
    return f"{desc}: a Ray worker failed: {detail}; {resume}"


def failure_kind(exc: BaseException, answers: bool = True) -> Literal["lost", "auth", "worker"]:
    """What a Ray failure under a stage is (:func:`ray_failure`), from the words and types in its chain;
    ``answers``: whether the cluster still accepts a connection (:func:`cluster_answers`): one that
    does not is lost, whatever the words."""
    chain = chain_of(exc)
    text = " ".join(f"{type(e).__name__} {e}" for e in chain).lower()
    names = {type(e).__name__ for e in chain}
    if not answers:
        return "lost"
    if any(k in text for k in AUTH_WORDS) or "AuthenticationError" in names:
        return "auth"
    if names & {"NodeDiedError", "LocalRayletDiedError", "OwnerDiedError", "RaySystemError", "RpcError"} or \
            any(k in text for k in LOST_WORDS):  # fmt: skip
        return "lost"
    return "worker"


def cluster_answers() -> bool:
    """Whether the connected cluster's GCS still accepts a TCP connection (within 2 s)."""
    try:
        address = need("ray", "engine: ray").get_runtime_context().gcs_address
        host, _, port = address.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=2.0):
            return True
    except Exception:  # noqa: BLE001 - no address, refused, timed out: it does not answer
        return False


__all__ = ["AUTH_WORDS", "ClusterLost", "LOST_WORDS", "RayFailed", "chain_of", "cluster_answers", "failure_kind", "ray_failure", "root_cause"]
