//! The emulated Side Search client: a [`Driver`] that sends requests and logs every exchange,
//! and a [`Screen`] holding one open chat's state (history, options, ended) as the app does
//! (reference §1.3–§3, §6).

use super::profiles::{self, From, Msg, Profile, Reply, Request, Rng, Style};
use super::transport::{self, HttpReply, Limits, Target, TransportError};
use std::time::Duration;

/// How an exchange was made, which decides the rules it feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A request exactly as the emulated client builds it (with the right key).
    Client,
    /// A deliberate probe: no/wrong key, malformed body, other methods, unknown versions.
    Probe,
}

#[derive(Debug, Clone)]
pub struct Exchange {
    /// `scenario/step`.
    pub label: String,
    pub kind: Kind,
    pub method: String,
    pub url: String,
    pub request: Vec<u8>,
    /// Ids of the request's messages (messages and history) that a reply must not reuse,
    /// upper-cased: the user's, the app's and unknown ones. Not the assistant's: as far as the
    /// app knows those are the bridge's own (a restored chat's history holds the answers of an
    /// earlier server), and updating one in place by its id is the upsert the protocol
    /// provides.
    pub request_ids: Vec<String>,
    /// Statuses of redirects followed (307/308) or refused (301/302/303) on the way.
    pub redirects: Vec<u16>,
    pub result: Result<HttpReply, TransportError>,
    /// What the chat showed when the reply came (its messages, the request's own included), for
    /// a request a [`Screen`] sent; `None` for probes.
    pub shown: Option<Vec<Msg>>,
    /// Part of the bridge's stop: one of the timeouts in a row after which the driver gave up
    /// ([`Driver::give_up_after`]), a refused connection after accepted ones (and the request
    /// before it, when it got no reply), or an exchange not sent after either. One fault,
    /// wherever it meets a rule: no rule judges such an exchange as its own.
    pub stopped: bool,
}

impl Exchange {
    pub fn status(&self) -> Option<u16> {
        self.result.as_ref().ok().map(|r| r.status)
    }
    pub fn body(&self) -> Option<&[u8]> {
        self.result.as_ref().ok().map(|r| r.body.as_slice())
    }
    /// What profile `p` makes of the reply; transport failures are dropped replies too.
    pub fn judged(&self, p: Profile) -> Result<Reply, String> {
        match &self.result {
            Ok(r) => profiles::judge_reply(p, r),
            Err(e) => Err(e.to_string()),
        }
    }
    /// The messages of `r` (this exchange's reply) that change what the chat shows, and how
    /// many do not. A message whose id the chat already holds with the same `from`, content
    /// and sources is re-sent unchanged: the app upserts by id, so nothing changes on screen
    /// (a bridge may re-send its whole transcript every time), and no rule reads it as a new
    /// answer. Every message of a probe's reply is new.
    pub fn changed<'a>(&self, r: &'a Reply) -> (Vec<&'a Msg>, usize) {
        let Some(shown) = &self.shown else {
            return (r.messages.iter().collect(), 0);
        };
        let (same, changed): (Vec<&Msg>, Vec<&Msg>) = r.messages.iter().partition(|m| {
            shown.iter().any(|h| {
                h.key() == m.key()
                    && h.from == m.from
                    && h.content == m.content
                    && h.sources == m.sources
            })
        });
        (changed, same.len())
    }
    pub fn elapsed(&self) -> Option<Duration> {
        self.result.as_ref().ok().map(|r| r.elapsed)
    }
    /// `describe()` followed by a reason.
    pub fn describe_with(&self, why: &str) -> String {
        format!("{}: {why}", self.describe())
    }
    /// What the app shows from the reply: status, message texts and options (for quoting a
    /// reply in a verdict).
    pub fn describe_reply(&self) -> String {
        match self.judged(Profile::Gamma) {
            Ok(r) => {
                let texts: Vec<&str> = r.messages.iter().map(|m| m.content.as_str()).collect();
                let mut s = format!(
                    "status {}: {:?}",
                    self.status().unwrap_or(0),
                    texts.join(" | ")
                );
                if let Some(o) = r.options {
                    s.push_str(&format!(
                        ", options {{disableSendHistory: {:?}, endSession: {:?}}}",
                        o.disable_send_history, o.end_session
                    ));
                }
                s
            }
            Err(_) => self.describe(),
        }
    }
    /// The status and what the current app makes of it, for details.
    pub fn describe(&self) -> String {
        match &self.result {
            Err(e) => format!("{}: {e}", self.label),
            Ok(r) => match profiles::decode_reply(Profile::Gamma, r) {
                Ok(_) => format!("{}: status {}", self.label, r.status),
                Err(e) => format!("{}: status {}, undecodable ({e})", self.label, r.status),
            },
        }
    }
}

