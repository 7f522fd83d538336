//! Cells as a user makes them: `manifest.json` (bb §2.3, plus the recorded bridge's identity and
//! the bridgewire version), packaging raw recordings into cells (§2.4) and recording a cell per
//! scenario from the user's own bridge.

use crate::cell::Cell;
use serde_json::Value;

/// The manifest of a cell, when it has a readable one.
pub fn manifest(cell: &Cell) -> Option<Value> {
    let text = std::fs::read_to_string(cell.path.join("manifest.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// The identity of the bridge a cell was recorded from, as its manifest states it
/// (`bridge.identity`, written by `record-cells` from the bridge's handshake).
pub fn manifest_identity(cell: &Cell) -> Option<String> {
    manifest(cell)?
        .get("bridge")?
        .get("identity")?
        .as_str()
        .map(str::to_string)
}

/// The handshake of the bridge a cell was recorded from, as its manifest states it
/// (`bridge.identity`, `bridge.handshake` and `bridge.refused`); `None` for a manifest written
/// before bridgewire kept the handshake there.
pub fn manifest_handshake(cell: &Cell) -> Option<crate::protocol::Identity> {
    let bridge = manifest(cell)?.get("bridge")?.clone();
    Some(crate::protocol::Identity {
        text: bridge.get("identity")?.as_str()?.to_string(),
        facts: bridge.get("handshake")?.clone(),
        refused: bridge
            .get("refused")
            .and_then(Value::as_str)
            .map(str::to_string),
        running: Vec::new(),
    })
}

/// One scenario to record: a name (the cell's name) and its steps, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub name: String,
    pub steps: Vec<Step>,
}

/// What a scenario does; each protocol's recorder plays these its own way (a bb turn, a Side
/// Bridge chat message, a Bridle browser prompt).
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Send this text as the user and wait for the answer to settle.
    Prompt(String),
    /// End the session (bb: `thread/stop {release}`).
    Stop,
    /// Resume the session stopped before (bb: `thread/resume`).
    Resume,
    /// Pause.
    WaitMs(u64),
}

/// The scenarios recorded when the user names none: one turn, and a resumed session.
pub fn default_scenarios(prompt: &str) -> Vec<Scenario> {
    vec![
        Scenario {
            name: "turn".into(),
            steps: vec![Step::Prompt(prompt.into())],
        },
        Scenario {
            name: "resume".into(),
            steps: vec![
                Step::Prompt(prompt.into()),
                Step::Stop,
                Step::Resume,
                Step::Prompt(format!("{prompt} (again)")),
            ],
        },
    ]
}

/// Reads a scenario file (TOML, or JSON when it ends in `.json`):
///
/// ```toml
/// [[scenario]]
/// name = "greeting"
/// steps = ["hello", { stop = true }, { resume = true }, "and again", { wait_ms = 200 }]
/// ```
///
/// A string step is a prompt. Errors name the file and the scenario.
pub fn load_scenarios(path: &std::path::Path) -> Result<Vec<Scenario>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let doc: Value = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| format!("{}:{}: {e}", path.display(), e.line()))?
    } else {
        let t: toml::Table = text
            .parse()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::to_value(t).map_err(|e| format!("{}: {e}", path.display()))?
    };
    let list = doc
        .get("scenario")
        .or_else(|| doc.get("scenarios"))
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{}: no [[scenario]] list", path.display()))?;
    let mut out = Vec::new();
    for (i, s) in list.iter().enumerate() {
        let at = |m: &str| format!("{}: scenario #{}: {m}", path.display(), i + 1);
        let name = s
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| valid_name(n))
            .ok_or_else(|| at("needs a `name` (letters, digits, `-`, `_`, `.`)"))?;
        if out.iter().any(|o: &Scenario| o.name == name) {
            return Err(at(&format!("the name `{name}` is used twice")));
        }
        let steps = s
            .get("steps")
            .and_then(Value::as_array)
            .ok_or_else(|| at("needs a `steps` list"))?;
        let mut parsed = Vec::new();
        for (j, st) in steps.iter().enumerate() {
            let step = match st {
                Value::String(p) => Step::Prompt(p.clone()),
                Value::Object(m) if m.get("prompt").is_some_and(Value::is_string) => {
                    Step::Prompt(m["prompt"].as_str().unwrap_or_default().to_string())
                }
                Value::Object(m) if m.get("stop") == Some(&Value::Bool(true)) => Step::Stop,
                Value::Object(m) if m.get("resume") == Some(&Value::Bool(true)) => Step::Resume,
                Value::Object(m) if m.get("wait_ms").is_some_and(Value::is_u64) => {
                    Step::WaitMs(m["wait_ms"].as_u64().unwrap_or(0))
                }
                other => {
                    return Err(at(&format!(
                        "step #{}: {other} is not a prompt, {{stop = true}}, {{resume = true}} or {{wait_ms = N}}",
                        j + 1
                    )));
                }
            };
            parsed.push(step);
        }
        out.push(Scenario {
            name: name.to_string(),
            steps: parsed,
        });
    }
    Ok(out)
}

