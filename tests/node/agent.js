// A Bridle agent runtime on the canonical socket.io-client 4, written from the spec: auth
// {apiKey, agentId} from the environment, `register` on every (re)connect, notes marked with
// kind, accumulated text flushed every 100 ms (the BridleRepository's cadence), stream_end with
// the returned final text, which extends the last flush by whatever arrived since (no closing
// flush, as the spec's runtime allows). Env: BRIDLE_URL, BRIDLE_API_KEY, BRIDLE_AGENT_ID.
// AGENT_DIVERGE plants one divergence (DIVERGENCES; `node agent.js --list` prints them).
// AGENT_VARIANT picks a legal but unusual shape instead (VARIANTS).
const DIVERGENCES = {
  "root-namespace": "connects to BRIDLE_URL itself, the namespace `/`",
  "end-replaces": "stream_end carries a text that does not extend the last flush",
  "register-once": "emits register after its first connection only, not after reconnecting",
  "wrong-client-id": "answers under the message's clientId with `-x` appended",
  "end-new-id": "stream_end carries a messageId of its own, not the streams'",
  "notes-bad-kind": "notes are sent with kind \"reasoning\", which the spec does not give",
  "no-reconnect": "does not reconnect after the hub goes away",
  "exit-mid-answer": "the process exits (status 4) during its first answer, after typing",
  "exit-second-answer": "the process exits (status 4) when the second browser's message arrives, before answering it",
  "stream-after-end": "keeps streaming after its stream_end: one more stream and stream_end under the same messageId, 40 ms apart",
  "reconnect-other-id": "reconnects under BRIDLE_AGENT_ID with `-2` appended",
  "after-reconnect-delta": "after reconnecting, streams each flush as a delta (what arrived since the last flush), not the accumulation",
  "second-delta": "answering the second browser, streams each flush as a delta (what arrived since the last flush), not the accumulation",
  "late-after-end": "700 ms after its first answer's stream_end, sends one more stream under that closed messageId",
  "text-number": "its first answer's third stream carries text 42 (a number; its parts keep the text)",
  "end-parts-mismatch": "stream_end's parts say another text than its text",
};
const VARIANTS = {
  "quick-end": "answers before the first 100 ms flush: no stream frame, only stream_end (the runtime's timer never fired)",
  "plain-answer": "answers with one complete, non-streamed message (no typing, no notes, no stream)",
  "no-parts": "sends stream and stream_end with text only, no parts (the spec's backward compatibility: receivers build parts from text)",
  "unmarked-notes": "sends its notes without kind: inside the turn they are notes by their place (the spec asks runtimes to set kind, a should)",
  "ext-events": "emits an extension event `status {state}` (no clientId: not an answer) mid-turn, after typing and before its stream_end, and one after the turn",
  "slow-upgrade": "answers as plain-answer does, on a slow network: its WebSocket upgrade probe is answered 600 ms late, so the upgrade is still under way after its answer",
  "late-followup": "when a second browser asks, first sends the browser it answered before a plain message under that browser's clientId, then answers the second",
  "plain-before-typing": "says \"Let me look into that.\" as a plain message (no turn open) before it opens its turn and streams",
  "slow-turn-after-plain": "as plain-before-typing, but opens its turn 1.5 s after the plain message (a runtime that looks things up before it answers)",
  "first-turn-late": "answers the first message with a plain \"Let me look into that.\" and opens that answer's turn late (past the check's --wait-ms 5000): 120 ms into its answer to the next browser, which it answers at once",
  "first-turn-late-typing": "as first-turn-late, but only that late turn's typing comes during the next browser's answer; its notes and stream follow 1.5 s later, after that answer's stream_end",
};
if (process.argv[2] === "--list") {
  for (const [k, v] of Object.entries(DIVERGENCES)) console.log(`${k}\t${v}`);
  process.exit(0);
}
const variant = process.env.AGENT_VARIANT || "";
if (variant === "slow-upgrade") {
  // A slow network under engine.io-client's WebSocket: each socket's first frame (the upgrade
  // probe's answer) arrives 600 ms late, and later frames queue behind it, in order.
  const { WebSocket } = require("ws");
  const emit = WebSocket.prototype.emit;
  WebSocket.prototype.emit = function (name, ...args) {
    if (name !== "message") return emit.call(this, name, ...args);
    if (this.bwQueue === undefined) {
      this.bwQueue = [];
      setTimeout(() => {
        for (const a of this.bwQueue) emit.call(this, "message", ...a);
        this.bwQueue = null;
      }, 600);
    } else if (this.bwQueue === null) {
      return emit.call(this, name, ...args);
    }
    this.bwQueue.push(args);
    return true;
  };
}
const { io } = require("socket.io-client");

const diverge = process.env.AGENT_DIVERGE || "";
if (diverge && !DIVERGENCES[diverge]) {
  console.error(`agent.js: unknown divergence ${diverge}`);
  process.exit(2);
}
if (variant && !VARIANTS[variant]) {
  console.error(`agent.js: unknown variant ${variant}`);
  process.exit(2);
}
let connected = 0;
const nsp = diverge === "root-namespace" ? "" : "/ws/agent";
const socket = io(process.env.BRIDLE_URL + nsp, {
  // A function: called again for every reconnection.
  auth: (cb) =>
    cb({
      apiKey: process.env.BRIDLE_API_KEY,
      agentId: process.env.BRIDLE_AGENT_ID + (diverge === "reconnect-other-id" && connected > 0 ? "-2" : ""),
    }),
  reconnection: diverge !== "no-reconnect",
  reconnectionDelay: 200,
  reconnectionDelayMax: 1000,
});
socket.on("connect", () => {
  connected += 1;
  if (diverge !== "register-once" || connected === 1) socket.emit("register", {});
});

