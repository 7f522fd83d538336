//! `replay bridle`: plays a recorded cell's browser and agent against a live hub and compares
//! what the hub sends now with what it sent then (normalized hub→browser events, the messages
//! it forwards to the agent, HTTP answers, and rows).
//!
//! The cells of one hub folder and agentId are played together ([`groups`]): the proxy files
//! an agent's own lines under `<agentId>__agent`, what it did for a browser under that
//! browser's cell, health probes under `__http`, so a browser's cell alone lacks when its agent
//! came and went. Their merged entries become one script, in `(run, seq)` order across the
//! cells, each step played by its cell's peer: the agent connects at its recorded connect
//! (else at the start) and leaves at its recorded end (a leave, or the close `1` the proxy
//! writes for a connection's end; without ends in the recording, after its last line when it
//! connects again); a browser connects at its recorded connect (else at the start), with the
//! recorded handshake and its token made again of the recorded kind ([`browser_auth`]), and its
//! connections follow one another: each ends where the browser left or closed it, or is
//! awaited to end where the hub ended it (compared as an event, [`hub_ended`]). Each cell is
//! judged on its own lines. A `browser→hub` event is sent by the replayed browser (a frame the
//! player has no event for, as recorded); a `hub→agent` message is awaited by the replayed
//! agent; an `agent→hub` event is sent by it (clientId rewritten to the live message's); a
//! `hub→browser` event is awaited (bounded) and collected; an `http→hub` request is sent
//! without waiting and its answer collected at the recorded `hub→http` line.
//!
//! After the script, the browser keeps listening until the hub is idle, so that events a hub
//! build sends beyond the recording are seen (and messages the agent got that no recorded
//! step awaited go to the cell of the browser they name): every recorded output arrived (the script awaited
//! each one), and the hub was quiet for an adaptive window measured from its own cadence as in
//! bb's player (`src/bb/player.rs`): 4× the longest of the last 16 gaps before its outputs, at
//! least 10 ms, at most the fixed window (`wait / 10`, 100–500 ms), counted from its last
//! output or the replay's last write, whichever is later. A gap runs from the later of the
//! hub's previous output and the replay's last write to the frame's arrival (read off the
//! socket, not when the script got to it), so the hub's reaction time to what the replay sent
//! counts too: an extra event would be a reaction to the script's last writes. `fixed_windows`
//! keeps the fixed window (the replay's timing before idle detection).

use super::model::{BridleModel, event_of};
use super::transport::{Options, Socket};
use super::{AGENT_NSP, CLIENT_NSP, sign_jwt};
use crate::cell::Cell;
use crate::protocol::Model;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct ReplayConfig {
    pub url: String,
    pub jwt_secret: String,
    pub api_key: String,
    pub wait: Duration,
    /// Wait the full quiet window after the script instead of ending it when the hub is idle.
    pub fixed_windows: bool,
}

/// The handshake a replayed browser sends for a recorded one (`None`: none recorded): the
/// recorded `auth` with its token made again ([`super::token::replay_token`]): of the kind
/// the recording names, its claims kept and its time claims moved by the time since it was
/// recorded. A token redacted without its kind is signed afresh for the cell's clientId, and
/// one the recorder could not verify is signed right: the recording's hub admitted either (a
/// refused one is not replayed, [`prepare`]).
fn browser_auth(
    recorded: Option<Value>,
    ts: f64,
    cfg: &ReplayConfig,
    client_id: &str,
    roles: &[&str],
    agent_id: &str,
) -> Result<Value, String> {
    use super::token::{SIGNED, UNVERIFIED, replay_token};
    let fresh = || {
        json!(sign_jwt(
            &cfg.jwt_secret,
            &replay_sub(client_id, roles),
            roles
        ))
    };
    let Some(mut auth) = recorded.filter(Value::is_object) else {
        return Ok(json!({ "token": fresh(), "agentId": agent_id }));
    };
    let Some(t) = auth.get("token").and_then(Value::as_str) else {
        return Ok(auth);
    };
    if t == crate::redact::REDACTED {
        auth["token"] = fresh();
        return Ok(auth);
    }
    // Not verified when recorded, but the hub admitted it (a refused one is not replayed).
    let t = match t.strip_suffix(UNVERIFIED) {
        Some(head) => format!("{head}{SIGNED}"),
        None => t.to_string(),
    };
    let shift = super::token::shift_secs(crate::util::now_ms(), ts);
    auth["token"] = json!(replay_token(&t, &cfg.jwt_secret, shift)?);
    Ok(auth)
}

/// The JWT sub the player signs for a cell's browser: its clientId, but for an ADMIN browser
/// (clientId `admin`) a sub of its own, as an admin user's token has ("clientId is set to
/// 'admin'" whatever the sub): a hub that forwards or routes it under its sub then shows a
/// clientId the recording's `admin` does not match, where a sub `admin` hid it.
fn replay_sub(client_id: &str, roles: &[&str]) -> String {
    if roles.contains(&"ADMIN") {
        format!("{client_id}-user")
    } else {
        client_id.to_string()
    }
}

/// The handshake a replayed agent sends for a recorded one (`None`: none recorded): the
/// recorded `auth` with its apiKey made again from the replay's key
/// ([`super::token::replay_api_key`]): the key for `[redacted]`, a wrong key of the recorded
/// kind for `[redacted:case]` and the like. One the recorder could not judge (it was not told
/// the key) and a key recorded in clear are the key where the recorded hub admitted the
/// connection (`refused` false), as recorded where it refused it (a refused one the recorder
/// could not judge is not played, [`agent_unplayed`]).
fn agent_auth(recorded: Option<Value>, refused: bool, cfg: &ReplayConfig) -> Option<Value> {
    let mut auth = recorded?;
    let Some(key) = auth.get("apiKey").and_then(Value::as_str) else {
        return Some(auth);
    };
    let made = if key.starts_with("[redacted") && key != super::token::UNVERIFIED {
        super::token::replay_api_key(key, &cfg.api_key)
    } else if refused {
        key.to_string()
    } else {
        cfg.api_key.clone()
    };
    auth["apiKey"] = json!(made);
    Some(auth)
}

/// Why an agent connection the recorded hub ended is not played (`None`: it is): one it
/// refused whose apiKey the recorder could not judge, so whether the hub refused a wrong key
/// or a right one for another reason is unknown.
fn agent_unplayed(auth: Option<&Value>, refused: bool) -> Option<String> {
    let key = auth?.get("apiKey")?.as_str()?;
    (refused && key == super::token::UNVERIFIED).then(|| {
        "an agent connection the hub refused is not replayed: its apiKey was recorded without \
         the hub's key (record bridle --api-key), so whether it was wrong is unknown"
            .to_string()
    })
}

/// The adaptive quiet window: `CADENCE_FACTOR` × the longest recent gap, at least `MIN_WINDOW`
/// (as bb's player).
const MIN_WINDOW: Duration = Duration::from_millis(10);
const CADENCE_FACTOR: u32 = 4;
const CADENCE_GAPS: usize = 16;

/// The fixed quiet window after the script.
pub fn fixed_quiet(wait: Duration) -> Duration {
    (wait / 10).clamp(Duration::from_millis(100), Duration::from_millis(500))
}

/// The hub's cadence as the replay sees it.
struct Cadence {
    /// The gaps before the hub's recent outputs.
    gaps: VecDeque<Duration>,
    /// The later of the hub's last output and the replay's last write.
    mark: Instant,
}

impl Cadence {
    fn new() -> Cadence {
        Cadence {
            gaps: VecDeque::with_capacity(CADENCE_GAPS),
            mark: Instant::now(),
        }
    }

    /// The replay sent something (an event, a request, a connect).
    fn wrote(&mut self) {
        self.mark = Instant::now();
    }

    /// A hub output read off its connection at `at`.
    fn arrived(&mut self, at: Option<Instant>) {
        let Some(at) = at else { return };
        if self.gaps.len() == CADENCE_GAPS {
            self.gaps.pop_front();
        }
        self.gaps.push_back(at.saturating_duration_since(self.mark));
        self.mark = self.mark.max(at);
    }

    /// The quiet window, at most `cap`.
    fn window(&self, cap: Duration) -> Duration {
        let longest = self.gaps.iter().max().copied().unwrap_or_default();
        (longest * CADENCE_FACTOR)
            .clamp(MIN_WINDOW, cap.max(MIN_WINDOW))
            .min(cap)
    }
}

/// A replayed cell's outcome.
#[derive(Debug)]
pub enum Outcome {
    Pass {
        events: usize,
        rows: usize,
        /// The live hub's extensions (events the spec does not list, left out of the
        /// comparison), by side and name with counts; empty when there were none.
        extensions: String,
        /// What was compared otherwise than in full, and why; empty when nothing was.
        note: String,
    },
    Fail(String),
    /// Nothing a browser did (agent-only or HTTP cells).
    NotReplayable(String),
}

enum Step {
    /// The browser's recorded CONNECT: a connection of the replayed browser, with the recorded
    /// handshake `auth` (its token made again by kind, [`browser_auth`]); `refused`: the hub
    /// ended it before sending it any event (a refusal the live hub may give at the handshake).
    BrowserConnect {
        ev: Value,
        auth: Option<Value>,
        ts: f64,
        refused: bool,
    },
    /// The browser ended its connection: its namespace leave (the packet, for the view) or its
    /// close (`None`: Engine.IO's `1`, no event in the view).
    BrowserLeave(Option<Value>),
    /// The hub ended the browser's connection (a DISCONNECT or CONNECT_ERROR packet, for the
    /// view, or its close `1`): awaited on the live connection and compared, as an event is.
    BrowserEnded(Option<Value>),
    /// A frame of the browser's the player has no event for (a malformed packet, an unknown
    /// packet type, a binary frame, an event without a name): sent as recorded, so the hub gets
    /// what it ended the recorded connection for.
    BrowserRaw(String),
    /// Another recorded packet on the browser's namespace (the hub's connect acknowledgement,
    /// a second end of a connection already ended), shown in the view as recorded.
    BrowserPacket(Value),
    /// Anything else recorded that the replay does not act on, shown in the view as recorded
    /// (inputs such as another namespace's packets), so both legs list the same kinds of lines.
    Echo(Value),
    BrowserSend(String, Value),
    /// An HTTP API request, sent without waiting (a `/message/sync` answers only after the
    /// agent steps that follow it), how long the recorded answer took (`None`: no answer
    /// recorded), and what that answer saw ([`registers_before_probes`]).
    HttpSend(Value, Option<Duration>, ProbeSaw),
    /// The oldest outstanding HTTP answer.
    HttpExpect,
    /// The next live hub→agent event with this name, and its recorded data (a `message` maps
    /// its recorded clientId to the live one).
    AgentExpect(String, Value),
    AgentSend(String, Value),
    /// The next live hub→browser event with this name (others are buffered for later steps).
    BrowserExpect(String),
    /// A hub→browser event the recorded hub sent after its message's `stream_end`, which the
    /// grammar drops as a client does (so it is in no recorded view): the live hub's is awaited
    /// briefly, and compared as a drop where it too came late, as an event where it came in
    /// its place.
    BrowserLate(String),
    /// The agent's recorded connect to its namespace: a connection of the replayed agent, with
    /// the recorded handshake `auth` (its apiKey made again by kind, [`agent_auth`]);
    /// `refused`: the hub ended it before sending it any event. `unplayed`: why the connection
    /// is not played (a refused one whose apiKey the recorder could not judge): its end is
    /// then shown as recorded, not compared.
    /// `conn`: the recorded connection ([`crate::lane::Entry::conn`]), which its end names.
    AgentConnect {
        ev: Value,
        auth: Option<Value>,
        refused: bool,
        unplayed: Option<String>,
        conn: Option<u64>,
    },
    /// The hub ended the recorded agent connection `conn` (a DISCONNECT or CONNECT_ERROR
    /// packet, for the view, or its close `1`; `None`: the recording does not say which, so the
    /// oldest still open, [`take_ended_agent`]): awaited on the live connection and compared
    /// as an event ([`agent_ended`]), as a browser's is; `refused`: before sending it any
    /// event; `compared`: false for a connection not played.
    AgentEnded {
        ev: Option<Value>,
        refused: bool,
        compared: bool,
        conn: Option<u64>,
    },
    /// Another agentId's agent is connected (`Some`: connects, registers and is settled by a
    /// pong, unless one is) or not (`None`: leaves) from here: the recording had one connected
    /// at the health probe or message that follows ([`Bystanders`]). Not in any cell's view; a
    /// message it gets is compared as one the recording lacks.
    Bystander(Option<String>),
    /// The browser steps that follow act on the cell's recorded browser connection `conn`
    /// (`None`: the recording does not say which, so one connection at a time): two tabs of one
    /// user share a cell, each played on its own socket ([`Party::select`]).
    Tab(Option<u64>),
    /// An agent connection ends here: its recorded end (its leave or a close, [`agent_end`]),
    /// or, in a recording without ends, after its last recorded line when another connection
    /// follows, the hub given the recorded gap to the next line (10 ms to the fixed quiet
    /// window) to notice before another socket acts. The recorded connection it names ends
    /// (`None`, a recording without `conn` or without ends: the oldest still open, a takeover's
    /// replaced agent, [`take_ended_agent`]).
    AgentClose(Duration, Option<u64>),
    /// The replayed agent waits this long before its next frame of a stream: the recorded gap
    /// ([`paced_streams`]).
    Pace(Duration),
}

impl Step {
    /// It acts on the browser connection [`Step::Tab`] selected.
    fn on_tab(&self) -> bool {
        matches!(
            self,
            Step::BrowserConnect { .. }
                | Step::BrowserLeave(_)
                | Step::BrowserEnded(_)
                | Step::BrowserRaw(_)
                | Step::BrowserSend(..)
                | Step::BrowserExpect(_)
                | Step::BrowserLate(_)
        )
    }
}

/// A browser line the replay sends as it is: one the player has no event for that is no
/// Engine.IO transport packet (the transport plays those itself: ping, pong, upgrade, noop).
fn is_raw(line: &str) -> bool {
    use super::wire::EioPacket;
    if line.starts_with("binary:") {
        return true;
    }
    match super::wire::decode_frame(line) {
        Err(_) => true,
        Ok((EioPacket::Message(_), _)) => true,
        Ok(_) => false,
    }
}

/// The WebSocket message a recorded raw line is sent as: a text frame, a `binary:` one, or a
/// message its connection ended inside of ([`super::wire::CUT_PREFIX`]) sent whole at the length
/// it declared (bounded by [`super::wsframe::MAX_MESSAGE`]), what came first and the rest filled
/// with spaces or zero bytes: the recorded hub saw its start and its length.
fn raw_message(line: &str) -> tokio_tungstenite::tungstenite::Message {
    use tokio_tungstenite::tungstenite::Message;
    let (declared, came) = match super::wire::parse_cut(line) {
        Some((n, came)) => (Some(n.min(super::wsframe::MAX_MESSAGE) as usize), came),
        None => (None, line),
    };
    match came.strip_prefix("binary:") {
        Some(b64) => {
            let mut bytes = crate::util::base64_decode(b64).unwrap_or_default();
            if let Some(n) = declared {
                bytes.resize(n.max(bytes.len()), 0);
            }
            Message::binary(bytes)
        }
        None => {
            let mut text = came.to_string();
            if let Some(n) = declared
                && n > text.len()
            {
                text.extend(std::iter::repeat_n(' ', n - text.len()));
            }
            Message::text(text)
        }
    }
}

/// What the hub's end of a browser connection is compared as (the recorded packet differs by
/// hub and is legal either way: refused at the handshake, or admitted and disconnected).
fn hub_ended() -> Value {
    json!({ "dir": "hub→browser", "ended": true })
}

/// What the hub's end of an agent connection is compared as (a refusal at the handshake, or an
/// admission and a disconnect: the spec says only that the connection "is rejected").
fn agent_ended() -> Value {
    json!({ "dir": "hub→agent", "ended": true })
}

/// What a recorded line of a peer's (a browser's, or an agent's) does to its connection: a
/// Socket.IO packet on the peer's namespace, or an Engine.IO close (`1`) from either side.
enum PeerLine {
    Connect(Option<Value>),
    Leave,
    Close,
    HubEnd,
    Event,
    Other,
}

/// A cell's browser connection as its lines go by: one is open (its end not seen yet), and the
/// hub sent it an event. [`prepare`] and [`script`] read a cell's connections alike through it.
#[derive(Default, Clone)]
struct Connection {
    open: bool,
    answered: bool,
}

/// What a recorded health answer says the hub had seen when it answered, for the lines logged
/// while it was in flight ([`registers_before_probes`]).
#[derive(Debug, Default, Clone, Copy)]
struct ProbeSaw {
    /// It said the agent was not connected (`agentConnected: false`).
    agent_gone: bool,
    /// An agent's probe (`/api/agent/:agentId/health`) counted every browser connection of the
    /// agentId open in the recording when it was sent (`browserClients`): a browser's leave
    /// logged while it was in flight was not seen yet.
    browsers_kept: bool,
}

/// What a browser line did to the cell's connection.
enum Transition {
    /// A connection opened; `overlapping`: another was still open (two tabs).
    Opened { overlapping: bool },
    /// The browser ended the open connection.
    Left,
    /// The hub ended the open connection; `refused`: before sending it any event.
    Ended { refused: bool },
    /// Nothing opened or ended.
    Kept,
}

impl Connection {
    fn next(&mut self, line: &PeerLine) -> Transition {
        match line {
            PeerLine::Connect(_) => {
                let overlapping = self.open;
                *self = Connection {
                    open: true,
                    answered: false,
                };
                Transition::Opened { overlapping }
            }
            PeerLine::Leave | PeerLine::Close if self.open => {
                self.open = false;
                Transition::Left
            }
            PeerLine::HubEnd if self.open => {
                self.open = false;
                Transition::Ended {
                    refused: !self.answered,
                }
            }
            PeerLine::Event => {
                self.answered = true;
                Transition::Kept
            }
            _ => Transition::Kept,
        }
    }
}

/// The replayed peers: a browser on the client namespace, an agent on the agent namespace.
#[derive(Clone, Copy)]
enum Peer {
    Browser,
    Agent,
}

fn peer_line(entry: &crate::lane::Entry, peer: Peer) -> PeerLine {
    let (out, nsp) = match peer {
        Peer::Browser => (["browser→hub", "hub→browser"], CLIENT_NSP),
        Peer::Agent => (["agent→hub", "hub→agent"], AGENT_NSP),
    };
    let from_peer = match entry.dir.as_str() {
        d if d == out[0] => true,
        d if d == out[1] => false,
        _ => return PeerLine::Other,
    };
    if entry.line.as_bytes() == super::proxy::CLOSE_LINE {
        return if from_peer {
            PeerLine::Close
        } else {
            PeerLine::HubEnd
        };
    }
    let Ok((_, Some(p))) = super::wire::decode_frame(&entry.line) else {
        return PeerLine::Other;
    };
    if p.nsp != nsp {
        return PeerLine::Other;
    }
    use super::wire::SioType;
    match (from_peer, p.kind) {
        (true, SioType::Connect) => PeerLine::Connect(p.data),
        (true, SioType::Disconnect) => PeerLine::Leave,
        (false, SioType::Disconnect | SioType::ConnectError) => PeerLine::HubEnd,
        (false, SioType::Event) => PeerLine::Event,
        _ => PeerLine::Other,
    }
}

/// What a recorded agent line does to the agent's connections ([`AgentReader::next`]).
enum AgentLine<T> {
    /// Not an agent line.
    NotAgent,
    /// A connection opened, with its handshake's `auth`.
    Connect(Option<Value>),
    /// An open connection ended, by the hub or by the agent: the connection's tag, and whether
    /// the hub sent it an event. Which one: the recorded connection the line names
    /// ([`crate::lane::Entry::conn`]); in a recording that does not say, the oldest (a
    /// takeover: the replaced agent's).
    End {
        by_hub: bool,
        conn: Option<(T, bool)>,
    },
    /// A close that ends the connection an end just ended (the close after a namespace end,
    /// or the other side's answering close).
    SameEnd,
    /// Anything else (events, acknowledgements, Engine.IO packets).
    Other,
}

/// A cell's agent lines read as connections, oldest first: the player's script and
/// [`bystanders`] read them alike. Each connection carries a tag (`T`: its connect step, or its
/// connect's place), whether the hub sent it an event, and its recorded connection number.
struct AgentReader<T> {
    open: VecDeque<OpenAgent<T>>,
    /// The last agent line was an end: whether it was a close (`1`), and from which side.
    prev_end: Option<(bool, bool)>,
}

impl<T> Default for AgentReader<T> {
    fn default() -> Self {
        AgentReader {
            open: VecDeque::new(),
            prev_end: None,
        }
    }
}

/// An agent connection [`AgentReader`] holds open.
struct OpenAgent<T> {
    tag: T,
    /// The hub sent it an event (a connection it ended before any was refused).
    answered: bool,
    conn: Option<u64>,
}

