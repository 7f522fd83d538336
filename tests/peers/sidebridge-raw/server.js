#!/usr/bin/env node
// Audit Side Bridge v1.0 server: raw `net`, hand-written HTTP/1.1. Correct by default.
// Usage: node server.js [--key K] [-o switch,switch...]   prints "listening on http://127.0.0.1:PORT/"
// Phrases: "keep in mind <word>", "what should you keep in mind?", "pardon?",
//          "private please", "public please", "see you"; anything else is echoed.
'use strict';
const net = require('net');
const crypto = require('crypto');

const SW = {
  // legal but unusual
  chunkext: 'chunked replies: 1-7 byte chunks (splitting UTF-8 chars), size in upper-case hex with leading zeros, BWS + chunk extensions, last chunk "0000 ; done", unannounced trailer fields',
  tecase: 'Transfer-Encoding: Chunked (coding name in mixed case; RFC 9112 §7 case-insensitive)',
  emptyreason: 'status line with an empty reason phrase: "HTTP/1.1 200 \\r\\n"',
  hdrcase: 'field names in odd case (cONTENT-lENGTH, content-TYPE, aLLOW)',
  ctparams: 'Content-Type: Application/JSON;charset="UTF-8";profile=sidebridge (no space, quoted, extra param)',
  clzeros: 'Content-Length with leading zeros (000123)',
  jsonws: 'JSON with insignificant whitespace (\\n, \\t, \\r, spaces) everywhere, keys in reverse order',
  uesc: 'answers carry café/emoji; every non-ASCII char written as \\uXXXX (surrogate pairs, mixed hex case), "/" as \\/, "e" as \\u0065',
  numbers: 'unknown keys holding numbers 1E2, -0, 1.5e-3, 1E+300 at top level, in messages, options and a source item',
  idle: 'an idle kept-alive connection is closed 30 ms after the reply (no Connection: close sent)',
  announceclose: 'Connection: close on every reply, the connection closed after it',
  slowfirst: 'the first reply comes after 8 s (under the 10 s warning)',
  gap: 'recall answers: header section at once, body 12 s later with whitespace bytes every 4 s (within 60 s)',
  extrahdrs: 'many extra response headers: Date, Server, Set-Cookie x2, Vary, Cache-Control, an empty-valued field, a 4 KB field, Keep-Alive: timeout=5, max=100, Connection: keep-alive',
  headcl: 'HEAD answered 405 with the Content-Length a GET would get, and no body (RFC 9110 §9.3.2)',
  interim: 'interim "102 Processing" and an unregistered "199 Patience" before every final reply',
  reasonodd: 'reason phrases with a tab and obs-text bytes (latin-1 0xE8): "200 Tr\xe8s\tbien"; a header value with obs-text',
  ctrlesc: 'answers carry escaped control characters in content: \u0000, \b, \f, \u001F, \t',
  headte: 'HEAD answered 405 with Transfer-Encoding: chunked (as a GET reply would be framed) and no body (RFC 9110 §9.3.2)',
  // flaws
  'f-chunk-crlf': 'FLAW: chunked replies whose chunk data is followed by "XY" instead of CRLF (broken framing)',
  'f-no-content': 'FLAW: echo answers ("You said ...") lack the required "content" key',
  'f-title-num': 'FLAW: every answer cites a source whose title is a number (42)',
  'f-get-400': 'FLAW: GET/PUT/HEAD answered 400 (instead of 405/404) with Allow: POST',
  'f-chunk-size': 'FLAW: chunked replies whose chunk-size is 2 more than the chunk data (broken framing)',
  'f-cut-body': 'FLAW: every reply with a body is cut: its Content-Length announced, half of the body sent, then the connection closed (an incomplete message, RFC 9112 §8)',
};

