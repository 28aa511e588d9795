"""Mirror's HTTP on aiohttp: a session that survives servers closing idle connections, and an httpx transport on it.

:class:`KeepAliveSession` is an :class:`aiohttp.ClientSession` with the keep-alive defences below.
The model client (:mod:`mirror.cognition.openai_client`) talks to it directly: a model call is
the hot path of every thinking step, and httpx's layers above the transport cost it more CPU than
aiohttp's own work. :class:`AiohttpTransport` puts the same session under
:class:`httpx.AsyncClient` for the benches' and tools' clients, where httpx's API is worth its
cost (httpx's default transport, httpcore with anyio and h11, costs ~3 ms of CPU per request on
these 2-core machines; aiohttp's ~0.5 ms). It gives httpx back a response with the raw body
(httpx still decodes ``Content-Encoding``). A request marked with the extension
:data:`STREAM_EXTENSION` (a streamed chat answer, read as it arrives) gets a response whose body
is read from aiohttp piece by piece instead; closing it releases the connection.

Under httpx, aiohttp's failures become httpx's own exception types, so callers handle one family:

====================================  ================================
aiohttp                               httpx
====================================  ================================
ConnectionTimeoutError                ConnectTimeout
SocketTimeoutError, other timeouts    ReadTimeout
ClientConnectorError (refused, DNS)   ConnectError
ServerDisconnectedError               RemoteProtocolError
ClientResponseError (bad HTTP)        RemoteProtocolError
ClientPayloadError                    ReadError
ClientOSError and other ClientError   NetworkError / TransportError
InvalidURL, non-HTTP URL              UnsupportedProtocol
====================================  ================================

Idle connections and servers that close them. uvicorn (under vLLM, llama-cpp-python's server and
Mirror's simulator) and most HTTP servers close a connection left idle for 5 s. A client that keeps one longer (aiohttp's own default is 15 s) sooner or later sends a
request on a connection at the very moment the server closes it, and the request dies with
"Server disconnected" although the server never read it. Two defences, in :class:`KeepAliveSession`
so every client on it has both:

- the pool keeps an idle connection at most :data:`IDLE_KEEPALIVE_S` (4 s, under the common 5 s),
  so a connection the server is about to close is not picked;
- a request that failed on a *reused* connection before its response's status line came back
  (the peer closed or reset it) is sent once more. That is safe whatever the method: a server
  closing an idle connection never read the request (RFC 9112 section 9.3.1 lets a client retry
  when it can tell the request was not applied). ``reused_retries`` counts them. A failure on a
  new connection, or once the response has begun, is the caller's, as before.

The first alone leaves the race open while the client's event loop is busy (a loaded machine):
the server's close sits unread in the socket, so the pool still sees the connection as open.
"""

from __future__ import annotations

import asyncio
import ssl
import weakref
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import Any

import aiohttp
import httpx
from yarl import URL

_MAPPED: tuple[tuple[type[BaseException], type[httpx.TransportError]], ...] = (
    # Most specific first: the timeouts are also ServerConnectionErrors (and TimeoutErrors).
    (aiohttp.ConnectionTimeoutError, httpx.ConnectTimeout),
    (aiohttp.ServerTimeoutError, httpx.ReadTimeout),
    (asyncio.TimeoutError, httpx.ReadTimeout),
    (aiohttp.InvalidURL, httpx.UnsupportedProtocol),
    (aiohttp.ClientConnectorError, httpx.ConnectError),
    (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError),
    (aiohttp.ClientResponseError, httpx.RemoteProtocolError),
    (aiohttp.ClientPayloadError, httpx.ReadError),
    (aiohttp.ClientOSError, httpx.NetworkError),
    (aiohttp.ClientError, httpx.TransportError),
)


IDLE_KEEPALIVE_S = 4.0
"""The longest a pooled connection waits for its next request: under uvicorn's (and most servers') 5 s."""

