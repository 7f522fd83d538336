//! The scenario rules of `check sidebridge`: the ones that need the bridge to *do* something
//! (remember a word, repeat itself, stop using `history`, end a session). What makes a bridge do
//! it comes from its fixture ([`super::fixture`]); a rule whose scenario has no fixture is *not
//! run*, naming the key.
//!
//! Honest judging:
//! * the word to remember is a fresh random token per run that never appears in a question, so
//!   an echo of the question or a constant reply cannot pass;
//! * a bridge that answers but does not enter a scenario (a gate `expect` does not match, an
//!   option is not set) gets the rule *skipped* with its reply quoted;
//! * "recall" rules are gated by a baseline (remember, then recall, in one plain chat with
//!   `history` on): only when the bridge recalls there is a lost word a *failure*; SB-R3 is gated
//!   the same way by a control chat whose history keeps the bridge's ids in their own case;
//! * SB-R11's restored history carries decoy tokens the bridge never was asked to remember, so
//!   an echo of `history` fails it.

use super::client::{Driver, Screen};
use super::fixture::{Fixture, Step};
use super::profiles::{From, Msg, Profile, Rng, Style};
use super::rules::{
    CheckConfig, clip, decodes, ends, pass_with, reply_quote, reply_text, request_has_history,
    resent_note, strict_from_subchecks, unreadable,
};
use crate::report::live::VerdictLog;
use crate::rule::{Status, SubCheck, Verdict};

/// Random words, from a per-run nonce: lower-case consonants, so no natural word and no
/// substring of a UUID or of a protocol key. Every word handed out is kept, so a reply naming
/// a word of another chat can be told apart from a reply naming nothing.
struct Words(Rng, Vec<String>);

impl Words {
    fn next(&mut self) -> String {
        const LETTERS: &[u8] = b"bcdfghjklmnpqrstvwxz";
        let w: String = (0..10)
            .map(|_| LETTERS[(self.0.next_u64() % LETTERS.len() as u64) as usize] as char)
            .collect();
        self.1.push(w.clone());
        w
    }

    /// A word handed out before, other than `mine`, that `text` names.
    fn other_in(&self, text: &str, mine: &[&str]) -> Option<&str> {
        let text = text.to_lowercase();
        self.1
            .iter()
            .map(String::as_str)
            .find(|w| !mine.contains(w) && text.contains(w))
    }
}

/// How a run of scenario steps ended.
enum Ran {
    /// Every step was sent; the exchange index of each.
    Done(Vec<usize>),
    /// The bridge did not enter the scenario (why, with its reply quoted).
    NotEntered(String),
}

/// Sends the steps of scenario `key`; every step's `expect` is a gate, except the last one's
/// when `judge_last` (the caller judges it).
async fn run_steps(
    s: &mut Screen,
    d: &mut Driver,
    key: &str,
    steps: &[Step],
    word: &str,
    label: &str,
    judge_last: bool,
) -> Ran {
    let mut done = Vec::new();
    for (n, step) in steps.iter().enumerate() {
        let text = step.text(word);
        let Some(i) = s.send(d, &text, &format!("{label}/{key}-{}", n + 1)).await else {
            return Ran::NotEntered(format!(
                "the session ended before `{key}` step {} could be sent",
                n + 1
            ));
        };
        done.push(i);
        let gate = !(judge_last && n + 1 == steps.len());
        if gate && let Some(why) = unreadable(&d.log[i]) {
            return Ran::NotEntered(format!("`{key}` step {} sent {text:?}; {why}", n + 1));
        }
        if gate && let Some(p) = step.pattern(word) {
            let reply = reply_text(d, i);
            if !p.is_match(&reply) {
                return Ran::NotEntered(format!(
                    "`{key}` step {} sent {text:?}; the reply {} does not match {:?}",
                    n + 1,
                    reply_quote(d, i),
                    step.expect.as_deref().unwrap_or_default()
                ));
            }
        }
    }
    Ran::Done(done)
}

/// Whether the judged reply of `recall` names `word`.
fn recalls(d: &Driver, i: usize, last: &Step, word: &str) -> bool {
    let text = reply_text(d, i);
    match last.pattern(word) {
        Some(p) => p.is_match(&text),
        None => text.to_lowercase().contains(&word.to_lowercase()),
    }
}

