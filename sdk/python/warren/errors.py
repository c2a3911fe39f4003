"""Exceptions of the warren SDK.

Every error the SDK raises is a :class:`WarrenError`. An error answer of the
API (``{"error": {"code": ..., "message": ...}}``) becomes the subclass of its
code; :func:`error_from_response` does the mapping. Each error carries the
API's ``code``, the HTTP ``status`` (0 when no HTTP answer was involved), the
``message`` and, when the server sent one, the ``request_id`` to look up in
the server's log.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Optional, Type

__all__ = [
    "WarrenError",
    "ConfigurationError",
    "NetworkError",
    "BadRequestError",
    "UnauthorizedError",
    "ForbiddenError",
    "NotFoundError",
    "MethodNotAllowedError",
    "ConflictError",
    "SandboxGoneError",
    "PayloadTooLargeError",
    "RequestTimeout",
    "CommandTimeout",
    "CommandError",
    "UnavailableError",
    "InternalError",
    "StreamBrokenError",
    "error_from_response",
]


class WarrenError(Exception):
    """Base class of every error the SDK raises.

    Attributes:
        message: what went wrong, as the server (or the SDK) said it.
        code: the API's error code, e.g. ``"not_found"``; the SDK's own errors
            use codes of their own (``"network"``, ``"configuration"``, ...).
        status: the HTTP status of the answer, or 0 when there was none.
        request_id: the server's ``X-Request-Id`` of the failed call, if any.
    """

    #: The code an instance gets when none is given.
    default_code = "error"

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        status: int = 0,
        request_id: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message: str = message
        self.code: str = code if code is not None else self.default_code
        self.status: int = status
        self.request_id: Optional[str] = request_id

    def __str__(self) -> str:
        if self.status:
            return f"{self.message} ({self.code}, HTTP {self.status})"
        return self.message


class ConfigurationError(WarrenError):
    """The client cannot be configured: a bad URL, or no API key."""

    default_code = "configuration"


class NetworkError(WarrenError):
    """The server could not be reached, or the connection broke before an
    answer came back. For a call that is not safe to repeat (exec, create,
    stdin, upload) the outcome on the server is then unknown."""

    default_code = "network"


class BadRequestError(WarrenError):
    """The server refused the request as invalid (400 ``bad_request``), e.g.
    a path that climbs above ``/`` or an unknown signal name."""

    default_code = "bad_request"


class UnauthorizedError(WarrenError):
    """The API key is missing or invalid (401 ``unauthorized``)."""

    default_code = "unauthorized"


class ForbiddenError(WarrenError):
    """The key is valid but may not do this (403 ``forbidden``), e.g. a
    template build without the admin key."""

    default_code = "forbidden"


class NotFoundError(WarrenError):
    """No such sandbox, process, file or template (404 ``not_found``). A
    sandbox of another tenant is reported the same way."""

    default_code = "not_found"


class MethodNotAllowedError(WarrenError):
    """The route does not serve this HTTP method (405): an SDK/server
    version mismatch."""

    default_code = "method_not_allowed"


class ConflictError(WarrenError):
    """The request conflicts with the current state (409 ``conflict``), e.g.
    removing a non-empty directory without ``recursive``."""

    default_code = "conflict"


class SandboxGoneError(ConflictError):
    """The sandbox is not running any more (deleted, expired or failed): a
    409 ``conflict`` about the sandbox's state."""


class PayloadTooLargeError(WarrenError):
    """The JSON request body is over the server's limit (413), e.g. a large
    ``stdin`` given to :meth:`Sandbox.exec`; stream it with
    :meth:`Process.send_stdin` instead."""

    default_code = "payload_too_large"


class RequestTimeout(WarrenError, TimeoutError):
    """An API call did not complete in time: the server answered 504
    ``timeout``, or the client's socket timeout passed. Also a builtin
    :class:`TimeoutError`."""

    default_code = "timeout"