impl<T> AgentReader<T> {
    /// Where the open connection a line on recorded connection `conn` acts on is: the one with
    /// that number, or, in a recording that does not say (or names one not seen connecting),
    /// `fallback`.
    fn place(&self, conn: Option<u64>, fallback: usize) -> usize {
        conn.and_then(|c| self.open.iter().position(|o| o.conn == Some(c)))
            .unwrap_or(fallback)
    }

    /// Reads `entry`; a connect is tagged `tag`.
    fn next(&mut self, entry: &crate::lane::Entry, tag: T) -> AgentLine<T> {
        if !matches!(entry.dir.as_str(), "agent→hub" | "hub→agent") {
            return AgentLine::NotAgent;
        }
        let line = peer_line(entry, Peer::Agent);
        let is_close = entry.line.as_bytes() == super::proxy::CLOSE_LINE;
        let from_agent = entry.dir == "agent→hub";
        let end = matches!(line, PeerLine::Leave | PeerLine::Close | PeerLine::HubEnd);
        // A close after a namespace end, or after the other side's close (the WebSocket close
        // handshake), ends the same connection; two closes of one side end two.
        let same = match self.prev_end {
            Some((false, _)) => end && is_close,
            Some((true, side)) => end && is_close && side != from_agent,
            None => false,
        };
        self.prev_end = end.then_some((is_close, from_agent));
        if same {
            return AgentLine::SameEnd;
        }
        let conn = entry.conn();
        match line {
            PeerLine::Connect(auth) => {
                self.open.push_back(OpenAgent {
                    tag,
                    answered: false,
                    conn,
                });
                AgentLine::Connect(auth)
            }
            PeerLine::Event => {
                let at = self.place(conn, self.open.len().saturating_sub(1));
                if let Some(o) = self.open.get_mut(at) {
                    o.answered = true;
                }
                AgentLine::Other
            }
            PeerLine::HubEnd | PeerLine::Leave | PeerLine::Close => AgentLine::End {
                by_hub: matches!(line, PeerLine::HubEnd),
                conn: self
                    .open
                    .remove(self.place(conn, 0))
                    .map(|o| (o.tag, o.answered)),
            },
            PeerLine::Other => AgentLine::Other,
        }
    }
}

/// When each agentId had an agent connected in the recording, from the `__agent` cells of all
/// the cells replayed (by hub folder): a connection from its connect to its end, one the hub
/// refused (ended before sending it any event) left out. A group's health probe is asked with
/// another agentId's agent connected where the recording had one ([`Bystanders::present_at`]):
/// the groups are replayed apart, and a hub that answers `agentConnected` for any agent was
/// seen only with one there.
#[derive(Default)]
pub struct Bystanders {
    /// Hub folder, agentId, connected from, until (`None`: to the recording's end).
    spans: Vec<(
        String,
        String,
        crate::lane::SeqKey,
        Option<crate::lane::SeqKey>,
    )>,
    /// The hub folder and agentId of the group being scripted.
    folder: String,
    group: String,
}

/// Reads the agent connections of every `<agentId>__agent` cell of `cells`.
pub fn bystanders(cells: &[&Cell]) -> Bystanders {
    let mut spans = Vec::new();
    for cell in cells {
        let (folder, name) = cell.provider_and_name();
        let Some(agent_id) = name.strip_suffix("__agent") else {
            continue;
        };
        let mut reader: AgentReader<crate::lane::SeqKey> = AgentReader::default();
        for entry in cell.recorded() {
            if let AgentLine::End {
                by_hub,
                conn: Some((from, answered)),
            } = reader.next(&entry, entry.key())
                && (answered || !by_hub)
            {
                spans.push((
                    folder.to_string(),
                    agent_id.to_string(),
                    from,
                    Some(entry.key()),
                ));
            }
        }
        for o in reader.open {
            spans.push((folder.to_string(), agent_id.to_string(), o.tag, None));
        }
    }
    Bystanders {
        spans,
        folder: String::new(),
        group: String::new(),
    }
}

impl Bystanders {
    /// The same spans, for the group of `agent_id` in `folder`.
    fn for_group(&self, folder: &str, agent_id: &str) -> Bystanders {
        Bystanders {
            spans: self
                .spans
                .iter()
                .filter(|s| s.0 == folder)
                .cloned()
                .collect(),
            folder: folder.to_string(),
            group: agent_id.to_string(),
        }
    }

    /// An agentId other than `probed` whose agent was connected at `key` (the first such).
    fn present_at(&self, key: crate::lane::SeqKey, probed: &str) -> Option<String> {
        self.spans
            .iter()
            .filter(|s| s.0 == self.folder && s.1 != probed)
            .find(|(_, _, from, to)| *from <= key && to.is_none_or(|t| key < t))
            .map(|s| s.1.clone())
    }
}

/// The agentId a recorded `http→hub` request asks the health of (`GET /api/agent/<id>/health`).
fn health_probe(req: &Value) -> Option<String> {
    if req["method"].as_str().unwrap_or("GET") != "GET" {
        return None;
    }
    let path = req["path"].as_str()?.trim_end_matches('/');
    let id = path.strip_prefix("/api/agent/")?.strip_suffix("/health")?;
    (!id.is_empty() && !id.contains('/')).then(|| id.to_string())
}

/// Whether another agentId's agent matters at this recorded event, and which agentId is not
/// another's: a health probe (the probed agentId), a browser's message or an HTTP API message
/// (the group's agentId: the spec's "agentId … scopes all routing").
fn bystander_moment(ev: &Value, bystanders: &Bystanders) -> Option<String> {
    match (ev["dir"].as_str()?, ev["event"].as_str()) {
        ("http→hub", _) => {
            let req = &ev["http"];
            health_probe(req).or_else(|| {
                let post = req["method"].as_str() == Some("POST");
                let path = req["path"].as_str().unwrap_or("");
                (post && path.contains("/message")).then(|| bystanders.group.clone())
            })
        }
        ("browser→hub", Some("message")) => Some(bystanders.group.clone()),
        _ => None,
    }
}

/// A cell of a group, read: its lines, and what the replay needs to know before it starts.
struct Prepared {
    client_id: String,
    entries: Vec<crate::lane::Entry>,
    has_browser: bool,
    /// The browser's connect is recorded: its connection opens at that line, not at the start.
    connect_recorded: bool,
    /// It asks the hub's health, whose answers count browsers.
    probes_health: bool,
    /// It asks the hub-wide health (`GET /api/agent/health`: the proxy's `_hub__http`).
    hub_wide: bool,
    /// What the reader warned of (a cut last line: a recorder killed mid-write).
    warnings: Vec<String>,
}

/// The lines of a cell's lanes the reader cannot take (not JSON, not UTF-8, a wrong `dir`),
/// each naming file:line, and its warnings, read once (the player reads the cells it replays
/// itself, in [`prepare`]; this is for cells it does not replay).
pub fn read_report(cell: &Cell) -> (Vec<String>, Vec<String>) {
    let mut lines = cell.recorded();
    lines.by_ref().for_each(drop);
    let report = lines.into_report();
    (
        report.errors.iter().map(|e| e.to_string()).collect(),
        report.warnings.iter().map(|w| w.to_string()).collect(),
    )
}

/// Reads a cell for a replay: its lines, or why the player cannot replay it.
fn prepare(cell: &Cell) -> Result<Prepared, Unplayed> {
    let (_, name) = cell.provider_and_name();
    let Some((_, client_id)) = name.split_once("__") else {
        return Err(Unplayed::other(format!(
            "{name} is not an <agentId>__<clientId> cell"
        )));
    };
    let mut entries = Vec::new();
    let (mut has_browser, mut has_http, mut has_agent) = (false, false, false);
    let (mut probes_health, mut hub_wide) = (false, false);
    // The browser's connections in the cell, one after another: each ends (the browser's
    // leave or close, the hub's disconnect, refusal or close) before the next connects.
    let mut browser_connects = 0;
    let mut connections: HashMap<Option<u64>, Connection> = HashMap::new();
    let mut overlapping = false;
    // The open connection's token, when a replay cannot make it again (`[redacted]` without a
    // kind).
    let mut token_why: Option<String> = None;
    let mut refused_why: Option<String> = None;
    let mut lines = cell.recorded();
    for entry in lines.by_ref() {
        let line = peer_line(&entry, Peer::Browser);
        let connection = connections
            .entry(super::model::browser_conn(&entry))
            .or_default();
        match connection.next(&line) {
            Transition::Opened { overlapping: o } => {
                overlapping |= o;
                browser_connects += 1;
                if let PeerLine::Connect(auth) = &line {
                    token_why = replay_token_problem(auth.as_ref());
                }
            }
            Transition::Ended { refused: true } if refused_why.is_none() => {
                refused_why = token_why.take();
            }
            _ => {}
        }
        let Ok(Some(ev)) = event_of(&entry) else {
            entries.push(entry);
            continue;
        };
        match (entry.dir.as_str(), ev["event"].as_str()) {
            ("http→hub", _) => {
                has_http = true;
                let path = ev["http"]["path"].as_str().unwrap_or("");
                let get = ev["http"]["method"] == "GET";
                probes_health |= get && path.ends_with("/health");
                hub_wide |= get && path.trim_end_matches('/') == "/api/agent/health";
            }
            ("hub→http", _) => has_http = true,
            ("hub→agent" | "agent→hub", Some(_)) => has_agent = true,
            // An agent that only connected (and was refused) is replayed too: the refusal is
            // what the hub owes it.
            ("agent→hub", None) => {
                has_agent |= ev["nsp"] == AGENT_NSP && ev["packet"] == "connect"
            }
            ("browser→hub", Some(_)) => has_browser = true,
            _ => {}
        }
        entries.push(entry);
    }
    // Lines the reader cannot take: the cell is an error naming file:line (exit 2), as pins,
    // lanes and parity have it, not replayed with the line left out (which blamed the hub for
    // a frame the recording lost). A cut last line is a warning.
    let report = lines.into_report();
    let warnings: Vec<String> = report.warnings.iter().map(|w| w.to_string()).collect();
    if !report.errors.is_empty() {
        let errors: Vec<String> = report.errors.iter().map(|e| e.to_string()).collect();
        return Err(Unplayed {
            why: format!("unreadable recording: {}", errors.join("; ")),
            browsers: false,
            unreadable: true,
            warnings,
        });
    }
    // Two connections open at once (two tabs) are played each on its own socket when the
    // recording says which connection each line is on (`conn`); without it they cannot be
    // told apart line by line, so their events could only stall.
    if overlapping {
        return Err(Unplayed::browsers(format!(
            "{browser_connects} browser connections of {client_id:?} in this cell, some open at \
             once (two tabs): the recording does not say which connection a line is on \
             (recorded before bridgewire wrote `conn`), so the replay cannot play them apart"
        )));
    }
    // A refused connection is replayed with a token of the kind the recording names; a token
    // redacted without its kind cannot be sent again.
    if let Some(why) = refused_why {
        return Err(Unplayed::browsers(format!(
            "the hub refused a recorded browser connection of {client_id:?} before sending it \
             any event, and {why}"
        )));
    }
    // A browser that only connected (and was welcomed) is replayed too: its welcome is what
    // the hub owes it.
    has_browser |= browser_connects > 0;
    if !has_browser && !has_http && !has_agent {
        return Err(Unplayed::other(
            "no browser, agent or HTTP client in this cell".into(),
        ));
    }
    Ok(Prepared {
        client_id: client_id.to_string(),
        entries,
        has_browser,
        connect_recorded: browser_connects > 0,
        probes_health,
        hub_wide,
        warnings,
    })
}

/// Why the player cannot replay a cell, and whether the cell had browsers the hub counted
/// (left out, they change what the group's health probes are answered).
struct Unplayed {
    why: String,
    browsers: bool,
    /// Its lanes hold lines the reader cannot take: an error, not a skip.
    unreadable: bool,
    warnings: Vec<String>,
}

impl Unplayed {
    fn browsers(why: String) -> Unplayed {
        Unplayed {
            why,
            browsers: true,
            unreadable: false,
            warnings: Vec::new(),
        }
    }

    fn other(why: String) -> Unplayed {
        Unplayed {
            why,
            browsers: false,
            unreadable: false,
            warnings: Vec::new(),
        }
    }
}

/// Why a replay cannot send a token like the recorded handshake's again (`None`: it can): one
/// redacted without its kind, or recorded without the hub's JWT secret (whether its signature
/// was right is unknown).
fn replay_token_problem(auth: Option<&Value>) -> Option<String> {
    let token = auth?.get("token")?.as_str()?;
    if token == crate::redact::REDACTED {
        return Some(
            "its token was redacted without its kind (recorded before bridgewire kept it), so \
             a replay cannot send a token the hub refuses the same way"
                .into(),
        );
    }
    super::token::replay_token(token, "-", 0).err()
}

/// The cells of `cells` a replay plays together, as groups of indices in order: those of one
/// hub folder and agentId. The proxy files an agent's own lines (its connect, register, what
/// no browser caused) under `<agentId>__agent`, an HTTP client's under `<agentId>__http`, and
/// what a browser caused under that browser's cell: replayed alone, a browser's cell had an
/// agent the recording's did not (one started for it, never gone), so a reconnect cell that
/// recorded "Agent is not connected" stalled, and a health probe counted another hub's state.
pub fn groups(cells: &[&Cell]) -> Vec<Vec<usize>> {
    let mut out: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, c) in cells.iter().enumerate() {
        let (provider, name) = c.provider_and_name();
        let key = match name.split_once("__") {
            Some((agent, _)) => format!("{provider}/{agent}"),
            // Not a cell the player replays: alone, to be said so.
            None => format!("\u{0}{i}"),
        };
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(i),
            None => out.push((key, vec![i])),
        }
    }
    out.into_iter().map(|(_, g)| g).collect()
}

/// An HTTP answer on its way: when it came and what (its status and body, or an error), or
/// why none came within its bound.
type Answer = tokio::task::JoinHandle<(Option<Instant>, Result<Value, String>)>;

/// A cell's part in a group replay: its browser and what the replay saw for it.
struct Party {
    client_id: String,
    has_browser: bool,
    connect_recorded: bool,
    /// The browser connection browser steps act on ([`Step::Tab`]), and the cell's other
    /// connections (two tabs of one user).
    tab: Tab,
    parked: Vec<Tab>,
    /// The clientId the spec derives from the token the player signs ("from JWT sub, or
    /// 'admin' for admin users"), and the claims and roles it signed.
    want_client: String,
    claims: super::Claims,
    roles: &'static [&'static str],
    /// Hub outputs and HTTP requests in the recording (compared), now, and the whole view.
    recorded: Vec<Value>,
    live: Vec<Value>,
    view: Vec<Value>,
    pending: VecDeque<Answer>,
    /// The hub-wide cell (`_hub__http`: `GET /api/agent/health`).
    hub_wide: bool,
    /// One fault, one verdict: once an awaited hub→browser event did not come within the
    /// wait, the cell has its fault, and later awaited events are looked for only for the
    /// fixed quiet window (`wait / 10`, 100–500 ms), marked `notAwaited` when absent. A hub
    /// whose answers reach no browser otherwise cost one full wait per recorded event (21 × 15 s
    /// in one cell).
    stalled: bool,
    /// The first missing event's place in the view, its name and its connection: that
    /// connection's arrivals tell what ended the wait, for the verdict.
    first_stall: Option<(usize, String, Option<u64>)>,
    wrong: Vec<String>,
    /// When the replayed agent last sent each event name for this cell: an awaited relay of
    /// one that never came names the hub's silence, not only the wait that ran out.
    agent_sent: std::collections::HashMap<String, tokio::time::Instant>,
    /// The stream frames the replayed agent sent for this cell's browser, by messageId.
    agent_streams: HashMap<String, AgentStream>,
    /// The awaited `stream` relays the hub did not relay though the agent sent them (their
    /// place in `live`, their messageId, and whether the hub relayed the message's end without
    /// them): one fault, named once with its count.
    not_relayed: Vec<(usize, String, bool)>,
    /// Recorded events with no live entry (an extension the live hub did not send): the
    /// recorded event a step awaits is at `live.len()` plus these.
    unmatched: usize,
    /// How long before the first stall's wait ended the agent had sent the awaited event.
    stall_sent_ago: Option<Duration>,
    /// When the first stall's wait ended, and how many events its connection had brought by
    /// then: what came after tells a slow hub (the awaited event first, in its place) from one
    /// that sent it out of its place.
    stall_mark: Option<(Instant, usize)>,
    /// The recorded data of the event the first stall awaited: a later arrival equal to it is
    /// that event, late.
    stall_data: Option<Value>,
    /// What is left, after the first stall, of the one wait all later awaits of the cell share
    /// (each still at most the fixed quiet window): a cell costs about one wait after its
    /// fault, however many recorded events follow it.
    stall_budget: Duration,
    /// When a connection of this cell's (its browser, the agent on its step, its HTTP client)
    /// first found the hub gone (closed without a close, refused, reset): the cell a hub that
    /// exited exited during is the one that saw it first.
    closed_at: Option<Instant>,
    /// How many live outputs the cell had when [`Party::closed_at`] was set: a difference
    /// before them is the cell's own fault, not the hub's end's consequence.
    closed_live: usize,
    /// When the cell first waited in vain (an awaited event, forward or answer that did not
    /// come within its wait): a hub that stopped answering is named in the cell that met it
    /// first.
    stalled_at: Option<Instant>,
    /// A browser connection of the cell's the hub ended where the recording kept it open, no
    /// longer counted (the recording ended it since, or the cell connected again): why.
    lost_before: Option<String>,
    /// The hub refused the cell's browser connection, which the recording shows admitted: the
    /// cell's replay ended there, and a health answer that counts browsers does not count it.
    refused_live: bool,
    /// What was not played or compared, and why: said in a passing verdict.
    notes: Vec<String>,
    /// The cell's verdict when its replay ended early (its browser could not connect, the hub
    /// did not forward its message to the agent): its later steps are not played.
    ended: Option<Outcome>,
}