pub struct Driver {
    pub target: Target,
    pub key: Option<String>,
    pub limits: Limits,
    pub rng: Rng,
    pub log: Vec<Exchange>,
    /// After this many consecutive timeouts the bridge is taken as gone: later exchanges fail
    /// at once with [`TransportError::GaveUp`] (so a hanging bridge costs a few timeouts, not
    /// one per exchange).
    pub give_up_after: usize,
    /// Settle each timeout at once with [`LIVENESS`] requests ([`Driver::settle`]): on for a
    /// check, off where every request sent is the recording's (`record`).
    pub liveness: bool,
    timeouts_in_a_row: usize,
    /// Send on the connection the previous reply left open, as the app's HTTP client does
    /// ([`transport::send_kept`]); off: one connection per request.
    keep_alive: bool,
    kept: Option<transport::Kept>,
    /// The cause of the last timeout in a row when it was a body stalled short of its
    /// Content-Length, said with [`TransportError::GaveUp`].
    last_stall: Option<String>,
    /// Why the bridge is gone (its process exited, or a connection was refused after earlier
    /// ones were accepted): nothing more is sent ([`TransportError::Gone`]).
    gone: Option<String>,
    /// The bridge's process, when this run started it: its exit is seen, with its status.
    pub process: Option<std::sync::Arc<std::sync::Mutex<super::spawn::BridgeProcess>>>,
}

impl Driver {
    pub fn new(
        url: &str,
        key: Option<String>,
        limits: Limits,
        seed: u64,
    ) -> Result<Driver, TransportError> {
        Ok(Driver {
            target: Target::parse(url)?,
            key: key.filter(|k| !k.is_empty()),
            limits,
            rng: Rng::new(seed),
            log: Vec::new(),
            give_up_after: 3,
            liveness: false,
            timeouts_in_a_row: 0,
            keep_alive: false,
            kept: None,
            last_stall: None,
            gone: None,
            process: None,
        })
    }

    /// Sends the following requests on the connection each reply leaves open (`true`), as the
    /// app's HTTP client does, or each on a connection of its own (`false`, closing a kept one).
    pub fn set_keep_alive(&mut self, on: bool) {
        self.keep_alive = on;
        if !on {
            self.kept = None;
        }
    }

    /// The app's headers: `Content-Type`, and the key only when one is saved.
    pub fn client_headers(&self) -> Vec<(String, String)> {
        let mut h = vec![("Content-Type".to_string(), "application/json".to_string())];
        if let Some(k) = &self.key {
            h.push(("x-sidebridge-key".into(), k.clone()));
        }
        h
    }

    /// A POST probe to the endpoint with the client's usual headers and no message ids.
    pub async fn probe(&mut self, label: &str, body: Vec<u8>) -> usize {
        let headers = self.client_headers();
        self.exchange(label, Kind::Probe, None, "POST", headers, body, vec![])
            .await
    }

