"""An httpx transport on aiohttp: httpx's client, aiohttp's connection pool and C HTTP parser.

Mirror calls the model through :class:`httpx.AsyncClient` (requests, status handling, errors
and redirects are httpx's). Underneath, httpx's default transport (httpcore, anyio, h11) costs
~3 ms of CPU per request on these 2-core machines; aiohttp's ~0.5 ms. Recompute tasks and
conversation actors make one request per model call, so that CPU bounds them. This transport
hands each request to an :class:`aiohttp.ClientSession` and gives httpx back a response with
the raw body (httpx still decodes ``Content-Encoding``). A request marked with the extension
:data:`STREAM_EXTENSION` (a streamed chat answer, read as it arrives) gets a response whose body
is read from aiohttp piece by piece instead; closing it releases the connection.

aiohttp's failures become httpx's own exception types, so callers handle one family:

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
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
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


def _client_timeout(extensions: dict[str, Any]) -> aiohttp.ClientTimeout:
    """httpx's per-request timeouts (connect, read, pool) in aiohttp's terms; no total limit."""
    timeout = extensions.get("timeout") or {}
    return aiohttp.ClientTimeout(
        total=None, connect=timeout.get("pool"), sock_connect=timeout.get("connect"), sock_read=timeout.get("read")
    )


class AiohttpTransport(httpx.AsyncBaseTransport):
    """``httpx.AsyncClient(transport=AiohttpTransport(...))``.

    ``limits.max_connections`` caps the pool (0 or None: no cap); ``ssl_context`` is used for
    https URLs. The session is made on first use, on the loop that uses it.
    """

    def __init__(self, *, limits: httpx.Limits | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        self._limits = limits or httpx.Limits()
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._session: aiohttp.ClientSession | None = None

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._limits.max_connections or 0,
                keepalive_timeout=self._limits.keepalive_expiry or 15.0,
                ssl=self._ssl,
            )
            # httpx owns redirects, cookies and decompression: aiohttp only moves bytes.
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"),
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._session_now()
        body = await request.aread()
        if request.extensions.get(STREAM_EXTENSION):
            return await self._streamed(session, request, body)
        try:
            async with session.request(
                request.method, URL(str(request.url), encoded=True), headers=request.headers.multi_items(),
                data=body or None, allow_redirects=False, timeout=_client_timeout(request.extensions),
            ) as response:
                content = await response.read()
                status, headers = response.status, list(response.raw_headers)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _as_httpx(exc, request) from exc
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(content),
                              extensions={"http_version": b"HTTP/1.1"}, request=request)

    async def _streamed(self, session: aiohttp.ClientSession, request: httpx.Request, body: bytes) -> httpx.Response:
        try:
            response = await session.request(
                request.method, URL(str(request.url), encoded=True), headers=request.headers.multi_items(),
                data=body or None, allow_redirects=False, timeout=_client_timeout(request.extensions),
            )
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _as_httpx(exc, request) from exc
        return httpx.Response(response.status, headers=list(response.raw_headers), stream=_AiohttpStream(response, request),
                              extensions={"http_version": b"HTTP/1.1"}, request=request)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


__all__ = ["AiohttpTransport", "STREAM_EXTENSION"]
