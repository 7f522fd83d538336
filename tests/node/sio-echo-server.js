// A canonical socket.io 4 server for bridgewire's client interop test.
// Prints its port as the first stdout line. Namespace /echo needs auth.token === "good",
// greets with `hello {id}` and echoes `echo` events (`numbered` and `raw` send odd packets);
// maxHttpBufferSize is 10000 bytes.
const http = require("http");
const { Server } = require("socket.io");

const server = http.createServer();
const io = new Server(server, { maxHttpBufferSize: 10000, pingInterval: 300, pingTimeout: 400 });
const echo = io.of("/echo");
echo.use((socket, next) => {
  if (socket.handshake.auth && socket.handshake.auth.token === "good") return next();
  next(new Error("unauthorized"));
});
echo.on("connection", (socket) => {
  socket.emit("hello", { id: socket.id, auth: socket.handshake.auth });
  socket.on("echo", (data) => socket.emit("echo", data));
  socket.on("bye", () => socket.disconnect(true));
  // Odd but canonical: an event named by a number; and raw Socket.IO text straight onto the
  // Engine.IO connection (for packets the JS decoder refuses).
  socket.on("numbered", () => socket.emit(7, { n: 7 }));
  socket.on("raw", (text) => socket.conn.write(text));
});
server.listen(0, "127.0.0.1", () => {
  console.log(String(server.address().port));
});
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
