"""A TCP proxy in front of the inference server that can cut every live connection at once (a
dropped gRPC stream, as a flaky network or a load balancer does it), in its own thread.

  with TcpProxy("127.0.0.1:9000") as proxy:   # listens on proxy.address
    ...
    cut = proxy.cut()                         # connections reset (RST) -> how many were live
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading


class TcpProxy:
  def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0):
    self.upstream = upstream
    self._loop = asyncio.new_event_loop()
    self._conns: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
    self.connections = 0  # accepted so far
    self.cuts = 0  # connections reset by cut()
    sock = socket.create_server((host, port))
    self.address = f"{host}:{sock.getsockname()[1]}"
    self._server = None
    self._thread = threading.Thread(target=self._run, args=(sock,), daemon=True, name="proxy")
    self._thread.start()

  def _run(self, sock: socket.socket) -> None:
    asyncio.set_event_loop(self._loop)
    self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, sock=sock))
    self._loop.run_forever()

  async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    host, port = self.upstream.rsplit(":", 1)
    try:
      up_reader, up_writer = await asyncio.open_connection(host, int(port))
    except OSError:  # the server is down: the client sees the connection reset and retries
      _reset(writer)
      return
    pair = (writer, up_writer)
    self._conns.add(pair)
    self.connections += 1
    try:
      await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    finally:
      self._conns.discard(pair)
      for w in pair:
        _reset(w)

  def cut(self) -> int:
    """Resets every live connection (both sides); returns how many there were."""

    async def cut_all() -> int:
      pairs = list(self._conns)
      for pair in pairs:
        for w in pair:
          _reset(w)
      self.cuts += len(pairs)
      return len(pairs)

    return asyncio.run_coroutine_threadsafe(cut_all(), self._loop).result(timeout=10)

  def close(self) -> None:
    with contextlib.suppress(Exception):
      asyncio.run_coroutine_threadsafe(_close(self), self._loop).result(timeout=10)
    self._loop.call_soon_threadsafe(self._loop.stop)
    self._thread.join(timeout=10)

  def __enter__(self) -> TcpProxy:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


async def _close(proxy: TcpProxy) -> None:
  proxy._server.close()
  for pair in list(proxy._conns):
    for w in pair:
      _reset(w)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
  with contextlib.suppress(ConnectionError, OSError):
    while data := await reader.read(1 << 16):
      writer.write(data)
      await writer.drain()
  _reset(writer)


def _reset(writer: asyncio.StreamWriter) -> None:
  """Closes abruptly (RST, not FIN): the peer sees the stream cut, not a clean end."""
  with contextlib.suppress(Exception):
    writer.transport.abort()
