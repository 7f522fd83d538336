#!/usr/bin/env python3
"""An independent Side Bridge v1.0 server (Python standard library only) for bridgewire's tests.

Written from the protocol text, not from bridgewire's reference bridge: its own phrases, its own
id handling, its own error texts. Correct by default; `--flaw NAME` gives it exactly one flaw,
`--oddity NAME` one legal oddity (repeatable). `--list` prints the names.

Its phrases (the fixture a user would write for it):
    remember        "please keep this word: {word}"
    recall          "which word did I give you?"
    repeat          "repeat your last answer"
    disableHistory  "go private"
    enableHistory   "go public"
    endSession      "farewell"

It prints a banner with its URL inside text on stderr, like many servers do.
"""

import argparse
import json
import os
import re
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FLAWS = {
    "parse-before-auth": "SB-A3: a malformed body gets 400 before the key is looked at",
    "auth-garbage-body": "SB-D9: refuses a bad key with 401 and a plain-text body",
    "null-from": "SB-D2 (SB-D3 names it): assistant messages carry from: null",
    "bot-from": "SB-D3: assistant messages carry from: \"bot\" (a string, not a protocol value)",
    "refuse-1.1": "SB-R8: refuses \"sidebridge\":\"1.1\" at session start",
    "leak-python": "SB-R10: a Python decoder message in the error reply",
    "leak-node": "SB-R10: a V8 TypeError in the error reply",
    "leak-go": "SB-R10: a Go decoder message in the error reply (status 200)",
    "leak-java": "SB-R10: a Jackson exception in the error reply (status 500)",
    "leak-dotnet": "SB-R10: a System.Text.Json exception in the error reply",
    "leak-rust": "SB-R10: a serde_json message in the error reply",
    "leak-ruby": "SB-R10: a JSON::ParserError in the error reply",
    "leak-php": "SB-R10: a PHP fatal error in the error reply",
    "redirect-301": "SB-H3: the endpoint answers 301 to another path",
    "garbage-with-key": "SB-D1: a request carrying an unexpected key gets a 200 with a non-JSON body",
    "random-bytes": "SB-D1: every POST is answered with random bytes",
    "forget-without-history": "SB-R6: keeps no word of its own; recalls only from history",
    "echo-history": "SB-R6, SB-R11: `recall` answers by echoing the history it was sent",
    "case-sensitive-ids": "SB-R3: looks its own messages up by id, case-sensitively",
    "no-end": "SB-S1, SB-R12 skipped: says goodbye but never sets endSession",
    "global-memory": "SB-S4, SB-R11: one remembered word shared by every chat",
    "foreign-history-500": "SB-R4: a history holding a message from \"unknown\" gets a 500",
    "foreign-history-html": "SB-D1 (SB-R4 skipped): a history holding a message from \"unknown\" gets a 200 HTML page",
    "options-broken": "SB-H5 not run: OPTIONS is answered with a line that is not HTTP",
    "odd-unreadable": "SB-R9 not run: a request it cannot place (no chatId, version 2.0, empty, null) gets a 200 plain-text body",
    "key-case-unreadable": "SB-A5 not run: the key header spelled other than in lower case gets a 200 plain-text body",
    "private-start-html": "SB-D1 (SB-S3 skipped): the session start of a chat in private mode gets a 200 HTML page",
    "no-history-html": "SB-D1 (SB-R6, SB-S2 skipped): a send without history gets a 200 HTML page",
    "html-not-post": "SB-H4: GET/PUT/HEAD get 405 with Allow: POST and an HTML body",
    "empty-send-500": "SB-R2: an empty send gets a 500 with a Side Bridge body",
    "empty-send-ends": "SB-R2: an empty send ends the session",
    "empty-send-html": "SB-D1 (SB-R2 skipped): an empty send gets a 200 HTML page",
    "empty-send-html-500": "SB-R2 (its 5xx), SB-D1, SB-D9: an empty send gets a 500 HTML page",
    "accept-missing-key": "SB-A1: a request without the key is answered like one with it",
    "accept-wrong-key": "SB-A2: a request with a wrong key is answered like one with the right key",
    "answer-twice": "SB-R1: the message is answered once as the send and again as the last history item",
    "reply-with-request-id": "SB-D4: an echo reply reuses the id of the user's message it answers",
    "relative-sources": "SB-D5: assistant messages cite a source by a relative URL",
    "reenable-history": "SB-S2: the reply after `go private` sets disableSendHistory false unasked",
    "crash-on-ended": "SB-R12: the session start of a chat it ended gets a 500",
    "strict-keys": "SB-R7: a request with a top-level key it does not know gets a 400",
    "raw-text": "SB-R5: the echoed text is cut from the raw request bytes (JSON escapes kept)",
    "slow-first": "SB-H2 (SB-D1 skipped): the first POST of the run waits 6 s",
    "reject-unexpected-key": "SB-A4: with no key configured, a request carrying one gets 401",
    "options-string": "SB-D6 (SB-D1 skipped): `go private` is answered with disableSendHistory \"true\", a string",
    "empty-content": "SB-D7: every reply with messages adds an assistant message with empty content",
    "no-sources": "SB-D8: reply messages carry no `sources` key",
    "forget-private-on-reopen": "SB-S3: the session start of a private chat does not re-assert disableSendHistory",
    "hangup-second-post": "SB-H1 (SB-D1 skipped): the second POST of the run (the new-chat session start) gets no reply, the connection is closed",
    "restored-start-html": "SB-D1 (SB-R11 skipped): the session start of a chat it never saw, with a long history, gets a 200 HTML page",
    "empty-send-hangup": "SB-D1 (SB-R2 skipped): an empty send gets no reply, the connection is closed",
    "silent-end": "SB-S1: `farewell` ends the session with no message to show",
    "ended-start-html": "SB-D1 (SB-R12 skipped): the session start of a chat it ended gets a 200 HTML page",
    "allow-lowercase": "SB-H4: GET/PUT/HEAD get 405 with `Allow: post` (method names are case-sensitive)",
    "sources-null": "SB-D8: reply messages carry `sources: null` (profile alpha needs an array)",
    "refusal-quotes-key": "SB-A1, SB-A2: the refusal of a missing or wrong key quotes the configured key",
    "refusal-quotes-key-upper": "SB-A1, SB-A2: the refusal of a missing or wrong key quotes the configured key upper-cased",
    "key-prefix": "SB-A2: a key that is a prefix of the configured one is accepted",
    "leak-node-json": "SB-R10: a V8 JSON.parse message in the error reply",
    "varying-escaped-error": "SB-R5: answers vary (a counter, as `varying`), and a message whose bytes hold `\\/` gets a system error instead of an answer",
    "double-answer-reworded": "SB-R1: the message is answered as the send and again, reworded, as the last history item",
    "key-casefold": "SB-A2: the key is compared without letter case",
    "gzip-lie": "SB-D1: the reply to the second POST of the run (the new-chat session start) says Content-Encoding: gzip, its body plain JSON",
    "leak-pydantic": "SB-R10: a pydantic ValidationError in the error reply (status 422)",
    "leak-swift": "SB-R10: a Swift DecodingError in the error reply",
    "key-suffix": "SB-A2: a key that the configured one ends with is accepted",
    "key-nohyphen": "SB-A2: keys are compared with their hyphens taken out",
    "key-length": "SB-A2: only the key's length is compared",
    "auth-skip-without-history": "SB-A1 (SB-A2 names it): a send without `history` is served without looking at the key",
    "end-on-unknown-keys": "SB-R7: a send with top-level keys it does not know is answered alike, and the session ended",
    "private-on-unknown-keys": "SB-R7: a send with top-level keys it does not know is answered alike, with disableSendHistory: true",
    "end-on-1.1": "SB-R8: a \"sidebridge\":\"1.1\" send is answered alike, and the session ended",
    "source-no-host": "SB-D5: assistant messages cite `https:example.com/docs/peer` (no `//`, no host)",
    "keepalive-deaf": "SB-D1: answers over HTTP/1.1 without `Connection: close`, then never reads the next request on that connection",
    "hangup-kept-post": "SB-D1: answers over HTTP/1.1 without `Connection: close`, then reads the next request on that connection whole and closes it without a reply",
    "head-body": "SB-H4: HEAD gets 405 with Allow: POST and the body a GET would get (HTTP forbids content in a reply to HEAD)",
}
ODDITIES = {
    "chunked": "every reply in chunked transfer encoding",
    "redirect-307": "the endpoint answers 307 to another path (the client follows it)",
    "unknown-keys": "extra keys in replies, messages and options",
    "upper-ids": "reply ids in upper case",
    "options-null": "every reply carries \"options\": null (and \"messages\": null when empty)",
    "404-allow": "GET/PUT/HEAD get 404 with Allow: POST",
    "end-false": "every reply that does not end the session says \"endSession\": false",
    "options-405": "OPTIONS gets 405 with Allow: POST and an empty Side Bridge body",
    "odd-noop": "a request it cannot place (no chatId, version 2.0, empty, null) gets 200 {}",
    "options-501": "OPTIONS gets the standard library's own 501 HTML page (no do_OPTIONS)",
    "empty-send-nudge": "an empty send gets a system message asking for text and \"endSession\": false",
    "sources-https": "assistant messages cite a source: an absolute https URL with query and fragment, and an extra key",
    "refuse-403": "a missing or wrong key gets 403 (not 401) with a system message and endSession",
    "private-reassert": "every reply in a private chat repeats disableSendHistory: true",
    "ended-reopens": "the session start of a chat it ended opens it afresh (200 {})",
    "errors-422": "malformed requests get 422 (not 400) with a plain system message",
    "start-201": "every session start is answered 201 Created with a system greeting",
    "key-noted": "with no key configured, a request carrying one is answered with a system note that it was ignored",
    "key-trim": "the key is compared with surrounding spaces trimmed",
    "preface-note": "every answer to a send opens with a system message naming the model",
    "cite-links": "a URL in the user's text is cited as a source; every reply escapes `/` as `\\/`",
    "report-ignored": "a reply to a request with keys it does not know lists them in a top-level `x-ignored-keys`",
    "version-echo": "every reply to a Side Bridge request carries a top-level `sidebridge` with the request's version",
    "silent-toggle": "`go private` and `go public` are answered with options only, no message",
    "accepted-202": "every reply that would be 200 is sent as 202 Accepted",
    "edit-previous": "every answer also updates its previous answer in the chat in place (same id, marked \u2713)",
    "text-plain": "replies are labelled Content-Type: text/plain; charset=utf-8 (the body is the same JSON)",
    "close-delimited": "replies carry no Content-Length: the body ends when the connection closes",
    "word-echo": "`remember` repeats the word back; `recall` also says how many chats it keeps words for",
    "allow-split": "GET/PUT/HEAD get Allow as two field lines: `Allow: OPTIONS`, then `Allow: POST`",
    "edit-restored": "every answer also updates the last assistant message of the request's history in place (same id, marked \u2713), one from a chat it never saw included",
    "length-note": "every answer to a send is followed by a system message giving the answer's length",
    "late-listen": "prints its address half a second before it listens there",
    "varying": "every answer ends with a counter ([#n]): identical requests never get identical replies",
    "model-wording": "every answer ends with a random tag (~ and six hex digits), as a model's wording varies: two runs never answer alike",
    "huge-number": "every reply carries a top-level `x-score` of 1e400 (valid JSON beyond a double)",
    "deep-extension": "every reply carries a top-level `x-trace` of arrays nested 150 deep",
    "error-positions": "malformed requests get 400 with a plain English error naming its position (`at line 1 column N`) or the field (`missing field `messages``)",
    "counter-ids": "reply ids from one counter: non-v4 UUIDs 00000000-0000-1000-8000-00000000000N, N from 1 (opaque ids, as legal as random ones)",
    "counter-from-2": "with counter-ids: the counter starts at 2, so this build's ids are the other build's shifted by one (every id but the first is one the other build also gave)",
    "echo-user-first": "every answer to a send is preceded by the user's own message re-sent unchanged (same id, from user, same content): an upsert that changes nothing on screen",
    "huge-answers": "every answer to a send ends with 11 MiB of text (a legal body: the app reads a body of any size)",
    "trickle": "the reply to the first POST of the run is preceded by 8 spaces (JSON whitespace), one every 0.5 s: 4 s in all, never 1 s without data",
    "sources-unusual": "assistant messages cite legal unusual URLs: upper-case scheme and host, port, percent-encoding, an IPv6 host",
    "close-unannounced": "the connection is closed after every reply that did not say `Connection: close` (a server may close an idle connection at any time), the end of the stream sent with the reply's last bytes",
}

