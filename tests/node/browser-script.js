// A scripted Bridle browser on the canonical socket.io-client 4.
// Env: HUB_URL, JWT_SECRET (the JWT is signed here, HS256), AGENT_ID, SUB, ROLES (comma list),
// MESSAGES (texts separated by "|"; a text starting with "legacy" is sent as text + images),
// TRANSPORTS ("websocket" for WebSocket only; default: polling then upgrade).
// Sends each message after the previous answer completed; prints one JSON line and exits 0.
const crypto = require("crypto");
const { io } = require("socket.io-client");

const b64url = (b) => Buffer.from(b).toString("base64").replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_");
function sign(secret, claims) {
  const head = b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const body = b64url(JSON.stringify(claims));
  const sig = b64url(crypto.createHmac("sha256", secret).update(head + "." + body).digest());
  return head + "." + body + "." + sig;
}

const roles = (process.env.ROLES || "").split(",").filter(Boolean);
const token = sign(process.env.JWT_SECRET, { sub: process.env.SUB, roles, exp: Math.floor(Date.now() / 1000) + 3600 });
const messages = (process.env.MESSAGES || "hello").split("|");
const opts = { auth: { token, agentId: process.env.AGENT_ID } };
if (process.env.TRANSPORTS) opts.transports = process.env.TRANSPORTS.split(",");
const timer = setTimeout(() => { console.log(JSON.stringify({ error: "timeout", out })); process.exit(1); }, 20000);

const socket = io(process.env.HUB_URL + "/ws/client", opts);
const out = { welcome: null, answers: [] };
let turnOpen = false;
function next() {
  const text = messages.shift();
  if (text === undefined) {
    clearTimeout(timer);
    console.log(JSON.stringify(out));
    socket.close();
    setTimeout(() => process.exit(0), 100);
    return;
  }
  if (text.startsWith("legacy")) {
    socket.emit("message", { text, images: [{ base64: "iVBORw0KGgo=", mediaType: "image/png" }] });
  } else {
    socket.emit("message", { text, parts: [{ type: "text", text }] });
  }
}
socket.on("connect_error", (e) => { console.log(JSON.stringify({ error: e.message })); process.exit(1); });
socket.on("welcome", (w) => { out.welcome = w; socket.emit("ping", {}); next(); });
socket.on("typing", () => { turnOpen = true; });
socket.on("stream_end", (m) => { turnOpen = false; out.answers.push(m.text); next(); });
socket.on("message", (m) => {
  if (!turnOpen && !m.kind) { out.answers.push(m.text); next(); }
});
