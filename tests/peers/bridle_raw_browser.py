#!/usr/bin/env python3
"""A Bridle browser on a raw WebSocket (Python stdlib only, written from RFC 6455 and the
Engine.IO 4 / Socket.IO 5 specs, not from bridgewire's code), framing its messages the way a
lazy or unusual client may:

* offers `permessage-deflate` (a compliant peer may decline it; the answer is checked);
* sends its namespace CONNECT as three fragments, a WebSocket ping between two of them;
* writes each frame in pieces with pauses, so a header or payload is split across TCP reads;
* sends its `message` event as one frame written three bytes at a time.

Env: HUB_URL (http://host:port), TOKEN (the browser JWT), AGENT_ID, TEXT (the message).
Prints one JSON line: {"sent": [texts], "received": [every text frame received, in order]},
after the first `stream_end`; exits non-zero with a reason on any protocol fault.
"""
import base64
import hashlib
import json
import os
import socket
import struct
import sys
import time

url = os.environ["HUB_URL"]
host, port = url.split("://", 1)[1].split("/")[0].rsplit(":", 1)
token, agent, text = os.environ["TOKEN"], os.environ["AGENT_ID"], os.environ["TEXT"]


def fail(why):
    print(json.dumps({"error": why}), flush=True)
    sys.exit(1)


sock = socket.create_connection((host, int(port)), timeout=20)
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
key = base64.b64encode(os.urandom(16)).decode()
sock.sendall(
    (
        "GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n"
    ).encode()
)
buf = b""
while b"\r\n\r\n" not in buf:
    more = sock.recv(4096)
    if not more:
        fail("closed during the handshake")
    buf += more
head, buf = buf.split(b"\r\n\r\n", 1)
lines = head.decode().split("\r\n")
if " 101 " not in lines[0] + " ":
    fail(f"no upgrade: {lines[0]}")
headers = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:]}
accept = base64.b64encode(
    hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()
).decode()
if headers.get("sec-websocket-accept") != accept:
    fail("bad Sec-WebSocket-Accept")
if "sec-websocket-extensions" in headers:
    # We accept none of what was offered back here: frames below are sent uncompressed, so a
    # peer that negotiated compression would misread them.
    fail("an extension was negotiated: " + headers["sec-websocket-extensions"])


def frame(fin, opcode, payload):
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        hdr = struct.pack("!BB", (0x80 if fin else 0) | opcode, 0x80 | n)
    elif n < 65536:
        hdr = struct.pack("!BBH", (0x80 if fin else 0) | opcode, 0x80 | 126, n)
    else:
        hdr = struct.pack("!BBQ", (0x80 if fin else 0) | opcode, 0x80 | 127, n)
    return hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def send_in_pieces(data, size, pause):
    for i in range(0, len(data), size):
        sock.sendall(data[i : i + size])
        time.sleep(pause)


def read_exact(n):
    global buf
    while len(buf) < n:
        more = sock.recv(65536)
        if not more:
            fail("closed by the peer")
        buf += more
    out, buf = buf[:n], buf[n:]
    return out


def recv_text():
    """The next text message (control frames answered or skipped, fragments joined)."""
    parts, opcode = [], None
    while True:
        b0, b1 = read_exact(2)
        if b0 & 0x70:
            fail("reserved bits set on a frame from the hub side")
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", read_exact(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", read_exact(8))
        if b1 & 0x80:
            fail("a masked frame from the server side")
        payload = read_exact(n)
        op = b0 & 0x0F
        if op == 9:
            sock.sendall(frame(True, 10, payload))
            continue
        if op in (8,):
            fail("closed by the server")
        if op == 10:
            continue
        if op in (1, 2):
            opcode = op
        parts.append(payload)
        if b0 & 0x80:
            if opcode != 1:
                fail("a binary message")
            return b"".join(parts).decode()


received, sent = [], []


def recv_packet():
    while True:
        t = recv_text()
        received.append(t)
        if t == "2":  # Engine.IO ping: answered, as a client must
            sock.sendall(frame(True, 1, b"3"))
            sent.append("3")
            continue
        return t


if not recv_packet().startswith("0{"):
    fail("no open packet")
connect = "40/ws/client," + json.dumps({"token": token, "agentId": agent})
raw = connect.encode()
a, b = len(raw) // 3, 2 * len(raw) // 3
pieces = [frame(False, 1, raw[:a]), frame(True, 9, b"are you there"), frame(False, 0, raw[a:b]), frame(True, 0, raw[b:])]
for p in pieces:
    # Split inside the header and inside the payload.
    send_in_pieces(p, max(1, len(p) // 2 - 3), 0.03)
sent.append(connect)
while not recv_packet().startswith("40/ws/client,"):
    pass
while '"welcome"' not in recv_packet():
    pass
message = "42/ws/client," + json.dumps(["message", {"text": text}])
send_in_pieces(frame(True, 1, message.encode()), 3, 0.002)
sent.append(message)
while '"stream_end"' not in recv_packet():
    pass
print(json.dumps({"sent": sent, "received": received}), flush=True)
sock.sendall(frame(True, 8, struct.pack("!H", 1000)))
sock.settimeout(5)
try:
    while sock.recv(4096):
        pass
except OSError:
    pass
