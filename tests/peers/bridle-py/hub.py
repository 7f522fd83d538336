#!/usr/bin/env python3
"""A Bridle hub on python-socketio (AsyncServer) + aiohttp, written from the
protocol text alone (bridle-protocol.txt) by an independent audit; a test peer of
tests/bridle_py_peers.rs.

Env: JWT_SECRET, BRIDLE_API_KEY, BRIDLE_SYNC_TIMEOUT_MS (default 120000), PORT (0).
Prints http://127.0.0.1:PORT as its first stdout line.

Unusual-but-legal choices (each can be switched off with HUB_PLAIN=name[,name]):
  ping        engine.io pingInterval 7 s / pingTimeout 4 s (not 25 s / 20 s)
  refuse      bad handshakes are refused with CONNECT_ERROR (not accept-then-disconnect)
  extras      extra payload fields: welcome {clientId, agentId, hub}, pong {ts, hub},
              hub->agent message {.., ts, source}, health {.., agents, uptimeMs}, http {ok, queued}
  ext-events  extension events: `hub-hello` to browsers after welcome, `hub-config` to agents
  bearer      a browser token may be given as "Bearer <jwt>"
  keep-ts     relayed frames keep the agent's ts when it has one (else hub time)
  takeover    a second agent with the same agentId takes over; the old one stays connected
              (but is no longer routed to) instead of being disconnected

Opt-in variations (HUB_VARY=name[,name]) that are debatable or deliberate violations:
  see VARY below.
"""
import asyncio
import json
import os
import sys
import time
import uuid

import jwt
import socketio
from aiohttp import web

PLAIN = set(filter(None, os.environ.get("HUB_PLAIN", "").split(",")))
VARY = set(filter(None, os.environ.get("HUB_VARY", "").split(",")))


def on(name):
    return name not in PLAIN


JWT_SECRET = os.environ.get("JWT_SECRET", "")
API_KEY = os.environ.get("BRIDLE_API_KEY", "")
SYNC_TIMEOUT = int(os.environ.get("BRIDLE_SYNC_TIMEOUT_MS", "120000")) / 1000.0
STARTED = time.time()
COUNTER = 0
OPEN_TURNS = set()
LAST_STREAM = {}

NOT_CONNECTED = "Agent is not connected. Please try again in a moment."

eio_kw = {}
if on("ping"):
    eio_kw = dict(ping_interval=7, ping_timeout=4)
if "fast-ping" in VARY:
    eio_kw = dict(ping_interval=0.3, ping_timeout=0.4)
if "v-ws-only" in VARY:
    # WebSocket only: socket.io-client's defaults open with long-polling and are refused
    eio_kw["transports"] = ["websocket"]
sio = socketio.AsyncServer(
    async_mode="aiohttp",
    cors_allowed_origins="*",
    logger=False,
    engineio_logger=False,
    always_connect="always-connect" in VARY,
    **eio_kw,
)
app = web.Application()
sio.attach(app)

CLIENT = "/ws/client"
AGENT = "/ws/agent"

# state
browsers = {}  # sid -> {clientId, agentId}
agents = {}  # agentId -> sid (the routed one)
agent_sids = {}  # sid -> agentId (all connected agent sockets)
http_waiters = {}  # (agentId, clientId) -> future


def now_ms():
    if "float-ts" in VARY:
        return time.time() * 1000.0
    return int(time.time() * 1000)


def room(agent_id, client_id):
    return f"{agent_id}\x00{client_id}"


def is_part(p):
    if not isinstance(p, dict) or not isinstance(p.get("type"), str):
        return False
    t = p["type"]
    if t == "text":
        return isinstance(p.get("text"), str)
    if t == "image":
        return isinstance(p.get("base64"), str) and isinstance(p.get("mediaType"), str)
    if t == "file":
        return isinstance(p.get("url"), str) and isinstance(p.get("name"), str)
    return False


