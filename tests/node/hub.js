// A second Bridle hub, not bridgewire's: written from the spec on the canonical socket.io 4
// server and Node's http module, shaped like the NestJS hub the spec describes (gateways that
// accept the namespace and then validate in their connection handler, so a bad handshake is
// accepted and then rejected), with extensions the spec does not list:
//
// * browsers get `status {agentConnected, browsers}` right after `welcome`;
// * agents get `config {heartbeatMs}` right after they connect.
//
// The spec lists each side's events and forbids no others, so these are legal: `check bridle
// hub` lists them (spec-events-only) and judges nothing by them.
//
// Unusual but legal choices: bad handshakes are admitted then disconnected (not refused), the
// not-connected text differs from the reference hub's, a malformed browser message is dropped
// silently, HTTP answers carry no CORS headers, and the JSON answers carry fields the spec does
// not list (`uptimeMs` in both healths, `queued` in the fire-and-forget answer, `agentId` in
// the sync answer): the spec gives each answer as a TypeScript interface, which an object with
// more fields still satisfies.
//
// Env: JWT_SECRET, BRIDLE_API_KEY, BRIDLE_SYNC_TIMEOUT_MS (120000), PORT (0). Prints
// `http://127.0.0.1:PORT` first. One divergence at a time, by env HUB_DIVERGE or
// `--diverge NAME` (each breaks one spec rule; see DIVERGENCES). HUB_VARIANT or `--variant
// NAME` picks a legal but unusual shape instead (VARIANTS; `--list-variants` prints them).
const http = require("http");
const crypto = require("crypto");
const { Server } = require("socket.io");

