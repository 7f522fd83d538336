//! The offline Bridle model: a cell's merged lane entries → events (+ grammar drops).
//!
//! One event per Socket.IO packet or HTTP exchange line, in `(run, seq)` order:
//!
//! ```text
//! {"dir": "hub→browser", "event": "stream", "data": {…}}          an EVENT packet
//! {"dir": "browser→hub", "packet": "connect", "nsp": "/ws/client"}  CONNECT/DISCONNECT/CONNECT_ERROR
//!   (a CONNECT with the handshake's `agentId`, when it names one)
//! {"dir": "http→hub", "http": {"method": …, "path": …, "body": …}}  the HTTP API
//! ```
//!
//! Engine.IO control frames (open, ping, pong, upgrade, noop) are transport, not events. The
//! grammar drops, per direction and messageId, a `stream`/`stream_end` after that message's
//! `stream_end` (`stream-after-end`) and a `stream` whose text does not extend the previous one
//! (`streaming-replace`); a binary frame from the hub is dropped as `binary-frame`. A text frame
//! from the hub that does not decode is reported as invalid, with its lane position. A frame a
//! browser or an agent sent that is no event (the malformed packets of a robustness check) is the
//! hub's input, not its output: no event, no drop, not invalid (a live replay sends it as
//! recorded and sees nothing of it either).

use super::rules::parts_text;
use super::wire::{SioType, decode_frame};
use crate::cell::Cell;
use crate::lane::Entry;
use crate::protocol::{EventSink, GrammarDrop, Model, Protocol, RowProjector};
use serde_json::{Value, json};
use std::collections::HashMap;

/// How Bridle events and rows are normalized: ids interned, `ts` zeroed by its type and unit.
pub const BRIDLE_RULES: crate::normalize::Rules<'static> = crate::normalize::Rules {
    id_fields: &["messageId", "clientId", "agentId", "sid", "id"],
    blank_fields: &[],
    removed_fields: &[],
    time_fields: &["ts"],
    // The spec types every `ts` as a number, in milliseconds (its examples): a hub that writes
    // an ISO string differs, and so does one that writes seconds.
    keep_time_type: true,
    opaque_fields: &[],
};

pub struct BridleModel;

/// Per (direction, browser connection, messageId) stream state: two tabs of one user share a
/// cell and each gets the whole stream. The player also runs one over each browser's events in
/// the order they arrive, where a stream after its `stream_end` shows (its view is in the order
/// the recording awaited them).
#[derive(Default)]
pub struct Grammar {
    last: HashMap<StreamKey, String>,
    ended: HashMap<StreamKey, bool>,
}

/// A stream's direction, the browser connection it went to (`None`: one connection, or not a
/// browser's), and its messageId.
type StreamKey = (String, Option<u64>, String);

/// The connection of a browser's line, when the recorder wrote it ([`Entry::conn`]): the key a
/// cell's grammar keeps each tab's streams apart by. `None` for other lines (an agent's
/// reconnect does not start its streams afresh).
pub fn browser_conn(entry: &Entry) -> Option<u64> {
    BROWSER_DIRS
        .contains(&entry.dir.as_str())
        .then(|| entry.conn())
        .flatten()
}

/// A browser's two directions.
const BROWSER_DIRS: [&str; 2] = ["hub→browser", "browser→hub"];

impl Grammar {
    pub fn accept(&mut self, dir: &str, name: &str, data: &Value) -> Result<(), GrammarDrop> {
        self.accept_on(None, dir, name, data)
    }

    /// [`Grammar::accept`] for an event of browser connection `conn` ([`browser_conn`]).
    pub fn accept_on(
        &mut self,
        conn: Option<u64>,
        dir: &str,
        name: &str,
        data: &Value,
    ) -> Result<(), GrammarDrop> {
        if name != "stream" && name != "stream_end" {
            return Ok(());
        }
        let key = (
            dir.to_string(),
            conn,
            data["messageId"].as_str().unwrap_or("").to_string(),
        );
        let drop = |rule: &str, reason: String| GrammarDrop {
            rule: rule.into(),
            reason,
            event_type: name.into(),
        };
        if self.ended.get(&key).copied().unwrap_or(false) {
            return Err(drop(
                "stream-after-end",
                format!("{name} after stream_end of messageId {:?}", key.2),
            ));
        }
        let text = data["text"].as_str().unwrap_or("").to_string();
        if let Some(prev) = self.last.get(&key)
            && name == "stream"
            && !text.starts_with(prev.as_str())
        {
            return Err(drop(
                "streaming-replace",
                format!("stream {text:?} does not extend {prev:?}"),
            ));
        }
        if name == "stream_end" {
            self.ended.insert(key.clone(), true);
        }
        self.last.insert(key, text);
        Ok(())
    }
}

/// The event for one lane entry (None for transport-only frames).
pub fn event_of(entry: &Entry) -> Result<Option<Value>, String> {
    let dir = entry.dir.as_str();
    if dir == "http→hub" || dir == "hub→http" {
        let v: Value =
            serde_json::from_str(&entry.line).map_err(|e| format!("invalid HTTP line: {e}"))?;
        return Ok(Some(json!({ "dir": dir, "http": v })));
    }
    // A message its connection ended inside of reached nobody whole: no event.
    if super::wire::parse_cut(&entry.line).is_some() {
        return Ok(None);
    }
    if entry.line.starts_with("binary:") {
        return Err("binary".into());
    }
    let (_, sio) = decode_frame(&entry.line).map_err(|e| format!("invalid frame: {e}"))?;
    let Some(p) = sio else {
        return Ok(None);
    };
    if let Some((name, data)) = p.event_parts() {
        return Ok(Some(json!({ "dir": dir, "event": name, "data": data })));
    }
    let packet = match p.kind {
        SioType::Connect => "connect",
        SioType::Disconnect => "disconnect",
        SioType::ConnectError => "connect_error",
        _ => return Ok(None),
    };
    let mut ev = json!({ "dir": dir, "packet": packet, "nsp": p.nsp });
    // The agentId a browser or agent connects for (its handshake's; the token and key stay out):
    // the recipient a hub's routing fields are judged against ([`names_another_recipient`]).
    if p.kind == SioType::Connect
        && let Some(a) = p.data.as_ref().and_then(|d| d["agentId"].as_str())
    {
        ev["agentId"] = json!(a);
    }
    Ok(Some(ev))
}