fn steps<'a>(fx: &'a Fixture, key: &str) -> &'a [Step] {
    fx.get(key).map(Vec::as_slice).unwrap_or_default()
}

/// How `recall` was answered, when it was sent.
enum Recall {
    /// The reply names the word (its exchange).
    Named(usize),
    /// The bridge did not enter the scenario, or its readable reply misses the word (why).
    Missed(String),
    /// The reply cannot be read: whether it names the word is not seen (the fault is the rule's
    /// named by `fault_owner`).
    Unreadable(String),
}

impl Recall {
    /// Gates use it as a plain outcome: anything but a named word is why not.
    fn ok(self) -> Result<usize, String> {
        match self {
            Recall::Named(i) => Ok(i),
            Recall::Missed(why) | Recall::Unreadable(why) => Err(why),
        }
    }
}

/// Remember `word`, then recall it.
async fn remember_then_recall(
    s: &mut Screen,
    d: &mut Driver,
    fx: &Fixture,
    word: &str,
    label: &str,
) -> Recall {
    if let Ran::NotEntered(why) =
        run_steps(s, d, "remember", steps(fx, "remember"), word, label, false).await
    {
        return Recall::Missed(why);
    }
    recall(s, d, fx, word, label).await
}

async fn recall(s: &mut Screen, d: &mut Driver, fx: &Fixture, word: &str, label: &str) -> Recall {
    let rc = steps(fx, "recall");
    match run_steps(s, d, "recall", rc, word, label, true).await {
        Ran::NotEntered(why) => Recall::Missed(why),
        Ran::Done(ix) => {
            let i = *ix.last().expect("a scenario has a step");
            let last = rc.last().expect("a scenario has a step");
            if let Some(why) = unreadable(&d.log[i]) {
                Recall::Unreadable(format!("asked to recall {word:?}: {why}"))
            } else if recalls(d, i, last, word) {
                Recall::Named(i)
            } else {
                Recall::Missed(format!(
                    "asked to recall a word it was told ({word:?}), the bridge answered {}{}",
                    reply_quote(d, i),
                    last.expect
                        .as_ref()
                        .map(|p| format!(" (expected to match {p:?})"))
                        .unwrap_or_default()
                ))
            }
        }
    }
}

/// Sends scenario `key` and checks the option it must set; `Err` quotes the reply.
async fn toggle(
    s: &mut Screen,
    d: &mut Driver,
    fx: &Fixture,
    key: &str,
    label: &str,
    done: impl Fn(&Screen) -> bool,
    what: &str,
) -> Result<(), String> {
    match run_steps(s, d, key, steps(fx, key), "", label, false).await {
        Ran::NotEntered(why) => Err(why),
        Ran::Done(ix) if !done(s) => {
            let i = *ix.last().expect("a scenario has a step");
            Err(match unreadable(&d.log[i]) {
                Some(why) => {
                    format!("whether the bridge did {what} after `{key}` cannot be seen: {why}")
                }
                None => format!(
                    "after `{key}` the bridge did not {what}; it answered {:?}",
                    clip(&d.log[i].describe_reply())
                ),
            })
        }
        Ran::Done(_) => Ok(()),
    }
}