const DIVERGENCES = {
  "accept-no-sub": "a JWT without sub is admitted (clientId undefined, never unregistered)",
  "ignore-nbf": "a JWT whose nbf (not before) is still ahead is admitted (RFC 7519 §4.1.5: it MUST NOT be accepted)",
  "accept-alg-none": "a JWT whose header says alg none is admitted unsigned (the header's algorithm trusted)",
  "no-agent-id": "hub→agent message lacks agentId",
  "foreign-client-id": "typing reaches browsers with a clientId that is not theirs (another browser's)",
  "foreign-agent-id": "typing reaches browsers with an agentId that is not theirs (another agent's)",
  "api-key-any-case": "the apiKey is compared case-insensitively (an agent with the key's case flipped is admitted)",
  "admin-any-case": "a JWT whose roles include 'admin' in lower case is welcomed as 'admin'",
  "ts-seconds": "events relayed to browsers carry ts in epoch seconds, not milliseconds",
  "sync-timeout-ts-seconds": "POST /message/sync's timeout answer carries ts in epoch seconds, not milliseconds",
  "drop-explicit-images": "image parts of a browser's explicit parts are dropped on the way to the agent",
  "health-any-agent": "GET /api/agent/:agentId/health says agentConnected when any agent is connected, whatever its agentId",
  "clobber-same-user": "browsers kept by clientId: a second browser of one user replaces the first",
  "takeover-offline": "an agent's disconnect unregisters its agentId even after a newer agent took over",
  "forward-malformed": "null messages and non-array parts are forwarded to the agent",
  "concat-sync-timeout": "after streams, the sync timeout answers the concatenated snapshots",
  "admin-as-sub": "an ADMIN browser is welcomed under its JWT sub, not 'admin'",
  "welcome-uuid": "each browser is given a random clientId (a UUID per connection), not its JWT sub, and routed under it",
  "no-browser-pong": "a browser's ping is not answered (agents' are)",
  "any-agent": "a browser message reaches every connected agent, not only its agentId's",
  "first-agent": "a browser message reaches the agent connected first (the longest connected), whatever its agentId",
  "all-browsers": "agent frames reach every browser of the agentId, whatever clientId they carry",
  "misroute": "agent frames reach every browser of the agentId but the one whose clientId they carry (the addressed browser gets no answer)",
  "not-connected-silent": "a message for an agentId no agent serves is dropped without an answer (never 'Agent is not connected')",
  "images-first": "legacy text + images: image parts before the text part",
  "end-new-id": "stream_end reaches browsers under a fresh messageId",
  "stream-deltas": "stream frames reach browsers as the new suffix only, not the accumulation",
  "notes-no-kind": "notes reach browsers without their kind",
  "keep-dead-agent": "an agent's disconnect leaves its agentId registered (messages go nowhere)",
  "health-no-count": "/api/agent/health lacks browserClients",
  "health-count-short": "GET /api/agent/:agentId/health counts one browser fewer than are connected (never below 0)",
  "never-register": "an agent is admitted and its frames relayed, but never registered under its agentId (browser messages are answered 'not connected')",
  "no-agent-health": "GET /api/agent/:agentId/health answers 404 (the hub-wide health still answers)",
  "message-202": "POST /message answers 202",
  "sync-no-message-id": "POST /message/sync answers the agent's text as {text, ts}, without messageId",
  "stream-end-alias": "browsers get each stream_end twice: as stream_end and as `streamEnd`, a look-alike of the spec's name",
  "polling-only": "serves HTTP long-polling only (socket.io `transports: ['polling']`): the WebSocket upgrade the spec's transport names (\"Socket.IO (WebSocket upgrade)\") is refused",
  "drop-typing": "typing is not relayed to browsers (stream and stream_end are)",
  "crash-on-null": "the process exits when a browser's message is null",
  "ts-string": "events relayed to browsers carry ts as a string of digits, not a number",
  "ts-micros": "events relayed to browsers carry ts in epoch microseconds, not milliseconds",
  "end-as-last-stream": "stream_end reaches browsers with the last stream's text and parts, losing what the agent's final text added",
  "end-as-message": "stream_end reaches browsers as a `message` event (its payload unchanged but for type)",
  "stream-after-end": "each stream is held back until the agent's next frame, so the last reaches browsers after stream_end",
  "crash-on-message": "the process exits (status 3) on a browser's first message",
  "drop-stream-end": "stream_end is not relayed to browsers (typing and stream are; HTTP sync still gets it)",
  "status-flood": "browsers get a burst of 100 `status` events at welcome, then one every 2 ms (ten times the flood threshold: a cell that ends within 100 ms, or a loaded machine that fires the timer late, still sees a flood)",
  "message-flood": "browsers get a spec `message` (a notice) every 2 ms after welcome, mixed into every relay they get",
  "takeover-keep-old": "a second agent with the same agentId is admitted and kept connected, but browser messages keep going to the first (neither refused nor taking over)",
  "admin-routes-as-sub": "an ADMIN browser is welcomed as 'admin' but its messages reach the agent under its JWT sub, and replies are routed to it by the sub",
  "health-sticky": "the hub-wide health's agentConnected stays true once any agent has connected, after every agent has left",
  "not-connected-broadcast": "the 'Agent is not connected' answer goes to every browser on /ws/client, those of other agentIds too",
  "sync-tool-note": "POST /message/sync answers with the agent's first message that is not a `kind: 'thinking'` note (a `kind: 'tool'` note is taken for the answer)",
  "double-forward": "each message for the agent (a browser's, an HTTP request's) is forwarded to it twice, the second under a fresh messageId",
  "no-client-id": "hub→agent messages lack clientId (the agent has no browser to address its answers to)",
  "http-parts-text-only": "POST /message forwards explicit parts as one text part built from text (the image and file parts lost)",
  "http-drop-images": "POST /message and /message/sync build parts from text alone, dropping legacy images",
  "forward-no-text": "a browser message without text is forwarded to the agent without text",
  "pong-broadcast": "a browser's ping is answered with a pong to every browser on /ws/client",
  "agent-text-upper": "the text of each message forwarded to the agent is upper-cased (its parts unchanged)",
  "pong-ts-string": "a browser's ping is answered with a pong whose ts is a string of digits, not a number",
  "small-frames": "Engine.IO's maxHttpBufferSize is 200 bytes: the hub closes any connection that sends it a larger frame (an ADMIN browser's handshake, an agent's reply with its parts, a long accumulation)",
  "tiny-frames": "Engine.IO's maxHttpBufferSize is 100 bytes: the hub closes any connection whose handshake is larger (a browser's CONNECT with its JWT, an agent's with a long agentId), so the spec's traffic cannot even connect",
  "sync-in-turn-note": "POST /message/sync answers with the agent's first unmarked message, one sent mid-turn (after typing, before stream_end: a note) too",
};
const VARIANTS = {
  "own-ids": "events relayed to browsers also carry the receiving browser's own clientId and agentId (extensions: they name the recipient itself)",
  "part-fields": "each part relayed to browsers carries a field the spec does not list (`hubSeen: true`: an extension inside the part, where own-ids puts them beside it)",
  "no-config": "agents get no `config` at connect (an extension: the spec owes them none)",
  "ts-fraction": "events relayed to browsers carry the hub's own clock, epoch milliseconds with a fraction (performance.timeOrigin + performance.now()), in place of the agent's ts (a number in milliseconds, as the spec types it)",
  "status-per-frame": "browsers get three `status` events beside every frame relayed to them (extensions in step with the traffic: over 50 a second while a stream is relayed fast, none to a quiet browser)",
  "frame-limit": "Engine.IO's maxHttpBufferSize is 4096 bytes, not socket.io's 1 MB: a larger frame closes its connection (the spec names no frame size; the check's spec traffic stays under it)",
  "refuse-second-agent": "a second agent connection with an agentId already served is admitted, then disconnected (refused): the first keeps serving",
  "exception-reply": "malformed messages are dropped and answered with a framework `exception` event (an extension: the spec gives no answer to malformed input and forbids no event)",
};
// Faults a replay meets mid-recording rather than spec rules `check` judges (`--replay-fault
// NAME`, HUB_REPLAY_FAULT; `--list-replay-faults` prints them): what `replay bridle` must name
// once, in the cell that met it. The hub is otherwise correct; they combine with --diverge.
const REPLAY_FAULTS = {
  "kick-mid": "the 4th stream frame relayed is not relayed: the addressed browser's connections are disconnected instead",
  "hang-mid": "at the 4th stream frame relayed the event loop blocks for HUB_HANG_MS (30000) ms: the hub answers nothing meanwhile",
  "crash-mid": "the process exits (status 3) at the 4th stream frame relayed",
  "bad-utf8-after-end": "after each stream_end it relays, the browser gets a WebSocket text frame that is not UTF-8",
  "slow-relay": "every frame for browsers is relayed HUB_SLOW_MS (1500) ms late, in order (legal; slower than a short --wait-ms)",
  "skip-odd": "the 1st, 3rd, 5th… stream frame of each answer is not relayed (the accumulation still reaches browsers, in fewer frames)",
  "throttle-leading": "stream relays are throttled on the leading edge: a stream frame within HUB_THROTTLE_MS (200) ms of the last one relayed for its answer is dropped (stream_end is relayed)",
  "throttle-trailing": "stream relays are throttled on the trailing edge: an answer's stream frames are held and only the latest is relayed at the end of each HUB_THROTTLE_MS (200) ms window, the one held relayed before stream_end (every frame reaches browsers when the agent waits for each relay)",
  "jitter-relay": "every frame for browsers is relayed a random 0 to HUB_JITTER_MS (8) ms late, in order, none coalesced (legal)",
  "no-agent-pong": "an agent's ping is not answered (a ping-pong fault check judges; a replay, which pings to learn a register was handled, waits out its wait once)",
};
let replayFault = process.env.HUB_REPLAY_FAULT || "";
let diverge = process.env.HUB_DIVERGE || "";
let variant = process.env.HUB_VARIANT || "";
let banner = false;
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--diverge") diverge = argv[++i] || "";
  else if (argv[i] === "--replay-fault") replayFault = argv[++i] || "";
  else if (argv[i] === "--list-replay-faults") {
    for (const [k, v] of Object.entries(REPLAY_FAULTS)) console.log(`${k}\t${v}`);
    process.exit(0);
  }
  else if (argv[i] === "--variant") variant = argv[++i] || "";
  // Start-up logs before the address, and the address inside a sentence on a wildcard host,
  // as many servers print it.
  else if (argv[i] === "--banner") banner = true;
  else if (argv[i] === "--list" || argv[i] === "--list-variants") {
    const list = argv[i] === "--list" ? DIVERGENCES : VARIANTS;
    for (const [k, v] of Object.entries(list)) console.log(`${k}\t${v}`);
    process.exit(0);
  } else {
    console.error(`hub.js: unknown argument ${argv[i]}`);
    process.exit(2);
  }
}
if (diverge && !DIVERGENCES[diverge]) {
  console.error(`hub.js: unknown divergence ${diverge}`);
  process.exit(2);
}
if (variant && !VARIANTS[variant]) {
  console.error(`hub.js: unknown variant ${variant}`);
  process.exit(2);
}
if (replayFault && !REPLAY_FAULTS[replayFault]) {
  console.error(`hub.js: unknown replay fault ${replayFault}`);
  process.exit(2);
}
const is = (d) => diverge === d;
const fault = (f) => replayFault === f;
let streamRelays = 0; // stream frames relayed to browsers so far (the replay faults' clock)
const streamFrames = new Map(); // skip-odd: `${clientId}/${messageId}` → stream frames seen
const throttles = new Map(); // throttle-*: `${clientId}/${messageId}` → { last, held, timer }
const THROTTLE_MS = Number(process.env.HUB_THROTTLE_MS || 200);
let jitterChain = Promise.resolve(); // jitter-relay: relays one after another, each delayed