/// Runs events in the model's shape (a live leg's view) through the same grammar the recorded
/// leg's assembly applies: the kept events and each drop's `<rule>:<eventType>`. An event
/// marked `"judged": true` was judged as it arrived (the player's view is in the recording's
/// order, not the hub's): kept as it is, without the mark. One marked `"conn": N` came on
/// the recorded browser connection N ([`browser_conn`]): judged with that connection's
/// streams, kept without the mark.
pub fn grammar_pass(events: Vec<Value>) -> (Vec<Value>, Vec<String>) {
    let mut grammar = Grammar::default();
    let mut kept = Vec::with_capacity(events.len());
    let mut drops = Vec::new();
    for mut ev in events {
        let conn = ev
            .as_object_mut()
            .and_then(|m| m.remove("conn"))
            .and_then(|c| c.as_u64());
        if ev["judged"] == true {
            if let Some(m) = ev.as_object_mut() {
                m.remove("judged");
            }
            kept.push(ev);
            continue;
        }
        let verdict = match (ev["dir"].as_str(), ev.get("event").and_then(Value::as_str)) {
            (Some(dir), Some(name)) => grammar.accept_on(conn, dir, name, &ev["data"]),
            _ => Ok(()),
        };
        match verdict {
            Ok(()) => kept.push(ev),
            Err(d) => drops.push(d.layer_key()),
        }
    }
    (kept, drops)
}

impl Model for BridleModel {
    fn protocol(&self) -> Protocol {
        Protocol::Bridle
    }

    fn assemble(
        &self,
        _cell: &Cell,
        entries: &mut dyn Iterator<Item = Entry>,
        sink: &mut dyn EventSink,
    ) {
        let mut grammar = Grammar::default();
        for entry in entries {
            match event_of(&entry) {
                Ok(None) => {}
                Ok(Some(ev)) => {
                    let verdict = match ev.get("event").and_then(Value::as_str) {
                        Some(name) => {
                            grammar.accept_on(browser_conn(&entry), &entry.dir, name, &ev["data"])
                        }
                        None => Ok(()),
                    };
                    match verdict {
                        Ok(()) => sink.event(ev),
                        Err(d) => sink.grammar_drop(d),
                    }
                }
                // A frame a browser or an agent sent that is no event (a malformed packet, a
                // binary frame): the harness's input to the hub, recorded as sent, not the
                // hub's output to judge. A live replay sends it as recorded and sees no event.
                Err(_) if INPUT_DIRS.contains(&entry.dir.as_str()) => {}
                Err(e) if e == "binary" => sink.grammar_drop(GrammarDrop {
                    rule: "binary-frame".into(),
                    reason: "a binary frame in a JSON protocol".into(),
                    event_type: "binary".into(),
                }),
                Err(e) => sink.invalid(format!(
                    "{} run {} seq {}: {e}",
                    entry.dir,
                    crate::jsjson::format_f64(entry.run),
                    crate::jsjson::format_f64(entry.seq)
                )),
            }
        }
    }

    fn row_projector(&self) -> Box<dyn RowProjector> {
        Box::<BridleRows>::default()
    }

    fn event_rules(&self) -> crate::normalize::Rules<'static> {
        BRIDLE_RULES
    }

    fn row_rules(&self) -> crate::normalize::Rules<'static> {
        BRIDLE_RULES
    }

    /// Parity and replay compare what the spec lets two hubs share: extensions are left out
    /// (events: [`is_extension`]; fields of an HTTP answer: [`http_extensions`]) and the free
    /// tail of the hub's own not-connected reply is folded ([`fold_not_connected`]), then ids
    /// are interned and times zeroed. Only the hub's own reply: a browser message answered
    /// before any agent frame of that turn. An agent's answer that happens to begin with the
    /// same words is relayed text, compared whole.
    fn normalize_events(&self, mut events: Vec<Value>) -> Vec<Value> {
        let mut agent_in_turn = false;
        drop_http_extensions(&mut events);
        drop_event_extensions(&mut events);
        let kept = events
            .into_iter()
            .filter(|e| !is_extension(e))
            .map(|mut e| {
                match (e["dir"].as_str(), e["event"].as_str()) {
                    // A browser's message (or an HTTP one) opens a turn.
                    (Some("browser→hub" | "http→hub"), Some("message")) => {
                        agent_in_turn = false
                    }
                    // What an agent sends in the turn is what the hub relays.
                    (Some("agent→hub"), Some(name)) if !AGENT_HOUSEKEEPING.contains(&name) => {
                        agent_in_turn = true
                    }
                    (Some("hub→browser"), Some("message")) if !agent_in_turn => {
                        fold_not_connected(&mut e["data"])
                    }
                    _ => {}
                }
                e
            })
            .collect();
        crate::normalize::normalize_list(kept, BRIDLE_RULES)
    }

    /// Parity compares each lane (direction) in its own order, the lanes one after the other
    /// ([`by_lane`]): the recording's interleaving of frames on independent connections (an
    /// agent's next frame beside the hub's relay of its last, an agent's reply beside the next
    /// HTTP request) is the proxy's, not the hub's, and two runs of one setup differ in it.
    fn fold_events(&self, events: Vec<Value>) -> Vec<Value> {
        by_lane(events)
    }

    /// Extension events by side and name, then the HTTP answers' and the events' extension
    /// fields, each counted: what [`BridleModel::normalize_events`] leaves out.
    fn left_out(&self, events: &[Value]) -> Vec<String> {
        use std::collections::BTreeMap;
        let mut names: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        let mut fields: BTreeMap<(&str, String), usize> = BTreeMap::new();
        let foreign = names_another_recipient(events);
        for (e, foreign) in events.iter().zip(foreign) {
            let dir = e["dir"].as_str().unwrap_or("");
            if is_extension(e) {
                *names
                    .entry((dir, e["event"].as_str().unwrap_or("")))
                    .or_default() += 1;
            } else {
                for f in event_extensions(std::slice::from_ref(e)) {
                    // Compared, not left out.
                    if !f.contains("parts[]")
                        && f.rsplit_once('.').is_some_and(|(_, k)| foreign.keeps(k))
                    {
                        continue;
                    }
                    *fields.entry((dir, f)).or_default() += 1;
                }
            }
        }
        for f in http_extensions(events) {
            *fields.entry(("hub→http", f)).or_default() += 1;
        }
        let names = names
            .into_iter()
            .map(|((dir, n), c)| format!("{dir} {n:?} ×{c}"));
        let fields = fields.into_iter().map(|((dir, f), c)| match dir {
            "hub→http" => format!("{dir} answer field {f:?} ×{c}"),
            _ => format!("{dir} field {f:?} ×{c}"),
        });
        names.chain(fields).collect()
    }

    /// The hub's own not-connected reply is folded where the rows are projected
    /// ([`BridleRows`], which sees the turn); here the extension fields inside a bubble's parts
    /// are left out (as the events' are, [`event_extensions`]), ids interned and times zeroed.
    fn normalize_rows(&self, mut rows: Vec<Value>) -> Vec<Value> {
        for row in &mut rows {
            if let Some(parts) = row.get_mut("parts") {
                *parts = parts_spec_view(parts).0;
            }
        }
        crate::normalize::normalize_list(rows, BRIDLE_RULES)
    }
}