pub async fn run(d: &mut Driver, rng: &mut Rng, cfg: &CheckConfig, v: &mut VerdictLog) {
    let fx = &cfg.fixture;
    let mut words = Words(Rng::new(cfg.nonce), Vec::new());

    // Baseline: remember, then recall, history on. Gates every rule built on recall.
    let memory = fx.missing(&["remember", "recall"]);
    let baseline: Result<(), String> = if memory.is_none() {
        let mut s = Screen::new(rng);
        s.start(d, "memory/start").await;
        let w = words.next();
        remember_then_recall(&mut s, d, fx, &w, "memory")
            .await
            .ok()
            .map(|_| ())
            .map_err(|e| format!("the bridge does not recall in a plain chat with history: {e}"))
    } else {
        Ok(())
    };

    // SB-R3: the bridge's own ids, upper-cased in history, still identify its message.
    v.push(match fx.missing(&["remember", "repeat"]) {
        Some(why) => Verdict::not_run("SB-R3", why),
        None => repeat_rule(d, rng, fx, &mut words).await,
    });

    // SB-R11: a chat the bridge never saw, restored with a long history. Said after SB-S4,
    // which judges a recall answered with another chat's word.
    let r11 = match (&memory, &baseline) {
        (Some(why), _) => Verdict::not_run("SB-R11", why.clone()),
        (None, Err(why)) => Verdict::skipped("SB-R11", why.clone()),
        (None, Ok(())) => unknown_chat(d, rng, fx, &mut words).await,
    };

    // SB-R6 and SB-S2: disableSendHistory, then its merge sequence.
    history_rules(d, rng, fx, &mut words, &memory, &baseline, v).await;

    // SB-S3: a reopened chat gets its options again.
    v.push(match fx.missing(&["disableHistory"]) {
        Some(why) => Verdict::not_run("SB-S3", why),
        None => {
            let mut s = Screen::new(rng);
            s.start(d, "reopen/start").await;
            match toggle(&mut s, d, fx, "disableHistory", "reopen", |s| !s.send_history, "set disableSendHistory").await {
                Err(why) => Verdict::skipped("SB-S3", why),
                Ok(()) => {
                    let mut again = s.reopen();
                    let i = again.start(d, "reopen/session-start").await;
                    if let Some(why) = unreadable(&d.log[i]) {
                        Verdict::skipped("SB-S3", format!("whether the options were re-asserted cannot be seen: {why}"))
                    } else if again.ended && again.send_history {
                        // The app sends nothing more on an ended screen, so no history leaves
                        // it: the private chat stays private without the option.
                        pass_with("SB-S3", vec![format!("the bridge ended the reopened chat at its session start ({}): nothing more is sent, so no option needs re-asserting", d.log[i].describe_reply())])
                    } else if again.send_history {
                        Verdict::fail(
                            "SB-S3",
                            format!(
                                "the bridge disabled history in this chat, but its reply to the reopened screen's session start did not re-assert it ({})",
                                d.log[i].describe()
                            ),
                        )
                    } else {
                        Verdict::pass("SB-S3")
                    }
                }
            }
        }
    });

    // SB-S1 and SB-R12: endSession, then the ended chat reopened.
    end_rules(d, rng, fx, v).await;

    // SB-S4: two chats interleaved.
    let s4 = match (&memory, &baseline) {
        (Some(why), _) => Verdict::not_run("SB-S4", why.clone()),
        (None, Err(why)) => Verdict::skipped("SB-S4", why.clone()),
        (None, Ok(())) => two_chats(d, rng, fx, &mut words).await,
    };
    v.push(one_cross_talk_verdict(r11, &s4));
    v.push(s4);
}

/// SB-R11's recall answered with a word another chat was told is cross-talk, SB-S4's own
/// scenario. When SB-S4 falls short on it too, the sub-check is skipped naming SB-S4 (one
/// fault, one verdict); when SB-S4 saw no cross-talk, SB-R11 keeps it.
fn one_cross_talk_verdict(r11: Verdict, s4: &Verdict) -> Verdict {
    if s4.status != Status::Fail {
        return r11;
    }
    let mut subs = r11.subchecks.clone();
    let Some(c) = subs
        .iter_mut()
        .find(|c| c.status == Status::Fail && c.evidence.contains(CROSS_TALK))
    else {
        return r11;
    };
    *c = SubCheck::skipped(
        &c.name,
        format!("{} (one fault, one verdict: SB-S4 carries it)", c.evidence),
    );
    strict_from_subchecks("SB-R11", subs)
}

/// How SB-R11's recall names an answer that is another chat's word.
const CROSS_TALK: &str = "a word another chat was told (cross-talk, see SB-S4)";