const SECRET = process.env.JWT_SECRET || "";
const API_KEY = process.env.BRIDLE_API_KEY || "";
const SYNC_TIMEOUT = Number(process.env.BRIDLE_SYNC_TIMEOUT_MS || 120000);
if (!SECRET || !API_KEY) {
  console.error("hub.js: JWT_SECRET and BRIDLE_API_KEY are required");
  process.exit(2);
}

// --- JWT (HS256), as @nestjs/jwt's verify would: signature, then exp when present.
function b64url(buf) {
  return buf.toString("base64").replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_");
}
function verifyJwt(token) {
  if (typeof token !== "string") return null;
  if (is("accept-alg-none")) {
    const [h, p] = token.split(".");
    try {
      const header = JSON.parse(Buffer.from(h || "", "base64url").toString("utf8"));
      if (header.alg === "none") return JSON.parse(Buffer.from(p || "", "base64url").toString("utf8"));
    } catch {}
  }
  const [h, p, sig] = token.split(".");
  if (!h || !p || !sig) return null;
  const want = b64url(crypto.createHmac("sha256", SECRET).update(`${h}.${p}`).digest());
  const a = Buffer.from(sig);
  const b = Buffer.from(want);
  if (a.length !== b.length || !crypto.timingSafeEqual(a, b)) return null;
  let header, payload;
  try {
    header = JSON.parse(Buffer.from(h, "base64url").toString("utf8"));
    payload = JSON.parse(Buffer.from(p, "base64url").toString("utf8"));
  } catch {
    return null;
  }
  if (header.alg !== "HS256" || !payload || typeof payload !== "object") return null;
  if (typeof payload.exp === "number" && payload.exp * 1000 < Date.now()) return null;
  if (!is("ignore-nbf") && typeof payload.nbf === "number" && payload.nbf * 1000 > Date.now()) return null;
  return payload;
}

