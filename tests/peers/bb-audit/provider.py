#!/usr/bin/env python3
"""Tiny json-rpc 'model' provider used for recording (written by the auditor).
bridge->provider: initialize, session/new, session/load, session/prompt (requests), session/cancel (notif)
provider->bridge: session/update {sessionId, text} notifications, responses."""
import sys, json, threading, time, uuid, os

out_lock = threading.Lock()
cancel = threading.Event()

def send(obj):
    data = json.dumps(obj) + "\n"
    with out_lock:
        sys.stdout.write(data)
        sys.stdout.flush()

def run_prompt(rid, sid, text):
    cancel.clear()
    if "flood" in text:
        chunks = ["w%d " % i for i in range(int(os.environ.get("PROV_FLOOD", "3000")))]
        delay = 0
    elif "huge" in text:
        chunks = ["H" * int(os.environ.get("PROV_HUGE", str(3 * 1024 * 1024)))]
        delay = 0
    elif "slow" in text:
        chunks = ["slow%d " % i for i in range(40)]
        delay = 0.15
    else:
        chunks = ["Hello", ", ", "you said: ", text]
        delay = 0.01
    for c in chunks:
        if cancel.is_set():
            send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "cancelled"}})
            return
        send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "text": c}})
        if delay:
            time.sleep(delay)
    send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn", "usage": {"in": len(text), "out": sum(len(c) for c in chunks)}}})

for raw in sys.stdin:
    raw = raw.rstrip("\n")
    try:
        m = json.loads(raw)
    except Exception:
        continue
    meth = m.get("method"); rid = m.get("id")
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"name": "audit-model", "version": "1"}})
    elif meth == "session/new":
        send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": "ps-" + uuid.uuid4().hex[:12]}})
    elif meth == "session/load":
        send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": m["params"]["sessionId"]}})
    elif meth == "session/prompt":
        threading.Thread(target=run_prompt, args=(rid, m["params"]["sessionId"], m["params"]["text"]), daemon=True).start()
    elif meth == "session/cancel":
        cancel.set()
    elif rid is not None:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "nope"}})