let KEY = null;
const on = new Set();
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--key') KEY = argv[++i];
  else if (argv[i] === '-o') argv[++i].split(',').filter(Boolean).forEach((s) => { if (!SW[s]) { console.error('unknown switch ' + s); process.exit(2); } on.add(s); });
  else if (argv[i] === '--list') { for (const [k, v] of Object.entries(SW)) console.log(k.padEnd(14) + v); process.exit(0); }
  else { console.error('unknown arg ' + argv[i]); process.exit(2); }
}

const chats = new Map(); // upper chatId -> {word,last,ended,priv}
const chat = (id) => { const k = String(id).toUpperCase(); if (!chats.has(k)) chats.set(k, { word: null, last: null, ended: false, priv: false }); return chats.get(k); };
class Raw { constructor(t) { this.t = t; } }
const uuid = () => crypto.randomUUID();
const UUIDRE = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

function msg(content, from = 'assistant') {
  const m = { id: uuid(), from, content, sources: [] };
  if (on.has('f-title-num') && from === 'assistant') m.sources = [{ title: 42, url: 'https://example.com/doc' }];
  if (on.has('numbers')) { m['x-weight'] = new Raw('1E2'); m.sources = m.sources.concat([{ title: 'Ref', url: 'https://example.org/r', rank: new Raw('1E0') }]); }
  return m;
}

// ---------- JSON encoding ----------
function encStr(s) {
  let out = '"';
  for (const ch of s) {
    const cp = ch.codePointAt(0);
    if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (cp < 0x20) out += '\\u' + cp.toString(16).padStart(4, '0');
    else if (on.has('uesc') && ch === '/') out += '\\/';
    else if (on.has('uesc') && ch === 'e') out += '\\u0065';
    else if (on.has('uesc') && cp > 0x7f) {
      if (cp > 0xffff) { const v = cp - 0x10000; out += '\\u' + (0xd800 + (v >> 10)).toString(16).toUpperCase() + '\\u' + (0xdc00 + (v & 0x3ff)).toString(16); }
      else out += '\\u' + cp.toString(16).padStart(4, '0');
    } else out += ch;
  }
  return out + '"';
}
let wsi = 0;
const WS = ['\n', ' \t', '\r\n  ', '', '\t\n\t', '  '];
const ws = () => (on.has('jsonws') ? WS[wsi++ % WS.length] : '');
function enc(v) {
  if (v === null) return 'null';
  if (typeof v === 'boolean') return String(v);
  if (typeof v === 'number') return String(v);
  if (v instanceof Raw) return v.t;
  if (typeof v === 'string') return encStr(v);
  if (Array.isArray(v)) return '[' + ws() + v.map((x) => enc(x)).join(ws() + ',' + ws()) + ws() + ']';
  let keys = Object.keys(v);
  if (on.has('jsonws')) keys = keys.reverse();
  return '{' + ws() + keys.map((k) => encStr(k) + ws() + ':' + ws() + enc(v[k])).join(ws() + ',' + ws()) + ws() + '}';
}
function body(obj) {
  if (on.has('numbers')) {
    obj = Object.assign({ 'x-score': new Raw('1E2'), 'x-neg': new Raw('-0'), 'x-small': new Raw('1.5e-3'), 'x-big': new Raw('1E+300') }, obj);
    if (obj.options) obj.options = Object.assign({ 'x-ttl': new Raw('6E1') }, obj.options);
  }
  let s = ws() + enc(obj) + ws();
  return Buffer.from(s, 'utf8');
}