// --- State: agentId → agent socket; agentId → Set of browser sockets (socket.data.clientId).
const agents = new Map();
const browsers = new Map();
const byUser = new Map(); // the clobber-same-user divergence: `${agentId}/${clientId}` → socket
const syncWaiters = new Map(); // synthetic clientId → { resolve, streamed }
const relayed = new Map(); // the stream-deltas divergence: `${clientId}/${messageId}` → text so far
const lastStream = new Map(); // the end-as-last-stream divergence: `${clientId}/${messageId}` → text
const heldStream = new Map(); // the stream-after-end divergence: clientId → the stream held back
let everAgent = false; // the health-sticky divergence: an agent was ever registered

const textParts = (text) => [{ type: "text", text }];
function buildParts(text, images) {
  const parts = [];
  if (text && !is("images-first")) parts.push({ type: "text", text });
  for (const img of Array.isArray(images) ? images : []) {
    if (typeof img === "string") {
      const m = /^data:([^;]+);base64,(.*)$/.exec(img);
      parts.push(m ? { type: "image", base64: m[2], mediaType: m[1] } : { type: "image", base64: img, mediaType: "image/jpeg" });
    } else if (img && typeof img === "object") {
      parts.push({ type: "image", base64: img.base64 || img.data || "", mediaType: img.mediaType || img.mimeType || "image/jpeg" });
    }
  }
  if (text && is("images-first")) parts.push({ type: "text", text });
  return parts;
}
function browsersOf(agentId) {
  if (!browsers.has(agentId)) browsers.set(agentId, new Set());
  return browsers.get(agentId);
}
function browserCount(agentId) {
  return browsers.has(agentId) ? browsers.get(agentId).size : 0;
}