/// SB-R3 with its control: the same exchange with history keeping the bridge's ids in their
/// own case (canonical bytes). Only when the control works is a failure the ids' fault.
async fn repeat_rule(d: &mut Driver, rng: &mut Rng, fx: &Fixture, words: &mut Words) -> Verdict {
    let mut outcome = Vec::new();
    for control in [true, false] {
        let label = if control { "repeat-control" } else { "repeat" };
        let mut s = Screen::new(rng);
        if control {
            s.style = Style::Canonical;
            s.keep_id_case = true;
        }
        s.start(d, &format!("{label}/start")).await;
        let w = words.next();
        let rem = match run_steps(
            &mut s,
            d,
            "remember",
            steps(fx, "remember"),
            &w,
            label,
            false,
        )
        .await
        {
            Ran::NotEntered(why) => return Verdict::skipped("SB-R3", why),
            Ran::Done(ix) => *ix.last().expect("a scenario has a step"),
        };
        // The answer to ask about: the last assistant message with text (a system note may
        // follow it: a reply can hold several messages), else the last message with text.
        // Only what the reply changes on screen: a message re-sent unchanged is an earlier one.
        let prev = d.log[rem].judged(Profile::Gamma).ok().and_then(|r| {
            let said = |m: &&&Msg| !m.content.trim().is_empty();
            let changed = d.log[rem].changed(&r).0;
            let answer = changed
                .iter()
                .rev()
                .filter(said)
                .find(|m| m.from == From::Assistant);
            answer
                .or_else(|| changed.iter().rev().find(said))
                .map(|m| m.content.trim().to_string())
        });
        let Some(prev) = prev else {
            return Verdict::skipped(
                "SB-R3",
                format!(
                    "the reply to `remember` carries no message to ask about ({})",
                    d.log[rem].describe_reply()
                ),
            );
        };
        let rp = steps(fx, "repeat");
        let i = match run_steps(&mut s, d, "repeat", rp, &w, label, true).await {
            Ran::NotEntered(why) => return Verdict::skipped("SB-R3", why),
            Ran::Done(ix) => *ix.last().expect("a scenario has a step"),
        };
        let text = reply_text(d, i);
        let last = rp.last().expect("a scenario has a step");
        let ok = match last.pattern(&w) {
            Some(p) => p.is_match(&text),
            None => text.contains(&prev),
        };
        outcome.push((ok, prev, reply_quote(d, i)));
    }
    let (c_ok, c_prev, c_text) = &outcome[0];
    let (ok, prev, text) = &outcome[1];
    if !c_ok {
        return Verdict::skipped(
            "SB-R3",
            format!(
                "even with its ids as it wrote them, asked to repeat {:?} the bridge answered {c_text} (the bridge does not enter the scenario)",
                clip(c_prev),
            ),
        );
    }
    if *ok {
        Verdict::pass("SB-R3")
    } else {
        Verdict::fail(
            "SB-R3",
            format!(
                "history carried the bridge's reply {:?} under its id in upper case; asked about it, the bridge answered {text} (with its ids as written it answered {c_text})",
                clip(prev),
            ),
        )
    }
}

async fn unknown_chat(d: &mut Driver, rng: &mut Rng, fx: &Fixture, words: &mut Words) -> Verdict {
    let w = words.next();
    let decoy = words.next();
    let mut s = Screen::new(rng);
    for step in steps(fx, "remember") {
        s.history.push(Msg::user(&rng.uuid(), &step.text(&w)));
        s.history.push(Msg {
            id: rng.uuid(),
            from: From::Assistant,
            content: "OK.".into(),
            sources: vec![],
        });
    }
    for k in 0..2 * R11_DECOY_TURNS {
        if k % 2 == 0 {
            s.history
                .push(Msg::user(&rng.uuid(), &format!("Question {k}: {decoy}?")));
        } else {
            s.history.push(Msg {
                id: rng.uuid(),
                from: From::Assistant,
                content: format!("Answer {k}."),
                sources: vec![],
            });
        }
    }
    let a = s.start(d, "unknown-chat/start").await;
    let mut subs = Vec::new();
    let x = &d.log[a];
    // The status is seen without reading the body; decoding is the rule named by
    // [`fault_owner`] (a sub-check skipped naming it), and whether the session was ended
    // needs the body (one fault, one verdict).
    subs.push(match x.status() {
        None => SubCheck::skipped("status", unreadable(x).unwrap_or_default()),
        Some(st) if !(200..300).contains(&st) => {
            SubCheck::fail("status", format!("{}: status {st}", x.label))
        }
        Some(st) => SubCheck::pass("status", format!("status {st}")),
    });
    subs.push(decodes(x));
    subs.push(match unreadable(x) {
        Some(why) => SubCheck::skipped("not-ended", why),
        None if ends(x) => SubCheck::fail("not-ended", "the session was ended at session start"),
        None => SubCheck::pass("not-ended", "the session goes on"),
    });
    if s.ended {
        subs.push(SubCheck::skipped(
            "recall",
            "the session ended at session start",
        ));
    } else {
        let rc = steps(fx, "recall");
        subs.push(match run_steps(&mut s, d, "recall", rc, &w, "unknown-chat", true).await {
            Ran::NotEntered(why) => SubCheck::skipped("recall", why),
            Ran::Done(ix) => {
                let i = *ix.last().expect("a scenario has a step");
                let x = &d.log[i];
                let text = reply_text(d, i);
                if let Some(s) = x.status().filter(|s| !(200..300).contains(s)) {
                    SubCheck::fail("recall", format!("status {s}: {}", reply_quote(d, i)))
                } else if let Some(why) = unreadable(x) {
                    SubCheck::skipped("recall", why)
                } else if text.to_lowercase().contains(&decoy) {
                    SubCheck::fail(
                        "recall",
                        format!("the reply echoes history (it names {decoy:?}, a word never to remember): {}", reply_quote(d, i)),
                    )
                } else if recalls(d, i, rc.last().expect("a step"), &w) {
                    SubCheck::pass("recall", format!("named {w:?} from history alone"))
                } else if let Some(other) = words.other_in(&text, &[&w, &decoy]) {
                    // Both faults are seen here: the history was not used, and the answer is
                    // another chat's (whether chats are kept apart is SB-S4's own scenario).
                    SubCheck::fail(
                        "recall",
                        format!(
                            "history asked to remember {w:?}; `recall` was answered with {other:?}, {CROSS_TALK}: {}",
                            reply_quote(d, i)
                        ),
                    )
                } else {
                    let miss = format!("history asked to remember {w:?}; `recall` was answered {}", reply_quote(d, i));
                    long_chat_control(d, rng, fx, words, miss).await
                }
            }
        });
    }
    strict_from_subchecks("SB-R11", subs)
}

