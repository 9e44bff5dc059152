"""What ``Worker.allreduce`` raises when a call can not complete.

Both name the job and the call, so a training loop can log one line that
says which job stopped and why, and both leave the worker out of step with
its job: its peers do not go on to the next call without it.
"""

from __future__ import annotations


class AllreduceError(RuntimeError):
    """An allreduce call that will never return a sum."""

    def __init__(self, message: str, job: int, call: int) -> None:
        super().__init__(message)
        self.job, self.call = job, call


class CallRejected(AllreduceError):
    """A PS refused the call before anything was sent: the job's workers
    disagree on it (``reason`` names what, ``peer`` the worker that differs,
    None when it is the PS's own job table; ``shard`` is the refusing PS's)."""

    def __init__(
        self, message: str, job: int, call: int, reason: str, peer: int | None, shard: int
    ) -> None:
        super().__init__(message, job, call)
        self.reason, self.peer, self.shard = reason, peer, shard


class AllreduceTimeout(AllreduceError, TimeoutError):
    """No complete sum before the call's timeout.  ``missing`` lists the
    workers whose contributions the PS reported missing, or that stopped
    without a word: silent, or never heard from (None: unknown); ``left``
    those the PS reported gone with a BYE (a peer that gave up or exited)."""

    def __init__(
        self,
        message: str,
        job: int,
        call: int,
        missing: list[int] | None,
        timeout: float,
        left: list[int] | None = None,
    ) -> None:
        super().__init__(message, job, call)
        self.missing, self.timeout = missing, timeout
        self.left = [] if left is None else left