def build_parts(text, images):
    parts = []
    if text:
        parts.append({"type": "text", "text": text})
    for img in images or []:
        # legacy-strings: only string images (data URL or bare base64) are read, as a hub
        # written against the old client, which sent them so, would; legal (the spec gives no shape).
        if "legacy-strings" in VARY and not isinstance(img, str):
            continue
        if isinstance(img, str):
            # data URL or bare base64
            if img.startswith("data:") and ";base64," in img:
                head, b64 = img.split(";base64,", 1)
                parts.append({"type": "image", "base64": b64, "mediaType": head[5:]})
            else:
                parts.append({"type": "image", "base64": img, "mediaType": "image/jpeg"})
        elif isinstance(img, dict):
            b64 = img.get("base64") or img.get("data")
            mt = img.get("mediaType") or img.get("mimeType") or "image/jpeg"
            if isinstance(b64, str):
                parts.append({"type": "image", "base64": b64, "mediaType": mt})
    return parts


def normalize_incoming(data):
    """Browser/HTTP message -> (text, parts) or None when malformed."""
    if not isinstance(data, dict):
        return None
    text = data.get("text")
    if not isinstance(text, str):
        return None
    parts = data.get("parts")
    if parts is None and "parts" not in data:
        images = data.get("images")
        if images is not None and not isinstance(images, list):
            return None
        parts = build_parts(text, images)
    elif not isinstance(parts, list) or not all(is_part(p) for p in parts):
        return None
    elif "v-explicit-drop-images" in VARY:
        parts = [p for p in parts if p.get("type") != "image"]
    return text, parts


def text_parts(text):
    return [{"type": "text", "text": text}]


def verify_token(token):
    if not isinstance(token, str) or not token:
        return None
    if on("bearer") and token.startswith("Bearer "):
        token = token[len("Bearer "):]
    try:
        claims = jwt.decode(token, JWT_SECRET, algorithms=["HS256"])
    except Exception:
        claims = None
        if "v-alg-none" in VARY:
            try:
                if jwt.get_unverified_header(token).get("alg") == "none":
                    claims = jwt.decode(token, options={"verify_signature": False})
            except Exception:
                pass
        if "v-no-nbf-check" in VARY:
            try:
                claims = jwt.decode(token, JWT_SECRET, algorithms=["HS256"], options={"verify_nbf": False})
            except Exception:
                pass
        if "v-no-exp-check" in VARY:
            try:
                claims = jwt.decode(token, JWT_SECRET, algorithms=["HS256"], options={"verify_exp": False})
            except Exception:
                pass
        if claims is None:
            return None
    if not isinstance(claims, dict):
        return None
    roles = claims.get("roles") or []
    if isinstance(roles, str):
        roles = [roles]
    sub = claims.get("sub")
    if "ADMIN" in roles or ("v-admin-lowercase" in VARY and "admin" in [str(r).lower() for r in roles]):
        return "admin"
    if not isinstance(sub, str) or not sub:
        return None
    return sub


async def reject(sid, ns, why):
    if on("refuse"):
        raise socketio.exceptions.ConnectionRefusedError(why)
    # accept, then disconnect right after the connect completes
    asyncio.get_event_loop().call_later(0, lambda: asyncio.ensure_future(sio.disconnect(sid, namespace=ns)))
    return None


# ---------------------------------------------------------------- browsers
@sio.on("connect", namespace=CLIENT)
async def client_connect(sid, environ, auth):
    auth = auth if isinstance(auth, dict) else {}
    agent_id = auth.get("agentId")
    client_id = verify_token(auth.get("token"))
    if client_id is None or not isinstance(agent_id, str) or not agent_id:
        if on("refuse"):
            raise socketio.exceptions.ConnectionRefusedError("unauthorized")
        browsers[sid] = None  # marked: drop everything
        asyncio.get_event_loop().create_task(_kick(sid, CLIENT))
        return True
    if "v-refuse-second-browser" in VARY and any(b and b["agentId"] == agent_id for b in browsers.values()):
        # a replay fault: a second browser of an agentId is refused while the first is connected
        raise socketio.exceptions.ConnectionRefusedError("busy")
    browsers[sid] = {"clientId": client_id, "agentId": agent_id}
    await sio.enter_room(sid, room(agent_id, client_id), namespace=CLIENT)
    w = {"clientId": client_id}
    if on("extras"):
        w.update({"agentId": agent_id, "hub": "python-socketio"})
    asyncio.get_event_loop().create_task(_welcome(sid, w, agent_id))
    return True


async def _connected(sid, ns):
    for _ in range(200):
        if sio.manager.is_connected(sid, ns):
            return True
        await asyncio.sleep(0.005)
    return False