/// The turns of SB-R11's history after `remember`: questions naming a decoy, each answered.
const R11_DECOY_TURNS: usize = 19;

/// SB-R11's control, run only when a restored chat's `recall` missed its word: the same
/// conversation in a live chat (remember, the decoy questions, recall), the bridge keeping its
/// own state. A bridge that forgets there too has a context window shorter than the history
/// (legal: SB-R11 asks whether the lack of server state breaks the chat, not how much a bridge
/// remembers), so whether the restore works is not seen: skipped, naming the control. Only a
/// control that recalls makes `miss` a failure.
async fn long_chat_control(
    d: &mut Driver,
    rng: &mut Rng,
    fx: &Fixture,
    words: &mut Words,
    miss: String,
) -> SubCheck {
    let w = words.next();
    let decoy = words.next();
    let mut s = Screen::new(rng);
    s.start(d, "unknown-chat-control/start").await;
    let rem = run_steps(
        &mut s,
        d,
        "remember",
        steps(fx, "remember"),
        &w,
        "unknown-chat-control",
        false,
    )
    .await;
    if let Ran::NotEntered(why) = rem {
        return SubCheck::skipped(
            "recall",
            format!(
                "{miss}; the control (the same conversation in a live chat) was not entered: {why}"
            ),
        );
    }
    for k in 0..R11_DECOY_TURNS {
        let q = format!("Question {}: {decoy}?", 2 * k);
        if s.send(d, &q, &format!("unknown-chat-control/question-{}", k + 1))
            .await
            .is_none()
        {
            return SubCheck::skipped(
                "recall",
                format!(
                    "{miss}; the control (the same conversation in a live chat) ended before its recall"
                ),
            );
        }
    }
    match recall(&mut s, d, fx, &w, "unknown-chat-control").await {
        Recall::Named(_) => SubCheck::fail(
            "recall",
            format!(
                "{miss}; in a live chat, after the same {R11_DECOY_TURNS} questions, it recalled its word (the control): the restore from history is what fails"
            ),
        ),
        Recall::Missed(why) | Recall::Unreadable(why) => SubCheck::skipped(
            "recall",
            format!(
                "{miss}; but the bridge forgets in a live chat too, after the same {R11_DECOY_TURNS} questions, with its own state (the control: {why}): a context shorter than the history, so whether restoring works is not seen"
            ),
        ),
    }
}

