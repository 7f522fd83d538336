#!/usr/bin/env python3
"""A Bridle agent runtime on python-socketio's AsyncClient, written from the
protocol text alone (bridle-protocol.txt) by an independent audit; a test peer of
tests/bridle_py_peers.rs.

Env: BRIDLE_URL, BRIDLE_API_KEY, BRIDLE_AGENT_ID, BRIDLE_RECONNECT_MS (3000).

Unusual-but-legal defaults (switch off with AGENT_PLAIN=name[,name]):
  flush170    flushes the accumulation every 170 ms (the reference repository uses 100 ms)
  extras      extra fields: register {runtime, version}, frames carry agentId
  ext-events  sends an extension event `heartbeat` to the hub after register
  keepalive   sends the spec's `ping` {} right after register
Opt-in (AGENT_VARY=name[,name]): legal oddities and deliberate violations, see code.
"""
import asyncio
import os
import sys
import time
import uuid

import socketio

PLAIN = set(filter(None, os.environ.get("AGENT_PLAIN", "").split(",")))
VARY = set(filter(None, os.environ.get("AGENT_VARY", "").split(",")))


def on(n):
    return n not in PLAIN


URL = os.environ.get("BRIDLE_URL", "http://127.0.0.1:3333")
API_KEY = os.environ.get("BRIDLE_API_KEY", "")
AGENT_ID = os.environ.get("BRIDLE_AGENT_ID", "")
RECONNECT = int(os.environ.get("BRIDLE_RECONNECT_MS", "3000")) / 1000.0
FLUSH = 0.17 if on("flush170") else 0.1
TOKEN = 0.04
NS = "/ws/agent"

def new_client():
    return socketio.AsyncClient(
        reconnection=True,
        reconnection_attempts=0,
        reconnection_delay=RECONNECT,
        reconnection_delay_max=RECONNECT,
        randomization_factor=0.0,
        logger=bool(os.environ.get("AGENT_DEBUG")),
        engineio_logger=bool(os.environ.get("AGENT_DEBUG")),
    )


sio = None
dropped = asyncio.Event()


def ms():
    return int(time.time() * 1000)


def tparts(text):
    if "multi-parts" in VARY and len(text) > 3:
        # several text parts whose concatenation is the text
        return [{"type": "text", "text": text[:3]}, {"type": "text", "text": text[3:]}]
    return [{"type": "text", "text": text}]


FIRST_CLIENT = []


