"""warren: the Python SDK of the warren agent sandbox cloud.

Create a Linux sandbox, run untrusted code in it, move files in and out,
delete it::

    from warren import Sandbox

    with Sandbox.create() as sb:
        result = sb.exec(["python3", "-c", "print(3 + 3)"])
        print(result.stdout)          # 6

Fork it: ``Sandbox.restore(sb.snapshot(), count=8)`` starts 8 sandboxes with
its disk.

The server and key come from $WARREN_URL and $WARREN_API_KEY (or a
:class:`Client` built with arguments); see the package README.
Standard library only, Python 3.9 or later.
"""

from __future__ import annotations

from .client import (
    DEFAULT_DATA_DIR,
    DEFAULT_URL,
    ENV_API_KEY,
    ENV_DATA_DIR,
    ENV_URL,
    Client,
    __version__,
    default_client,
    set_default_client,
)
from .errors import (
    BadRequestError,
    CommandError,
    CommandTimeout,
    ConfigurationError,
    ConflictError,
    ForbiddenError,
    InternalError,
    MethodNotAllowedError,
    NetworkError,
    NotFoundError,
    PayloadTooLargeError,
    RequestTimeout,
    SandboxGoneError,
    StreamBrokenError,
    BuildFailedError,
    UnauthorizedError,
    UnavailableError,
    WarrenError,
)
from .events import EVENTS_LOST, Event
from .files import Files
from .models import (
    Checkpoint,
    ExecEvent,
    ExecResult,
    FileInfo,
    GCResult,
    NetworkPolicy,
    NetworkRule,
    NetworkStatus,
    NodeInfo,
    Paused,
    Pool,
    PoolNode,
    Preview,
    ProcessInfo,
    Restored,
    Volume,
    RuntimeInfo,
    SandboxInfo,
    SandboxMetrics,
    Secret,
    Template,
)
from .sandbox import Command, ExecStream, NetworkArg, OutputCallback, Process, Sandbox
from ._pages import Page
from .snapshots import Snapshot, delete_snapshot, gc, get_snapshot, iter_snapshots, list_snapshots, list_snapshots_page

__all__ = [
    "__version__",
    "Client",
    "default_client",
    "set_default_client",
    "DEFAULT_URL",
    "DEFAULT_DATA_DIR",
    "ENV_URL",
    "ENV_API_KEY",
    "ENV_DATA_DIR",
    "Sandbox",
    "Process",
    "ExecStream",
    "Files",
    "Snapshot",
    "Event",
    "EVENTS_LOST",
    "get_snapshot",
    "list_snapshots",
    "iter_snapshots",
    "list_snapshots_page",
    "Page",
    "delete_snapshot",
    "gc",
    "Command",
    "OutputCallback",
    "NetworkArg",
    "SandboxInfo",
    "SandboxMetrics",
    "Checkpoint",
    "Paused",
    "Restored",
    "Volume",
    "ExecResult",
    "ExecEvent",
    "ProcessInfo",
    "FileInfo",
    "Template",
    "RuntimeInfo",
    "NodeInfo",
    "GCResult",
    "Pool",
    "PoolNode",
    "Preview",
    "NetworkPolicy",
    "NetworkRule",
    "NetworkStatus",
    "Secret",
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
    "BuildFailedError",
]
