#!/usr/bin/env node
// sb-node: an independent Side Bridge v1.0 bridge (Node 20, plain `http`), written from the
// protocol text alone by an audit of bridgewire; a test peer of tests/sidebridge_node_peer.rs.
//
//   node server.js [--key K] [--odd a,b,...|all] [--no-odd a,b] [--flaw x,y] [--port N] [--list]
//
// Phrases (fixture in bridgewire.toml beside this file):
//   "memorize <word> please"  -> remembers <word>
//   "what was the secret?"    -> "The secret is <word>."
//   "say that again"          -> repeats the bridge's previous answer (found by id in history)
//   "incognito on"/"incognito off" -> disableSendHistory true/false
//   "good night"              -> endSession true
'use strict';
const http = require('http');
const crypto = require('crypto');

// ---- legal oddities (--odd) -------------------------------------------------------------
const ODD = {
  chunked: 'Transfer-Encoding: chunked, body written in 5-byte chunks (Node chunk framing)',
  close: 'Connection: close on every reply',
  extrakeys: 'unknown keys at top level, in messages, in options and in sources items',
  keyorder: 'unusual key order: options before messages, content/from before id',
  uescape: 'non-ASCII and some ASCII chars (incl. "-" in ids) written as \\uXXXX escapes',
  escapeall: 'EVERY character of every string written as \\uXXXX (word included)',
  upperids: 'reply ids in UPPER case',
  sources: 'assistant messages carry sources with legal absolute https URLs (+extra key)',
  srcupper: 'one source URL with an upper-case scheme and host (HTTPS://EXAMPLE.COM/...)',
  nullflags: 'options flags not set are sent as null; empty messages as null',
  status: 'odd 2xx statuses: session start 201, sends 203, option toggles 202',
  editprev: 'each answer also updates the previous answer in place (reuses its own id)',
  editcase: 'with editprev: the reused id in the opposite letter case',
  transcript: 'every reply (session start or send) re-sends, first and unchanged (same id, content and sources), every message the bridge sent earlier in the chat (an upsert that changes nothing on screen), then its new messages',
  ackword: 'the answer to "memorize WORD please" names the word ("Stored: WORD. I will keep it safe.")',
  window: 'a context window: the recall reads only the last 12 messages of the conversation (of history when sent, else of the chat as the bridge saw it), with or without its own state; a word told earlier is forgotten',
  reopenend: 'session start of a reopened private chat: a system message "Private chats cannot be resumed" and endSession true, instead of re-asserting disableSendHistory (nothing more is sent, so no history leaves the chat)',
  v11note: 'a send with a newer minor version (1.x, x>0) is answered as 1.0 is, after a system note saying the bridge speaks 1.0',
  resendprev: 'each answer also re-sends the previous answer unchanged (same id, content and sources): an upsert that changes nothing on screen',
  pretty: 'pretty-printed JSON with tabs, CRLF and leading/trailing whitespace',
  charset: 'Content-Type: application/json; charset=UTF-8',
  slow: 'every reply delayed 300 ms, the first one 3 s',
  greet: 'session start answered with a system greeting',
  sysnote: 'a system note before every answer to a send',
  allowlist: 'GET/PUT/HEAD: 405 with Allow: "OPTIONS, POST" and a Side Bridge body',
  reason: 'unusual HTTP reason phrases',
  refuse200: 'wrong/missing key refused with 200 (system message + endSession) instead of 401',
  refuse403: 'wrong/missing key refused with 403',
  reassert: 'every reply in a private chat re-asserts disableSendHistory: true',
  endfalse: 'every non-ending reply says endSession: false explicitly',
  emptynudge: 'an empty send gets a system message asking for text',
  err422: 'malformed requests get 422 instead of 400',
  keytrim: 'the key is compared trimmed',
  slashsame: 'any path is served like the endpoint (default: only /bridge and /bridge/)',
  ended410: 'session start of an ended chat: 410 Gone with a system message and endSession true',
  md: 'answers carry Markdown, emoji (surrogate pairs) and a newline',
  onlyoptions: 'toggles answered with options only, no message',
  gzipalways: 'Content-Encoding: gzip on every reply body (whatever Accept-Encoding says)',
  gzipasked: 'Content-Encoding: gzip when the request says Accept-Encoding: gzip',
  bralways: 'Content-Encoding: br (Node zlib brotli) on every reply body (the client sends no Accept-Encoding: any coding is acceptable)',
  bignum: 'an unknown top-level key holding the number 1e400',
  bigint: 'an unknown top-level key holding 123456789012345678901234567890',
  bom: 'a UTF-8 BOM before the JSON of every reply (the app\'s Foundation JSONDecoder skips one at the very start; a flaw in the audit\'s first table, an oddity since)',
  deep: 'an unknown top-level key holding arrays nested 150 deep',
  dupextra: 'an unknown top-level key written twice',
  dupmsgs: '"messages" written twice: first [] then the real list (RFC 8259: names SHOULD be unique)',
  escapekeys: 'object keys written fully as \\uXXXX escapes',
  sysanswer: 'all answers come from "system" instead of "assistant"',
  split: 'the recall/repeat answer split over two messages (word/text in the second)',
  alwaysprivate: 'every session start sets disableSendHistory true (the bridge keeps context itself)',
  oddids: 'mixed-case, non-v4 (v7-like and v1-like) UUIDs',
  path404html: 'only the exact endpoint path is served; any other path (e.g. /bridge/) gets a framework-style 404 text/html page (not the endpoint: no Side Bridge body owed)',
  strictpath: 'only the exact endpoint path is served; any other path 404 with a Side Bridge body',
  slash308: 'the endpoint with a trailing slash answers 308 to the endpoint',
  redir307abs: 'POST /bridge answered 307 with an absolute Location to /bridge2',
  redir307rel: 'POST /bridge answered 307 with Location "bridge2" (relative, no leading slash)',
  redir307net: 'POST /bridge answered 307 with Location "//127.0.0.1:PORT/bridge2"',
  query: 'the endpoint URL printed with ?token=t0k3n, and the query is required',
  earlyhints: 'a 103 Early Hints interim response before every reply',
  srcexotic: 'sources with legal but unusual absolute URLs (port, userinfo, IPv6, %-escapes, empty title)',
  trailers: 'chunked replies with a trailer field',
  allow2: 'GET/PUT/HEAD: Allow sent as two header lines ("OPTIONS" and "POST")',
  status299: 'sends answered with the unregistered success status 299',
  nodewarn: 'a Node process warning is printed to stderr at start-up ("(node:PID) [DEP0040] DeprecationWarning ...")',
  bannerdocs: 'a line naming the docs URL (https://github.com/...) is printed before the listen line',
  lennote: 'a system note AFTER every answer giving the answer length ("(28 characters)"): deterministic',
  ipv6: 'listen on [::1] and print http://[::1]:PORT/bridge',
  localhost: 'listen on localhost (Node picks ::1 or 127.0.0.1) and print http://localhost:PORT/bridge',
  anyaddr: 'listen on Node\'s default address (::, dual-stack) and print http://[::]:PORT/bridge',
  slashadd308: 'POST /bridge answered 308 to /bridge/ (trailing-slash normalisation); /bridge/ is the endpoint',
  redact: 'a user message containing a URL is updated in place (same id, from user) with the URL replaced by [link]',
  printearly: 'the URL is printed 400 ms before the socket listens (banner before bind)',
  slowrecall: 'answers to "what was the secret?" take 12 s (within the 60 s timeout)',
  bigcontent: 'every answer carries an extra 2 MB of text after the answer',
  postnote: 'a system note AFTER every answer to a send',
  endedit: '`good night` answered by editing the previous answer in place (same id) + endSession, no new message',
  endedsilent: 'session start of an ended chat: {"options":{"endSession":true}} with no message',
  fixedgreet: 'every session start greets with a system message whose id is one constant UUID (same in every chat)',
  chatidgreet: 'every session start greets with a system message whose id is the chatId (lower case)',
  edithist: 'each answer also edits, in place, the last assistant message found in history (its id)',
  huge12: 'the answer to a message starting with "search" carries 12 MB of text (a legal body: the app reads the whole body, whatever its size)',
  firstwelcome: 'when history shows the send is the chat\'s first user message (exactly one user message in history), an assistant "Welcome!" precedes the answer; none when history is absent',
  modelish: 'every answer ends with a draft number drawn at random (" (draft 5f3a9c)"), as a model\'s wording varies: two runs never answer alike',
  lsep: 'answers carry a LINE SEPARATOR (U+2028) after "You said:" and a PARAGRAPH SEPARATOR (U+2029) at the end (legal JSON string characters, invisible in a terminal)',
};
const OPTIN = ['modelish', 'huge12', 'transcript', 'ackword', 'window', 'reopenend', 'v11note', 'path404html', 'resendprev', 'firstwelcome', 'lsep', 'refuse200', 'refuse403', 'escapeall', 'ended410', 'slow', 'gzipalways', 'gzipasked', 'bralways', 'bignum', 'bigint', 'deep', 'dupextra', 'dupmsgs', 'escapekeys', 'sysanswer', 'split', 'alwaysprivate', 'oddids', 'strictpath', 'slash308', 'redir307abs', 'redir307rel', 'redir307net', 'query', 'earlyhints', 'srcexotic', 'trailers', 'allow2', 'status299', 'fixedgreet', 'chatidgreet', 'edithist', 'nodewarn', 'bannerdocs', 'postnote', 'endedit', 'endedsilent', 'lennote', 'ipv6', 'localhost', 'anyaddr', 'slashadd308', 'redact', 'printearly', 'slowrecall', 'bigcontent'];
const FLAW = {
  'no-id': 'reply message without id',
  'bad-id': 'reply id "msg-<n>" (not a UUID)',
  'brace-id': 'reply id in {braces}',
  'nohyphen-id': 'reply id as 32 hex digits without hyphens',
  'rel-source': 'sources url relative (/docs)',
  'empty-source-url': 'sources url ""',
  'ftp-source': 'sources url ftp://',
  'notitle-source': 'sources item without title',
  'redirect-302': 'POST to the endpoint answered 302 to /bridge2',
  'redirect-slash-301': 'the endpoint with trailing slash toggled answers 301',
  'empty-500': '5xx on an empty send',
  'empty-ends': 'an empty send ends the session',
  'stack': 'malformed JSON: 400 whose content carries a Node stack trace',
  'from-user': 'replies from "user"',
  'from-bot': 'replies from "bot"',
  'from-num': 'replies with from: 1',
  'content-num': 'replies with content: 42',
  'opt-string': 'option flags as strings "true"',
  'opt-array': 'options: []',
  'msgs-object': 'messages: {} (object, not array)',
  'top-array': 'top-level array',
  'trailing-comma': 'JSON with a trailing comma',
  'latin1': 'content encoded ISO-8859-1',
  'dup-ids': 'two reply messages with the same id',
  'reuse-user-id': 'answer reuses the user message id',
  'reuse-hist-id': 'answer reuses the id of the first foreign (system/unknown) history message',
  'double': 'answers the send again from history',
  'accept-missing-key': 'serves requests without the key',
  'accept-wrong-key': 'serves requests with a wrong key',
  'key-ci': 'compares the key case-insensitively',
  'parse-first': 'malformed body rejected 400 before the key check',
  'refuse-noend': 'refusal without endSession',
  'refuse-assistant': 'refusal carries an assistant message',
  'get-200': 'GET answered 200 {}',
  'no-allow': '405 without Allow',
  'forget-private': 'keeps no state: recall only from history',
  'reenable': 're-enables history unasked on the next reply',
  'sticky-private': 'after `incognito off` (answered disableSendHistory:false) the next reply sets disableSendHistory:true again, unasked',
  'global': 'one memory for all chats',
  'ended-500': 'session start of an ended chat: 500',
  'refuse-1.1': 'version 1.1 refused with 400',
  'unknown-500': 'history with from "unknown": 500',
  'strict-keys': 'unknown request keys: 400',
  'no-end': 'good night does not set endSession',
  'silent-end': 'good night ends with no message',
  'empty-content': 'extra assistant message with content ""',
  'no-sources': 'reply messages without sources key',
  'send-401': 'normal answers sent with status 401 (user-visible text)',
  'case-ids': 'looks its ids up case-sensitively',
  'slow-11': 'first reply after 11 s',
  'raw-echo': 'echo text cut from the raw request bytes',
  'forget-reopen': 'does not re-assert incognito at session start',
  'nan': 'NaN value in the reply',
  'single-quote': 'single-quoted JSON strings',
  'echo-history': 'recall answers with the whole history text',
  'leak-msg': 'malformed/wrong-typed requests: content is the real V8 error message (e.message, no class name)',
  'leak-str': 'malformed/wrong-typed requests: content is String(e) of the real V8 error',
  'leak-parse-msg': 'ONLY the malformed-JSON probe: content is the real V8 JSON.parse e.message',
  'leak-env': 'every malformed/wrong-typed request: content is $LEAK_TEXT',
  'src-null': 'reply messages carry sources: null (profile alpha: required key)',
  'allow-lower': 'GET/PUT/HEAD: 405 with Allow: "post" (method names are case-sensitive)',
  'allow-postal': 'GET/PUT/HEAD: 405 with Allow: "POSTAL"',
  'double-varied': 'answers the send AND again the last history item (same message), the second answer worded differently',
  'key-prefix': 'accepts any non-empty PREFIX of the key (key.startsWith(sent))',
  'malformed-200': 'malformed/wrong-typed requests answered 200 (with a system message)',
  'malformed-500': 'malformed/wrong-typed requests answered 500 (with a system message)',
  'leak-path': 'malformed requests: content names the server file and line (/srv/sb/server.js:212:19)',
  'leak-key': 'the refusal text quotes the configured key',
  'refuse-id': 'the 401 refusal of a send reuses the id of the user\'s message it refuses (overwrites the user\'s bubble)',
  'refuse-nosrc': 'the refusal\'s system message has no `sources` key (profile alpha drops the refusal)',
  'refuse-badsrc': 'the refusal\'s system message cites a relative source url "/help/auth"',
  'leak-pytype': 'malformed/wrong-typed requests: content is CPython\'s TypeError text without its class name ("string indices must be integers, not \'str\'")',
  'from-case': 'replies from "Assistant" (capitalised)',
  'from-unknown': 'replies from "unknown"',
  'id-space': 'reply ids with a trailing space',
  'urn-id': 'reply ids as urn:uuid:...',
  'id-7-5': 'reply ids with hyphens misplaced (7-5-4-4-12)',
  'src-js': 'sources url javascript:alert(1)',
  'src-nohost': 'sources url "http://"',
  'src-opaque': 'sources url "https:example.com" (no //)',
  'src-space': 'sources url with a space in the host',
  'src-title-num': 'sources title is a number',
  'src-object': 'sources is an object, not an array',
  'msg-null': 'messages: [null, ...]',
  'content-null': 'content: null',
  'unknown-ends': 'history with from "unknown": ends the session',
  'get-302': 'GET/PUT/HEAD answered 302',
  'opt-num': 'option flags as 1/0',
  'empty-options-end': 'empty send answered with endSession true but no message',
  'auth-start': 'the key is checked only at session start: a send in a chat whose session start carried the right key is served with no key or a wrong key',
  'auth-start-wrong': 'like auth-start, but a send with NO key is still refused: only a wrong key is served in a chat started with the right key',
  'v11-note-only': 'a send with a newer minor version (1.x, x>0) is answered 200 with a system note asking to update the app, and no answer',
  'refuse-empty': 'the refusal\'s system message has empty content (the app shows no bubble for it: the user is told nothing)',
  'lone-surrogate': 'answers carry an unpaired surrogate escape (\\ud800) in content: no character, and the app\'s JSON decoder refuses the body',
  'end-resend': '`good night` answered by re-sending the previous answer unchanged (same id, content and sources) + endSession: nothing new on screen',
  'history-blind': 'the recall answers from the bridge\'s own memory only, never from history: a chat restored from history (server restart) has forgotten',
  'empty-key': 'an x-sidebridge-key header with an empty value is accepted (tested for truthiness: "no key given")',
};