    /// Sends and logs one exchange; follows 307/308 (same method and body, as the platform
    /// does) up to 5 times; a 301/302/303 is recorded and not followed. A timeout is settled
    /// at once ([`Driver::settle`]), so the rule that reads this exchange sees whether it was
    /// the bridge's stop ([`Exchange::stopped`]) or this request's alone. Returns its index in
    /// the log (settling logs after it).
    #[allow(clippy::too_many_arguments)]
    pub async fn exchange(
        &mut self,
        label: &str,
        kind: Kind,
        target: Option<Target>,
        method: &str,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        request_ids: Vec<String>,
    ) -> usize {
        let i = self
            .exchange_once(label, kind, target, method, headers, body, request_ids)
            .await;
        self.settle().await;
        i
    }

    #[allow(clippy::too_many_arguments)]
    async fn exchange_once(
        &mut self,
        label: &str,
        kind: Kind,
        target: Option<Target>,
        method: &str,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        request_ids: Vec<String>,
    ) -> usize {
        let mut t = target.unwrap_or_else(|| self.target.clone());
        let url = t.url.to_string();
        let mut redirects = Vec::new();
        let result = if let Some(gone) = &self.gone {
            Err(TransportError::Gone(gone.clone()))
        } else if self.stopped() {
            Err(TransportError::GaveUp(
                self.timeouts_in_a_row,
                self.last_stall.clone().unwrap_or_default(),
            ))
        } else {
            loop {
                let r = if self.keep_alive {
                    let req = transport::Req {
                        target: &t,
                        method,
                        headers: &headers,
                        body: &body,
                    };
                    transport::send_kept(&mut self.kept, &req, self.limits).await
                } else {
                    self.kept = None;
                    transport::send(&t, method, &headers, &body, self.limits).await
                };
                match &r {
                    Ok(reply) if matches!(reply.status, 307 | 308) && redirects.len() < 5 => {
                        redirects.push(reply.status);
                        match reply.header("location").map(|l| t.join(l)) {
                            Some(Ok(next)) => t = next,
                            _ => break r,
                        }
                    }
                    Ok(reply) if matches!(reply.status, 301..=303) => {
                        redirects.push(reply.status);
                        break r;
                    }
                    _ => break r,
                }
            }
        };
        let mut result = result;
        if let Ok(r) = &mut result {
            profiles::make_opaque_if_undecodable(r);
        }
        if matches!(
            result,
            Err(TransportError::Timeout { .. }
                | TransportError::Idle { .. }
                | TransportError::Stalled { .. },)
        ) {
            self.timeouts_in_a_row += 1;
            self.last_stall = match &result {
                Err(TransportError::Stalled { got, expected, .. }) => Some(format!(
                    " (the last: {})",
                    super::transport::stalled_body(*got, *expected)
                )),
                _ => None,
            };
        } else if !matches!(result, Err(TransportError::GaveUp(..))) {
            self.timeouts_in_a_row = 0;
        }
        let not_sent = result.as_ref().is_err_and(TransportError::is_not_sent);
        // A refusal after an accepted connection: the bridge is gone, and the request before,
        // when it got no reply, is where it went (one stop, SB-D1's).
        let refused = matches!(result, Err(TransportError::Refused))
            && self.log.iter().any(|x| {
                !matches!(
                    x.result,
                    Err(TransportError::Refused | TransportError::Connect(_))
                )
            });
        if refused {
            self.gone = Some(match self.exit_status() {
                Some(st) => format!("the bridge exited ({st}) before `{label}`"),
                None => refused_connection(label),
            });
            if let Some(prev) = self.log.last_mut()
                && prev.result.is_err()
            {
                prev.stopped = true;
            }
        }
        self.log.push(Exchange {
            label: label.into(),
            kind,
            method: method.into(),
            url,
            request: body,
            request_ids,
            redirects,
            result,
            shown: None,
            stopped: not_sent || refused,
        });
        // The timeout that reaches the limit: it and the ones before it in the row are the stop.
        if !not_sent && self.give_up_after > 0 && self.timeouts_in_a_row == self.give_up_after {
            let n = self.log.len();
            for x in &mut self.log[n - self.give_up_after..] {
                x.stopped = true;
            }
        }
        self.log.len() - 1
    }

