"""Request bodies that are streamed: bytes, text, file objects, iterables."""

from __future__ import annotations

from typing import IO, Any, Iterable, Iterator, Union

#: What an upload or a stdin write accepts: bytes-like, text (sent as
#: UTF-8), a binary or text file object (read in chunks, never whole), or an
#: iterable of bytes or text chunks.
Data = Union[bytes, bytearray, memoryview, str, IO[bytes], IO[str], Iterable[Union[bytes, str]]]

#: The size of the pieces a file object is read in.
CHUNK = 64 << 10


def _encode(chunk: Any) -> bytes:
    if isinstance(chunk, str):
        return chunk.encode("utf-8")
    if isinstance(chunk, (bytes, bytearray, memoryview)):
        return bytes(chunk)
    raise TypeError(f"chunks must be bytes or str, not {type(chunk).__name__}")


def _read_chunks(f: Any) -> Iterator[bytes]:
    while True:
        chunk = f.read(CHUNK)
        if not chunk:
            return
        yield _encode(chunk)


def _iter_chunks(it: Iterable[Any]) -> Iterator[bytes]:
    for chunk in it:
        b = _encode(chunk)
        if b:
            yield b


def request_body(data: Any) -> Union[bytes, Iterator[bytes]]:
    """The body to send for data: bytes as they are, text as UTF-8, and
    file objects and iterables as a generator of chunks, which the transport
    sends with chunked transfer encoding without holding the whole in
    memory."""
    if data is None:
        return b""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, str):
        return data.encode("utf-8")
    if hasattr(data, "read"):
        return _read_chunks(data)
    if hasattr(data, "__iter__"):
        return _iter_chunks(data)
    raise TypeError(
        f"data must be bytes, str, a file object or an iterable of chunks, not {type(data).__name__}"
    )