HTML = b"<html><body><h1>Internal error</h1></body></html>"

UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")

LEAKS = {
    "leak-python": (400, "Expecting value: line 1 column 69 (char 68)"),
    "leak-node": (400, "TypeError: Cannot read properties of undefined (reading 'map')"),
    "leak-go": (200, "json: cannot unmarshal string into Go struct field Request.messages of type []main.Message"),
    "leak-java": (500, "com.fasterxml.jackson.core.JsonParseException: Unexpected end-of-input in VALUE_STRING"),
    "leak-dotnet": (400, "System.Text.Json.JsonException: Expected end of string. Path: $ | LineNumber: 0 | BytePositionInLine: 68."),
    "leak-rust": (400, "EOF while parsing a string at line 1 column 69"),
    "leak-ruby": (400, "JSON::ParserError: unexpected token at '{\"sidebridge\"'"),
    "leak-php": (400, "PHP Fatal error:  Uncaught JsonException: Syntax error in /srv/bridge.php:12"),
    "leak-node-json": (400, "Unterminated string in JSON at position 73"),
    "leak-pydantic": (422, "2 validation errors for ChatRequest\nmessages.0.content\n  Field required "
                           "[type=missing, input_value={'id': 'x'}, input_type=dict]"),
    "leak-swift": (400, 'keyNotFound(CodingKeys(stringValue: "chatId", intValue: nil), '
                        'Swift.DecodingError.Context(codingPath: [], debugDescription: "No value '
                        'associated with key", underlyingError: nil))'),
}


