#!/usr/bin/env python3
"""Auditor-written bb provider bridge (from the protocol spec only).
Usage: bridge.py [--mode M[,M2]]   (or env AUDIT_MODE)
Provider command from $BB_REF_PROVIDER_COMMAND (shlex-split).  I/O side log: $AUDIT_IOLOG.

Committed copy of the replay audit's bridge (/work/audit-replay-bb), with its provider.py and
its recorded cells audit/basic and audit/interrupt (bridge and provider lanes; `bridgewire
record bb --no-redact`).
tests/bb_py_peer.rs replays the cell with --mode drop-prompt (the provider gets an empty prompt)
and --mode prompt-wrapped (legal: the prompt in content blocks under another field), and the
interrupt cell with --mode kill-no-cancel (legal: the provider child killed at the interrupt) and
--mode hang (a replay ended by SIGTERM); the handshake faults --mode wrong-version (protocolVersion 1,
grammarVersions [2, 2]) and --mode bad-handshake (protocolVersion 1, grammarVersions [1, 1], fork
"sometimes"), each fault named, and the legal --mode ext-fields (extra capabilities and fields);
the legal --mode fresh-ids (a providerThreadId minted per session, random provider request ids:
what differs run to run, which normalization sets aside) passes the replay of audit/basic."""
import sys, os, json, threading, queue, subprocess, shlex, time, signal, uuid

args = sys.argv[1:]
MODES = set(filter(None, os.environ.get("AUDIT_MODE", "").split(",")))
if "--mode" in args:
    MODES |= set(filter(None, args[args.index("--mode") + 1].split(",")))
M = lambda k: k in MODES

IOLOG = os.environ.get("AUDIT_IOLOG")
iolog_lock = threading.Lock()
iolog_f = open(IOLOG, "ab") if IOLOG else None

def log(d, line_bytes, tid=None):
    if not iolog_f:
        return
    rec = {"d": d, "tid": tid, "line": line_bytes.decode("utf-8", "surrogateescape")}
    with iolog_lock:
        iolog_f.write(json.dumps(rec, ensure_ascii=True).encode() + b"\n")
        iolog_f.flush()

def err(msg):
    sys.stderr.write("[audit-bridge] %s\n" % msg)
    sys.stderr.flush()

out = sys.stdout.buffer
out_lock = threading.Lock()
EOL = b"\r\n" if M("crlf") else b"\n"

def dumps(obj):
    if M("keyorder") and isinstance(obj, dict):
        obj = dict(reversed(list(obj.items())))
    return json.dumps(obj, ensure_ascii=M("ascii-escape"), separators=(",", ":")).encode()

def write_raw(b, log_it=True):
    with out_lock:
        if log_it:
            log("out", b)
        if M("buffered"):
            data = b + EOL
            # dribble the line out in small pieces with pauses (partial lines across writes)
            for i in range(0, len(data), 7):
                out.write(data[i:i + 7]); out.flush()
                if i % 7000 == 0:
                    time.sleep(0.001)
        else:
            out.write(b + EOL); out.flush()

def send(obj):
    if M("stderr"):
        err("about to write %s" % (obj.get("method") or ("response " + str(obj.get("id")))))
    if M("noise-stdout"):
        write_raw(b"# audit bridge: stray debug line (not protocol traffic)")
        write_raw(b"")
    write_raw(dumps(obj))

def respond(rid, result):
    r = {"jsonrpc": "2.0", "id": rid, "result": result}
    if M("ext-fields"):
        r["x-audit"] = {"note": "unknown top-level field"}
    send(r)