const args = process.argv.slice(2);
let key = null, port = 0, LOG = null;
const odd = new Set(), flaw = new Set();
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  const list = () => String(args[++i] || '').split(',').map(s => s.trim()).filter(Boolean);
  if (a === '--key') key = args[++i];
  else if (a === '--port') port = Number(args[++i]);
  else if (a === '--log') LOG = args[++i];
  else if (a === '--odd') for (const o of list()) { if (o === 'all') Object.keys(ODD).filter(k => !OPTIN.includes(k)).forEach(k => odd.add(k)); else if (ODD[o]) odd.add(o); else die('unknown oddity ' + o); }
  else if (a === '--no-odd') for (const o of list()) odd.delete(o);
  else if (a === '--flaw') for (const f of list()) { if (FLAW[f]) flaw.add(f); else die('unknown flaw ' + f); }
  else if (a === '--list') { for (const [k, v] of Object.entries(ODD)) console.log('odd\t' + k + '\t' + v); for (const [k, v] of Object.entries(FLAW)) console.log('flaw\t' + k + '\t' + v); process.exit(0); }
  else die('unknown argument ' + a);
}
// the "default" set: oddities that are mutually compatible (refuse200/refuse403/escapeall/
// editcase/slashsame/ended410/onlyoptions/emptynudge/err422 are opt-in only via explicit names)
if (odd.has('refuse200') && odd.has('refuse403')) die('refuse200 and refuse403 exclude each other');
function die(m) { process.stderr.write('sb-node: ' + m + '\n'); process.exit(2); }

