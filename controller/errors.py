"""Errors the controller reports to its users.

Each carries the gRPC status code the admin API answers with, so a bad
request and an unreachable switch are told apart by the CLI's caller too.
"""

from __future__ import annotations

import grpc


class ControllerError(Exception):
    """A request that was refused; nothing was changed."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class InvalidRequest(ControllerError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(ControllerError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ControllerError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(ControllerError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class SwitchUnavailable(ControllerError):
    """The switch could not be reached, or refused to make us primary."""

    code = grpc.StatusCode.UNAVAILABLE


class SwitchError(ControllerError):
    """The switch answered a request with an error."""

    code = grpc.StatusCode.INTERNAL


class InUse(ControllerError):
    """Another controller holds the state file or serves the admin address."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class StateError(ControllerError):
    """The state file cannot be opened, read or written."""

    code = grpc.StatusCode.INTERNAL
