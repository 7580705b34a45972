"""Token authentication between a driver and a Ray cluster: a missing token named before anything
connects, a refused one named in one line (never blamed on a lost cluster), and the check that the
cluster's workers answer this driver (a mismatch the other way round: the head accepts the driver,
the workers do not)."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from stagebench.errors import StagebenchError
from stagebench.optional import need
from stagebench.runtime.cluster.failures import AUTH_WORDS, chain_of

log = logging.getLogger("stagebench")


@contextmanager
def _native_stderr_aside() -> Iterator[list[str]]:
    """Point file descriptor 2 at a temporary file for the duration (what native code writes
    there, not Python's ``sys.stderr``), and hand back what was written, once restored."""
    sys_stderr_fd = 2
    saved = os.dup(sys_stderr_fd)
    said: list[str] = []
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), sys_stderr_fd)
        try:
            yield said
        finally:
            os.dup2(saved, sys_stderr_fd)
            os.close(saved)
            f.seek(0)
            said.append(f.read().decode("utf-8", "replace"))


#: where Ray 2.5x+ reads the token a process sends when ``RAY_AUTH_MODE=token`` (first found wins)
TOKEN_SOURCES = ("$RAY_AUTH_TOKEN", "$RAY_AUTH_TOKEN_PATH", "~/.ray/auth_token")


def _token_source() -> str | None:
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "$RAY_AUTH_TOKEN"
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return f"$RAY_AUTH_TOKEN_PATH ({os.environ['RAY_AUTH_TOKEN_PATH']})"
    home = os.path.expanduser("~/.ray/auth_token")
    return "~/.ray/auth_token" if os.path.isfile(home) else None


def check_token_given(where: str) -> None:
    """``RAY_AUTH_MODE=token`` with no token anywhere Ray reads one (:data:`TOKEN_SOURCES`): one line, before
    anything connects (``ray.init`` would fail inside Ray's core, which may end the process before it can say
    why, and the line would blame a lost cluster)."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token" and _token_source() is None:
        raise StagebenchError(f"{where}: RAY_AUTH_MODE=token, but no token is set here: put the cluster's token in "
                              f"{' or '.join(TOKEN_SOURCES)} (`ray get-auth-token` on the head shows it), or unset "
                              "RAY_AUTH_MODE for a cluster without authentication (docs/scale.md)")  # fmt: skip


def authentication_message(address: str, where: str) -> str:
    """The line for a cluster that refused this process for want of the right token. Ray (2.5x+)
    turns token authentication on for a cluster that ``ray start`` starts where a token exists,
    and a driver sends its token only with ``RAY_AUTH_MODE=token`` (or ``address: auto``, for
    a cluster on this machine): stagebench never sends a token the user did not point it at."""
    mode = os.environ.get("RAY_AUTH_MODE", "").lower()
    token = _token_source()
    if mode != "token":
        return (f"{where}: the Ray cluster at {address} requires token authentication, and this process sends no "
                f"token (RAY_AUTH_MODE is {mode or 'unset'}, not token); set RAY_AUTH_MODE=token with the "
                f"cluster's token in {' or '.join(TOKEN_SOURCES)}"
                f"{f' (found: {token})' if token else ' (none is set here)'}; the head's token is shown by "
                "`ray get-auth-token` there (docs/scale.md)")  # fmt: skip
    if token is None:
        return (f"{where}: the Ray cluster at {address} requires token authentication and RAY_AUTH_MODE=token, but no "
                f"token is set here: put the cluster's token in {' or '.join(TOKEN_SOURCES)} (`ray get-auth-token` "
                "on the head shows it; docs/scale.md)")  # fmt: skip
    return (f"{where}: the Ray cluster at {address} rejected this process's authentication token (from {token}); "
            "use the head's token (`ray get-auth-token` there; docs/scale.md)")


def is_authentication_failure(exc: BaseException) -> bool:
    """Whether a failed connection was refused for its token (Ray's ``AuthenticationError``, or its
    ``InvalidAuthToken`` status inside the connection error ``ray.init`` raises after retrying)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if type(cur).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(cur):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def check_authentication(address: str, where: str) -> None:
    """For a ``host:port`` (GCS) address: ask the cluster for its id the way ``ray.init`` does
    (Ray's own client, with this process's authentication settings), so a cluster that wants a
    token is named as such at once instead of after ``ray.init``'s 20 s of retries. Ray
    versions without that client, and the Ray Client (``ray://``), are left to ``ray.init``."""
    if address.startswith("ray://"):
        return
    client = getattr(getattr(need("ray", "engine: ray"), "_raylet", None), "GcsClient", None)
    if client is None:  # Ray's GCS client is private: a version without it is left to ray.init
        return
    with _native_stderr_aside() as aside:  # Ray's C++ client logs each refused attempt on fd 2
        try:
            client(address=address).cluster_id
        except Exception as exc:
            if is_authentication_failure(exc):
                raise StagebenchError(authentication_message(address, where)) from exc
            log.debug("engine ray: GCS pre-check of %s: %s: %s (left to ray.init)", address, type(exc).__name__, exc)
    if aside[0].strip():
        log.debug("engine ray: GCS pre-check of %s said: %s", address, aside[0].strip())


#: seconds the first task on a cluster (a new worker process) may take to answer
WORKER_PROBE_TIMEOUT_S = 60.0


class _Answer:
    def answer(self) -> int:
        return 1


def check_workers_answer(address: str, where: str) -> None:
    """A driver that sends a token to a cluster without authentication is let in (the GCS does
    not check), but the cluster's workers, which send none, cannot call back into the driver:
    every actor dies before it starts (the cause, ``InvalidAuthToken``, is only in the
    raylet's log). One actor, before any stage, names that mismatch in one line (about a second:
    one worker process started)."""
    ray = need("ray", "engine: ray")
    try:
        # an actor, as a stage's workers are (a task runs whatever the mismatch; an actor never starts)
        actor = ray.remote(num_cpus=0)(_Answer).remote()
        ray.get(actor.answer.remote(), timeout=WORKER_PROBE_TIMEOUT_S)
        ray.kill(actor)
    except Exception as exc:
        # an actor that does nothing dies before it answers: the cluster's side cannot call this process
        # back ("cancelled before it started running", or "died unexpectedly", as the race goes)
        died = any(isinstance(e, need("ray", "engine: ray").exceptions.RayActorError) for e in chain_of(exc))
        if died or any(k in f"{type(exc).__name__} {exc}".lower() for k in AUTH_WORDS) or is_authentication_failure(exc):
            raise StagebenchError(f"{where}: this process sends a token (RAY_AUTH_MODE=token), but the Ray cluster at "
                                  f"{address} does not use token authentication, so its workers cannot answer this "
                                  "process (every actor dies before it starts); unset RAY_AUTH_MODE here, or "
                                  "start the cluster with RAY_AUTH_MODE=token (docs/scale.md)") from exc  # fmt: skip
        first = str(exc).strip().splitlines()
        raise StagebenchError(f"{where}: the Ray cluster at {address} accepted this process, but its first task "
                              f"failed ({type(exc).__name__}: {first[0][:200] if first else ''})") from exc  # fmt: skip


__all__ = ["TOKEN_SOURCES", "WORKER_PROBE_TIMEOUT_S", "authentication_message", "check_authentication", "check_token_given", "check_workers_answer", "is_authentication_failure"]
