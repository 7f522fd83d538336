//! `bridgewire record-cells`: a cell per scenario from the user's own bridge, with a manifest,
//! redacted before it is written into the recordings folder.

use super::exit;
use crate::cells::{self, ManifestInfo};
use crate::protocol::{BridgeCommand, Protocol, RecordRequest};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Scenarios: without --scenarios, `turn` (one prompt) and `resume` (a prompt, \
a stop, a resume, a prompt). A scenario file (TOML, or JSON):\n\n  [[scenario]]\n  name = \"greeting\"\n  \
steps = [\"hello\", { stop = true }, { resume = true }, \"again\", { wait_ms = 200 }]\n\n\
Each cell is written as <out>/<provider>/<scenario>/ with a manifest.json naming the bridge \
(its command, handshake identity and the handshake facts parity compares) and the bridgewire version. Then: `bridgewire pins --update <out>` \
and `bridgewire parity --base rec:<out> --head cmd:<bridge> <out>`.\n\
Exit codes: 0 recorded; 2 invalid input, or the bridge could not be recorded (the cause is printed)."
)]
pub struct RecordCellsArgs {
    /// The protocol the bridge speaks (`bb`, `sidebridge`, `bridle`).
    pub protocol: String,
    /// Recordings folder the cells are written into (existing cells of the same names are
    /// replaced).
    #[arg(long, default_value = "recordings")]
    pub out: PathBuf,
    /// The provider folder (first key segment) of the cells.
    #[arg(long, default_value = "own")]
    pub provider: String,
    /// A scenario file (see below); default: the built-in scenarios.
    #[arg(long, value_name = "FILE")]
    pub scenarios: Option<PathBuf>,
    /// The prompt the built-in scenarios send.
    #[arg(long, default_value = "hello")]
    pub prompt: String,
    /// `NAME=COMMAND`: the bridge reads its provider command from $NAME; it is pointed at
    /// `bridgewire record child -- COMMAND`, so the provider lanes are recorded too. Repeatable.
    #[arg(long, value_name = "NAME=COMMAND")]
    pub provider_env: Vec<String>,
    /// The provider CLI version written into each manifest (`cliVersion`).
    #[arg(long, default_value = "")]
    pub cli_version: String,
    /// Bound of every wait.
    #[arg(long, value_name = "DURATION", default_value_t = 15000, value_parser = super::args::parse_ms)]
    pub timeout_ms: u64,
    /// bridgewire's own bound on a whole reply of a Side Bridge bridge, in seconds (the app has
    /// none: it waits as long as data keeps arriving); never under --timeout-ms.
    #[arg(long, default_value_t = 300.0, value_name = "SECS", value_parser = super::args::parse_secs)]
    pub max_reply_time: f64,
    /// How to find a Side Bridge bridge's URL in its start-up output, for a banner the default
    /// reading passes over (first capture group, else the whole match), as `check sidebridge
    /// --url-pattern`.
    #[arg(long, value_name = "REGEX", value_parser = super::args::parse_regex)]
    pub url_pattern: Option<regex::Regex>,
    /// The bridge command.
    #[arg(last = true, required = true, value_name = "BRIDGE COMMAND")]
    pub command: Vec<String>,
}