class CommandTimeout(WarrenError, TimeoutError):
    """A command did not end in time: raised by :meth:`Process.wait` with a
    timeout and by :meth:`ExecResult.check` for a command killed by its own
    timeout. Also a builtin :class:`TimeoutError`."""

    default_code = "timeout"


class CommandError(WarrenError):
    """A command ended with a non-zero exit code; raised only by
    :meth:`ExecResult.check`. ``exit_code`` holds the code."""

    default_code = "command_failed"

    def __init__(
        self,
        message: str,
        *,
        exit_code: int,
        code: Optional[str] = None,
        status: int = 0,
        request_id: Optional[str] = None,
    ) -> None:
        super().__init__(message, code=code, status=status, request_id=request_id)
        self.exit_code: int = exit_code


class UnavailableError(WarrenError):
    """The server cannot serve this now (503 ``unavailable``): no capacity,
    a runtime missing, or a proxy in front of it is down; also nothing
    answering on a sandbox's port behind it (502 ``bad_gateway``)."""

    default_code = "unavailable"


class InternalError(WarrenError):
    """The server failed (500 ``internal``); the detail is only in its log,
    under :attr:`request_id`."""

    default_code = "internal"


class BuildFailedError(WarrenError):
    """A template build failed (422 ``build_failed``): the message names the
    failing step and has its output; ``template`` is the failed version."""

    default_code = "build_failed"

    def __init__(self, message: str, *, template: Any = None, code: Optional[str] = None, status: int = 0,
                 request_id: Optional[str] = None) -> None:
        super().__init__(message, code=code, status=status, request_id=request_id)
        self.template = template


class StreamBrokenError(WarrenError):
    """An event stream (streamed exec, process attach, template build)
    ended before its end event; the command's outcome is unknown."""

    default_code = "stream_broken"


_BY_CODE: Dict[str, Type[WarrenError]] = {
    "bad_request": BadRequestError,
    "unauthorized": UnauthorizedError,
    "forbidden": ForbiddenError,
    "not_found": NotFoundError,
    "method_not_allowed": MethodNotAllowedError,
    "conflict": ConflictError,
    "payload_too_large": PayloadTooLargeError,
    "timeout": RequestTimeout,
    "unavailable": UnavailableError,
    "internal": InternalError,
    "build_failed": BuildFailedError,
    # Nothing answered on a sandbox's port behind the server (exposed ports).
    "bad_gateway": UnavailableError,
}

_CODE_BY_STATUS: Dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    422: "build_failed",
    500: "internal",
    503: "unavailable",
    504: "timeout",
}

# The server words a conflict about the sandbox's own state this way
# ("sandbox sb-x is not running (state stopped)", "sandbox sb-x is stopped").
# A sandbox starting, paused ("sandbox sb-x is paused: resume it first") or
# moving is not gone: it runs again.
_GONE = re.compile(r"^sandbox \S+ is (not running(?! \(state (starting|paused|moving)\))|stopped|failed)\b")


def _sandbox_gone(message: str) -> bool:
    """Report whether a conflict's message says that the sandbox is not
    running."""
    return bool(_GONE.match(message))


def error_from_response(
    status: int, body: bytes, request_id: Optional[str] = None
) -> WarrenError:
    """Build the exception of an error answer.

    A body in warren's error shape gives the code and message; any other body
    (a proxy's page, say) gets the code of its HTTP status, ``unavailable``
    for another 5xx and ``bad_request`` for anything else, with the status as
    the message.
    """
    code = ""
    message = ""
    try:
        doc = json.loads(body.decode("utf-8"))
        err = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(err, dict):
            code = str(err.get("code") or "")
            message = str(err.get("message") or "")
    except (ValueError, UnicodeDecodeError):
        pass
    if not code:
        code = _CODE_BY_STATUS.get(status, "unavailable" if status >= 500 else "bad_request")
    if not message:
        message = f"HTTP {status}"
    cls = _BY_CODE.get(code, WarrenError)
    if cls is ConflictError and _sandbox_gone(message):
        cls = SandboxGoneError
    return cls(message, code=code, status=status, request_id=request_id)