impl Party {
    fn new(p: &Prepared) -> Party {
        let roles: &'static [&'static str] = if p.client_id == "admin" {
            &["ADMIN"]
        } else {
            &[]
        };
        // Interned ids cannot show a hub that ignores the JWT (a random id, or `admin` for
        // everyone), so the welcome is judged against the id the player's own token gives.
        let claims = super::Claims {
            sub: replay_sub(&p.client_id, roles),
            roles: roles.iter().map(|r| r.to_string()).collect(),
            exp: None,
        };
        Party {
            want_client: claims.client_id(),
            client_id: p.client_id.clone(),
            has_browser: p.has_browser,
            connect_recorded: p.connect_recorded,
            hub_wide: p.hub_wide,
            tab: Tab::default(),
            parked: Vec::new(),
            claims,
            roles,
            recorded: Vec::new(),
            live: Vec::new(),
            view: Vec::new(),
            pending: VecDeque::new(),
            stalled: false,
            first_stall: None,
            wrong: Vec::new(),
            agent_sent: Default::default(),
            agent_streams: HashMap::new(),
            not_relayed: Vec::new(),
            unmatched: 0,
            stall_sent_ago: None,
            stall_mark: None,
            stall_data: None,
            stall_budget: Duration::ZERO,
            closed_at: None,
            closed_live: 0,
            stalled_at: None,
            lost_before: None,
            refused_live: false,
            notes: Vec::new(),
            ended: None,
        }
    }

    /// Makes the recorded browser connection `conn` the one browser steps act on (a new one
    /// starts with no socket).
    fn select(&mut self, conn: Option<u64>) {
        if conn == self.tab.conn {
            return;
        }
        let tab = match self.parked.iter().position(|t| t.conn == conn) {
            Some(k) => self.parked.swap_remove(k),
            None => Tab {
                conn,
                ..Tab::default()
            },
        };
        let old = std::mem::replace(&mut self.tab, tab);
        self.parked.push(old);
    }

    /// Every browser connection of the cell's, the one steps act on first.
    fn tabs_mut(&mut self) -> impl Iterator<Item = &mut Tab> {
        std::iter::once(&mut self.tab).chain(self.parked.iter_mut())
    }

    /// Opens a connection of the replayed browser with `auth`. A hub that refuses it at the
    /// handshake ends the cell's replay, unless the recording shows the hub refused it too
    /// (`refused`: its end is then awaited and found at once).
    async fn connect_browser(
        &mut self,
        cfg: &ReplayConfig,
        auth: Result<Value, String>,
        refused: bool,
        opts: &Options,
    ) {
        let auth = match auth {
            Ok(a) => a,
            Err(why) => {
                self.ended = Some(Outcome::NotReplayable(why));
                return;
            }
        };
        self.retire_lost();
        match Socket::connect(&cfg.url, CLIENT_NSP, Some(auth), opts).await {
            Ok(s) => self.tab.browser = Some(s),
            Err(_) if refused => self.tab.browser = None,
            Err(e) => {
                self.saw_close();
                self.refused_live = true;
                self.ended = Some(Outcome::Fail(format!(
                    "the replayed browser could not connect: {e}"
                )))
            }
        }
    }

    /// The browser leaves, if it is still connected: what arrived meanwhile is kept for later
    /// steps.
    async fn leave_browser(&mut self, cfg: &ReplayConfig, cadence: &mut Cadence) {
        self.retire_lost();
        let Some(mut b) = self.tab.browser.take() else {
            return;
        };
        if b.engine.is_closed() {
            return;
        }
        for e in leave(&mut b, cfg).await {
            cadence.arrived(b.engine.last_arrival());
            self.tab.admit(e);
        }
        cadence.wrote();
    }

    /// Waits for the hub to end the browser's connection, as the recording shows it did
    /// (a disconnect, a refusal, a close), keeping the events that come first for later steps;
    /// at most the wait (the fixed quiet window once the cell stalled).
    async fn await_hub_end(
        &mut self,
        cfg: &ReplayConfig,
        cadence: &mut Cadence,
    ) -> Result<(), String> {
        let wait = self.wait(cfg);
        let Some(b) = self.tab.browser.as_mut() else {
            return Ok(());
        };
        let start = Instant::now();
        let (events, ended) = read_to_end(b, wait, cadence).await;
        self.charge(start);
        let names: Vec<String> = events.iter().map(|e| e.name.clone()).collect();
        for e in events {
            self.tab.admit(e);
        }
        if ended {
            // Ended here as recorded: not a connection the recording kept open, however early
            // the close was read (a drain before this step may have seen it first).
            self.tab.browser = None;
            self.tab.lost = None;
            return Ok(());
        }
        self.stall(cfg);
        Err(end_missing("browser", "", wait, &names))
    }

    /// Waits for the hub to end the agent connection `a`, as the recording shows it did: at
    /// most the wait (the fixed quiet window once the cell stalled). What the hub sent it
    /// first is dropped (named in the stall: events it owed an agent it admitted).
    async fn await_agent_end(
        &mut self,
        a: &mut Socket,
        refused: bool,
        cfg: &ReplayConfig,
        cadence: &mut Cadence,
    ) -> Result<(), String> {
        let wait = self.wait(cfg);
        let start = Instant::now();
        let (events, ended) = read_to_end(a, wait, cadence).await;
        self.charge(start);
        if ended {
            return Ok(());
        }
        self.stall(cfg);
        let names: Vec<String> = events.into_iter().map(|e| e.name).collect();
        let when = if refused {
            " before sending it any event"
        } else {
            ""
        };
        Err(end_missing("agent", when, wait, &names))
    }

    /// How long an awaited output is waited for: the wait, or the fixed quiet window once the
    /// cell stalled (one fault, one verdict), while the stall budget lasts.
    fn wait(&self, cfg: &ReplayConfig) -> Duration {
        if self.stalled {
            fixed_quiet(cfg.wait).min(self.stall_budget)
        } else {
            cfg.wait
        }
    }

    /// A wait that began at `start` after the cell stalled is taken from the stall budget.
    fn charge(&mut self, start: Instant) {
        if self.stalled {
            self.stall_budget = self.stall_budget.saturating_sub(start.elapsed());
        }
    }

    /// The cell stalls (its first fault): later awaits share one wait from here.
    fn stall(&mut self, cfg: &ReplayConfig) {
        if !self.stalled {
            self.stalled = true;
            self.stall_budget = cfg.wait;
        }
    }

    /// A connection of this cell's found the hub gone: the first time is kept.
    fn saw_close(&mut self) {
        if self.closed_at.is_none() {
            self.closed_at = Some(Instant::now());
            self.closed_live = self.live.len();
        }
    }

    /// The cell waited in vain: the first time is kept.
    fn saw_stall(&mut self) {
        self.stalled_at.get_or_insert_with(Instant::now);
    }

    /// Reads what already arrived on every open browser connection of the cell (without
    /// waiting), keeping its events for later steps, so that a connection the hub ended is
    /// known as lost ([`Tab::lost`]) before a health answer that counts browsers is judged.
    async fn poll_browsers(&mut self) {
        for tab in self.tabs_mut() {
            let Some(b) = tab.browser.as_mut() else {
                continue;
            };
            loop {
                let until = Instant::now() + Duration::from_millis(1);
                match b.recv_until(until).await {
                    Ok(e) => {
                        let at = b.engine.last_arrival();
                        tab.buffered.extend(tab.arrivals.admit(e, at))
                    }
                    Err(e) => {
                        tab.note_end(&e);
                        break;
                    }
                }
            }
        }
    }

    /// The current connection ends in the recording too (or another replaces it): one the hub
    /// ended before is no longer one the recording counts, its reason kept for the verdict.
    fn retire_lost(&mut self) {
        if let Some(w) = self.tab.lost.take() {
            self.lost_before.get_or_insert(w);
        }
    }

    /// The browser connections of the cell the hub ended where the recording kept them open.
    fn lost(&self) -> usize {
        std::iter::once(&self.tab)
            .chain(&self.parked)
            .filter(|t| t.lost.is_some())
            .count()
    }
}

/// Reads `s` until the hub ends the connection (`true`) or `wait` passed: the events that
/// came first.
async fn read_to_end(
    s: &mut Socket,
    wait: Duration,
    cadence: &mut Cadence,
) -> (Vec<super::transport::Event>, bool) {
    use super::transport::RecvError;
    let deadline = Instant::now() + wait;
    let mut events = Vec::new();
    loop {
        match s.recv_until(deadline).await {
            Ok(e) => {
                cadence.arrived(s.engine.last_arrival());
                events.push(e);
            }
            Err(RecvError::Disconnected | RecvError::Closed(_)) => return (events, true),
            Err(RecvError::Invalid { .. }) => {}
            Err(RecvError::Timeout) => return (events, false),
        }
    }
}

/// The stall of a hub that kept a `peer`'s connection the recorded hub ended (`when`: how the
/// recording has it, after "ended it"), naming what it sent instead: events it owed a peer it
/// admitted, so not a slow hub.
fn end_missing(peer: &str, when: &str, wait: Duration, sent: &[String]) -> String {
    let kept = if sent.is_empty() {
        String::new()
    } else {
        format!(
            "{}it kept the connection and sent {}",
            crate::parity::NOT_SLOW,
            super::counted_names(sent.iter().map(String::as_str), true).join(" → ")
        )
    };
    format!(
        "the hub's end of the {peer}'s connection: none within {:.1} s (the recorded hub ended \
         it{when}){kept}",
        wait.as_secs_f64()
    )
}

/// Replays the cells of one hub folder and agentId together, on one hub, in their recorded
/// `(run, seq)` order across the cells (see [`groups`]): the agent connects where its connect
/// was recorded (else at the start, registering itself when no register was recorded) and an
/// agent connection is closed after its last recorded line when another follows; each browser
/// connects at its recorded connect (else at the start). One outcome per cell, in order;
/// `views[i]` gets cell `i`'s live view for parity, in the recorded leg's shape (what the
/// model assembles from a recording): every frame the replayed peers sent and received, in
/// script order, each hub output as it arrived now; pongs included at their recorded place
/// (awaited by name), events the recording lacks appended after quiescence.
pub async fn replay_group_into(
    cells: &[&Cell],
    cfg: &ReplayConfig,
    bystanders: &Bystanders,
    views: &mut [Vec<Value>],
) -> Vec<Outcome> {
    replay_group_traced(cells, cfg, bystanders, views)
        .await
        .into_iter()
        .map(|(o, _)| o)
        .collect()
}

/// [`replay_group_into`], each outcome with its [`Trace`]: a hub that exited is named in the
/// cell that saw it gone first, and the cells that saw it later are its consequence (unless
/// they had failed on their own before); a hub that stopped answering, in the cell that waited
/// in vain first.
pub async fn replay_group_traced(
    cells: &[&Cell],
    cfg: &ReplayConfig,
    bystanders: &Bystanders,
    views: &mut [Vec<Value>],
) -> Vec<(Outcome, Trace)> {
    let mut outcomes: Vec<Option<Outcome>> = cells.iter().map(|_| None).collect();
    let mut parties: Vec<Option<Party>> = Vec::new();
    let mut merged: Vec<(crate::lane::SeqKey, usize, crate::lane::Entry)> = Vec::new();
    let mut agent_id = String::new();
    let prepared: Vec<Result<Prepared, Unplayed>> = cells.iter().map(|c| prepare(c)).collect();
    let warnings: Vec<Vec<String>> = prepared
        .iter()
        .map(|p| match p {
            Ok(p) => p.warnings.clone(),
            Err(u) => u.warnings.clone(),
        })
        .collect();
    // A cell of the group that cannot be read is the error; the others are played with it
    // (their order and the hub's counts depend on it), so they are not replayed either.
    let bad: Vec<&str> = cells
        .iter()
        .zip(&prepared)
        .filter(|(_, p)| p.as_ref().is_err_and(|u| u.unreadable))
        .map(|(c, _)| c.key.as_str())
        .collect();
    if !bad.is_empty() {
        return prepared
            .into_iter()
            .zip(warnings)
            .map(|(p, warnings)| match p {
                Err(u) if u.unreadable => (
                    Outcome::Fail(u.why),
                    Trace {
                        unreadable: true,
                        warnings,
                        ..Trace::default()
                    },
                ),
                _ => (
                    Outcome::NotReplayable(format!(
                        "not replayed: it is replayed with {}, whose recording is unreadable",
                        bad.join(", ")
                    )),
                    Trace {
                        warnings,
                        ..Trace::default()
                    },
                ),
            })
            .collect();
    }
    // A browser cell not replayed leaves its browsers out of the hub: health answers that
    // counted them would differ for that alone, so a cell probing health is not replayed
    // either, naming the cell it depends on.
    let unplayed_browsers: Vec<String> = cells
        .iter()
        .zip(&prepared)
        .filter_map(|(c, p)| {
            let u = p.as_ref().err().filter(|u| u.browsers)?;
            let (_, name) = c.provider_and_name();
            let (_, client) = name.split_once("__")?;
            Some(format!("{client:?} ({})", u.why))
        })
        .collect();
    for (i, (cell, p)) in cells.iter().zip(prepared).enumerate() {
        let p = p.and_then(|p| match unplayed_browsers.first() {
            Some(other) if p.probes_health => Err(Unplayed::other(format!(
                "its health answers count the browsers of the cell of {other}, which is not \
                 replayed"
            ))),
            _ => Ok(p),
        });
        match p {
            Ok(p) => {
                let (_, name) = cell.provider_and_name();
                if let Some((a, _)) = name.split_once("__") {
                    agent_id = a.to_string();
                }
                parties.push(Some(Party::new(&p)));
                merged.extend(p.entries.into_iter().map(|e| (e.key(), i, e)));
            }
            Err(u) => {
                outcomes[i] = Some(Outcome::NotReplayable(u.why));
                parties.push(None);
            }
        }
    }
    // A stable sort: lines of one key keep their cell's order.
    merged.sort_by_key(|a| a.0);
    let folder = cells.first().map_or("", |c| c.provider_and_name().0);
    let Script {
        steps,
        recorded,
        registers,
        agent_connects,
    } = script(
        merged,
        cells.len(),
        cfg,
        &bystanders.for_group(folder, &agent_id),
    );
    for (p, r) in parties.iter_mut().zip(recorded) {
        if let Some(p) = p {
            p.recorded = r;
        }
    }
    let has_agent = steps.iter().any(|(_, s)| {
        matches!(
            s,
            Step::AgentSend(..)
                | Step::AgentExpect(..)
                | Step::AgentConnect { .. }
                | Step::AgentEnded { .. }
        )
    });
    let opts = Options {
        open_timeout: cfg.wait,
        ..Options::default()
    };
    let mut cadence = Cadence::new();
    // Events the replayed agent got before a step awaited them: kept for that step, not
    // dropped (a hub may send an extension such as `config` at connect, before the pong the
    // player waits for after register; dropped, the recorded `config` stalled every agent cell).
    let mut agent_early: VecDeque<super::transport::Event> = VecDeque::new();
    let agent_fail =
        |e: super::transport::ConnectError| format!("the replayed agent could not connect: {e}");
    let connect_agent = |auth: Option<Value>, opts: Options| {
        let url = cfg.url.clone();
        async move { Socket::connect(&url, AGENT_NSP, auth, &opts).await }
    };
    // Agent connections the recording shows refused that are not open now (the live hub
    // refused them at the handshake too, or they were not played): their ends are found at once.
    let mut agents_refused = 0usize;
    // Without a recorded connect (a cell recorded without its agent's own lane), the agent
    // connects at the start, as one already there when the browser came.
    let mut agent = None;
    // Agent connections still open that a newer one replaced, oldest first, each with its
    // recorded connection number, and the newest's (`agent`).
    let mut older_agents: VecDeque<(Option<u64>, Socket)> = VecDeque::new();
    let mut agent_conn: Option<u64> = None;
    // A ping the hub did not answer with a pong, to be said once ([`settle_register`]).
    let mut pong_note = PongNote::Unsaid;
    if has_agent && agent_connects == 0 {
        match connect_agent(Some(agent_handshake(cfg, &agent_id)), opts.clone()).await {
            Ok(s) => {
                // A cell that recorded the agent's own register sends it in its place.
                if !registers {
                    s.emit("register", json!({}));
                }
                // A pong after register: the hub handled it (events are ordered per socket).
                // Its round trip is the hub's first reaction time.
                cadence.wrote();
                agent = Some(s);
                let mut unsynced = true;
                if let Some(why) = settle_register(
                    &mut agent,
                    &mut unsynced,
                    cfg,
                    &mut agent_early,
                    &mut cadence,
                )
                .await
                {
                    pong_note.missing(why);
                }
            }
            Err(e) => return all_failed(cells, &outcomes, &parties, &agent_fail(e)),
        }
    }
    for p in parties.iter_mut().flatten() {
        if p.has_browser && !p.connect_recorded {
            let auth = browser_auth(None, 0.0, cfg, &p.client_id, p.roles, &agent_id);
            p.connect_browser(cfg, auth, false, &opts).await;
            cadence.wrote();
        }
    }
    let http = reqwest::Client::new();
    // The recorded clientIds of forwarded messages, mapped to the live ones the hub gave them
    // (an HTTP client's is made afresh per request; a hub may give a browser another).
    let mut live_clients: std::collections::HashMap<String, String> = Default::default();
    // The agent sent its recorded register and no pong has yet shown the hub handled it.
    let mut register_unsynced = false;
    // The other agentId's agent the recording had connected at a health probe or a message,
    // and the messages it got (routed to an agentId that was not theirs).
    let mut bystander: Option<Socket> = None;
    let mut strays: Vec<super::transport::Event> = Vec::new();
    for (i, step) in steps {
        if let Step::Bystander(other) = step {
            leave_bystander(&mut bystander, cfg, &mut strays).await;
            if let Some(id) = other {
                bystander = connect_bystander(cfg, &id, &opts).await;
                cadence.wrote();
            }
            continue;
        }
        if let Step::AgentClose(gap, conn) = step {
            if let Some(mut a) =
                take_ended_agent(&mut agent, &mut agent_conn, &mut older_agents, conn)
            {
                // What it got meanwhile stays with the agent's later steps (none, or a
                // hub that sent it something the recording shows after its last line).
                agent_early.extend(leave(&mut a, cfg).await);
                drop(a);
                tokio::time::sleep(gap).await;
            }
            continue;
        }
        // A health answer counts the group's browsers: the connections the hub ended where the
        // recording kept them open (found on every cell's browsers, without waiting), and those
        // it refused where the recording admitted them, are not counted by the hub, and are
        // judged in their own cells.
        let mut lost: Vec<String> = Vec::new();
        let mut refused: Vec<String> = Vec::new();
        if matches!(step, Step::HttpExpect) {
            // The answer first: the ends of connections the hub made before it answered are on
            // their way then, on other sockets. A count short of the recording waits for them
            // a moment (bounded) before the connections are read, so a loaded machine that
            // reads a close late does not turn the hub's right count into a difference.
            let mut short_by = 0;
            if let Some(p) = parties[i].as_mut()
                && let Some(t) = p.pending.pop_front()
            {
                let got = t.await.unwrap_or((None, Ok(Value::Null)));
                let count = |v: Option<&Value>, at: &str| {
                    v.and_then(|v| v.pointer(at)).and_then(Value::as_u64)
                };
                let recorded = count(p.recorded.get(p.live.len()), "/http/body/browserClients");
                let live = count(got.1.as_ref().ok(), "/body/browserClients");
                if let (Some(r), Some(l)) = (recorded, live) {
                    short_by = r.saturating_sub(l) as usize;
                }
                p.pending.push_front(tokio::spawn(async move { got }));
            }
            let deadline = Instant::now() + Duration::from_millis(500);
            loop {
                lost.clear();
                refused.clear();
                for (k, q) in parties.iter_mut().enumerate() {
                    let Some(q) = q.as_mut() else { continue };
                    q.poll_browsers().await;
                    lost.extend((0..q.lost()).map(|_| cells[k].key.clone()));
                    if q.refused_live {
                        refused.push(cells[k].key.clone());
                    }
                }
                if lost.len() + refused.len() >= short_by || Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let Some(p) = parties[i].as_mut().filter(|p| p.ended.is_none()) else {
            continue;
        };
        // Another socket is about to act on the hub: the agent's register comes first.
        let acts = matches!(
            step,
            Step::BrowserSend(..) | Step::HttpSend(..) | Step::BrowserConnect { .. }
        );
        if acts
            && let Some(why) = settle_register(
                &mut agent,
                &mut register_unsynced,
                cfg,
                &mut agent_early,
                &mut cadence,
            )
            .await
        {
            pong_note.missing(why);
        }
        // Said once for the group, in the first cell that acts after the wait (the wait is
        // the group's, not a fault of a cell: each is judged on what it saw).
        if let Some(why) = pong_note.say() {
            p.notes.push(why);
        }
        match step {
            Step::AgentClose(..) | Step::Bystander(_) => {}
            Step::Pace(gap) => tokio::time::sleep(gap).await,
            Step::Tab(conn) => p.select(conn),
            Step::AgentConnect {
                ev,
                auth,
                refused,
                unplayed,
                conn,
            } => {
                if let Some(why) = unplayed {
                    p.notes.push(why);
                    agents_refused += 1;
                } else {
                    let auth = agent_auth(auth, refused, cfg);
                    match connect_agent(auth, opts.clone()).await {
                        Ok(s) => {
                            cadence.wrote();
                            // Still open in the recording (a takeover): it ends at its own end.
                            let older = std::mem::replace(&mut agent_conn, conn);
                            older_agents.extend(agent.replace(s).map(|a| (older, a)));
                        }
                        // Refused at the handshake, as the recorded hub refused it.
                        Err(_) if refused => {
                            cadence.wrote();
                            agents_refused += 1;
                        }
                        Err(e) => return all_failed(cells, &outcomes, &parties, &agent_fail(e)),
                    }
                }
                p.view.push(ev);
            }
            Step::AgentEnded {
                ev,
                refused,
                compared,
                conn,
            } => {
                if refused && agents_refused > 0 {
                    agents_refused -= 1;
                    if compared {
                        p.live.push(agent_ended());
                    }
                    p.view.extend(ev);
                    continue;
                }
                let Some(mut a) =
                    take_ended_agent(&mut agent, &mut agent_conn, &mut older_agents, conn)
                else {
                    continue;
                };
                // What it got before its end is dropped: the recording shows no more lines of
                // this connection.
                match p.await_agent_end(&mut a, refused, cfg, &mut cadence).await {
                    Ok(()) => {
                        p.live.push(agent_ended());
                        p.view.extend(ev);
                    }
                    Err(m) => {
                        // The recording has it ended here: the replay ends it, so that later
                        // steps play with the connections the recording had.
                        leave(&mut a, cfg).await;
                        let missing = json!({ "dir": "hub→agent", "missing": m });
                        p.live.push(missing.clone());
                        p.view.push(missing);
                    }
                }
            }
            Step::BrowserConnect {
                ev,
                auth,
                ts,
                refused,
            } => {
                // The previous connection ended in the recording; one the live hub kept (it
                // did not end it as recorded) is left now, so that two never overlap.
                p.leave_browser(cfg, &mut cadence).await;
                let auth = browser_auth(auth, ts, cfg, &p.client_id, p.roles, &agent_id);
                p.connect_browser(cfg, auth, refused, &opts).await;
                cadence.wrote();
                p.view.push(ev);
            }
            Step::BrowserLeave(ev) => {
                p.leave_browser(cfg, &mut cadence).await;
                p.view.extend(ev);
            }
            Step::BrowserEnded(ev) => {
                let end = p.await_hub_end(cfg, &mut cadence).await;
                match end {
                    Ok(()) => {
                        p.live.push(hub_ended());
                        p.view.extend(ev);
                    }
                    Err(m) => {
                        // The recording has it ended here: the replay ends it, so that later
                        // steps play with the connections the recording had (a second tab's
                        // connect does not replace this one).
                        p.leave_browser(cfg, &mut cadence).await;
                        let missing = json!({ "dir": "hub→browser", "missing": m });
                        p.live.push(missing.clone());
                        p.view.push(missing);
                    }
                }
            }
            Step::BrowserRaw(line) => {
                p.tab.bad_input = true;
                if let Some(b) = p.tab.browser.as_ref() {
                    b.engine.send_raw(raw_message(&line));
                    cadence.wrote();
                }
            }
            Step::BrowserPacket(ev) => p.view.push(ev),
            Step::Echo(ev) => p.view.push(ev),
            Step::BrowserSend(n, d) => {
                p.tab.bad_input |= n == "message" && !d.is_object();
                if let Some(b) = p.tab.browser.as_ref() {
                    b.emit(&n, d.clone());
                    cadence.wrote();
                }
                p.view
                    .push(json!({ "dir": "browser→hub", "event": n, "data": d }));
            }
            Step::BrowserExpect(want) => {
                browser_expect(p, &want, cfg, &mut cadence).await;
            }
            Step::BrowserLate(want) => {
                browser_late(p, &want, cfg, &mut cadence).await;
            }
            Step::HttpSend(req, took, _) => {
                let sent = json!({ "dir": "http→hub", "http": req });
                p.live.push(sent.clone());
                p.view.push(sent);
                cadence.wrote();
                p.pending.push_back(http_send(&http, cfg, req, took));
            }
            Step::HttpExpect => {
                let got = match p.pending.pop_front() {
                    Some(t) => {
                        let (at, got) = t.await.unwrap_or((None, Ok(Value::Null)));
                        cadence.arrived(at);
                        got
                    }
                    None => Ok(Value::Null),
                };
                // No answer at all (the connection refused or reset): the hub may be gone.
                if got.as_ref().is_ok_and(|v| v.get("error").is_some()) {
                    p.saw_close();
                }
                if got.is_err() {
                    p.saw_stall();
                }
                let mut got = got;
                if let Ok(v) = got.as_mut() {
                    let recorded = p.recorded.get(p.live.len());
                    counted_as_recorded(v, recorded, &lost, &refused, &mut p.notes);
                }
                // An answer that did not come within its bound is a stall, as a browser event
                // that did not: not a difference of the answer.
                let ev = match got {
                    Ok(got) => json!({ "dir": "hub→http", "http": got }),
                    Err(m) => json!({ "dir": "hub→http", "missing": m }),
                };
                p.live.push(ev.clone());
                p.view.push(ev);
            }
            Step::AgentExpect(want, recorded) => {
                let Some(a) = agent.as_mut() else { continue };
                // An extension the hub sent the agent (not one of the spec's hub→agent
                // events) is not owed: looked for only for the fixed quiet window, and its
                // absence is no stall (extensions are listed, not compared).
                let spec = super::check_hub::TO_AGENT.contains(&want.as_str());
                let wait = if spec {
                    cfg.wait
                } else {
                    fixed_quiet(cfg.wait)
                };
                match agent_recv(a, &want, wait, &mut agent_early).await {
                    Ok(m) => {
                        cadence.arrived(a.engine.last_arrival());
                        if want == "message"
                            && let (Some(r), Some(l)) =
                                (recorded["clientId"].as_str(), m.data["clientId"].as_str())
                        {
                            live_clients.insert(r.to_string(), l.to_string());
                            // This browser's own message (recorded under the clientId its
                            // welcome gave) forwarded under another: the agent's answers are
                            // addressed by it ("All messages between hub and agent include
                            // clientId"). A wrong welcome is the first fault, said already.
                            if r == p.client_id && l != p.want_client && p.wrong.is_empty() {
                                let m = format!(
                                    "the hub forwarded this browser's message to the agent under clientId {l:?}, not {:?}, the clientId it welcomed it with (the JWT's sub is {:?}; the spec: \"'admin' for admin users\", and \"All messages between hub and agent include clientId\")",
                                    p.want_client, p.claims.sub
                                );
                                p.wrong.push(m.clone());
                                p.view.push(json!({ "dir": "hub→agent", "wrong": m }));
                            }
                        }
                        if want == "message" {
                            p.live.push(forwarded(&recorded, &m.data));
                        }
                        p.view
                            .push(json!({ "dir": "hub→agent", "event": want, "data": m.data }));
                    }
                    Err(e) if want == "message" => {
                        if matches!(e, super::transport::RecvError::Closed(_)) {
                            p.saw_close();
                        }
                        if matches!(e, super::transport::RecvError::Timeout) {
                            p.saw_stall();
                        }
                        p.ended = Some(Outcome::Fail(format!(
                            "the hub did not forward a recorded message to the agent: {e}"
                        )));
                    }
                    Err(_) if !spec => {}
                    Err(e) => {
                        if matches!(e, super::transport::RecvError::Closed(_)) {
                            p.saw_close();
                        }
                        let ev = json!({ "dir": "hub→agent", "missing": format!("{want}: {e}") });
                        p.live.push(ev.clone());
                        p.view.push(ev);
                    }
                }
            }
            Step::AgentSend(n, mut d) => {
                if let Some(a) = agent.as_mut() {
                    if let Some(c) = d["clientId"].as_str() {
                        let live = live_clients.get(c).cloned();
                        // A browser's own cell names it by its clientId as recorded.
                        d["clientId"] = json!(live.unwrap_or_else(|| c.to_string()));
                    }
                    a.emit(&n, d.clone());
                    cadence.wrote();
                    p.agent_sent.insert(n.clone(), tokio::time::Instant::now());
                    if let Some(m) = d["messageId"].as_str() {
                        let s = p.agent_streams.entry(m.to_string()).or_default();
                        let now = Instant::now();
                        match n.as_str() {
                            "stream" => s.frames.push((text_of(&d), now)),
                            "stream_end" => s.end = Some(now),
                            _ => {}
                        }
                    }
                    register_unsynced |= n == "register";
                }
                p.view
                    .push(json!({ "dir": "agent→hub", "event": n, "data": d }));
            }
        }
    }
    // Quiescence: whatever else the hub sends (bounded), after everything recorded was seen,
    // is part of what this build does and the recording did not. Idle: quiet for the adaptive
    // window since its last output or the replay's last write (see the module doc).
    for p in parties.iter_mut().flatten().filter(|p| p.ended.is_none()) {
        for tab in p.tabs_mut() {
            quiesce(tab, cfg, &mut cadence).await;
        }
    }
    // Messages the hub sent the agent that no recorded step awaited: the recording's agent got
    // none of them (a hub that forwards what it should drop, or sends one twice). Read until
    // the agent is quiet too; each goes to the cell of the browser it names (else the agent's
    // own cell), an event the recording lacks.
    let mut extra: Vec<super::transport::Event> = agent_early
        .drain(..)
        .filter(|e| e.name == "message")
        .collect();
    if let Some(a) = agent.as_mut() {
        let until = Instant::now() + cadence.window(fixed_quiet(cfg.wait));
        while let Ok(e) = a.recv_until(until).await {
            if e.name == "message" {
                extra.push(e);
            }
        }
    }
    leave_bystander(&mut bystander, cfg, &mut strays).await;
    let extra = extra
        .into_iter()
        .map(|e| (e, false))
        .chain(strays.into_iter().map(|e| (e, true)));
    for (e, stray) in extra {
        let named = e.data["clientId"].as_str().map(|live| {
            live_clients
                .iter()
                .find(|(_, l)| *l == live)
                .map_or(live, |(recorded, _)| recorded.as_str())
                .to_string()
        });
        let open = |p: &&mut Party| p.ended.is_none();
        let cell = parties
            .iter_mut()
            .flatten()
            .filter(open)
            .find(|p| named.as_deref() == Some(p.client_id.as_str()));
        let cell = match cell {
            Some(p) => Some(p),
            None => parties
                .iter_mut()
                .flatten()
                .filter(open)
                .find(|p| p.client_id == "agent"),
        };
        if let Some(p) = cell {
            let mut ev = json!({ "dir": "hub→agent", "event": "message", "data": e.data });
            if stray {
                ev["to"] = json!("another agentId's agent");
            }
            p.live.push(ev.clone());
            p.view.push(ev);
        }
    }
    drop(agent);
    let mut traces: Vec<Trace> = (0..cells.len()).map(|_| Trace::default()).collect();
    for (i, party) in parties.into_iter().enumerate() {
        let Some(mut p) = party else { continue };
        // A connection the hub ended found only at the end (quiescence): the hub gone, as
        // one found on a step.
        if p.lost() > 0 || p.lost_before.is_some() {
            p.saw_close();
        }
        traces[i] = Trace {
            closed: p.closed_at.map(Instant::into_std),
            stalled: p.stalled_at.map(Instant::into_std),
            own_before_close: p.closed_at.is_some() && !p.hub_wide && {
                let n = p.closed_live.min(p.live.len());
                let r = &p.recorded[..n.min(p.recorded.len())];
                matches!(compare(r, &p.live[..n]), Outcome::Fail(_))
            },
            ..Trace::default()
        };
        outcomes[i] = Some(p.finish(&mut views[i]));
    }
    for (t, w) in traces.iter_mut().zip(warnings) {
        t.warnings = w;
    }
    outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Outcome::Fail("no replay".into())))
        .zip(traces)
        .collect()
}