// ---- JSON writer with the oddities ------------------------------------------------------
function esc(s, all) {
  let out = '"';
  for (const ch of s) {
    const cp = ch.codePointAt(0);
    const u = (n) => '\\u' + n.toString(16).padStart(4, '0').toUpperCase();
    if (all) {
      if (cp > 0xffff) { const v = cp - 0x10000; out += u(0xd800 + (v >> 10)) + u(0xdc00 + (v & 0x3ff)); }
      else out += u(cp);
    } else if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (cp < 0x20) out += u(cp);
    else if (cp > 0x7e && odd.has('uescape')) {
      if (cp > 0xffff) { const v = cp - 0x10000; out += u(0xd800 + (v >> 10)).toLowerCase() + u(0xdc00 + (v & 0x3ff)); }
      else out += u(cp);
    } else if (odd.has('uescape') && (ch === '-' || ch === '/')) out += ch === '-' ? '\\u002d' : '\\/';
    else out += ch;
  }
  return out + '"';
}
function write(v, ind) {
  const pretty = odd.has('pretty');
  const nl = pretty ? '\r\n' + '\t'.repeat(ind + 1) : '';
  const end = pretty ? '\r\n' + '\t'.repeat(ind) : '';
  const sep = pretty ? ' : ' : ':';
  if (v === null) return 'null';
  if (typeof v === 'number') return Number.isNaN(v) ? 'NaN' : String(v);
  if (typeof v === 'boolean') return String(v);
  if (typeof v === 'string') return esc(v, odd.has('escapeall'));
  if (Array.isArray(v)) return v.length ? '[' + v.map(x => nl + write(x, ind + 1)).join(',') + end + ']' : (pretty ? '[ ]' : '[]');
  const ks = Object.keys(v);
  return ks.length ? '{' + ks.map(k => nl + esc(k, odd.has('escapekeys')) + sep + write(v[k], ind + 1)).join(',') + end + '}' : (pretty ? '{ }' : '{}');
}