    /// Whether the bridge has stopped answering: the limit of timeouts in a row was reached.
    fn stopped(&self) -> bool {
        self.give_up_after > 0 && self.timeouts_in_a_row >= self.give_up_after
    }

    /// Settles an open run of timeouts (when [`Driver::liveness`] is on): a bridge that
    /// stalled on one request (slow there, or flawed on that input: a body it cannot parse)
    /// and one that stopped answering altogether are told apart by sending [`LIVENESS`]
    /// session starts of fresh chats, the plainest request there is, each on a connection of
    /// its own, until one is answered (the run ends: each timeout is its own rule's) or the
    /// limit is reached (the run is the stop, [`Exchange::stopped`]). Without it, three
    /// malformed probes a bridge never answers read as a bridge that stopped, and the requests
    /// after them were not sent. At most `give_up_after` requests, each bounded by the
    /// transport's limits; nothing is sent when no run is open.
    async fn settle(&mut self) {
        if !self.liveness {
            return;
        }
        self.settle_hang_up().await;
        let kept = std::mem::replace(&mut self.keep_alive, false);
        let mut n = 0;
        while self.timeouts_in_a_row > 0 && !self.stopped() && self.give_up_after > 0 {
            n += 1;
            let body = Request {
                version: "1.0".into(),
                chat_id: self.rng.uuid(),
                messages: None,
                history: Some(Vec::new()),
                extra: Vec::new(),
            }
            .encode(Style::App, &mut self.rng);
            let headers = self.client_headers();
            let label = format!("{LIVENESS}/{n}");
            self.exchange_once(&label, Kind::Probe, None, "POST", headers, body, vec![])
                .await;
        }
        self.keep_alive = kept;
    }

    /// The exit status of the bridge's process, when this run started it and it has exited.
    fn exit_status(&self) -> Option<std::process::ExitStatus> {
        let p = self.process.as_ref()?;
        let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
        p.exited_within(Duration::ZERO)
    }

    /// After a request the bridge hung up on, whether it is still there: its process, when
    /// this run started it (polled for 300 ms, the time a dying process takes to be reaped),
    /// then a new connection (no request on it). Exited, or refused: the bridge is gone, the
    /// hang-up was where it went ([`Exchange::stopped`]), and nothing more is sent; so the
    /// rule reading that request sees the exit as SB-D1's at once, not as its own no-reply.
    async fn settle_hang_up(&mut self) {
        let Some(x) = self.log.last() else {
            return;
        };
        if self.gone.is_some() || !matches!(&x.result, Err(e) if e.is_hang_up()) {
            return;
        }
        let label = x.label.clone();
        let mut gone = None;
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if let Some(st) = self.exit_status() {
                gone = Some(format!("the bridge exited ({st}) after `{label}`"));
                break;
            }
            if self.process.is_none() {
                break;
            }
        }
        if gone.is_none() && transport::refuses(&self.target, self.limits).await {
            gone = Some(format!(
                "the bridge no longer accepts connections (a connection opened after `{label}` was refused)"
            ));
        }
        if gone.is_some() {
            self.gone = gone;
            if let Some(x) = self.log.last_mut() {
                x.stopped = true;
            }
        }
    }
}

/// Why the bridge is gone when the connection of the request `label` was refused after
/// earlier ones were accepted ([`TransportError::Gone`]).
pub fn refused_connection(label: &str) -> String {
    format!("the bridge no longer accepts connections (`{label}`'s connection was refused)")
}

/// The label of a session start sent only to learn whether a bridge that timed out still
/// answers ([`Driver::settle`]).
pub const LIVENESS: &str = "liveness/session-start";