/// When a replayed cell met what it met, for naming one fault once across a group's cells.
#[derive(Debug, Default, Clone)]
pub struct Trace {
    /// When a connection of its cell's first found the hub gone (closed without a close,
    /// refused, reset, or a browser connection the hub ended that the recording kept open).
    pub closed: Option<std::time::Instant>,
    /// When it first waited in vain for the hub (an event, a forward, an answer).
    pub stalled: Option<std::time::Instant>,
    /// What it got before [`Trace::closed`] already differed from the recording: its own
    /// fault, kept in its verdict, not reworded as the consequence of the hub's end.
    pub own_before_close: bool,
    /// Its recording has lines the reader cannot take: its failure is an error (exit 2).
    pub unreadable: bool,
    /// What the reader warned of in its lanes.
    pub warnings: Vec<String>,
}

/// A health answer whose `browserClients` is below the recorded count by no more than the
/// group's browser connections the hub ended where the recording kept them open (`lost`, their
/// cells; a hub may not have noticed each yet) and those it refused where the recording
/// admitted them (`refused`, their cells): those connections' fault, judged in their own
/// cells, not this answer's; the count is taken as recorded and said in `notes`. A count they
/// do not account for stays a difference (a hub that counts wrong).
fn counted_as_recorded(
    answer: &mut Value,
    recorded: Option<&Value>,
    lost: &[String],
    refused: &[String],
    notes: &mut Vec<String>,
) {
    let Some(r) = recorded
        .filter(|r| r["dir"] == "hub→http")
        .and_then(|r| r.pointer("/http/body/browserClients"))
        .and_then(Value::as_u64)
    else {
        return;
    };
    let Some(l) = answer
        .pointer("/body/browserClients")
        .and_then(Value::as_u64)
    else {
        return;
    };
    let uncounted = (lost.len() + refused.len()) as u64;
    if uncounted == 0 || l >= r || l + uncounted < r {
        return;
    }
    answer["body"]["browserClients"] = json!(r);
    let cells = |c: &[String]| {
        let mut c = c.to_vec();
        c.dedup();
        c.join(", ")
    };
    let mut why = Vec::new();
    if !lost.is_empty() {
        why.push(format!(
            "the hub had ended the browser connection of {} that the recording kept open",
            cells(lost)
        ));
    }
    if !refused.is_empty() {
        why.push(format!(
            "the hub had refused the browser connection of {} that the recording shows admitted",
            cells(refused)
        ));
    }
    notes.push(format!(
        "a health answer counted {l} browser(s) where the recording counted {r}: {}, judged in \
         that cell",
        why.join("; ")
    ));
}

/// The handshake of an agent the recording has none for: the replay's key and `agent_id`.
fn agent_handshake(cfg: &ReplayConfig, agent_id: &str) -> Value {
    json!({ "apiKey": cfg.api_key, "agentId": agent_id })
}

/// Another agentId's agent, connected and registered (a pong says the hub handled the
/// register), for a health probe or a message the recording had it there for
/// ([`Bystanders`]); `None` when the hub did not admit it within the wait (the step is played
/// without it).
async fn connect_bystander(cfg: &ReplayConfig, agent_id: &str, opts: &Options) -> Option<Socket> {
    let auth = agent_handshake(cfg, agent_id);
    let mut s = Socket::connect(&cfg.url, AGENT_NSP, Some(auth), opts)
        .await
        .ok()?;
    s.emit("register", json!({}));
    s.emit("ping", json!({}));
    let mut early = VecDeque::new();
    agent_recv(&mut s, "pong", cfg.wait, &mut early)
        .await
        .ok()?;
    Some(s)
}

/// The other agentId's agent leaves, if one is connected: the messages it got (routed to an
/// agentId not theirs) go to `strays`.
async fn leave_bystander(
    bystander: &mut Option<Socket>,
    cfg: &ReplayConfig,
    strays: &mut Vec<super::transport::Event>,
) {
    if let Some(mut b) = bystander.take() {
        let got = leave(&mut b, cfg).await;
        strays.extend(got.into_iter().filter(|e| e.name == "message"));
    }
}

/// The group's note that the hub left the agent's ping unanswered ([`settle_register`]): said
/// once, in the first cell that acts after the wait.
enum PongNote {
    /// No wait for the pong has run out yet.
    Unsaid,
    /// A wait ran out: the note, for the next cell that acts.
    Pending(String),
    /// Said; later waits that run out are not said again.
    Said,
}

impl PongNote {
    /// A wait for the pong ran out (`why`): kept to be said unless already said.
    fn missing(&mut self, why: String) {
        if !matches!(self, PongNote::Said) {
            *self = PongNote::Pending(why);
        }
    }

    /// The note to say now, if one is pending; it is then said.
    fn say(&mut self) -> Option<String> {
        match std::mem::replace(self, PongNote::Said) {
            PongNote::Pending(why) => Some(why),
            PongNote::Unsaid => {
                *self = PongNote::Unsaid;
                None
            }
            PongNote::Said => None,
        }
    }
}

/// The agent's recorded register must have been handled before another socket acts on the
/// hub (a browser's message that should reach the agent, a health probe that should see it, a
/// browser told whether it is connected), and that socket is unordered with the agent's: a
/// pong on the agent's socket says so (as at connect). Without it a loaded hub answered "not
/// connected" when idle detection sent sooner than the fixed window would. Here, not at the
/// register, so that what the recording awaited from the hub after the register was read.
/// Returns what to say when no pong came: the replay waited the whole wait for it and went on
/// (a hub without the spec's pong, which `check bridle hub` judges as ping-pong).
async fn settle_register(
    agent: &mut Option<Socket>,
    unsynced: &mut bool,
    cfg: &ReplayConfig,
    early: &mut VecDeque<super::transport::Event>,
    cadence: &mut Cadence,
) -> Option<String> {
    if !*unsynced {
        return None;
    }
    *unsynced = false;
    let a = agent.as_mut()?;
    a.emit("ping", json!({}));
    if agent_recv(a, "pong", cfg.wait, early).await.is_ok() {
        cadence.arrived(a.engine.last_arrival());
        return None;
    }
    Some(format!(
        "the hub did not answer the agent's ping within {:?} (no pong, which check bridle hub \
         judges as ping-pong): the replay waited that long to learn the agent's register was \
         handled, then went on",
        cfg.wait
    ))
}

/// The live agent connection played for the recorded connection `conn` whose end comes next,
/// taken out of the open ones (`agent`, the newest, numbered `agent_conn`; `older`, oldest
/// first). Without `conn` (a recording that does not say which), the oldest still open: a
/// takeover's replaced agent. `None`: that connection is not open live (refused at the
/// handshake, or not played), so no other one is ended for it. When the newest ends while
/// older ones stay open, the newest of those carries the agent's later steps.
fn take_ended_agent<S>(
    agent: &mut Option<S>,
    agent_conn: &mut Option<u64>,
    older: &mut VecDeque<(Option<u64>, S)>,
    conn: Option<u64>,
) -> Option<S> {
    // Which one: the newest (`None`) or the older one at a place.
    let older_at = |pick: &dyn Fn(&Option<u64>) -> bool| older.iter().position(|(o, _)| pick(o));
    let which = match conn {
        None if older.is_empty() => None,
        None => Some(0),
        Some(c) if agent.is_some() && *agent_conn == Some(c) => None,
        // A connection played without a recorded connect (the agent connected at the start)
        // has no number: a recorded end no open connection is numbered for is its.
        Some(c) => match older_at(&|o| *o == Some(c)).or_else(|| older_at(&Option::is_none)) {
            Some(k) => Some(k),
            None if agent.is_some() && agent_conn.is_none() => None,
            None => return None,
        },
    };
    if let Some(k) = which {
        return older.remove(k).map(|(_, s)| s);
    }
    let newest = agent.take();
    *agent_conn = None;
    if newest.is_some()
        && let Some((c, a)) = older.pop_back()
    {
        *agent = Some(a);
        *agent_conn = c;
    }
    newest
}

/// A replayed peer leaves: it leaves its namespace, then asks the server to close the
/// connection (Engine.IO `1`) and waits until it did, at most the fixed quiet window. A server
/// handles a connection's packets in order, so once it closed the connection it had handled
/// the leave too: a health probe sent right after on another connection counted a browser (or
/// an agent) that had left when the replay only sent the leave.
/// What arrived meanwhile (sent before the server handled the leave) is returned, not lost.
async fn leave(s: &mut Socket, cfg: &ReplayConfig) -> Vec<super::transport::Event> {
    use super::transport::RecvError;
    s.disconnect();
    s.engine.send_text("1");
    let until = Instant::now() + fixed_quiet(cfg.wait);
    let mut kept = Vec::new();
    loop {
        match s.recv_until(until).await {
            Ok(e) => kept.push(e),
            Err(RecvError::Timeout | RecvError::Closed(_)) => break kept,
            Err(_) => {}
        }
    }
}

/// Every cell of a group failed alike (its agent could not connect), but those not replayed.
/// Every cell failed for `why` (the replayed agent could not connect): each with when it found
/// the hub gone, its own earlier moment where it had one, else now (a hub that exited refuses
/// the connection).
fn all_failed(
    cells: &[&Cell],
    outcomes: &[Option<Outcome>],
    parties: &[Option<Party>],
    why: &str,
) -> Vec<(Outcome, Trace)> {
    let now = std::time::Instant::now();
    (0..cells.len())
        .map(|i| match &outcomes[i] {
            Some(Outcome::NotReplayable(r)) => {
                (Outcome::NotReplayable(r.clone()), Trace::default())
            }
            _ => {
                let seen = parties.get(i).and_then(|p| p.as_ref()?.closed_at);
                let trace = Trace {
                    closed: Some(seen.map_or(now, Instant::into_std)),
                    ..Trace::default()
                };
                (Outcome::Fail(why.to_string()), trace)
            }
        })
        .collect()
}

/// A group's merged lines as steps to play.
struct Script {
    /// Each step with its cell.
    steps: Vec<(usize, Step)>,
    /// Per cell, what the recording compares: hub→browser events, HTTP requests and answers.
    recorded: Vec<Vec<Value>>,
    /// An agent register was recorded.
    registers: bool,
    /// Agent connects recorded.
    agent_connects: usize,
}