pub fn record_cells(a: &RecordCellsArgs) -> u8 {
    let Some(protocol) = Protocol::from_id(&a.protocol) else {
        eprintln!(
            "error: unknown protocol `{}` (one of: {})",
            a.protocol,
            Protocol::ALL.map(|p| p.id()).join(", ")
        );
        return exit::INVALID_INPUT;
    };
    if !cells::valid_name(&a.provider) {
        eprintln!("error: --provider `{}` is not a folder name", a.provider);
        return exit::INVALID_INPUT;
    }
    let scenarios = match &a.scenarios {
        Some(p) => match cells::load_scenarios(p) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return exit::INVALID_INPUT;
            }
        },
        None => cells::default_scenarios(&a.prompt),
    };
    let mut provider_env = Vec::new();
    for pe in &a.provider_env {
        match pe.split_once('=') {
            Some((n, c)) if !n.is_empty() && !c.is_empty() => {
                provider_env.push((n.to_string(), c.to_string()))
            }
            _ => {
                eprintln!("error: --provider-env `{pe}` is not NAME=COMMAND");
                return exit::INVALID_INPUT;
            }
        }
    }
    crate::signals::install();
    let tmp = match crate::signals::temp_dir("bridgewire-record-cells-") {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot create a temp dir: {e}");
            return exit::INVALID_INPUT;
        }
    };
    let raw = tmp.path().join("raw");
    let stage = tmp.path().join("stage");
    let _ = std::fs::create_dir_all(&raw);
    let bridge = BridgeCommand {
        address_pattern: a.url_pattern.clone().map(crate::protocol::AddressPattern),
        ..BridgeCommand::new(a.command.clone())
    };
    if let Some(why) = crate::parity::cannot_start(&bridge) {
        eprintln!("error: the bridge cannot start: {why}");
        return exit::INVALID_INPUT;
    }
    let recorded = match protocol.live().record(&RecordRequest {
        bridge: &bridge,
        scenarios: &scenarios,
        raw: &raw,
        provider: &a.provider,
        timeout: std::time::Duration::from_millis(a.timeout_ms),
        max_reply: std::time::Duration::from_secs_f64(a.max_reply_time),
        provider_env: &provider_env,
    }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID_INPUT;
        }
    };
    for r in &recorded {
        let cell_dir = stage.join(&a.provider).join(&r.name);
        let info = ManifestInfo {
            provider: a.provider.clone(),
            cell: r.name.clone(),
            thread_id: r.thread_id.clone(),
            process_scope: false,
            cli_version: a.cli_version.clone(),
            description: None,
            note: format!("recorded by bridgewire record-cells {protocol}"),
            bridge_command: Some(bridge.display()),
            bridge_identity: r.identity.clone(),
        };
        if let Err(e) = cells::copy_lanes(&r.scope_dir, &cell_dir, protocol)
            .and_then(|()| cells::write_manifest(&cell_dir, protocol, &info).map(|_| ()))
        {
            eprintln!("error: scenario {}: {e}", r.name);
            return exit::INVALID_INPUT;
        }
    }
    // Redacted on the way into the recordings folder: nothing unredacted is written there.
    let summary = match crate::recordings::redact_tree(&stage, &a.out, &Default::default()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID_INPUT;
        }
    };
    for r in &recorded {
        let dir = a.out.join(&a.provider).join(&r.name);
        let lines: usize = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".ndjson"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .map(|t| t.lines().filter(|l| !l.trim().is_empty()).count())
            .sum();
        println!("{}/{}: {lines} lines", a.provider, r.name);
    }
    println!(
        "{} cells recorded under {} ({} files redacted)",
        recorded.len(),
        a.out.display(),
        summary.files
    );
    exit::OK
}

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Lane files (*.ndjson): each entry's `line` gets the structural and \
textual passes; *.json files the textual pass; other files are copied. Without --out the tree \
is redacted in place. Redacting twice changes nothing.\n\
Exit codes: 0 redacted; 3 a secret survived (nothing written; each file:line is named); 2 invalid input."
)]
pub struct RedactArgs {
    /// A recordings folder (or any tree of lanes).
    pub input: PathBuf,
    /// Where the redacted tree goes (default: in place). Cell folders written are replaced.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The home directory to replace with /home/user (default: $HOME).
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// A value that must not remain anywhere (replaced; checked by the sweep). Repeatable.
    #[arg(long, value_name = "VALUE")]
    pub secret: Vec<String>,
}

/// Exit status when a secret survived redaction (bb §3.4).
pub const SURVIVORS: u8 = 3;

pub fn redact(a: &RedactArgs) -> u8 {
    let out = a.out.clone().unwrap_or_else(|| a.input.clone());
    let opts = crate::recordings::Options {
        home: a.home.clone(),
        secrets: a.secret.clone(),
        learn_from: Vec::new(),
    };
    match crate::recordings::redact_tree(&a.input, &out, &opts) {
        Ok(s) => {
            println!(
                "redacted {} recording files into {} (home={} → /home/user; {} lines changed); 0 survivors",
                s.files,
                out.display(),
                s.home,
                s.changed_lines
            );
            exit::OK
        }
        Err(e) if e.starts_with("SECRETS STILL PRESENT") => {
            eprintln!("{e}");
            SURVIVORS
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::INVALID_INPUT
        }
    }
}

