//! The scenario fixture: what makes *this* bridge remember and recall a word, repeat what it
//! said, stop and resume using `history`, and end a session. `[sidebridge.fixture]` in
//! `bridgewire.toml`, overridden key by key by `check sidebridge` flags.
//!
//! ```toml
//! [sidebridge.fixture]
//! remember = "remember {word}"            # a plain prompt: one send
//! recall = "recall"                       # its reply must contain the word
//! repeat = "what did you say?"            # its reply must contain the bridge's previous reply
//! disableHistory = "disable history"      # must set options.disableSendHistory true
//! enableHistory = "enable history"        # must set options.disableSendHistory false
//! endSession = { send = "bye", expect = "(?i)bye" }   # a send with the reply it must match
//! # or a short scripted exchange, each step with an optional expected reply (a regex):
//! # remember = [{ send = "let's play a game" , expect = "(?i)ready" }, { send = "the word is {word}" }]
//! ```
//!
//! `{word}` is replaced by a fresh random token per run (in `expect`, by the token
//! regex-escaped). It must appear in `remember` and nowhere in `recall` or `repeat`, so an echo
//! of the question or a constant reply can never pass. The last step of `recall` and `repeat`
//! is the judged one: its `expect` (default: "contains the word" / "contains the previous
//! reply") decides the rule. Every other step's `expect` is a gate: a reply that does not match
//! means the bridge did not enter the scenario, and the rule is *skipped* with the reply quoted.
//! A rule whose scenario has no fixture is *not run*, naming the key to set.

use serde_json::Value;

/// Keys of the `[sidebridge]` section (registered in `config::KNOWN_SECTIONS`, which warns
/// about any other by name).
pub const SECTION_KEYS: &[&str] = &["fixture"];

/// Keys of `[sidebridge.fixture]` (registered in `config::KNOWN_SECTIONS`, which warns about
/// any other by name).
pub const FIXTURE_KEYS: &[&str] = &[
    "remember",
    "recall",
    "repeat",
    "disableHistory",
    "enableHistory",
    "endSession",
];

/// The scenario keys of `[sidebridge.fixture]`, with the flag that overrides each.
pub const SCENARIOS: &[(&str, &str)] = &[
    ("remember", "--remember"),
    ("recall", "--recall"),
    ("repeat", "--repeat"),
    ("disableHistory", "--disable-history"),
    ("enableHistory", "--enable-history"),
    ("endSession", "--end-session"),
];

/// One send of a scenario, and the reply it must match (a regex, `{word}` substituted).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub send: String,
    pub expect: Option<String>,
}

impl Step {
    pub fn text(&self, word: &str) -> String {
        self.send.replace("{word}", word)
    }

    /// The expected-reply regex with `word` substituted (escaped).
    pub fn pattern(&self, word: &str) -> Option<regex::Regex> {
        self.expect.as_ref().map(|p| {
            regex::Regex::new(&p.replace("{word}", &regex::escape(word)))
                .expect("validated when the fixture was read")
        })
    }
}

/// A scenario: one or more sends.
pub type Scenario = Vec<Step>;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fixture {
    pub remember: Option<Scenario>,
    pub recall: Option<Scenario>,
    pub repeat: Option<Scenario>,
    pub disable_history: Option<Scenario>,
    pub enable_history: Option<Scenario>,
    pub end_session: Option<Scenario>,
}

impl Fixture {
    pub fn get(&self, key: &str) -> Option<&Scenario> {
        match key {
            "remember" => self.remember.as_ref(),
            "recall" => self.recall.as_ref(),
            "repeat" => self.repeat.as_ref(),
            "disableHistory" => self.disable_history.as_ref(),
            "enableHistory" => self.enable_history.as_ref(),
            "endSession" => self.end_session.as_ref(),
            _ => None,
        }
    }

    fn slot(&mut self, key: &str) -> &mut Option<Scenario> {
        match key {
            "remember" => &mut self.remember,
            "recall" => &mut self.recall,
            "repeat" => &mut self.repeat,
            "disableHistory" => &mut self.disable_history,
            "enableHistory" => &mut self.enable_history,
            _ => &mut self.end_session,
        }
    }

    /// Sets one scenario to a plain prompt (a flag), validated like the file's value.
    pub fn set_prompt(&mut self, key: &str, prompt: &str) -> Result<(), String> {
        let flag = SCENARIOS
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, f)| *f)
            .unwrap_or(key);
        let s = vec![Step {
            send: prompt.to_string(),
            expect: None,
        }];
        validate(key, &s).map_err(|e| format!("{flag}: {e}"))?;
        *self.slot(key) = Some(s);
        Ok(())
    }

    /// The "not run" reason for a rule that needs `keys`, or `None` when all are set.
    pub fn missing(&self, keys: &[&str]) -> Option<String> {
        let missing: Vec<&str> = keys
            .iter()
            .copied()
            .filter(|k| self.get(k).is_none())
            .collect();
        if missing.is_empty() {
            return None;
        }
        let flags: Vec<&str> = missing
            .iter()
            .filter_map(|k| SCENARIOS.iter().find(|(s, _)| s == k).map(|(_, f)| *f))
            .collect();
        Some(format!(
            "no fixture for its scenario: set {} in [sidebridge.fixture] (or {})",
            missing.join(", "),
            flags.join(", ")
        ))
    }
}