const textParts = (text) => [{ type: "text", text }];
// Frame fields for `text`: its parts, or none at all for the no-parts variant.
const withParts = (text) => (variant === "no-parts" ? {} : { parts: textParts(text) });
const parts = textParts;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let answers = 0;
let asked = 0;
// Resolved when the second message arrives: first-turn-late opens its first answer's turn
// during the second answer, whatever the check's timing (a fixed delay raced it under load).
let secondAsked;
const secondArrived = new Promise((resolve) => (secondAsked = resolve));
let lastClient = null;
async function streamSend(clientId, produce) {
  const messageId = require("crypto").randomUUID();
  const answer = ++answers;
  if (diverge === "exit-mid-answer" && answer === 1) {
    // Its typing and notes are on the wire; the stream never starts.
    setTimeout(() => process.exit(4), 100);
    return new Promise(() => {});
  }
  let latest = "";
  let sent = "";
  let flushes = 0;
  const flush = () => {
    if (latest !== sent) {
      const delta = (diverge === "after-reconnect-delta" && connected > 1) || (diverge === "second-delta" && answer === 2);
      const text = delta ? latest.slice(sent.length) : latest;
      sent = latest;
      flushes += 1;
      const wrongType = diverge === "text-number" && answer === 1 && flushes === 3;
      socket.emit("stream", { clientId, ...withParts(text), text: wrongType ? 42 : text, messageId, ts: Date.now() });
    }
  };
  const timer = setInterval(flush, 100);
  let final = await produce((acc) => { latest = acc; });
  clearInterval(timer);
  if (diverge === "end-replaces") final = "A different ending.";
  const endId = diverge === "end-new-id" ? require("crypto").randomUUID() : messageId;
  const endParts = diverge === "end-parts-mismatch" ? { parts: textParts(final + " (edited)") } : withParts(final);
  socket.emit("stream_end", { clientId, text: final, ...endParts, messageId: endId, ts: Date.now() });
  if (diverge === "late-after-end" && answer === 1) {
    setTimeout(() => {
      const more = final + " And one more line.";
      socket.emit("stream", { clientId, text: more, ...withParts(more), messageId, ts: Date.now() });
    }, 700);
  }

  if (diverge === "stream-after-end") {
    const more = final + " The end.";
    await sleep(40);
    socket.emit("stream", { clientId, text: more, ...withParts(more), messageId, ts: Date.now() });
    await sleep(40);
    socket.emit("stream_end", { clientId, text: more, ...withParts(more), messageId, ts: Date.now() });
  }
  if (variant === "ext-events") socket.emit("status", { state: "idle" });
}

socket.on("message", async (m) => {
  const clientId = diverge === "wrong-client-id" ? m.clientId + "-x" : m.clientId;
  if (variant === "plain-answer" || variant === "slow-upgrade") {
    const text = "Once upon a time, " + m.text + " became a story, and then it ended.";
    socket.emit("message", { clientId, text, parts: parts(text), messageId: require("crypto").randomUUID(), ts: Date.now() });
    return;
  }
  if (variant === "late-followup" && lastClient !== null && lastClient !== clientId) {
    const text = "One more thing: ask me again any time.";
    socket.emit("message", { clientId: lastClient, text, parts: parts(text), messageId: require("crypto").randomUUID(), ts: Date.now() });
  }
  lastClient = clientId;
  const lateFirst = variant.startsWith("first-turn-late") && asked === 0;
  if (variant === "plain-before-typing" || variant === "slow-turn-after-plain" || lateFirst) {
    const text = "Let me look into that.";
    socket.emit("message", { clientId, text, parts: parts(text), messageId: require("crypto").randomUUID(), ts: Date.now() });
    if (variant === "slow-turn-after-plain") await sleep(1500);
  }
  asked += 1;
  if (asked === 2) secondAsked();
  if (lateFirst) {
    await Promise.race([secondArrived, sleep(15000)]);
    await sleep(120);
  }
  if (diverge === "exit-second-answer" && asked === 2) process.exit(4);
  socket.emit("typing", { clientId, ts: Date.now() });
  if (lateFirst && variant === "first-turn-late-typing") await sleep(1500);
  if (variant === "ext-events") socket.emit("status", { state: "thinking" });
  const note = (kind, text) =>
    socket.emit("message", {
      clientId, ...(variant === "unmarked-notes" ? {} : { kind: diverge === "notes-bad-kind" ? "reasoning" : kind }),
      text, parts: parts(text),
      messageId: require("crypto").randomUUID(), ts: Date.now(),
    });
  note("thinking", "Reading: " + m.text);
  note("tool", "→ searchWeb");
  await streamSend(clientId, async (onChunk) => {
    let acc = "";
    const tokens = ("Once upon a time, " + m.text + " became a story, and then it ended.").split(/(?<= )/);
    for (const token of tokens) {
      if (variant !== "quick-end") await sleep(35);
      acc += token;
      onChunk(acc);
    }
    return acc;
  });
});