// --- HTTP API
function json(res, status, body) {
  const s = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(s) });
  res.end(s);
}
function readBody(req) {
  return new Promise((resolve) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}"));
      } catch {
        resolve(null);
      }
    });
  });
}
function toAgent(agentId, clientId, text, parts) {
  const agent = is("first-agent") ? agents.values().next().value : agents.get(agentId);
  if (!agent) return false;
  const sent = is("agent-text-upper") && typeof text === "string" ? text.toUpperCase() : text;
  const out = { type: "message", clientId, agentId, text: sent, parts, messageId: crypto.randomUUID() };
  if (is("no-agent-id")) delete out.agentId;
  if (is("no-client-id")) delete out.clientId;
  if (is("any-agent")) {
    for (const a of agents.values()) a.emit("message", out);
    return true;
  }
  agent.emit("message", out);
  if (is("double-forward")) agent.emit("message", { ...out, messageId: crypto.randomUUID() });
  return true;
}

const started = Date.now();
const uptime = () => Date.now() - started;

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, "http://x");
  let m;
  if (req.method === "GET" && url.pathname === "/api/agent/health") {
    let total = 0;
    for (const set of browsers.values()) total += set.size;
    if (is("health-no-count")) return json(res, 200, { ok: true, agentConnected: agents.size > 0 });
    const connected = agents.size > 0 || (is("health-sticky") && everAgent);
    return json(res, 200, { ok: true, agentConnected: connected, browserClients: total, uptimeMs: uptime() });
  }
  if (req.method === "GET" && (m = /^\/api\/agent\/([^/]+)\/health$/.exec(url.pathname))) {
    if (is("no-agent-health")) return json(res, 404, { message: "Cannot GET " + url.pathname });
    const agentId = decodeURIComponent(m[1]);
    const connected = is("health-any-agent") ? agents.size > 0 : agents.has(agentId);
    return json(res, 200, { ok: true, agentConnected: connected, browserClients: is("health-count-short") ? Math.max(0, browserCount(agentId) - 1) : browserCount(agentId), agentId, uptimeMs: uptime() });
  }
  if (req.method === "POST" && (m = /^\/api\/agent\/([^/]+)\/message(\/sync)?$/.exec(url.pathname))) {
    const agentId = decodeURIComponent(m[1]);
    const body = await readBody(req);
    if (!body || typeof body.text !== "string") return json(res, 400, { message: "text is required" });
    const parts = Array.isArray(body.parts) ? body.parts : buildParts(body.text, is("http-drop-images") ? undefined : body.images);
    const clientId = `http:${crypto.randomUUID()}`;
    if (!m[2]) {
      toAgent(agentId, clientId, body.text, is("http-parts-text-only") ? textParts(body.text) : parts);
      return json(res, is("message-202") ? 202 : 200, { ok: true, queued: true });
    }
    const answer = await new Promise((resolve) => {
      const waiter = { resolve, streamed: [], turnOpen: false };
      syncWaiters.set(clientId, waiter);
      const timer = setTimeout(() => {
        syncWaiters.delete(clientId);
        const text = is("concat-sync-timeout") && waiter.streamed.length
          ? waiter.streamed.join("")
          : "Timeout: no response from agent";
        const now = Date.now();
        resolve({ text, messageId: "", ts: is("sync-timeout-ts-seconds") ? Math.floor(now / 1000) : now });
      }, SYNC_TIMEOUT);
      waiter.resolve = (v) => {
        clearTimeout(timer);
        syncWaiters.delete(clientId);
        resolve(v);
      };
      toAgent(agentId, clientId, body.text, parts);
    });
    if (is("sync-no-message-id") && answer.messageId) delete answer.messageId;
    return json(res, 200, { ...answer, agentId });
  }
  json(res, 404, { message: "not found" });
});

const io = new Server(server, {
  maxHttpBufferSize: is("tiny-frames") ? 100 : is("small-frames") ? 200 : variant === "frame-limit" ? 4096 : 1e6,
  ...(is("polling-only") ? { transports: ["polling"] } : {}),
});