fn validate(key: &str, steps: &Scenario) -> Result<(), String> {
    if steps.is_empty() {
        return Err("needs at least one step".into());
    }
    let uses_word = steps.iter().any(|s| s.send.contains("{word}"));
    match key {
        "remember" if !uses_word => {
            return Err("must contain `{word}` in a sent text (the word to remember)".into());
        }
        "recall" | "repeat" if uses_word => {
            return Err(
                "must not contain `{word}` in a sent text (the word must never be in the question)"
                    .into(),
            );
        }
        _ => {}
    }
    for (i, s) in steps.iter().enumerate() {
        if s.send.trim().is_empty() && key != "remember" {
            // An empty send is legal on the wire, but never enters a scenario.
            return Err(format!("step {} sends an empty text", i + 1));
        }
        if let Some(p) = &s.expect {
            regex::Regex::new(&p.replace("{word}", "word"))
                .map_err(|e| format!("step {}: `expect` is not a valid regex: {e}", i + 1))?;
        }
    }
    Ok(())
}

fn step(v: &Value) -> Result<Step, String> {
    match v {
        Value::String(s) => Ok(Step {
            send: s.clone(),
            expect: None,
        }),
        Value::Object(o) => {
            if let Some(k) = o.keys().find(|k| *k != "send" && *k != "expect") {
                return Err(format!(
                    "unknown key `{k}` in a step (expected `send`, `expect`)"
                ));
            }
            let send = o
                .get("send")
                .and_then(Value::as_str)
                .ok_or("a step needs `send`, a string")?
                .to_string();
            let expect = match o.get("expect") {
                None => None,
                Some(Value::String(p)) => Some(p.clone()),
                Some(_) => return Err("`expect` must be a string (a regex)".into()),
            };
            Ok(Step { send, expect })
        }
        _ => Err("a step is a string or a table {send, expect}".into()),
    }
}

/// Reads the `[sidebridge]` section (a TOML table as JSON). Wrong types and invalid patterns
/// are errors naming the file and key; unknown keys are left to the config registry, which
/// warns about them by name (`warnings` gets nothing from here today, kept for future keys).
pub fn parse_section(
    section: &Value,
    file: &str,
    _warnings: &mut Vec<String>,
) -> Result<Fixture, String> {
    let o = section
        .as_object()
        .ok_or_else(|| format!("{file}: `sidebridge` must be a table"))?;
    let mut fx = Fixture::default();
    let Some(f) = o.get("fixture") else {
        return Ok(fx);
    };
    let f = f
        .as_object()
        .ok_or_else(|| format!("{file}: `sidebridge.fixture` must be a table"))?;
    for (k, v) in f.iter().filter(|(k, _)| FIXTURE_KEYS.contains(&k.as_str())) {
        let at = format!("{file}: `sidebridge.fixture.{k}`");
        let steps: Scenario = match v {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, s)| step(s).map_err(|e| format!("{at}[{i}]: {e}")))
                .collect::<Result<_, _>>()?,
            other => vec![step(other).map_err(|e| format!("{at}: {e}"))?],
        };
        validate(k, &steps).map_err(|e| format!("{at}: {e}"))?;
        *fx.slot(k) = Some(steps);
    }
    Ok(fx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_tables_and_scripts() {
        let mut w = Vec::new();
        let fx = parse_section(
            &json!({"fixture": {
                "remember": [{"send": "game?", "expect": "(?i)ready"}, "the word is {word}"],
                "recall": {"send": "which word?", "expect": "word was {word}"},
                "endSession": "bye",
                "typo": 1,
            }, "other": 2}),
            "b.toml",
            &mut w,
        )
        .unwrap();
        assert_eq!(fx.remember.as_ref().unwrap().len(), 2);
        assert_eq!(
            fx.remember.as_ref().unwrap()[1].text("x.y"),
            "the word is x.y"
        );
        let p = fx.recall.as_ref().unwrap()[0].pattern("x.y").unwrap();
        assert!(p.is_match("the word was x.y") && !p.is_match("the word was xzy"));
        assert!(w.is_empty(), "{w:?}");
        // Unknown keys are warned about by the config registry, by name.
        let cfg = crate::config::Config::parse(
            "[sidebridge]\nother = 2\n[sidebridge.fixture]\nrecall = \"r\"\ntypo = 1\n",
            std::path::Path::new("b.toml"),
        )
        .unwrap();
        assert_eq!(
            cfg.warnings,
            vec![
                "b.toml: unknown key `sidebridge.fixture.typo` (ignored)",
                "b.toml: unknown key `sidebridge.other` (ignored)",
            ]
        );
        assert!(cfg.sidebridge_fixture.recall.is_some());
        assert_eq!(
            fx.missing(&["recall", "repeat"]).unwrap(),
            "no fixture for its scenario: set repeat in [sidebridge.fixture] (or --repeat)"
        );
        assert_eq!(fx.missing(&["recall", "endSession"]), None);
    }

    #[test]
    fn errors_name_the_key() {
        let mut w = Vec::new();
        for (v, needle) in [
            (json!({"fixture": {"remember": "remember it"}}), "remember"),
            (
                json!({"fixture": {"recall": "recall {word}"}}),
                "never be in the question",
            ),
            (
                json!({"fixture": {"recall": {"send": "r", "expect": "("}}}),
                "regex",
            ),
            (json!({"fixture": {"repeat": 3}}), "repeat"),
            (json!({"fixture": 3}), "sidebridge.fixture"),
        ] {
            let e = parse_section(&v, "c.toml", &mut w).unwrap_err();
            assert!(e.contains("c.toml") && e.contains(needle), "{e}");
        }
    }
}