#[derive(clap::Args, Debug)]
#[command(
    after_help = "cells.tsv: one line per cell, `provider<TAB>cell<TAB>threadId[<TAB>note]`; \
blank lines are ignored. The source of a line is <raw>/<provider>/<threadId>/ (the scope folder \
`record` wrote). Thread id `_process` keeps only the run of the last model/list request. Each \
cell gets a manifest.json (bb §2.3, plus the bridgewire version), and the whole tree is redacted \
(as `bridgewire redact`) into --out, where the packaged cell folders are replaced; a secret that \
survives redaction aborts the packaging and nothing is written.\n\
Exit codes: 0 packaged; 3 a secret survived redaction; 2 invalid input."
)]
pub struct PackageArgs {
    /// The raw recording root (`record bb --dir`, `record sidebridge --dir`, …).
    #[arg(long)]
    pub raw: PathBuf,
    /// The packaging table.
    #[arg(long, value_name = "cells.tsv")]
    pub cells: PathBuf,
    /// The recordings folder the cells go into.
    #[arg(long)]
    pub out: PathBuf,
    /// Provider CLI versions for the manifests: a JSON object provider → version.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    pub versions: String,
    /// The home directory to replace with /home/user (default: $HOME).
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// A value that must not remain anywhere (replaced; checked by the sweep). Repeatable.
    #[arg(long, value_name = "VALUE")]
    pub secret: Vec<String>,
}

pub fn package(a: &PackageArgs) -> u8 {
    let rows = match cells::load_package_table(&a.cells) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID_INPUT;
        }
    };
    let versions: serde_json::Map<String, serde_json::Value> =
        match serde_json::from_str(&a.versions) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => {
                eprintln!("error: --versions: not a JSON object of provider → version");
                return exit::INVALID_INPUT;
            }
        };
    crate::signals::install();
    let tmp = match crate::signals::temp_dir("bridgewire-package-") {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot create a temp dir: {e}");
            return exit::INVALID_INPUT;
        }
    };
    let stage = tmp.path().join("stage");
    let mut lines = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let process = row.thread_id == "_process";
        let src = a
            .raw
            .join(&row.provider)
            .join(crate::lane::scope_dir_name(if process {
                None
            } else {
                Some(&row.thread_id)
            }));
        let at = format!("{}:{}", a.cells.display(), i + 1);
        if !src.is_dir() {
            eprintln!("error: {at}: no raw recording {}", src.display());
            return exit::INVALID_INPUT;
        }
        let cell_dir = stage.join(&row.provider).join(&row.cell);
        let (protocol, total) = match cells::package_scope(&src, &cell_dir, process) {
            Ok(x) => x,
            Err(e) => {
                eprintln!("error: {at}: {e}");
                return exit::INVALID_INPUT;
            }
        };
        let identity = crate::cell::Cell::at(&stage, &cell_dir)
            .and_then(|c| protocol.live().recorded_identity(&c));
        let info = ManifestInfo {
            provider: row.provider.clone(),
            cell: row.cell.clone(),
            thread_id: (!process).then(|| row.thread_id.clone()),
            process_scope: process,
            cli_version: versions
                .get(&row.provider)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string(),
            description: cells::known_description(&row.cell).map(str::to_string),
            note: row.note.clone(),
            bridge_command: None,
            bridge_identity: identity,
        };
        if let Err(e) = cells::write_manifest(&cell_dir, protocol, &info) {
            eprintln!("error: {at}: {e}");
            return exit::INVALID_INPUT;
        }
        lines.push(format!("{}/{}: {total} lines", row.provider, row.cell));
    }
    let opts = crate::recordings::Options {
        home: a.home.clone(),
        secrets: a.secret.clone(),
        learn_from: vec![a.raw.clone()],
    };
    match crate::recordings::redact_tree(&stage, &a.out, &opts) {
        Ok(_) => {}
        Err(e) if e.starts_with("SECRETS STILL PRESENT") => {
            eprintln!("{e}");
            return SURVIVORS;
        }
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID_INPUT;
        }
    }
    for l in &lines {
        println!("{l}");
    }
    let mut providers: Vec<&str> = rows.iter().map(|r| r.provider.as_str()).collect();
    providers.sort();
    providers.dedup();
    println!("{} cells packaged under {}", rows.len(), a.out.display());
    println!("providers: {}", providers.join(","));
    exit::OK
}
