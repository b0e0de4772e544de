"""A Spark Connect server's failures, named in one line within a bound (docs/design.md §6.1).

pyspark's client retries an unreachable server for about ten minutes (15 retries, backoff up
to a minute) before it says anything: a mistyped host or a stopped server kept a job silent
for minutes. A job's session (:func:`~.session.get_session`) probes the server first
(:func:`probe_connect_server`), bounds the client's retries (:func:`bound_retries`), asks the
server for what the fit needs before any data are read (:func:`check_connect_session`), and
turns a server lost mid-job into :class:`ConnectServerLost` (:func:`lost_server`). The bound:
:func:`connect_timeout`.
"""
from __future__ import annotations

import math
import os
from contextlib import suppress

from ..core.errors import INTERNAL, JobError, SettingsError
from .engine import server_client

#: The environment variable of the bound's seconds (the jobs' --connect-timeout wins over it).
CONNECT_TIMEOUT_ENV = "SODM_CONNECT_TIMEOUT"
#: Seconds a job waits for a Spark Connect server to answer at the start, and keeps retrying
#: one that stopped answering mid-fit: a running server answers the probe in well under a
#: second; the rest is room for a slow network or a server restarting.
DEFAULT_CONNECT_TIMEOUT = 20.0
#: The Spark a Connect server must run: the fit's records over DataFrames need
#: ``DataFrame.localCheckpoint`` through Connect (docs/design.md §6.1), which Spark 4.0 added.
MIN_SERVER_SPARK = (4, 0)
# A method the Spark Connect service does not have: any gRPC answer to it (the service's
# UNIMPLEMENTED, a proxy's UNAUTHENTICATED) shows that a gRPC server listens, without creating
# a session or an error in the server's log.
_PROBE_METHOD = "/spark.connect.SparkConnectService/SodmSparkReachable"


def connect_timeout(seconds: float | None = None) -> float:
    """The bound on waiting for a Spark Connect server: ``seconds`` (a job's
    ``--connect-timeout``) if given, else :data:`CONNECT_TIMEOUT_ENV`, else
    :data:`DEFAULT_CONNECT_TIMEOUT`; a SettingsError unless a positive number."""
    where = "--connect-timeout"
    if seconds is None and os.environ.get(CONNECT_TIMEOUT_ENV):
        where, text = f"${CONNECT_TIMEOUT_ENV}", os.environ[CONNECT_TIMEOUT_ENV]
        try:
            seconds = float(text)
        except ValueError:
            raise SettingsError(f"{where}={text!r} is not a number of seconds; give a positive "
                                "number such as 20.") from None
    if seconds is None:
        return DEFAULT_CONNECT_TIMEOUT
    if not (math.isfinite(seconds) and seconds > 0):
        raise SettingsError(f"{where} must be a positive number of seconds, got {seconds!r}.")
    return float(seconds)


def server_address(url: str) -> str:
    """``host:port`` of a Spark Connect URL (its token and other parameters left out: they
    may be secrets), for messages."""
    from pyspark.sql.connect.client import DefaultChannelBuilder

    try:
        return DefaultChannelBuilder(url).endpoint
    except Exception:  # noqa: BLE001 - pyspark refuses a malformed URL: the text says it
        return url.split(";")[0].split("/;")[0]


def probe_connect_server(url: str, seconds: float) -> None:
    """Refuse, within ``seconds``, a Spark Connect server that does not answer: nothing
    listens at its address, its host is unknown, its TLS fails (at once, gRPC's reason in the
    line) or it accepts the connection and never speaks gRPC (at the bound). One gRPC call on
    a channel built as the session's client builds it (TLS, token); a SettingsError names the
    address and what to do."""
    import grpc
    from pyspark.sql.connect.client import DefaultChannelBuilder

    address = server_address(url)
    try:
        builder = DefaultChannelBuilder(url)
    except Exception as error:  # noqa: BLE001 - pyspark's own check of the URL's form
        raise SettingsError(f"--master {address}: not a Spark Connect URL ({error}); give "
                            "sc://host:port.") from None
    channel = builder.toChannel()
    try:
        channel.unary_unary(_PROBE_METHOD)(b"", timeout=seconds, metadata=builder.metadata())
    except grpc.RpcError as error:
        code = error.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            raise SettingsError(
                f"the Spark Connect server at {address} did not answer within {seconds:g} s "
                "(something accepts connections there but does not speak Spark Connect, or "
                "the network drops them): check the host and port of --master (the server "
                f"listens on 15002 by default), or wait longer (--connect-timeout, "
                f"${CONNECT_TIMEOUT_ENV}).") from None
        if code == grpc.StatusCode.UNAVAILABLE:
            raise SettingsError(
                f"cannot reach the Spark Connect server at {address} ({error.details()}): "
                "check the host and port of --master and that the server is running.") \
                from None
    finally:
        channel.close()