// ---- state ------------------------------------------------------------------------------
const chats = new Map();
let globalChat = null;
function chat(cid) {
  const k = cid.toUpperCase();
  if (!chats.has(k)) chats.set(k, newChat());
  const c = chats.get(k);
  c.cid = cid;
  if (flaw.has('global')) { if (!globalChat) globalChat = { word: null }; Object.defineProperty(c, 'word', { get: () => globalChat.word, set: (v) => { globalChat.word = v; }, configurable: true }); }
  return c;
}
function newChat() { return { word: null, priv: false, ended: false, said: new Map(), last: null, lastMsg: null, reenable: false }; }
let nid = 0;
function newId() {
  let u = crypto.randomUUID();
  if (odd.has('oddids')) { u = u.split(''); u[14] = (nid++ % 2) ? '7' : '1'; u = u.map((c, i) => i % 3 ? c.toUpperCase() : c).join(''); }
  return odd.has('upperids') ? u.toUpperCase() : u;
}
const idKey = (id) => flaw.has('case-ids') ? id : id.toUpperCase();

function msg(from, content, srcs) {
  let id = newId();
  if (flaw.has('bad-id')) id = 'msg-' + (++nid);
  if (flaw.has('brace-id')) id = '{' + id + '}';
  if (flaw.has('nohyphen-id')) id = id.replace(/-/g, '');
  let m = { id, from, content, sources: srcs || [] };
  if (flaw.has('from-user')) m.from = 'user';
  if (flaw.has('from-bot') && from === 'assistant') m.from = 'bot';
  if (flaw.has('from-num')) m.from = 1;
  if (flaw.has('from-case') && from === 'assistant') m.from = 'Assistant';
  if (flaw.has('from-unknown') && from === 'assistant') m.from = 'unknown';
  if (flaw.has('id-space')) m.id = id + ' ';
  if (flaw.has('urn-id')) m.id = 'urn:uuid:' + id;
  if (flaw.has('id-7-5')) m.id = id.slice(0, 7) + '-' + id.slice(7, 8) + id.slice(9, 13) + id.slice(13);
  if (flaw.has('content-null') && from === 'assistant') m.content = null;
  if (flaw.has('content-num') && from === 'assistant') m.content = 42;
  if (flaw.has('no-id')) delete m.id;
  if (flaw.has('no-sources')) delete m.sources;
  if (flaw.has('src-null')) m.sources = null;
  if (odd.has('extrakeys')) m['x-meta'] = { model: 'sb-node', latency_ms: 12, tags: ['a', null, true] };
  if (odd.has('keyorder')) { const o = {}; for (const k of ['content', 'x-meta', 'sources', 'from', 'id']) if (k in m) o[k] = m[k]; m = o; }
  return m;
}
function sourcesFor() {
  const s = [];
  if (odd.has('sources')) s.push({ url: 'https://example.com/docs/side-bridge?lang=ja#v1.0', title: 'Side Bridge – 仕様 ✓', ...(odd.has('extrakeys') ? { favicon: null, rank: 1 } : {}) });
  if (odd.has('srcupper')) s.push({ title: 'Upper', url: 'HTTPS://EXAMPLE.COM/Upper/Case' });
  if (odd.has('srcexotic')) s.push({ title: '', url: 'https://user:pw@example.com:8443/a%20b/%E4%BB%95?q=1&r=%2F#frag' }, { title: 'v6', url: 'http://[2001:db8::1]:8080/x' }, { title: 'host only', url: 'http://localhost' });
  if (flaw.has('src-js')) s.push({ title: 'js', url: 'javascript:alert(1)' });
  if (flaw.has('src-nohost')) s.push({ title: 'nohost', url: 'http://' });
  if (flaw.has('src-opaque')) s.push({ title: 'opaque', url: 'https:example.com' });
  if (flaw.has('src-space')) s.push({ title: 'space', url: 'https://exa mple.com/' });
  if (flaw.has('src-title-num')) s.push({ title: 7, url: 'https://example.com/' });
  if (flaw.has('rel-source')) s.push({ title: 'rel', url: '/docs' });
  if (flaw.has('empty-source-url')) s.push({ title: 'empty', url: '' });
  if (flaw.has('ftp-source')) s.push({ title: 'ftp', url: 'ftp://example.com/file' });
  if (flaw.has('notitle-source')) s.push({ url: 'https://example.com/x' });
  return s;
}
function options(o) {
  o = Object.assign({}, o || {});
  if (odd.has('nullflags')) { if (!('disableSendHistory' in o)) o.disableSendHistory = null; if (!('endSession' in o)) o.endSession = null; }
  if (odd.has('endfalse') && !o.endSession) o.endSession = false;
  if (flaw.has('opt-num')) for (const k of Object.keys(o)) if (typeof o[k] === 'boolean') o[k] = o[k] ? 1 : 0;
  if (flaw.has('opt-string')) for (const k of Object.keys(o)) if (typeof o[k] === 'boolean') o[k] = String(o[k]);
  if (odd.has('extrakeys')) o.theme = 'dark';
  return Object.keys(o).length ? o : null;
}
function body(messages, opts) {
  if (flaw.has('empty-content') && messages && messages.length) messages.push(msg('assistant', ''));
  const o = options(opts);
  let b = {};
  if (odd.has('keyorder') && o) b.options = o;
  if (messages && messages.length) b.messages = messages; else if (odd.has('nullflags')) b.messages = null;
  if (o && !b.options) b.options = o; else if (!o && odd.has('nullflags')) b.options = null;
  if (flaw.has('opt-array') && b.options) b.options = [];
  if (flaw.has('src-object') && b.messages) b.messages.forEach(m => { if (m.from === 'assistant') m.sources = { title: 'x', url: 'https://example.com/' }; });
  if (flaw.has('msg-null') && b.messages) b.messages.unshift(null);
  if (flaw.has('msgs-object') && b.messages) b.messages = { 0: b.messages[0] };
  if (flaw.has('nan')) b.score = NaN;
  if (odd.has('extrakeys')) { b['x-bridge'] = { name: 'sb-node', version: [1, 0] }; b.sidebridge = '1.0'; }
  if (flaw.has('top-array')) b = [b];
  return b;
}

