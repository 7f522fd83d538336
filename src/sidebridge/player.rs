//! `replay sidebridge`: re-sends recorded cells' requests to a bridge build and compares the
//! normalized events (ids interned) of the recorded and the replayed exchanges.
//!
//! Requests go out in the recorded order across cells (`(run, seq)`), so interleaved chats are
//! replayed interleaved. Per request: the method, path, headers (hop-by-hop dropped; redaction
//! markers put back: `[redacted]` → `--key`, dropped without one; a wrong key's marker → a
//! wrong key of its kind, [`wire::unredact`]) and body, one at a time; a 307/308 is followed like the client follows it (a
//! recorded one with its recorded follow-up folded into one exchange: the app sees one reply). Reply ids differ between runs, so ids the recorded bridge gave are
//! rewritten in later request bodies to the ids the replayed bridge gave in the same position
//! (the client would carry the new ids in its history). The first differing event is shown as
//! a diff. `--write-current` writes the replayed replies as `bridge→client.current.ndjson`
//! beside the recorded lane (same `run`/`seq`), which the merged view then prefers.

use super::normalizer::{self, SIDEBRIDGE_EVENTS};
use super::spawn::BridgeSpec;
use super::transport::{self, Limits, Target};
use super::wire::{self, Envelope};
use crate::cell::Cell;
use crate::cli::exit;
use crate::lane::Entry;
use crate::protocol::Protocol;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;

pub struct ReplayOptions {
    pub recordings: Vec<PathBuf>,
    pub cell: Option<String>,
    pub bridge: BridgeSpec,
    pub limits: Limits,
    /// Write the replayed replies as `bridge→client.current.ndjson`, with this file mode.
    pub write_current: Option<u32>,
    /// Replay a cell that differs from its recording once more, and set aside what differs
    /// between the two replays ([`hold_against_second`]).
    pub second_run: bool,
}

/// Which cells' compared lists a replay keeps ([`CellReplay::compared`]).
#[derive(Debug, Clone, Copy)]
enum Keep<'a> {
    Nothing,
    /// Those whose replay differs from the recording: a second replay is held against them.
    Differing,
    /// The cells at these indices (ascending), as the replay gave them (a second replay: the
    /// cells the first found differing).
    These(&'a [usize]),
}

/// The outcome of one cell.
#[derive(Debug, Clone, Default)]
pub struct CellReplay {
    pub key: String,
    pub exchanges: usize,
    /// `None` when every event matched.
    pub divergence: Option<String>,
    /// The replayed events, before normalization (what a parity leg compares).
    pub events: Vec<Value>,
    /// Replies not read whole (over `--max-body`), as `(request number in the cell, limit)`:
    /// such a reply was never seen, so the cell is no evidence either way.
    pub unread: Vec<(usize, usize)>,
    /// Why some of the cell's requests were not sent (the bridge had stopped answering).
    pub unsent: Option<String>,
    /// The recorded and the replayed events as compared (normalized, ids interned), where the
    /// replay kept them ([`Keep`]).
    pub compared: Option<(Vec<Value>, Vec<Value>)>,
    /// What a second replay of a differing cell told ([`hold_against_second`]), as lines.
    pub second: Vec<String>,
    /// What of the recording was not replayed (a last line cut short), as lines.
    pub notes: Vec<String>,
    /// The recording is unusable (a lane missing or empty, a reply missing): the cell was not
    /// replayed, and the replay exits 2.
    pub invalid: Option<String>,
    /// Why the cell was not replayed (whole) though its recording is fine: the bridge exited
    /// during another cell.
    pub skip: Option<String>,
    /// The bridge exited during this cell: this cell's verdict names it.
    pub exited: bool,
}

/// Requests in a row the bridge answers none of (each waited the whole bound) after which the
/// rest of a replay is not sent: a bridge that stopped answering would otherwise hold the
/// replay for the bound times every request left.
const SILENT_IN_A_ROW: usize = 2;

struct Pair {
    request: Envelope,
    /// The request's place in the recording, `(run, seq)`: replay follows it across cells.
    at: (f64, f64),
    reply: Option<(Envelope, f64, f64)>,
}

/// The `(id, from)` of the messages under `keys` of a body, ids upper-cased, read as the app
/// reads JSON (a reply with an extension the app accepts and serde refuses, such as `1e400`,
/// still maps its ids).
fn message_ids(body: &[u8], keys: &[&str]) -> Vec<(String, Value)> {
    let Ok(v) = super::profiles::parse_json(body) else {
        return Vec::new();
    };
    keys.iter()
        .filter_map(|k| v.get(k).and_then(Value::as_array))
        .flatten()
        .filter_map(|m| {
            let id = m.get("id").and_then(Value::as_str)?.to_ascii_uppercase();
            Some((id, m.get("from").cloned().unwrap_or(Value::Null)))
        })
        .collect()
}

/// Pairs the recorded reply's new messages with the replayed reply's by sender, in order:
/// the `n`th new answer from the assistant with the `n`th, a system note with a system note.
/// A message from another sender is never its counterpart (a build that re-sends the user's
/// message before its answer would otherwise lend the user's id to the recorded answer, and
/// every later history would carry the user's id on the answer).
fn pair_new(recorded: &[(String, Value)], replayed: &[(String, Value)]) -> Vec<(String, String)> {
    let mut taken = vec![false; replayed.len()];
    let mut out = Vec::new();
    for (old, from) in recorded {
        if let Some(j) = (0..replayed.len()).find(|&j| !taken[j] && replayed[j].1 == *from) {
            taken[j] = true;
            out.push((old.clone(), replayed[j].0.clone()));
        }
    }
    out
}