async def _kick(sid, ns):
    await _connected(sid, ns)
    if "v-late-kick" in VARY:
        await asyncio.sleep(2.0)
    await sio.disconnect(sid, namespace=ns)


async def _welcome(sid, w, agent_id):
    # emitted right after the CONNECT ack (python-socketio sends the ack after this handler)
    await _connected(sid, CLIENT)
    if "v-welcome-late" in VARY:
        await asyncio.sleep(1.5)
    if "v-welcome-twice" in VARY:
        await sio.emit("welcome", {"clientId": "someone-else"}, to=sid, namespace=CLIENT)
    await sio.emit("welcome", w, to=sid, namespace=CLIENT)
    if "welcome-again" in VARY:
        await asyncio.sleep(0.2)
        await sio.emit("welcome", w, to=sid, namespace=CLIENT)
    if "late-ext" in VARY:
        await asyncio.sleep(float(os.environ.get("LATE_EXT_S", "0.3")))
    if "tick-ext" in VARY:
        asyncio.get_event_loop().create_task(_ticks(sid))
    if on("ext-events"):
        await sio.emit(
            "hub-hello",
            {"agentConnected": agent_id in agents, "serverTime": now_ms()},
            to=sid,
            namespace=CLIENT,
        )


async def _ticks(sid):
    period = float(os.environ.get("TICK_S", "0.5"))
    while sid in browsers:
        await asyncio.sleep(period)
        try:
            await sio.emit("hub-tick", {"ts": now_ms()}, to=sid, namespace=CLIENT)
        except Exception:
            return


@sio.on("disconnect", namespace=CLIENT)
async def client_disconnect(sid, *args):
    browsers.pop(sid, None)


@sio.on("ping", namespace=CLIENT)
async def client_ping(sid, *args):
    b = browsers.get(sid)
    if not b:
        return
    p = {"ts": now_ms()}
    if on("extras"):
        p["hub"] = "python-socketio"
    if "v-pong-no-ts" in VARY:
        p = {}
    if "v-pong-ts-seconds" in VARY:
        p["ts"] = int(time.time())
    await sio.emit("pong", p, to=sid, namespace=CLIENT)


async def forward_to_agent(agent_id, client_id, text, parts, source):
    asid = agents.get(agent_id)
    if asid is None:
        return None
    msg = {
        "type": "message",
        "clientId": client_id,
        "agentId": agent_id,
        "text": text,
        "parts": parts,
        "messageId": str(uuid.uuid4()),
    }
    if on("extras"):
        msg["ts"] = now_ms()
        msg["source"] = source
    if "v-const-message-id" in VARY:
        msg["messageId"] = "0f8fb2a4-5d7e-4c3b-9a61-2b0c4e8d7f10"  # one UUID for every message
    if "v-messageid-not-uuid" in VARY:
        global COUNTER
        COUNTER += 1
        msg["messageId"] = str(COUNTER)
    if "v-agent-wrong-type" in VARY:
        msg["type"] = "chat"
    if "v-agent-drop-images" in VARY:
        msg["parts"] = [p for p in parts if p.get("type") != "image"]
    await sio.emit("message", msg, to=asid, namespace=AGENT)
    return msg["messageId"]


@sio.on("message", namespace=CLIENT)
async def client_message(sid, *args):
    b = browsers.get(sid)
    if not b:
        return
    if len(args) != 1:
        return
    norm = normalize_incoming(args[0])
    if norm is None:
        if "malformed-notice" in VARY:
            t = "Invalid message: text (string) is required; parts must be an array of parts."
            await sio.emit("message", {"type": "message", "text": t, "parts": text_parts(t),
                                       "messageId": str(uuid.uuid4()), "ts": now_ms()},
                           to=sid, namespace=CLIENT)
        return  # malformed: ignored
    text, parts = norm
    mid = await forward_to_agent(b["agentId"], b["clientId"], text, parts, "ws")
    if mid is None:
        await sio.emit(
            "message",
            {
                "type": "message",
                "text": NOT_CONNECTED,
                "parts": text_parts(NOT_CONNECTED),
                "messageId": str(uuid.uuid4()),
                "ts": now_ms(),
            },
            to=sid,
            namespace=CLIENT,
        )
    if on("ack"):
        return {"ok": True, "messageId": mid}