// ---- HTTP -------------------------------------------------------------------------------
let replies = 0;
function send(res, status, obj, extraHeaders) {
  let text = obj === undefined ? '' : write(obj, 0);
  if (obj && !Array.isArray(obj) && text.startsWith('{')) {
    let pre = '';
    if (odd.has('dupmsgs') && obj.messages) pre += '"messages":[],';
    if (odd.has('dupextra')) pre += '"x-dup":1,"x-dup":"two",';
    if (odd.has('bignum')) pre += '"x-score":1e400,';
    if (odd.has('bigint')) pre += '"x-big":123456789012345678901234567890,';
    if (odd.has('deep')) pre += '"x-deep":' + '['.repeat(150) + ']'.repeat(150) + ',';
    if (pre) text = '{' + pre + (text === '{}' || text === '{ }' ? '' : text.slice(1)).replace(/^$/, '');
    if (pre && (text.endsWith(','))) text = text.slice(0, -1) + '}';
    if (pre && obj && Object.keys(obj).length === 0) text = text.replace(/,$/, '') ;
  }
  if (flaw.has('trailing-comma') && text.endsWith('}')) text = text.slice(0, -1) + ',}';
  if (flaw.has('single-quote')) text = text.replace(/"/g, "'");
  if (flaw.has('lone-surrogate')) text = text.replace(/"You said: /g, '"You said: \\ud800');
  if (odd.has('pretty') && text) text = ' \r\n\t' + text + '\r\n\r\n ';
  let buf = Buffer.from(text, 'utf8');
  if (flaw.has('latin1')) buf = Buffer.from(text, 'latin1');
  if (odd.has('bom')) buf = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), buf]);
  if (odd.has('gzipalways') || (odd.has('gzipasked') && /gzip/.test(res.req.headers['accept-encoding'] || ''))) { buf = require('zlib').gzipSync(buf); extraHeaders = Object.assign({ 'Content-Encoding': 'gzip', Vary: 'Accept-Encoding' }, extraHeaders || {}); }
  else if (odd.has('bralways')) { buf = require('zlib').brotliCompressSync(buf); extraHeaders = Object.assign({ 'Content-Encoding': 'br' }, extraHeaders || {}); }
  const headers = Object.assign({ 'Content-Type': odd.has('charset') ? 'application/json; charset=UTF-8' : 'application/json' }, extraHeaders || {});
  if (odd.has('close')) headers.Connection = 'close';
  if (odd.has('extrakeys')) headers['X-Bridge'] = 'sb-node';
  const n = ++replies;
  if (LOG) require('fs').appendFileSync(LOG, JSON.stringify({ reply: status, url: res.req.url, body: text.slice(0, 300) }) + '\n');
  const extraDelay = slowNext; slowNext = 0;
  const delay = extraDelay || flaw.has('slow-11') && n === 1 ? 11000 : odd.has('slow') ? (n === 1 ? 3000 : 300) : 0;
  setTimeout(() => {
    const reason = odd.has('reason') ? ({ 200: 'Fine', 201: 'Made', 202: 'Taken', 203: 'Relayed', 400: 'Nope', 401: 'Who Are You', 405: 'Not Here' }[status]) : undefined;
    const isHead = res.req.method === 'HEAD';
    if (odd.has('earlyhints')) res.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' });
    if (odd.has('trailers') && odd.has('chunked')) headers.Trailer = 'X-Checksum';
    if (odd.has('chunked')) {
      headers['Transfer-Encoding'] = 'chunked';
      res.writeHead(status, reason, headers);
      if (isHead) return res.end();
      // write chunks ourselves via the socket-level API is not possible; use res.write pieces
      for (let i = 0; i < buf.length; i += 5) res.write(buf.subarray(i, i + 5));
      if (odd.has('trailers')) res.addTrailers({ 'X-Checksum': String(buf.length) });
      res.end();
    } else {
      headers['Content-Length'] = buf.length;
      res.writeHead(status, reason, headers);
      res.end(isHead ? undefined : buf);
    }
  }, delay);
}
function sysErr(res, status, text, end) { send(res, status, body([msg('system', text)], end ? { endSession: true } : null)); }
let lastErr = null, tok = 0, slowNext = 0;
function badRequest(res, text) {
  if (flaw.has('leak-msg') && lastErr) text = lastErr.message;
  if (flaw.has('leak-str') && lastErr) text = String(lastErr);
  if (flaw.has('leak-env')) text = process.env.LEAK_TEXT || text;
  if (flaw.has('leak-pytype')) text = "string indices must be integers, not 'str'";
  if (flaw.has('leak-path')) text = 'Bad request (at handle /srv/sb/server.js:212:19)';
  if (flaw.has('stack')) text = 'SyntaxError: Unexpected token } in JSON at position 12\n    at JSON.parse (<anonymous>)\n    at IncomingMessage.<anonymous> (/srv/server.js:210:20)';
  sysErr(res, flaw.has('malformed-200') ? 200 : flaw.has('malformed-500') ? 500 : odd.has('err422') ? 422 : 400, text, false);
}
const isEndpoint = (p) => odd.has('slashsame') || p === '/bridge' || (p === '/bridge/' && !odd.has('strictpath')) || (p === '/bridge2' && /redir307/.test([...odd].join()));