#[allow(clippy::too_many_arguments)]
async fn history_rules(
    d: &mut Driver,
    rng: &mut Rng,
    fx: &Fixture,
    words: &mut Words,
    memory: &Option<String>,
    baseline: &Result<(), String>,
    v: &mut VerdictLog,
) {
    let need_r6 = fx.missing(&["remember", "recall", "disableHistory"]);
    let need_s2 = fx.missing(&["disableHistory", "enableHistory"]);
    if need_r6.is_some() && need_s2.is_some() {
        v.push(Verdict::not_run("SB-R6", need_r6.unwrap_or_default()));
        v.push(Verdict::not_run("SB-S2", need_s2.unwrap_or_default()));
        return;
    }
    let mut s = Screen::new(rng);
    s.start(d, "no-history/start").await;
    let w = words.next();
    let remembered = if memory.is_none() {
        match run_steps(
            &mut s,
            d,
            "remember",
            steps(fx, "remember"),
            &w,
            "no-history",
            false,
        )
        .await
        {
            Ran::NotEntered(why) => Err(why),
            Ran::Done(_) => baseline.clone(),
        }
    } else {
        Err(String::new())
    };
    if let Err(why) = toggle(
        &mut s,
        d,
        fx,
        "disableHistory",
        "no-history",
        |s| !s.send_history,
        "set disableSendHistory",
    )
    .await
    {
        v.push(match need_r6 {
            Some(n) => Verdict::not_run("SB-R6", n),
            None => Verdict::skipped("SB-R6", why.clone()),
        });
        v.push(match need_s2 {
            Some(n) => Verdict::not_run("SB-S2", n),
            None => Verdict::skipped("SB-S2", why),
        });
        return;
    }
    // SB-R6: without history the bridge still knows the word.
    let r = if memory.is_none() && remembered.is_ok() {
        Some(recall(&mut s, d, fx, &w, "no-history").await)
    } else {
        None
    };
    v.push(match (&need_r6, &remembered, &r) {
        (Some(n), _, _) => Verdict::not_run("SB-R6", n.clone()),
        (None, Err(why), _) => Verdict::skipped("SB-R6", why.clone()),
        (None, Ok(()), Some(Recall::Named(i))) if request_has_history(&d.log[*i]) => {
            Verdict::fail("SB-R6", "internal: the emulated client sent history")
        }
        (None, Ok(()), Some(Recall::Named(_))) => {
            pass_with("SB-R6", vec![format!("recalled {w:?} without history")])
        }
        (None, Ok(()), Some(Recall::Missed(why))) => {
            Verdict::fail("SB-R6", format!("without `history`: {why}"))
        }
        (None, Ok(()), Some(Recall::Unreadable(why))) => {
            Verdict::skipped("SB-R6", format!("without `history`: {why}"))
        }
        (None, Ok(()), None) => Verdict::skipped("SB-R6", "the recall was not sent"),
    });
    if let Some(n) = need_s2 {
        v.push(Verdict::not_run("SB-S2", n));
    } else {
        // SB-S2: set true → omitted → explicit false, the client following the merge rules.
        let mut subs = Vec::new();
        let plain = s.send(d, "hello without history", "no-history/plain").await;
        let looked_at: Vec<usize> = match &r {
            Some(Recall::Named(i)) => Some(*i),
            _ => None,
        }
        .into_iter()
        .chain(plain)
        .collect();
        let (unread, unasked) = history_flag_set(d, &looked_at, false);
        subs.push(if !unasked.is_empty() {
            SubCheck::fail(
                "stays-disabled",
                format!("{}: the reply re-enabled history (disableSendHistory:false) the bridge had disabled, unasked", unasked.join(", ")),
            )
        } else if !unread.is_empty() {
            SubCheck::skipped("stays-disabled", format!("whether history stayed off cannot be seen: {}", unread.join("; ")))
        } else if plain.is_some_and(|i| request_has_history(&d.log[i])) {
            SubCheck::fail("stays-disabled", "internal: a reply without options changed the client's state")
        } else if plain.is_none() {
            SubCheck::skipped("stays-disabled", "the session ended")
        } else {
            SubCheck::pass("stays-disabled", "history stayed off until asked")
        });
        match toggle(
            &mut s,
            d,
            fx,
            "enableHistory",
            "no-history",
            |s| s.send_history,
            "send disableSendHistory:false",
        )
        .await
        {
            Err(why) => subs.push(SubCheck::skipped("explicit-false", why)),
            Ok(()) => {
                subs.push(SubCheck::pass("explicit-false", "history re-enabled"));
                // Every reply from here on: the mirror of `stays-disabled`.
                let enabled_at = d.log.len();
                if memory.is_some() {
                    subs.push(SubCheck::new(
                        "recall-after-enable",
                        Status::NotRun,
                        memory.clone().unwrap_or_default(),
                    ));
                } else if remembered.is_err() {
                    subs.push(SubCheck::skipped(
                        "recall-after-enable",
                        remembered.clone().err().unwrap_or_default(),
                    ));
                } else {
                    subs.push(match recall(&mut s, d, fx, &w, "no-history/again").await {
                        Recall::Named(i) if !request_has_history(&d.log[i]) => SubCheck::fail(
                            "recall-after-enable",
                            "internal: explicit false did not re-enable history",
                        ),
                        Recall::Named(_) => {
                            SubCheck::pass("recall-after-enable", format!("recalled {w:?}"))
                        }
                        Recall::Unreadable(why) => SubCheck::skipped("recall-after-enable", why),
                        Recall::Missed(why) => SubCheck::fail(
                            "recall-after-enable",
                            format!("after re-enabling history: {why}"),
                        ),
                    });
                }
                // The bridge asked for history back (explicit false): a later reply that turns
                // it off again, unasked, contradicts what it asked for, as re-enabling it unasked
                // does above (a bridge re-asserting private mode on every reply must stop once it
                // has said false). A plain send after the recall, so there is a reply to look at
                // whether or not the recall ran.
                s.send(
                    d,
                    "hello with history again",
                    "no-history/plain-after-enable",
                )
                .await;
                let after: Vec<usize> = (enabled_at..d.log.len())
                    .filter(|i| d.log[*i].kind == super::client::Kind::Client)
                    .collect();
                let (unread, unasked) = history_flag_set(d, &after, true);
                subs.push(if !unasked.is_empty() {
                    SubCheck::fail(
                        "stays-enabled",
                        format!("{}: the reply disabled history again (disableSendHistory:true) after the bridge had re-enabled it (false), unasked", unasked.join(", ")),
                    )
                } else if !unread.is_empty() {
                    SubCheck::skipped("stays-enabled", format!("whether history stayed on cannot be seen: {}", unread.join("; ")))
                } else if after.is_empty() {
                    SubCheck::skipped("stays-enabled", "the session ended")
                } else {
                    SubCheck::pass("stays-enabled", "history stayed on after the explicit false")
                });
            }
        }
        v.push(strict_from_subchecks("SB-S2", subs));
    }
}