# ---------------------------------------------------------------- agents
@sio.on("connect", namespace=AGENT)
async def agent_connect(sid, environ, auth):
    auth = auth if isinstance(auth, dict) else {}
    agent_id = auth.get("agentId")
    key = auth.get("apiKey")
    if "v-apikey-casefold" in VARY and isinstance(key, str) and key.lower() == API_KEY.lower():
        key = API_KEY
    if not isinstance(key, str) or key != API_KEY or not API_KEY or not isinstance(agent_id, str) or not agent_id:
        if on("refuse"):
            raise socketio.exceptions.ConnectionRefusedError("invalid apiKey or agentId")
        agent_sids[sid] = None
        asyncio.get_event_loop().create_task(_kick(sid, AGENT))
        return True
    old = agents.get(agent_id)
    if old is not None and "refuse-second-agent" in VARY:
        raise socketio.exceptions.ConnectionRefusedError("agentId already connected")
    agents[agent_id] = sid
    agent_sids[sid] = agent_id
    if old is not None and not on("takeover"):
        asyncio.get_event_loop().create_task(sio.disconnect(old, namespace=AGENT))
    if on("ext-events"):
        asyncio.get_event_loop().create_task(_agent_config(sid))
    return True


async def _agent_config(sid):
    await _connected(sid, AGENT)
    await sio.emit("hub-config", {"pingIntervalMs": 7000}, to=sid, namespace=AGENT)


@sio.on("disconnect", namespace=AGENT)
async def agent_disconnect(sid, *args):
    agent_id = agent_sids.pop(sid, None)
    if agent_id is not None and agents.get(agent_id) == sid:
        del agents[agent_id]


@sio.on("register", namespace=AGENT)
async def agent_register(sid, *args):
    agent_id = agent_sids.get(sid)
    if agent_id is None:
        return
    # registration already happened on connect (lifecycle step 2); a register from the
    # connection that was taken over re-claims the agentId
    agents[agent_id] = sid


@sio.on("ping", namespace=AGENT)
async def agent_ping(sid, *args):
    if agent_sids.get(sid) is None:
        return
    await sio.emit("pong", {}, to=sid, namespace=AGENT)


def relay_payload(kind, data):
    text = data.get("text")
    parts = data.get("parts")
    out = {"type": kind}
    if kind != "typing":
        if not isinstance(text, str):
            text = ""
        if not isinstance(parts, list):
            parts = text_parts(text)
        out["text"] = text
        out["parts"] = parts
        mid = data.get("messageId")
        out["messageId"] = mid if isinstance(mid, str) and mid else str(uuid.uuid4())
        if "remap-ids" in VARY:
            # the hub's own id for the agent's message, stable across the turn
            out["messageId"] = str(uuid.uuid5(uuid.NAMESPACE_URL, "bridle:%s:%s" % (data.get("_agentId"), out["messageId"])))
        if kind == "message" and data.get("kind") in ("thinking", "tool"):
            out["kind"] = data["kind"]
    elif isinstance(data.get("messageId"), str) and on("extras"):
        out["messageId"] = data["messageId"]
    ts = data.get("ts")
    out["ts"] = ts if (on("keep-ts") and isinstance(ts, (int, float)) and not isinstance(ts, bool)) else now_ms()
    if "agentid-to-browser" in VARY:
        out["agentId"] = data.get("_agentId")
    if "v-ts-string" in VARY:
        out["ts"] = str(out["ts"])
    if "v-ts-seconds" in VARY:
        out["ts"] = int(time.time())
    if "v-wrong-type" in VARY:
        out["type"] = "event"
    if "v-text-parts-only" in VARY and "parts" in out:
        out["parts"] = text_parts(out["text"])
    if "v-parts-stale" in VARY and kind == "stream":
        out["parts"] = text_parts("stale")
    if "v-drop-kind" in VARY:
        out.pop("kind", None)
    if "v-message-text-parts" in VARY and kind == "message":
        # a complete answer's parts rebuilt from its text: its image is lost
        out["parts"] = text_parts(out["text"])
    if "v-mark-all" in VARY and kind == "message" and "kind" not in out:
        # every unmarked message marked as a note, a plain answer outside a turn too
        out["kind"] = "tool" if out["text"].startswith("\u2192") else "thinking"
    return out