// ---------- HTTP writing ----------
const REASON = { 200: 'OK', 204: 'No Content', 400: 'Bad Request', 401: 'Unauthorized', 405: 'Method Not Allowed' };
function hname(n) {
  if (!on.has('hdrcase')) return n;
  return n.split('').map((c, i) => (i % 2 ? c.toUpperCase() : c.toLowerCase())).join('');
}
function chunkify(buf) {
  let out = [];
  let i = 0, n = 0;
  while (i < buf.length) {
    const sz = Math.min(buf.length - i, 1 + (n++ % 7));
    const data = buf.subarray(i, i + sz);
    let decl = sz + (on.has('f-chunk-size') ? 2 : 0);
    let line = on.has('chunkext') ? decl.toString(16).toUpperCase().padStart(4, '0') + ' ; ext=' + n + ' ;q="a;b c"' : decl.toString(16);
    out.push(Buffer.from(line + '\r\n'), data, Buffer.from(on.has('f-chunk-crlf') ? 'XY' : '\r\n'));
    i += sz;
  }
  out.push(Buffer.from(on.has('chunkext') ? '0000 ; done\r\nX-Checksum: ' + buf.length + '\r\nServer-Timing: total;dur=1\r\n\r\n' : '0\r\n\r\n'));
  return Buffer.concat(out);
}
// opts: {close, head, delayBody}
function respond(conn, status, headers, payload, opts = {}) {
  const chunked = on.has('chunkext') || on.has('tecase') || on.has('f-chunk-size') || on.has('f-chunk-crlf');
  let lines = [];
  if (on.has('interim')) lines.push('HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 199 Patience\r\nX-Note: still thinking\r\n\r\n');
  let head = 'HTTP/1.1 ' + status + ' ' + (on.has('emptyreason') ? '' : on.has('reasonodd') ? 'Tr\xe8s\tbien' : (REASON[status] || 'OK')) + '\r\n';
  const H = [];
  if (payload !== null) H.push(['Content-Type', on.has('ctparams') ? 'Application/JSON;charset="UTF-8";profile=sidebridge' : 'application/json']);
  for (const h of headers) H.push(h);
  if (on.has('reasonodd')) H.push(['X-Note', 'caf\xe9 cr\xe8me']);
  if (on.has('extrahdrs') && status === 401) H.push(['WWW-Authenticate', 'SideBridge realm="bridge", charset="UTF-8"']);
  if (on.has('extrahdrs')) {
    H.push(['Date', new Date().toUTCString()], ['Server', 'audit-sb/0.1 (raw net)'], ['Set-Cookie', 'a=1; Path=/; HttpOnly'], ['Set-Cookie', 'b=2; Max-Age=60'],
      ['Vary', 'Accept-Encoding, x-sidebridge-key'], ['Cache-Control', 'no-store, no-cache'], ['X-Empty', ''], ['X-Long', 'x'.repeat(4096)], ['X-Request-Id', uuid()]);
    if (!opts.close) H.push(['Keep-Alive', 'timeout=5, max=100'], ['Connection', 'keep-alive']);
  }
  const close = opts.close || on.has('announceclose');
  if (close) H.push(['Connection', 'close']);
  const bodyBuf = payload === null ? Buffer.alloc(0) : payload;
  let wire;
  if (status === 204) {
    wire = Buffer.alloc(0);
  } else if (opts.head) {
    H.push(on.has('headte') ? ['Transfer-Encoding', 'chunked'] : ['Content-Length', String(on.has('headcl') ? opts.getLen : 0)]);
    wire = Buffer.alloc(0);
  } else if (chunked && !opts.delayBody) {
    H.push(['Transfer-Encoding', on.has('tecase') ? 'Chunked' : 'chunked']);
    wire = chunkify(bodyBuf);
  } else {
    H.push(['Content-Length', on.has('clzeros') ? String(bodyBuf.length).padStart(6, '0') : String(bodyBuf.length)]);
    wire = bodyBuf;
  }
  head += H.map(([k, v]) => hname(k) + ': ' + v + '\r\n').join('') + '\r\n';
  const sock = conn.sock;
  const finish = () => {
    if (close || conn.peerEnded) { sock.end(); return; }
    if (on.has('idle')) { conn.idleTimer = setTimeout(() => sock.end(), +(process.env.IDLE_MS || 30)); }
    conn.busy = false; pump(conn);
  };
  if (opts.delayBody) {
    // body preceded by whitespace bytes over 12 s
    const pad = Buffer.from('   ');
    const full = Buffer.concat([pad, bodyBuf]);
    const hd = head.replace(/(Content-Length: )\d+/i, (m, p) => p + full.length);
    sock.write(lines.join('') + hd);
    let k = 0;
    const tick = () => {
      if (k < 3) { sock.write(pad.subarray(k, k + 1)); k++; setTimeout(tick, 4000); }
      else { sock.write(bodyBuf); finish(); }
    };
    setTimeout(tick, 10);
    return;
  }
  if (on.has('f-cut-body') && wire.length > 2) {
    sock.write(Buffer.concat([Buffer.from(lines.join('') + head, 'latin1'), wire.subarray(0, wire.length >> 1)]));
    sock.destroy();
    return;
  }
  sock.write(Buffer.concat([Buffer.from(lines.join('') + head, 'latin1'), wire]));
  finish();
}