/// A cell's recorded exchanges, what makes its recording unusable (each naming the file and
/// the exchange; the cell is not replayed), and notes on what of it is not replayed (a last
/// line cut short, also said on stderr by the caller).
fn pairs(cell: &Cell) -> (Vec<Pair>, Vec<String>, Vec<String>) {
    let mut out: Vec<Pair> = Vec::new();
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let lane_path = |dir: &str| {
        cell.lanes
            .iter()
            .find(|l| l.dir == dir)
            .map(|l| l.path.clone())
            .unwrap_or_else(|| cell.path.join(format!("{dir}.ndjson")))
    };
    for dir in Protocol::SideBridge.directions() {
        if !cell.lanes.iter().any(|l| l.dir == *dir) {
            problems.push(format!(
                "{}: missing: the recording has no {dir} lane",
                lane_path(dir).display()
            ));
        }
    }
    if !problems.is_empty() {
        return (out, problems, notes);
    }
    let mut merged = cell.recorded();
    for e in merged.by_ref() {
        let Some(env) = Envelope::parse(&e.line) else {
            problems.push(format!("{} seq {}: not an envelope", e.dir, e.seq));
            continue;
        };
        if e.dir == "client→bridge" {
            out.push(Pair {
                request: env,
                at: (e.run, e.seq),
                reply: None,
            });
        } else if let Some(p) = out
            .iter_mut()
            .rev()
            .find(|p| p.request.exchange == env.exchange)
        {
            p.reply = Some((env, e.run, e.seq));
        }
    }
    let report = merged.into_report();
    problems.extend(report.errors.iter().map(|e| e.to_string()));
    let requests = lane_path("client→bridge");
    let replies = lane_path("bridge→client");
    let cut = |path: &std::path::Path| {
        let name = path.display().to_string();
        report
            .warnings
            .iter()
            .find(|w| w.starts_with(&name) && w.contains("last line is cut short"))
            .map(|w| w.split(": last line").next().unwrap_or(w).to_string())
    };
    if let Some(at) = cut(&requests) {
        notes.push(format!(
            "the last recorded request ({at}) is cut short (a recorder stopped mid-write): it \
             was not replayed"
        ));
    }
    let reply_cut = cut(&replies);
    if out.is_empty() && problems.is_empty() && notes.is_empty() {
        problems.push(format!(
            "{}: no request recorded: nothing to replay",
            requests.display()
        ));
    }
    let last = out.len().saturating_sub(1);
    for (i, p) in out.iter().enumerate() {
        if p.reply.is_some() {
            continue;
        }
        match &reply_cut {
            Some(at) if i == last => notes.push(format!(
                "the last recorded reply ({at}) is cut short (a recorder stopped mid-write): \
                 request #{} was replayed, its reply not compared",
                i + 1
            )),
            _ => problems.push(format!(
                "{}: no reply recorded for exchange {} (request #{} of the cell, {} seq {})",
                replies.display(),
                p.request.exchange,
                i + 1,
                requests.display(),
                p.at.1
            )),
        }
    }
    (fold_redirects(out), problems, notes)
}

/// A recorded 307/308 (with a `Location`) and the request that followed it are one exchange
/// for the client: its HTTP client follows the redirect with the same method and body and
/// hands the app only the final reply (reference §1.1). So the redirected request keeps its
/// own path and takes the final reply; the follow-up is not sent again (a bridge answering
/// directly got the message twice) and the hop is no failed reply (it showed as `non-2xx`,
/// `dropped: empty body`, and an error bubble the app never shows).
fn fold_redirects(pairs: Vec<Pair>) -> Vec<Pair> {
    let mut out: Vec<Pair> = Vec::with_capacity(pairs.len());
    let mut following = false;
    for p in pairs {
        if following && let Some(last) = out.last_mut() {
            last.reply = p.reply;
        } else {
            out.push(p);
        }
        following = out
            .last()
            .and_then(|l| l.reply.as_ref())
            .is_some_and(|(r, _, _)| r.is_followed_redirect());
    }
    out
}

/// One cell's replay in progress.
struct CellRun<'a> {
    cell: &'a Cell,
    pairs: Vec<Pair>,
    problems: Vec<String>,
    recorded: Vec<Value>,
    replayed: Vec<Value>,
    current: Vec<String>,
    unread: Vec<(usize, usize)>,
    /// Requests not sent because the bridge had stopped answering.
    unsent: usize,
    notes: Vec<String>,
    /// Requests not sent because the bridge had exited.
    not_sent_exited: usize,
}

/// The connection a replay sends on, as the app's HTTP client does: the one the previous reply
/// left open ([`transport::send_kept`]: HTTP/1.1 connections persist unless a side says
/// `close`), until a bridge is found deaf on one; then one connection per request.
struct Conn {
    kept: Option<transport::Kept>,
    reuse: bool,
}

/// Sends one recorded request as the client would: the recorded method, path, headers
/// (hop-by-hop dropped, redaction markers replaced) and body (recorded reply ids rewritten to
/// the replayed ones). A 307/308 is followed like the client follows it (same method and
/// body), whether or not the recording had one (a recorded hop is folded: [`fold_redirects`]).
/// Returns the request sent, the reply (or its error) as a lane records it, and the transport
/// error when there was one, by its kind (a bound that ran out, bridgewire's own --max-body).
async fn send_one(
    p: &Pair,
    (target, conn): (&Target, &mut Conn),
    key: Option<&str>,
    limits: Limits,
    ids: &HashMap<String, String>,
) -> (Envelope, Envelope, Option<transport::TransportError>) {
    let body = wire::unredact(&String::from_utf8_lossy(&p.request.body), key)
        .unwrap_or_else(|| String::from_utf8_lossy(&p.request.body).into_owned());
    let body = rename_ids(&body, ids);
    let headers: Vec<(String, String)> = p
        .request
        .headers
        .iter()
        .filter(|(k, _)| {
            !["host", "content-length", "connection", "transfer-encoding"]
                .contains(&k.to_ascii_lowercase().as_str())
        })
        // A body the lane holds decoded is sent as it is now, without its old coding.
        .filter(|(k, _)| {
            p.request.decoded_from.is_none() || !k.eq_ignore_ascii_case("content-encoding")
        })
        .filter_map(|(k, v)| wire::unredact(v, key).map(|v| (k.clone(), v)))
        .collect();
    let recorded_path = p.request.path.clone().unwrap_or_else(|| "/".into());
    let path = wire::unredact(&recorded_path, key).unwrap_or(recorded_path);
    let mut t = if path == "/" {
        target.clone()
    } else {
        let mut u = target.url.clone();
        let base = u.path().trim_end_matches('/').to_string();
        let (pp, q) = path
            .split_once('?')
            .map(|(a, b)| (a, Some(b)))
            .unwrap_or((&path, None));
        u.set_path(&format!("{base}{pp}"));
        u.set_query(q);
        Target::from_url(u).unwrap_or_else(|_| target.clone())
    };
    let method = p.request.method.clone().unwrap_or_else(|| "POST".into());
    let sent = Envelope {
        body: body.clone().into_bytes(),
        ..p.request.clone()
    };
    let mut hops = 0;
    let mut failed = None;
    let new = loop {
        let got = if conn.reuse {
            let req = transport::Req {
                target: &t,
                method: &method,
                headers: &headers,
                body: body.as_bytes(),
            };
            transport::send_kept(&mut conn.kept, &req, limits).await
        } else {
            transport::send(&t, &method, &headers, body.as_bytes(), limits).await
        };
        // Deaf on a kept connection: named once, in the reply that met it; later requests go
        // on connections of their own (each would wait the app's timeout again for one fault).
        if matches!(got, Err(transport::TransportError::DeafOnReuse { .. })) {
            conn.reuse = false;
            conn.kept = None;
        }
        match got {
            Ok(r) if matches!(r.status, 307 | 308) && hops < 5 => {
                hops += 1;
                match r.header("location").map(|l| t.join(l)) {
                    Some(Ok(next)) => t = next,
                    _ => {
                        break reply_envelope(p.request.exchange, r);
                    }
                }
            }
            // A body whose coding does not undo is no reply the app can read: an error, as
            // the transport's own.
            Ok(r) if r.opaque.is_some() => {
                break Envelope {
                    exchange: p.request.exchange,
                    status: Some(502),
                    error: r
                        .opaque
                        .map(|(why, _)| format!("malformed HTTP reply: {why}")),
                    ..Default::default()
                };
            }
            Ok(r) => {
                break reply_envelope(p.request.exchange, r);
            }
            Err(e) => {
                let error = Some(e.to_string());
                failed = Some(e);
                break Envelope {
                    exchange: p.request.exchange,
                    status: Some(502),
                    error,
                    ..Default::default()
                };
            }
        }
    };
    (sent, new, failed)
}