async def agent_frame(kind, sid, args):
    agent_id = agent_sids.get(sid)
    if agent_id is None or len(args) < 1 or not isinstance(args[0], dict):
        return
    data = args[0]
    client_id = data.get("clientId")
    if not isinstance(client_id, str):
        return
    data = dict(data, _agentId=agent_id)
    payload = relay_payload(kind, data)
    if "v-end-as-last-stream" in VARY:
        key = (agent_id, client_id)
        if kind == "stream":
            LAST_STREAM[key] = payload["text"]
        elif kind == "stream_end" and key in LAST_STREAM:
            payload["text"] = LAST_STREAM.pop(key)
            payload["parts"] = text_parts(payload["text"])
    if "v-kind-in-turn-only" in VARY:
        # keeps kind only inside a turn (typing .. stream_end): a marked note outside loses it
        key = ("kinds", agent_id, client_id)
        if kind == "typing":
            OPEN_TURNS.add(key)
        elif kind == "stream_end":
            OPEN_TURNS.discard(key)
        elif kind == "message" and key not in OPEN_TURNS:
            payload.pop("kind", None)
    if "mark-notes" in VARY:
        # mark in-turn notes with the kind the spec's reading gives them (lines 272-286)
        key = (agent_id, client_id)
        if kind == "typing":
            OPEN_TURNS.add(key)
        elif kind == "stream_end":
            OPEN_TURNS.discard(key)
        elif kind == "message" and key in OPEN_TURNS and "kind" not in payload:
            payload["kind"] = "tool" if payload["text"].startswith("\u2192") else "thinking"
            if "v-mark-notes-wrong" in VARY:
                # the opposite of the spec's reading: the browser draws another kind of note
                payload["kind"] = "thinking" if payload["kind"] == "tool" else "tool"
    # HTTP sync waiter?
    fut = http_waiters.get((agent_id, client_id))
    if fut is not None:
        # a message sent while the agent's turn is open (typing .. stream_end) is a note,
        # "by definition not that answer", marked or not
        turn_key = ("sync-turn", agent_id, client_id)
        in_turn = turn_key in OPEN_TURNS
        if kind == "typing":
            OPEN_TURNS.add(turn_key)
        elif kind == "stream_end":
            OPEN_TURNS.discard(turn_key)
        if kind in (("stream_end",) if "v-sync-stream-only" in VARY else ("message", "stream_end")) and not fut.done():
            if kind == "message" and (payload.get("kind") or in_turn) and "v-sync-note" not in VARY:
                pass  # a note is not the answer
            else:
                fut.set_result(payload)
        return
    if "v-delta-after-3" in VARY and kind in ("stream", "stream_end"):
        # relays deltas once a turn has had three streams
        key = ("delta", agent_id, client_id)
        prev, n = LAST_STREAM.get(key, ("", 0))
        text = payload["text"]
        if kind == "stream":
            LAST_STREAM[key] = (text, n + 1)
            if n >= 3 and text.startswith(prev):
                payload["text"] = text[len(prev):]
                payload["parts"] = text_parts(payload["text"])
        else:
            LAST_STREAM.pop(key, None)
    if "v-end-as-last-stream-ws" in VARY:
        key = ("ws", agent_id, client_id)
        if kind == "stream":
            LAST_STREAM[key] = payload["text"]
        elif kind == "stream_end" and key in LAST_STREAM:
            payload["text"] = LAST_STREAM.pop(key)
            payload["parts"] = text_parts(payload["text"])
    if kind in ("stream", "stream_end") and ("v-throttle-leading" in VARY or "v-throttle-trailing" in VARY):
        if await _throttled(kind, payload, agent_id, client_id):
            return
    await sio.emit(kind, payload, room=room(agent_id, client_id), namespace=CLIENT)


THROTTLE_S = int(os.environ.get("HUB_THROTTLE_MS", "200")) / 1000.0
THROTTLES = {}  # v-throttle-*: (agentId, clientId, messageId) -> {last, held, timer}