const srv = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', c => chunks.push(c));
  req.on('end', () => { try { handle(req, res, Buffer.concat(chunks)); } catch (e) { sysErr(res, 500, 'internal error'); process.stderr.write(String(e.stack) + '\n'); } });
});
function handle(req, res, raw) {
  const path = req.url.split('?')[0];
  if (LOG) require('fs').appendFileSync(LOG, JSON.stringify({ m: req.method, url: req.url, h: req.rawHeaders, b: raw.toString('utf8').slice(0, 400) }) + '\n');
  if (odd.has('query') && !/[?&]token=t0k3n(&|$)/.test(req.url)) return send(res, 404, body([msg('system', 'Unknown endpoint.')], null), { Allow: 'POST' });
  if (req.method === 'OPTIONS') {
    res.writeHead(204, { Allow: 'OPTIONS, POST', 'Access-Control-Allow-Origin': '*', 'Access-Control-Allow-Methods': 'POST', 'Access-Control-Allow-Headers': 'content-type, x-sidebridge-key', ...(odd.has('close') ? { Connection: 'close' } : {}) });
    return res.end();
  }
  if (req.method !== 'POST') {
    if (flaw.has('get-200')) return send(res, 200, {});
    if (flaw.has('get-302')) return send(res, 302, undefined, { Location: '/bridge' });
    const allow = flaw.has('allow-lower') ? { Allow: 'post' } : flaw.has('allow-postal') ? { Allow: 'POSTAL' } : flaw.has('no-allow') ? {} : { Allow: odd.has('allow2') ? ['OPTIONS', 'POST'] : odd.has('allowlist') ? 'OPTIONS, POST' : 'POST' };
    return send(res, 405, body([msg('system', 'This is a Side Bridge endpoint: send a POST with a JSON body.')], null), allow);
  }
  if (odd.has('slashadd308') && path === '/bridge') return send(res, 308, undefined, { Location: '/bridge/' + (req.url.includes('?') ? req.url.slice(req.url.indexOf('?')) : '') });
  if (odd.has('slash308') && path === '/bridge/') return send(res, 308, undefined, { Location: '/bridge' + (req.url.includes('?') ? req.url.slice(req.url.indexOf('?')) : '') });
  if (path === '/bridge' && /redir307/.test([...odd].join())) { const q = req.url.includes('?') ? req.url.slice(req.url.indexOf('?')) : ''; const loc = odd.has('redir307abs') ? 'http://' + SHOW + ':' + srv.address().port + '/bridge2' + q : odd.has('redir307rel') ? 'bridge2' + q : '//' + SHOW + ':' + srv.address().port + '/bridge2' + q; return send(res, 307, undefined, { Location: loc }); }
  if (flaw.has('redirect-302') && path === '/bridge') { return send(res, 302, undefined, { Location: '/bridge2' }); }
  if (flaw.has('redirect-slash-301') && path === '/bridge/') { return send(res, 301, undefined, { Location: '/bridge' }); }
  if (odd.has('path404html') && path !== '/bridge') { res.writeHead(404, { 'Content-Type': 'text/html' }); return res.end('<!DOCTYPE html><html><body><h1>404 Not Found</h1><p>Cannot POST ' + path + '</p></body></html>'); }
  if (!isEndpoint(path) && path !== '/bridge2') return sysErr(res, 404, 'No Side Bridge endpoint at ' + path + '; use /bridge.', false);
  // authentication first
  let sent = req.headers['x-sidebridge-key'];
  if (Array.isArray(sent)) sent = sent[0];
  if (flaw.has('parse-first')) { try { JSON.parse(raw.toString('utf8')); } catch (e) { return badRequest(res, 'The request body is not JSON.'); } }
  if (key !== null) {
    let ok = sent !== undefined && (odd.has('keytrim') ? sent.trim() === key : sent === key);
    if (flaw.has('key-prefix') && sent !== undefined) ok = sent.length > 0 && key.startsWith(sent);
    if (flaw.has('key-ci') && sent !== undefined) ok = sent.toLowerCase() === key.toLowerCase();
    if (flaw.has('accept-missing-key') && sent === undefined) ok = true;
    if (flaw.has('accept-wrong-key') && sent !== undefined) ok = true;
    if (flaw.has('empty-key') && sent === '') ok = true;
    if ((flaw.has('auth-start') || (flaw.has('auth-start-wrong') && sent !== undefined)) && !ok) {
      try { const q = JSON.parse(raw.toString('utf8')); const k = typeof q.chatId === 'string' && q.chatId.toUpperCase(); if (q.messages != null && k && chats.has(k) && chats.get(k).authed) ok = true; } catch (e) { /* not JSON: refused below */ }
    }
    if (!ok) {
      const st = odd.has('refuse200') ? 200 : odd.has('refuse403') ? 403 : 401;
      const ms = [msg('system', 'Access denied: set the bridge key in Side Search settings.' + (flaw.has('leak-key') ? ' (expected "' + key + '", got "' + sent + '")' : ''))];
      if (flaw.has('refuse-assistant')) ms.push(msg('assistant', 'Hello anyway!'));
      if (flaw.has('refuse-id')) { try { const q = JSON.parse(raw.toString('utf8')); if (q.messages && q.messages[0] && typeof q.messages[0].id === 'string') ms[0].id = q.messages[0].id; } catch (e) { /* no message to reuse */ } }
      if (flaw.has('refuse-nosrc')) delete ms[0].sources;
      if (flaw.has('refuse-empty')) ms[0].content = '';
      if (flaw.has('refuse-badsrc')) ms[0].sources = [{ title: 'Help', url: '/help/auth' }];
      return send(res, st, body(ms, flaw.has('refuse-noend') ? null : { endSession: true }), st === 401 ? { 'WWW-Authenticate': 'SideBridgeKey' } : {});
    }
  }
  let text;
  try { text = new TextDecoder('utf-8', { fatal: true }).decode(raw); } catch (e) { return badRequest(res, 'The request body is not UTF-8.'); }
  if (!text.trim()) return sysErr(res, 400, 'Empty request: this bridge speaks Side Bridge 1.x.', true);
  let r;
  try { r = JSON.parse(text); } catch (e) { lastErr = e; return badRequest(res, flaw.has('leak-parse-msg') ? e.message : 'The request body is not valid JSON.'); }
  if (r === null || typeof r !== 'object' || Array.isArray(r)) return sysErr(res, 400, 'A Side Bridge request object is expected.', true);
  if (typeof r.sidebridge !== 'string') return badRequest(res, 'The "sidebridge" version is missing or not a string.');
  const major = r.sidebridge.split('.')[0];
  if (major !== '1' || (flaw.has('refuse-1.1') && r.sidebridge !== '1.0')) return sysErr(res, 400, 'Side Bridge ' + r.sidebridge + ' is not supported; this bridge speaks 1.x.', true);
  if (flaw.has('strict-keys') && Object.keys(r).some(k => !['sidebridge', 'chatId', 'messages', 'history'].includes(k))) return badRequest(res, 'Unknown request key.');
  if (typeof r.chatId !== 'string' || !r.chatId) return sysErr(res, 400, 'The request has no chatId.', true);
  const okList = (v) => v === undefined || v === null || (Array.isArray(v) && v.every(m => m && typeof m === 'object' && typeof m.content === 'string' && (m.id === undefined || typeof m.id === 'string')));
  if (/leak-(msg|str)/.test([...flaw].join())) { try { (r.messages || []).map(m => m.content.trim()); (r.history || []).map(m => m.content.trim()); } catch (e) { lastErr = e; } }
  if (!okList(r.messages) || !okList(r.history)) return badRequest(res, '"messages" and "history" must be lists of messages.');
  const msgs = r.messages == null ? null : r.messages;
  const hist = r.history == null ? null : r.history;
  if (flaw.has('unknown-500') && (hist || []).some(h => h.from === 'unknown')) return sysErr(res, 500, 'unknown sender');
  if (flaw.has('unknown-ends') && (hist || []).some(h => h.from === 'unknown')) return sysErr(res, 200, 'I cannot continue this chat.', true);
  reqVersion = r.sidebridge;
  return answer(res, chat(r.chatId), msgs, hist, raw.toString('utf8'));
}
let reqVersion = '1.0';