/// `events` grouped by lane, in the order a message travels (`browser→hub`, `hub→agent`,
/// `agent→hub`, `hub→browser`, then the HTTP exchanges), each lane's events in their own order:
/// the canonical order parity compares. The spec orders frames within a connection (a
/// browser's `typing`, its `stream` frames, then the `stream_end`) and nothing across
/// connections but causality, which every run of one setup shares (a relay follows what it
/// relays). So each lane's order is compared, and the lanes' interleaving, which is when the
/// proxy's tasks ran, is not. An HTTP exchange is one connection: each request is followed by
/// its answer, paired in order as [`http_exchanges`] pairs them. An event with no direction
/// comes last.
pub fn by_lane(events: Vec<Value>) -> Vec<Value> {
    use std::collections::VecDeque;
    // In the order a message travels (a browser's message, its forward to the agent, the
    // agent's answer, its relay to the browser), so a diff's context reads as a turn does.
    let dirs: &[&str] = &[
        "browser→hub",
        "hub→agent",
        "agent→hub",
        "hub→browser",
        "http→hub",
        "hub→http",
    ];
    let lane_of = |d: &str| dirs.iter().position(|x| *x == d);
    let mut lanes: Vec<VecDeque<Value>> = vec![VecDeque::new(); dirs.len() + 1];
    let n = events.len();
    for e in events {
        let i = e["dir"].as_str().and_then(lane_of).unwrap_or(dirs.len());
        lanes[i].push_back(e);
    }
    let mut out = Vec::with_capacity(n);
    for (i, dir) in dirs.iter().enumerate() {
        let answers = (*dir == "http→hub").then(|| lane_of("hub→http")).flatten();
        while let Some(e) = lanes[i].pop_front() {
            out.push(e);
            if let Some(a) = answers.and_then(|a| lanes[a].pop_front()) {
                out.push(a);
            }
        }
    }
    out.extend(lanes.pop().into_iter().flatten());
    out
}

/// What the browsers and the agent send the hub: its inputs.
const INPUT_DIRS: &[&str] = &["browser→hub", "agent→hub"];

/// Agent→hub events that answer no browser (registration and keep-alive).
const AGENT_HOUSEKEEPING: &[&str] = &["register", "ping", "pong"];

/// A hub event whose name the spec does not list for its side and that misuses no spec name
/// (`check bridle hub`'s spec-events-only lists these as extensions): the spec forbids none,
/// so two hubs that differ only in extensions are at parity. A misused spec name (a look-alike
/// such as `streamEnd`, or `typing` to an agent) stays in the view.
pub fn is_extension(e: &Value) -> bool {
    match (e["dir"].as_str(), e["event"].as_str()) {
        (Some(dir), Some(name)) => is_extension_name(dir, name),
        _ => false,
    }
}

/// [`is_extension`] of an event named `name` the hub sends in direction `dir`.
pub fn is_extension_name(dir: &str, name: &str) -> bool {
    use super::check_hub::{TO_AGENT, TO_BROWSER, spec_name_misuse};
    let listed = match dir {
        "hub→browser" => TO_BROWSER,
        "hub→agent" => TO_AGENT,
        _ => return false,
    };
    !listed.contains(&name) && spec_name_misuse(name).is_none()
}

/// The fields the spec gives the 2xx answer to an HTTP API request (`None`: no shape given,
/// the answer is compared whole). The spec writes each as an object literal and a TypeScript
/// interface (`IBridleHealthData`, …), which an object with more fields still satisfies.
fn http_answer_fields(request: &Value) -> Option<&'static [&'static str]> {
    let rest = request_path(request)?.strip_prefix("/api/agent/")?;
    let segments: Vec<&str> = rest.split('/').collect();
    match (request["method"].as_str()?, segments.as_slice()) {
        ("GET", ["health"]) => Some(&["ok", "agentConnected", "browserClients"]),
        ("GET", [_, "health"]) => Some(&["ok", "agentConnected", "browserClients", "agentId"]),
        ("POST", [_, "message"]) => Some(&["ok"]),
        ("POST", [_, "message", "sync"]) => Some(&["text", "messageId", "ts"]),
        _ => None,
    }
}

/// A health answer's `agentConnected` and `browserClients` replaced by their JSON type
/// (`"<boolean>"`, `"<number>"`): the shape the spec gives, without the values.
pub fn counts_by_type(body: &mut Value) {
    let Some(body) = body.as_object_mut() else {
        return;
    };
    for k in ["agentConnected", "browserClients"] {
        if let Some(v) = body.get_mut(k) {
            let t = match v {
                Value::Bool(_) => "<boolean>",
                Value::Number(_) => "<number>",
                _ => continue,
            };
            *v = json!(t);
        }
    }
}

/// The hub-wide health answers (`GET /api/agent/health`) with their counts by type
/// ([`counts_by_type`]): they count every agentId's agents and browsers, and a replay plays one
/// agentId at a time, so a recording's values are not a replay's to reproduce. What a recorded
/// leg and a live one are both compared on ([`crate::protocol::Live::live_view`]); two live
/// legs, played alike, compare them whole.
pub fn hub_wide_counts_by_type(mut events: Vec<Value>) -> Vec<Value> {
    for (request, answer) in http_exchanges(&events) {
        let req = &events[request]["http"];
        let hub_wide = req["method"] == "GET"
            && request_path(req).is_some_and(|p| p.trim_end_matches('/') == "/api/agent/health");
        if hub_wide {
            counts_by_type(&mut events[answer]["http"]["body"]);
        }
    }
    events
}

/// An HTTP request's path without its query string or fragment.
fn request_path(request: &Value) -> Option<&str> {
    let path = request["path"].as_str()?;
    Some(path.split(['?', '#']).next().unwrap_or(path))
}

/// Each HTTP answer (`hub→http`) with the request (`http→hub`) it answers, by index in
/// `events`: paired in order, as the player sends and awaits them.
fn http_exchanges(events: &[Value]) -> Vec<(usize, usize)> {
    let mut requests = std::collections::VecDeque::new();
    let mut pairs = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match e["dir"].as_str() {
            Some("http→hub") => requests.push_back(i),
            Some("hub→http") => pairs.extend(requests.pop_front().map(|r| (r, i))),
            _ => {}
        }
    }
    pairs
}

/// Each 2xx HTTP answer (`hub→http`) whose body is an object: its index in `events` and the
/// fields the spec gives it ([`http_exchanges`]).
fn http_answers(events: &[Value]) -> Vec<(usize, &'static [&'static str])> {
    http_exchanges(events)
        .into_iter()
        .filter_map(|(request, i)| {
            let e = &events[i];
            let ok = e["http"]["status"]
                .as_u64()
                .is_some_and(|s| (200..300).contains(&s));
            let fields = http_answer_fields(&events[request]["http"])?;
            (ok && e["http"]["body"].is_object()).then_some((i, fields))
        })
        .collect()
}

