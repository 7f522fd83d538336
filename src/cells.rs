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
    pub bridge_identity: Option<String>,
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
        m.insert(
            "bridge".into(),
            serde_json::json!({"command": info.bridge_command, "identity": info.bridge_identity}),
        );
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
