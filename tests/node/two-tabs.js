// Two tabs of one user on the canonical socket.io-client 4: two browser connections with the same
// JWT sub, open at once, both getting every answer the agent streams to that clientId.
// Env: HUB_URL, JWT_SECRET (the JWT is signed here, HS256), AGENT_ID, SUB.
// Tab A connects, then tab B; A asks, and both tabs await the answer's stream_end; B asks, and
// both await it; A leaves; B asks once more, alone. Prints one JSON line (what each tab got, by
// event name) and exits 0; exits 1 on a timeout or a refused connection.
const crypto = require("crypto");
const { io } = require("socket.io-client");

const b64url = (b) => Buffer.from(b).toString("base64").replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_");
function sign(secret, claims) {
  const head = b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const body = b64url(JSON.stringify(claims));
  const sig = b64url(crypto.createHmac("sha256", secret).update(head + "." + body).digest());
  return head + "." + body + "." + sig;
}

const token = sign(process.env.JWT_SECRET, { sub: process.env.SUB, exp: Math.floor(Date.now() / 1000) + 3600 });
const got = { a: {}, b: {} };
const timer = setTimeout(() => { console.log(JSON.stringify({ error: "timeout", got })); process.exit(1); }, 20000);

// A tab: its socket, and a promise per stream_end it is owed.
function tab(name) {
  const socket = io(process.env.HUB_URL + "/ws/client", {
    auth: { token, agentId: process.env.AGENT_ID },
    transports: ["websocket"],
    reconnection: false,
  });
  const waiters = [];
  socket.onAny((event) => { got[name][event] = (got[name][event] || 0) + 1; });
  socket.on("stream_end", () => { const w = waiters.shift(); if (w) w(); });
  socket.on("connect_error", (e) => { console.log(JSON.stringify({ error: `${name}: ${e.message}` })); process.exit(1); });
  const welcomed = new Promise((r) => socket.once("welcome", r));
  // Registered before the question goes out, so an early end is not missed.
  const answered = () => new Promise((r) => waiters.push(r));
  return { socket, welcomed, answered };
}

(async () => {
  const a = tab("a");
  await a.welcomed;
  const b = tab("b");
  await b.welcomed;
  for (const [asker, text] of [[a, "tell a story"], [b, "another one"]]) {
    const both = [a.answered(), b.answered()];
    asker.socket.emit("message", { text, parts: [{ type: "text", text }] });
    await Promise.all(both);
  }
  a.socket.close();
  await new Promise((r) => setTimeout(r, 300));
  const alone = b.answered();
  b.socket.emit("message", { text: "just me", parts: [{ type: "text", text: "just me" }] });
  await alone;
  b.socket.close();
  clearTimeout(timer);
  console.log(JSON.stringify({ got }));
  setTimeout(() => process.exit(0), 100);
})();