/// The fields of HTTP answers that the spec does not give them (in order of appearance, once
/// per answer): extensions, like the events of [`is_extension`]. `check bridle hub` lists
/// them and judges nothing by them; replay and parity leave them out.
pub fn http_extensions(events: &[Value]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, fields) in http_answers(events) {
        if let Some(m) = events[i]["http"]["body"].as_object() {
            found.extend(m.keys().filter(|k| !fields.contains(&k.as_str())).cloned());
        }
    }
    found
}

/// Leaves out of each HTTP answer the fields the spec does not give it ([`http_extensions`]).
fn drop_http_extensions(events: &mut [Value]) {
    for (i, fields) in http_answers(events) {
        if let Some(m) = events[i]["http"]["body"].as_object_mut() {
            m.retain(|k, _| fields.contains(&k.as_str()));
        }
    }
}

/// The fields the spec gives the data of an event the hub sends (`None`: an event the spec does
/// not give that side, or data that is not an object: compared whole). The spec writes each as
/// an object literal, the agent's as a TypeScript interface (`IBridleIncomingMessage`); more
/// fields still satisfy them, and `check bridle hub`'s event-fields judges only these.
fn event_fields(e: &Value) -> Option<&'static [&'static str]> {
    if !e["data"].is_object() {
        return None;
    }
    match (e["dir"].as_str()?, e["event"].as_str()?) {
        ("hub→browser", "welcome") => Some(&["clientId"]),
        ("hub→browser", "typing") => Some(&["type", "ts"]),
        ("hub→browser", "stream" | "stream_end") => {
            Some(&["type", "text", "parts", "messageId", "ts"])
        }
        // A relayed note keeps its kind.
        ("hub→browser", "message") => Some(&["type", "text", "parts", "messageId", "ts", "kind"]),
        ("hub→browser", "pong") => Some(&["ts"]),
        ("hub→agent", "message") => {
            Some(&["type", "clientId", "agentId", "text", "parts", "messageId"])
        }
        ("hub→agent", "pong") => Some(&[]),
        _ => None,
    }
}

/// The fields the spec gives a part (`BridlePart`, by its `type`); `None` for a part whose
/// type the spec does not list, or that is not an object: compared whole.
fn part_fields(p: &Value) -> Option<&'static [&'static str]> {
    match p.as_object()?.get("type")?.as_str()? {
        "text" => Some(&["type", "text"]),
        "image" => Some(&["type", "base64", "mediaType"]),
        "file" => Some(&["type", "url", "name", "mimeType"]),
        _ => None,
    }
}

/// `parts` with each part of a type the spec lists cut to its spec fields, and the other
/// fields' names (once each, in order of appearance): what a rule that wants parts "as the
/// agent sent them" compares and what it lists as extensions. A part the spec does not type
/// is kept whole.
pub fn parts_spec_view(parts: &Value) -> (Value, Vec<String>) {
    let mut extensions: Vec<String> = Vec::new();
    let view = match parts.as_array() {
        None => parts.clone(),
        Some(list) => Value::Array(
            list.iter()
                .map(|p| match (part_fields(p), p.as_object()) {
                    (Some(fields), Some(m)) => {
                        let mut kept = serde_json::Map::new();
                        for (k, v) in m {
                            if fields.contains(&k.as_str()) {
                                kept.insert(k.clone(), v.clone());
                            } else if !extensions.contains(k) {
                                extensions.push(k.clone());
                            }
                        }
                        Value::Object(kept)
                    }
                    _ => p.clone(),
                })
                .collect(),
        ),
    };
    (view, extensions)
}

/// The parts of an event whose spec fields include `parts`, each with its spec fields.
fn spec_parts(e: &Value) -> impl Iterator<Item = (&Value, &'static [&'static str])> {
    event_fields(e)
        .filter(|f| f.contains(&"parts"))
        .and_then(|_| e["data"]["parts"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|p| part_fields(p).map(|f| (p, f)))
}

/// The fields of hub events that the spec does not give them, as `<event>.<field>`, and of
/// their parts, as `<event>.parts[].<field>` (in order of appearance, once per event or
/// part): extensions, like the HTTP answers' of [`http_extensions`]. Replay and parity leave
/// them out and list them (a field inside a part is as much an extension as one beside it).
pub fn event_extensions(events: &[Value]) -> Vec<String> {
    let mut found = Vec::new();
    for e in events {
        if let (Some(fields), Some(m)) = (event_fields(e), e["data"].as_object()) {
            let name = e["event"].as_str().unwrap_or("");
            found.extend(
                m.keys()
                    .filter(|k| !fields.contains(&k.as_str()))
                    .map(|k| format!("{name}.{k}")),
            );
            for (p, fields) in spec_parts(e) {
                found.extend(
                    p.as_object()
                        .into_iter()
                        .flat_map(|m| m.keys())
                        .filter(|k| !fields.contains(&k.as_str()))
                        .map(|k| format!("{name}.parts[].{k}")),
                );
            }
        }
    }
    found
}

/// The routing fields beside a hub→browser event, where the spec does not give them, that name
/// another recipient than the browser it reached ([`names_another_recipient`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Foreign {
    pub client_id: bool,
    pub agent_id: bool,
}

impl Foreign {
    /// Whether `field` of the event is compared rather than left out as an extension.
    pub fn keeps(self, field: &str) -> bool {
        (self.client_id && field == "clientId") || (self.agent_id && field == "agentId")
    }
}

/// Per event, which of its routing fields name another recipient: a hub→browser event's
/// `clientId` or `agentId`, fields the spec does not give it, that differ from the browser's
/// own (the clientId of the last `welcome` before it, or none yet; the agentId of the last
/// browser connect before it). The spec forbids no extension, and a browser's own ids beside an
/// event are one; another's claim a different recipient (`check bridle hub`'s event-fields
/// fails them, and a comparison that leaves them out as extensions did not see them). An
/// agentId with no connect before it to judge it by is left out.
pub fn names_another_recipient(events: &[Value]) -> Vec<Foreign> {
    let (mut own_client, mut own_agent): (Option<&str>, Option<&str>) = (None, None);
    events
        .iter()
        .map(|e| {
            if e["dir"] == "browser→hub" && e["packet"] == "connect" {
                own_agent = e["agentId"].as_str();
            }
            if e["dir"] != "hub→browser" {
                return Foreign::default();
            }
            if e["event"] == "welcome" {
                own_client = e["data"]["clientId"].as_str();
                return Foreign::default();
            }
            let Some(fields) = event_fields(e) else {
                return Foreign::default();
            };
            let other = |f: &str, own: Option<&str>, unjudged: bool| match e["data"].get(f) {
                Some(_) if fields.contains(&f) => false,
                Some(v) => own.map_or(unjudged, |own| v.as_str() != Some(own)),
                None => false,
            };
            Foreign {
                client_id: other("clientId", own_client, true),
                agent_id: other("agentId", own_agent, false),
            }
        })
        .collect()
}

