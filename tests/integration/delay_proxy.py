"""A TCP proxy on loopback that hands every byte from the upstream back to the client a fixed delay after
it arrived: a known latency injected between a load generator and nginx, for the tests that check that
a measured percentile follows it. (netem would do this in the kernel, but this machine's kernel is
built without sch_netem.) Order within a connection is kept; requests go upstream at once.

    python -m tests.integration.delay_proxy LISTEN_PORT UPSTREAM_PORT DELAY_MS

prints `ready` once it listens; stopped by its PID."""

from __future__ import annotations

import asyncio
import sys
import time


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        while data := await reader.read(65536):
            queue.put_nowait((time.monotonic() + delay, data))
        queue.put_nowait((0.0, b""))

    task = asyncio.ensure_future(read())
    try:
        while True:
            due, data = await queue.get()
            if not data:
                break
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        task.cancel()
        writer.close()


async def _forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def main(listen: int, upstream: int, delay_ms: float) -> None:
    async def serve(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            u_reader, u_writer = await asyncio.open_connection("127.0.0.1", upstream)
        except OSError:
            c_writer.close()
            return
        await asyncio.gather(_forward(c_reader, u_writer), _pipe(u_reader, c_writer, delay_ms / 1000))

    server = await asyncio.start_server(serve, "127.0.0.1", listen, backlog=1024)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