STREAM_EXTENSION = "mirror.stream"
"""``httpx`` request extension: true asks for the body as it arrives, not read whole first."""


class _AiohttpStream(httpx.AsyncByteStream):
    """An aiohttp response's body, piece by piece; failures as httpx's; :meth:`aclose` releases it."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for piece in self._response.content.iter_any():
                yield piece
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _as_httpx(exc, self._request) from exc

    async def aclose(self) -> None:
        self._response.release()


def _as_httpx(exc: BaseException, request: httpx.Request) -> httpx.TransportError:
    for source, target in _MAPPED:
        if isinstance(exc, source):
            return target(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, request=request)
    raise TypeError(f"not an aiohttp failure: {exc!r}")


def pool_limits(max_connections: int | None = None) -> httpx.Limits:
    """httpx limits for a client of Mirror: ``max_connections`` (None: no cap), idle at most :data:`IDLE_KEEPALIVE_S`.

    For httpx's own transport too: httpcore keeps idle connections 5 s by default, exactly as
    long as the servers do.
    """
    return httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections,
                        keepalive_expiry=IDLE_KEEPALIVE_S)


# The peer closed or reset the connection before the response's status line: on a reused
# connection, a server that closed it idle. ClientConnectorError (a ClientOSError) never comes
# from a reused connection, and is excluded anyway: a refused connect is not this race.
_DIED_UNANSWERED = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)


class _Attempt:
    """One request's connection, as the pool gave it: one that served before, or new."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


_ATTEMPT: ContextVar[_Attempt | None] = ContextVar("mirror_http_attempt", default=None)
"""The request this task is sending, for :class:`_PoolConnector` to mark."""