/// Leaves out of each hub event, and of its parts, the fields the spec does not give them
/// ([`event_extensions`]), but a `clientId` or an `agentId` that names another recipient
/// ([`names_another_recipient`]): compared.
fn drop_event_extensions(events: &mut [Value]) {
    let foreign = names_another_recipient(events);
    for (e, foreign) in events.iter_mut().zip(foreign) {
        let Some(fields) = event_fields(e) else {
            continue;
        };
        if let Some(m) = e["data"].as_object_mut() {
            m.retain(|k, _| fields.contains(&k.as_str()) || foreign.keeps(k));
        }
        if !fields.contains(&"parts") {
            continue;
        }
        if let Some(parts) = e["data"]["parts"].as_array_mut() {
            for p in parts {
                if let Some(fields) = part_fields(p)
                    && let Some(m) = p.as_object_mut()
                {
                    m.retain(|k, _| fields.contains(&k.as_str()));
                }
            }
        }
    }
}

/// The not-connected reply's text past the spec's words: the spec gives
/// `"Agent is not connected..."`, so the rest is each hub's own (two hubs word it differently
/// and are both right). Folds the text, and the text parts that mirror it, to the spec's words.
pub fn fold_not_connected(data: &mut Value) {
    use super::NOT_CONNECTED;
    let Some(text) = data["text"].as_str().map(str::to_string) else {
        return;
    };
    if !text.starts_with(NOT_CONNECTED) {
        return;
    }
    let folded = Value::String(format!("{NOT_CONNECTED}…"));
    data["text"] = folded.clone();
    if let Some(parts) = data.get_mut("parts").and_then(Value::as_array_mut) {
        for p in parts {
            if p["type"] == "text" && p["text"] == text.as_str() {
                p["text"] = folded.clone();
            }
        }
    }
}

/// Rows: the chat bubbles a browser shows, from the browser-side lanes. `stream` replaces the
/// answer bubble of its messageId (streaming-replace), `stream_end` settles it; notes (`kind`,
/// or any message between `typing` and `stream_end`) fold into one work-log row per turn above
/// the answer; a plain message with no turn open is an answer bubble.
#[derive(Default)]
pub struct BridleRows {
    rows: Vec<Value>,
    turn_open: bool,
    /// Index of this turn's work-log row.
    worklog: Option<usize>,
    /// messageId → row index of the streaming answer.
    answers: HashMap<String, usize>,
    /// Whether an agent frame came since the last browser message: a plain message to the
    /// browser before any is the hub's own reply, whose not-connected tail is folded.
    agent_in_turn: bool,
}

/// `thinking` or `tool` for a note: its kind, else `→`-prefixed text reads as tool.
pub fn note_kind(data: &Value) -> &'static str {
    match data["kind"].as_str() {
        Some("tool") => "tool",
        Some("thinking") => "thinking",
        _ if data["text"]
            .as_str()
            .unwrap_or("")
            .trim_start()
            .starts_with('→') =>
        {
            "tool"
        }
        _ => "thinking",
    }
}

impl BridleRows {
    fn answer(&mut self, data: &Value, streaming: bool) {
        let id = data["messageId"].as_str().unwrap_or("").to_string();
        let text = data["text"].as_str().unwrap_or("");
        let parts = match data.get("parts") {
            Some(p @ Value::Array(_)) => p.clone(),
            _ => super::text_parts(text),
        };
        let row = json!({ "role": "assistant", "id": id, "text": text, "parts": parts,
                          "streaming": streaming });
        match self.answers.get(&id) {
            Some(&i) if !id.is_empty() => self.rows[i] = row,
            _ => {
                self.answers.insert(id, self.rows.len());
                self.rows.push(row);
            }
        }
    }
}

impl RowProjector for BridleRows {
    fn push(&mut self, ev: &Value) {
        let (Some(dir), Some(name)) = (ev["dir"].as_str(), ev["event"].as_str()) else {
            return;
        };
        let data = &ev["data"];
        match (dir, name) {
            ("http→hub", "message") => self.agent_in_turn = false,
            ("agent→hub", name) if !AGENT_HOUSEKEEPING.contains(&name) => {
                self.agent_in_turn = true
            }
            ("browser→hub", "message") => {
                self.agent_in_turn = false;
                let text = data["text"].as_str().unwrap_or("");
                self.rows.push(json!({
                    "role": "user",
                    "text": text,
                    "parts": super::parts_of(data),
                }));
            }
            ("hub→browser", "typing") => {
                self.turn_open = true;
                self.worklog = None;
            }
            ("hub→browser", "message") => {
                let is_note = data.get("kind").is_some_and(|k| !k.is_null()) || self.turn_open;
                if is_note {
                    let note = json!({ "kind": note_kind(data),
                                       "text": parts_text(&data["parts"])
                                           .filter(|t| !t.is_empty())
                                           .unwrap_or_else(|| data["text"].as_str().unwrap_or("").to_string()) });
                    match self.worklog {
                        Some(i) => {
                            if let Some(n) = self.rows[i]["notes"].as_array_mut() {
                                n.push(note);
                            }
                        }
                        None => {
                            self.worklog = Some(self.rows.len());
                            self.rows
                                .push(json!({ "role": "worklog", "notes": [note] }));
                        }
                    }
                } else if !self.agent_in_turn {
                    // The hub's own reply: its not-connected words past the spec's are its own.
                    let mut own = data.clone();
                    fold_not_connected(&mut own);
                    self.answer(&own, false);
                } else {
                    self.answer(data, false);
                }
            }
            ("hub→browser", "stream") => self.answer(data, true),
            ("hub→browser", "stream_end") => {
                self.answer(data, false);
                self.turn_open = false;
                self.worklog = None;
            }
            _ => {}
        }
    }