// --- Browsers: accept the namespace, then validate (the NestJS gateway way).
io.of("/ws/client").on("connection", (socket) => {
  const { token, agentId } = socket.handshake.auth || {};
  const claims = verifyJwt(token);
  const noSub = claims && (typeof claims.sub !== "string" || !claims.sub);
  const isAdmin = claims && Array.isArray(claims.roles)
    && claims.roles.some((r) => r === "ADMIN" || (is("admin-any-case") && String(r).toUpperCase() === "ADMIN"));
  if (!claims || !agentId || typeof agentId !== "string" || (noSub && !isAdmin && !is("accept-no-sub"))) {
    socket.disconnect(true);
    return;
  }
  const clientId = is("welcome-uuid") ? crypto.randomUUID() : isAdmin && !is("admin-as-sub") ? "admin" : claims.sub;
  // admin-routes-as-sub: welcomed as 'admin', routed under the sub.
  const routeId = is("admin-routes-as-sub") && isAdmin && claims.sub ? claims.sub : clientId;
  socket.data = { clientId: routeId, agentId };
  if (is("clobber-same-user")) {
    const key = `${agentId}/${clientId}`;
    const prev = byUser.get(key);
    if (prev) browsersOf(agentId).delete(prev);
    byUser.set(key, socket);
  }
  browsersOf(agentId).add(socket);
  socket.emit("welcome", { clientId });
  socket.emit("status", { agentConnected: agents.has(agentId), browsers: browserCount(agentId) });
  if (is("status-flood")) {
    const status = () => socket.emit("status", { agentConnected: agents.has(agentId), browsers: browserCount(agentId) });
    // Sent before anything else can follow welcome: even a cell whose browser is gone within
    // a few timer ticks (a replay on a loaded machine) got more than a second's threshold.
    for (let k = 0; k < 100; k++) status();
    const flood = setInterval(status, 2);
    socket.on("disconnect", () => clearInterval(flood));
  }
  if (is("message-flood")) {
    let n = 0;
    const flood = setInterval(() => {
      const text = `notice ${n++}`;
      socket.emit("message", { type: "message", text, parts: [{ type: "text", text }], messageId: `notice-${n}`, ts: Date.now() });
    }, 2);
    socket.on("disconnect", () => clearInterval(flood));
  }

  socket.on("ping", () => {
    if (is("pong-broadcast")) io.of("/ws/client").emit("pong", { ts: Date.now() });
    else if (is("pong-ts-string")) socket.emit("pong", { ts: String(Date.now()) });
    else if (!is("no-browser-pong")) socket.emit("pong", { ts: Date.now() });
  });
  socket.on("message", (msg) => {
    if ((msg === null && is("crash-on-null")) || is("crash-on-message")) process.exit(3);
    const bad = !msg || typeof msg !== "object" || Array.isArray(msg) || typeof msg.text !== "string"
      || (msg.parts !== undefined && !Array.isArray(msg.parts));
    if (bad && is("forward-no-text") && msg && typeof msg === "object" && !Array.isArray(msg)
      && msg.text === undefined && Array.isArray(msg.parts)) {
      toAgent(agentId, routeId, undefined, msg.parts);
      return;
    }
    if (bad) {
      if (variant === "exception-reply") {
        socket.emit("exception", { status: "error", message: "Internal server error" });
        return;
      }
      if (!is("forward-malformed")) return;
      const m2 = msg && typeof msg === "object" ? msg : {};
      if (!toAgent(agentId, routeId, m2.text === undefined ? null : m2.text, m2.parts === undefined ? null : m2.parts)) return;
      return;
    }
    let parts = Array.isArray(msg.parts) ? msg.parts : buildParts(msg.text, msg.images);
    if (Array.isArray(msg.parts) && is("drop-explicit-images")) parts = parts.filter((p) => !p || p.type !== "image");
    if (!toAgent(agentId, routeId, msg.text, parts) && !is("not-connected-silent")) {
      const text = "Agent is not connected right now. Your message was not delivered.";
      const out = { type: "message", text, parts: textParts(text), messageId: crypto.randomUUID(), ts: Date.now() };
      if (is("not-connected-broadcast")) io.of("/ws/client").emit("message", out);
      else socket.emit("message", out);
    }
  });
  socket.on("disconnect", () => {
    const set = browsers.get(agentId);
    if (is("clobber-same-user")) {
      const key = `${agentId}/${clientId}`;
      const cur = byUser.get(key);
      if (cur && set) set.delete(cur);
      byUser.delete(key);
    }
    if (set) {
      set.delete(socket);
      if (set.size === 0) browsers.delete(agentId);
    }
  });
});