/// `body` with every recorded reply id (`ids`' keys, upper-cased; matched in any letter case)
/// renamed to the replayed bridge's id for it, in one pass over the recorded text. A renamed
/// id is never looked at again: the two bridges' ids are both opaque and may overlap (one
/// counter started one higher names the recorded `…2` `…3`), and renaming one id after
/// another renamed `…1`→`…2`, then both `…2`s →`…3`: the bridge was sent a history in which
/// different messages carried one id.
fn rename_ids(body: &str, ids: &HashMap<String, String>) -> String {
    if ids.is_empty() {
        return body.to_string();
    }
    let olds: Vec<&String> = ids.keys().collect();
    let Ok(ac) = aho_corasick::AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .match_kind(aho_corasick::MatchKind::LeftmostLongest)
        .build(&olds)
    else {
        return body.to_string();
    };
    let mut out = String::with_capacity(body.len());
    ac.replace_all_with(body, &mut out, |m, _, dst| {
        dst.push_str(&ids[olds[m.pattern().as_usize()]]);
        true
    });
    out
}

/// A reply as a lane records it; the transport has undone its `Content-Encoding` already.
fn reply_envelope(exchange: u64, r: transport::HttpReply) -> Envelope {
    let decoded_from = crate::content_coding::coding_name(&r.headers);
    Envelope {
        exchange,
        status: Some(r.status),
        headers: r.headers,
        body: r.body,
        decoded_from,
        ..Default::default()
    }
}

