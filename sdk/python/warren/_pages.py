"""Pages of the API's lists (docs/API.md, "Lists").

Every list answers one page: at most ``limit`` items and, while more may
follow, a ``next_page_token`` to pass back as ``page_token``. The SDK's
list functions follow every page for the caller; their ``*_page``
companions answer one :class:`Page`, and their ``iter_*`` companions yield
items page by page, holding one page at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generic, Iterator, List, Mapping, Optional, Sequence, TypeVar, Union

from ._transport import IDEMPOTENT, Transport

T = TypeVar("T")

#: The largest page of most lists, and of a directory listing.
MAX_LIST_LIMIT = 1000
MAX_FILE_LIST_LIMIT = 10000

States = Union[str, Sequence[str], None]


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list.

    Attributes:
        items: the page's items, in the list's order.
        next_page_token: pass it as ``page_token`` for the next page; empty
            on the last page. It names the last item answered, not a
            position, so pages stay right while items come and go.
    """

    items: List[T] = field(default_factory=list)
    next_page_token: str = ""


def page_query(
    query: Optional[Mapping[str, Any]], state: States, limit: Optional[int], page_token: Optional[str]
) -> Dict[str, Any]:
    """The query of a page request: query plus the paging parameters.
    state is one state or several (sent comma-separated)."""
    q: Dict[str, Any] = dict(query or {})
    if state:
        states = [state] if isinstance(state, str) else list(state)
        for s in states:
            if not isinstance(s, str):
                raise TypeError(f"states must be strings, not {type(s).__name__}: {s!r}")
        q["state"] = ",".join(states)
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive integer, not {limit!r}")
        q["limit"] = limit
    if page_token:
        q["page_token"] = page_token
    return q


def fetch_page(
    transport: Transport,
    path: str,
    key: str,
    build: Callable[[Any], T],
    *,
    query: Optional[Mapping[str, Any]] = None,
    state: States = None,
    limit: Optional[int] = None,
    page_token: Optional[str] = None,
) -> Page[T]:
    """GET one page of the list at path, whose items are the answer's key,
    each made by build."""
    doc = transport.request("GET", path, query=page_query(query, state, limit, page_token), retry=IDEMPOTENT).json()
    return Page([build(d) for d in doc.get(key) or []], str(doc.get("next_page_token") or ""))


def iterate(fetch: Callable[[Optional[str]], Page[T]], page_token: Optional[str] = None) -> Iterator[T]:
    """Yield the items of every page from page_token on; fetch(token) gets
    one page."""
    token = page_token
    while True:
        page = fetch(token)
        yield from page.items
        if not page.next_page_token:
            return
        token = page.next_page_token