/// One open assistant screen of one chat.
#[derive(Debug, Clone)]
pub struct Screen {
    pub chat_id: String,
    /// Everything the chat holds, oldest first (what `history` carries).
    pub history: Vec<Msg>,
    pub send_history: bool,
    pub ended: bool,
    pub style: Style,
    pub version: String,
    /// Extra top-level request keys (legacy `type`, future fields).
    pub extra: Vec<(String, serde_json::Value)>,
    /// Keep reply ids as the bridge wrote them (a control, not the app: the app upper-cases).
    pub keep_id_case: bool,
}

impl Screen {
    pub fn new(rng: &mut Rng) -> Screen {
        Screen {
            chat_id: rng.uuid(),
            history: Vec::new(),
            send_history: true,
            ended: false,
            style: Style::App,
            version: "1.0".into(),
            extra: Vec::new(),
            keep_id_case: false,
        }
    }

    /// The same chat reopened from the app's history: a new screen, fresh options.
    pub fn reopen(&self) -> Screen {
        Screen {
            send_history: true,
            ended: false,
            ..self.clone()
        }
    }

    /// [`Exchange::request_ids`] of `req`.
    fn ids(req: &Request) -> Vec<String> {
        req.messages
            .iter()
            .chain(req.history.iter())
            .flatten()
            .filter(|m| m.from != From::Assistant)
            .map(Msg::key)
            .collect()
    }

    /// Session start: no `messages`, `history` always present (§1.3).
    pub async fn start(&mut self, d: &mut Driver, label: &str) -> usize {
        let req = Request {
            version: self.version.clone(),
            chat_id: self.chat_id.clone(),
            messages: None,
            history: Some(self.history.clone()),
            extra: self.extra.clone(),
        };
        let body = req.encode(self.style, &mut d.rng);
        let headers = d.client_headers();
        let i = d
            .exchange(
                label,
                Kind::Client,
                None,
                "POST",
                headers,
                body,
                Self::ids(&req),
            )
            .await;
        d.log[i].shown = Some(self.history.clone());
        // A session-start reply that fails to decode is silently ignored.
        if let Ok(reply) = d.log[i].judged(Profile::App) {
            self.apply(reply);
        }
        i
    }

    /// A send (§1.4); `None` when the screen has ended (refused locally, nothing sent).
    pub async fn send(&mut self, d: &mut Driver, text: &str, label: &str) -> Option<usize> {
        if self.ended {
            return None;
        }
        let id = d.rng.uuid();
        let m = Msg::user(&id, text);
        if !text.is_empty() {
            self.history.push(m.clone());
        }
        let req = Request {
            version: self.version.clone(),
            chat_id: self.chat_id.clone(),
            messages: Some(vec![m]),
            history: self.send_history.then(|| self.history.clone()),
            extra: self.extra.clone(),
        };
        let body = req.encode(self.style, &mut d.rng);
        let headers = d.client_headers();
        let i = d
            .exchange(
                label,
                Kind::Client,
                None,
                "POST",
                headers,
                body,
                Self::ids(&req),
            )
            .await;
        d.log[i].shown = Some(self.history.clone());
        match d.log[i].judged(Profile::App) {
            Ok(reply) => self.apply(reply),
            Err(e) => {
                let bubble_id = d.rng.uuid();
                self.history.push(Msg {
                    id: bubble_id,
                    from: From::System,
                    content: format!("Failed to communicate with Side Bridge: {e}"),
                    sources: Vec::new(),
                });
            }
        }
        Some(i)
    }

    /// Messages first (upsert by id, empty content skipped), then options merged (§2, §3.1).
    pub fn apply(&mut self, reply: Reply) {
        for m in reply.messages {
            if m.content.is_empty() {
                continue;
            }
            let mut m = m;
            if !self.keep_id_case {
                m.id = m.key();
            }
            match self.history.iter_mut().find(|h| h.key() == m.key()) {
                Some(slot) => *slot = m,
                None => self.history.push(m),
            }
        }
        if let Some(o) = reply.options {
            if let Some(d) = o.disable_send_history {
                self.send_history = !d;
            }
            if o.end_session == Some(true) {
                self.ended = true;
            }
        }
    }
}