def respond_err(rid, code, msg):
    send({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": msg}})

def notify(method, params):
    if M("ext-fields"):
        params = dict(params, xAuditExtension={"v": 1})
    send({"jsonrpc": "2.0", "method": method, "params": params})

def deltas(tid, ds):
    if M("ext-fields"):
        ds = [dict(d, xAuditField=True) for d in ds]
    if M("split-batches") and len(ds) > 1:
        for d in ds:
            notify("thread/delta", {"threadId": tid, "deltas": [d]})
        return
    notify("thread/delta", {"threadId": tid, "deltas": ds})

Q = queue.Queue()

def stdin_reader():
    buf = b""
    while True:
        chunk = sys.stdin.buffer.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            log("in", line)
            Q.put(("rt", line))
    Q.put(("eof", None))

class Thread:
    def __init__(self, tid):
        self.tid = tid
        self.child = None
        self.pid_thread = None
        self.pending = {}        # provider req id -> callback
        self.next_id = 1
        self.provider_thread_id = None
        self.turn = None          # dict(prompt_id=..)
        self.stop_rid = None
        self.text = ""
        self.child_done = threading.Event()

threads = {}
handles = {}           # minted providerThreadId -> the provider's session id (--mode fresh-ids)
runtime_pending = {}   # our request id -> callback
rt_next = [1]

def prov_send(th, obj):
    b = json.dumps(obj, separators=(",", ":")).encode()
    log("pout", b, th.tid)
    try:
        th.child.stdin.write(b + b"\n"); th.child.stdin.flush()
    except Exception as e:
        err("provider write failed: %s" % e)

def prov_request(th, method, params, cb):
    if M("fresh-ids"):   # legal (the bridge's own requests): a random id, other each run
        rid = "req-" + uuid.uuid4().hex
    elif M("prov-string-ids"):
        rid = "req-%d" % th.next_id
    else:
        rid = th.next_id + (1000 if M("ids") else 0)
    th.next_id += 1
    th.pending[str(rid)] = cb
    prov_send(th, {"jsonrpc": "2.0", "id": rid, "method": method, "params": params})

def prov_reader(th, child):
    buf = b""
    while True:
        chunk = child.stdout.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            log("pin", line, th.tid)
            Q.put(("prov", th, line))
    Q.put(("provexit", th, child))

def spawn(th):
    cmd = os.environ.get("BB_REF_PROVIDER_COMMAND")
    if not cmd:
        raise RuntimeError("BB_REF_PROVIDER_COMMAND not set")
    env = {k: v for k, v in os.environ.items() if k not in ("AUDIT_IOLOG", "AUDIT_MODE")}
    env["BRIDGEWIRE_RECORD_THREAD"] = th.tid
    kw = {}
    if M("orphan"):
        kw["start_new_session"] = True
    argv = shlex.split(cmd)
    if M("orphan"):
        # flaw: a detached grandchild that outlives the bridge
        subprocess.Popen(["sleep", "123.456"], start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    th.child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, **kw)
    t = threading.Thread(target=prov_reader, args=(th, th.child), daemon=True)
    t.start()

def release_child(th, wait=2.0):
    c = th.child
    th.child = None
    if not c:
        return
    try:
        c.stdin.close()
    except Exception:
        pass
    try:
        c.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        c.kill(); c.wait()

def open_session(rid, p, method):
    tid = p["threadId"]
    th = threads.get(tid) or Thread(tid)
    threads[tid] = th
    spawn(th)
    if M("slow-start"):
        time.sleep(1.0)
    def after_init(msg):
        def after_session(msg2):
            if "error" in msg2:
                respond_err(rid, -32000, "provider refused session"); return
            th.provider_thread_id = msg2["result"]["sessionId"]
            handle = th.provider_thread_id
            if M("fresh-ids"):
                # legal (the handle is the bridge's to choose, unique on the host, never a
                # per-process counter): a fresh handle per session, so it differs run to run
                if method == "thread/resume":
                    handle = p["providerThreadId"]
                else:
                    handle = "audit-" + uuid.uuid4().hex
                handles[handle] = th.provider_thread_id
            notify("thread/identity", {"threadId": tid, "providerThreadId": handle, "sessionRestorable": True})
            deltas(tid, [{"kind": "session.reset"}])
            respond(rid, {"providerThreadId": handle, "sessionRestorable": True})
        if method == "thread/resume":
            sid = handles.get(p["providerThreadId"], p["providerThreadId"])
            prov_request(th, "session/load", {"sessionId": sid, "cwd": p.get("cwd")}, after_session)
        else:
            prov_request(th, "session/create" if M("wrong-prov-method") else "session/new", {"cwd": p.get("cwd")}, after_session)
    prov_request(th, "initialize", {"client": "audit-bridge"}, after_init)

def finish_turn(th, status):
    tid = th.tid
    ds = []
    if th.text.strip():
        ds.append({"kind": "item.textClose", "key": {"channel": "assistant"}, "channel": "agentMessage", "text": th.text})
    ds.append({"kind": "turn.boundary", "status": status})
    th.text = ""
    th.turn = None
    if M("no-settle"):
        ds = ds[:-1]
    if M("malformed-json"):
        # flaw: the settling line goes out truncated (not valid JSON)
        b = dumps({"jsonrpc": "2.0", "method": "thread/delta", "params": {"threadId": tid, "deltas": ds}})
        write_raw(b[:-3])
        return
    if M("grammar-known"):
        ds.append({"kind": "turn.boundary", "status": "completed", "providerTurnId": "never-opened"})
    deltas(tid, ds)

def start_turn(rid, p):
    tid = p["threadId"]
    th = threads.get(tid)
    if not th or not th.child:
        respond_err(rid, -32602, "No session for thread %s" % tid); return
    if M("hang") :
        return  # flaw: never answers turn/start, never runs the turn
    text = " ".join(i.get("text", "") for i in p.get("input", []) if isinstance(i, dict))
    if not M("late-response") and not M("very-late-response"):
        respond(rid, {})
    acc = {"kind": "input.accepted", "clientRequestId": p["clientRequestId"]}
    if M("drop-crid"):
        del acc["clientRequestId"]
    if M("open-first"):
        deltas(tid, [{"kind": "turn.open"}]); deltas(tid, [acc])
    else:
        deltas(tid, [acc, {"kind": "turn.open"}])
    if M("extra-notify"):
        notify("provider/raw", {"threadId": tid, "coverage": "noise", "payload": {"audit": "turn starting"}})
        notify("x-audit/vendorPing", {"threadId": tid, "n": 1})
    if M("late-response"):
        respond(rid, {})
    th.turn = {"rid": rid}
    def tool_then_prompt():
        def after_prompt(msg):
            if th.turn is None and th.stop_rid is None:
                return
            stop = (msg.get("result") or {}).get("stopReason")
            finish_turn(th, "interrupted" if stop == "cancelled" else "completed")
            if M("very-late-response"):
                respond(rid, {})
            if th.stop_rid is not None:
                srid = th.stop_rid; th.stop_rid = None
                if M("stop-boundary-after"):
                    pass
                release_child(th)
                respond(srid, {})
        ptext = "" if M("drop-prompt") else text   # flaw: the user's prompt never reaches the provider
        params = {"sessionId": th.provider_thread_id, "text": ptext}
        if M("prompt-wrapped"):   # legal (the provider request is the bridge's own): content blocks, a preamble
            params = {"sessionId": th.provider_thread_id,
                      "messages": [{"role": "user", "content": [{"type": "text", "text": "The user says: " + text}]}]}
        prov_request(th, "session/prompt", params, after_prompt)
    if "tool" in text:
        key = {"providerItemId": "tool-%s-1" % tid}
        deltas(tid, [{"kind": "item.open", "key": key, "item": {"type": "tool", "tool": "audit_lookup", "server": "bb", "args": {"q": text}}}])
        rq = ("call-%d" % rt_next[0]) if not M("ids") else rt_next[0] + 500
        rt_next[0] += 1
        def on_tool(msg):
            res = msg.get("result") or {}
            deltas(tid, [{"kind": "item.close", "key": key, "status": "completed",
                          "item": {"type": "tool", "tool": "audit_lookup", "server": "bb", "args": {"q": text}, "result": res}}])
            if M("dup-close"):   # legal: repeated close for a settled provider-identified key is deduped (spec, Item lifecycle)
                deltas(tid, [{"kind": "item.close", "key": key, "status": "completed",
                              "item": {"type": "tool", "tool": "audit_lookup", "server": "bb", "args": {"q": text}, "result": res}}])
            tool_then_prompt()
        runtime_pending[str(rq)] = on_tool
        send({"jsonrpc": "2.0", "id": rq, "method": "item/tool/call",
              "params": {"providerThreadId": th.provider_thread_id, "threadId": tid, "turnId": None,
                         "callId": key["providerItemId"], "tool": "audit_lookup", "arguments": {"q": text}}})
    else:
        tool_then_prompt()

text_count = [0]
def on_update(th, p):
    t = p.get("text", "")
    th.text += t
    text_count[0] += 1
    if M("crash-mid-turn") and text_count[0] == 2:
        err("simulated crash"); os._exit(3)
    if M("nonutf8") and text_count[0] == 2:
        b = dumps({"jsonrpc": "2.0", "method": "thread/delta", "params": {"threadId": th.tid, "deltas": [
            {"kind": "item.textDelta", "key": {"channel": "assistant"}, "channel": "agentMessage", "text": "XXBADXX"}]}})
        write_raw(b.replace(b"XXBADXX", b"\xff\xfe bad \xc3"))
        return
    if M("bad-channel") and text_count[0] == 2:
        deltas(th.tid, [{"kind": "item.textDelta", "key": {"channel": "assistant"}, "channel": "speech", "text": t}])
        return
    if M("wrong-text"):
        t = t.upper()[::-1] + "!"   # flaw: provider output corrupted (same delta count)
    if M("drop-text") and text_count[0] == 2:
        return  # flaw: provider output silently lost
    if M("rechunk") and len(t) > 1:
        h = len(t) // 2
        deltas(th.tid, [{"kind": "item.textDelta", "key": {"channel": "assistant"}, "channel": "agentMessage", "text": t[:h]}])
        deltas(th.tid, [{"kind": "item.textDelta", "key": {"channel": "assistant"}, "channel": "agentMessage", "text": t[h:]}])
        return
    deltas(th.tid, [{"kind": "item.textDelta", "key": {"channel": "assistant"}, "channel": "agentMessage", "text": t}])
    if M("flood-out") and text_count[0] == 2:
        junk = dumps({"jsonrpc": "2.0", "method": "provider/raw", "params": {"threadId": th.tid, "coverage": "noise", "payload": "z" * 4000}})
        while True:
            write_raw(junk, log_it=False)
    if M("huge-out") and text_count[0] == 2:
        write_raw(dumps({"jsonrpc": "2.0", "method": "provider/raw", "params": {"threadId": th.tid, "coverage": "noise", "payload": "Q" * (70 * 1024 * 1024)}}), log_it=False)

def stop(rid, p):
    tid = p["threadId"]
    th = threads.get(tid)
    if M("stop-no-answer"):
        return
    if not th:
        respond(rid, {}); return
    if p.get("intent") == "interrupt" and th.turn is not None:
        if M("interrupt-as-release"):
            th.turn = None; release_child(th); respond(rid, {}); return
        if M("stop-boundary-after"):
            # flaw: answers the stop first, settles afterwards
            th.turn = None
            prov_send(th, {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": th.provider_thread_id}})
            respond(rid, {})
            time.sleep(0.2)
            finish_turn(th, "interrupted")
            release_child(th)
            return
        if M("kill-no-cancel"):
            # legal (topology is bridge-internal): settle the turn ourselves, kill the provider child
            c = th.child; th.child = None; c.kill(); c.wait()
            finish_turn(th, "interrupted"); respond(rid, {}); return
        th.stop_rid = rid
        prov_send(th, {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": th.provider_thread_id}})
        return
    if M("release-fabricates") and p.get("intent") == "release":
        deltas(tid, [{"kind": "turn.boundary", "status": "interrupted", "claimIfIdle": False}, {"kind": "turn.open"}, {"kind": "turn.boundary", "status": "interrupted"}])
    release_child(th)
    respond(rid, {})

def handle_rt(line):
    try:
        m = json.loads(line.decode("utf-8"))
    except Exception:
        return
    if not isinstance(m, dict):
        return
    meth = m.get("method"); rid = m.get("id")
    if meth is None:
        cb = runtime_pending.pop(str(rid), None)
        if cb: cb(m)
        return
    if rid is None:
        return
    p = m.get("params") or {}
    if meth == "initialize":
        if M("slow-start"):
            time.sleep(2.0)
        caps = {"grammarVersions": [3, 3], "sessionRestore": True, "threadArchive": False, "threadRename": False,
                "threadGoalClear": False, "fork": "none", "approvalEnforcedBy": "runtime", "steerMode": "queue"}
        if M("ext-fields"):
            caps["xAuditCapability"] = {"enabled": True}
        if M("wrong-version"):
            respond(rid, {"protocolVersion": 1, "capabilities": dict(caps, grammarVersions=[2, 2])}); return
        if M("bad-handshake"):   # flaw: three faults at once (version, range without 3, a fork no schema allows)
            respond(rid, {"protocolVersion": 1, "capabilities": dict(caps, grammarVersions=[1, 1], fork="sometimes")}); return
        respond(rid, {"protocolVersion": 2, "capabilities": caps})
    elif meth in ("thread/start", "thread/resume"):
        open_session(rid, p, meth)
    elif meth == "turn/start":
        start_turn(rid, p)
    elif meth == "thread/stop":
        stop(rid, p)
    else:
        respond_err(rid, -32601, "Method not found: %s" % meth)

def main():
    if M("slow-start"):
        time.sleep(1.5)
    threading.Thread(target=stdin_reader, daemon=True).start()
    if M("stderr"):
        def chatter():
            i = 0
            while True:
                err("chatter %d: %s" % (i, "x" * 200)); i += 1; time.sleep(0.005)
        threading.Thread(target=chatter, daemon=True).start()
    while True:
        ev = Q.get()
        if ev[0] == "rt":
            handle_rt(ev[1])
        elif ev[0] == "prov":
            th, line = ev[1], ev[2]
            try:
                m = json.loads(line)
            except Exception:
                continue
            if m.get("method") is None:
                cb = th.pending.pop(str(m.get("id")), None)
                if cb: cb(m)
            elif m.get("method") == "session/update":
                on_update(th, m.get("params") or {})
        elif ev[0] == "provexit":
            pass
        elif ev[0] == "eof":
            if M("ignore-eof"):
                while True:
                    time.sleep(1)
            for th in list(threads.values()):
                release_child(th, 1.0)
            sys.exit(0)

main()
