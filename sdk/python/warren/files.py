"""Files of a sandbox: :class:`Files`, reached as ``sandbox.files``."""

from __future__ import annotations

from typing import IO, TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Union

from ._body import Data, request_body
from ._pages import MAX_FILE_LIST_LIMIT, Page, fetch_page, iterate
from ._transport import IDEMPOTENT, NEVER, REFUSED
from .errors import NotFoundError
from .models import FileInfo

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

__all__ = ["Files"]

Mode = Union[int, str, None]


def _mode(mode: Mode) -> Optional[str]:
    """The octal text of permission bits given as an int (0o644) or as
    octal text ("644", "0644")."""
    if mode is None:
        return None
    if isinstance(mode, str):
        mode = int(mode, 8)
    if not 0 <= mode <= 0o7777:
        raise ValueError(f"mode {mode:#o}: want permission bits such as 0o644")
    return format(mode, "04o")


class Files:
    """The filesystem of one sandbox.

    Paths are absolute, or relative to the user's home (root's home,
    ``/root``, by default). A path that climbs above ``/`` (``/../etc``) is
    refused with :class:`~warren.BadRequestError`, never silently cleaned.
    Reads are retried on a broken connection; writes are sent once.
    """

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def __repr__(self) -> str:
        return f"<Files of {self._sb.id}>"

    def _path(self, *elems: str) -> str:
        return self._sb._path("files", *elems)

    def read(self, path: str, *, user: Optional[str] = None) -> bytes:
        """The whole content of a file.

        Raises:
            NotFoundError: no such file.
            BadRequestError: the path is invalid (e.g. climbs above ``/``).
        """
        t = self._sb._transport
        return t.request("GET", self._path(), query={"path": path, "user": user}, retry=IDEMPOTENT).data

    def read_text(self, path: str, *, encoding: str = "utf-8", errors: str = "strict", user: Optional[str] = None) -> str:
        """The content of a file decoded as text (UTF-8 by default)."""
        return self.read(path, user=user).decode(encoding, errors)

    def read_into(self, path: str, fileobj: IO[bytes], *, user: Optional[str] = None) -> int:
        """Copy a file into a writable binary file object as it arrives,
        without holding it whole in memory; returns the number of bytes."""
        t = self._sb._transport
        stream = t.stream(
            "GET", self._path(), query={"path": path, "user": user}, retry=IDEMPOTENT,
            timeout="default", accept="application/octet-stream",
        )
        n = 0
        try:
            while True:
                chunk = stream.read(1 << 20)
                if not chunk:
                    return n
                fileobj.write(chunk)
                n += len(chunk)
        finally:
            stream.close()

    def write(self, path: str, data: Data, *, mode: Mode = None, user: Optional[str] = None) -> FileInfo:
        """Write a file, replacing it at once (the new content appears whole
        or not at all), creating missing parent directories.

        Args:
            path: where to write.
            data: bytes, text (written as UTF-8), a file object (binary or
                text; read in 64 KiB chunks and streamed, so any size works),
                or an iterable of chunks.
            mode: permission bits, e.g. ``0o755`` or ``"755"``; default 0644.
            user: the owner (default root).

        Returns:
            The written file's FileInfo.

        Never retried (the body is a stream).
        """
        t = self._sb._transport
        answer = t.request(
            "PUT", self._path(), query={"path": path, "mode": _mode(mode), "user": user},
            body=request_body(data), retry=NEVER,
        )
        return FileInfo.from_json(answer.json())

    def list(self, path: str = ".", *, depth: int = 1) -> List[FileInfo]:
        """The entries of a directory, depth first, each directory's sorted
        by name; depth > 1 also lists subdirectories that deep. Follows
        every page (:meth:`iter` holds one at a time)."""
        return list(self.iter(path, depth=depth))

    def iter(self, path: str = ".", *, depth: int = 1) -> Iterator[FileInfo]:
        """:meth:`list`, yielded a page at a time."""
        return iterate(lambda token: self.list_page(path, depth=depth, limit=MAX_FILE_LIST_LIMIT, page_token=token))

    def list_page(
        self, path: str = ".", *, depth: int = 1, limit: Optional[int] = None, page_token: Optional[str] = None
    ) -> Page[FileInfo]:
        """One page of :meth:`list`: at most limit entries (default 1000, at
        most 10000); a token continues the same path and depth only."""
        return fetch_page(
            self._sb._transport, self._path("list"), "entries", FileInfo.from_json,
            query={"path": path, "depth": depth}, limit=limit, page_token=page_token,
        )

    def stat(self, path: str) -> FileInfo:
        """Describe a file or directory.

        Raises:
            NotFoundError: it does not exist.
        """
        return FileInfo.from_json(self._sb._get(self._path("stat"), {"path": path}))

    def exists(self, path: str) -> bool:
        """Report whether path exists."""
        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def mkdir(self, path: str, *, mode: Mode = None, user: Optional[str] = None) -> FileInfo:
        """Make a directory and any missing parents (mode default 0755);
        an existing directory is fine."""
        body: Dict[str, Any] = {"path": path}
        if mode is not None:
            body["mode"] = int(_mode(mode) or "0", 8)
        if user:
            body["user"] = user
        answer = self._sb._transport.request("POST", self._path("mkdir"), json_body=body, retry=REFUSED)
        return FileInfo.from_json(answer.json())

    def move(self, source: str, destination: str) -> FileInfo:
        """Rename or move a file or directory; returns the moved entry."""
        answer = self._sb._transport.request(
            "POST", self._path("move"), json_body={"source": source, "destination": destination}, retry=REFUSED
        )
        return FileInfo.from_json(answer.json())

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file, or a directory with everything in it when
        recursive.

        Raises:
            NotFoundError: it does not exist.
            ConflictError: a non-empty directory without recursive.
        """
        q: Dict[str, Any] = {"path": path}
        if recursive:
            q["recursive"] = True
        self._sb._transport.request("DELETE", self._path(), query=q, retry=REFUSED)