/// Replays `cells` against one bridge in the recorded order *across* them (by `(run, seq)` of
/// each request), so two chats recorded interleaved are replayed interleaved and a bridge that
/// mixes chats up is caught. Results come back in the order of `cells`. With the spawned
/// bridge's process, a request that meets a closed connection asks whether it exited (named in
/// that cell, nothing more sent); with `new_chats`, each recorded chat id is sent as a new one.
async fn replay_cells(
    cells: &[&Cell],
    target: &Target,
    key: Option<&str>,
    limits: Limits,
    write_current: Option<u32>,
    keep: Keep<'_>,
    (mut bridge, new_chats): (Option<&mut super::spawn::BridgeProcess>, bool),
) -> Vec<CellReplay> {
    // The replies written are redacted as the recording proxy redacts them, and the key this
    // replay sends is known up front (a bridge may echo it).
    let secrets = crate::redact::Secrets::new();
    if let Some(k) = key {
        secrets.learn(k);
    }
    let mut runs: Vec<CellRun> = cells
        .iter()
        .map(|c| {
            let (pairs, problems, notes) = pairs(c);
            CellRun {
                cell: c,
                pairs,
                problems,
                notes,
                not_sent_exited: 0,
                recorded: Vec::new(),
                replayed: Vec::new(),
                current: Vec::new(),
                unread: Vec::new(),
                unsent: 0,
            }
        })
        .collect();
    // What the recording holds is known too (a recording made with --keep-key, or by another
    // recorder, carries the key the bridge may echo back).
    for r in &runs {
        for p in &r.pairs {
            let _ = super::proxy::redacted_line(&secrets, &p.request, false, key);
            if let Some((rep, _, _)) = &p.reply {
                let _ = super::proxy::redacted_line(&secrets, rep, false, key);
            }
        }
    }
    // Replayed exchanges are compared as the recording holds them: redacted as the proxy
    // redacts (a bridge that quotes the key it was sent quotes it in the recording too, as
    // `[redacted]`). The line is also what `--write-current` writes.
    let as_recorded = |e: &Envelope| {
        let line = super::proxy::redacted_line(&secrets, e, false, key);
        let parsed = Envelope::parse(&String::from_utf8_lossy(&line)).unwrap_or_else(|| e.clone());
        (line, parsed)
    };
    let mut order: Vec<(f64, f64, usize, usize)> = Vec::new();
    for (ci, r) in runs.iter().enumerate() {
        if !r.problems.is_empty() {
            continue;
        }
        for (pi, p) in r.pairs.iter().enumerate() {
            order.push((p.at.0, p.at.1, ci, pi));
        }
    }
    order.sort_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then(a.1.total_cmp(&b.1))
            .then(a.2.cmp(&b.2))
            .then(a.3.cmp(&b.3))
    });
    // Reply ids are UUIDs: one map serves every chat.
    let mut ids: HashMap<String, String> = HashMap::new();
    // Replayed on chat ids of its own (a running bridge replayed again): each recorded chat id
    // is renamed to a new one, so the bridge meets chats it has not seen.
    if new_chats {
        for r in &runs {
            for p in &r.pairs {
                if let Ok(v) = super::profiles::parse_json(&p.request.body)
                    && let Some(chat) = v.get("chatId").and_then(Value::as_str)
                {
                    ids.entry(chat.to_ascii_uppercase()).or_insert_with(|| {
                        uuid::Uuid::new_v4()
                            .hyphenated()
                            .to_string()
                            .to_ascii_uppercase()
                    });
                }
            }
        }
    }
    // The bridge's exit, once seen: `(status, cell index, request number)`.
    let mut exit_seen: Option<(std::process::ExitStatus, usize, usize, String)> = None;
    // Ids each side's chat already knows: those the client sent (the user's messages, the
    // history) and those the bridge answered with. A reply that re-sends or edits a message
    // in place reuses its id, so only ids new to their side are paired (a build that re-sends
    // its transcript, or the user's own message, before each answer would otherwise pair the
    // recorded answer with the replayed re-send, and every later history would name the
    // wrong id).
    let mut seen_recorded: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut seen_replayed: std::collections::HashSet<String> = std::collections::HashSet::new();
    let sent_keys = ["messages", "history"];
    // The requests in a row that got no reply within the bound, as `<cell> #<n>`.
    let mut silent: Vec<String> = Vec::new();
    let mut conn = Conn {
        kept: None,
        reuse: true,
    };
    for (_, _, ci, pi) in order {
        if exit_seen.is_some() {
            runs[ci].not_sent_exited += 1;
            continue;
        }
        if silent.len() >= SILENT_IN_A_ROW {
            runs[ci].unsent += 1;
            continue;
        }
        let (sent, new, failed) =
            send_one(&runs[ci].pairs[pi], (target, &mut conn), key, limits, &ids).await;
        SENT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        use transport::TransportError::{Idle, Stalled, Timeout, TooLarge};
        // A reply that met a closed or refused connection: the bridge may have exited (a
        // crash). Then this request is where it did, and nothing more is sent: every later
        // request would meet a refused connection, one failure per chat for one fault.
        if let Some(err) = &new.error
            && !matches!(
                failed,
                Some(TooLarge(_) | Idle { .. } | Timeout { .. } | Stalled { .. })
            )
            && let Some(b) = bridge.as_deref_mut()
            && let Some(status) = b.exited_within(std::time::Duration::from_millis(700))
        {
            exit_seen = Some((status, ci, pi + 1, err.clone()));
            continue;
        }
        // A body stalled short of its end is no complete answer either.
        if let Some(Stalled { got, expected, .. }) = failed {
            silent.push(format!(
                "{} #{}: {}",
                runs[ci].cell.key,
                pi + 1,
                transport::stalled_body(got, expected)
            ));
        } else if matches!(failed, Some(Idle { .. } | Timeout { .. })) {
            silent.push(format!("{} #{}", runs[ci].cell.key, pi + 1));
        } else {
            silent.clear();
        }
        let r = &mut runs[ci];
        // bridgewire's own limit, not the bridge's fault: said apart from a reply that failed.
        if let Some(TooLarge(limit)) = failed {
            r.unread.push((pi + 1, limit));
        }
        let p = &r.pairs[pi];
        r.recorded.push(normalizer::request_event(&p.request));
        r.replayed
            .push(normalizer::request_event(&as_recorded(&sent).1));
        seen_recorded.extend(
            message_ids(&p.request.body, &sent_keys)
                .into_iter()
                .map(|m| m.0),
        );
        seen_replayed.extend(message_ids(&sent.body, &sent_keys).into_iter().map(|m| m.0));
        if let Some((rec, run, seq)) = &p.reply {
            let fresh = |body: &[u8], seen: &mut std::collections::HashSet<String>| {
                message_ids(body, &["messages"])
                    .into_iter()
                    .filter(|(i, _)| seen.insert(i.clone()))
                    .collect::<Vec<_>>()
            };
            let recorded_new = fresh(&rec.body, &mut seen_recorded);
            let replayed_new = fresh(&new.body, &mut seen_replayed);
            for (o, n) in pair_new(&recorded_new, &replayed_new) {
                if o != n {
                    ids.insert(o, n);
                }
            }
            let (line, replayed) = as_recorded(&new);
            r.recorded.push(normalizer::reply_event(rec));
            r.replayed.push(normalizer::reply_event(&replayed));
            if write_current.is_some() {
                r.current.push(
                    Entry {
                        ts: crate::util::now_ms() as f64,
                        run: *run,
                        seq: *seq,
                        dir: "bridge→client".into(),
                        line: String::from_utf8_lossy(&line).into_owned(),
                        extra: Default::default(),
                    }
                    .to_line(),
                );
            }
        }
    }
    runs.into_iter()
        .enumerate()
        .map(|(index, r)| {
            if !r.problems.is_empty() {
                let why = format!("unreadable recording: {}", r.problems.join("; "));
                return CellReplay {
                    key: r.cell.key.clone(),
                    divergence: Some(why.clone()),
                    invalid: Some(why),
                    notes: r.notes,
                    ..Default::default()
                };
            }
            if r.pairs.is_empty() {
                return CellReplay {
                    key: r.cell.key.clone(),
                    skip: Some("nothing to replay".into()),
                    notes: r.notes,
                    ..Default::default()
                };
            }
            // The bridge exited: named once, in the cell whose request met it; a cell it left
            // unreplayed is its consequence, not a fault of its own.
            if let Some((status, at, n, err)) = &exit_seen {
                let during = &cells[*at].key;
                if *at == index {
                    let why = format!(
                        "the bridge exited ({status}) during this cell: its request #{n} got no \
                         reply ({err}); no later request of any cell was sent"
                    );
                    // An earlier answer of this cell that differed is a fault of its own: said
                    // beside the exit.
                    let why = match earlier_divergence(&r.recorded, &r.replayed) {
                        Some(d) => format!("{why}\nbefore the exit, {d}"),
                        None => why,
                    };
                    return CellReplay {
                        key: r.cell.key.clone(),
                        exchanges: r.pairs.len(),
                        divergence: Some(why),
                        notes: r.notes,
                        exited: true,
                        ..Default::default()
                    };
                }
                if r.not_sent_exited > 0 {
                    let exit_reached = format!(
                        "the bridge exited ({status}) during {during} ({} of this cell's {} \
                         requests not sent)",
                        r.not_sent_exited,
                        r.pairs.len()
                    );
                    // What it answered before the exit is a fault of its own where it differs
                    // from the recording (compared as far as it went; no second replay can set
                    // wording aside, a bridge that exited is not replayed again).
                    if let Some(d) = earlier_divergence(&r.recorded, &r.replayed) {
                        return CellReplay {
                            key: r.cell.key.clone(),
                            exchanges: r.pairs.len(),
                            divergence: Some(format!(
                                "{d}\n(compared up to the exit: {exit_reached})"
                            )),
                            notes: r.notes,
                            ..Default::default()
                        };
                    }
                    return CellReplay {
                        key: r.cell.key.clone(),
                        exchanges: r.pairs.len(),
                        skip: Some(format!(
                            "not replayed: {exit_reached}{}",
                            if r.recorded.is_empty() {
                                String::new()
                            } else {
                                "; what it answered before the exit matches the recording".into()
                            }
                        )),
                        notes: r.notes,
                        ..Default::default()
                    };
                }
            }
            if let Some(mode) = write_current {
                let path = r.cell.path.join(format!(
                    "bridge→client{}.ndjson",
                    crate::lane::CURRENT_SUFFIX
                ));
                let mut text = r.current.join("\n");
                text.push('\n');
                if let Err(e) = crate::lane::write::write_file(&path, text.as_bytes(), mode) {
                    eprintln!("warning: {}: {e}", path.display());
                }
            }
            let mut r = r;
            super::normalizer::ScreenOptions::fold_all(&mut r.recorded);
            super::normalizer::ScreenOptions::fold_all(&mut r.replayed);
            let a = crate::normalize::normalize_list(r.recorded, SIDEBRIDGE_EVENTS);
            let b = crate::normalize::normalize_list(r.replayed.clone(), SIDEBRIDGE_EVENTS);
            // A reply not read whole is not compared as if it had been seen (its stand-in
            // error event would match another leg's, or be shown as the bridge's failure).
            let unsent = (r.unsent > 0).then(|| {
                format!(
                    "{} of its {} requests not sent: the bridge had answered none of the last \
                     {} requests sent in time ({}; no data for {:?}, or no whole reply within \
                     {:?}), so the rest of the replay was not sent (each would have waited as \
                     long)",
                    r.unsent,
                    r.pairs.len(),
                    silent.len(),
                    silent.join(", "),
                    limits.idle,
                    limits.total,
                )
            });
            let (divergence, compared) = match unread_reason(&r.unread).or_else(|| unsent.clone()) {
                Some(why) => (Some(format!("not compared: {why}")), None),
                None => {
                    let d = first_divergence(&a, &b);
                    let kept = match keep {
                        Keep::Nothing => false,
                        Keep::Differing => d.is_some(),
                        Keep::These(these) => these.binary_search(&index).is_ok(),
                    };
                    (d, kept.then_some((a, b)))
                }
            };
            CellReplay {
                key: r.cell.key.clone(),
                exchanges: r.pairs.len(),
                divergence,
                events: r.replayed,
                unread: r.unread,
                unsent,
                compared,
                notes: r.notes,
                ..Default::default()
            }
        })
        .collect()
}