class Chat:
    def __init__(self):
        self.word = None
        self.private = False
        self.ended = False
        self.said = {}  # id (as we wrote it, or upper-cased) -> content
        self.last = None


class State:
    def __init__(self, key, flaws, oddities):
        self.key = key
        self.flaws = set(flaws)
        self.oddities = set(oddities)
        self.chats = {}
        self.lock = threading.Lock()
        self.posts = 0
        self.counter = 0
        self.ids = 0
        self.ids_lock = threading.Lock()  # new_id runs under `lock` too

    def chat(self, cid):
        c = self.chats.setdefault(cid.upper(), Chat())
        if "global-memory" in self.flaws:
            c.word = getattr(self, "word", None)
        return c


def new_id(state):
    if "counter-ids" in state.oddities:
        with state.ids_lock:
            state.ids += 1
            i = "00000000-0000-1000-8000-%012x" % (state.ids + ("counter-from-2" in state.oddities))
    else:
        i = str(uuid.uuid4())
    return i.upper() if "upper-ids" in state.oddities else i


def without_history(raw):
    """Whether a request body is a send (it has `messages`) without `history`."""
    try:
        req = json.loads(raw)
    except ValueError:
        return False
    return isinstance(req, dict) and "messages" in req and "history" not in req


def raw_content(raw):
    """The first message's content as it stands in the request bytes: escapes (`\\/`) kept."""
    text = raw.decode("utf-8", "replace")
    at = text.find('"messages"')
    found = re.search(r'"content"\s*:\s*"((?:[^"\\]|\\.)*)"', text[at:] if at >= 0 else text)
    return found.group(1) if found else ""


