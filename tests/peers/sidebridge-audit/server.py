#!/usr/bin/env python3
"""Independent Side Bridge v1.0 server, written from the spec text only.

Written by an audit of bridgewire's `parity` (stop 45) that read none of bridgewire's own
peers; committed unchanged as a parity test peer (tests/sidebridge_audit_peer.rs), with the two
chats it recorded through `bridgewire record sidebridge` without a key (cells/). Replaced later,
unchanged, by the copy a second audit (of `replay sidebridge`, /work/audit-replay-net/sb/server.py)
extended with more switches (flaky + f-*: a flaw on the first start only, FLAKY_MARK names the
mark file; crash-first, end-again, random-tag, bom, bigcontent, …); the replay rows of
tests/sidebridge_audit_peer.rs use them.

Correct by default. Variants: env SB_V (comma-separated) or --v a,b,c.
Phrases: "remember <word>" stores a word per chat; "what word" recalls it;
"go private" -> disableSendHistory true; "go public" -> false; "bye" -> endSession.
"""
import json, os, sys, uuid, gzip, random, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

V = set(filter(None, os.environ.get("SB_V", "").split(",")))
args = sys.argv[1:]
if "--v" in args:
    V |= set(filter(None, args[args.index("--v") + 1].split(",")))
KEY = os.environ.get("SB_KEY", "")
LOCK = threading.Lock()
MEM = {}          # chatId -> word
GLOBAL = {"word": None}
COUNTER = [0]
SEEN = {}


def new_id():
    if "upper-ids" in V:
        return str(uuid.uuid4()).upper()
    if "seq-ids" in V:
        with LOCK:
            COUNTER[0] += 1
            return "00000000-0000-4000-8000-%012d" % COUNTER[0]
    return str(uuid.uuid4())


def msg(content, frm="assistant"):
    m = {"id": new_id(), "from": frm, "content": content}
    if "sources-empty" in V:
        m["sources"] = []
    if "extra" in V:
        m["model"] = "audit-model-1"
        m["x-ext"] = {"tokens": 12, "nested": [1, 2, {"a": None}]}
    if "role-not-from" in V:
        m["role"] = m.pop("from")
    if "no-id" in V:
        del m["id"]
    if "from-system" in V and frm == "assistant":
        m["from"] = "system"
    if "from-bot" in V and frm == "assistant":
        m["from"] = "bot"
    return m


ENDED = set()
def answer(chat, req):
    msgs = req.get("messages")
    if "end-again" in V and chat in ENDED:
        return {"messages": [msg("This chat has ended. Start a new one.", "system")], "options": {"endSession": True}}
    if "end-again" in V and msgs and any(isinstance(m, dict) and m.get("content") == "bye" for m in msgs):
        ENDED.add(chat)
    opts = {}
    out = []
    if msgs is None:  # session start
        if "greet" in V:
            out.append(msg("Welcome!"))
        if "explicit-false" in V:
            opts["endSession"] = False
        resp = {}
        if out:
            resp["messages"] = out
        if opts:
            resp["options"] = opts
        if "null-options" in V and not opts:
            resp["options"] = None
        return resp
    for m in msgs:
        text = m.get("content", "")
        if not isinstance(text, str) or text == "":
            continue
        low = text.lower()
        if low.startswith("remember "):
            w = text.split(None, 1)[1]
            with LOCK:
                MEM[chat] = w
                GLOBAL["word"] = w
            out.append(msg("OK, I will keep %s." % w))
        elif "what word" in low:
            with LOCK:
                w = GLOBAL["word"] if "global-memory" in V else MEM.get(chat)
            out.append(msg("The word was %s." % w if w else "You gave me no word."))
        elif low == "go private":
            out.append(msg("History off."))
            if "no-disable" not in V:
                opts["disableSendHistory"] = True
        elif low == "go public":
            out.append(msg("History on."))
            opts["disableSendHistory"] = False
        elif low == "bye" and "hang-bye" in V:
            import time; time.sleep(100)
        elif low == "bye" and "crash-bye" in V:
            os._exit(3)
        elif low == "bye":
            out.append(msg("Goodbye!"))
            if "no-end" not in V:
                opts["endSession"] = "true" if "string-flag" in V else True
        else:
            reply = ("You typed: " if "text-differs" in V else "You said: ") + text
            if "random-tag" in V:
                reply += " [%s]" % uuid.uuid4().hex[:8]
            if "bigcontent" in V:
                reply += " " + "Z" * (3 * 1024 * 1024)
            if "error-answer" in V:
                out.append(msg("Error: the assistant is unavailable.", "system"))
                continue
            out.append(msg(reply))
            if "double" in V:
                out.append(msg(reply))
    if "reuse-user-id" in V and out and msgs:
        out[0]["id"] = msgs[0].get("id")
    if "empty-extra" in V and out:
        out.append(msg(""))
    if "dup-id" in V and out:
        first = msg("draft")
        first["id"] = out[0]["id"]
        out.insert(0, first)
    if "drop-last" in V and len(out) > 0:
        out = out[:-1]
    if "explicit-false" in V and "endSession" not in opts:
        opts["endSession"] = False
    resp = {"messages": out}
    if opts:
        resp["options"] = opts
    elif "null-options" in V:
        resp["options"] = None
    if "extra" in V:
        resp["usage"] = {"prompt": 3, "completion": 7}
        resp["server"] = "audit"
    return resp