/// A cell or provider name that is safe as one path segment.
pub fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n != "."
        && n != ".."
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// What a manifest says beyond what the lanes tell.
#[derive(Debug, Clone, Default)]
pub struct ManifestInfo {
    pub provider: String,
    pub cell: String,
    pub thread_id: Option<String>,
    /// `"process"` for process-scoped cells.
    pub process_scope: bool,
    pub cli_version: String,
    pub description: Option<String>,
    pub note: String,
    /// The recorded bridge: the command it ran as and its handshake identity.
    pub bridge_command: Option<String>,
    pub bridge_identity: Option<crate::protocol::Identity>,
}

/// Writes `<cell>/manifest.json` (bb §2.3 keys in order, then `bridge` and `bridgewire`),
/// counting the cell's lanes as they are on disk.
pub fn write_manifest(
    cell_dir: &std::path::Path,
    protocol: crate::protocol::Protocol,
    info: &ManifestInfo,
) -> Result<Value, String> {
    let mut lines = serde_json::Map::new();
    let mut runs = std::collections::BTreeSet::new();
    let mut min_ts: Option<f64> = None;
    for dir in protocol.directions() {
        let path = cell_dir.join(format!("{dir}.ndjson"));
        let mut n = 0u64;
        if path.exists() {
            let reader =
                crate::lane::read::LaneReader::open(&path, Some(dir)).map_err(|e| e.to_string())?;
            for entry in reader {
                let Ok(entry) = entry else { continue };
                n += 1;
                runs.insert(entry.run.to_bits());
                if entry.ts.is_finite() {
                    min_ts = Some(min_ts.map_or(entry.ts, |m| m.min(entry.ts)));
                }
            }
        }
        lines.insert(dir.to_string(), n.into());
    }
    let recorded_at = min_ts
        .map(|ms| crate::report::rfc3339_utc(ms as i64)[..10].to_string())
        .unwrap_or_default();
    let mut m = serde_json::Map::new();
    m.insert("provider".into(), info.provider.clone().into());
    m.insert("cell".into(), info.cell.clone().into());
    m.insert(
        "threadId".into(),
        info.thread_id.clone().map_or(Value::Null, Value::from),
    );
    m.insert(
        "scope".into(),
        if info.process_scope {
            "process"
        } else {
            "thread"
        }
        .into(),
    );
    m.insert("cliVersion".into(), info.cli_version.clone().into());
    m.insert("recordedAt".into(), recorded_at.into());
    m.insert(
        "description".into(),
        info.description
            .clone()
            .unwrap_or_else(|| info.cell.clone())
            .into(),
    );
    m.insert("note".into(), info.note.clone().into());
    m.insert("bridgeRuns".into(), runs.len().into());
    m.insert("lines".into(), Value::Object(lines));
    if info.bridge_command.is_some() || info.bridge_identity.is_some() {
        let mut bridge = serde_json::json!({
            "command": info.bridge_command.as_deref().map(crate::redact::command_line_text),
            "identity": info.bridge_identity.as_ref().map(|i| i.text.clone()),
        });
        // What of the handshake the runtime acts on, so parity can hold a later build's
        // handshake against these cells (`--base rec:`), not only two live legs'.
        if let Some(id) = &info.bridge_identity {
            bridge["handshake"] = id.facts.clone();
            if let Some(why) = &id.refused {
                bridge["refused"] = why.clone().into();
            }
        }
        m.insert("bridge".into(), bridge);
    }
    m.insert("bridgewire".into(), env!("CARGO_PKG_VERSION").into());
    let v = Value::Object(m);
    let path = cell_dir.join("manifest.json");
    std::fs::write(&path, crate::jsjson::to_string_pretty(&v) + "\n")
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(v)
}

/// Copies the lane files (and `.current` lanes) of a raw scope into `cell_dir`, leaving out
/// empty lanes (bb §2.4: a lane with no entries gets no file).
pub fn copy_lanes(
    scope_dir: &std::path::Path,
    cell_dir: &std::path::Path,
    protocol: crate::protocol::Protocol,
) -> Result<(), String> {
    std::fs::create_dir_all(cell_dir).map_err(|e| format!("{}: {e}", cell_dir.display()))?;
    for dir in protocol.directions() {
        for name in [
            format!("{dir}.ndjson"),
            format!("{dir}{}.ndjson", crate::lane::CURRENT_SUFFIX),
        ] {
            let from = scope_dir.join(&name);
            let Ok(meta) = std::fs::metadata(&from) else {
                continue;
            };
            if meta.len() == 0 {
                continue;
            }
            std::fs::copy(&from, cell_dir.join(&name))
                .map_err(|e| format!("{}: {e}", from.display()))?;
        }
    }
    Ok(())
}