const RE_REMEMBER = /^memorize\s+(\S+)\s+please$/i;
function wordFromHistory(hist) {
  let w = null;
  for (const h of hist || []) { if (h.from === 'user') { const m = RE_REMEMBER.exec((h.content || '').trim()); if (m) w = m[1]; } }
  return w;
}
// `--odd transcript`: everything said so far in this chat first, unchanged; then `out`, kept.
function transcript(c, out) {
  if (!odd.has('transcript')) return out;
  const sent = c.sent || (c.sent = []);
  const earlier = sent.map(m => Object.assign({}, m));
  for (const m of out) { const at = sent.findIndex(x => idKey(x.id || '') === idKey(m.id || '')); if (at >= 0) sent[at] = Object.assign({}, m); else sent.push(Object.assign({}, m)); }
  return earlier.concat(out);
}
function answer(res, c, msgs, hist, raw) {
  if (msgs === null) { // session start
    if (c.ended) {
      if (flaw.has('ended-500')) return sysErr(res, 500, 'chat closed');
      if (odd.has('endedsilent')) return send(res, 200, body([], { endSession: true }));
      return send(res, odd.has('ended410') ? 410 : 200, body([msg('system', 'This conversation has ended. Start a new chat to continue.')], { endSession: true }));
    }
    c.authed = true;
    if (odd.has('reopenend') && c.priv) { c.ended = true; return send(res, 200, body([msg('system', 'Private chats cannot be resumed. Start a new chat.')], { endSession: true })); }
    if (!c.word && !flaw.has('forget-private') && !flaw.has('history-blind')) c.word = wordFromHistory(hist);
    const gr = (id) => { const g = msg('system', 'Welcome to sb-node.'); g.id = id; return g; };
    if (odd.has('fixedgreet') || odd.has('chatidgreet')) return send(res, 200, body([gr(odd.has('fixedgreet') ? '5B1D8E2A-0000-4000-8000-00000000CAFE' : c.cid.toLowerCase())], c.priv ? { disableSendHistory: true } : null));
    const ms = odd.has('greet') ? [msg('system', 'Connected to sb-node. ' + (c.priv ? 'Incognito is on.' : ''))] : [];
    if (odd.has('alwaysprivate')) c.priv = true;
    const opts = c.priv && !flaw.has('forget-reopen') ? { disableSendHistory: true } : null;
    return send(res, odd.has('status') ? 201 : 200, body(transcript(c, ms), opts));
  }
  if (c.ended) return send(res, 200, body([msg('system', 'This conversation has ended.')], { endSession: true }));
  const texts = msgs.map(m => (m.content || '').trim());
  if (texts.every(t => !t)) {
    if (flaw.has('empty-500')) return sysErr(res, 503, 'Nothing to answer.');
    if (flaw.has('empty-ends')) return sysErr(res, 200, 'Nothing to answer, bye.', true);
    if (flaw.has('empty-options-end')) return send(res, 200, body([], { endSession: true }));
    return send(res, 200, body(odd.has('emptynudge') ? [msg('system', 'Please type something first.')] : [], null));
  }
  const out = [], opts = {};
  let st = odd.has('status') ? 203 : 200;
  if (reqVersion !== '1.0' && flaw.has('v11-note-only')) return send(res, 200, body([msg('system', 'This bridge speaks Side Bridge 1.0: please update the app.')], null));
  if (reqVersion !== '1.0' && odd.has('v11note')) out.push(msg('system', 'Note: this bridge speaks Side Bridge ' + '1.0; your app sent ' + reqVersion + '.'));
  for (let i = 0; i < msgs.length; i++) {
    const t = texts[i];
    if (!t) continue;
    const low = t.toLowerCase();
    (c.conv || (c.conv = [])).push({ from: 'user', content: t });
    let said, rem;
    if ((rem = RE_REMEMBER.exec(t))) {
      if (!flaw.has('forget-private') && !flaw.has('echo-history')) c.word = rem[1];
      said = odd.has('ackword') ? 'Stored: ' + rem[1] + '. I will keep it safe.' : 'Stored. I will keep it safe.';
    } else if (low === 'what was the secret?') {
      if (odd.has('slowrecall')) slowNext = 12000;
      if (flaw.has('echo-history')) said = 'History: ' + (hist || []).map(h => h.content).join(' | ');
      else {
        // `window`: only the last 12 messages count (of history when sent, else of the chat as the bridge saw it).
        const w = odd.has('window') ? wordFromHistory((hist || c.conv || []).slice(-12)) : flaw.has('history-blind') ? c.word : c.word || wordFromHistory(hist);
        said = w ? 'The secret is ' + w + '.' : 'I know no secret.';
      }
    } else if (low === 'say that again') {
      let found = null;
      if (hist) { for (let j = hist.length - 1; j >= 0 && found === null; j--) { const h = hist[j]; if (typeof h.id === 'string' && c.said.has(idKey(h.id))) found = c.said.get(idKey(h.id)); } }
      else found = c.last;
      said = found ? 'Again: ' + found : 'I have said nothing yet.';
    } else if (low === 'incognito on') {
      c.priv = true; opts.disableSendHistory = true; said = 'Incognito on: I keep the context myself.';
      if (flaw.has('reenable')) c.reenable = true;
      if (odd.has('status')) st = 202;
    } else if (low === 'incognito off') {
      c.priv = false; opts.disableSendHistory = false; said = 'Incognito off: history is sent again.';
      if (flaw.has('sticky-private')) c.sticky = true;
      if (odd.has('status')) st = 202;
    } else if (low === 'good night') {
      if (!flaw.has('no-end')) { c.ended = true; opts.endSession = true; }
      said = 'Good night, and thanks!';
      if (flaw.has('silent-end')) continue;
      if (flaw.has('end-resend') && c.lastMsg) { out.push(Object.assign({}, c.lastMsg)); continue; }
      if (odd.has('endedit') && c.lastMsg) { out.push(Object.assign({}, c.lastMsg, { content: c.lastMsg.content + '\n\nGood night! (chat closed)' })); continue; }
    } else {
      let echo = t;
      if (flaw.has('raw-echo')) { const m = /"content"\s*:\s*"((?:[^"\\]|\\.)*)"/.exec(raw.slice(raw.indexOf('"messages"'))); echo = m ? m[1] : t; }
      said = 'You said: ' + echo;
      if (odd.has('lsep')) said = 'You said:\u2028' + echo + '\u2029';
    }
    if (odd.has('modelish')) said += ' (draft ' + require('crypto').randomBytes(3).toString('hex') + ')';
    if (odd.has('huge12') && /^search /.test(low)) said += '\n\n' + 'lorem ipsum '.repeat(1048576);
    if (odd.has('md') && !/^(The secret|Again)/.test(said)) said = said + '\n\n_sb-node_ 😀';
    if ((low === 'incognito on' || low === 'incognito off') && odd.has('onlyoptions')) continue;
    if (c.sticky && low !== 'incognito off') { c.sticky = false; opts.disableSendHistory = true; c.priv = true; }
    if (c.reenable && low !== 'incognito on') { c.reenable = false; opts.disableSendHistory = false; c.priv = false; }
    if (odd.has('sysnote')) out.push(msg('system', '(sb-node, model n-1)'));
    if (odd.has('editprev') && c.lastMsg) {
      const p = Object.assign({}, c.lastMsg, { content: '✓ ' + c.lastMsg.content });
      if (odd.has('editcase')) p.id = /[a-f]/.test(p.id) ? p.id.toUpperCase() : p.id.toLowerCase();
      out.push(p);
      c.said.set(idKey(p.id), p.content);
    }
    if (odd.has('resendprev') && c.lastMsg) out.push(Object.assign({}, c.lastMsg));
    if (odd.has('split') && /^(The secret|Again)/.test(said)) out.push(msg(odd.has('sysanswer') ? 'system' : 'assistant', 'Let me check my notes…', []));
    if (odd.has('redact') && /https?:\/\//.test(t) && msgs[i].id) { const u = msg('user', t.replace(/https?:\/\/\S+/g, '[link]')); u.id = msgs[i].id; out.push(u); }
    if (odd.has('edithist') && hist) { const h = [...hist].reverse().find(x => x.from === 'assistant' && typeof x.id === 'string'); if (h) out.push(Object.assign(msg('assistant', '(edited) ' + h.content), { id: h.id })); }
    if (odd.has('firstwelcome') && i === 0 && hist && hist.filter(h => h.from === 'user').length === 1) out.push(msg('assistant', 'Welcome!', sourcesFor()));
    const m = msg(odd.has('sysanswer') ? 'system' : 'assistant', odd.has('bigcontent') ? said + '\n\n' + 'lorem ipsum '.repeat(170000) : said, sourcesFor());
    if (flaw.has('reuse-user-id') && msgs[i].id) m.id = msgs[i].id;
    if (flaw.has('reuse-hist-id')) { const f = (hist || []).find(h => h.from !== 'user' && h.from !== 'assistant'); if (f) m.id = f.id; }
    out.push(m);
    if (flaw.has('dup-ids')) out.push(Object.assign({}, m, { content: 'dup' }));
    c.said.set(idKey(m.id || ''), said); c.last = said; c.lastMsg = m; c.conv.push({ from: m.from, content: said });
    if (flaw.has('double-varied') && hist && hist.length && hist[hist.length - 1].id === msgs[i].id) out.push(msg('assistant', said.replace(/^You said: /, 'Echo: '), sourcesFor()));
    if (flaw.has('double') && hist && hist.length && hist[hist.length - 1].id === msgs[i].id) out.push(msg('assistant', said, sourcesFor()));
    if (odd.has('lennote')) out.push(msg('system', '(' + said.length + ' characters)'));
    if (odd.has('postnote')) out.push(msg('system', '(tokens used: ' + (++tok) + ')'));
    if (odd.has('reassert') && c.priv && !('disableSendHistory' in opts)) opts.disableSendHistory = true;
  }
  if (odd.has('status299')) st = 299;
  if (flaw.has('send-401')) st = 401;
  send(res, st, body(transcript(c, out), Object.keys(opts).length ? opts : null));
}