// --- Agents
function relay(agentId, event, data) {
  if (!data || typeof data !== "object" || typeof data.clientId !== "string") return;
  const { clientId } = data;
  const waiter = syncWaiters.get(clientId);
  if (waiter) {
    if (event === "stream") waiter.streamed.push(String(data.text || ""));
    // A message the agent sends while its turn is open (after typing, before stream_end) is a
    // note, "by definition not that answer", marked or not.
    const inTurn = waiter.turnOpen && !is("sync-in-turn-note");
    if (event === "typing") waiter.turnOpen = true;
    if (event === "stream_end") waiter.turnOpen = false;
    const answers = (is("sync-tool-note") ? data.kind !== "thinking" : !data.kind) && !inTurn;
    if (event === "stream_end" || (event === "message" && answers)) {
      waiter.resolve({ text: data.text || "", messageId: data.messageId || "", ts: Date.now() });
    }
    return;
  }
  if ((event === "typing" && is("drop-typing")) || (event === "stream_end" && is("drop-stream-end"))) return;
  const out = { type: event };
  if (event === "typing") {
    out.ts = data.ts || Date.now();
    if (is("ts-string")) out.ts = String(out.ts);
    if (is("foreign-client-id")) out.clientId = `${clientId}-other`;
    if (is("foreign-agent-id")) out.agentId = `${agentId}-other`;
  } else {
    const text = typeof data.text === "string" ? data.text : "";
    out.text = text;
    out.parts = Array.isArray(data.parts) ? data.parts : textParts(text);
    out.messageId = data.messageId || crypto.randomUUID();
    const streamKey = `${clientId}/${out.messageId}`;
    if (event === "stream" && is("end-as-last-stream")) lastStream.set(streamKey, text);
    if (event === "stream_end" && is("end-as-last-stream") && lastStream.has(streamKey)) {
      out.text = lastStream.get(streamKey);
      out.parts = textParts(out.text);
      lastStream.delete(streamKey);
    }
    if (event === "stream_end" && is("end-new-id")) out.messageId = crypto.randomUUID();
    if (event === "stream" && is("stream-deltas")) {
      const key = `${clientId}/${out.messageId}`;
      const before = relayed.get(key) || "";
      relayed.set(key, text);
      out.text = text.startsWith(before) ? text.slice(before.length) : text;
      out.parts = textParts(out.text);
    }
    if (variant === "part-fields") {
      out.parts = out.parts.map((p) => (p && typeof p === "object" ? { ...p, hubSeen: true } : p));
    }
    out.ts = data.ts || Date.now();
    if (is("ts-string")) out.ts = String(out.ts);
    if (event === "message" && data.kind && !is("notes-no-kind")) out.kind = data.kind;
  }
  if (is("ts-seconds")) out.ts = Math.floor(out.ts / 1000);
  if (is("ts-micros")) out.ts = out.ts * 1000;
  if (variant === "ts-fraction") out.ts = performance.timeOrigin + performance.now();
  if (is("stream-after-end") && (event === "stream" || event === "stream_end")) {
    const held = heldStream.get(clientId);
    heldStream.delete(clientId);
    if (event === "stream") heldStream.set(clientId, out);
    else toBrowsers(agentId, clientId, event, out);
    if (held) toBrowsers(agentId, clientId, "stream", held);
    return;
  }
  if (event === "stream_end" && is("end-as-message")) toBrowsers(agentId, clientId, "message", { ...out, type: "message" });
  else toBrowsers(agentId, clientId, event, out);
}