// ---------- Side Bridge logic ----------
const sys = (t, end) => { const o = { messages: [msg(t, 'system')] }; if (end) o.options = { endSession: true }; return o; };
function validMsgs(a) {
  if (a === undefined || a === null) return true;
  if (!Array.isArray(a)) return false;
  return a.every((m) => m && typeof m === 'object' && !Array.isArray(m) && typeof m.content === 'string' && typeof m.id === 'string');
}
function handle(req) {
  // returns [status, obj, extraHeaders, flags]
  if (req.method !== 'POST') {
    const st = on.has('f-get-400') ? 400 : 405;
    return [st, sys('This endpoint accepts POST only.'), [['Allow', 'POST']], {}];
  }
  if (KEY !== null) {
    const k = req.headers['x-sidebridge-key'];
    if (k === undefined || k !== KEY) return [401, sys('Access denied: missing or wrong key.', true), [], {}];
  }
  let r;
  try { r = JSON.parse(req.body.toString('utf8')); } catch (e) { return [400, sys('The request body is not valid JSON.'), [], {}]; }
  if (!r || typeof r !== 'object' || Array.isArray(r)) return [400, sys('The request must be a JSON object.', true), [], {}];
  if (typeof r.sidebridge !== 'string') return [400, sys('The request lacks a protocol version.', true), [], {}];
  if (!/^1(\.|$)/.test(r.sidebridge)) return [400, sys('This bridge speaks Side Bridge 1.x only.', true), [], {}];
  if (typeof r.chatId !== 'string') return [400, sys('The request lacks a chat id.', true), [], {}];
  if (!validMsgs(r.messages) || !validMsgs(r.history)) return [400, sys('The request has fields of the wrong type.'), [], {}];
  const c = chat(r.chatId);
  const hist = Array.isArray(r.history) ? r.history : null;
  if (r.messages === undefined || r.messages === null) { // session start
    if (c.ended) return [200, sys('This chat has ended.', true), [], {}];
    const o = { messages: [] };
    if (c.priv) o.options = { disableSendHistory: true };
    return [200, o, [], {}];
  }
  if (c.ended) return [200, sys('This chat has ended.', true), [], {}];
  const out = []; const opts = {}; let flags = {};
  for (const m of r.messages) {
    const t = m.content.trim();
    if (t === '') continue;
    let a; let mm;
    if ((mm = /^keep in mind (\S+)$/i.exec(t))) { c.word = mm[1]; a = 'Noted, I will keep that in mind.'; }
    else if (/^what should you keep in mind\??$/i.test(t)) {
      let w = null;
      if (hist) for (const h of hist) { const x = typeof h.content === 'string' && h.from === 'user' && /^keep in mind (\S+)$/i.exec(h.content.trim()); if (x) w = x[1]; }
      if (!w) w = c.word;
      a = w ? 'You asked me to keep in mind: ' + w + '.' : 'You gave me nothing to keep in mind.';
      flags.recall = true;
    } else if (/^pardon\??$/i.test(t)) {
      let prev = null;
      if (hist) for (const h of hist) if (h.from === 'assistant' && typeof h.content === 'string' && h.content) prev = h.content;
      if (prev === null) prev = c.last;
      a = prev ? 'I said: ' + prev : 'I have said nothing yet.';
    } else if (/^private please$/i.test(t)) { c.priv = true; opts.disableSendHistory = true; a = 'History off.'; }
    else if (/^public please$/i.test(t)) { c.priv = false; opts.disableSendHistory = false; a = 'History on.'; }
    else if (/^see you$/i.test(t)) { c.ended = true; opts.endSession = true; a = 'Goodbye.'; }
    else if (on.has('ctrlesc')) { a = 'You said:\u0000\b\f\u001F\t' + t; flags.echo = true; }
    else { a = (on.has('uesc') ? 'You said (café ☕ 😀): ' : 'You said: ') + t; flags.echo = true; }
    c.last = a;
    const mo = msg(a);
    if (flags.echo && on.has('f-no-content')) delete mo.content;
    out.push(mo);
  }
  const o = { messages: out };
  if (Object.keys(opts).length) o.options = opts;
  return [200, o, [], flags];
}