async def _throttled(kind, payload, agent_id, client_id):
    """Replay faults, as tests/node/hub.js's --replay-fault throttle-*: v-throttle-leading
    drops a stream frame within THROTTLE_S of the last one relayed for its answer;
    v-throttle-trailing holds an answer's frames and relays only the latest at the end of each
    THROTTLE_S window, the one held relayed before stream_end. True: not relayed now."""
    key = (agent_id, client_id, payload.get("messageId"))
    t = THROTTLES.setdefault(key, {})
    to = room(agent_id, client_id)
    if kind == "stream_end":
        THROTTLES.pop(key, None)
        if t.get("timer") is not None:
            t["timer"].cancel()
        held = t.pop("held", None)
        if held is not None:
            await sio.emit("stream", held, room=to, namespace=CLIENT)
        return False
    if "v-throttle-leading" in VARY:
        now = time.monotonic()
        if "last" in t and now - t["last"] < THROTTLE_S:
            return True
        t["last"] = now
        return False
    t["held"] = payload
    if t.get("timer") is None:

        async def flush():
            await asyncio.sleep(THROTTLE_S)
            t["timer"] = None
            held = t.pop("held", None)
            if held is not None:
                await sio.emit("stream", held, room=to, namespace=CLIENT)

        t["timer"] = asyncio.get_event_loop().create_task(flush())
    return True


for _kind in ("message", "typing", "stream", "stream_end"):

    def _mk(kind):
        async def h(sid, *args):
            await agent_frame(kind, sid, args)

        return h

    sio.on(_kind, namespace=AGENT)(_mk(_kind))


# ---------------------------------------------------------------- HTTP
def browsers_of(agent_id=None):
    return sum(1 for b in browsers.values() if b and (agent_id is None or b["agentId"] == agent_id))


async def health(request):
    body = {"ok": True, "agentConnected": bool(agents) or "v-health-always-connected" in VARY, "browserClients": browsers_of()}
    if on("http-extras"):
        body.update({"agents": len(agents), "uptimeMs": int((time.time() - STARTED) * 1000)})
    return web.json_response(body)


async def agent_health(request):
    a = request.match_info["agentId"]
    if "unknown-404" in VARY and a not in agents and browsers_of(a) == 0:
        return web.json_response({"ok": False, "agentConnected": False, "browserClients": 0,
                                  "agentId": a, "error": "unknown agentId"}, status=404)
    body = {
        "ok": True,
        "agentConnected": a in agents,
        "browserClients": browsers_of(a),
        "agentId": a,
    }
    if on("http-extras"):
        body["uptimeMs"] = int((time.time() - STARTED) * 1000)
    return web.json_response(body)


async def read_body(request):
    try:
        data = await request.json()
    except Exception:
        return None
    return normalize_incoming(data)


async def http_message(request):
    a = request.match_info["agentId"]
    norm = await read_body(request)
    if norm is None:
        return web.json_response({"ok": False, "error": "text is required"}, status=400)
    text, parts = norm
    mid = await forward_to_agent(a, "http-" + uuid.uuid4().hex[:12], text, parts, "http")
    body = {"ok": True}
    if on("http-extras"):
        body["queued"] = mid is not None
    return web.json_response(body)


async def http_sync(request):
    a = request.match_info["agentId"]
    norm = await read_body(request)
    if norm is None:
        return web.json_response({"ok": False, "error": "text is required"}, status=400)
    text, parts = norm
    client_id = "http-" + uuid.uuid4().hex[:12]
    fut = asyncio.get_event_loop().create_future()
    http_waiters[(a, client_id)] = fut
    try:
        mid = await forward_to_agent(a, client_id, text, parts, "http")
        if mid is None:
            return web.json_response({"text": NOT_CONNECTED, "messageId": "", "ts": now_ms()})
        try:
            p = await asyncio.wait_for(fut, SYNC_TIMEOUT)
        except asyncio.TimeoutError:
            return web.json_response(
                {"text": "Timeout: no response from agent", "messageId": "", "ts": now_ms()}
            )
        body = {"text": p["text"], "messageId": p["messageId"], "ts": p["ts"]}
        if on("http-extras"):
            body["parts"] = p["parts"]
        return web.json_response(body)
    finally:
        http_waiters.pop((a, client_id), None)
        OPEN_TURNS.discard(("sync-turn", a, client_id))


app.router.add_get("/api/agent/health", health)
app.router.add_get("/api/agent/{agentId}/health", agent_health)
app.router.add_post("/api/agent/{agentId}/message", http_message)
app.router.add_post("/api/agent/{agentId}/message/sync", http_sync)


async def main():
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", int(os.environ.get("PORT", "0")))
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}", flush=True)
    while True:
        await asyncio.sleep(3600)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