function toBrowsers(agentId, clientId, event, out) {
  if (fault("slow-relay")) {
    setTimeout(() => sendToBrowsers(agentId, clientId, event, out), Number(process.env.HUB_SLOW_MS || 1500));
    return;
  }
  if (fault("jitter-relay")) {
    const delay = Math.random() * Number(process.env.HUB_JITTER_MS || 8);
    jitterChain = jitterChain
      .then(() => new Promise((done) => setTimeout(done, delay)))
      .then(() => sendToBrowsers(agentId, clientId, event, out));
    return;
  }
  if ((event === "stream" || event === "stream_end") && (fault("throttle-leading") || fault("throttle-trailing"))) {
    const key = `${clientId}/${out.messageId}`;
    const t = throttles.get(key) || {};
    throttles.set(key, t);
    if (event === "stream_end") {
      clearTimeout(t.timer);
      if (t.held) sendToBrowsers(agentId, clientId, "stream", t.held);
      throttles.delete(key);
    } else if (fault("throttle-leading")) {
      const now = Date.now();
      if (t.last !== undefined && now - t.last < THROTTLE_MS) return;
      t.last = now;
    } else {
      t.held = out;
      if (!t.timer) {
        t.timer = setTimeout(() => {
          t.timer = undefined;
          const held = t.held;
          t.held = undefined;
          if (held) sendToBrowsers(agentId, clientId, "stream", held);
        }, THROTTLE_MS);
      }
      return;
    }
  }
  if (event === "stream") {
    if (fault("skip-odd")) {
      const key = `${clientId}/${out.messageId}`;
      const n = (streamFrames.get(key) || 0) + 1;
      streamFrames.set(key, n);
      if (n % 2 === 1) return;
    }
    streamRelays += 1;
    if (streamRelays === 4 && fault("crash-mid")) process.exit(3);
    if (streamRelays === 4 && fault("hang-mid")) {
      const until = Date.now() + Number(process.env.HUB_HANG_MS || 30000);
      while (Date.now() < until) {}
    }
    if (streamRelays === 4 && fault("kick-mid")) {
      for (const b of browsers.get(agentId) || []) if (b.data.clientId === clientId) b.disconnect(true);
      return;
    }
  }
  sendToBrowsers(agentId, clientId, event, out);
  if (event === "stream_end" && fault("bad-utf8-after-end")) {
    for (const b of browsers.get(agentId) || []) {
      if (b.data.clientId !== clientId) continue;
      const frame = Buffer.concat([
        Buffer.from('42/ws/client,["message",{"type":"message","text":"bad '),
        Buffer.from([0xff, 0xfe]),
        Buffer.from('","parts":[],"messageId":"zz","ts":1}]'),
      ]);
      b.conn.transport.socket.send(frame, { binary: false });
    }
  }
}

function sendToBrowsers(agentId, clientId, event, out) {
  for (const b of browsers.get(agentId) || []) {
    const addressed = b.data.clientId === clientId;
    if (is("misroute") ? !addressed : addressed || is("all-browsers")) {
      b.emit(event, variant === "own-ids" ? { ...out, clientId: b.data.clientId, agentId: b.data.agentId } : out);
      if (variant === "status-per-frame") for (let k = 0; k < 3; k++) b.emit("status", { relayed: event, k });
      if (event === "stream_end" && is("stream-end-alias")) b.emit("streamEnd", out);
    }
  }
}

io.of("/ws/agent").on("connection", (socket) => {
  const { apiKey, agentId } = socket.handshake.auth || {};
  const keyOk = is("api-key-any-case")
    ? typeof apiKey === "string" && apiKey.toLowerCase() === API_KEY.toLowerCase()
    : apiKey === API_KEY;
  if (!keyOk || !agentId || typeof agentId !== "string") {
    socket.disconnect(true);
    return;
  }
  if (variant === "refuse-second-agent" && agents.has(agentId)) {
    socket.disconnect(true);
    return;
  }
  const register = () => {
    if (is("never-register")) return;
    if (is("takeover-keep-old") && agents.has(agentId) && agents.get(agentId) !== socket) return;
    agents.set(agentId, socket);
    everAgent = true;
  };
  register(); // one per agentId: the newest takes over
  if (variant !== "no-config") socket.emit("config", { heartbeatMs: 25000 });
  socket.on("register", register);
  socket.on("ping", () => {
    if (replayFault !== "no-agent-pong") socket.emit("pong", {});
  });
  for (const event of ["message", "typing", "stream", "stream_end"]) {
    socket.on(event, (data) => relay(agentId, event, data));
  }
  socket.on("disconnect", () => {
    if (is("keep-dead-agent")) return;
    if (is("takeover-offline") || agents.get(agentId) === socket) agents.delete(agentId);
  });
});

if (banner) console.log(`[hub] node ${process.version}, socket.io hub starting (docs: https://socket.io/docs/v4/)`);
server.listen(Number(process.env.PORT || 0), "127.0.0.1", () => {
  const port = server.address().port;
  if (banner) console.log(`[hub] listening on http://0.0.0.0:${port} (Ctrl-C to stop)`);
  else console.log(`http://127.0.0.1:${port}`);
});