/// The group's merged lines as a script of steps, each with its cell.
fn script(
    merged: Vec<(crate::lane::SeqKey, usize, crate::lane::Entry)>,
    cells: usize,
    cfg: &ReplayConfig,
    bystanders: &Bystanders,
) -> Script {
    let mut steps: Vec<(usize, Step)> = Vec::new();
    let mut ts: Vec<f64> = Vec::new();
    let mut recorded: Vec<Vec<Value>> = vec![Vec::new(); cells];
    // Per cell, the grammar over its browsers' recorded events ([`Step::BrowserLate`]).
    let mut order: Vec<super::model::Grammar> = (0..cells).map(|_| Default::default()).collect();
    // Per cell, the recorded browser connection its last browser step acted on ([`Step::Tab`]).
    let mut tab: Vec<Option<u64>> = vec![None; cells];
    let mut registers = false;
    // Per cell, the recorded HTTP requests not answered yet (their step and send time), oldest
    // first: answers come in that order (`HttpExpect` takes the oldest).
    // With each, the browser connections open in the recording when it was sent.
    let mut unanswered: Vec<VecDeque<(usize, f64, usize)>> = vec![VecDeque::new(); cells];
    // Per cell and recorded browser connection, its state, and the step of its last connect.
    let mut connection: HashMap<(usize, Option<u64>), Connection> = HashMap::new();
    let mut connect_at: HashMap<(usize, Option<u64>), usize> = HashMap::new();
    // Agent connections' ends are recorded (a proxy that records connection ends): they are
    // played where they were, not guessed.
    let mut agent_ends = false;
    // The agent's connections, each tagged with its connect step.
    let mut agent_lines: AgentReader<usize> = AgentReader::default();
    // The other agentId whose agent is connected for the group's health probes.
    let mut bystander: Option<String> = None;
    for (key, i, entry) in merged {
        match agent_lines.next(&entry, steps.len()) {
            AgentLine::NotAgent => {}
            AgentLine::SameEnd => continue,
            AgentLine::Other => {}
            AgentLine::Connect(auth) => {
                if let Ok(Some(ev)) = event_of(&entry) {
                    ts.push(entry.ts);
                    steps.push((
                        i,
                        Step::AgentConnect {
                            ev,
                            auth,
                            refused: false,
                            unplayed: None,
                            conn: entry.conn(),
                        },
                    ));
                }
                continue;
            }
            AgentLine::End { by_hub: true, conn } => {
                agent_ends = true;
                let (mut refused, mut compared) = (false, true);
                if let Some((at, answered)) = conn
                    && let Some((
                        _,
                        Step::AgentConnect {
                            auth,
                            refused: r,
                            unplayed,
                            ..
                        },
                    )) = steps.get_mut(at)
                {
                    refused = !answered;
                    *r = refused;
                    *unplayed = agent_unplayed(auth.as_ref(), refused);
                    compared = unplayed.is_none();
                }
                if compared {
                    recorded[i].push(agent_ended());
                }
                ts.push(entry.ts);
                steps.push((
                    i,
                    Step::AgentEnded {
                        ev: event_of(&entry).ok().flatten(),
                        refused,
                        compared,
                        conn: entry.conn(),
                    },
                ));
                continue;
            }
            AgentLine::End { by_hub: false, .. } => {
                agent_ends = true;
                if let Ok(Some(ev)) = event_of(&entry) {
                    ts.push(entry.ts);
                    steps.push((i, Step::Echo(ev)));
                }
                ts.push(entry.ts);
                steps.push((i, Step::AgentClose(Duration::ZERO, entry.conn())));
                continue;
            }
        }
        let line = peer_line(&entry, Peer::Browser);
        let conn = super::model::browser_conn(&entry);
        let this = connection.entry((i, conn)).or_default();
        let transition = this.next(&line);
        let open = this.open;
        let ev = event_of(&entry).ok().flatten();
        // Another agentId's agent connected as the recording had it when a health probe asks
        // or a message goes out: a hub that answers for any agent, or routes a message to
        // any, shows it.
        if let Some(ev) = &ev
            && let Some(except) = bystander_moment(ev, bystanders)
        {
            let want = bystanders.present_at(key, &except);
            if want != bystander {
                ts.push(entry.ts);
                steps.push((i, Step::Bystander(want.clone())));
                bystander = want;
            }
        }
        // A connection opens here ([`Step::BrowserConnect`]).
        let mut opened = false;
        let step = match (transition, line, ev) {
            (Transition::Opened { .. }, PeerLine::Connect(auth), Some(ev)) => {
                opened = true;
                Step::BrowserConnect {
                    ev,
                    auth,
                    ts: entry.ts,
                    refused: false,
                }
            }
            (Transition::Left, _, ev) => Step::BrowserLeave(ev),
            (Transition::Ended { refused: ended }, _, ev) => {
                if let Some(&at) = connect_at.get(&(i, conn))
                    && let Some((_, Step::BrowserConnect { refused, .. })) = steps.get_mut(at)
                {
                    *refused = ended;
                }
                recorded[i].push(hub_ended());
                Step::BrowserEnded(ev)
            }
            (_, _, Some(ev)) => {
                match (entry.dir.as_str(), ev["event"].as_str()) {
                    ("http→hub", _) => {
                        // Compared too (the live leg sends it as recorded): it tells the comparison
                        // which answer the next `hub→http` is, and so which of its fields the spec
                        // gives.
                        let open = connection.values().filter(|c| c.open).count();
                        unanswered[i].push_back((steps.len(), entry.ts, open));
                        recorded[i].push(ev.clone());
                        Step::HttpSend(ev["http"].clone(), None, ProbeSaw::default())
                    }
                    ("hub→http", _) => {
                        if let Some((at, sent, open)) = unanswered[i].pop_front()
                            && let Some((_, Step::HttpSend(req, took, saw))) = steps.get_mut(at)
                        {
                            let body = &ev["http"]["body"];
                            saw.agent_gone = body["agentConnected"] == false;
                            saw.browsers_kept = agent_probe(req)
                                && body["browserClients"].as_u64() == Some(open as u64);
                            *took = Some(Duration::from_secs_f64(
                                ((entry.ts - sent) / 1000.0).clamp(0.0, 86_400.0),
                            ));
                        }
                        recorded[i].push(ev);
                        Step::HttpExpect
                    }
                    ("browser→hub", Some(n)) => {
                        Step::BrowserSend(n.to_string(), ev["data"].clone())
                    }
                    ("hub→browser", Some(n)) => {
                        let n = n.to_string();
                        // The recording's own late events, as its assembly drops them.
                        match order[i].accept_on(conn, "hub→browser", &n, &ev["data"]) {
                            Err(d) if d.rule == "stream-after-end" => Step::BrowserLate(n),
                            _ => {
                                recorded[i].push(ev);
                                Step::BrowserExpect(n)
                            }
                        }
                    }
                    ("hub→agent", Some(n)) => {
                        // What the hub forwards to the agent is compared (the spec's hub→agent
                        // `message`: type, clientId, text, parts, messageId), as parity
                        // compares the hub→agent lane.
                        if n == "message" {
                            recorded[i].push(ev.clone());
                        }
                        Step::AgentExpect(n.to_string(), ev["data"].clone())
                    }
                    ("agent→hub", Some(n)) => {
                        registers |= n == "register";
                        Step::AgentSend(n.to_string(), ev["data"].clone())
                    }
                    (_, None) if ev["nsp"] == CLIENT_NSP => Step::BrowserPacket(ev),
                    _ => Step::Echo(ev),
                }
            }
            (_, _, None) if open && entry.dir == "browser→hub" && is_raw(&entry.line) => {
                Step::BrowserRaw(entry.line.clone())
            }
            (_, _, None) => continue,
        };
        // A browser step of another recorded connection than the cell's last one: it acts on
        // that connection's socket.
        if conn != tab[i] && step.on_tab() {
            tab[i] = conn;
            ts.push(entry.ts);
            steps.push((i, Step::Tab(conn)));
        }
        // Its place is known only now, after the selection of its connection: the end that
        // says whether the hub refused it finds it there.
        if opened {
            connect_at.insert((i, conn), steps.len());
        }
        ts.push(entry.ts);
        steps.push((i, step));
    }
    // Each agent connection but the last is closed after its last recorded line (no close is
    // recorded: the proxy sees a connection end, not a packet), given the recorded gap to the
    // next line for the hub to notice.
    let is_agent = |s: &Step| match s {
        Step::AgentSend(..)
        | Step::AgentExpect(..)
        | Step::AgentConnect { .. }
        | Step::AgentEnded { .. } => true,
        Step::Echo(ev) => matches!(ev["dir"].as_str(), Some("hub→agent" | "agent→hub")),
        _ => false,
    };
    // A request in flight at an agent's last line is answered before the agent leaves (a probe
    // sent just before it left was answered "connected" in the recording; closed while the
    // probe was in flight, the hub answered either way).
    let answer = answers(&steps);
    let mut closes: Vec<(usize, Duration)> = Vec::new();
    let mut last_agent: Option<usize> = None;
    let mut agent_connects = 0;
    for (k, (_, s)) in steps.iter().enumerate() {
        if matches!(s, Step::AgentConnect { .. }) {
            if agent_connects > 0
                && !agent_ends
                && let Some(last) = last_agent
            {
                // Not past the next connect: the close is the previous connection's.
                let last = answer[..=last]
                    .iter()
                    .flatten()
                    .fold(last, |at, &m| at.max(m))
                    .min(k - 1);
                let gap = (ts[last + 1] - ts[last]).max(0.0) / 1000.0;
                let gap =
                    Duration::from_secs_f64(gap.min(60.0)).clamp(MIN_WINDOW, fixed_quiet(cfg.wait));
                closes.push((last, gap));
            }
            agent_connects += 1;
        }
        if is_agent(s) {
            last_agent = Some(k);
        }
    }
    closes.sort_by_key(|(at, _)| *at);
    let mut out = Vec::with_capacity(steps.len() + closes.len());
    let mut out_ts = Vec::with_capacity(steps.len() + closes.len());
    let mut closes = closes.into_iter().peekable();
    for (k, step) in steps.into_iter().enumerate() {
        let cell = step.0;
        out.push(step);
        out_ts.push(ts[k]);
        while let Some((_, gap)) = closes.next_if(|(at, _)| *at == k) {
            // Without recorded ends, no connection is named: the oldest still open closes.
            out.push((cell, Step::AgentClose(gap, None)));
            out_ts.push(ts[k]);
        }
    }
    // After the closes are placed (by the logged order: a probe logged before the agent's
    // last line is answered before it leaves), so a register moved ahead of a probe does not
    // take the close with it.
    let (out, out_ts) = registers_before_probes(out, out_ts);
    let out = paced_streams(out, &out_ts);
    Script {
        steps: out,
        recorded,
        registers,
        agent_connects,
    }
}

/// The longest pause the replayed agent takes between two frames of a stream
/// ([`paced_streams`]): a recorded gap longer than this is played at this.
const STREAM_GAP_CAP: Duration = Duration::from_millis(400);

/// A stream the recorded agent sent and its browser got, played as the agent sent it: each run
/// of one cell's `stream`/`stream_end` sends and their relays (contiguous steps) becomes the
/// agent's sends, each after its recorded gap from the one before (at most
/// [`STREAM_GAP_CAP`], [`Step::Pace`]), then the relays awaited in order. A lock-step replay
/// (each relay awaited before the agent's next frame) gave a hub that coalesces frames sent
/// close together (a trailing-edge throttle) one frame at a time, so it relayed each; the spec
/// relays one browser `stream` per agent `stream` (its sequence diagrams), the batching it
/// describes (100 ms) being the agent's own. A run with no relay (an HTTP client's answer) is
/// played as it was.
fn paced_streams(steps: Vec<(usize, Step)>, ts: &[f64]) -> Vec<(usize, Step)> {
    let is_stream = |n: &str| n == "stream" || n == "stream_end";
    let in_run = |cell: usize, s: &(usize, Step)| {
        s.0 == cell
            && match &s.1 {
                Step::AgentSend(n, _) => is_stream(n),
                Step::BrowserExpect(n) => is_stream(n) || n == "typing",
                _ => false,
            }
    };
    let mut out = Vec::with_capacity(steps.len());
    let mut steps: Vec<Option<(usize, Step)>> = steps.into_iter().map(Some).collect();
    let mut k = 0;
    while k < steps.len() {
        let Some(first) = steps[k].as_ref() else {
            k += 1;
            continue;
        };
        let cell = first.0;
        let starts = matches!(&first.1, Step::AgentSend(n, _) if is_stream(n));
        let end = if starts {
            (k..steps.len())
                .find(|&j| !steps[j].as_ref().is_some_and(|s| in_run(cell, s)))
                .unwrap_or(steps.len())
        } else {
            k + 1
        };
        let relays = (k..end)
            .filter(|&j| matches!(steps[j], Some((_, Step::BrowserExpect(_)))))
            .count();
        if end - k < 2 || relays == 0 {
            out.extend(steps[k..end].iter_mut().filter_map(Option::take));
            k = end;
            continue;
        }
        let mut sent: Option<f64> = None;
        for j in k..end {
            if matches!(steps[j], Some((_, Step::AgentSend(..)))) {
                if let Some(before) = sent {
                    let gap = ((ts[j] - before) / 1000.0).clamp(0.0, 60.0);
                    let gap = Duration::from_secs_f64(gap).min(STREAM_GAP_CAP);
                    if gap >= Duration::from_millis(1) {
                        out.push((cell, Step::Pace(gap)));
                    }
                }
                sent = Some(ts[j]);
                out.extend(steps[j].take());
            }
        }
        out.extend(steps[k..end].iter_mut().filter_map(Option::take));
        k = end;
    }
    out
}

/// Each HTTP request's answer, by the request's step: a cell's answers come in the order of
/// its requests.
fn answers(steps: &[(usize, Step)]) -> Vec<Option<usize>> {
    let mut answer = vec![None; steps.len()];
    let mut open: std::collections::HashMap<usize, VecDeque<usize>> = Default::default();
    for (m, (cell, step)) in steps.iter().enumerate() {
        match step {
            Step::HttpSend(..) => open.entry(*cell).or_default().push_back(m),
            Step::HttpExpect => {
                if let Some(k) = open.get_mut(cell).and_then(VecDeque::pop_front) {
                    answer[k] = Some(m);
                }
            }
            _ => {}
        }
    }
    answer
}

/// The agent's connect and register recorded while a GET (a health probe) was in flight, by
/// the proxy's order, are played before it. The two are on different connections, so the
/// proxy's order is not the hub's: a probe logged before the register was answered
/// "agentConnected: true", after it. Played in the logged order, the probe raced the register,
/// and two legs of one hub differed on it. A GET changes nothing the agent's lines depend on;
/// played before it (and settled by a pong), the register is seen by the probe on every leg.
/// A browser's leave or close logged while a GET was in flight is played before it too (a
/// leave is awaited until the hub closed the connection, so the probe sees it gone on every
/// leg), unless a line of its own cell lies between them (it would then leave too early), with
/// the [`Step::Tab`] that selects its connection.
/// So is the agent's close logged while a GET was in flight whose recorded answer says
/// `agentConnected: false`: the answer shows the hub saw the close first (the proxy logged the
/// GET first, and a replay in that order was answered `true`, a self-replay's false alarm);
/// a close the answer did not see stays after it.
fn registers_before_probes(
    steps: Vec<(usize, Step)>,
    ts: Vec<f64>,
) -> (Vec<(usize, Step)>, Vec<f64>) {
    let movable = |s: &Step| match s {
        Step::AgentConnect { .. } => true,
        Step::AgentSend(n, _) => n == "register",
        Step::Echo(ev) => ev["nsp"] == AGENT_NSP && ev.get("packet").is_some(),
        _ => false,
    };
    // Where each step is played: its own place, or just before the earliest GET it was logged
    // during.
    let mut place: Vec<f64> = (0..steps.len()).map(|k| k as f64).collect();
    for (k, m) in answers(&steps).into_iter().enumerate() {
        let (Some(m), Step::HttpSend(req, _, saw)) = (m, &steps[k].1) else {
            continue;
        };
        if req["method"].as_str().unwrap_or("GET") != "GET" {
            continue;
        }
        for j in k + 1..m {
            let cell = steps[j].0;
            let leave = matches!(steps[j].1, Step::BrowserLeave(_))
                && !steps[k + 1..j]
                    .iter()
                    .any(|(c, s)| *c == cell && !matches!(s, Step::Tab(_)));
            let tab = matches!(steps[j - 1], (c, Step::Tab(_)) if c == cell);
            // The recorded answer still counted the leaving browser: the hub answered first,
            // so the leave is played after the answer (when nothing else of its cell comes
            // before the answer), not sent while the request is in flight to race it.
            if leave && saw.browsers_kept {
                if !steps[j + 1..m].iter().any(|(c, _)| *c == cell) {
                    place[j] = m as f64 + 0.5;
                    if tab {
                        place[j - 1] = m as f64 + 0.5;
                    }
                }
                continue;
            }
            if leave && tab {
                place[j - 1] = place[j - 1].min(k as f64 - 0.5);
            }
            // The agent's own close, where the probe's recorded answer says it was gone: the
            // hub saw the close first, whatever order the proxy logged them in.
            let gone_first = saw.agent_gone && matches!(steps[j].1, Step::AgentClose(..));
            if movable(&steps[j].1) || leave || gone_first {
                place[j] = place[j].min(k as f64 - 0.5);
            }
        }
    }
    let mut order: Vec<usize> = (0..steps.len()).collect();
    order.sort_by(|a, b| place[*a].total_cmp(&place[*b]).then(a.cmp(b)));
    let mut slots: Vec<Option<(usize, Step)>> = steps.into_iter().map(Some).collect();
    let steps = order.iter().filter_map(|&k| slots[k].take()).collect();
    let ts = order.iter().map(|&k| ts[k]).collect();
    (steps, ts)
}

/// An agent's health probe (`GET /api/agent/:agentId/health`), whose `browserClients` counts
/// that agentId's browsers: the browsers of the cells a replay plays together.
fn agent_probe(req: &Value) -> bool {
    req["method"].as_str().unwrap_or("GET") == "GET"
        && req["path"]
            .as_str()
            .and_then(|p| p.strip_prefix("/api/agent/"))
            .and_then(|p| p.trim_end_matches('/').strip_suffix("/health"))
            .is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

/// Sends a recorded HTTP request without waiting for its answer. The answer is given as long
/// as the recorded one took, and a wait more: a `/message/sync` nobody answers is answered
/// only at the hub's sync timeout (the spec's 120 s), which a fixed bound cut short on both
/// legs of a parity.
fn http_send(
    http: &reqwest::Client,
    cfg: &ReplayConfig,
    req: Value,
    took: Option<Duration>,
) -> Answer {
    let bound = (cfg.wait * 4).max(took.map_or(Duration::ZERO, |t| t + cfg.wait));
    let what = format!(
        "{} {}",
        req["method"].as_str().unwrap_or("GET"),
        req["path"].as_str().unwrap_or("/")
    );
    let rb = http_request(http, &cfg.url, &req, bound);
    tokio::spawn(async move {
        match rb.send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                let body = r.json::<Value>().await.unwrap_or(Value::Null);
                (
                    Some(Instant::now()),
                    Ok(json!({ "status": status, "body": body })),
                )
            }
            // Said without the URL: its port is the leg's own, so two legs that failed alike
            // would differ on it.
            Err(e) if e.is_timeout() => (
                None,
                Err(format!(
                    "the answer to {what}: none within {:.1} s{}",
                    bound.as_secs_f64(),
                    took.map_or(String::new(), |t| format!(
                        " (the recorded one came after {:.1} s)",
                        t.as_secs_f64()
                    ))
                )),
            ),
            Err(e) => (
                None,
                Ok(json!({ "error": crate::util::error_chain(&e.without_url()) })),
            ),
        }
    })
}

