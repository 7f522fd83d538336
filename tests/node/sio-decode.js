// Decodes Socket.IO packet strings with the canonical socket.io-parser, for
// tests/node_sio_parser.rs. Input: one JSON string literal per line (the packet text).
// Output: one JSON line each, {"ok":{type,nsp,id,attachments,data}} or {"err":message};
// `id` is String(id) (so NaN and Infinity survive) and `data` is JSON.stringify(data).
"use strict";
const { Decoder } = require("socket.io-parser");
const lines = require("fs").readFileSync(0, "utf8").split("\n").filter((l) => l.length > 0);
const out = [];
for (const line of lines) {
  const text = JSON.parse(line);
  try {
    const p = new Decoder().decodeString(text);
    out.push(JSON.stringify({
      ok: {
        type: p.type,
        nsp: p.nsp,
        id: p.id === undefined ? null : String(p.id),
        attachments: p.attachments === undefined ? 0 : p.attachments,
        data: p.data === undefined ? null : JSON.stringify(p.data),
      },
    }));
  } catch (e) {
    out.push(JSON.stringify({ err: String(e.message) }));
  }
}
process.stdout.write(out.join("\n") + "\n");
