// Two agents of one agentId on the canonical socket.io-client 4, the newer leaving first while
// the older stays connected, and a browser asking in between.
// Env: HUB_URL, JWT_SECRET (the browser's JWT is signed here, HS256), BRIDLE_API_KEY, AGENT_ID,
// SUB.
// Agent A connects and registers; agent B connects with the same agentId and registers (a
// takeover); a browser connects; B leaves; the browser asks and awaits the hub's answer (a hub
// that unregisters the agentId when B leaves says the agent is not connected); A pings and
// awaits its pong (still connected); the browser and A leave. Prints one JSON line (what each
// socket got, by event name) and exits 0; exits 1 on a timeout or a refused connection.
const crypto = require("crypto");
const { io } = require("socket.io-client");

const b64url = (b) => Buffer.from(b).toString("base64").replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_");
function sign(secret, claims) {
  const head = b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const body = b64url(JSON.stringify(claims));
  const sig = b64url(crypto.createHmac("sha256", secret).update(head + "." + body).digest());
  return head + "." + body + "." + sig;
}

const agentId = process.env.AGENT_ID;
const got = { a: {}, b: {}, browser: {} };
const timer = setTimeout(() => { console.log(JSON.stringify({ error: "timeout", got })); process.exit(1); }, 20000);

function socket(name, nsp, auth) {
  // forceNew: a connection each (socket.io-client would otherwise carry the browser's namespace
  // on agent A's connection).
  const s = io(process.env.HUB_URL + nsp, { auth, transports: ["websocket"], reconnection: false, forceNew: true });
  s.onAny((event) => { got[name][event] = (got[name][event] || 0) + 1; });
  s.on("connect_error", (e) => { console.log(JSON.stringify({ error: `${name}: ${e.message}` })); process.exit(1); });
  return s;
}
const once = (s, event) => new Promise((r) => s.once(event, r));

// An agent that registered, settled by a pong (events are ordered per socket).
async function agent(name) {
  const s = socket(name, "/ws/agent", { apiKey: process.env.BRIDLE_API_KEY, agentId });
  await once(s, "connect");
  s.emit("register", {});
  const pong = once(s, "pong");
  s.emit("ping", {});
  await pong;
  return s;
}

(async () => {
  const a = await agent("a");
  const b = await agent("b");
  const token = sign(process.env.JWT_SECRET, { sub: process.env.SUB, exp: Math.floor(Date.now() / 1000) + 3600 });
  const browser = socket("browser", "/ws/client", { token, agentId });
  await once(browser, "welcome");
  b.close();
  await new Promise((r) => setTimeout(r, 300));
  const answer = once(browser, "message");
  browser.emit("message", { text: "anyone there?", parts: [{ type: "text", text: "anyone there?" }] });
  await answer;
  const pong = once(a, "pong");
  a.emit("ping", {});
  await pong;
  browser.close();
  a.close();
  clearTimeout(timer);
  console.log(JSON.stringify({ got }));
  setTimeout(() => process.exit(0), 100);
})();