async def send(event, client_id, **kw):
    if "v-sticky-client" in VARY:
        # answers every browser with the first clientId it ever saw
        if not FIRST_CLIENT:
            FIRST_CLIENT.append(client_id)
        client_id = FIRST_CLIENT[0]
    d = {"clientId": client_id}
    if "v-wrong-client-id" in VARY:
        d["clientId"] = client_id + "-x"
    d.update(kw)
    if "text" in d and "parts" not in d and "no-parts" not in VARY:
        d["parts"] = tparts(d["text"])
    if on("extras"):
        d["agentId"] = AGENT_ID
    d.setdefault("ts", ms() // 1000 if "v-ts-seconds" in VARY else ms())
    await sio.emit(event, d, namespace=NS)


async def answer(msg):
    client_id = msg.get("clientId")
    text = msg.get("text") or ""
    mid = str(uuid.uuid4())
    tokens = ("Once upon a time, a small crab found a lantern on the shore. "
              "It glowed all night, and the crab was never lost again.").split(" ")
    tokens = [t + " " for t in tokens[:-1]] + [tokens[-1]]
    if "plain" in text.lower():
        await send("message", client_id, text="A plain answer.", messageId=mid)
        return
    if "notes-before-typing" in VARY:
        await send("message", client_id, text="Thinking about the request.", kind="thinking",
                   messageId=str(uuid.uuid4()))
    await send("typing", client_id)
    if "think" in text.lower() or "tool" in text.lower():
        if "unmarked-notes" in VARY:
            await send("message", client_id, text="The user wants a story.", messageId=str(uuid.uuid4()))
            await send("message", client_id, text="→ searchWeb", messageId=str(uuid.uuid4()))
        else:
            await send("message", client_id, text="The user wants a story.", kind="thinking",
                       messageId=str(uuid.uuid4()))
            await send("message", client_id, text="→ searchWeb", kind="tool",
                       messageId=str(uuid.uuid4()))
    acc = ""
    last_flushed = None
    last_flush_at = time.monotonic()
    for i, tok in enumerate(tokens):
        await asyncio.sleep(TOKEN)
        acc += tok
        if "typing-repeat" in VARY and i % 5 == 0:
            await send("typing", client_id)
        if time.monotonic() - last_flush_at >= FLUSH:
            out = tok if "v-delta" in VARY else acc
            await send("stream", client_id, text=out, messageId=mid)
            last_flushed = acc
            last_flush_at = time.monotonic()
    final = acc
    if "v-end-shorter" in VARY:
        final = acc[: len(acc) // 2]
    if "trim-end" in VARY:
        final = acc.rstrip(".")
    kw = {}
    if "image-end" in VARY:
        kw["parts"] = tparts(final) + [{"type": "image", "base64": "QUJD", "mediaType": "image/png"}]
    if "file-end" in VARY:
        # a file part with no mimeType (optional) and an extension key
        kw["parts"] = tparts(final) + [{"type": "file", "url": "https://example.com/a.pdf",
                                        "name": "a.pdf", "sizeBytes": 3}]
    if "v-image-bmp" in VARY:
        kw["parts"] = tparts(final) + [{"type": "image", "base64": "Qk0=", "mediaType": "image/bmp"}]
    await send("stream_end", client_id, text=final, messageId=mid, **kw)
    if "v-stream-after-end" in VARY:
        await asyncio.sleep(0.05)
        await send("stream", client_id, text="Something else entirely", messageId=mid)
        await send("stream_end", client_id, text="Something else entirely", messageId=mid)
    if "v-plain-after-end" in VARY:
        await send("message", client_id, text="P.S. extra bubble", kind="bogus", messageId=str(uuid.uuid4()))


async def connected():
    reg = {}
    if on("extras"):
        reg = {"runtime": "python-socketio", "version": __import__("importlib.metadata").metadata.version("python-socketio")}
    if "v-no-register" in VARY:
        return
    await sio.emit("register", reg, namespace=NS)
    if on("keepalive"):
        await sio.emit("ping", {}, namespace=NS)
    if on("ext-events"):
        await sio.emit("heartbeat", {"ts": ms()}, namespace=NS)


async def on_message(msg):
    if not isinstance(msg, dict):
        return
    asyncio.get_event_loop().create_task(answer(msg))


async def on_pong(*a):
    pass


async def other(event, *a):
    pass  # extension events from the hub are ignored


async def on_disconnect(*a):
    dropped.set()


def wire(c):
    c.on("connect", connected, namespace=NS)
    c.on("disconnect", on_disconnect, namespace=NS)
    c.on("message", on_message, namespace=NS)
    c.on("pong", on_pong, namespace=NS)
    c.on("*", other, namespace=NS)


async def main():
    global sio
    transports = None
    if "polling-only" in VARY:
        transports = ["polling"]
    if "websocket-only" in VARY:
        transports = ["websocket"]
    agent_id = AGENT_ID + "-other" if "v-wrong-agent-id" in VARY else AGENT_ID
    while True:
        sio = new_client()
        wire(sio)
        dropped.clear()
        try:
            await sio.connect(
                URL,
                namespaces=[NS],
                auth={"apiKey": API_KEY, "agentId": agent_id},
                transports=transports,
                wait_timeout=5,
            )
        except socketio.exceptions.ConnectionError as e:
            print(f"connect failed: {e}", file=sys.stderr)
            await asyncio.sleep(RECONNECT)
            continue
        if "lib-only" in VARY:
            # rely on python-socketio's own reconnection only
            await sio.wait()
            while True:
                await asyncio.sleep(3600)
        # The spec's runtime reconnects after any disconnect ("auto-reconnect after 3s").
        # python-socketio does not after a server's Engine.IO CLOSE and its engine then waits
        # up to pingInterval+pingTimeout for its write loop, so a fresh client is used.
        while True:
            await dropped.wait()
            dropped.clear()
            await asyncio.sleep(RECONNECT)
            if not sio.connected:
                break  # the library did not reconnect by itself: a fresh client
        old = sio
        old.reconnection = False
        asyncio.get_event_loop().create_task(old.eio.disconnect(abort=True))

if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