def bounded_policy(seconds: float):
    """pyspark's default retry policy of a Spark Connect client (exponential backoff with
    jitter), cut to the retries whose waits, jitter at its largest, add up to at most
    ``seconds``; a server's own "retry after" is capped at ``seconds`` too."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    policy = DefaultPolicy()
    budget_ms, wait, retries = seconds * 1000.0, float(policy.initial_backoff), 0
    while True:
        step = wait + (policy.jitter if wait >= policy.min_jitter_threshold else 0)
        if budget_ms < step:
            break
        budget_ms, retries = budget_ms - step, retries + 1
        wait = min(float(policy.max_backoff or math.inf), wait * policy.backoff_multiplier)
    policy.max_retries = retries
    if hasattr(policy, "max_server_retry_delay"):  # pyspark 4.1+
        policy.max_server_retry_delay = int(seconds * 1000)
    return policy


def bound_retries(spark, seconds: float) -> None:
    """Let a Spark Connect session's client retry a server that stopped answering for at most
    ``seconds`` (:func:`bounded_policy`), so that a server lost mid-fit ends the fit in
    bounded time. Nothing on a classic session."""
    client = server_client(spark)
    if client is None:
        return
    client.set_retry_policies([bounded_policy(seconds)])
    if hasattr(client, "_max_retry_exception_elapsed_time"):  # reattaching (pyspark 4.3)
        client._max_retry_exception_elapsed_time = seconds


def check_server_version(version: str, address: str) -> None:
    """Refuse a Spark Connect server older than :data:`MIN_SERVER_SPARK` (its ``version``, as
    ``spark.version`` reports it), naming its address, before any data are read."""
    try:
        found = tuple(int(part) for part in version.split("-")[0].split(".")[:2])
    except ValueError:
        return  # a vendor's version text: the fit's first operation says what it lacks
    if found < MIN_SERVER_SPARK:
        needed = ".".join(map(str, MIN_SERVER_SPARK))
        raise SettingsError(
            f"the Spark Connect server at {address} runs Spark {version}; sodm-spark needs "
            f"Spark {needed} or later there (DataFrame.localCheckpoint over Spark Connect, "
            f"which the fit's records use): use a server of Spark {needed}+, or a classic "
            "session (--master spark://..., yarn, local[N]).")


def check_connect_session(spark, address: str | None = None) -> None:
    """What a fit needs of a Spark Connect session, asked of its server before any data are
    read (:func:`check_server_version`; ``address``: the server's, as messages name it,
    by default the client's own endpoint). Nothing on a classic session."""
    client = server_client(spark)
    if client is None:
        return
    if address is None:
        address = getattr(getattr(client, "_builder", None), "endpoint", "its address")
    check_server_version(spark.version, address)


class ConnectServerLost(JobError):
    """The Spark Connect server stopped answering mid-job, and went on not answering for as
    long as the job waits (:func:`connect_timeout`): Spark failing, not a check (exit code of
    ``internal``); a run with ``--checkpoint-dir`` continues with ``--resume``."""

    kind = INTERNAL


def server_lost(error: BaseException) -> bool:
    """Whether ``error`` is a Spark Connect client's giving up on a server that does not answer
    (gRPC UNAVAILABLE in its chain, after the retries)."""
    import grpc

    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, grpc.RpcError) and callable(getattr(link, "code", None)) \
                and link.code() == grpc.StatusCode.UNAVAILABLE:
            return True
        link = link.__cause__ or link.__context__
    return False


def lost_server(spark, url: str, seconds: float | None = None) -> ConnectServerLost:
    """The :class:`ConnectServerLost` of ``spark``, whose server at ``url`` stopped answering
    for as long as its client retried (``seconds``: the job's --connect-timeout); the client
    then gives up on that server at once, so that stopping the session does not wait the
    bound again."""
    with suppress(Exception):
        spark.client.set_retry_policies([])
    return ConnectServerLost(
        f"the Spark Connect server at {server_address(url)} stopped answering and did not come "
        f"back within {connect_timeout(seconds):g} s (--connect-timeout): restart it (or check "
        "the network) and run the job again; a training job with --checkpoint-dir continues "
        "from its last finished level with --resume.")