    fn finish(self: Box<Self>) -> Vec<Value> {
        self.rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(dir: &str, name: &str, data: Value) -> Value {
        json!({ "dir": dir, "event": name, "data": data })
    }

    #[test]
    fn rows_replace_streams_and_fold_notes() {
        let mut r: Box<dyn RowProjector> = Box::<BridleRows>::default();
        let t =
            |s: &str| json!({"text": s, "parts": [{"type": "text", "text": s}], "messageId": "m1"});
        for e in [
            ev("browser→hub", "message", json!({"text": "hi"})),
            ev("hub→browser", "typing", json!({})),
            ev(
                "hub→browser",
                "message",
                json!({"text": "pondering", "kind": "thinking"}),
            ),
            ev("hub→browser", "message", json!({"text": "→ searchWeb"})),
            ev("hub→browser", "stream", t("Hel")),
            ev("hub→browser", "stream", t("Hello")),
            ev("hub→browser", "stream_end", t("Hello!")),
            ev(
                "hub→browser",
                "message",
                json!({"text": "later", "messageId": "m2"}),
            ),
        ] {
            r.push(&e);
        }
        let rows = r.finish();
        assert_eq!(rows.len(), 4, "{rows:?}");
        assert_eq!(rows[0]["role"], "user");
        assert_eq!(
            rows[1],
            json!({"role": "worklog", "notes": [
                {"kind": "thinking", "text": "pondering"}, {"kind": "tool", "text": "→ searchWeb"}]})
        );
        assert_eq!(rows[2]["text"], "Hello!");
        assert_eq!(rows[2]["streaming"], false);
        assert_eq!(rows[3]["text"], "later");
    }

    /// Extensions leave the compared view, misused spec names stay; the not-connected text
    /// folds to the spec's words, with the parts that mirror it.
    /// Two interleavings of the same lanes fold to one list; an order within a lane stays.
    #[test]
    fn parity_compares_lanes_not_their_interleaving() {
        let e = |dir: &str, name: &str| json!({"dir": dir, "event": name, "data": {}});
        let h = |dir: &str, n: u32| json!({"dir": dir, "http": {"n": n}});
        let recorded = vec![
            e("agent→hub", "typing"),
            e("hub→browser", "typing"),
            e("agent→hub", "stream"),
            e("hub→browser", "stream"),
            h("http→hub", 1),
            h("hub→http", 1),
            h("http→hub", 2),
            h("hub→http", 2),
        ];
        let other = vec![
            e("agent→hub", "typing"),
            e("agent→hub", "stream"),
            h("http→hub", 1),
            e("hub→browser", "typing"),
            h("http→hub", 2),
            h("hub→http", 1),
            e("hub→browser", "stream"),
            h("hub→http", 2),
        ];
        let folded = BridleModel.fold_events(recorded);
        assert_eq!(folded, BridleModel.fold_events(other));
        let names: Vec<String> = folded
            .iter()
            .map(|v| format!("{} {}{}", v["dir"], v["event"], v["http"]["n"]))
            .collect();
        assert_eq!(
            names.join(", ").replace('"', ""),
            "agent→hub typingnull, agent→hub streamnull, hub→browser typingnull, \
             hub→browser streamnull, http→hub null1, hub→http null1, http→hub null2, hub→http null2"
        );
        let swapped = vec![e("hub→browser", "stream"), e("hub→browser", "typing")];
        assert_ne!(
            BridleModel.fold_events(swapped),
            BridleModel.fold_events(vec![e("hub→browser", "typing"), e("hub→browser", "stream")])
        );
    }

    #[test]
    fn parity_view_drops_extensions_and_folds_the_not_connected_tail() {
        let nc =
            |t: &str| json!({"type": "message", "text": t, "parts": [{"type": "text", "text": t}]});
        let view = BridleModel.normalize_events(vec![
            ev("hub→browser", "welcome", json!({"clientId": "u"})),
            ev("hub→browser", "status", json!({"agentConnected": false})),
            ev("hub→agent", "config", json!({})),
            ev("hub→browser", "streamEnd", json!({})),
            ev("hub→agent", "typing", json!({})),
            ev("browser→hub", "status", json!({})),
            ev(
                "hub→browser",
                "message",
                nc("Agent is not connected right now."),
            ),
        ]);
        let names: Vec<&str> = view.iter().map(|e| e["event"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["welcome", "streamEnd", "typing", "status", "message"]
        );
        let other = BridleModel.normalize_events(vec![ev(
            "hub→browser",
            "message",
            nc("Agent is not connected. Please try again later."),
        )]);
        assert_eq!(view[4], other[0]);
        assert_eq!(
            view[4]["data"]["parts"][0]["text"],
            "Agent is not connected…"
        );
        // Another text is left alone.
        let answer =
            BridleModel.normalize_events(vec![ev("hub→browser", "message", nc("Agent says hi"))]);
        assert_eq!(answer[0]["data"]["text"], "Agent says hi");
    }

    /// A hub event's fields beyond the ones the spec gives it are extensions: left out of the
    /// comparison and listed by `left_out`; the spec's fields still compare, and an event the
    /// spec does not give that side, or data that is not an object, is compared whole.
    #[test]
    fn hub_events_compare_the_spec_fields_and_list_the_others() {
        let plain = vec![
            ev("hub→browser", "welcome", json!({"clientId": "u"})),
            ev(
                "hub→agent",
                "message",
                json!({"type": "message", "clientId": "u", "agentId": "a", "text": "hi", "parts": [], "messageId": "m"}),
            ),
            ev(
                "hub→browser",
                "message",
                json!({"type": "message", "text": "t", "parts": [], "messageId": "n", "ts": 1, "kind": "thinking"}),
            ),
        ];
        let mut extended = plain.clone();
        extended[0]["data"]["hub"] = json!("py");
        extended[1]["data"]["source"] = json!("ws");
        extended[2]["data"]["agentId"] = json!("a");
        assert_eq!(
            event_extensions(&extended),
            ["welcome.hub", "message.source", "message.agentId"]
        );
        assert_eq!(
            BridleModel.normalize_events(plain.clone()),
            BridleModel.normalize_events(extended.clone())
        );
        assert_eq!(
            BridleModel.left_out(&extended),
            [
                "hub→agent field \"message.source\" ×1",
                "hub→browser field \"message.agentId\" ×1",
                "hub→browser field \"welcome.hub\" ×1",
            ]
        );
        // A field inside a part of a spec type is an extension too; a part of a type the spec
        // does not list is compared whole.
        let with_parts = |parts: Value| {
            vec![ev(
                "hub→browser",
                "stream",
                json!({"type": "stream", "text": "t", "parts": parts, "messageId": "n", "ts": 1}),
            )]
        };
        let spec = with_parts(json!([{"type": "text", "text": "t"}]));
        let extra = with_parts(json!([{"type": "text", "text": "t", "hubSeen": true}]));
        assert_eq!(
            BridleModel.normalize_events(spec.clone()),
            BridleModel.normalize_events(extra.clone())
        );
        assert_eq!(
            BridleModel.left_out(&extra),
            ["hub→browser field \"stream.parts[].hubSeen\" ×1"]
        );
        let odd = |x: Value| with_parts(json!([{"type": "video", "x": x}]));
        assert_ne!(
            BridleModel.normalize_events(odd(json!(1))),
            BridleModel.normalize_events(odd(json!(2)))
        );
        // The spec types ts as a number: a string ts differs from a number one.
        let mut texted = spec.clone();
        texted[0]["data"]["ts"] = json!("2026-12-04T10:00:00Z");
        assert_ne!(
            BridleModel.normalize_events(spec),
            BridleModel.normalize_events(texted)
        );
        // The kind a relayed note keeps is a spec field: a hub that drops it differs.
        let mut unmarked = plain.clone();
        unmarked[2]["data"].as_object_mut().unwrap().remove("kind");
        assert_ne!(
            BridleModel.normalize_events(plain.clone()),
            BridleModel.normalize_events(unmarked)
        );
        // An agent's frame is the recording's own (the player sends it): compared whole.
        let sent = vec![ev("agent→hub", "typing", json!({"clientId": "u", "x": 1}))];
        assert!(event_extensions(&sent).is_empty());
    }

    /// An HTTP answer's fields beyond the ones the spec gives that answer are extensions: left
    /// out of the comparison and listed; the spec's fields are still compared, and an answer
    /// the spec gives no shape (an error status, an unknown path) is compared whole.
    #[test]
    fn http_answers_compare_the_spec_fields_and_list_the_others() {
        let req = |method: &str, path: &str| json!({"dir": "http→hub", "http": {"method": method, "path": path, "body": null}});
        let ans = |status: u16, body: Value| json!({"dir": "hub→http", "http": {"status": status, "body": body}});
        let health =
            json!({"ok": true, "agentConnected": true, "browserClients": 1, "agentId": "a"});
        let mut extended = health.clone();
        extended["uptimeMs"] = json!(12);
        let list = |answer: Value| {
            vec![
                req("GET", "/api/agent/a/health?x=1"),
                answer,
                req("POST", "/api/agent/a/message"),
                ans(200, json!({"ok": true, "queued": true})),
                req("GET", "/api/agent/a/nothing"),
                ans(404, json!({"message": "no", "extra": 1})),
            ]
        };
        let plain = list(ans(200, health.clone()));
        let with_extras = list(ans(200, extended));
        assert_eq!(
            http_extensions(&with_extras),
            ["uptimeMs", "queued"],
            "the 404's body has no shape in the spec: none of its fields is an extension"
        );
        assert_eq!(
            BridleModel.normalize_events(plain.clone()),
            BridleModel.normalize_events(with_extras)
        );
        // A spec field that differs still differs.
        let mut miscount = health.clone();
        miscount["browserClients"] = json!(2);
        assert_ne!(
            BridleModel.normalize_events(plain.clone()),
            BridleModel.normalize_events(list(ans(200, miscount)))
        );
        // So does a missing one, and the body of an answer whose shape the spec does not give.
        let mut lacking = health;
        lacking.as_object_mut().unwrap().remove("browserClients");
        assert_ne!(
            BridleModel.normalize_events(plain.clone()),
            BridleModel.normalize_events(list(ans(200, lacking)))
        );
        let mut other_error = plain.clone();
        other_error[5] = ans(404, json!({"message": "no"}));
        assert_ne!(
            BridleModel.normalize_events(plain),
            BridleModel.normalize_events(other_error)
        );
    }

    /// Only the hub's own not-connected reply folds: an agent's answer in the turn that happens
    /// to begin with the same words is relayed text, so two hubs relaying different tails of it
    /// differ; the hub's own replies with different words still compare equal, also in a later
    /// turn after an agent answered.
    #[test]
    fn an_agent_answer_with_the_not_connected_words_is_not_folded() {
        let nc =
            |t: &str| json!({"type": "message", "text": t, "parts": [{"type": "text", "text": t}]});
        let raw = |relayed: &str, own: &str| {
            vec![
                ev("agent→hub", "register", json!({})),
                ev(
                    "browser→hub",
                    "message",
                    json!({"text": "is the agent up?"}),
                ),
                ev(
                    "agent→hub",
                    "message",
                    json!({"clientId": "u", "text": "Agent is not connected to the VPN, ask IT"}),
                ),
                ev("hub→browser", "message", nc(relayed)),
                ev("browser→hub", "message", json!({"text": "and now?"})),
                ev("hub→browser", "message", nc(own)),
            ]
        };
        let turn = |relayed: &str, own: &str| BridleModel.normalize_events(raw(relayed, own));
        let base = turn(
            "Agent is not connected to the VPN, ask IT",
            "Agent is not connected.",
        );
        let head = turn(
            "Agent is not connected to the VPN",
            "Agent is not connected right now, try later",
        );
        assert_eq!(
            base[3]["data"]["text"],
            "Agent is not connected to the VPN, ask IT"
        );
        assert_ne!(base[3], head[3], "the relayed answer's tail differs");
        assert_eq!(base[5], head[5], "the hub's own replies fold alike");
        assert_eq!(base[5]["data"]["text"], "Agent is not connected…");
        // Parity reports it: the cell fails on its events.
        let leg = |relayed: &str, own: &str| crate::parity::LegRun {
            events: raw(relayed, own),
            ..Default::default()
        };
        // Base leg relays `base_relayed`, head leg "…to the VPN"; their own replies differ.
        let compare = |base_relayed: &str| {
            crate::parity::compare_cell(
                "ref-hub/bot-1__u",
                &BridleModel,
                leg(base_relayed, "Agent is not connected."),
                leg(
                    "Agent is not connected to the VPN",
                    "Agent is not connected right now",
                ),
                &[],
                None,
            )
        };
        let cell = compare("Agent is not connected to the VPN, ask IT");
        assert_eq!(cell.outcome(), crate::parity::Outcome::Fail);
        assert!(!cell.events.is_empty(), "the events differ");
        // And so do the rows (the answer bubble), while the hub's own bubbles fold alike.
        let rows = |relayed: &str, own: &str| {
            let mut p: Box<dyn RowProjector> = Box::<BridleRows>::default();
            for e in raw(relayed, own) {
                p.push(&e);
            }
            BridleModel.normalize_rows(p.finish())
        };
        let (b, h) = (
            rows(
                "Agent is not connected to the VPN, ask IT",
                "Agent is not connected.",
            ),
            rows(
                "Agent is not connected to the VPN",
                "Agent is not connected right now",
            ),
        );
        assert_eq!(b.len(), 4, "{b:?}");
        assert_ne!(b[1], h[1]);
        assert_eq!(b[3], h[3]);
        assert_eq!(b[3]["text"], "Agent is not connected…");
        // The hub's own replies alone differing: equal.
        let cell = compare("Agent is not connected to the VPN");
        assert_eq!(cell.outcome(), crate::parity::Outcome::Pass);
    }

    #[test]
    fn grammar_drops_deltas_and_late_streams() {
        let mut g = Grammar::default();
        let d = |s: &str| json!({"text": s, "messageId": "m"});
        assert!(g.accept("hub→browser", "stream", &d("Hel")).is_ok());
        assert_eq!(
            g.accept("hub→browser", "stream", &d("lo"))
                .unwrap_err()
                .rule,
            "streaming-replace"
        );
        assert!(g.accept("hub→browser", "stream_end", &d("Hello")).is_ok());
        assert_eq!(
            g.accept("hub→browser", "stream", &d("Hello"))
                .unwrap_err()
                .rule,
            "stream-after-end"
        );
    }

    /// A cell the model assembles from entries given to it: it reads no lanes of its own.
    fn no_lanes() -> Cell {
        Cell {
            protocol: Protocol::Bridle,
            key: "p/c".into(),
            path: "/nonexistent".into(),
            lanes: vec![],
            current: vec![],
        }
    }

    /// A routing field beside a relayed event is an extension where it names the browser it
    /// reached (its welcome's clientId, the agentId its connect named) and compared where it
    /// names another; an agentId with no connect before it to judge it by is left out.
    #[test]
    fn routing_fields_naming_another_recipient_are_compared() {
        let typing = |extra: Value| {
            let mut data = json!({"type": "typing", "ts": 1});
            data.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            json!({"dir": "hub→browser", "event": "typing", "data": data})
        };
        let events = vec![
            typing(json!({"agentId": "b"})),
            json!({"dir": "browser→hub", "packet": "connect", "nsp": "/ws/client", "agentId": "a"}),
            json!({"dir": "hub→browser", "event": "welcome", "data": {"clientId": "u"}}),
            typing(json!({"agentId": "a", "clientId": "u"})),
            typing(json!({"agentId": "b"})),
            typing(json!({"clientId": "v"})),
        ];
        let foreign = names_another_recipient(&events);
        let f = |client_id, agent_id| Foreign {
            client_id,
            agent_id,
        };
        assert_eq!(
            foreign,
            [
                f(false, false),
                f(false, false),
                f(false, false),
                f(false, false),
                f(false, true),
                f(true, false)
            ]
        );
        let kept: Vec<Vec<String>> = BridleModel
            .normalize_events(events)
            .iter()
            .filter(|e| e["event"] == "typing")
            .map(|e| {
                let mut keys: Vec<String> =
                    e["data"].as_object().unwrap().keys().cloned().collect();
                keys.sort();
                keys
            })
            .collect();
        assert_eq!(
            kept,
            [
                vec!["ts", "type"],
                vec!["ts", "type"],
                vec!["agentId", "ts", "type"],
                vec!["clientId", "ts", "type"]
            ]
        );
        // The connect event names the agentId of its handshake, not its credentials.
        let connect = crate::lane::test_entries(&[(
            "browser→hub",
            r#"40/ws/client,{"token":"t","agentId":"a"}"#,
        )]);
        let ev = event_of(&connect[0]).unwrap().unwrap();
        assert_eq!(
            ev,
            json!({"dir": "browser→hub", "packet": "connect", "nsp": "/ws/client", "agentId": "a"})
        );
    }

    /// Two tabs of one user each get a message's whole stream: the recorded cell interleaves
    /// them, and only the connection each line was on (`conn`) keeps the second tab's
    /// stream_end from reading as a stream after the first tab's end. The live view's marks do
    /// the same in the view's grammar, and are not compared.
    #[test]
    fn each_tab_has_its_own_streams() {
        let cell = no_lanes();
        let frame = |name: &str, text: &str| {
            format!(r#"42/ws/client,["{name}",{{"text":"{text}","messageId":"m"}}]"#)
        };
        let lines = [
            ("hub→browser", frame("stream", "Hel")),
            ("hub→browser", frame("stream", "Hel")),
            ("hub→browser", frame("stream_end", "Hello")),
            ("hub→browser", frame("stream_end", "Hello")),
        ];
        let lines: Vec<(&str, &str)> = lines.iter().map(|(d, l)| (*d, l.as_str())).collect();
        let assembled = |conns: &[Option<u64>]| {
            let entries = crate::lane::test_entries_on(&lines, conns);
            let mut sink = crate::protocol::Collected::default();
            BridleModel.assemble(&cell, &mut entries.into_iter(), &mut sink);
            let drops: Vec<String> = sink.1.iter().map(GrammarDrop::layer_key).collect();
            (sink.0, drops)
        };
        let (kept, drops) = assembled(&[Some(1), Some(2), Some(1), Some(2)]);
        assert_eq!((kept.len(), drops.len()), (4, 0), "{drops:?}");
        // Not told apart: the second end follows the first.
        let (kept, drops) = assembled(&[None; 4]);
        assert_eq!(kept.len(), 3);
        assert_eq!(drops, ["stream-after-end:stream_end"]);
        // The live view, marked by connection: the same, without the marks.
        let view: Vec<Value> =
            crate::lane::test_entries_on(&lines, &[Some(1), Some(2), Some(1), Some(2)])
                .iter()
                .map(|e| {
                    let mut ev = event_of(e).unwrap().unwrap();
                    ev["conn"] = json!(e.conn());
                    ev
                })
                .collect();
        let (kept, drops) = grammar_pass(view);
        assert!(drops.is_empty(), "{drops:?}");
        assert_eq!(kept.len(), 4);
        assert!(kept.iter().all(|e| e.get("conn").is_none()), "{kept:?}");
    }

    /// What a browser or the agent sent that is no event is the hub's input: no event, no
    /// drop, not invalid. The same frames from the hub are its output, judged.
    #[test]
    fn frames_that_are_no_event_are_judged_only_from_the_hub() {
        let cell = no_lanes();
        let lines = [
            ("browser→hub", r#"42/ws/client,["message",{"text":"#),
            ("browser→hub", "9"),
            ("browser→hub", "binary:QUJD"),
            ("agent→hub", r#"42/ws/agent,[{"not":"a name"}]"#),
            ("browser→hub", r#"42/ws/client,["message",{"text":"ok"}]"#),
            ("hub→browser", r#"42/ws/client,["stream",{"text":"#),
            ("hub→browser", "binary:QUJD"),
        ];
        let mut entries = crate::lane::test_entries(&lines).into_iter();
        let mut sink = crate::protocol::Collected::default();
        BridleModel.assemble(&cell, &mut entries, &mut sink);
        assert_eq!(sink.0.len(), 1, "{:?}", sink.0);
        assert_eq!(sink.0[0]["data"]["text"], "ok");
        let drops: Vec<String> = sink.1.iter().map(GrammarDrop::layer_key).collect();
        assert_eq!(drops, ["binary-frame:binary"]);
        assert_eq!(sink.2.len(), 1, "{:?}", sink.2);
        assert!(
            sink.2[0].starts_with("hub→browser run 1 seq 5: invalid frame"),
            "{:?}",
            sink.2
        );
    }

    /// Only the hub-wide health answers lose their counts' values, each paired with its
    /// request in order.
    #[test]
    fn hub_wide_health_answers_are_seen_by_type() {
        let get = |path: &str| json!({"dir": "http→hub", "http": {"method": "GET", "path": path}});
        let answer = |connected: bool| {
            json!({"dir": "hub→http", "http": {"status": 200,
                "body": {"ok": true, "agentConnected": connected, "browserClients": 2}}})
        };
        let seen = hub_wide_counts_by_type(vec![
            get("/api/agent/health"),
            get("/api/agent/a1/health"),
            answer(true),
            answer(false),
            get("/api/agent/health/?x=1"),
            answer(false),
        ]);
        let body = |i: usize| seen[i]["http"]["body"].clone();
        assert_eq!(
            body(2),
            json!({"ok": true, "agentConnected": "<boolean>", "browserClients": "<number>"})
        );
        assert_eq!(
            body(3),
            json!({"ok": true, "agentConnected": false, "browserClients": 2})
        );
        assert_eq!(body(5)["agentConnected"], "<boolean>");
    }
}