/// bb's fixed description of a cell name (reference §2.2); `None` for other names.
pub fn known_description(cell: &str) -> Option<&'static str> {
    Some(match cell {
        "approval-allow" => "accept-edits mode; one out-of-sandbox command approved once",
        "approval-deny" => "accept-edits mode; one out-of-sandbox command denied",
        "archived-resume" => "resume of a thread archived natively by another client",
        "auth-failure" => "a turn against an empty provider config home (not signed in)",
        "compaction" => "a turn, then /compact",
        "empty-rollout" => "resume after the provider's session file was truncated to 0 bytes",
        "fork" => "fork from a resumed source thread, then one turn",
        "missing-rollout" => "resume after the provider's session file was moved away",
        "model-list" => "process-scoped model/list probe",
        "plan-mode" => "a /plan turn",
        "resume" => "a turn, a release stop, then a new turn that resumes",
        "steer" => "a long turn steered mid-way",
        "stop-interrupt" => {
            "a turn interrupted by thread/stop, then a new turn on the resumed provider session"
        }
        "subagent" => "one task delegated to a sub-agent (where the provider has one)",
        "turn-tools" => "one turn that reads a file, edits it and runs a shell command",
        "user-question" => "the provider asks the user a question and continues with the answer",
        "web-search" => "a turn that uses web search or web fetch (or a shell fallback)",
        _ => return None,
    })
}

/// One line of a packaging table (`provider TAB cell TAB threadId [TAB note]`).
#[derive(Debug, Clone, PartialEq)]
pub struct PackageRow {
    pub provider: String,
    pub cell: String,
    pub thread_id: String,
    pub note: String,
}

/// Reads `cells.tsv`; errors name `file:line`.
pub fn load_package_table(path: &std::path::Path) -> Result<Vec<PackageRow>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |m: &str| format!("{}:{}: {m}", path.display(), i + 1);
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 3 || f[..3].iter().any(|x| x.trim().is_empty()) {
            return Err(at("expected `provider<TAB>cell<TAB>threadId[<TAB>note]`"));
        }
        for name in [f[0], f[1]] {
            if !valid_name(name) {
                return Err(at(&format!("`{name}` is not a folder name")));
            }
        }
        if rows
            .iter()
            .any(|r: &PackageRow| r.provider == f[0] && r.cell == f[1])
        {
            return Err(at(&format!("{}/{} is listed twice", f[0], f[1])));
        }
        rows.push(PackageRow {
            provider: f[0].into(),
            cell: f[1].into(),
            thread_id: f[2].into(),
            note: f.get(3).map(|s| s.to_string()).unwrap_or_default(),
        });
    }
    Ok(rows)
}

/// Packages one raw scope into `cell_dir` (bb §2.4): each lane rewritten entry by entry as JS
/// JSON (extra keys kept), empty lanes left out; for the thread id `_process`, only the entries
/// of the run of the last `model/list` request are kept. Returns the lines written.
pub fn package_scope(
    raw_scope: &std::path::Path,
    cell_dir: &std::path::Path,
    process: bool,
) -> Result<(crate::protocol::Protocol, usize), String> {
    let root = raw_scope.parent().unwrap_or(raw_scope);
    let cell = Cell::at(root, raw_scope)
        .ok_or_else(|| format!("{}: no lanes of any known direction", raw_scope.display()))?;
    let read = |lane: &crate::lane::merge::LaneFile| -> Result<Vec<Value>, String> {
        let text = std::fs::read_to_string(&lane.path)
            .map_err(|e| format!("{}: {e}", lane.path.display()))?;
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str::<Value>(l)
                    .map_err(|e| format!("{}:{}: {e}", lane.path.display(), i + 1))
            })
            .collect()
    };
    let keep_run = if process {
        let requests = cell
            .lanes
            .iter()
            .find(|l| l.dir == "runtime→bridge")
            .ok_or_else(|| {
                format!(
                    "{}: `_process` needs a runtime→bridge lane",
                    raw_scope.display()
                )
            })?;
        let run = read(requests)?
            .iter()
            .rev()
            .find(|e| {
                e["line"]
                    .as_str()
                    .and_then(|l| serde_json::from_str::<Value>(l).ok())
                    .is_some_and(|m| m["method"] == "model/list")
            })
            .map(|e| e["run"].clone())
            .ok_or_else(|| {
                format!(
                    "{}: no model/list request to select a run",
                    raw_scope.display()
                )
            })?;
        Some(run)
    } else {
        None
    };
    std::fs::create_dir_all(cell_dir).map_err(|e| format!("{}: {e}", cell_dir.display()))?;
    let mut total = 0;
    for lane in cell.lanes.iter().chain(&cell.current) {
        let entries: Vec<Value> = read(lane)?
            .into_iter()
            .filter(|e| keep_run.as_ref().is_none_or(|r| &e["run"] == r))
            .collect();
        if entries.is_empty() {
            continue;
        }
        total += entries.len();
        let text: String = entries
            .iter()
            .map(|e| crate::jsjson::to_string(e) + "\n")
            .collect();
        let name = lane.path.file_name().unwrap_or_default();
        std::fs::write(cell_dir.join(name), text)
            .map_err(|e| format!("{}: {e}", cell_dir.display()))?;
    }
    Ok((cell.protocol, total))
}