/// Awaits the cell's next hub→browser event named `want` (one buffered earlier, else the next
/// to arrive), and records it, or its absence, in the cell's view. An extension event (one the
/// spec does not list, such as a hub's `status`) is not owed: another hub may send others or
/// none, and the comparison leaves extensions out. It is looked for only for the fixed quiet
/// window, once per name (later ones only if already here), and its absence is no stall, as
/// an agent's extension is.
async fn browser_expect(p: &mut Party, want: &str, cfg: &ReplayConfig, cadence: &mut Cadence) {
    let Party {
        tab:
            Tab {
                conn,
                browser,
                buffered,
                arrivals,
                absent_extensions,
                lost,
                bad_input,
            },
        stalled,
        first_stall,
        wrong,
        view,
        live,
        want_client,
        agent_sent,
        agent_streams,
        not_relayed,
        unmatched,
        stall_sent_ago,
        stall_mark,
        stall_data,
        stall_budget,
        closed_at,
        closed_live,
        stalled_at,
        recorded,
        claims,
        roles,
        ..
    } = p;
    let Some(b) = browser.as_mut() else { return };
    let extension = super::model::is_extension_name("hub→browser", want);
    // The recorded event this step awaits.
    let awaited: Option<Value> = recorded
        .get(live.len() + *unmatched)
        .filter(|r| r["event"] == want)
        .map(|r| r["data"].clone());
    let awaited_id = awaited
        .as_ref()
        .and_then(|d| d["messageId"].as_str())
        .map(str::to_string);
    // A stream frame whose message's stream_end came already: it cannot come in its place.
    let end_came = |buffered: &VecDeque<(String, Value)>| {
        want == "stream"
            && awaited_id.as_deref().is_some_and(|m| {
                buffered
                    .iter()
                    .any(|(n, d)| n == "stream_end" && d["messageId"].as_str() == Some(m))
            })
    };
    let mut ended_without = None;
    if end_came(buffered) && !buffered.iter().any(|(n, _)| n == want) {
        ended_without = after_end(
            arrivals,
            agent_streams,
            awaited.as_ref(),
            not_relayed,
            live.len(),
            *conn,
        );
    }
    let got = match buffered.iter().position(|(n, _)| n == want) {
        Some(i) => buffered.remove(i).map(Ok),
        None if extension && absent_extensions.contains(want) => None,
        None if ended_without.is_some() => ended_without.map(Err),
        None => {
            // The fixed quiet window, not the adaptive one: a hub that reacts slower than its
            // recent cadence would make the count vary from run to run.
            // After the cell's first stall, its later awaits share one wait (the stall budget):
            // a hub that drops every second frame of a long stream costs about one wait, not
            // one quiet window per frame.
            let wait = if extension {
                fixed_quiet(cfg.wait)
            } else if *stalled {
                fixed_quiet(cfg.wait).min(*stall_budget)
            } else {
                cfg.wait
            };
            let start = tokio::time::Instant::now();
            let deadline = start + wait;
            // Events of other names read during this wait: what came in its place.
            let mut instead: Vec<String> = Vec::new();
            // One with its name came after its message's stream_end and was dropped.
            let mut late = false;
            let got = loop {
                let got = b.recv_until(deadline).await;
                if got.is_ok() {
                    cadence.arrived(b.engine.last_arrival());
                }
                match got {
                    Ok(e) => match arrivals.admit(e, b.engine.last_arrival()) {
                        Some((n, d)) if n == want => break Some(Ok((n, d))),
                        Some((n, d)) => {
                            // An extension is not compared, so none stands in for an awaited
                            // event (a `status` while a slow hub's relay is on its way).
                            if !super::model::is_extension_name("hub→browser", &n) {
                                instead.push(n.clone());
                            }
                            buffered.push_back((n, d));
                            // Its message's end came first: it will not come in its place.
                            if end_came(buffered)
                                && let Some(why) = after_end(
                                    arrivals,
                                    agent_streams,
                                    awaited.as_ref(),
                                    not_relayed,
                                    live.len(),
                                    *conn,
                                )
                            {
                                break Some(Err(why));
                            }
                        }
                        // Dropped as it came (after its message's stream_end): not what was
                        // awaited, though it has its name.
                        None => {
                            late |= arrivals
                                .late
                                .last()
                                .is_some_and(|l| l.drop.event_type == want)
                        }
                    },
                    // It came, but late: that is the cause, whatever else came meanwhile.
                    Err(super::transport::RecvError::Timeout) if late => {
                        arrivals.match_late(want);
                        break Some(Err(format!(
                            "none in its place{}{}",
                            crate::parity::NOT_SLOW,
                            late_cause(want)
                        )));
                    }
                    // Something else came in its place: a longer wait would not bring it (the
                    // replay is lock-step), so the cause names it.
                    Err(super::transport::RecvError::Timeout) if !instead.is_empty() => {
                        break Some(Err(format!(
                            "none within the wait{}{} arrived in its place",
                            crate::parity::NOT_SLOW,
                            super::counted_names(instead.iter().map(String::as_str), true)
                                .join(" → ")
                        )));
                    }
                    Err(e) => {
                        if matches!(e, super::transport::RecvError::Closed(_))
                            && closed_at.is_none()
                        {
                            *closed_at = Some(Instant::now());
                            *closed_live = live.len();
                        }
                        use super::transport::RecvError;
                        if matches!(e, RecvError::Disconnected | RecvError::Closed(_))
                            && lost.is_none()
                            && !*bad_input
                        {
                            *lost = Some(e.to_string());
                        }
                        if matches!(e, RecvError::Timeout) && !*stalled {
                            stalled_at.get_or_insert_with(Instant::now);
                        }
                        break Some(Err(e.to_string()));
                    }
                }
            };
            if *stalled && !extension {
                *stall_budget = stall_budget.saturating_sub(start.elapsed());
            }
            got
        }
    };
    // A later frame of the agent's stream came where this one was awaited: this one was not
    // relayed. The later one is kept for its own step.
    let mut got = got;
    if let (Some(Ok((n, d))), Some(r)) = (&got, &awaited)
        && n == "stream"
        && let Some(why) = later_frame_instead(agent_streams, r, d, *conn)
    {
        if let Some(Ok(kept)) = got.take() {
            buffered.push_front(kept);
        }
        not_relayed.push((live.len(), awaited_id.clone().unwrap_or_default(), false));
        got = Some(Err(why));
    }
    // A stream_end the agent sent, not relayed within the wait after the message's stream
    // frames were: named with what the hub relayed of that message.
    if want == "stream_end"
        && let Some(Err(e)) = &mut got
        && *e == super::transport::RecvError::Timeout.to_string()
        && let Some(m) = &awaited_id
        && let Some(why) = end_not_relayed(agent_streams.get(m), arrivals.streams.get(m), m)
    {
        e.push_str(&why);
    }
    // What the agent sent is relayed: a later wait for this name owes only a later send.
    if let Some(Ok((n, _))) = &got {
        agent_sent.remove(n);
    }
    if extension && !matches!(got, Some(Ok(_))) {
        absent_extensions.insert(want.to_string());
        *unmatched += 1;
        return;
    }
    if let Some(Ok((n, d))) = &got
        && n == "welcome"
        && let Some(c) = d["clientId"].as_str()
        && c != want_client
    {
        let m = format!(
            "welcome clientId {c:?} is not the one the replayed browser's JWT gives: {want_client:?} (sub {:?}, {}; the spec: \"from JWT sub, or 'admin' for admin users\")",
            claims.sub,
            if roles.is_empty() {
                "no ADMIN role"
            } else {
                "role ADMIN"
            }
        );
        wrong.push(m.clone());
        view.push(json!({ "dir": "hub→browser", "wrong": m }));
    }
    let ev = match got {
        Some(Ok((n, d))) => json!({ "dir": "hub→browser", "event": n, "data": d }),
        Some(Err(e)) if *stalled => json!({
            "dir": "hub→browser", "missing": format!("{want}: {e}"), "notAwaited": true
        }),
        Some(Err(e)) => {
            *stalled = true;
            *stall_budget = cfg.wait;
            *stall_mark = Some((Instant::now(), arrivals.arrived.len()));
            *stall_data = recorded
                .get(live.len())
                .filter(|r| r["event"] == want)
                .map(|r| r["data"].clone());
            *first_stall = Some((view.len(), want.to_string(), *conn));
            *stall_sent_ago = agent_sent.get(want).map(|at| at.elapsed());
            json!({ "dir": "hub→browser", "missing": format!("{want}: {e}") })
        }
        None => json!({ "dir": "hub→browser", "missing": want }),
    };
    live.push(ev.clone());
    view.push(tab_event(*conn, ev));
}

/// Why a `stream_end` the agent sent for message `mid` did not come, when the hub relayed its
/// stream frames (`relayed`, as they came) and the agent had sent the end: said after the wait's
/// own words. Not a slow hub when the end was sent more than 4× as long ago as the slowest of
/// those relays took.
fn end_not_relayed(
    sent: Option<&AgentStream>,
    relayed: Option<&Vec<(Instant, String)>>,
    mid: &str,
) -> Option<String> {
    let sent = sent?;
    let end = sent.end?;
    let relayed = relayed.filter(|r| !r.is_empty())?;
    // Each relay's delay after the agent's send of that text.
    let slowest = relayed
        .iter()
        .filter_map(|(at, text)| {
            let k = sent.frames.iter().position(|(t, _)| t == text)?;
            Some(at.saturating_duration_since(sent.frames[k].1))
        })
        .max()?;
    let ago = end.elapsed();
    let not_slow = ago > slowest * CADENCE_FACTOR;
    Some(format!(
        "{}the hub relayed {} stream frame(s) for message {mid} (the slowest {} ms after the \
         agent sent it) but not its stream_end, which the agent sent {:.1} s before the wait \
         ended",
        if not_slow {
            crate::parity::NOT_SLOW
        } else {
            "; "
        },
        relayed.len(),
        slowest.as_millis(),
        ago.as_secs_f64()
    ))
}

/// A hub→browser event as the view holds it: marked with the recorded connection it came on
/// (`conn`), when the recording names one, so that the view's grammar keeps each tab's streams
/// apart ([`super::model::grammar_pass`]).
fn tab_event(conn: Option<u64>, mut ev: Value) -> Value {
    if let Some(c) = conn {
        ev["conn"] = json!(c);
    }
    ev
}

/// Two hub→browser events named `name` are the same once normalized (ids interned, times
/// zeroed).
fn same_event(name: &str, a: &Value, b: &Value) -> bool {
    let norm = |d: &Value| {
        BridleModel.normalize_events(vec![
            json!({ "dir": "hub→browser", "event": name, "data": d }),
        ])
    };
    norm(a) == norm(b)
}

/// Why an awaited event that came after its message's `stream_end` is missing.
fn late_cause(want: &str) -> String {
    format!(
        "a {want} came only after its message's stream_end, where a client drops it \
         (grammar: stream-after-end)"
    )
}

/// Awaits the live hub's counterpart of a recorded late event (one the recorded hub sent
/// after its message's `stream_end`, [`Step::BrowserLate`]): one that came late too is the same
/// grammar drop on both sides; one that came in its place (before the end) is an event this
/// hub sent and the recorded one did not, in the view; none is no fault (a client drops it
/// anyway), so it is looked for only for the fixed quiet window.
async fn browser_late(p: &mut Party, want: &str, cfg: &ReplayConfig, cadence: &mut Cadence) {
    let tab = &mut p.tab;
    if tab.arrivals.match_late(want) {
        return;
    }
    let in_place = match tab.buffered.iter().position(|(n, _)| n == want) {
        Some(i) => tab.buffered.remove(i),
        None => {
            let Some(b) = tab.browser.as_mut() else {
                return;
            };
            let deadline = Instant::now() + fixed_quiet(cfg.wait);
            loop {
                let Ok(e) = b.recv_until(deadline).await else {
                    break None;
                };
                cadence.arrived(b.engine.last_arrival());
                match tab.arrivals.admit(e, b.engine.last_arrival()) {
                    Some((n, d)) if n == want => break Some((n, d)),
                    Some(other) => tab.buffered.push_back(other),
                    None if tab.arrivals.match_late(want) => break None,
                    None => {}
                }
            }
        }
    };
    if let Some((n, d)) = in_place {
        // Judged already, as it came: the view's grammar would take it for late (the view is
        // in the recording's order, where it follows the end).
        let ev = json!({ "dir": "hub→browser", "event": n, "data": d });
        p.live.push(ev.clone());
        let mut judged = tab_event(p.tab.conn, ev);
        judged["judged"] = json!(true);
        p.view.push(judged);
    }
}

/// The frames of one stream the replayed agent sent (a messageId's), as it sent them.
#[derive(Default)]
struct AgentStream {
    /// Each `stream` frame's text and when it was sent.
    frames: Vec<(String, Instant)>,
    /// When its `stream_end` was sent.
    end: Option<Instant>,
    /// Per browser connection (two tabs of one user each get every frame): the frames before
    /// this one were relayed to it, or named as not relayed.
    cursor: HashMap<Option<u64>, usize>,
}

impl AgentStream {
    /// The first frame from `from` on with this text.
    fn find(&self, text: &str, from: usize) -> Option<usize> {
        self.frames
            .iter()
            .skip(from)
            .position(|(t, _)| t == text)
            .map(|k| k + from)
    }
}

/// A frame's `text` (empty when it has none).
fn text_of(d: &Value) -> String {
    d["text"].as_str().unwrap_or_default().to_string()
}

/// Why an awaited `stream` frame (`awaited`) is missing when its message's `stream_end` came
/// already: it came after the end (late, where a client drops it), or the agent sent it before
/// the end and the hub relayed the end without it (noted in `not_relayed` at `place`). `None`
/// when the agent did not send it.
fn after_end(
    arrivals: &mut Arrivals,
    streams: &mut HashMap<String, AgentStream>,
    awaited: Option<&Value>,
    not_relayed: &mut Vec<(usize, String, bool)>,
    place: usize,
    conn: Option<u64>,
) -> Option<String> {
    if arrivals.match_late("stream") {
        return Some(format!(
            "none in its place{}{}",
            crate::parity::NOT_SLOW,
            late_cause("stream")
        ));
    }
    let awaited = awaited?;
    let mid = awaited["messageId"].as_str()?;
    let s = streams.get_mut(mid)?;
    let from = s.cursor.get(&conn).copied().unwrap_or_default();
    let k = s.find(&text_of(awaited), from)?;
    s.cursor.insert(conn, k + 1);
    not_relayed.push((place, mid.to_string(), true));
    Some(format!(
        "not relayed{}the agent sent it ({}) before the stream_end the hub relayed without it",
        crate::parity::NOT_SLOW,
        frame_named(s, k, mid)
    ))
}

/// The frame `k` (0-based) of the agent's stream `mid`, as a verdict names it.
fn frame_named(s: &AgentStream, k: usize, mid: &str) -> String {
    let chars = s.frames.get(k).map_or(0, |(t, _)| t.chars().count());
    format!(
        "frame {} of the {} stream frames the agent sent for message {mid}, {chars} chars of text",
        k + 1,
        s.frames.len()
    )
}

/// An awaited `stream` relay (`recorded`) for which the hub relayed `got`, a later frame of the
/// agent's stream: the awaited frame was not relayed (a hub that coalesces or throttles its
/// relays). `None` when `got` is the awaited frame, or not a frame of the agent's stream that
/// comes after it (a difference compared as such). The awaited frame is passed either way.
fn later_frame_instead(
    streams: &mut HashMap<String, AgentStream>,
    recorded: &Value,
    got: &Value,
    conn: Option<u64>,
) -> Option<String> {
    let mid = recorded["messageId"].as_str()?;
    if got["messageId"].as_str() != Some(mid) {
        return None;
    }
    let s = streams.get_mut(mid)?;
    let from = s.cursor.get(&conn).copied().unwrap_or_default();
    let want = s.find(&text_of(recorded), from)?;
    s.cursor.insert(conn, want + 1);
    if text_of(got) == text_of(recorded) {
        return None;
    }
    let instead = s.find(&text_of(got), want + 1)?;
    Some(format!(
        "not relayed{}the agent sent it ({}) and the hub relayed a later one in its place \
         (frame {}, {} chars)",
        crate::parity::NOT_SLOW,
        frame_named(s, want, mid),
        instead + 1,
        text_of(got).chars().count(),
    ))
}

/// One browser connection of a cell's, as the replay plays it (two tabs of one user are two).
#[derive(Default)]
struct Tab {
    /// The recorded connection it plays (`None`: a recording that does not say which, so one
    /// connection at a time).
    conn: Option<u64>,
    browser: Option<Socket>,
    /// Live hub→browser events that arrived before a step awaited them.
    buffered: VecDeque<(String, Value)>,
    /// Every hub→browser event in the order it was read (and what the grammar dropped in that
    /// order): what ended a stall's wait, for its verdict.
    arrivals: Arrivals,
    /// Extension events the recorded hub sent this browser that the live hub did not send
    /// when first awaited: later ones of the name are taken only if already here.
    absent_extensions: std::collections::HashSet<String>,
    /// The hub ended this connection (a namespace disconnect, a close, a frame that broke it
    /// such as a text frame that is not UTF-8) where the recording kept it open: why.
    lost: Option<String>,
    /// The browser sent this connection bad input (a malformed or unknown packet, a binary or
    /// oversized frame, a nameless event, a `message` that is not an object): a hub may end
    /// the connection for it (npm socket.io does, python-socketio does not), so an end after
    /// it is not a connection lost.
    bad_input: bool,
}

impl Tab {
    /// A read that ended: when it ended the connection (not a quiet wait, not an invalid
    /// frame), the connection is lost, with the first reason kept.
    fn note_end(&mut self, e: &super::transport::RecvError) {
        use super::transport::RecvError;
        if matches!(e, RecvError::Disconnected | RecvError::Closed(_))
            && self.lost.is_none()
            && !self.bad_input
        {
            self.lost = Some(e.to_string());
        }
    }

    /// Keeps an event read from the connection for later steps, unless the grammar drops it
    /// as late.
    fn admit(&mut self, e: super::transport::Event) {
        self.buffered.extend(self.arrivals.admit(e, None));
    }
}

/// The hub→browser events of a cell's browser in the order they were read, through the model's
/// grammar in that order. A `stream` or `stream_end` that comes after its message's
/// `stream_end` is dropped there, as a client drops it: the player's view is in the order the
/// recording awaited events, so a hub that holds a stream back until after the end would
/// otherwise show it in its place. (Only that rule: a stream that does not extend the previous
/// one is kept, and shows as a difference of text.)
#[derive(Default)]
struct Arrivals {
    /// Each event's name and when it came: what came instead of an awaited one, and whether a
    /// flood of an extension came (the comparison leaves those out, so does not see it).
    arrived: Vec<(Instant, String)>,
    order: super::model::Grammar,
    late: Vec<Late>,
    /// The `stream` frames that came, by messageId: when, and their text.
    streams: HashMap<String, Vec<(Instant, String)>>,
}

struct Late {
    drop: crate::protocol::GrammarDrop,
    /// A recorded late event ([`Step::BrowserLate`]) accounts for it, or a stall's cause names
    /// it (one fault, one verdict).
    accounted: bool,
}

impl Arrivals {
    /// Notes an event read from the browser's connection: the event, unless the grammar drops
    /// it as late.
    /// `at`: when it was read off the connection, when known.
    fn admit(
        &mut self,
        e: super::transport::Event,
        at: Option<Instant>,
    ) -> Option<(String, Value)> {
        self.arrived.push((Instant::now(), e.name.clone()));
        if e.name == "stream"
            && let Some(m) = e.data["messageId"].as_str()
        {
            let at = at.unwrap_or_else(Instant::now);
            self.streams
                .entry(m.to_string())
                .or_default()
                .push((at, text_of(&e.data)));
        }
        match self.order.accept("hub→browser", &e.name, &e.data) {
            Err(drop) if drop.rule == "stream-after-end" => {
                self.late.push(Late {
                    drop,
                    accounted: false,
                });
                None
            }
            _ => Some((e.name, e.data)),
        }
    }

    /// The extension events that flooded the browser, each named with its count: more than
    /// [`FLOOD`](super::check_hub::FLOOD) of one name within a second in which the browser got
    /// no event the spec lists (`check bridle hub`'s robustness threshold for a quiet browser).
    /// A hub that sends a status beside every frame sends them amid the frames it relays, however
    /// fast a replay plays them; a flood keeps coming when nothing else does.
    fn floods(&self) -> Vec<String> {
        use super::check_hub::FLOOD;
        use std::collections::{BTreeMap, VecDeque};
        // Per name: its arrivals since the last spec event, within the last second; the most
        // such, and how many in all.
        let mut recent: BTreeMap<&str, VecDeque<Instant>> = BTreeMap::new();
        let mut seen: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for (t, name) in &self.arrived {
            if !super::model::is_extension_name("hub→browser", name) {
                recent.clear();
                continue;
            }
            let q = recent.entry(name).or_default();
            q.push_back(*t);
            while q.front().is_some_and(|f| *t - *f > Duration::from_secs(1)) {
                q.pop_front();
            }
            let (peak, all) = seen.entry(name).or_default();
            *peak = (*peak).max(q.len());
            *all += 1;
        }
        seen.into_iter()
            .filter(|(_, (peak, _))| *peak > FLOOD)
            .map(|(name, (peak, all))| {
                format!(
                    "the hub flooded the browser with {name:?}: {all} in this cell, up to {peak} \
                     within one second in which it sent no event the spec lists (more than \
                     {FLOOD} is a flood, as check bridle hub's robustness judges a quiet browser's)"
                )
            })
            .collect()
    }

    /// The late events nothing accounts for: the hub's own extras.
    fn unaccounted(&self) -> impl Iterator<Item = &crate::protocol::GrammarDrop> {
        self.late.iter().filter(|l| !l.accounted).map(|l| &l.drop)
    }

    /// Marks the oldest late `want` nothing accounts for yet as accounted for.
    fn match_late(&mut self, want: &str) -> bool {
        match self
            .late
            .iter_mut()
            .find(|l| !l.accounted && l.drop.event_type == want)
        {
            Some(l) => {
                l.accounted = true;
                true
            }
            None => false,
        }
    }
}

/// After the script: what else the hub sends the cell's browser until it is idle (bounded).
async fn quiesce(tab: &mut Tab, cfg: &ReplayConfig, cadence: &mut Cadence) {
    let Some(b) = tab.browser.as_mut() else {
        return;
    };
    let fixed = fixed_quiet(cfg.wait);
    let end = Instant::now() + cfg.wait;
    loop {
        let until = if cfg.fixed_windows {
            Instant::now() + fixed
        } else {
            cadence.mark + cadence.window(fixed)
        };
        match b.recv_until(until.min(end)).await {
            Ok(e) => {
                cadence.arrived(b.engine.last_arrival());
                tab.buffered
                    .extend(tab.arrivals.admit(e, b.engine.last_arrival()));
            }
            // Quiet, but bytes arrived that the connection did not read yet (its task was not
            // scheduled): not idle.
            Err(super::transport::RecvError::Timeout)
                if !cfg.fixed_windows && Instant::now() < end && b.engine.has_unread() =>
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(e) => {
                tab.note_end(&e);
                break;
            }
        }
    }
}