/// The first difference between the events a cell exchanged before the bridge exited and the
/// recording's for the same requests, compared as a whole cell is ([`first_divergence`]).
fn earlier_divergence(recorded: &[Value], replayed: &[Value]) -> Option<String> {
    if recorded.is_empty() {
        return None;
    }
    let (mut a, mut b) = (recorded.to_vec(), replayed.to_vec());
    super::normalizer::ScreenOptions::fold_all(&mut a);
    super::normalizer::ScreenOptions::fold_all(&mut b);
    first_divergence(
        &crate::normalize::normalize_list(a, SIDEBRIDGE_EVENTS),
        &crate::normalize::normalize_list(b, SIDEBRIDGE_EVENTS),
    )
}

/// Whether a reply's transport error, as a replayed event carries it (its text), is a bound
/// running out: the app's timeout (no data for that long) or the whole-reply limit (no complete
/// reply in time). The replay itself goes by the error's kind ([`send_one`]); a parity leg
/// reads the events only.
/// A bridge deaf on a kept connection is no wait that ran out: it answered the same request on
/// a fresh connection ([`transport::DEAF_ON_REUSE`]), a fault of its own.
pub fn timed_out(error: &str) -> bool {
    (error.starts_with("no complete reply within")
        || error.starts_with("no data received for")
        // A body that began and stalled ([`transport::TransportError::Stalled`]).
        || error.contains(", and no data came for "))
        && !error.contains(transport::DEAF_ON_REUSE)
}

/// Why replies over bridgewire's `--max-body` leave a cell uncompared, naming the requests, the
/// limit and how to raise it; `None` when every reply was read whole.
pub fn unread_reason(unread: &[(usize, usize)]) -> Option<String> {
    let (_, limit) = unread.first()?;
    let requests: Vec<String> = unread.iter().map(|(n, _)| format!("#{n}")).collect();
    let (what, was) = if requests.len() == 1 {
        ("reply to request", "was")
    } else {
        ("replies to requests", "were")
    };
    Some(format!(
        "the bridge's {what} {} {was} larger than {limit} bytes, bridgewire's own --max-body \
         limit (the app reads a body of any size), and not read whole; raise it with \
         --max-body BYTES",
        requests.join(", ")
    ))
}

/// Whether the cell's requests carried the bridge's key (recorded as `[redacted]` in a header,
/// the path or the body): replayed without a key they would all be refused, and two legs
/// refused alike would compare equal on evidence neither leg produced.
pub fn needs_key(cell: &Cell) -> bool {
    let marked = |s: &str| s.contains(wire::REDACTED);
    pairs(cell).0.iter().any(|p| {
        p.request.headers.iter().any(|(_, v)| marked(v))
            || p.request.path.as_deref().is_some_and(marked)
            || marked(&String::from_utf8_lossy(&p.request.body))
    })
}