async fn end_rules(d: &mut Driver, rng: &mut Rng, fx: &Fixture, v: &mut VerdictLog) {
    if let Some(why) = fx.missing(&["endSession"]) {
        v.push(Verdict::not_run("SB-S1", why.clone()));
        v.push(Verdict::not_run("SB-R12", why));
        return;
    }
    let mut s = Screen::new(rng);
    s.start(d, "end/start").await;
    let before = d.log.len();
    // A plain turn first, so the chat shows an answer when it ends: a bridge that "ends" by
    // re-sending that answer unchanged shows nothing new, which is SB-S1's fault to see.
    s.send(d, "hello before the end", "end/before").await;
    // The scenario is entered when the session ends: a reply that ends it with nothing to show
    // misses the step's `expect` (there is no text to match) but is exactly SB-S1's fault, so
    // it is judged rather than skipped.
    if let Err(why) = toggle(
        &mut s,
        d,
        fx,
        "endSession",
        "end",
        |s| s.ended,
        "set endSession",
    )
    .await
        && !s.ended
    {
        v.push(Verdict::skipped("SB-S1", why.clone()));
        v.push(Verdict::skipped("SB-R12", why));
        return;
    }
    let refused = s.send(d, "are you there?", "end/after").await.is_none();
    let mut s1 = Vec::new();
    if !refused {
        s1.push("internal: the emulated client sent after endSession".to_string());
    }
    for x in d.log[before..].iter().filter(|x| ends(x)) {
        if let Ok(r) = x.judged(Profile::Gamma) {
            let (changed, same) = x.changed(&r);
            if !changed.iter().any(|m| !m.content.is_empty()) {
                s1.push(format!(
                    "{}: endSession:true with no {}message to show{}; the client will send nothing more, so the bridge cannot finish later",
                    x.label,
                    if same > 0 { "new " } else { "" },
                    match same {
                        0 => String::new(),
                        n => format!(" ({})", resent_note(n)),
                    }
                ));
            }
        }
    }
    v.push(if s1.is_empty() {
        Verdict::pass("SB-S1")
    } else {
        Verdict::fail("SB-S1", s1.join("; "))
    });
    // SB-R12: "handled deliberately (reply, or end again), never 5xx". A 5xx is seen without
    // reading the body; decoding is the rule named by [`fault_owner`] (a sub-check skipped
    // naming it), as is a reply that never came (one fault, one verdict).
    let mut again = s.reopen();
    let i = again.start(d, "end/reopen").await;
    let x = &d.log[i];
    let no_5xx = match x.status() {
        None => SubCheck::skipped("no-5xx", unreadable(x).unwrap_or_default()),
        Some(st) if st >= 500 => SubCheck::fail("no-5xx", format!("{}: status {st}", x.label)),
        Some(st) => SubCheck::pass("no-5xx", format!("status {st}")),
    };
    let handled = match x.judged(Profile::Gamma) {
        Err(_) => SubCheck::skipped("handled", unreadable(x).unwrap_or_default()),
        Ok(r) => SubCheck::pass(
            "handled",
            format!(
                "ended again: {}, {} message(s)",
                r.options.and_then(|o| o.end_session).unwrap_or(false),
                r.messages.len()
            ),
        ),
    };
    let verdict = strict_from_subchecks("SB-R12", vec![no_5xx, decodes(x), handled]);
    v.push(if verdict.status == Status::Pass {
        let notes = verdict
            .subchecks
            .iter()
            .map(|c| c.evidence.clone())
            .collect::<Vec<_>>();
        let subs = verdict.subchecks.clone();
        pass_with("SB-R12", vec![notes.join(", ")]).with_subchecks(subs)
    } else {
        verdict
    });
}