impl Party {
    /// The cell's verdict, its view given to `view_out`.
    fn finish(mut self, view_out: &mut Vec<Value>) -> Outcome {
        // The stalled connection's arrivals tell the first stall's cause.
        if let Some((_, _, conn)) = self.first_stall {
            self.select(conn);
        }
        let Party {
            mut view,
            mut live,
            recorded,
            mut tab,
            mut parked,
            first_stall,
            stall_sent_ago,
            stall_mark,
            stall_data,
            mut wrong,
            notes,
            ended,
            hub_wide,
            client_id,
            lost_before,
            not_relayed,
            agent_streams,
            ..
        } = self;
        // The first stream frame not relayed is the cell's fault: named with how many of the
        // agent's frames of that message the hub did not relay.
        // One named as relayed without it before its message's end that came after the end
        // after all (a hub that holds each frame back): late, where a client drops it.
        let mut not_relayed = not_relayed;
        not_relayed.retain(|(at, _, before_end)| {
            let late = *before_end
                && std::iter::once(&mut tab)
                    .chain(parked.iter_mut())
                    .any(|t| t.arrivals.match_late("stream"));
            if late && let Some(said) = live.get(*at).and_then(|e| e["missing"].as_str()) {
                let said = said.to_string();
                let m = format!(
                    "stream: none in its place{}{}",
                    crate::parity::NOT_SLOW,
                    late_cause("stream")
                );
                live[*at]["missing"] = json!(m);
                if let Some(v) = view.iter_mut().find(|e| e["missing"] == said.as_str()) {
                    v["missing"] = json!(m);
                }
            }
            !late
        });
        if let Some((at, mid, _)) = not_relayed.first()
            && let Some(said) = live.get(*at).and_then(|e| e["missing"].as_str())
        {
            let said = said.to_string();
            let missed = not_relayed.iter().filter(|(_, m, _)| m == mid).count();
            let sent = agent_streams.get(mid).map_or(0, |s| s.frames.len());
            let m = format!(
                "{said}; {missed} of the {sent} stream frames the agent sent for message {mid} \
                 were not relayed (the spec's hub relays each: one browser stream per agent \
                 stream, the batching it describes being the agent's)"
            );
            live[*at]["missing"] = json!(m);
            if let Some(v) = view.iter_mut().find(|e| e["missing"] == said.as_str()) {
                v["missing"] = json!(m);
            }
        }
        // A connection the hub ended that the recording kept open: the cell's fault when
        // nothing else shows it (what came before it all came, as recorded).
        let lost = std::iter::once(&tab)
            .chain(&parked)
            .find_map(|t| t.lost.clone())
            .or(lost_before);
        if let Some(o) = ended {
            view_out.extend(view);
            // What it got before its replay ended already differed: that is its first fault
            // (its own), the end follows it.
            if let Outcome::Fail(end) = &o
                && !hub_wide
                && let Outcome::Fail(own) =
                    compare(&recorded[..live.len().min(recorded.len())], &live)
            {
                return Outcome::Fail(format!("{own}; then {end}"));
            }
            return o;
        }
        // The first stall's cause, when the rest of the cell shows it: the awaited event came
        // only later, out of its place (a hub that holds a frame back until the next one), or
        // the events awaited after it came (the hub skipped it), or it came only on the cell's
        // other browser connection (a hub that keeps one connection per user). Not a slow hub.
        if let Some((at, want, _)) = &first_stall
            && let Some(m) = view[*at]["missing"].as_str()
            && !m.contains(crate::parity::NOT_SLOW)
        {
            // The stalled connection's view entries after the stall.
            let stalled_on = tab.conn;
            let on_tab = |e: &&Value| e.get("conn").and_then(Value::as_u64) == stalled_on;
            let elsewhere = parked
                .iter()
                .flat_map(|t| &t.arrivals.arrived)
                .filter(|(_, n)| n == want)
                .count();
            // Where it came after the wait ended: after an event of the spec the replay awaited
            // later (out of its place: not slowness), or first, the very event awaited (in its
            // place, only later than the wait: a hub slower than the wait, a stall naming the
            // wait, not "not a slow bridge").
            let names = &tab.arrivals.arrived;
            let (mark_at, mark) = stall_mark.unwrap_or((Instant::now(), names.len()));
            let came: Option<(usize, Instant)> = names
                .iter()
                .enumerate()
                .skip(mark)
                .find(|(_, (_, n))| n == want)
                .map(|(k, (t, _))| (k, *t));
            let overtaken = came.is_some_and(|(k, _)| {
                names[mark.min(k)..k]
                    .iter()
                    .any(|(_, n)| n != want && !super::model::is_extension_name("hub→browser", n))
            });
            let kept = tab.buffered.iter().find(|(n, _)| n == want).map(|(_, d)| d);
            let same = matches!((kept, &stall_data), (Some(k), Some(r)) if same_event(want, r, k));
            let mut slow: Option<String> = None;
            let cause = if tab.arrivals.match_late(want) {
                // It came, but only after its message's end, where a client drops it.
                Some(late_cause(want))
            } else if let (Some((_, t)), false, true) = (came, overtaken, same) {
                slow = Some(format!(
                    "a {want} came {:.1} s after the wait ended, in its place: a hub slower \
                     than the wait, not one that skipped it",
                    t.saturating_duration_since(mark_at).as_secs_f64()
                ));
                None
            } else if kept.is_some() {
                let names = &tab.arrivals.arrived;
                let last = names.iter().rposition(|(_, n)| n == want).unwrap_or(0);
                let after = last
                    .checked_sub(1)
                    .map_or(String::new(), |i| format!(", after {}", names[i].1));
                Some(format!("a {want} came only later, out of its place{after}"))
            } else if elsewhere > 0 && !tab.arrivals.arrived.iter().any(|(_, n)| n == want) {
                Some(format!(
                    "this connection of {client_id:?} got no {want} at all, and the cell's \
                     other connection(s) of {client_id:?} (tabs of one user) got {elsewhere}: \
                     the hub sends to one connection of a user"
                ))
            } else {
                let later = view[*at + 1..]
                    .iter()
                    .filter(on_tab)
                    .filter(|e| e["dir"] == "hub→browser" && e.get("event").is_some())
                    .count();
                let absent: Vec<&str> = view[*at + 1..]
                    .iter()
                    .filter(on_tab)
                    .filter(|e| e["notAwaited"] == true)
                    .map(|e| {
                        let m = e["missing"].as_str().unwrap_or("");
                        m.split_once(':').map_or(m, |(name, _)| name)
                    })
                    .collect();
                if later == 0 {
                    None
                } else if absent.is_empty() {
                    Some(format!(
                        "the {later} hub→browser event(s) awaited after it came, so it was skipped"
                    ))
                } else if absent.iter().all(|n| *n == want) {
                    // The same event missing each time while the others came: a hub that
                    // does not send it (drops `typing`), not one too slow for the wait.
                    Some(format!(
                        "the {later} hub→browser event(s) awaited after it came, and every \
                         later {want} ({}) was missing too, so it was skipped",
                        absent.len()
                    ))
                } else {
                    None
                }
            };
            // No later event tells why; what the replayed agent sent does: the hub had it for
            // the whole wait. Still a stall (a hub slower than the wait looks the same).
            let named = match (cause, slow, stall_sent_ago) {
                (Some(cause), _, _) => Some(format!("{m}{}{cause}", crate::parity::NOT_SLOW)),
                (None, Some(slow), _) => Some(format!("{m}; {slow}")),
                (None, None, Some(ago)) if m.ends_with("no event within the wait") => {
                    Some(format!(
                        "{m}; the replayed agent sent its {want} for this browser {:.1} s before \
                         and the hub had relayed none when the wait ended",
                        ago.as_secs_f64()
                    ))
                }
                (None, None, _) => None,
            };
            if let Some(m) = named {
                view[*at]["missing"] = json!(m);
                if let Some(l) = live
                    .iter_mut()
                    .find(|e| e["missing"].is_string() && e["notAwaited"] != true)
                {
                    l["missing"] = json!(m);
                }
            }
        }
        let mut unaccounted: Vec<String> = Vec::new();
        for tab in std::iter::once(tab).chain(parked) {
            for (n, d) in tab.buffered {
                let ev = json!({ "dir": "hub→browser", "event": n, "data": d });
                live.push(ev.clone());
                view.push(tab_event(tab.conn, ev));
            }
            // A flood of extension events: left out of the comparison, so judged here.
            for m in tab.arrivals.floods() {
                wrong.push(m.clone());
                view.push(json!({ "dir": "hub→browser", "wrong": m }));
            }
            // What the grammar dropped as it came: the leg's grammar drops. Those neither a
            // recorded late event nor a stall's cause accounts for are the hub's own extras
            // (the recording has no such event to await), a difference of their own.
            unaccounted.extend(tab.arrivals.unaccounted().map(|d| d.describe()));
            view.extend(
                tab.arrivals
                    .late
                    .iter()
                    .map(|l| json!({ "dir": "hub→browser", "dropped": l.drop.layer_key() })),
            );
        }
        view_out.extend(view);
        let mut outcome = if hub_wide {
            // The hub-wide health counts every agentId's agents and browsers; a replay plays
            // one agentId at a time, so its values are the replay's, not the hub's to judge:
            // compared by type (the shape the spec gives), said so.
            let (r, l) = (by_type(recorded), by_type(live));
            compare(&r, &l)
        } else {
            compare(&recorded, &live)
        };
        if let Outcome::Pass { note, .. } = &mut outcome {
            let mut said = notes;
            if hub_wide {
                said.push(
                    "hub-wide health compared by type (agentConnected, browserClients count \
                     every agentId's peers; the replay plays one agentId at a time)"
                        .into(),
                );
            }
            said.dedup();
            *note = said.join("; ");
        }
        if let (Outcome::Pass { .. }, Some(w)) = (&outcome, &lost) {
            outcome = Outcome::Fail(format!(
                "the hub ended this browser's connection, which the recording kept open: {w}"
            ));
        }
        if !unaccounted.is_empty() {
            // The hub's own late events: a difference, whatever else the cell showed.
            let m = format!(
                "the hub sent what a client drops: {}",
                unaccounted.join("; ")
            );
            outcome = match outcome {
                Outcome::Fail(f) => Outcome::Fail(format!("{f}; {m}")),
                Outcome::Pass { .. } => Outcome::Fail(m),
                o => o,
            };
        }
        if wrong.is_empty() {
            return outcome;
        }
        // The wrong clientId is the first fault (the welcome comes first); what else differs
        // follows it.
        match outcome {
            Outcome::Fail(m) => Outcome::Fail(format!("{}; {m}", wrong.join("; "))),
            _ => Outcome::Fail(wrong.join("; ")),
        }
    }
}

/// What the recording itself waited on: how long each recorded HTTP answer took (a
/// `/message/sync` nobody answered is answered at the hub's sync timeout, 120 s by the spec),
/// summed. A replay awaits each as long again, and a wait more.
pub fn recorded_waits(cell: &Cell) -> Duration {
    let mut sent: VecDeque<f64> = VecDeque::new();
    let mut total = 0.0;
    for entry in cell.recorded() {
        match entry.dir.as_str() {
            "http→hub" => sent.push_back(entry.ts),
            "hub→http" => {
                if let Some(t) = sent.pop_front() {
                    total += (entry.ts - t).max(0.0);
                }
            }
            _ => {}
        }
    }
    Duration::from_secs_f64((total / 1000.0).clamp(0.0, 86_400.0))
}

/// The request a recorded `http→hub` line describes: method, path with its query string, and
/// the body as recorded (JSON, or raw text).
fn http_request(
    http: &reqwest::Client,
    base: &str,
    req: &Value,
    wait: Duration,
) -> reqwest::RequestBuilder {
    let method = req["method"]
        .as_str()
        .and_then(|m| reqwest::Method::from_bytes(m.as_bytes()).ok())
        .unwrap_or(reqwest::Method::GET);
    let mut url = format!("{base}{}", req["path"].as_str().unwrap_or("/"));
    if let Some(q) = req["query"].as_str().filter(|q| !q.is_empty()) {
        url.push('?');
        url.push_str(q);
    }
    let mut rb = http.request(method, url).timeout(wait);
    if let Some(text) = req["bodyText"].as_str() {
        rb = rb.body(text.to_string());
        if let Some(ct) = req["contentType"].as_str() {
            rb = rb.header("content-type", ct);
        }
    } else if !req["body"].is_null() {
        rb = rb.json(&req["body"]);
    }
    rb
}

/// Most events a replayed agent keeps for later steps ([`agent_recv`]); older ones go first.
const AGENT_EARLY_MAX: usize = 4096;

/// The agent's next event named `name`: one it got earlier and kept, else the next to arrive
/// within `wait`, keeping the others it reads on the way for later steps.
async fn agent_recv(
    a: &mut Socket,
    name: &str,
    wait: Duration,
    early: &mut VecDeque<super::transport::Event>,
) -> Result<super::transport::Event, super::transport::RecvError> {
    if let Some(e) = early
        .iter()
        .position(|e| e.name == name)
        .and_then(|i| early.remove(i))
    {
        return Ok(e);
    }
    let deadline = Instant::now() + wait;
    loop {
        let e = a.recv_until(deadline).await?;
        if e.name == name {
            return Ok(e);
        }
        if early.len() == AGENT_EARLY_MAX {
            early.pop_front();
        }
        early.push_back(e);
    }
}

/// The hub's forward of a browser's message to the agent (`live`), as compared with the
/// recorded one's data: as sent, but a `messageId` the hub made (a non-empty string) takes the
/// recorded one's place, since the hub makes it afresh for each message (its presence and type
/// are compared, not its value); the clientId is interned as every id is.
fn forwarded(recorded: &Value, live: &Value) -> Value {
    let mut data = live.clone();
    if let Some(o) = data.as_object_mut()
        && o.get("messageId")
            .and_then(Value::as_str)
            .is_some_and(|m| !m.is_empty())
        && recorded["messageId"].is_string()
    {
        o.insert("messageId".into(), recorded["messageId"].clone());
    }
    json!({ "dir": "hub→agent", "event": "message", "data": data })
}

/// The longest value a verdict shows whole; a longer one is shown as an excerpt around where
/// the two first differ, with its size.
const SHOWN_MAX: usize = 600;

/// `recorded` and `live` as a verdict shows them: whole when short, else bounded excerpts
/// (the start, and around the first byte where they differ) with their sizes.
fn shown_pair(recorded: &str, live: &str) -> (String, String) {
    if recorded.len() <= SHOWN_MAX && live.len() <= SHOWN_MAX {
        return (recorded.to_string(), live.to_string());
    }
    let at = recorded
        .bytes()
        .zip(live.bytes())
        .position(|(a, b)| a != b)
        .unwrap_or(recorded.len().min(live.len()));
    let cut = |s: &str| -> String {
        if s.len() <= SHOWN_MAX {
            return s.to_string();
        }
        let floor = |mut i: usize| {
            i = i.min(s.len());
            while !s.is_char_boundary(i) {
                i -= 1;
            }
            i
        };
        let head = floor(120);
        let from = floor(at.saturating_sub(200)).max(head);
        let to = floor(at + 200);
        let gap = if from > head { "…" } else { "" };
        let tail = if to < s.len() { "…" } else { "" };
        format!(
            "{}{gap}{}{tail} ({} bytes; first differs at byte {at})",
            &s[..head],
            &s[from..to],
            s.len()
        )
    };
    (cut(recorded), cut(live))
}

/// The JSON pointer of the first place two values differ (`""`: the whole value).
fn first_difference(a: &Value, b: &Value) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys = x.keys().chain(y.keys().filter(|k| !x.contains_key(*k)));
            for k in keys {
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) if p == q => {}
                    (Some(p), Some(q)) => return format!("/{k}{}", first_difference(p, q)),
                    _ => return format!("/{k}"),
                }
            }
            String::new()
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                if p != q {
                    return format!("/{i}{}", first_difference(p, q));
                }
            }
            if x.len() != y.len() {
                format!("/{}", x.len().min(y.len()))
            } else {
                String::new()
            }
        }
        _ => String::new(),
    }
}

/// Normalized comparison of hub→browser events (pong included: its place is free, as each
/// event is awaited by name, and its `ts` is typed), the hub→agent messages, HTTP answers, and
/// of the rows both project to.
fn compare(recorded: &[Value], live: &[Value]) -> Outcome {
    let model = BridleModel;
    // The model's comparison view: extensions left out, the not-connected tail folded.
    let norm = |list: &[Value]| model.normalize_events(list.to_vec());
    let (a, b) = (norm(recorded), norm(live));
    if let Some(i) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
        // After the first missing event the rest were looked for only briefly: counted, not
        // listed (one fault, one verdict).
        let later = live.iter().filter(|e| e["notAwaited"] == true).count();
        // Named by its side: an HTTP answer is no hub→browser event.
        let side = [a.get(i), b.get(i)]
            .into_iter()
            .flatten()
            .find_map(|e| e["dir"].as_str())
            .map_or("hub→browser event".to_string(), |d| match d {
                "hub→http" => "hub→http answer".to_string(),
                "http→hub" => "http→hub request".to_string(),
                d => format!("{d} event"),
            });
        let (r, l) = shown_pair(
            &a.get(i).map_or("(none)".into(), Value::to_string),
            &b.get(i).map_or("(none)".into(), Value::to_string),
        );
        // Where they differ, when both are there and are events of one name.
        let at = match (a.get(i), b.get(i)) {
            (Some(x), Some(y)) if x.get("missing").is_none() && y.get("missing").is_none() => {
                match first_difference(x, y) {
                    p if p.is_empty() => String::new(),
                    p => format!(" at {p}"),
                }
            }
            _ => String::new(),
        };
        return Outcome::Fail(format!(
            "{side} #{i} differs{at}: recorded {r} vs live {l}{}",
            if later > 0 {
                format!("; {later} later event(s) not there either, not awaited after it")
            } else {
                String::new()
            }
        ));
    }
    let rows = |list: &[Value]| {
        let mut p = model.row_projector();
        for e in list {
            p.push(e);
        }
        model.normalize_rows(p.finish())
    };
    let (ra, rb) = (rows(recorded), rows(live));
    if ra != rb {
        let (r, l) = shown_pair(&Value::from(ra).to_string(), &Value::from(rb).to_string());
        return Outcome::Fail(format!("rows differ: recorded {r} vs live {l}"));
    }
    Outcome::Pass {
        // What the hub sent: the requests in the lists are the replay's own.
        events: a.iter().filter(|e| e["dir"] != "http→hub").count(),
        rows: ra.len(),
        extensions: model.left_out(live).join(", "),
        note: String::new(),
    }
}

