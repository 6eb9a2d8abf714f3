"""A small WebSocket client (RFC 6455, text frames) for driving the Agents SDK's chat agent.

Only what scenario 10 needs: connect to a ``ws://`` URL, send text frames (masked, as a
client must), receive text frames (reassembling fragments, answering pings), close. No
extensions, no TLS: the local runtime serves plain HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import struct
from contextlib import suppress
from urllib.parse import urlsplit

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_TEXT, _CONTINUATION, _CLOSE, _PING, _PONG = 0x1, 0x0, 0x8, 0x9, 0xA


class ConnectionClosed(ConnectionError):
    """The server closed the WebSocket (or the connection dropped)."""


class WebSocket:
    """One client WebSocket over an asyncio stream pair."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def connect(cls, url: str, timeout: float = 30.0) -> WebSocket:
        """Open ``url`` (``ws://host:port/path``) and complete the opening handshake."""
        parts = urlsplit(url)
        if parts.scheme != "ws" or parts.hostname is None:
            raise ValueError(f"not a ws:// URL: {url!r}")
        port = parts.port or 80
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(parts.hostname, port), timeout)
        key = base64.b64encode(os.urandom(16))
        writer.write(b"GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                     b"Sec-WebSocket-Version: 13\r\n\r\n"
                     % (path.encode(), parts.hostname.encode(), port, key))
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        status, *lines = head.decode("latin-1").split("\r\n")
        if " 101 " not in status + " ":
            writer.close()
            raise ConnectionClosed(f"the server refused the WebSocket: {status}")
        accept = base64.b64encode(hashlib.sha1(key + _GUID).digest()).decode()  # noqa: S324
        headers = {name.strip().lower(): value.strip()
                   for name, _, value in (line.partition(":") for line in lines if line)}
        if headers.get("sec-websocket-accept") != accept:
            writer.close()
            raise ConnectionClosed("the server's Sec-WebSocket-Accept does not match")
        return cls(reader, writer)

    async def send(self, text: str) -> None:
        """Send one text frame."""
        await self._frame(_TEXT, text.encode())

    async def recv(self) -> str:
        """The next text message (pings are answered on the way)."""
        pieces: list[bytes] = []
        while True:
            fin, opcode, payload = await self._read_frame()
            if opcode == _PING:
                await self._frame(_PONG, payload)
                continue
            if opcode == _PONG:
                continue
            if opcode == _CLOSE:
                reason = payload[2:].decode(errors="replace")
                raise ConnectionClosed(f"closed by the server: {reason}")
            if opcode not in (_TEXT, _CONTINUATION):
                continue  # a binary frame: nothing in this protocol sends one
            pieces.append(payload)
            if fin:
                return b"".join(pieces).decode()

    async def close(self) -> None:
        """Send a close frame and drop the connection."""
        with suppress(ConnectionError, RuntimeError):
            await self._frame(_CLOSE, struct.pack(">H", 1000))
        self._writer.close()

    async def _read_frame(self) -> tuple[bool, int, bytes]:
        try:
            first, second = await self._reader.readexactly(2)
            length = second & 0x7F
            if length == 126:
                (length,) = struct.unpack(">H", await self._reader.readexactly(2))
            elif length == 127:
                (length,) = struct.unpack(">Q", await self._reader.readexactly(8))
            mask = await self._reader.readexactly(4) if second & 0x80 else b""
            payload = await self._reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError) as error:
            raise ConnectionClosed("the connection dropped") from error
        return bool(first & 0x80), first & 0x0F, _masked(payload, mask) if mask else payload

    async def _frame(self, opcode: int, payload: bytes) -> None:
        size = len(payload)
        head = bytes([0x80 | opcode])
        if size < 126:
            head += bytes([0x80 | size])
        elif size < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", size)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", size)
        mask = os.urandom(4)
        self._writer.write(head + mask + _masked(payload, mask))
        await self._writer.drain()


def _masked(payload: bytes, mask: bytes) -> bytes:
    """``payload`` XOR the repeated 4-byte ``mask`` (masking and unmasking are the same)."""
    repeated = (mask * (len(payload) // 4 + 1))[: len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(
        len(payload), "big")