if (odd.has('nodewarn')) process.emitWarning('The `punycode` module is deprecated. Please use a userland alternative instead.', 'DeprecationWarning', 'DEP0040');
if (odd.has('bannerdocs')) console.log('sb-node 1.0 - protocol docs: https://github.com/Cizzuk/Side-Bridge/wiki/v1.0');
srv.keepAliveTimeout = 2000;
const HOST = odd.has('anyaddr') ? undefined : odd.has('ipv6') ? '::1' : odd.has('localhost') ? 'localhost' : '127.0.0.1';
const SHOW = odd.has('anyaddr') ? '[::]' : odd.has('ipv6') ? '[::1]' : odd.has('localhost') ? 'localhost' : '127.0.0.1';
const announce = (p) => {
  process.stdout.write('sb-node ready (oddities: ' + ([...odd].join(',') || 'none') + '; flaws: ' + ([...flaw].join(',') || 'none') + ') -> POST http://' + SHOW + ':' + p + '/bridge' + (odd.has('query') ? '?token=t0k3n' : '') + '\n');
};
// printearly picks its port itself, below Linux's ephemeral range (32768-60999): one from that
// range can be taken meanwhile by any connection or `:0` bind on the machine (a CI run saw
// EADDRINUSE, the bridge gone before its first request).
if (odd.has('printearly')) { const p0 = port || (20000 + Math.floor(Math.random() * 12000)); announce(p0); setTimeout(() => srv.listen(p0, HOST), 400); }
else srv.listen(port, HOST, () => announce(srv.address().port));
process.on('SIGTERM', () => process.exit(0));
