// The canonical socket.io-client 4 as both an agent and a browser against a Bridle hub.
// Env: HUB_URL, TOKEN (browser JWT), API_KEY. Prints one JSON line {welcome, events} and exits 0
// once the browser saw stream_end; exits 1 after 10 s.
const { io } = require("socket.io-client");

const url = process.env.HUB_URL;
const timer = setTimeout(() => { console.log(JSON.stringify({ error: "timeout" })); process.exit(1); }, 10000);

const agent = io(url + "/ws/agent", {
  transports: ["websocket"],
  auth: { apiKey: process.env.API_KEY, agentId: "node-bot" },
});
agent.on("connect_error", (e) => { console.log(JSON.stringify({ error: "agent: " + e.message })); process.exit(1); });
agent.on("message", (m) => {
  const base = { clientId: m.clientId, messageId: "m-1" };
  agent.emit("typing", { clientId: m.clientId, ts: Date.now() });
  for (const t of ["Hel", "Hello", "Hello, " + m.text]) {
    agent.emit("stream", { ...base, text: t, parts: [{ type: "text", text: t }], ts: Date.now() });
  }
  const f = "Hello, " + m.text;
  agent.emit("stream_end", { ...base, text: f, parts: [{ type: "text", text: f }], ts: Date.now() });
});
agent.on("connect", () => {
  agent.emit("register", {});
  // Default transports: HTTP long-polling first, then the upgrade to WebSocket.
  const browser = io(url + "/ws/client", { auth: { token: process.env.TOKEN, agentId: "node-bot" } });
  const out = { welcome: null, events: [] };
  browser.on("connect_error", (e) => { console.log(JSON.stringify({ error: "browser: " + e.message })); process.exit(1); });
  browser.on("welcome", (w) => {
    out.welcome = w;
    browser.emit("ping", {});
    browser.emit("message", { text: "node", images: [{ base64: "QUJD", mediaType: "image/png" }] });
  });
  browser.onAny((name, data) => {
    if (name === "welcome") return;
    out.events.push([name, data]);
    if (name === "stream_end") {
      clearTimeout(timer);
      console.log(JSON.stringify(out));
      browser.close(); agent.close();
      process.exit(0);
    }
  });
});