/// Whether the cell's requests carried SB-A4's probe key ([`wire::UNEXPECTED_KEY_PROBE`],
/// recorded as sent): a key the recorded build, which had none, was sent all the same.
pub fn sends_probe_key(cell: &Cell) -> bool {
    pairs(cell).0.iter().any(|p| {
        p.request
            .headers
            .iter()
            .any(|(_, v)| v == wire::UNEXPECTED_KEY_PROBE)
    })
}

/// How many replies refused a parity leg's replay when every reply was an auth refusal
/// (401/403) while the recording's requests were answered (2xx). That happens when a cell
/// recorded without a key is replayed against a build that asks for one (the recorded requests
/// carry no `[redacted]` key to fill in), or when the build refuses the key sent: both legs
/// refused alike would compare equal on evidence neither gave.
pub fn refused_unlike_recording(cell: &Cell, replayed: &[Value]) -> Option<usize> {
    let statuses: Vec<&Value> = replayed
        .iter()
        .filter(|e| e["type"] == "reply")
        .map(|e| &e["httpStatus"])
        .collect();
    let refused = |s: &Value| matches!(s.as_u64(), Some(401 | 403));
    if statuses.is_empty() || !statuses.iter().all(|s| refused(s)) {
        return None;
    }
    let answered = pairs(cell)
        .0
        .iter()
        .filter_map(|p| p.reply.as_ref())
        .any(|(r, _, _)| r.status.is_some_and(|c| (200..300).contains(&c)));
    answered.then_some(statuses.len())
}

/// How a parity leg starts its bridge: the leg's command, the key from `$SIDEBRIDGE_KEY`, and
/// `--timeout-ms` bounding the start-up too (never under 10 s: a cold interpreter on a loaded
/// machine).
pub fn leg_spec(
    bridge: &crate::protocol::BridgeCommand,
    timeout: std::time::Duration,
) -> BridgeSpec {
    BridgeSpec {
        url: None,
        command: bridge.spawn_argv().into_iter().map(Into::into).collect(),
        key: std::env::var("SIDEBRIDGE_KEY")
            .ok()
            .filter(|k| !k.is_empty()),
        startup: timeout.max(std::time::Duration::from_secs(10)),
        url_pattern: bridge.address_pattern.clone().map(|p| p.0),
    }
}

/// One cell's replay on a parity leg: its replayed events (raw), when the bridge exited during
/// the replay the line naming it, and when it stopped answering (the driver gave up, the rest
/// not sent) the line naming that; or why there is nothing to compare.
pub type ChatReplay = Result<(Vec<Value>, Option<String>, Option<String>), String>;

/// Replays cells against one bridge command for a parity leg: starts the bridge once,
/// re-sends the recorded requests of every cell in the recorded order across them (as
/// `replay sidebridge` does: a build that mixes chats up, or shares one chat's state with
/// another, shows in the chat that sees it), and returns each cell's replayed events (raw) or
/// a named error, in the order of `cells`. `Err` when the bridge cannot start. The key for
/// `[redacted]` headers comes from `$SIDEBRIDGE_KEY`.
pub fn replay_together_for_parity(
    cells: &[&Cell],
    bridge: &crate::protocol::BridgeCommand,
    limits: crate::protocol::LiveLimits,
) -> Result<Vec<ChatReplay>, String> {
    let timeout = limits.timeout;
    let spec = leg_spec(bridge, timeout);
    let (url, mut guard) = spec.resolve().map_err(|e| format!("{e:#}"))?;
    let target = Target::parse(&url).map_err(|e| e.to_string())?;
    let limits = Limits {
        max_body: limits.max_body,
        idle: timeout,
        total: limits.max_reply.max(timeout),
        idle_flag: "--timeout-ms",
        total_flag: "--max-reply-time",
        ..Limits::default()
    };
    let replays = super::spawn::runtime().block_on(replay_cells(
        cells,
        &target,
        spec.key.as_deref(),
        limits,
        None,
        Keep::Nothing,
        (None, false),
    ));
    // A bridge that exited during the replay: the chats whose requests then met no server say
    // so (the cause), beside the transport errors their replies show.
    // A reply that met a closed connection may come a moment before the exit is reaped: then
    // the exit is waited for, bounded.
    let transport_error = replays.iter().any(|r| {
        r.events
            .iter()
            .any(|e| e["type"] == "reply" && e["error"].is_string())
    });
    let grace = std::time::Duration::from_millis(if transport_error { 1000 } else { 0 });
    let exited = guard.as_mut().and_then(|g| g.exited_within(grace));
    let crashed = |events: &[Value]| -> Option<String> {
        let status = exited?;
        let mut requests = 0;
        let first = events.iter().find_map(|e| {
            if e["type"] == "request" {
                requests += 1;
            }
            (e["type"] == "reply" && e["error"].is_string()).then_some(requests)
        })?;
        Some(format!(
            "the bridge exited during the replay ({status}): this chat's request #{first} got no reply, the first of its transport errors"
        ))
    };
    Ok(replays
        .into_iter()
        .map(|r| {
            if r.exchanges == 0
                && let Some(d) = r.divergence
            {
                return Err(d);
            }
            // A leg that did not see a reply whole has nothing to compare: an error of the
            // leg (both legs over the limit would otherwise compare equal, one alone would
            // differ as if the bridge had failed).
            if let Some(why) = unread_reason(&r.unread) {
                return Err(why);
            }
            // A bridge that stopped answering is this build's behaviour, not a leg that could
            // not run: a stall, naming it (it was "nothing compared", exit 2).
            let crash = crashed(&r.events);
            Ok((r.events, crash, r.unsent))
        })
        .collect())
}

/// The first differing event, as a unified diff of the two pretty JSON texts.
pub fn first_divergence(recorded: &[Value], replayed: &[Value]) -> Option<String> {
    let n = recorded.len().max(replayed.len());
    for i in 0..n {
        let (a, b) = (recorded.get(i), replayed.get(i));
        if a == b {
            continue;
        }
        let show = |v: Option<&Value>| {
            v.map(crate::jsjson::to_string_pretty)
                .unwrap_or_else(|| "<none>\n".into())
        };
        let (ta, tb) = (show(a), show(b));
        let diff = similar::TextDiff::from_lines(&ta, &tb)
            .unified_diff()
            .header("recorded", "replayed")
            .to_string();
        return Some(format!("event {i} differs:\n{diff}"));
    }
    None
}