// ---------- HTTP reading ----------
function parseReq(buf) {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  const [method, target] = lines[0].split(' ');
  const headers = {};
  for (const l of lines.slice(1)) { const i = l.indexOf(':'); if (i < 0) continue; const k = l.slice(0, i).trim().toLowerCase(); const v = l.slice(i + 1).trim(); headers[k] = k in headers ? headers[k] + ', ' + v : v; }
  let pos = end + 4; let bodyBuf;
  if (/chunked/i.test(headers['transfer-encoding'] || '')) {
    const parts = [];
    for (;;) {
      const le = buf.indexOf('\r\n', pos); if (le < 0) return null;
      const sz = parseInt(buf.subarray(pos, le).toString('latin1').split(';')[0].trim(), 16);
      pos = le + 2;
      if (sz === 0) { const te = buf.indexOf('\r\n\r\n', pos - 2); if (te < 0) return null; pos = te + 4; break; }
      if (buf.length < pos + sz + 2) return null;
      parts.push(buf.subarray(pos, pos + sz)); pos += sz + 2;
    }
    bodyBuf = Buffer.concat(parts);
  } else {
    const n = parseInt(headers['content-length'] || '0', 10) || 0;
    if (buf.length < pos + n) return null;
    bodyBuf = buf.subarray(pos, pos + n); pos += n;
  }
  return { req: { method, target, headers, body: bodyBuf }, used: pos };
}
let replies = 0;
function pump(conn) {
  if (conn.busy) return;
  const p = parseReq(conn.buf);
  if (!p) return;
  if (conn.idleTimer) { clearTimeout(conn.idleTimer); conn.idleTimer = null; }
  conn.buf = conn.buf.subarray(p.used);
  conn.busy = true;
  const req = p.req;
  const close = /close/i.test(req.headers.connection || '');
  if (req.method === 'OPTIONS') {
    respond(conn, 204, [['Allow', 'POST, OPTIONS'], ['Access-Control-Allow-Origin', '*'], ['Access-Control-Allow-Methods', 'POST'], ['Access-Control-Allow-Headers', 'content-type, x-sidebridge-key']], null, { close });
    return;
  }
  const [st, obj, hdrs, flags] = handle(req);
  const b = body(obj);
  const delay = on.has('slowfirst') && replies === 0 ? 8000 : 0;
  replies++;
  setTimeout(() => {
    if (conn.sock.destroyed) return;
    respond(conn, st, hdrs, b, { close, head: req.method === 'HEAD', getLen: b.length, delayBody: on.has('gap') && flags.recall });
  }, delay);
}
const server = net.createServer({ allowHalfOpen: true }, (sock) => {
  const conn = { sock, buf: Buffer.alloc(0), busy: false, idleTimer: null };
  sock.on('data', (d) => { conn.buf = Buffer.concat([conn.buf, d]); pump(conn); });
  sock.on('error', () => {});
  sock.on('end', () => { conn.peerEnded = true; if (!conn.busy) sock.end(); });
});
server.on('error', (e) => { console.error(e); process.exit(1); });
server.listen(0, '127.0.0.1', () => { console.log('listening on http://127.0.0.1:' + server.address().port + '/'); });
