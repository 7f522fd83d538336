#!/usr/bin/env node
// bbnode: an independent bb provider bridge written from
// /work/shared/protocols/bb-provider-bridge-protocol.md (shapes cross-checked against
// bb-tooling.md §10-§11). Line-delimited JSON-RPC 2.0 on stdin/stdout. Node stdlib only.
//
// Switches (comma-separated lists allowed):
//   ODD=<name>   an unusual but legal behaviour the spec leaves open
//   FLAW=<name>  a single deliberate violation of one MUST of the spec
// `node bridge.js --list` prints every switch with the clause it concerns.
'use strict';
const crypto = require('crypto');
const { spawn } = require('child_process');

const ODDS = {
  'extra-fields': 'unknown fields in results, capabilities, notification params and deltas ("Wire schemas tolerate unknown fields"; "unknown capability fields pass through")',
  'ext-notify': 'extension notifications the runtime does not know (x-bbnode/heartbeat) and provider/raw ("unknown notifications are ignored"; provider/raw droppable)',
  'whitespace': 'insignificant JSON whitespace inside each line plus leading/trailing blanks (RFC 8259 ws, still one line per message)',
  'ascii-escape': 'every non-ASCII and "/" character written as \\uXXXX / \\/ escapes (same JSON value)',
  'key-order': 'envelope members in unusual order (result/params before id and jsonrpc)',
  'chunked': 'each line written in several small write() calls, split mid-token and mid-UTF-8 sequence, with pauses',
  'batched': 'several messages coalesced into one write() call',
  'split-deltas': 'one delta per thread/delta notification instead of one batch',
  'one-batch': 'the whole turn in ONE thread/delta batch (input.accepted ... turn.boundary)',
  'events-first': 'turn/start response written after the turn\'s deltas ("turn/started may precede the turn/start response")',
  'slow': 'slow but legal: ~250 ms between deltas, turns take ~2.5 s, session constructions answer after 600 ms',
  'stderr-noise': 'chatty logging on stderr (stdout stays protocol-only)',
  'unicode': 'non-ASCII text incl. raw U+2028/U+2029, emoji and NUL escapes inside strings',
  'accept-after-open': 'turn.open before input.accepted (acceptance emitted into the already-open turn)',
  'claim-noop': 'zero-work prompt settled by a claiming turn.boundary {claimIfIdle:true} only (no turn.open)',
  'vouched-turns': 'every turn opened with a bridge-minted providerTurnId and every delta scoped by it (vouched keys the bridge itself opened)',
  'close-only': 'tool items sent as bare close-without-open ("close-without-open builds the bare completed item")',
  'named-message': 'assistant text as a provider-named item (item.open agentMessage + textDelta + textClose by providerItemId)',
  'textclose-bare': 'item.textClose without text (settles with the accumulated stream)',
  'snapshot-output': 'command output as cumulative command.outputSnapshot instead of item.outputDelta',
  'new-usage-fields': 'usage with cacheReadInputTokens/cacheWriteInputTokens/promptCacheTtlMs and contextWindow with cost (newer protocol text)',
  'mainrun': 'held turn announces turn.mainRun idle/running (Held turns)',
  'progress': 'item.progress messages on the command item (with and without flush)',
  'ext-state': 'extension.state bb/provider-commands and bb/session-options snapshots and a bbnode/* extension item with presentation',
  'dup-close': 'a repeated item.close for an already settled provider-identified key ("repeated closes ... are deduped")',
  'reopen': 'an explicit reopen of a settled provider-named item which is closed again ("an explicit reopen reuses the same bb id")',
  'stop-async': 'interrupt settled asynchronously: waits STOP_MS (default 1200 ms; bounded) before the boundary, then answers',
  'big-line': 'one ~2 MB line of streamed text',
  'no-skills': 'declares neither skills.configure nor commands.list (and refuses both with -32601)',
  'minimal-caps': 'capabilities only {grammarVersions:[3,3]} (everything else default: no restore, no fork, no archive)',
  'string-ids': 'the bridge\'s own requests (interaction/request) use string ids and a second one uses a numeric id; answers awaited with a bound',
  'no-identity-notify': 'no thread/identity notification (identity rides the construction result only)',
  'identity-after-result': 'thread/identity + session.reset written after the construction result',
  'result-extras': 'results carry extra members (turn/start -> {threadId, ok}, stop -> {ok:true}) as the claude bridge does',
  'tool-call': 'asks the runtime item/tool/call for a dynamic tool (only if thread/start listed one)',
  'warn-unhandled': 'provider.warning and unhandled diagnostics inside the turn, plus a noTurnFallback-carrying item delta outside any turn',
  'fork-none': 'capability fork "none" (thread/fork refused -32601)',
  'steer-inject': 'steerMode "inject"',
  'stop-session-ended': 'interrupt settled with session.ended (assembler settles open items + turn as interrupted) instead of explicit closes + boundary ("Settlement: session.ended ... close open turns and items with the right statuses")',
  'identity-twice': 'thread/identity sent again (same handle) after the construction result, and a thread.identity delta',
  'checkpoint': 'turn.boundary carries providerCheckpointId',
  'reasoning': 'reasoningText and plan text streams before the answer',
  'delegation': 'a foreground delegation with a bridge-opened vouched child turn (turn.open {providerTurnId,parentRef}) inside every turn',
  'background': 'a backgroundTask opened in each turn that outlives the turn; settled before any stop answer (thread-attached)',
  'rpc-batch': 'each thread/delta group of a turn sent as one JSON-RPC 2.0 batch (a JSON array of notification objects on one line; JSON-RPC 2.0 s6 "the Client MAY send an Array filled with Request objects")',
  'very-slow': 'like slow but SLOW_MS (default 700) between deltas: a normal turn lasts ~6 s, each gap well under the 5 s per-wait bound',
  'usage-after-boundary': 'usage + contextWindow {attach: currentOrLast} sent right after the turn.boundary (resolved to the last finished turn)',
  'fail-turns': 'every ordinary turn ends in a provider failure: provider.error {settlesTurn: true} instead of turn.boundary ("settling errors close open turns")',
  'empty-result-null': 'turn/steer, skills/configure, stop etc. answer result null instead of {} (JSON-RPC result may be any value)',
};
const FLAWS = {
  'drop-unknown': 'Transport: "An unrecognized method is answered with METHOD_NOT_FOUND (-32601)" -> unknown methods get no answer',
  'unknown-code': 'Transport: unknown method answered -32600 instead of -32601',
  'invalid-code': 'Transport: "schema-invalid request is answered with INVALID_PARAMS (-32602)" -> answered -32603',
  'invalid-drop': 'Transport: "Never silently dropped" -> schema-invalid requests get no answer',
  'nonjson-exit': 'Transport: "Anything ... not protocol traffic is ignored" -> bridge exits on a non-JSON stdin line',
  'answer-responses': 'Transport: "Requests and responses are discriminated on the presence of method" -> a response line is answered with -32600',
  'version-1': 'Versioning: "The current version is 2" -> initialize answers protocolVersion 1',
  'no-grammar': 'Versioning: "a bridge reports [3, 3]" -> grammarVersions omitted (defaults [2,2])',
  'skills-undeclared': 'Injected skills: "undeclared -> the request must be refused" -> no skills capability but skills/configure answered {}',
  'commands-broken': 'Command catalog: declared commands.list but commands/list answers -32000',
  'same-handle': 'Identifiers: "It must name exactly one provider session" -> every thread/start returns the same providerThreadId',
  'counter-handle': 'Identifiers: "never mint it from a per-process counter" -> providerThreadId = "bbnode_" + counter',
  'no-accept': 'Turn lifecycle 1: "Acceptance rides input.accepted { clientRequestId } - mandatory" -> never sent',
  'wrong-accept': 'Turn lifecycle 1: input.accepted carries a different clientRequestId than turn/start',
  'noop-hangs': 'Turn lifecycle 1: "A prompt the provider handles without doing work ... still produces a turn.open + turn.boundary pair" -> zero-work prompt emits only input.accepted',
  'stop-after-result': 'Turn lifecycle 6: "must be on the wire before the response" -> interrupt boundary written after the stop response',
  'stop-completed': 'Turn lifecycle 5: "interrupt settles the active turn as interrupted" -> boundary status completed',
  'stop-leaves-items': 'Turn lifecycle 5: "turn.boundary { interrupted } plus explicit closes for provider-owned open items" -> open command item not closed',
  'after-stop': 'Turn lifecycle 6: "After thread/stop the bridge holds nothing for the thread" -> a usage/contextWindow delta 100 ms after each stop answer',
  'release-fabricates': 'Turn lifecycle 5: "release ... must not fabricate an interruption" -> release emits turn.open + turn.boundary interrupted',
  'stop-hang': 'Turn lifecycle 6: "waits for it, bounded, and settles the turn itself on timeout" -> interrupt never answered',
  'identity-late': 'Ordering: "thread/identity for a session precedes any thread/delta for it" -> session.reset delta before thread/identity',
  'identity-wrong': 'Identifiers: thread/identity echoes the providerThreadId -> identity notification names another handle',
  'delta-outside-turn': 'Turn lifecycle 2: "Item and stream deltas never open a turn" -> agent text streamed before turn.open (no noTurnFallback)',
  'unvouched-turn': 'Turn lifecycle 3: "only turn keys the bridge itself opened may scope a delta" -> usage scoped by a provider label never opened',
  'wrong-thread': 'Identifiers: threadId "Opaque to the provider; echoed verbatim" -> deltas carry threadId + "-x"',
  'invalid-delta': 'Parsing discipline: "a thread/delta payload must be a valid delta" -> item.textDelta without channel',
  'ext-no-presentation': 'Grammar v3: presentation "required when the shape is extension" -> extension item.open without presentation',
  'detail-too-long': 'Grammar v3: presentation "detail <= 280 chars" -> 400-char detail',
  'icon-undeclared': 'Grammar v3: presentation/icon-namespaced-declared -> glyph bbnode/rocket (not declared)',
  'output-before-open': 'Item lifecycle 1: "Every item\'s first event is item/started" / "Output deltas never synthesize" -> outputDelta before item.open',
  'no-reset': 'Item lifecycle 3: "session.reset (mandatory at every provider session construction)" -> never sent (provider item ids restart per session)',
  'archived-no-hint': 'Recovery hints: "Rejecting a request? Put the hint in error.data.recovery" -> resume of archived session rejected without data',
  'both-hints': 'Recovery hints: "Never send both for one event" -> archived resume: error.data.recovery AND provider/recovery',
  'hint-foreign': 'Recovery hints: "That threadId must name a thread the sending process hosts" -> provider/recovery for thr_not_hosted',
  'stray-stdout': 'Transport: "bridges must guard stdout against stray writes" -> a log line on stdout per turn',
  'no-jsonrpc': 'Transport: "JSON-RPC 2.0" -> notifications omit "jsonrpc":"2.0"',
  'id-as-string': 'JSON-RPC 2.0: a response id must equal the request id -> numeric ids echoed as strings',
  'result-and-error': 'JSON-RPC 2.0: error responses also carry result:null',
  'leak-child': 'Turn lifecycle 6: "any per-thread resource the bridge runs (a provider CLI child ...) is released before or with it" -> provider child never killed (not on stop, not on exit)',
  'no-exit': 'Child processes / bootstrap owns stdin: bridge never exits when stdin closes (keeps a timer alive)',
  'fork-same-handle': 'Identifiers: a fork is a new provider session -> thread/fork returns the source handle',
  'threads-coupled': 'Sessions: a held turn on one thread blocks turns on every other thread until it settles',
  'background-leak': 'Turn lifecycle 6 / Sessions 5: a pending backgroundTask is still open when thread/stop is answered (never settled)',
  'reject-but-open': 'Turn lifecycle 1: "a prompt the provider never took must not open a turn" -> zero-work prompt is rejected (error -32000) yet turn.open + turn.boundary {failed} are emitted',
  'usage-null': 'Parsing discipline: usage delta with modelContextWindow missing (invalid delta)',
};