/// Holds a cell whose replay differed from its recording (`first`, its lists kept) against a
/// second replay of it. Values that differ between the two replays (a bridge that answers for
/// a model words each answer anew) are set aside as their kind in the recording and the replay
/// alike, named, and the rest compared again; a second replay that gave the same events says
/// the difference is the build's; one that did not finish leaves the difference standing.
fn hold_against_second(first: &mut CellReplay, again: CellReplay, fresh: bool) {
    let Some((mut recorded, mut replayed)) = first.compared.take() else {
        return;
    };
    let Some((_, again_replayed)) = again.compared else {
        let why = again
            .divergence
            .as_deref()
            .and_then(|d| d.strip_prefix("not compared: "))
            .unwrap_or("its replies were not all read");
        first.second.push(not_finished(why));
        return;
    };
    let mut v = crate::parity::Varying {
        side: "replayed",
        ..Default::default()
    };
    let builds = if fresh {
        "two replays of this build, each on a bridge started afresh"
    } else {
        "two replays of the running bridge (the second on new chat ids, after it had seen these chats once)"
    };
    v.events = crate::parity::varying_values("events", &replayed, &again_replayed, &mut v.lengths);
    if v.is_empty() {
        first.second.push(
            "a second replay gave the same events: the difference is the build's, not replies \
             that vary"
                .into(),
        );
        return;
    }
    // Only wording varies between two runs of one build: a message's text, a source's title,
    // an id. Who sent a message, how many there are, the options, the status, a reply turning
    // into an error or a dropped body do not: an event with such a difference between the two
    // replays is a bridge that answers otherwise from one start to the next (a flaky one), and
    // nothing of it is set aside (its wording neither: a recorded answer and an error bubble
    // are not one answer worded twice).
    let shaped: std::collections::BTreeSet<usize> = v
        .events
        .iter()
        .filter(|x| x.key_varies || !may_vary(&x.pointer))
        .map(|x| x.index)
        .collect();
    let (kept, set_aside): (Vec<_>, Vec<_>) = std::mem::take(&mut v.events)
        .into_iter()
        .partition(|x| shaped.contains(&x.index));
    v.events = set_aside;
    if v.count() > 0 {
        for list in [&mut recorded, &mut replayed] {
            crate::parity::mask_varying(list, &v.events);
        }
        first.divergence = first_divergence(&recorded, &replayed);
    }
    first
        .second
        .extend(v.lines(builds, "the recording and the replay", "a second replay"));
    if !kept.is_empty() {
        let shown = crate::parity::Varying {
            events: kept
                .into_iter()
                .filter(|x| x.key_varies || !may_vary(&x.pointer))
                .collect(),
            ..Default::default()
        };
        first.second.push(format!(
            "not set aside: {} value(s) that differ between {builds} but are no wording (who \
             sent a message, how many, the options, the status, an error): {}; a bridge that \
             answers so otherwise between two runs is flaky, and the difference stands",
            shown.count(),
            shown.describe(8)
        ));
    }
}

/// Whether a value at `pointer` of a replayed event may differ between two runs of one build
/// as a model's wording does: a message's text, a source's title, an id.
pub(crate) fn may_vary(pointer: &str) -> bool {
    let last = pointer.rsplit('/').next().unwrap_or("");
    matches!(last, "content" | "title" | "id" | "chatId")
}

/// A verdict's diff with each line over 2000 bytes cut to its start, the place where it first
/// differs from its counterpart (a `-` line's next `+` line) and its end, naming its length:
/// a 3 MB answer that differs is not printed whole.
fn shorten_diff(d: &str) -> std::borrow::Cow<'_, str> {
    const LONG: usize = 2000;
    if d.lines().all(|l| l.len() <= LONG) {
        return std::borrow::Cow::Borrowed(d);
    }
    let at = |l: &str, mut k: usize| {
        k = k.min(l.len());
        while !l.is_char_boundary(k) {
            k -= 1;
        }
        k
    };
    let lines: Vec<&str> = d.lines().collect();
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate() {
        if l.len() <= LONG {
            out.push_str(l);
            out.push('\n');
            continue;
        }
        let other = if l.starts_with('-') {
            lines[i + 1..].iter().find(|o| o.starts_with('+'))
        } else if l.starts_with('+') {
            lines[..i].iter().rev().find(|o| o.starts_with('-'))
        } else {
            None
        };
        let differs = other.map(|o| {
            l.bytes()
                .zip(o.bytes())
                .skip(1)
                .take_while(|(x, y)| x == y)
                .count()
                + 1
        });
        let head = at(l, 300);
        let tail = at(l, l.len() - 200);
        out.push_str(&l[..head]);
        match differs {
            Some(k) if k > head && k < tail => {
                let (a, b) = (
                    at(l, k.saturating_sub(100)).max(head),
                    at(l, k + 100).min(tail),
                );
                out.push_str(&format!(
                    " …[{} bytes]… {} …[{} bytes]… ",
                    a - head,
                    &l[a..b],
                    tail - b
                ));
            }
            _ => out.push_str(&format!(" …[{} bytes]… ", tail - head)),
        }
        out.push_str(&l[tail..]);
        let first = match differs {
            Some(k) => format!(", first differing from its counterpart at byte {k}"),
            None => String::new(),
        };
        out.push_str(&format!("  (line of {} bytes cut{first})\n", l.len()));
    }
    std::borrow::Cow::Owned(out.trim_end().to_string())
}

/// The line of a cell whose second replay did not finish.
fn not_finished(why: &str) -> String {
    format!(
        "a second replay, to tell replies that vary from a difference, did not finish ({why}): \
         the difference stands"
    )
}

/// Exchanges sent by this process's replay so far (for the summary of an interrupted one).
static SENT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