def message(state, frm, content):
    m = {"id": new_id(state), "from": frm, "content": content, "sources": []}
    if "no-sources" in state.flaws:
        del m["sources"]
    if "sources-null" in state.flaws:
        m["sources"] = None
    if frm == "assistant" and "relative-sources" in state.flaws:
        m["sources"] = [{"title": "Peer docs", "url": "/docs/peer"}]
    if frm == "assistant" and "source-no-host" in state.flaws:
        m["sources"] = [{"title": "Peer docs", "url": "https:example.com/docs/peer"}]
    if frm == "assistant" and "sources-unusual" in state.oddities:
        m["sources"] = [{"title": "Docs", "url": "HTTPS://Example.COM:8443/a%20b?q=%C3%A4#x"},
                        {"title": "Mirror", "url": "http://[2001:db8::1]:8080/docs"},
                        {"title": "Local", "url": "http://127.0.0.1:8080"}]
    if frm == "assistant" and "sources-https" in state.oddities:
        m["sources"] = [{"title": "Peer docs", "url": "https://example.com/docs/peer?lang=en#top",
                         "snippet": "how the peer answers"}]
    if "null-from" in state.flaws and frm == "assistant":
        m["from"] = None
    if "bot-from" in state.flaws and frm == "assistant":
        m["from"] = "bot"
    if "unknown-keys" in state.oddities:
        m["x-model"] = {"name": "peer", "tokens": 3}
    return m


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "PeerBridge/1.0"

    def log_message(self, *args):
        pass

    @property
    def st(self):
        return self.server.state

    def handle_one_request(self):
        if "keepalive-deaf" in self.st.flaws and getattr(self, "answered", False):
            # The connection stays open (the reply said nothing of closing it); the next
            # request on it is never read.
            time.sleep(3600)
            self.close_connection = True
            return
        if "hangup-kept-post" in self.st.flaws and getattr(self, "answered", False):
            # The next request on the connection the reply left open is read whole (the
            # bridge may have acted on it), then the connection is closed without a reply.
            self.raw_requestline = self.rfile.readline(65537)
            if self.raw_requestline and self.parse_request():
                self.drain()
            self.close_connection = True
            return
        closing = "close-unannounced" in self.st.oddities
        cork = getattr(socket, "TCP_CORK", None) if closing else None
        if cork is not None:
            self.connection.setsockopt(socket.IPPROTO_TCP, cork, 1)
        super().handle_one_request()
        self.answered = True
        if closing:
            self.close_connection = True
            # The end of the stream goes with the reply's last bytes (held back until the
            # shutdown): no client can read the reply and find the connection still open,
            # so none sends its next request on it (the close is not raced).
            try:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_WR)
                if cork is not None:
                    self.connection.setsockopt(socket.IPPROTO_TCP, cork, 0)
            except OSError:
                pass

    # --- replies -------------------------------------------------------------------------
    def send_bytes(self, status, body, ctype="application/json", extra=()):
        if status == 200 and "accepted-202" in self.st.oddities:
            status = 202
        if ctype == "application/json" and "text-plain" in self.st.oddities:
            ctype = "text/plain; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for k, v in extra:
            self.send_header(k, v)
        if "gzip-lie" in self.st.flaws and getattr(self, "post_n", 0) == 2:
            self.send_header("Content-Encoding", "gzip")
        if "close-delimited" in self.st.oddities:
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            if self.command != "HEAD":
                self.wfile.write(body)
            return
        if "trickle" in self.st.oddities and getattr(self, "post_n", 0) == 1:
            lead = b" " * 8
            self.send_header("Content-Length", str(len(lead) + len(body)))
            self.end_headers()
            try:
                for b in lead:
                    self.wfile.write(bytes([b]))
                    self.wfile.flush()
                    time.sleep(0.5)
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            return
        if "chunked" in self.st.oddities and self.command != "HEAD":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for k in range(0, len(body), 7):
                part = body[k:k + 7]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD" or "head-body" in self.st.flaws:
                self.wfile.write(body)

    def reply(self, status, messages=None, options=None, extra=()):
        st = self.st
        obj = {}
        if messages:
            obj["messages"] = list(messages)
            if "empty-content" in st.flaws:
                obj["messages"].append(message(st, "assistant", ""))
        elif "options-null" in st.oddities:
            obj["messages"] = None
        if options:
            obj["options"] = dict(options)
            if "options-string" in st.flaws and obj["options"].get("disableSendHistory") is True:
                obj["options"]["disableSendHistory"] = "true"
            if "unknown-keys" in st.oddities:
                obj["options"]["theme"] = "dark"
        elif "options-null" in st.oddities:
            obj["options"] = None
        if "end-false" in st.oddities and not (obj.get("options") or {}).get("endSession"):
            obj["options"] = dict(obj.get("options") or {}, endSession=False)
        if "unknown-keys" in st.oddities:
            obj["served_by"] = {"peer": True, "v": [1, 2]}
        if "key-noted" in st.oddities and getattr(self, "key_ignored", False):
            obj["messages"] = [message(st, "system", "This bridge needs no key; the one you sent was ignored.")] + list(obj.get("messages") or [])
        if "report-ignored" in st.oddities and getattr(self, "ignored", None):
            obj["x-ignored-keys"] = self.ignored
        if "version-echo" in st.oddities and getattr(self, "version", None):
            obj["sidebridge"] = self.version
        if getattr(self, "is_send", False) and obj.get("messages"):
            opts = None
            if getattr(self, "ignored", None) and "end-on-unknown-keys" in st.flaws:
                opts = {"endSession": True}
            if getattr(self, "ignored", None) and "private-on-unknown-keys" in st.flaws:
                opts = {"disableSendHistory": True}
            if getattr(self, "version", None) == "1.1" and "end-on-1.1" in st.flaws:
                opts = {"endSession": True}
            if opts:
                obj["options"] = dict(obj.get("options") or {}, **opts)
        body = json.dumps(obj).encode()
        # Extensions the standard library cannot write (1e400 is not a float it keeps).
        for name, ext in (("huge-number", b'"x-score":1e400'),
                          ("deep-extension", b'"x-trace":' + b"[" * 150 + b"]" * 150)):
            if name in st.oddities:
                body = b"{" + ext + (b"," if body != b"{}" else b"") + body[1:]
        if "cite-links" in st.oddities:
            body = body.replace(b"/", b"\\/")  # `\/` is a legal JSON escape, as the app writes it
        self.send_bytes(status, body, extra=extra)

    def error(self, status, text, end=False):
        self.reply(status, [message(self.st, "system", text)], {"endSession": True} if end else None)

    # --- methods -------------------------------------------------------------------------
    def not_post(self):
        status = 404 if "404-allow" in self.st.oddities else 405
        self.drain()
        self.error_with_allow(status)

    def error_with_allow(self, status):
        allow = [("Allow", "POST")]
        if "allow-split" in self.st.oddities:
            allow = [("Allow", "OPTIONS"), ("Allow", "POST")]
        if "allow-lowercase" in self.st.flaws:
            allow = [("Allow", "post")]
        if "html-not-post" in self.st.flaws:
            return self.send_bytes(status, HTML, ctype="text/html", extra=allow)
        body = json.dumps({"messages": [message(self.st, "system", "Send a POST with a JSON body.")]}).encode()
        self.send_bytes(status, body, extra=allow)

    do_GET = do_PUT = do_HEAD = do_DELETE = not_post

    def do_OPTIONS(self):
        if "options-broken" in self.st.flaws:
            self.close_connection = True
            self.wfile.write(b"OK then\r\n\r\n")
            return
        if "options-501" in self.st.oddities:
            return self.send_error(501, "Unsupported method ('OPTIONS')")
        if "options-405" in self.st.oddities:
            return self.send_bytes(405, b"{}", extra=[("Allow", "POST")])
        self.send_response(204)
        self.send_header("Allow", "POST, OPTIONS")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def drain(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def do_POST(self):
        st = self.st
        raw = self.drain()
        self.body = raw
        path = self.path.split("?")[0]
        with st.lock:
            st.posts += 1
            n = st.posts
        self.post_n = n
        if n == 2 and "hangup-second-post" in st.flaws:
            self.close_connection = True
            return
        if n == 1 and "slow-first" in st.flaws:
            time.sleep(6)
        if path == "/" and "redirect-301" in st.flaws:
            return self.send_bytes(301, b"", extra=[("Location", "/bridge")])
        if path == "/" and "redirect-307" in st.oddities:
            return self.send_bytes(307, b"", extra=[("Location", "/bridge")])
        if "random-bytes" in st.flaws:
            return self.send_bytes(200, os.urandom(48), ctype="application/octet-stream")
        sent_key = self.headers.get("x-sidebridge-key")
        if sent_key is not None and "key-trim" in st.oddities:
            sent_key = sent_key.strip()
        self.key_ignored = st.key is None and sent_key is not None
        if st.key is None and sent_key is not None and "reject-unexpected-key" in st.flaws:
            return self.error(401, "This bridge takes no key.", end=True)
        if st.key is None and sent_key is not None and "garbage-with-key" in st.flaws:
            return self.send_bytes(200, b"ok, key noted", ctype="text/plain")
        if "parse-before-auth" in st.flaws:
            try:
                json.loads(raw)
            except ValueError:
                return self.error(400, "That is not JSON.")
        if "key-case-unreadable" in st.flaws and any(
                k.lower() == "x-sidebridge-key" and k != "x-sidebridge-key" for k in self.headers.keys()):
            return self.send_bytes(200, b"key header noted", ctype="text/plain")
        lenient = ("accept-missing-key" in st.flaws and sent_key is None) or (
            "accept-wrong-key" in st.flaws and sent_key is not None) or (
            "key-prefix" in st.flaws and sent_key and st.key and st.key.startswith(sent_key)) or (
            "key-casefold" in st.flaws and sent_key and st.key and sent_key.lower() == st.key.lower()) or (
            "key-suffix" in st.flaws and sent_key and st.key and st.key.endswith(sent_key)) or (
            "key-nohyphen" in st.flaws and sent_key is not None and st.key
            and sent_key.replace("-", "") == st.key.replace("-", "")) or (
            "key-length" in st.flaws and sent_key is not None and st.key and len(sent_key) == len(st.key)) or (
            "auth-skip-without-history" in st.flaws and without_history(raw))
        if st.key is not None and sent_key != st.key and not lenient:
            if "refusal-quotes-key" in st.flaws:
                return self.error(401, "Wrong key: this bridge expects %s." % st.key, end=True)
            if "refusal-quotes-key-upper" in st.flaws:
                return self.error(401, "WRONG KEY: THIS BRIDGE EXPECTS %s." % st.key.upper(), end=True)
            if "refuse-403" in st.oddities:
                return self.error(403, "This bridge needs the right key (set it in Side Search).", end=True)
            if "auth-garbage-body" in st.flaws:
                return self.send_bytes(401, b"Unauthorized", ctype="text/plain")
            return self.error(401, "This bridge needs the right key (set it in Side Search).", end=True)
        try:
            req = json.loads(raw)
        except ValueError:
            if not raw.strip():
                return self.unplaceable()
            return self.bad_request("The request body is not valid JSON.")
        if req is None or (isinstance(req, dict) and (
                not isinstance(req.get("chatId"), str)
                or str(req.get("sidebridge", "")).split(".")[0] != "1")):
            if "odd-unreadable" in st.flaws or "odd-noop" in st.oddities:
                return self.unplaceable()
        if not isinstance(req, dict) or not isinstance(req.get("sidebridge"), str):
            return self.bad_request("A Side Bridge request object is expected.")
        if "strict-keys" in st.flaws and set(req) - {"sidebridge", "chatId", "messages", "history"}:
            return self.error(400, "Unknown field in the request.")
        version = req["sidebridge"]
        self.version = version
        self.ignored = sorted(set(req) - {"sidebridge", "chatId", "messages", "history"})
        if version.split(".")[0] != "1" or ("refuse-1.1" in st.flaws and version != "1.0"):
            return self.error(400, "Protocol version %s is not supported here." % version, end=True)
        cid = req.get("chatId")
        if not isinstance(cid, str) or not UUID_RE.match(cid):
            return self.bad_request("chatId must be a UUID.")
        msgs, hist = req.get("messages"), req.get("history")
        self.is_send = msgs is not None
        for v in (msgs, hist):
            if v is not None and not (isinstance(v, list) and all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in v)):
                return self.bad_request("messages and history must be lists of messages.")
        if "foreign-history-500" in st.flaws or "foreign-history-html" in st.flaws:
            if any(h.get("from") == "unknown" for h in hist or []):
                if "foreign-history-500" in st.flaws:
                    return self.error(500, "Unknown sender in history.")
                return self.send_bytes(200, HTML, ctype="text/html")
        if "no-history-html" in st.flaws and msgs is not None and hist is None:
            return self.send_bytes(200, HTML, ctype="text/html")
        self.raw = raw
        with st.lock:
            known = cid.upper() in st.chats
            chat = st.chat(cid)
            if "restored-start-html" in st.flaws and msgs is None and not known and len(hist or []) > 20:
                return self.send_bytes(200, HTML, ctype="text/html")
            if "ended-start-html" in st.flaws and msgs is None and chat.ended:
                return self.send_bytes(200, HTML, ctype="text/html")
            if "private-start-html" in st.flaws and msgs is None and chat.private:
                return self.send_bytes(200, HTML, ctype="text/html")
            return self.answer(chat, msgs, hist)

    def unplaceable(self):
        """A request that is not a Side Bridge 1.x request it can place (R9's probes)."""
        if "odd-unreadable" in self.st.flaws:
            return self.send_bytes(200, b"unsupported request", ctype="text/plain")
        if "odd-noop" in self.st.oddities:
            return self.send_bytes(200, b"{}")
        return self.bad_request("The request body is not valid JSON.")

    def bad_request(self, text):
        for flaw, (status, leak) in LEAKS.items():
            if flaw in self.st.flaws:
                return self.error(status, leak)
        if "error-positions" in self.st.oddities:
            if text == "The request body is not valid JSON.":
                text = "The request body is not valid JSON: it breaks off at line 1 column %d." % (
                    len(getattr(self, "body", b"")) or 1)
            else:
                text = "Bad request: missing field `messages` (a list of messages is expected)."
        return self.error(422 if "errors-422" in self.st.oddities else 400, text)

    # --- the assistant -------------------------------------------------------------------
    def answer(self, chat, msgs, hist):
        st = self.st
        if msgs is None:  # session start
            if chat.ended and "crash-on-ended" in st.flaws:
                return self.error(500, "Chat state is inconsistent.")
            if chat.ended and "ended-reopens" in st.oddities:
                chat.ended = False
            if chat.ended:
                return self.reply(200, [message(st, "system", "This conversation is closed.")], {"endSession": True})
            if "start-201" in st.oddities:
                return self.reply(201, [message(st, "system", "Welcome to the peer bridge.")],
                                  {"disableSendHistory": True} if chat.private else None)
            private = chat.private and "forget-private-on-reopen" not in st.flaws
            return self.reply(200, None, {"disableSendHistory": True} if private else None)
        if chat.ended:
            return self.reply(200, [message(st, "system", "This conversation is closed.")], {"endSession": True})
        if msgs and all(not m.get("content", "").strip() for m in msgs):
            if "empty-send-500" in st.flaws:
                return self.error(500, "Nothing to answer.")
            if "empty-send-ends" in st.flaws:
                return self.error(200, "Nothing to answer, goodbye.", end=True)
            if "empty-send-html" in st.flaws:
                return self.send_bytes(200, HTML, ctype="text/html")
            if "empty-send-hangup" in st.flaws:
                self.close_connection = True
                return
            if "empty-send-html-500" in st.flaws:
                return self.send_bytes(500, HTML, ctype="text/html")
            if "empty-send-nudge" in st.oddities:
                return self.reply(200, [message(st, "system", "Type a message first.")], {"endSession": False})
        out, opts = [], {}
        varying = "varying" in st.oddities or "varying-escaped-error" in st.flaws
        for m in msgs:
            text = m.get("content", "").strip()
            if not text:
                continue
            if "varying-escaped-error" in st.flaws and "\\/" in raw_content(self.raw):
                st.counter += 1
                out.append(message(st, "system", "Sorry, that link could not be read. [#%d]" % st.counter))
                continue
            low = text.lower()
            if low.startswith("please keep this word:"):
                word = text.split(":", 1)[1].strip()
                if "forget-without-history" not in st.flaws and "echo-history" not in st.flaws:
                    chat.word = word
                    st.word = word
                said = "Noted, I will keep that word for you."
                if "word-echo" in st.oddities:
                    said = "Noted, I will keep \u201c%s\u201d for you." % word
            elif low == "which word did i give you?":
                if "echo-history" in st.flaws:
                    said = "You wrote: " + " / ".join(h.get("content", "") for h in (hist or []))
                else:
                    word = chat.word
                    for h in reversed(hist or []):
                        c = h.get("content", "")
                        if word is None and h.get("from") == "user" and c.lower().startswith("please keep this word:"):
                            word = c.split(":", 1)[1].strip()
                    said = "The word was %s." % word if word else "You gave me no word."
                    if word and "word-echo" in st.oddities:
                        kept = sum(1 for c in st.chats.values() if c.word)
                        said += " (I keep words for %d chat%s.)" % (kept, "" if kept == 1 else "s")
            elif low == "repeat your last answer":
                found = None
                for h in reversed(hist or []):
                    hid = h.get("id", "")
                    k = hid if "case-sensitive-ids" in st.flaws else hid.upper()
                    if k in chat.said:
                        found = chat.said[k]
                        break
                if hist is None:
                    found = chat.last
                said = "My last answer was: %s" % found if found else "I have not answered yet."
            elif low == "go private":
                chat.private = True
                chat.reenable = "reenable-history" in st.flaws
                opts["disableSendHistory"] = True
                said = "Private mode: I keep the context myself."
            elif low == "go public":
                chat.private = False
                opts["disableSendHistory"] = False
                said = "Public mode: history is sent again."
            elif low == "farewell":
                said = "Farewell, and thanks for chatting."
                if "no-end" not in st.flaws:
                    chat.ended = True
                    opts["endSession"] = True
                if "silent-end" in st.flaws:
                    continue
            else:
                said = "You said: %s" % (raw_content(self.raw) if "raw-text" in st.flaws else text)
            if low in ("go private", "go public") and "silent-toggle" in st.oddities:
                continue
            if low not in ("go private", "go public") and getattr(chat, "reenable", False):
                chat.reenable = False
                chat.private = False
                opts["disableSendHistory"] = False
            if "huge-answers" in st.oddities:
                said += " " + "x" * (11 * 1024 * 1024)
            if varying:
                st.counter += 1
                said += " [#%d]" % st.counter
            if "model-wording" in st.oddities:
                said += " ~" + os.urandom(3).hex()
            reply = message(st, "assistant", said)
            if "cite-links" in st.oddities:
                links = re.findall(r"https?://[^\s]+", text)
                if links:
                    reply["sources"] = [{"title": "Link you sent", "url": u} for u in links]
            if "preface-note" in st.oddities:
                out.append(message(st, "system", "(answered by peer bridge, model p-1)"))
            prev = getattr(chat, "last_msg", None)
            if "edit-previous" in st.oddities and prev and not any(o["id"] == prev["id"] for o in out):
                out.append(dict(prev, content="\u2713 " + prev["content"]))
            if "edit-restored" in st.oddities:
                # The last assistant message the app sent back, as the app has it: its id
                # (whoever's process wrote it), updated in place.
                shown = [h for h in (hist or []) if h.get("from") == "assistant" and isinstance(h.get("id"), str)]
                if shown and not any(o["id"].upper() == shown[-1]["id"].upper() for o in out):
                    h = shown[-1]
                    out.append(message(st, "assistant", "\u2713 " + h.get("content", "")))
                    out[-1]["id"] = h["id"]
            if "echo-user-first" in st.oddities and m.get("id"):
                out.append({"id": m["id"], "from": "user", "content": m["content"], "sources": []})
            chat.last_msg = reply
            if "reply-with-request-id" in st.flaws and said.startswith("You said:") and m.get("id"):
                reply["id"] = m["id"]
            k = reply["id"] if "case-sensitive-ids" in st.flaws else reply["id"].upper()
            chat.said[k] = said
            chat.last = said
            out.append(reply)
            if "length-note" in st.oddities:
                out.append(message(st, "system", "(%d characters)" % len(said)))
            if chat.private and "private-reassert" in st.oddities and "disableSendHistory" not in opts:
                opts["disableSendHistory"] = True
            if "answer-twice" in st.flaws and hist and hist[-1].get("id") == m.get("id"):
                out.append(message(st, "assistant", said))
            if "double-answer-reworded" in st.flaws and hist and hist[-1].get("id") == m.get("id"):
                again = message(st, "assistant", "In other words: " + said)
                chat.said[again["id"].upper()] = again["content"]
                out.append(again)
        return self.reply(200, out, opts or None)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--key")
    p.add_argument("--flaw", action="append", default=[], choices=sorted(FLAWS))
    p.add_argument("--oddity", action="append", default=[], choices=sorted(ODDITIES))
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--list", action="store_true")
    a = p.parse_args()
    if a.list:
        for k, v in sorted(FLAWS.items()):
            print("flaw\t%s\t%s" % (k, v))
        for k, v in sorted(ODDITIES.items()):
            print("oddity\t%s\t%s" % (k, v))
        return
    late = "late-listen" in a.oddity
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler, bind_and_activate=not late)
    if late:
        # The address is printed first; the socket listens half a second later.
        srv.server_bind()
        srv.server_address = srv.socket.getsockname()
    srv.daemon_threads = True
    srv.state = State(a.key, a.flaw, a.oddity)
    sys.stderr.write("peer bridge ready, serving on http://127.0.0.1:%d (flaws: %s)\n"
                     % (srv.server_address[1], ",".join(a.flaw) or "none"))
    sys.stderr.flush()
    if late:
        time.sleep(0.5)
        srv.server_activate()
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
