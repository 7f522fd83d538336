// A Bridle agent runtime on the canonical socket.io-client 4, written from the spec: auth
// {apiKey, agentId} from the environment, `register` on every (re)connect, notes marked with
// kind, accumulated text flushed every 100 ms (the BridleRepository's cadence), stream_end with
// the returned final text, which extends the last flush by whatever arrived since (no closing
// flush, as the spec's runtime allows). Env: BRIDLE_URL, BRIDLE_API_KEY, BRIDLE_AGENT_ID.
// AGENT_DIVERGE plants one divergence: `root-namespace` (connects to BRIDLE_URL itself, the
// namespace `/`), `end-replaces` (stream_end carries a text that does not extend the last flush).
const { io } = require("socket.io-client");

const diverge = process.env.AGENT_DIVERGE || "";
const nsp = diverge === "root-namespace" ? "" : "/ws/agent";
const socket = io(process.env.BRIDLE_URL + nsp, {
  auth: { apiKey: process.env.BRIDLE_API_KEY, agentId: process.env.BRIDLE_AGENT_ID },
  reconnectionDelay: 200,
  reconnectionDelayMax: 1000,
});
socket.on("connect", () => socket.emit("register", {}));

const parts = (text) => [{ type: "text", text }];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function streamSend(clientId, produce) {
  const messageId = require("crypto").randomUUID();
  let latest = "";
  let sent = "";
  const flush = () => {
    if (latest !== sent) {
      sent = latest;
      socket.emit("stream", { clientId, text: latest, parts: parts(latest), messageId, ts: Date.now() });
    }
  };
  const timer = setInterval(flush, 100);
  let final = await produce((acc) => { latest = acc; });
  clearInterval(timer);
  if (diverge === "end-replaces") final = "A different ending.";
  socket.emit("stream_end", { clientId, text: final, parts: parts(final), messageId, ts: Date.now() });
}

socket.on("message", async (m) => {
  const clientId = m.clientId;
  socket.emit("typing", { clientId, ts: Date.now() });
  const note = (kind, text) =>
    socket.emit("message", { clientId, kind, text, parts: parts(text), messageId: require("crypto").randomUUID(), ts: Date.now() });
  note("thinking", "Reading: " + m.text);
  note("tool", "→ searchWeb");
  await streamSend(clientId, async (onChunk) => {
    let acc = "";
    const tokens = ("Once upon a time, " + m.text + " became a story, and then it ended.").split(/(?<= )/);
    for (const token of tokens) {
      await sleep(35);
      acc += token;
      onChunk(acc);
    }
    return acc;
  });
});