pub fn replay(o: &ReplayOptions) -> u8 {
    // SIGINT/SIGTERM: the bridge's tree is killed, what was replayed is said, exit 130/143.
    crate::signals::install();
    let mut cells = Vec::new();
    for root in &o.recordings {
        match crate::cell::discover(root) {
            Ok(cs) => cells.extend(cs.into_iter().filter(|c| {
                c.protocol == Protocol::SideBridge
                    && o.cell.as_deref().is_none_or(|f| c.key.contains(f))
            })),
            Err(e) => {
                eprintln!("error: {e}");
                return exit::INVALID_INPUT;
            }
        }
    }
    if cells.is_empty() {
        eprintln!("error: no Side Bridge cells selected");
        return exit::NOTHING_SELECTED;
    }
    let (url, guard) = match o.bridge.resolve() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("bridgewire replay sidebridge: {e:#}");
            return exit::INVALID_INPUT;
        }
    };
    let target = match Target::parse(&url) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("bridgewire replay sidebridge: {e}");
            return exit::INVALID_INPUT;
        }
    };
    let rt = super::spawn::runtime();
    let total = cells.len();
    let _summary = crate::signals::on_signal(move |sig| {
        eprintln!(
            "bridgewire replay sidebridge: interrupted by {}: {} exchange(s) of {total} cell(s) replayed, no cell compared; the bridge's tree killed",
            crate::report::live::signal_name(sig),
            SENT.load(std::sync::atomic::Ordering::SeqCst)
        );
    });
    let key = o.bridge.key.as_deref();
    // A cell recorded with the bridge's key (`[redacted]` in its requests) replayed without
    // one would be sent without it and refused: a difference of the replay, not of the build.
    // Not sent (the other chats are replayed as if it had not been recorded), named.
    let keyless = |c: &Cell| key.is_none() && needs_key(c);
    let refs: Vec<&Cell> = cells.iter().filter(|c| !keyless(c)).collect();
    let keep = if o.second_run {
        Keep::Differing
    } else {
        Keep::Nothing
    };
    let mut guard = guard;
    let mut results = if refs.is_empty() {
        Vec::new()
    } else {
        rt.block_on(replay_cells(
            &refs,
            &target,
            key,
            o.limits,
            o.write_current,
            keep,
            (guard.as_mut(), false),
        ))
    };
    // A bridge that exited during the replay is named in its cell; nothing is replayed again
    // (a second replay would meet the same exit, or tell nothing about the first one's).
    if results.iter().any(|r| r.exited) {
        for r in &mut results {
            r.compared = None;
        }
    }
    // A bridge that answers for a model words its answers anew each time: where cells differ,
    // every cell is replayed once more, in the recorded order across them as the first time
    // (a differing cell replayed alone would miss what the others did to it: a build with one
    // memory for every chat recalls another chat's word only when they are interleaved).
    let differing: Vec<usize> = (0..results.len())
        .filter(|i| results[*i].compared.is_some())
        .collect();
    if !differing.is_empty() {
        // On a bridge of its own, started afresh from its command: one that was replayed these
        // chats once answers them as a chat it has seen (what it remembers would show as
        // replies that vary). A bridge running at a URL cannot be started afresh: it is
        // replayed again on new chat ids (chats it has not seen), and only where an event
        // keeps its shape (who sent each message, how many, the options, the status) is the
        // wording set aside ([`hold_against_second`]).
        let fresh = o.bridge.url.is_none();
        drop(guard);
        let again = match o
            .bridge
            .resolve()
            .map_err(|e| format!("{e:#}"))
            .and_then(|(u, g)| {
                let t = Target::parse(&u).map_err(|e| e.to_string())?;
                Ok((t, g))
            }) {
            Ok((target, mut guard)) => {
                let keep = Keep::These(&differing);
                Ok(rt.block_on(replay_cells(
                    &refs,
                    &target,
                    key,
                    o.limits,
                    None,
                    keep,
                    (guard.as_mut(), !fresh),
                )))
            }
            Err(e) => Err(format!("the bridge did not start again: {e}")),
        };
        match again {
            Ok(again) => {
                for (first, again) in results.iter_mut().zip(again) {
                    if first.compared.is_some() {
                        hold_against_second(first, again, fresh);
                    }
                }
            }
            Err(why) => {
                for i in differing {
                    results[i].compared = None;
                    results[i].second.push(not_finished(&why));
                }
            }
        }
    }
    let (mut passed, mut failed, mut skipped, mut invalid) = (0, 0, 0, 0);
    let mut results = results.into_iter();
    for c in &cells {
        let r = if keyless(c) {
            CellReplay {
                key: c.key.clone(),
                skip: Some(
                    "not replayed: the cell was recorded with the bridge's key (`[redacted]` in \
                     its requests) and no key was given: replay it with --key KEY (or \
                     SIDEBRIDGE_KEY); sent without one, it would be refused for the key the \
                     replay left out, not for the build"
                        .into(),
                ),
                ..Default::default()
            }
        } else {
            match results.next() {
                Some(r) => r,
                None => break,
            }
        };
        for n in &r.notes {
            eprintln!(
                "warning: {}: {}",
                r.key,
                crate::redact::printable(n.trim_end())
            );
        }
        if let Some(why) = &r.invalid {
            invalid += 1;
            println!(
                "ERROR {}: {}",
                r.key,
                crate::redact::printable(why.trim_end())
            );
        } else if let Some(why) = &r.skip {
            skipped += 1;
            println!(
                "SKIP {}: {}",
                r.key,
                crate::redact::printable(why.trim_end())
            );
        } else {
            match &r.divergence {
                None => {
                    passed += 1;
                    println!("PASS {} ({} exchanges)", r.key, r.exchanges);
                }
                Some(d) => {
                    failed += 1;
                    println!(
                        "FAIL {}: {}",
                        r.key,
                        crate::redact::printable(shorten_diff(d.trim_end()).as_ref())
                    );
                }
            }
        }
        for line in r.notes.iter().chain(&r.second) {
            println!("  {}", crate::redact::printable(line));
        }
    }
    let mut summary = format!("{passed} passed, {failed} failed");
    if skipped > 0 {
        summary.push_str(&format!(", {skipped} skipped"));
    }
    if invalid > 0 {
        summary.push_str(&format!(", {invalid} with an unusable recording"));
    }
    println!("{summary}");
    if invalid > 0 {
        eprintln!(
            "bridgewire replay sidebridge: {invalid} cell(s) have an unusable recording (named \
             above): not replayed"
        );
    }
    exit::of_replay("sidebridge", invalid, failed, passed)
}