async fn two_chats(d: &mut Driver, rng: &mut Rng, fx: &Fixture, words: &mut Words) -> Verdict {
    let (wa, wb) = (words.next(), words.next());
    let mut a = Screen::new(rng);
    let mut b = Screen::new(rng);
    a.start(d, "two-chats/a-start").await;
    b.start(d, "two-chats/b-start").await;
    // Interleaved step by step: A remembers, B remembers, A recalls, B recalls.
    for (s, w, l) in [(&mut a, &wa, "two-chats/a"), (&mut b, &wb, "two-chats/b")] {
        if let Ran::NotEntered(why) =
            run_steps(s, d, "remember", steps(fx, "remember"), w, l, false).await
        {
            return Verdict::skipped("SB-S4", why);
        }
    }
    let ra = recall(&mut a, d, fx, &wa, "two-chats/a").await;
    let rb = recall(&mut b, d, fx, &wb, "two-chats/b").await;
    let mut subs = Vec::new();
    for (name, r, own, other) in [("chat-a", &ra, &wa, &wb), ("chat-b", &rb, &wb, &wa)] {
        subs.push(match r {
            Recall::Named(i) if reply_text(d, *i).to_lowercase().contains(other.as_str()) => {
                SubCheck::fail(
                    name,
                    format!(
                        "recalled the other chat's word {other:?}: {}",
                        reply_quote(d, *i)
                    ),
                )
            }
            Recall::Named(_) => SubCheck::pass(name, format!("recalled its own word {own:?}")),
            Recall::Unreadable(why) => SubCheck::skipped(name, why.clone()),
            Recall::Missed(why) => SubCheck::fail(
                name,
                match words.other_in(why, &[own]) {
                    Some(w) if w == other => format!("{why}: the other chat's word (cross-talk)"),
                    Some(w) => format!("{why}: {w:?}, a word another chat was told (cross-talk)"),
                    None => why.clone(),
                },
            ),
        });
    }
    strict_from_subchecks("SB-S4", subs)
}

/// Over the replies at `at`: why each unreadable one cannot be read, and the labels of those
/// that set `disableSendHistory` to `value` (SB-S2's `stays-disabled` and `stays-enabled`).
fn history_flag_set(d: &Driver, at: &[usize], value: bool) -> (Vec<String>, Vec<String>) {
    let unread = at.iter().filter_map(|i| unreadable(&d.log[*i])).collect();
    let set = at
        .iter()
        .filter(|i| {
            d.log[**i]
                .judged(Profile::Gamma)
                .ok()
                .and_then(|r| r.options)
                .and_then(|o| o.disable_send_history)
                == Some(value)
        })
        .map(|i| d.log[*i].label.clone())
        .collect();
    (unread, set)
}