if (process.argv.includes('--list')) {
  console.log('bbnode bridge switches. ODD=<name>[,<name>...] (legal), FLAW=<name> (one MUST broken).\n');
  console.log('ODD:');
  for (const [k, v] of Object.entries(ODDS)) console.log(`  ${k.padEnd(22)} ${v}`);
  console.log('\nFLAW:');
  for (const [k, v] of Object.entries(FLAWS)) console.log(`  ${k.padEnd(22)} ${v}`);
  console.log('\nFixture (bridgewire.toml [bb.fixture]): promptInput="hello", zeroWorkPromptInput="/noop",');
  console.log('interruptiblePromptInput="/hold", icons={pluginId="bbnode", names=["terminal","file","search","chat","puzzle"]}');
  process.exit(0);
}

const odd = new Set((process.env.ODD || '').split(',').map((s) => s.trim()).filter(Boolean));
const flaw = new Set((process.env.FLAW || '').split(',').map((s) => s.trim()).filter(Boolean));
for (const o of odd) if (!ODDS[o]) { process.stderr.write(`unknown ODD ${o}\n`); process.exit(2); }
for (const f of flaw) if (!FLAWS[f]) { process.stderr.write(`unknown FLAW ${f}\n`); process.exit(2); }
const O = (n) => odd.has(n);
const F = (n) => flaw.has(n);
const log = (...a) => { if (O('stderr-noise')) process.stderr.write(`[bbnode ${new Date().toISOString()}] ${a.join(' ')}\n`); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------
// Output: a strictly ordered queue of serialized lines.
const outQueue = [];
let writing = false;
let batchTimer = null;

function serialize(msg) {
  let obj = msg;
  if (F('no-jsonrpc') && msg.method && msg.id === undefined) { obj = { ...msg }; delete obj.jsonrpc; }
  if (O('key-order')) {
    const re = {};
    for (const k of ['result', 'error', 'params', 'method', 'id', 'jsonrpc']) if (k in obj) re[k] = obj[k];
    obj = re;
  }
  let s = O('whitespace') ? JSON.stringify(obj, null, 1).replace(/\n/g, ' ') : JSON.stringify(obj);
  if (O('whitespace')) s = ' \t ' + s + '  \t';
  if (O('ascii-escape')) s = s.replace(/[\u007f-\uffff]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0')).replace(/\//g, '\\/');
  return s + '\n';
}

function send(msg) {
  if (msg.jsonrpc === undefined) msg = { jsonrpc: '2.0', ...msg };
  outQueue.push(serialize(msg));
  pump();
}
function rawOut(text) { outQueue.push(text); pump(); }

async function pump() {
  if (writing) return;
  writing = true;
  try {
    while (outQueue.length) {
      if (O('batched')) {
        // coalesce whatever is queued within 30 ms into one write
        await sleep(30);
        const chunk = outQueue.splice(0).join('');
        await writeAll(Buffer.from(chunk, 'utf8'));
      } else if (O('chunked')) {
        const buf = Buffer.from(outQueue.shift(), 'utf8');
        let i = 0;
        while (i < buf.length) {
          const n = Math.min(buf.length - i, 1 + Math.floor(Math.random() * 23));
          await writeAll(buf.subarray(i, i + n));
          i += n;
          if (Math.random() < 0.3) await sleep(3);
        }
      } else {
        await writeAll(Buffer.from(outQueue.shift(), 'utf8'));
      }
    }
  } finally {
    writing = false;
  }
  for (const w of drainWaiters.splice(0)) w();
}
function writeAll(buf) {
  return new Promise((res) => { if (process.stdout.write(buf)) res(); else process.stdout.once('drain', res); });
}
const drainWaiters = [];
function flushed() { return new Promise((r) => { if (!writing && !outQueue.length) r(); else drainWaiters.push(r); }); }

const extra = (o) => (O('extra-fields') ? { ...o, 'x-bbnode': { note: 'unknown field', n: 1 } } : o);
function respond(id, result) {
  if (O('empty-result-null') && result && typeof result === 'object' && !Array.isArray(result) && Object.keys(result).length === 0) result = null;
  else if (result && typeof result === 'object') result = extra(result);
  send({ jsonrpc: '2.0', id: F('id-as-string') && typeof id === 'number' ? String(id) : id, result });
}
function respondError(id, code, message, data) {
  const error = { code, message };
  if (data !== undefined) error.data = data;
  const m = { jsonrpc: '2.0', id: F('id-as-string') && typeof id === 'number' ? String(id) : id, error };
  if (F('result-and-error')) m.result = null;
  send(m);
}
function notify(method, params) { send({ jsonrpc: '2.0', method, params: extra(params) }); }

// ---------------------------------------------------------------------------------------------
// Thread state
const threads = new Map(); // threadId -> state
const archived = new Set(); // providerThreadIds
const announcedHandles = new Set();
let handleCounter = 0;
let skillsRoots = [];
let busyGate = null; // FLAW threads-coupled
let bridgeReqSeq = 0;
const pendingBridgeReqs = new Map();

function mintHandle() {
  if (F('counter-handle')) return `bbnode_${++handleCounter}`;
  if (F('same-handle')) return 'bbnode_fixed_handle';
  return `bbnode_${crypto.randomUUID()}`;
}

function startChild(st) {
  // Models a per-thread provider CLI child. Released on stop and on exit.
  try {
    const c = spawn('sleep', ['600'], { stdio: 'ignore', env: { PATH: process.env.PATH || '/usr/bin:/bin' }, detached: F('leak-child') });
    if (F('leak-child')) c.unref();
    c.on('error', () => {});
    st.child = c;
  } catch { /* ignore */ }
}
function stopChild(st) {
  if (F('leak-child')) return;
  if (st.child) { try { st.child.kill('SIGTERM'); } catch { /* */ } st.child = null; }
}

function deltaThreadId(tid) { return F('wrong-thread') ? tid + '-x' : tid; }

async function emit(st, deltas) {
  if (!deltas.length) return;
  deltas = deltas.map((d) => extra(d));
  if (O('vouched-turns') && st.vouchKey) {
    deltas = deltas.map((d) => (['input.accepted', 'turn.boundary', 'item.open', 'item.close', 'item.progress', 'item.textDelta', 'item.textClose', 'item.outputDelta', 'usage', 'contextWindow'].includes(d.kind) && !d.providerTurnId ? { ...d, providerTurnId: st.vouchKey } : d));
  }
  const groups = O('split-deltas') || O('rpc-batch') ? deltas.map((d) => [d]) : [deltas];
  if (O('rpc-batch') && groups.length > 1) {
    outQueue.push(JSON.stringify(groups.map((g) => ({ jsonrpc: '2.0', method: 'thread/delta', params: { threadId: deltaThreadId(st.threadId), deltas: g } }))) + '\n');
    pump();
    return;
  }
  for (const g of groups) {
    if (O('slow')) await sleep(250);
    if (O('very-slow')) await sleep(Number(process.env.SLOW_MS || 700));
    notify('thread/delta', { threadId: deltaThreadId(st.threadId), deltas: g });
  }
}

function identityAndReset(st, restorable) {
  const out = [];
  const idn = () => notify('thread/identity', { threadId: st.threadId, providerThreadId: F('identity-wrong') ? st.providerThreadId + '-other' : st.providerThreadId, sessionRestorable: restorable });
  const reset = () => { if (!F('no-reset')) notify('thread/delta', { threadId: deltaThreadId(st.threadId), deltas: [extra({ kind: 'session.reset' })] }); };
  if (O('no-identity-notify')) return [reset];
  if (F('identity-late')) return [reset, idn];
  return [idn, reset];
}

function textOf(input) {
  if (typeof input === 'string') return input;
  if (!Array.isArray(input)) return '';
  return input.map((i) => (i && typeof i.text === 'string' ? i.text : '')).join('');
}

const pres = (pending, completed, glyph, more) => ({ label: { pending, completed }, icon: { glyph: `bbnode/${glyph}` }, ...(more || {}) });

// ---------------------------------------------------------------------------------------------
// Validation helpers: return a list of issues.
const isStr = (v) => typeof v === 'string' && v.length > 0;
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
function need(p, spec) {
  const issues = [];
  if (!isObj(p)) return [{ path: [], message: 'params must be an object' }];
  for (const [k, t] of Object.entries(spec)) {
    const v = p[k];
    const ok = t === 'str' ? isStr(v)
      : t === 'str?' ? v === undefined || typeof v === 'string'
      : t === 'strnull' ? v === null || typeof v === 'string'
      : t === 'strnull?' ? v === undefined || v === null || typeof v === 'string'
      : t === 'obj' ? isObj(v)
      : t === 'obj?' ? v === undefined || isObj(v)
      : t === 'arr' ? Array.isArray(v)
      : t === 'arr?' ? v === undefined || Array.isArray(v)
      : t === 'int' ? Number.isInteger(v) && v > 0
      : t === 'intent' ? v === 'interrupt' || v === 'release'
      : t === 'input' ? Array.isArray(v) || typeof v === 'string'
      : true;
    if (!ok) issues.push({ path: [k], message: `expected ${t}` });
  }
  return issues;
}

const SCHEMAS = {
  initialize: { protocolVersion: 'int' },
  'model/list': {},
  'provider/health': {},
  'provider/usage': {},
  'provider/installation/status': {},
  'provider/installation/run': {},
  'provider/custom': {},
  'commands/list': { cwd: 'strnull?' },
  'command/list': { cwd: 'strnull?' },
  'skills/configure': { roots: 'arr' },
  'thread/start': { threadId: 'str', cwd: 'str', options: 'obj?', dynamicTools: 'arr?' },
  'thread/resume': { threadId: 'str', cwd: 'str', providerThreadId: 'str', options: 'obj?' },
  'thread/fork': { threadId: 'str', cwd: 'str', sourceProviderThreadId: 'str', options: 'obj?' },
  'thread/stop': { threadId: 'str', providerThreadId: 'str', intent: 'intent', activeTurnId: 'strnull?' },
  'thread/discard': { threadId: 'str' },
  'thread/name/set': { threadId: 'str', name: 'str' },
  'thread/archive': { threadId: 'str', providerThreadId: 'str' },
  'thread/unarchive': { threadId: 'str', providerThreadId: 'str' },
  'thread/goal/clear': { threadId: 'str' },
  'extension/action': {},
  'turn/start': { threadId: 'str', providerThreadId: 'str', input: 'input', clientRequestId: 'str', options: 'obj?' },
  'turn/steer': { threadId: 'str', providerThreadId: 'str', input: 'input', clientRequestId: 'str', expectedTurnId: 'strnull?' },
};

function capabilities() {
  if (O('minimal-caps')) return { grammarVersions: [3, 3] };
  const c = {
    sessionRestore: true,
    threadArchive: true,
    threadRename: true,
    threadGoalClear: false,
    fork: O('fork-none') ? 'none' : 'tip',
    approvalEnforcedBy: 'runtime',
    grammarVersions: [3, 3],
    steerMode: O('steer-inject') ? 'inject' : 'queue',
  };
  if (!O('no-skills') && !F('skills-undeclared')) c.skills = { configure: true };
  if (!O('no-skills')) c.commands = { list: true };
  if (F('no-grammar')) delete c.grammarVersions;
  if (O('extra-fields')) c.xBbnodeFutureFact = { enabled: true };
  return c;
}
function declared(name) {
  const c = capabilities();
  if (name === 'skills') return !!(c.skills && c.skills.configure) || F('skills-undeclared');
  if (name === 'commands') return !!(c.commands && c.commands.list);
  if (name === 'restore') return !!c.sessionRestore;
  if (name === 'archive') return !!c.threadArchive;
  if (name === 'rename') return !!c.threadRename;
  if (name === 'fork') return (c.fork || 'none') !== 'none';
  return false;
}

// ---------------------------------------------------------------------------------------------
// Request dispatch
async function handle(msg) {
  const { id, method } = msg;
  const params = msg.params === undefined ? {} : msg.params;
  log('<-', method, JSON.stringify(id));
  if (!Object.prototype.hasOwnProperty.call(SCHEMAS, method)) {
    if (F('drop-unknown')) return;
    return respondError(id, F('unknown-code') ? -32600 : -32601, `Method not found: ${method}`);
  }
  const gated = { 'skills/configure': 'skills', 'commands/list': 'commands', 'command/list': 'commands', 'thread/resume': 'restore', 'thread/archive': 'archive', 'thread/unarchive': 'archive', 'thread/name/set': 'rename', 'thread/fork': 'fork', 'thread/goal/clear': 'never' };
  if (gated[method] && !declared(gated[method])) return respondError(id, -32601, `Method not found: ${method} (not declared)`);
  const issues = need(params, SCHEMAS[method]);
  if (issues.length) {
    if (F('invalid-drop')) return;
    return respondError(id, F('invalid-code') ? -32603 : -32602, `Invalid params for ${method}`, { issues });
  }
  switch (method) {
    case 'initialize':
      return respond(id, { protocolVersion: F('version-1') ? 1 : 2, capabilities: capabilities() });
    case 'model/list':
      return respond(id, { models: [{ id: 'bbnode-1', model: 'bbnode-1', displayName: 'bbnode echo', description: 'echo', isDefault: true }], selectedOnlyModels: [] });
    case 'provider/health':
      return respond(id, { supported: true, health: { status: 'ready', statusMessage: null, accountEmail: null, planLabel: null, installedVersion: null, minimumSupportedVersion: null, canInstall: false, canUpdate: false, loginCommand: null } });
    case 'provider/usage':
      return respond(id, { supported: true, windows: [] });
    case 'provider/installation/status':
      return respond(id, { installed: true, installedVersion: '1.0.0', latestVersion: params.checkUpdates === false ? null : '1.0.0', npmGlobalPackageVersion: null, versionUnsupported: false, minimumSupportedVersion: null, command: null });
    case 'provider/installation/run':
      return respond(id, { available: false });
    case 'provider/custom':
    case 'extension/action':
      return respondError(id, -32000, `${method}: nothing to do for bbnode`);
    case 'commands/list':
    case 'command/list':
      if (F('commands-broken')) return respondError(id, -32000, 'catalog unavailable');
      return respond(id, { commands: [{ name: 'noop', description: 'a turn that does nothing' }, { name: 'hold', description: 'holds a turn until interrupted', inputHint: '' }] });
    case 'skills/configure':
      skillsRoots = params.roots;
      return respond(id, {});
    case 'thread/start':
    case 'thread/fork':
      return construct(id, method, params);
    case 'thread/resume':
      if (archived.has(params.providerThreadId)) {
        const recovery = { kind: 'sessionArchived', message: `session ${params.providerThreadId} is archived`, retryable: true };
        if (F('both-hints')) notify('provider/recovery', { threadId: params.threadId, ...recovery });
        return respondError(id, -32000, `Session ${params.providerThreadId} is archived`, F('archived-no-hint') ? undefined : { recovery });
      }
      return construct(id, method, params);
    case 'thread/archive':
      archived.add(params.providerThreadId);
      return respond(id, {});
    case 'thread/unarchive':
      archived.delete(params.providerThreadId);
      return respond(id, {});
    case 'thread/name/set':
      return respond(id, {});
    case 'thread/discard': {
      const st = threads.get(params.threadId);
      if (st) { stopChild(st); threads.delete(params.threadId); }
      return respond(id, {});
    }
    case 'thread/stop':
      return stop(id, params);
    case 'turn/start':
      return turnStart(id, params);
    case 'turn/steer':
      return turnSteer(id, params);
    default:
      return respondError(id, -32601, `Method not found: ${method}`);
  }
}

async function construct(id, method, p) {
  if (method === 'thread/fork' && p.sourceProviderCheckpointId) {
    return respondError(id, -32003, 'fork: tip only; checkpoint forks are unsupported');
  }
  const old = threads.get(p.threadId);
  if (old) { await settleForReplacement(old); stopChild(old); }
  let handle;
  if (method === 'thread/resume') handle = p.providerThreadId;
  else if (method === 'thread/fork' && F('fork-same-handle')) handle = p.sourceProviderThreadId;
  else handle = mintHandle();
  announcedHandles.add(handle);
  const st = { threadId: p.threadId, providerThreadId: handle, cwd: p.cwd, turn: null, turnSeq: 0, dynamicTools: Array.isArray(p.dynamicTools) ? p.dynamicTools : [], child: null, gen: 0 };
  threads.set(p.threadId, st);
  startChild(st);
  if (O('slow')) await sleep(600);
  const steps = identityAndReset(st, true);
  const result = { providerThreadId: handle, sessionRestorable: true };
  if (O('identity-after-result')) { respond(id, result); steps.forEach((f) => f()); } else { steps.forEach((f) => f()); respond(id, result); }
  if (O('identity-twice')) {
    notify('thread/identity', { threadId: st.threadId, providerThreadId: st.providerThreadId, sessionRestorable: true });
    await emit(st, [{ kind: 'thread.identity', providerThreadId: st.providerThreadId }]);
  }
  if (O('ext-state')) {
    await emit(st, [
      { kind: 'extension.state', extensionKind: 'bb/provider-commands', payload: { commands: [{ name: 'noop', description: 'does nothing' }] } },
      { kind: 'extension.state', extensionKind: 'bb/session-options', payload: { options: [] } },
    ]);
  }
  if (O('warn-unhandled')) {
    await emit(st, [{ kind: 'item.open', key: { providerItemId: `${handle}-orphan` }, item: { type: 'tool', tool: 'background_ping', args: {} }, noTurnFallback: { raw: { jsonrpc: '2.0', method: 'bbnode/ping', params: { type: 'ping' } }, rawType: 'ping' } }]);
  }
  if (F('hint-foreign')) notify('provider/recovery', { threadId: 'thr_not_hosted', kind: 'restartRecommended', message: 'restart', retryable: false });
  // An initial prompt on thread/start (input) runs a turn without acceptance (no clientRequestId).
  const initial = textOf(p.input);
  if (initial) runTurn(st, { text: initial, clientRequestId: null });
}

async function settleForReplacement(st) {
  st.gen++;
  if (st.turn) { const d = await interruptTurn(st, 'replaced'); if (d) await emit(st, d); }
}

// ---------------------------------------------------------------------------------------------
// Turns
async function turnStart(id, p) {
  const st = threads.get(p.threadId);
  if (!st) return respondError(id, -32602, `No session for thread ${p.threadId}; send thread/start or thread/resume first`);
  if (st.turn) return respondError(id, -32004, `A turn is already running on ${p.threadId}`);
  const text = textOf(p.input);
  if (F('reject-but-open') && text.split(/\s+/).includes('/noop')) {
    await emit(st, [{ kind: 'turn.open' }, { kind: 'turn.boundary', status: 'failed', error: { message: 'provider refused the prompt' } }]);
    return respondError(id, -32000, 'provider refused the prompt');
  }
  if (F('threads-coupled') && busyGate) await busyGate;
  if (!O('events-first')) respond(id, O('result-extras') ? { threadId: p.threadId, ok: true } : {});
  await runTurn(st, { text, clientRequestId: p.clientRequestId, requestId: id, respondAfter: O('events-first') });
}

async function turnSteer(id, p) {
  const st = threads.get(p.threadId);
  if (!st || !st.turn) {
    return respondError(id, -32001, `No active turn to steer (expected ${p.expectedTurnId})`, { recovery: { kind: 'staleTurn', message: 'the targeted turn is gone', retryable: false } });
  }
  await emit(st, [{ kind: 'input.accepted', clientRequestId: p.clientRequestId }]);
  respond(id, {});
}

async function runTurn(st, { text, clientRequestId, requestId, respondAfter }) {
  const n = ++st.turnSeq;
  const gen = st.gen;
  const pfx = `${st.providerThreadId}-s${n}`; // provider item ids restart per session (turnSeq resets on construct)
  const cur = { n, items: new Map(), held: false, streamKey: null };
  st.turn = cur;
  if (O('vouched-turns')) st.vouchKey = `${pfx}-turn`;
  const acc = (clientRequestId && !F('no-accept')) ? [{ kind: 'input.accepted', clientRequestId: F('wrong-accept') ? 'creq_zzzzzzzzzz' : clientRequestId }] : [];
  const openTurn = [{ kind: 'turn.open', ...(O('vouched-turns') ? { providerTurnId: st.vouchKey } : {}) }];
  const answer = () => { if (respondAfter && requestId !== undefined) respond(requestId, O('result-extras') ? { threadId: st.threadId, ok: true } : {}); };
  const live = () => st.gen === gen && threads.get(st.threadId) === st && st.turn === cur;
  if (F('stray-stdout')) rawOut(`bbnode: starting turn ${n}\n`);

  const words = text.split(/\s+/);
  if (words.includes('/noop')) {
    const b = [{ kind: 'turn.boundary', status: 'completed', claimIfIdle: true }];
    if (F('noop-hangs')) await emit(st, acc);
    else if (O('claim-noop')) await emit(st, [...acc, ...b]);
    else await emit(st, (O('accept-after-open') || O('vouched-turns')) ? [...openTurn, ...acc, b[0]] : [...acc, ...openTurn, b[0]]);
    st.turn = null; st.vouchKey = null;
    answer();
    return;
  }

  const all = []; // collected deltas
  const push = (...d) => all.push(...d);
  if (F('delta-outside-turn')) push({ kind: 'item.textDelta', key: { channel: 'assistant' }, channel: 'agentMessage', text: 'early ' });
  push(...((O('accept-after-open') || O('vouched-turns')) ? [...openTurn, ...acc] : [...acc, ...openTurn]));

  if (words.includes('/hold')) {
    let releaseGate;
    if (F('threads-coupled')) busyGate = new Promise((r) => { releaseGate = r; });
    cur.held = true;
    cur.releaseGate = releaseGate;
    const key = { providerItemId: `${pfx}-cmd` };
    cur.items.set(key.providerItemId, { key, item: { type: 'command', command: 'sleep 600', cwd: st.cwd } });
    push({ kind: 'item.open', key, item: { type: 'command', command: 'sleep 600', cwd: st.cwd }, presentation: pres('Running', 'Ran', 'terminal') });
    push({ kind: 'item.outputDelta', key, channel: 'command', text: 'waiting...\n' });
    cur.streamKey = { channel: 'assistant' };
    push({ kind: 'item.textDelta', key: cur.streamKey, channel: 'agentMessage', text: 'Holding until interrupted.' });
    if (O('mainrun')) push({ kind: 'turn.mainRun', state: 'idle' });
    await emitAll(st, all);
    answer();
    if (O('mainrun')) { await sleep(100); if (live()) await emit(st, [{ kind: 'turn.mainRun', state: 'running' }]); }
    return;
  }

  const unicode = O('unicode') ? ' \u2028line\u2029sep \u{1F600} caf\u00e9 \u0000nul \u0085nel' : '';
  // 1. command item
  const cmdKey = { providerItemId: `${pfx}-cmd` };
  const cmdItem = { type: 'command', command: `echo ${JSON.stringify(text)}`, cwd: st.cwd };
  const out = text + unicode + '\n';
  if (F('output-before-open')) push({ kind: 'item.outputDelta', key: cmdKey, channel: 'command', text: out });
  if (!O('close-only')) push({ kind: 'item.open', key: cmdKey, item: cmdItem, presentation: pres('Running', 'Ran', 'terminal', F('detail-too-long') ? { detail: 'x'.repeat(400) } : {}) });
  if (O('progress') && !O('close-only')) push({ kind: 'item.progress', key: cmdKey, message: 'starting', flush: true }, { kind: 'item.progress', key: cmdKey, message: 'still going' });
  if (!F('output-before-open') && !O('close-only')) {
    if (O('snapshot-output')) push({ kind: 'command.outputSnapshot', key: cmdKey, text: text }, { kind: 'command.outputSnapshot', key: cmdKey, text: out });
    else push({ kind: 'item.outputDelta', key: cmdKey, channel: 'command', text: out });
  }
  push({ kind: 'item.close', key: cmdKey, status: 'completed', exitCode: 0, aggregatedOutput: out, item: { ...cmdItem, aggregatedOutput: out, exitCode: 0, durationMs: 1 }, presentation: pres('Running', 'Ran', 'terminal') });
  if (O('dup-close')) push({ kind: 'item.close', key: cmdKey, status: 'completed', exitCode: 0, aggregatedOutput: out, item: { ...cmdItem, aggregatedOutput: out, exitCode: 0, durationMs: 1 } });
  // 2. fileRead
  const readKey = { providerItemId: `${pfx}-read` };
  const readItem = { type: 'fileRead', path: `${st.cwd}/README.md` };
  if (!O('close-only')) push({ kind: 'item.open', key: readKey, item: readItem, presentation: pres('Reading', 'Read', F('icon-undeclared') ? 'rocket' : 'file') });
  push({ kind: 'item.close', key: readKey, status: 'completed', item: readItem });
  if (O('reopen')) {
    push({ kind: 'item.open', key: readKey, item: readItem, presentation: pres('Reading again', 'Read again', 'file') });
    push({ kind: 'item.close', key: readKey, status: 'completed', item: readItem });
  }
  // 3. search
  const searchKey = { providerItemId: `${pfx}-search` };
  const searchItem = { type: 'search', mode: 'content', query: text, path: st.cwd };
  if (!O('close-only')) push({ kind: 'item.open', key: searchKey, item: searchItem, presentation: pres('Searching', 'Searched', 'search') });
  push({ kind: 'item.close', key: searchKey, status: 'completed', item: searchItem });
  // 4. extension item
  if (O('ext-state') || F('ext-no-presentation')) {
    const exKey = { providerItemId: `${pfx}-receipt` };
    const exItem = { type: 'extension', kind: 'bbnode/receipt', payload: { prompt: text } };
    push({ kind: 'item.open', key: exKey, item: exItem, ...(F('ext-no-presentation') ? {} : { presentation: pres('Stamping', 'Stamped', 'puzzle') }) });
    push({ kind: 'item.close', key: exKey, status: 'completed', item: exItem, presentation: pres('Stamping', 'Stamped', 'puzzle') });
  }
  if (O('warn-unhandled')) {
    push({ kind: 'provider.warning', summary: 'heads up', details: 'a warning inside the turn', vouchedTurn: true });
    push({ kind: 'unhandled', raw: { jsonrpc: '2.0', method: 'bbnode/mystery', params: { type: 'mystery' } }, rawType: 'mystery', vouchedTurn: true });
  }
  if (F('unvouched-turn')) push({ kind: 'usage', total: tokens(1, 1), last: tokens(1, 1), modelContextWindow: 8192, providerTurnId: 'provider-internal-turn-7' });
  await emitAll(st, all.splice(0));
  if (!live()) return;

  // tool call through the runtime
  if (O('tool-call') && st.dynamicTools.length) {
    const tool = st.dynamicTools[0];
    const tkey = { providerItemId: `${pfx}-tool` };
    const titem = { type: 'tool', tool: tool.name, server: 'bb', args: { text } };
    await emit(st, [{ kind: 'item.open', key: tkey, item: titem, ...(tool.presentation ? { presentation: tool.presentation } : {}) }]);
    const r = await bridgeRequest('item/tool/call', { providerThreadId: st.providerThreadId, threadId: st.threadId, turnId: null, callId: tkey.providerItemId, tool: tool.name, arguments: { text } }, 3000);
    if (!live()) return;
    const ok = r && r.result && r.result.success;
    await emit(st, [{ kind: 'item.close', key: tkey, status: ok ? 'completed' : 'failed', item: { ...titem, ...(ok ? { result: r.result.contentItems } : { error: 'tool call failed' }) }, ...(tool.presentation ? { presentation: tool.presentation } : {}) }]);
  }
  if (O('string-ids')) {
    const a = await bridgeRequest('interaction/request', { providerThreadId: st.providerThreadId, threadId: st.threadId, turnId: null, payload: { kind: 'approval', approvalKind: 'command', command: 'echo hi', cwd: st.cwd } }, 1500, 'str');
    const b = await bridgeRequest('interaction/request', { providerThreadId: st.providerThreadId, threadId: st.threadId, turnId: null, payload: { kind: 'approval', approvalKind: 'command', command: 'echo ho', cwd: st.cwd } }, 1500, 'num');
    log('interaction answers', JSON.stringify(a), JSON.stringify(b));
    if (!live()) return;
  }

  if (O('reasoning')) {
    const rk = { channel: 'thinking-1' };
    push({ kind: 'item.textDelta', key: rk, channel: 'reasoningText', text: 'Thinking about ' });
    push({ kind: 'item.textDelta', key: rk, channel: 'reasoningText', text: text });
    push({ kind: 'item.textClose', key: rk, channel: 'reasoningText' });
    const pk = { channel: 'plan-1' };
    push({ kind: 'item.textDelta', key: pk, channel: 'plan', text: '1. echo the prompt' });
    push({ kind: 'item.textClose', key: pk, channel: 'plan', text: '1. echo the prompt' });
  }
  if (O('delegation')) {
    const dk = { providerItemId: `${pfx}-agent` };
    const child = `${pfx}-agent-turn`;
    const ditem = { type: 'delegation', childRef: `${pfx}-agent-child`, label: 'Summarize', background: false };
    push({ kind: 'item.open', key: dk, item: ditem, presentation: pres('Delegating', 'Delegated', 'chat') });
    push({ kind: 'turn.open', providerTurnId: child, parentRef: dk.providerItemId });
    const ck = { providerItemId: `${pfx}-agent-msg`, parentRef: dk.providerItemId };
    push({ kind: 'item.open', key: ck, item: { type: 'agentMessage', text: '' }, providerTurnId: child });
    push({ kind: 'item.textDelta', key: ck, channel: 'agentMessage', text: 'summary', providerTurnId: child });
    push({ kind: 'item.textClose', key: ck, channel: 'agentMessage', text: 'summary', providerTurnId: child });
    push({ kind: 'turn.boundary', status: 'completed', providerTurnId: child });
    push({ kind: 'item.close', key: dk, status: 'completed', item: { ...ditem, summary: 'summary' }, presentation: pres('Delegating', 'Delegated', 'chat') });
  }
  if (O('background') || F('background-leak')) {
    const bk = { providerItemId: `${pfx}-bg` };
    const bitem = { type: 'backgroundTask', familyId: `${pfx}-fam`, taskType: 'local_agent', description: 'background echo', status: 'pending', taskStatus: 'running', skipTranscript: false };
    st.bg = st.bg || new Map();
    st.bg.set(bk.providerItemId, { key: bk, item: bitem });
    push({ kind: 'item.open', key: bk, item: bitem, presentation: pres('Running in background', 'Background done', 'terminal') });
    push({ kind: 'item.progress', key: bk, snapshot: bitem, flush: true });
  }
  // 5. assistant text
  const msg = `echo: ${text}${unicode}`;
  const big = O('big-line') ? ' ' + 'x'.repeat(2 * 1024 * 1024) : '';
  if (O('named-message')) {
    const mkey = { providerItemId: `${pfx}-message` };
    push({ kind: 'item.open', key: mkey, item: { type: 'agentMessage', text: '' }, presentation: pres('Answering', 'Answered', 'chat') });
    push({ kind: 'item.textDelta', key: mkey, channel: 'agentMessage', text: 'echo: ' });
    push({ kind: 'item.textDelta', key: mkey, channel: 'agentMessage', text: text + unicode + big });
    push({ kind: 'item.textClose', key: mkey, channel: 'agentMessage', ...(O('textclose-bare') ? {} : { text: msg + big }) });
  } else {
    const skey = { channel: 'assistant' };
    push({ kind: 'item.textDelta', key: skey, channel: 'agentMessage', ...(F('invalid-delta') ? {} : {}), text: 'echo: ' });
    if (F('invalid-delta')) push({ kind: 'item.textDelta', key: skey, text: text + unicode + big });
    else push({ kind: 'item.textDelta', key: skey, channel: 'agentMessage', text: text + unicode + big });
    push({ kind: 'item.textClose', key: skey, channel: 'agentMessage', ...(O('textclose-bare') ? {} : { text: msg + big }) });
  }
  // 6. usage and context meter
  st.total = addTokens(st.total, tokens(text.length, msg.length));
  const u = { kind: 'usage', total: st.total, last: tokens(text.length, msg.length), modelContextWindow: 8192 };
  if (O('new-usage-fields')) { u.total = { ...u.total, cacheReadInputTokens: 0, cacheWriteInputTokens: 3 }; u.last = { ...u.last, cacheReadInputTokens: 0, cacheWriteInputTokens: 3 }; u.promptCacheTtlMs = 300000; }
  if (F('usage-null')) delete u.modelContextWindow;
  const cw = { kind: 'contextWindow', used: st.total.totalTokens, size: 8192, estimated: true, attach: O('usage-after-boundary') ? 'currentOrLast' : 'open' };
  if (O('new-usage-fields')) cw.cost = { amount: 0.001, currency: 'USD' };
  if (!O('usage-after-boundary')) push(u, cw);
  if (O('fail-turns')) push({ kind: 'provider.error', message: 'provider failed the turn', settlesTurn: true });
  else push({ kind: 'turn.boundary', status: 'completed', ...(O('checkpoint') ? { providerCheckpointId: `${pfx}-ckpt` } : {}) });
  if (O('usage-after-boundary')) push(u, cw);
  if (O('one-batch')) { all.unshift(...acc); }
  await emitAll(st, all.splice(0));
  if (st.turn === cur) { st.turn = null; st.vouchKey = null; }
  answer();
}

async function emitAll(st, deltas) {
  if (O('one-batch') || O('split-deltas')) return emit(st, deltas);
  // default: small natural batches (like a bridge parsing a provider stream): one item's deltas per batch
  const batches = [];
  let curB = [];
  for (const d of deltas) {
    curB.push(d);
    if (['item.close', 'item.textClose', 'turn.open', 'input.accepted', 'contextWindow'].includes(d.kind)) { batches.push(curB); curB = []; }
  }
  if (curB.length) batches.push(curB);
  for (const b of batches) await emit(st, b);
}

const tokens = (i, o) => ({ inputTokens: i, cachedInputTokens: 0, outputTokens: o, reasoningOutputTokens: 0, totalTokens: i + o });
function addTokens(a, b) {
  if (!a) return { ...b };
  const r = {};
  for (const k of Object.keys(b)) r[k] = (a[k] || 0) + b[k];
  return r;
}

function bridgeRequest(method, params, timeoutMs, idKind) {
  const n = ++bridgeReqSeq;
  const id = idKind === 'num' ? 900000 + n : `bbnode-req-${n}`;
  return new Promise((resolve) => {
    const t = setTimeout(() => { pendingBridgeReqs.delete(String(id)); resolve(null); }, timeoutMs);
    pendingBridgeReqs.set(String(id), (m) => { clearTimeout(t); resolve(m); });
    send({ jsonrpc: '2.0', id, method, params });
  });
}

// ---------------------------------------------------------------------------------------------
// Stop
async function interruptTurn(st, why) {
  const cur = st.turn;
  if (!cur) return;
  const d = [];
  for (const { key, item } of cur.items.values()) {
    if (!F('stop-leaves-items')) d.push({ kind: 'item.close', key, status: 'failed', resultText: `interrupted (${why})`, item: { ...item, exitCode: 130 }, presentation: pres('Running', 'Stopped', 'terminal') });
  }
  if (cur.streamKey) d.push({ kind: 'item.textClose', key: cur.streamKey, channel: 'agentMessage' });
  d.push({ kind: 'turn.boundary', status: F('stop-completed') ? 'completed' : 'interrupted' });
  st.turn = null;
  st.vouchKey_ = st.vouchKey;
  if (cur.releaseGate) { cur.releaseGate(); busyGate = null; }
  return d;
}

function bgCloses(st) {
  if (!st.bg || F('background-leak')) return [];
  const d = [];
  for (const { key, item } of st.bg.values()) d.push({ kind: 'item.close', key, status: 'failed', resultText: 'session stopped', item: { ...item, status: 'failed', taskStatus: 'stopped' } });
  st.bg.clear();
  return d;
}
async function stop(id, p) {
  const st = threads.get(p.threadId);
  if (!st) return respond(id, {});
  st.gen++;
  if (p.intent === 'interrupt' && O('stop-session-ended') && st.turn) {
    st.turn = null;
    await emit(st, [{ kind: 'session.ended' }]);
    st.vouchKey = null;
  }
  if (p.intent === 'interrupt') {
    if (F('stop-hang')) return; // never answered
    if (O('stop-async')) await sleep(Number(process.env.STOP_MS || 1200));
    const d = await interruptTurn(st, 'user interrupt');
    if (d && d.length) {
      if (F('stop-after-result')) {
        stopChild(st); threads.delete(p.threadId);
        respond(id, {});
        await sleep(50);
        await emit(st, d);
        return afterStop(st);
      }
      await emit(st, d);
      st.vouchKey = null;
    }
  } else {
    if (F('release-fabricates')) await emit(st, [{ kind: 'turn.open' }, { kind: 'turn.boundary', status: 'interrupted' }]);
    if (st.turn) {
      // A release of a thread with a turn still live: settle what we owe (this is not fabricated,
      // the turn really ends because the session goes away) before answering.
      const d = await interruptTurn(st, 'released');
      if (d) await emit(st, d);
    }
  }
  const bgd = bgCloses(st);
  if (bgd.length) await emit(st, bgd);
  stopChild(st);
  threads.delete(p.threadId);
  respond(id, O('result-extras') ? { ok: true } : {});
  afterStop(st);
}
function afterStop(st) {
  if (F('after-stop')) setTimeout(() => notify('thread/delta', { threadId: st.threadId, deltas: [{ kind: 'contextWindow', used: 1, size: 8192, estimated: true, attach: 'currentOrLast' }] }), 100);
}

// ---------------------------------------------------------------------------------------------
// Input
let inBuf = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => {
  inBuf += chunk;
  let i;
  while ((i = inBuf.indexOf('\n')) >= 0) {
    const line = inBuf.slice(0, i).replace(/\r$/, '');
    inBuf = inBuf.slice(i + 1);
    onLine(line);
  }
});
process.stdin.on('end', async () => {
  if (inBuf.trim()) onLine(inBuf);
  log('stdin closed');
  for (const st of threads.values()) stopChild(st);
  await flushed();
  if (F('no-exit')) { setInterval(() => {}, 1000); return; }
  process.exit(0);
});

function onLine(line) {
  if (!line.trim()) return;
  let msg;
  try { msg = JSON.parse(line); } catch {
    if (F('nonjson-exit')) { process.stderr.write('bbnode: cannot parse stdin line, exiting\n'); process.exit(3); }
    log('ignored non-JSON line');
    return;
  }
  if (!isObj(msg)) return;
  if (msg.method === undefined) {
    // a response to one of our requests
    if (F('answer-responses') && msg.id !== undefined) return respondError(msg.id, -32600, 'Invalid Request: no method');
    const k = msg.id === undefined || msg.id === null ? null : String(msg.id);
    const w = k && pendingBridgeReqs.get(k);
    if (w) { pendingBridgeReqs.delete(k); w(msg); }
    return;
  }
  if (msg.id === undefined) return; // notification: unknown ones are ignored
  if (typeof msg.method !== 'string' || !(typeof msg.id === 'string' || typeof msg.id === 'number' || msg.id === null)) {
    return respondError(msg.id === undefined ? null : msg.id, -32600, 'Invalid Request');
  }
  Promise.resolve(handle(msg)).catch((e) => respondError(msg.id, -32000, `bbnode internal error: ${e && e.message}`));
}

if (O('ext-notify')) {
  const t = setInterval(() => {
    notify('x-bbnode/heartbeat', { at: Date.now() });
    notify('provider/raw', { coverage: 'noise', payload: { type: 'keepalive' } });
  }, 400);
  t.unref();
}
process.on('SIGTERM', () => { for (const st of threads.values()) stopChild(st); process.exit(143); });
process.stdout.on('error', () => process.exit(0));