/// HTTP answers with their `agentConnected` and `browserClients` values replaced by their JSON
/// type ([`super::model::counts_by_type`]).
fn by_type(list: Vec<Value>) -> Vec<Value> {
    list.into_iter()
        .map(|mut e| {
            if let Some(body) = e.pointer_mut("/http/body") {
                super::model::counts_by_type(body);
            }
            e
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lane::Entry;

    fn cfg() -> ReplayConfig {
        ReplayConfig {
            url: "http://127.0.0.1:1".into(),
            jwt_secret: "s".into(),
            api_key: "Key-123".into(),
            wait: Duration::from_secs(1),
            fixed_windows: false,
        }
    }

    /// One cell's lines, merged as the player merges a group's.
    fn merged(lines: &[(&str, &str)]) -> Vec<(crate::lane::SeqKey, usize, Entry)> {
        crate::lane::test_entries(lines)
            .into_iter()
            .map(|e| (e.key(), 0, e))
            .collect()
    }

    /// One cell's lines as the player scripts them, no other agentId's agent anywhere.
    fn scripted(lines: &[(&str, &str)]) -> Script {
        script(merged(lines), 1, &cfg(), &Bystanders::default())
    }

    /// [`scripted`], each line on the recorded connection beside it in `conns`.
    fn scripted_on(lines: &[(&str, &str)], conns: &[Option<u64>]) -> Script {
        let merged = crate::lane::test_entries_on(lines, conns)
            .into_iter()
            .map(|e| (e.key(), 0, e))
            .collect();
        script(merged, 1, &cfg(), &Bystanders::default())
    }

    /// What `name` gives each step of a script it names, in order.
    fn named<T>(s: &Script, name: impl Fn(&Step) -> Option<T>) -> Vec<T> {
        s.steps.iter().filter_map(|(_, st)| name(st)).collect()
    }

    const UP: &str = "agent→hub";
    const DOWN: &str = "hub→agent";

    /// The agent steps of a script, by kind: `connect(refused)`, `ended(refused)`, `close`.
    fn agent_steps(s: &Script) -> Vec<String> {
        named(s, |st| match st {
            Step::AgentConnect { refused, .. } => Some(format!("connect({refused})")),
            Step::AgentEnded { refused, .. } => Some(format!("ended({refused})")),
            Step::AgentClose(..) => Some("close".into()),
            _ => None,
        })
    }

    #[test]
    fn an_agent_connection_the_hub_ended_is_one_compared_end() {
        let s = scripted(&[
            (
                UP,
                r#"40/ws/agent,{"apiKey":"[redacted:case]","agentId":"a"}"#,
            ),
            (DOWN, r#"40/ws/agent,{"sid":"x"}"#),
            (DOWN, "41/ws/agent,"),
            (DOWN, "1"),
            (UP, "1"),
            (UP, r#"40/ws/agent,{"apiKey":"[redacted]","agentId":"a"}"#),
            (DOWN, r#"42/ws/agent,["config",{}]"#),
            (UP, r#"42/ws/agent,["register",{}]"#),
            (UP, "41/ws/agent,"),
            (UP, "1"),
        ]);
        // The hub's disconnect, its close and the agent's answering close are one end; the
        // agent's leave and its close another.
        assert_eq!(
            agent_steps(&s),
            ["connect(true)", "ended(true)", "connect(false)", "close"]
        );
        assert_eq!(s.recorded[0], vec![agent_ended()]);
    }

    /// Two agent connections of one agentId, the newer leaving first while the older stays: the
    /// recorded connection numbers say which ended, so the newer's close names it (paired with
    /// the oldest open one, the replay closed the older and kept the newer, and a hub that
    /// unregisters the agentId as the recording shows was said not to), and the hub's later end
    /// is the older's.
    #[test]
    fn an_agent_end_names_its_recorded_connection() {
        let lines = [
            (UP, r#"40/ws/agent,{"apiKey":"[redacted]","agentId":"a"}"#),
            (DOWN, r#"40/ws/agent,{"sid":"x"}"#),
            (DOWN, r#"42/ws/agent,["config",{}]"#),
            (UP, r#"40/ws/agent,{"apiKey":"[redacted]","agentId":"a"}"#),
            (DOWN, r#"40/ws/agent,{"sid":"y"}"#),
            (UP, "41/ws/agent,"),
            (UP, "1"),
            (DOWN, "41/ws/agent,"),
        ];
        let conns = [4, 4, 4, 7, 7, 7, 7, 4].map(Some);
        let s = scripted_on(&lines, &conns);
        let named: Vec<String> = named(&s, |st| match st {
            Step::AgentConnect { conn, refused, .. } => Some(format!("connect {conn:?} {refused}")),
            Step::AgentEnded { conn, refused, .. } => Some(format!("ended {conn:?} {refused}")),
            Step::AgentClose(_, conn) => Some(format!("close {conn:?}")),
            _ => None,
        });
        // The newer got no event before its end, yet the agent ended it, not the hub: no
        // refusal. The older had its config: the hub's end is no refusal either.
        assert_eq!(
            named,
            [
                "connect Some(4) false",
                "connect Some(7) false",
                "close Some(7)",
                "ended Some(4) false"
            ]
        );
        // Without numbers, the oldest open connection is the one that ended.
        let plain = scripted(&lines);
        assert!(
            plain
                .steps
                .iter()
                .any(|(_, st)| matches!(st, Step::AgentClose(_, None))),
        );
    }

    /// The live connection ended for a recorded end: the one played for its number, else one
    /// played without a number; none for a number not open live; the oldest without a number
    /// to go by. The newest ending first hands the agent's later steps to the next newest.
    #[test]
    fn the_live_agent_ended_is_the_one_played_for_the_recorded_connection() {
        let open = || {
            (
                Some("newest"),
                Some(7),
                VecDeque::from([(Some(2), "first"), (Some(4), "second")]),
            )
        };
        let (mut agent, mut at, mut older) = open();
        assert_eq!(
            take_ended_agent(&mut agent, &mut at, &mut older, Some(7)),
            Some("newest")
        );
        assert_eq!((agent, at), (Some("second"), Some(4)));
        assert_eq!(older, [(Some(2), "first")]);
        let (mut agent, mut at, mut older) = open();
        assert_eq!(
            take_ended_agent(&mut agent, &mut at, &mut older, Some(4)),
            Some("second")
        );
        assert_eq!(agent, Some("newest"));
        assert_eq!(
            take_ended_agent(&mut agent, &mut at, &mut older, Some(9)),
            None
        );
        assert_eq!(
            take_ended_agent(&mut agent, &mut at, &mut older, None),
            Some("first")
        );
        assert_eq!(
            take_ended_agent(&mut agent, &mut at, &mut older, None),
            Some("newest")
        );
        assert_eq!((agent, at), (None, None));
        // The agent connected at the start, with no recorded connect: any recorded end is its.
        let (mut agent, mut at, mut older) = (Some("start"), None, VecDeque::<(_, &str)>::new());
        assert_eq!(
            take_ended_agent(&mut agent, &mut at, &mut older, Some(3)),
            Some("start")
        );
    }

    /// The agent's close logged while a probe was in flight goes before it where the probe's
    /// recorded answer saw it gone, and stays after it where the answer did not.
    #[test]
    fn an_agent_close_the_probe_saw_is_played_before_it() {
        let order = |connected: bool| {
            let answer = format!(
                r#"{{"status":200,"body":{{"ok":true,"agentConnected":{connected},"browserClients":0}}}}"#
            );
            let s = scripted(&[
                (UP, r#"40/ws/agent,{"apiKey":"[redacted]","agentId":"a"}"#),
                (DOWN, r#"40/ws/agent,{"sid":"x"}"#),
                (UP, r#"42/ws/agent,["register",{}]"#),
                (
                    "http→hub",
                    r#"{"method":"GET","path":"/api/agent/a/health"}"#,
                ),
                (UP, "1"),
                ("hub→http", &answer),
            ]);
            named(&s, |st| match st {
                Step::HttpSend(..) => Some("get"),
                Step::HttpExpect => Some("answer"),
                Step::AgentClose(..) => Some("close"),
                _ => None,
            })
        };
        assert_eq!(order(false), ["close", "get", "answer"]);
        assert_eq!(order(true), ["get", "close", "answer"]);
    }

    /// A browser's leave logged while an agent's health probe was in flight goes before the
    /// probe where the recorded answer no longer counted it, and after the answer where it
    /// still did (the hub answered first; played between, the leave raced the request and the
    /// recorded hub itself answered one browser fewer).
    #[test]
    fn a_browser_leave_the_probe_did_not_see_is_played_after_its_answer() {
        let order = |counted: u64| {
            let answer = format!(
                r#"{{"status":200,"body":{{"ok":true,"agentConnected":true,"browserClients":{counted},"agentId":"a"}}}}"#
            );
            let s = scripted(&[
                (
                    "browser→hub",
                    r#"40/ws/client,{"token":"[redacted:signed]"}"#,
                ),
                (
                    "hub→browser",
                    r#"42/ws/client,["welcome",{"clientId":"u"}]"#,
                ),
                (
                    "http→hub",
                    r#"{"method":"GET","path":"/api/agent/a/health"}"#,
                ),
                ("browser→hub", "1"),
                ("hub→http", &answer),
            ]);
            named(&s, |st| match st {
                Step::HttpSend(..) => Some("get"),
                Step::HttpExpect => Some("answer"),
                Step::BrowserLeave(_) => Some("leave"),
                _ => None,
            })
        };
        assert_eq!(order(0), ["leave", "get", "answer"]);
        assert_eq!(order(1), ["get", "answer", "leave"]);
    }

    /// A browser connection the recorded hub refused is marked refused where the recording
    /// names connections too (its connect's place came after its tab's selection, so the
    /// refusal marked the selection, and the replay took a live refusal for a failure).
    #[test]
    fn a_refused_browser_connection_is_marked_on_its_connect() {
        let connect = (
            "browser→hub",
            r#"40/ws/client,{"token":"[redacted:forged]"}"#,
        );
        let lines = [
            connect,
            ("hub→browser", r#"44/ws/client,{"message":"unauthorized"}"#),
            ("browser→hub", "1"),
            connect,
            (
                "hub→browser",
                r#"42/ws/client,["welcome",{"clientId":"u"}]"#,
            ),
        ];
        let conns = [1, 1, 1, 2, 2].map(Some);
        let s = scripted_on(&lines, &conns);
        let connects: Vec<bool> = named(&s, |st| match st {
            Step::BrowserConnect { refused, .. } => Some(*refused),
            _ => None,
        });
        assert_eq!(connects, [true, false]);
    }

    /// Two tabs of one user: each browser step follows the selection of its connection, and a
    /// tab's close logged while a health probe was in flight is played before the probe with
    /// its selection (the selection is no line of the cell that keeps it in place: kept, the
    /// probe counted the closed tab on a replay of the very hub recorded).
    #[test]
    fn a_tabs_steps_act_on_its_connection_and_its_close_moves_with_it() {
        let connect = (
            "browser→hub",
            r#"40/ws/client,{"token":"[redacted:signed]"}"#,
        );
        let welcome = (
            "hub→browser",
            r#"42/ws/client,["welcome",{"clientId":"u"}]"#,
        );
        let lines = [
            connect,
            welcome,
            connect,
            welcome,
            (
                "http→hub",
                r#"{"method":"GET","path":"/api/agent/a/health"}"#,
            ),
            ("browser→hub", "1"),
            (
                "hub→http",
                r#"{"status":200,"body":{"ok":true,"agentConnected":true,"browserClients":1}}"#,
            ),
        ];
        let conns = [Some(1), Some(1), Some(2), Some(2), None, Some(1), None];
        let s = scripted_on(&lines, &conns);
        let names: Vec<String> = named(&s, |st| match st {
            Step::Tab(c) => Some(format!("tab {}", c.unwrap_or(0))),
            Step::BrowserConnect { .. } => Some("connect".into()),
            Step::BrowserExpect(n) => Some(n.clone()),
            Step::BrowserLeave(_) => Some("leave".into()),
            Step::HttpSend(..) => Some("get".into()),
            Step::HttpExpect => Some("answer".into()),
            _ => None,
        });
        assert_eq!(
            names,
            [
                "tab 1", "connect", "welcome", "tab 2", "connect", "welcome", "tab 1", "leave",
                "get", "answer"
            ]
        );
    }

    /// Extension events come in a flood only when nothing the spec lists comes between them.
    #[test]
    fn a_flood_is_many_extension_events_to_a_quiet_browser() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let status = || "status".to_string();
        let quiet = Arrivals {
            arrived: (0..60).map(|k| (at(k * 2), status())).collect(),
            ..Default::default()
        };
        let floods = quiet.floods();
        assert_eq!(floods.len(), 1, "{floods:?}");
        assert!(floods[0].contains(r#""status": 60 in this cell, up to 60 within one second"#));
        // Three beside each of 60 relayed frames: 180 in 120 ms, none in a quiet second.
        let mut busy = Arrivals::default();
        for k in 0..60 {
            busy.arrived.push((at(k * 2), "stream".to_string()));
            busy.arrived
                .extend((0..3).map(|_| (at(k * 2 + 1), status())));
        }
        assert!(busy.floods().is_empty());
        // Spread over more than a second, the same 60 are no flood either.
        let slow = Arrivals {
            arrived: (0..60).map(|k| (at(k * 25), status())).collect(),
            ..Default::default()
        };
        assert!(slow.floods().is_empty());
    }

    /// A stream or stream_end after its message's stream_end is dropped as it arrives, and a
    /// recorded late one accounts for one of its name.
    #[test]
    fn events_after_their_message_end_are_dropped_as_they_arrive() {
        let e = |name: &str, text: &str, id: &str| super::super::transport::Event {
            name: name.into(),
            data: json!({"text": text, "messageId": id}),
        };
        let mut a = Arrivals::default();
        assert!(a.admit(e("stream", "He", "m1"), None).is_some());
        assert!(a.admit(e("stream_end", "Hello", "m1"), None).is_some());
        // Another message's stream, and a typing, are not late.
        assert!(a.admit(e("stream", "Hi", "m2"), None).is_some());
        assert!(a.admit(e("typing", "", "m1"), None).is_some());
        assert!(a.admit(e("stream", "Hell", "m1"), None).is_none());
        assert!(a.admit(e("stream_end", "Hello", "m1"), None).is_none());
        // A stream that does not extend the last is kept (its text shows the difference).
        assert!(a.admit(e("stream", "Xyz", "m2"), None).is_some());
        assert_eq!(a.arrived.len(), 7);
        assert!(a.match_late("stream"));
        assert!(!a.match_late("stream"));
        let open: Vec<String> = a.unaccounted().map(|d| d.layer_key()).collect();
        assert_eq!(open, ["stream-after-end:stream_end"]);
    }

    #[test]
    fn two_closes_of_one_side_end_two_connections_oldest_first() {
        let s = scripted(&[
            (UP, r#"40/ws/agent,{"apiKey":"[redacted]","agentId":"a"}"#),
            (DOWN, r#"42/ws/agent,["config",{}]"#),
            (UP, r#"40/ws/agent,{"apiKey":"[redacted]","agentId":"a"}"#),
            (UP, "1"),
            (UP, "1"),
        ]);
        assert_eq!(
            agent_steps(&s),
            ["connect(false)", "connect(false)", "close", "close"]
        );
        // A hub's end of the first after the second connected: the first was answered.
        let s = scripted(&[
            (UP, r#"40/ws/agent,{"apiKey":"[redacted]","agentId":"a"}"#),
            (DOWN, r#"42/ws/agent,["config",{}]"#),
            (UP, r#"40/ws/agent,{"apiKey":"[redacted]","agentId":"a"}"#),
            (DOWN, "1"),
        ]);
        assert_eq!(
            agent_steps(&s),
            ["connect(false)", "connect(false)", "ended(false)"]
        );
    }

    fn key(seq: f64) -> crate::lane::SeqKey {
        crate::lane::SeqKey { run: 1.0, seq }
    }

    #[test]
    fn a_health_probe_is_asked_with_another_agent_where_the_recording_had_one() {
        let others = Bystanders {
            spans: vec![
                ("hub".into(), "other".into(), key(1.0), Some(key(3.0))),
                ("hub".into(), "probed".into(), key(0.0), None),
                ("elsewhere".into(), "far".into(), key(0.0), None),
            ],
            folder: String::new(),
            group: String::new(),
        }
        .for_group("hub", "probed");
        assert_eq!(others.present_at(key(0.5), "probed"), None);
        assert_eq!(
            others.present_at(key(2.0), "probed").as_deref(),
            Some("other")
        );
        // Its end ends it; the probed agentId's own agent is none; another folder's neither.
        assert_eq!(others.present_at(key(3.0), "probed"), None);
        assert_eq!(
            others.present_at(key(2.0), "other").as_deref(),
            Some("probed")
        );
        let probe = |line: &str| health_probe(&serde_json::from_str(line).unwrap());
        assert_eq!(
            probe(r#"{"method":"GET","path":"/api/agent/a-1/health/","body":null}"#).as_deref(),
            Some("a-1")
        );
        assert_eq!(
            probe(r#"{"method":"GET","path":"/api/agent/health"}"#),
            None
        );
        assert_eq!(
            probe(r#"{"method":"POST","path":"/api/agent/a/health"}"#),
            None
        );
        // Scripted: the other agent connects before the probe inside its span, leaves before
        // the one after it.
        let mut lines = vec![(
            "http→hub",
            r#"{"method":"GET","path":"/api/agent/probed/health"}"#,
        )];
        lines.push(("hub→http", r#"{"status":200,"body":{}}"#));
        lines.push(lines[0]);
        lines.push(lines[1]);
        lines.push(lines[0]);
        lines.push(lines[1]);
        let others = Bystanders {
            spans: vec![("hub".into(), "other".into(), key(1.0), Some(key(3.0)))],
            folder: "hub".into(),
            group: "probed".into(),
        };
        let s = script(merged(&lines), 1, &cfg(), &others);
        let kinds: Vec<String> = s
            .steps
            .iter()
            .map(|(_, st)| match st {
                Step::Bystander(b) => format!("bystander {b:?}"),
                Step::HttpSend(..) => "send".into(),
                Step::HttpExpect => "answer".into(),
                _ => "other".into(),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "send",
                "answer",
                "bystander Some(\"other\")",
                "send",
                "answer",
                "bystander None",
                "send",
                "answer"
            ]
        );
    }

    #[test]
    fn an_agent_handshake_is_sent_as_recorded_with_a_key_of_its_kind() {
        let c = cfg();
        let auth = |key: &str| Some(json!({ "apiKey": key, "agentId": "a" }));
        let sent =
            |key: &str, refused| agent_auth(auth(key), refused, &c).unwrap()["apiKey"].clone();
        assert_eq!(sent("[redacted]", false), "Key-123");
        assert_eq!(sent("[redacted:case]", true), "kEY-123");
        assert_ne!(sent("[redacted:other]", true), "Key-123");
        // Not judged when recorded: the key where the hub admitted it.
        assert_eq!(sent("[redacted:unverified]", false), "Key-123");
        // In clear: the recorded hub's key where it admitted it, as recorded where it refused.
        assert_eq!(sent("old-key", false), "Key-123");
        assert_eq!(sent("old-key", true), "old-key");
        // What the handshake lacks stays lacking.
        assert_eq!(
            agent_auth(Some(json!({ "apiKey": "[redacted]" })), true, &c),
            Some(json!({ "apiKey": "Key-123" }))
        );
        assert_eq!(agent_auth(None, true, &c), None);
        // A refusal of a key the recorder could not judge is not played.
        assert!(agent_unplayed(auth("[redacted:unverified]").as_ref(), true).is_some());
        assert!(agent_unplayed(auth("[redacted:unverified]").as_ref(), false).is_none());
        assert!(agent_unplayed(auth("[redacted]").as_ref(), true).is_none());
    }

    /// A recorded raw line is sent as it was; a cut one whole at its declared length, what came
    /// first and the rest filled in.
    #[test]
    fn a_huge_difference_is_shown_as_excerpts_and_named_by_its_field() {
        let big = "x".repeat(3_000_000);
        let a = json!({ "dir": "hub→browser", "event": "message", "data": { "text": format!("{big}A") } });
        let b = json!({ "dir": "hub→browser", "event": "message", "data": { "text": format!("{big}B") } });
        let out = match compare(&[a], &[b]) {
            Outcome::Fail(m) => m,
            o => panic!("{o:?}"),
        };
        assert!(out.len() < 3_000, "{} bytes", out.len());
        assert!(out.contains("differs at /data/text: "), "{out}");
        assert!(out.contains("bytes; first differs at byte 3000"), "{out}");
        assert!(out.contains("xA\",") && out.contains("xB\","), "{out}");
        // Short values are shown whole.
        let (r, l) = shown_pair("{\"a\":1}", "{\"a\":2}");
        assert_eq!((r.as_str(), l.as_str()), ("{\"a\":1}", "{\"a\":2}"));
        assert_eq!(
            first_difference(&json!({"a": [1, {"b": 2}]}), &json!({"a": [1, {"b": 3}]})),
            "/a/1/b"
        );
    }

    #[test]
    fn the_forward_to_the_agent_is_compared_with_its_own_message_id() {
        let recorded = json!({ "type": "message", "clientId": "alice", "text": "hi", "parts": [], "messageId": "r-1" });
        let same = json!({ "type": "message", "clientId": "alice", "text": "hi", "parts": [], "messageId": "l-9" });
        let ev = |d: &Value| json!({ "dir": "hub→agent", "event": "message", "data": d });
        assert!(matches!(
            compare(&[ev(&recorded)], &[forwarded(&recorded, &same)]),
            Outcome::Pass { .. }
        ));
        let mut upper = same.clone();
        upper["text"] = json!("HI");
        let Outcome::Fail(m) = compare(&[ev(&recorded)], &[forwarded(&recorded, &upper)]) else {
            panic!()
        };
        assert!(
            m.starts_with("hub→agent event #0 differs at /data/text: "),
            "{m}"
        );
        let mut no_id = same.clone();
        no_id.as_object_mut().unwrap().remove("messageId");
        let Outcome::Fail(m) = compare(&[ev(&recorded)], &[forwarded(&recorded, &no_id)]) else {
            panic!()
        };
        assert!(m.contains("differs at /data/messageId: "), "{m}");
    }

    #[test]
    fn a_cut_line_is_sent_at_the_length_it_declared() {
        use tokio_tungstenite::tungstenite::Message;
        assert_eq!(raw_message("42/x,[1"), Message::text("42/x,[1"));
        assert_eq!(raw_message("cut:6:42/x,"), Message::text("42/x, "));
        assert_eq!(
            raw_message("cut:4:binary:AAE="),
            Message::binary(vec![0u8, 1, 0, 0])
        );
        // A declared length shorter than what came keeps what came.
        assert_eq!(raw_message("cut:1:abc"), Message::text("abc"));
    }
}