class _PoolConnector(aiohttp.TCPConnector):
    """aiohttp's TCP connector, telling the request being sent whether its connection served before.

    aiohttp's tracing says so too (``on_connection_reuseconn``), but a session with any trace
    config builds a record and awaits a signal at every step of every request and at every piece
    of a streamed body: a few per cent of a model call's CPU. A connection that served before is
    one this connector has handed out before (aiohttp retrying an idempotent request itself, maybe
    on a new connection, asks again: the last one counts).
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._served: weakref.WeakSet[Any] = weakref.WeakSet()

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        connection = await super().connect(req, traces, timeout)
        attempt = _ATTEMPT.get()
        protocol = connection.protocol
        if attempt is not None and protocol is not None:
            attempt.reused = protocol in self._served
            self._served.add(protocol)
        return connection


def _client_timeout(extensions: dict[str, Any]) -> aiohttp.ClientTimeout:
    """httpx's per-request timeouts (connect, read, pool) in aiohttp's terms; no total limit."""
    timeout = extensions.get("timeout") or {}
    return aiohttp.ClientTimeout(
        total=None, connect=timeout.get("pool"), sock_connect=timeout.get("connect"), sock_read=timeout.get("read")
    )


class KeepAliveSession:
    """An :class:`aiohttp.ClientSession` with both keep-alive defences of the module's docstring.

    ``max_connections`` caps the pool (0 or None: no cap); ``idle_keepalive_s`` bounds how long a
    connection waits idle, never above :data:`IDLE_KEEPALIVE_S`; ``ssl_context`` is used for https
    URLs; ``timeout`` and ``headers`` are every request's defaults. ``raw`` leaves the body as it
    came (no decompression: a caller above decodes it) and sends no headers of aiohttp's own. The
    session is made on first use, on the loop that uses it. ``reused_retries`` counts requests
    sent again after a reused connection died unanswered.
    """

    def __init__(self, *, max_connections: int | None = None, idle_keepalive_s: float | None = IDLE_KEEPALIVE_S,
                 ssl_context: ssl.SSLContext | None = None, timeout: aiohttp.ClientTimeout | None = None,
                 headers: dict[str, str] | None = None, raw: bool = False) -> None:
        self._max_connections = max_connections or 0
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._timeout = timeout
        self._headers = dict(headers or {})
        self._raw = raw
        self._session: aiohttp.ClientSession | None = None
        self.idle_keepalive_s = IDLE_KEEPALIVE_S if idle_keepalive_s is None else min(idle_keepalive_s, IDLE_KEEPALIVE_S)
        self.reused_retries = 0

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = _PoolConnector(limit=self._max_connections, keepalive_timeout=self.idle_keepalive_s,
                                       ssl=self._ssl)
            options: dict[str, Any] = {"auto_decompress": False, "skip_auto_headers": ("User-Agent", "Accept-Encoding", "Accept")} if self._raw else {}
            if self._timeout is not None:
                options["timeout"] = self._timeout
            self._session = aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                                                  headers=self._headers, **options)
        return self._session

    async def request(self, method: str, url: URL, *, headers: Any = None, data: bytes | None = None,
                      timeout: aiohttp.ClientTimeout | None = None) -> aiohttp.ClientResponse:
        """The response, its body unread (the caller releases it); sent once more if a reused
        connection died unanswered. aiohttp's own failures are raised as they are."""
        session = self.session()
        attempt = _Attempt()
        try:
            return await self._send(session, method, url, headers, data, timeout, attempt)
        except _DIED_UNANSWERED as exc:
            if not attempt.reused or isinstance(exc, aiohttp.ClientConnectorError):
                raise
        self.reused_retries += 1
        return await self._send(session, method, url, headers, data, timeout, _Attempt())

    @staticmethod
    async def _send(session: aiohttp.ClientSession, method: str, url: URL, headers: Any, data: bytes | None,
                    timeout: aiohttp.ClientTimeout | None, attempt: _Attempt) -> aiohttp.ClientResponse:
        options: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        sending = _ATTEMPT.set(attempt)
        try:
            return await session.request(method, url, headers=headers, data=data, allow_redirects=False, **options)
        finally:
            _ATTEMPT.reset(sending)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class AiohttpTransport(httpx.AsyncBaseTransport):
    """``httpx.AsyncClient(transport=AiohttpTransport(...))``: a :class:`KeepAliveSession` under httpx.

    ``limits.max_connections`` caps the pool (0 or None: no cap); ``limits.keepalive_expiry``
    bounds how long a connection waits idle, never above :data:`IDLE_KEEPALIVE_S`;
    ``ssl_context`` is used for https URLs. ``reused_retries`` counts requests sent again after a
    reused connection died unanswered (see the module's docstring).
    """

    def __init__(self, *, limits: httpx.Limits | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        limits = limits or httpx.Limits()
        # httpx owns redirects, cookies and decompression: aiohttp only moves bytes.
        self._pool = KeepAliveSession(max_connections=limits.max_connections, idle_keepalive_s=limits.keepalive_expiry,
                                      ssl_context=ssl_context, raw=True)
        self.idle_keepalive_s = self._pool.idle_keepalive_s

    @property
    def reused_retries(self) -> int:
        return self._pool.reused_retries

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        streamed = bool(request.extensions.get(STREAM_EXTENSION))
        try:
            response = await self._pool.request(
                request.method, URL(str(request.url), encoded=True), headers=request.headers.multi_items(),
                data=body or None, timeout=_client_timeout(request.extensions))
            if streamed:
                return httpx.Response(response.status, headers=list(response.raw_headers),
                                      stream=_AiohttpStream(response, request),
                                      extensions={"http_version": b"HTTP/1.1"}, request=request)
            async with response:
                content = await response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _as_httpx(exc, request) from exc
        return httpx.Response(response.status, headers=list(response.raw_headers), stream=httpx.ByteStream(content),
                              extensions={"http_version": b"HTTP/1.1"}, request=request)

    async def aclose(self) -> None:
        await self._pool.aclose()


__all__ = ["AiohttpTransport", "IDLE_KEEPALIVE_S", "KeepAliveSession", "STREAM_EXTENSION", "pool_limits"]