class H(BaseHTTPRequestHandler):
    server_version = "AuditBridge/2.0" if "banner2" in V else "AuditBridge/1.0"
    def send_response(self, code, message=None):
        super().send_response(code, message)

    protocol_version = "HTTP/1.0" if "close" in V else "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _log(self, d, b):
        lp = os.environ.get("SB_LOG")
        if lp:
            import hashlib
            with LOCK, open(lp, "a") as f:
                f.write(json.dumps({"dir": d, "len": len(b), "sha": hashlib.sha256(b).hexdigest(), "head": b[:200].decode("utf-8", "replace")}) + "\n")

    def hdr(self, k, v):
        if "header-case" in V:
            k = k.upper()
        self.send_header(k, v)

    def reply(self, status, obj):
        if "keyorder" in V and isinstance(obj, dict):
            obj = rev(obj)
        if "pretty" in V:
            body = json.dumps(obj, indent=2, ensure_ascii=True)
        else:
            body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
        if "escape-slash" in V:
            body = body.replace("/", "\\/")
        data = body.encode("utf-8")
        if "big20" in V and getattr(self, "_is_send", False):
            data = data[:-1] + b',"pad":"' + b"y" * (20 * 1024 * 1024) + b'"}'
        if "random-tag" in V:
            pass
        if "latin1" in V:
            data = body.replace("said", "s\u00e4id").encode("latin-1", "replace")
        if "huge" in V and getattr(self, "_is_send", False):
            data = data[:-1] + b',"pad":"' + b"x" * (12 * 1024 * 1024) + b'"}'
        if "bigok" in V and getattr(self, "_is_send", False):
            data = data[:-1] + b',"pad":"' + b"x" * (3 * 1024 * 1024) + b'"}'
        if "truncate-bye" in V and getattr(self, "_is_bye", False):
            self.send_response(status)
            self.hdr("Content-Type", "application/json")
            self.hdr("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2]); self.wfile.flush()
            import socket as _s
            self.connection.shutdown(_s.SHUT_RDWR); self.close_connection = True
            return
        if "endless-bye" in V and getattr(self, "_is_bye", False):
            import time
            self.send_response(status); self.hdr("Content-Type", "application/json"); self.end_headers()
            self.wfile.write(b'{"messages":[');
            try:
                while True:
                    self.wfile.write(b" "); self.wfile.flush(); time.sleep(0.2)
            except Exception:
                return
        if "flood-bye" in V and getattr(self, "_is_bye", False):
            self.send_response(status); self.hdr("Content-Type", "application/json"); self.hdr("Connection", "close"); self.end_headers()
            try:
                self.wfile.write(b'{"messages":[')
                while True:
                    self.wfile.write(b'{"id":"0","from":"assistant","content":"flood"},' * 1000)
            except Exception:
                return
        self._log("sent", data)
        if "early-hints" in V:
            self.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x.css>; rel=preload\r\n\r\n")
        if "status-202" in V and status == 200:
            status = 202
        if "status-500" in V and status == 200:
            status = 500
        if "status-401" in V and status == 200:
            status = 401
        if "send-401" in V and status == 200 and getattr(self, "_is_send", False):
            status = 401
        if "chat2-401" in V and status == 200 and getattr(self, "_second_chat", False):
            status = 401
        if "send-403" in V and status == 200 and getattr(self, "_is_send", False):
            status = 403
        self.send_response(status)
        if "ctype-plain" in V: self.hdr("Content-Type", "text/plain")
        elif "no-ctype" in V: pass
        else: self.hdr("Content-Type", "application/json; charset=utf-8")
        if "bom" in V: data = b"\xef\xbb\xbf" + data
        if "trailing-ws" in V: data = data + b"\n\n"
        if "gzip" in V:
            data = gzip.compress(data)
            self.hdr("Content-Encoding", "gzip")
        if "chunked" in V and self.protocol_version == "HTTP/1.1":
            self.hdr("Transfer-Encoding", "chunked")
            self.end_headers()
            step = 7
            for i in range(0, len(data), step):
                c = data[i:i + step]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(c), c))
            self.wfile.write(b"0\r\n\r\n")
            return
        if "close" not in V:
            self.hdr("Content-Length", str(len(data)))
        else:
            self.hdr("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.send_response(405)
        self.send_header("Allow", "POST")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_PUT = do_GET
    do_DELETE = do_GET

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        self._log("recv", raw)
        if KEY and self.headers.get("x-sidebridge-key") != KEY and "accept-any-key" not in V:
            return self.reply(401, {"messages": [msg("Wrong or missing key.", "system")],
                                    "options": {"endSession": True}})
        try:
            req = json.loads(raw)
            assert isinstance(req, dict) and isinstance(req.get("chatId"), str)
        except Exception:
            return self.reply(400, {"messages": [msg("Bad request.", "system")],
                                    "options": {"endSession": True}})
        if "crash-first" in V and req.get("messages") is not None:
            os._exit(3)
        if "hang-all" in V and req.get("messages") is not None:
            import time; time.sleep(1000)
        if "html-error" in V:
            data = b"<html><body>Internal error</body></html>"
            self.send_response(500)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        chat = req["chatId"].upper()
        self._is_send = req.get("messages") is not None
        self._is_bye = any(isinstance(m, dict) and m.get("content") == "bye" for m in (req.get("messages") or []))
        if "keepalive-drop" in V:
            self.close_connection = True
        with LOCK:
            SEEN.setdefault(chat, len(SEEN))
        self._second_chat = SEEN[chat] == 1
        if "chat2-refuse" in V and self._second_chat:
            return self.reply(401, {"messages": [msg("Wrong or missing key.", "system")],
                                    "options": {"endSession": True}})
        self.reply(200, answer(chat, req))


def rev(o):
    if isinstance(o, dict):
        return {k: rev(o[k]) for k in reversed(list(o.keys()))}
    if isinstance(o, list):
        return [rev(x) for x in o]
    return o


def main():
    if "flaky" in V:
        mk = os.environ.get("FLAKY_MARK", "/tmp/flaky-mark")
        if os.path.exists(mk):
            os.remove(mk)
            for x in list(V):
                if x.startswith("f-"): V.discard(x)
        else:
            open(mk, "w").close()
            for x in list(V):
                if x.startswith("f-"): V.add(x[2:])
    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    port = srv.server_address[1]
    if "banner2" in V:
        print("INFO:     Uvicorn running on http://127.0.0.1:%d (Press CTRL+C to quit)" % port, flush=True)
    else:
        print("http://127.0.0.1:%d/" % port, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
