//! Parity: compare two builds ("legs") cell by cell on normalized event lists, rows and the
//! grammar layer (reference §8), for any protocol with a [`crate::protocol::Model`].
//!
//! A leg is where a cell's events come from:
//!
//! | leg | spelled | events from |
//! | --- | --- | --- |
//! | command | `cmd:<shell words>` (or anything that is not a path or ref) | a live replay of the cell against that bridge command |
//! | checkout | `dir:<path>` (a directory with `bridgewire.toml` or `Cargo.toml`) | built with `[parity] build`, replayed against `[parity] bridge` |
//! | git ref | `ref:<rev>` (or a name `git rev-parse` resolves) | a temporary worktree of this repository at that ref, then as a checkout |
//! | recordings | `rec:<dir>` (a recordings folder) | the same cell recorded in that folder, assembled offline |
//! | dump | `dump:<dir>` (a `--dump-dir` output) | `<stem>.<leg>.events.json` / `<stem>.events.json` lists |
//!
//! Both legs of a cell run concurrently, cells in parallel. Lists are normalized (ids interned,
//! times zeroed), the allowlist masks both legs in file order, then events, rows and the grammar
//! layer (`<rule>:<eventType>`) are LCS-diffed. A cell fails on any difference, any stale
//! allowlist entry, any replay stall, a leg error, or an empty replay.

use crate::allowlist::{self, Entry as AllowEntry};
use crate::cell::Cell;
use crate::diff::{self, ListDiff};
use crate::protocol::{BridgeCommand, EventSink, GrammarDrop};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What one leg produced for one cell.
#[derive(Debug, Clone, Default)]
pub struct LegRun {
    pub events: Vec<Value>,
    pub rows: Vec<Value>,
    /// `<rule>:<eventType>` per grammar violation, in order.
    pub grammar: Vec<String>,
    pub unhandled: u64,
    pub stalls: Vec<String>,
    /// The leg could not run this cell at all (build failure, missing cell, no replay support).
    pub error: Option<String>,
    /// Events the recording itself assembles (for the empty-replay check), when known.
    pub recorded_events: Option<u64>,
    /// The cell cannot be replayed this way (e.g. no runtime lane): reported as SKIP.
    pub skip: Option<String>,
    /// What the leg's bridge sent that the protocol allows and its events do not hold
    /// ([`crate::protocol::LiveReplay::left_out`]), listed with the model's extensions.
    pub left_out: Vec<String>,
    /// Unreadable entries of the recording this leg read (`file:line: why`): bad input, so the
    /// cell is an ERROR and `parity` exits 2, as `pins` does for the same lane.
    pub lane_errors: Vec<String>,
    /// Answers and spec notifications beside the events ([`crate::protocol::Model::wire_outcomes`]);
    /// `None` where this leg does not hold them (a dump, a protocol that compares none).
    pub wire: Option<Vec<String>>,
    /// A live leg's `wire` as a recording of the cell holds it
    /// ([`crate::protocol::LiveReplay::wire_in_cell`]): `wire` when compared with a recording.
    pub wire_in_cell: Option<Vec<String>>,
    /// Every reply refused the credentials sent ([`crate::protocol::LiveReplay::refused`]).
    pub refused: Option<String>,
    /// What a live leg's bridge did that the spec forbids and the lists cannot show
    /// ([`crate::protocol::LiveReplay::problems`]): each fails the cell, named.
    pub problems: Vec<String>,
}

/// A way to produce a cell's events.
pub trait LegRunner: Sync + Send {
    fn label(&self) -> String;
    fn run(&self, key: &str, cell: Option<&Cell>) -> LegRun;
    /// Whether the leg replays live, so an empty result may mean a broken replay (the
    /// empty-replay check compares it with what the recording assembles).
    fn replays_live(&self) -> bool {
        false
    }
    /// The bridge a live leg starts (for the same-bridge refusal and the identity check).
    fn bridge(&self) -> Option<&BridgeCommand> {
        None
    }
    /// The recordings a recorded leg reads (where its bridge's handshake is kept).
    fn recordings_root(&self) -> Option<&Path> {
        None
    }
    /// The cells' runs from one replay of them all, for a protocol whose cells share one
    /// bridge ([`crate::protocol::Live::replay_together`]); `None`: each cell is [`run`] alone.
    ///
    /// [`run`]: LegRunner::run
    fn run_together(&self, _cells: &[&Cell]) -> Option<Vec<LegRun>> {
        None
    }
}

/// Collects assembly output into a [`LegRun`].
#[derive(Default)]
struct Collect {
    run: LegRun,
    unhandled_of: Option<&'static dyn crate::protocol::Model>,
}

impl EventSink for Collect {
    fn event(&mut self, event: Value) {
        if self.unhandled_of.is_some_and(|m| m.is_unhandled(&event)) {
            self.run.unhandled += 1;
        }
        self.run.events.push(event);
    }
    fn grammar_drop(&mut self, drop: GrammarDrop) {
        self.run.grammar.push(drop.layer_key());
    }
    fn invalid(&mut self, message: String) {
        self.run.stalls.push(message);
    }
}

/// Offline assembly of a cell (the recording's own view), read as a live leg reads the same
/// traffic ([`crate::protocol::Model::assemble_as_live`]): a recorded leg is compared with live
/// ones, so what the live player accepts (a held-turn delta, say) it accepts too, and lists.
pub fn assemble_offline(cell: &Cell) -> LegRun {
    let model = cell.protocol.model();
    let mut sink = Collect {
        unhandled_of: Some(model),
        ..Default::default()
    };
    let mut merged = cell.merged();
    let left_out = model.assemble_as_live(cell, &mut merged, &mut sink);
    let report = merged.into_report();
    let mut run = sink.run;
    run.left_out.extend(left_out);
    run.wire = model.wire_outcomes(cell);
    run.lane_errors
        .extend(report.errors.iter().map(|e| e.to_string()));
    let mut rows = model.row_projector();
    for e in &run.events {
        rows.push(e);
    }
    run.rows = rows.finish();
    run
}

/// Restricts a leg's events to what a live replay of `cell` reproduces, and projects its rows
/// again from them (so a recording and a live leg compare like with like).
pub fn restrict_to_live_view(run: &mut LegRun, cell: &Cell) {
    let model = cell.protocol.model();
    run.events = cell
        .protocol
        .live()
        .live_view(std::mem::take(&mut run.events));
    let mut rows = model.row_projector();
    for e in &run.events {
        rows.push(e);
    }
    run.rows = rows.finish();
    run.unhandled = run.events.iter().filter(|e| model.is_unhandled(e)).count() as u64;
    // A recording holds only the notifications of its cell's scope.
    if let Some(w) = run.wire_in_cell.take() {
        run.wire = Some(w);
    }
}

/// A leg reading another recordings folder.
pub struct RecordingsLeg {
    pub root: PathBuf,
}

impl LegRunner for RecordingsLeg {
    fn label(&self) -> String {
        format!("rec:{}", self.root.display())
    }
    fn recordings_root(&self) -> Option<&Path> {
        Some(&self.root)
    }
    fn run(&self, key: &str, _cell: Option<&Cell>) -> LegRun {
        let path = self.root.join(key);
        match Cell::at(&self.root, &path) {
            Some(c) => assemble_offline(&c),
            None => LegRun {
                error: Some(format!(
                    "{}: no cell {key} in this leg",
                    self.root.display()
                )),
                ..Default::default()
            },
        }
    }
}

/// A leg reading `--dump-dir` output.
pub struct DumpLeg {
    pub root: PathBuf,
    /// `base` or `head`: which of a parity dump's two lists to read (plain pins dumps have one).
    pub side: &'static str,
}

impl DumpLeg {
    fn read_list(&self, stem: &str, layer: &str) -> Option<Result<Vec<Value>, String>> {
        let candidates = [
            self.root.join(format!("{stem}.{}.{layer}.json", self.side)),
            self.root.join(format!("{stem}.{layer}.json")),
        ];
        let path = candidates.iter().find(|p| p.exists())?;
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => return Some(Err(format!("{}: {e}", path.display()))),
        };
        Some(match serde_json::from_str::<Value>(&text) {
            Ok(Value::Array(items)) => Ok(items),
            Ok(_) => Err(format!("{}: not a JSON array", path.display())),
            Err(e) => Err(format!("{}:{}: {e}", path.display(), e.line())),
        })
    }

    /// Cell keys present in the dump (`<stem>` names, dashes for slashes).
    pub fn keys(root: &Path) -> Vec<String> {
        let mut keys: Vec<String> = std::fs::read_dir(root)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|n| {
                n.strip_suffix(".events.json").map(|s| {
                    s.trim_end_matches(".base")
                        .trim_end_matches(".head")
                        .to_string()
                })
            })
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }
}

impl LegRunner for DumpLeg {
    fn label(&self) -> String {
        format!("dump:{}", self.root.display())
    }
    fn run(&self, key: &str, _cell: Option<&Cell>) -> LegRun {
        let stem = crate::pins::dump_stem(key);
        let mut run = LegRun::default();
        match self.read_list(&stem, "events") {
            None => run.error = Some(format!("{}: no events dump for {key}", self.root.display())),
            Some(Err(e)) => run.error = Some(e),
            Some(Ok(events)) => run.events = events,
        }
        if let Some(Ok(rows)) = self.read_list(&stem, "rows") {
            run.rows = rows;
        }
        if let Some(Ok(g)) = self.read_list(&stem, "grammar") {
            run.grammar = g
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
        }
        run.unhandled = run
            .events
            .iter()
            .filter(|e| e["type"] == "provider/unhandled")
            .count() as u64;
        run
    }
}

/// A leg that cannot run (e.g. its build failed): every cell reports the error.
pub struct BrokenLeg {
    pub label: String,
    pub error: String,
}

impl LegRunner for BrokenLeg {
    fn label(&self) -> String {
        self.label.clone()
    }
    fn run(&self, _key: &str, _cell: Option<&Cell>) -> LegRun {
        LegRun {
            error: Some(self.error.clone()),
            ..Default::default()
        }
    }
}

/// How a leg was spelled on the command line.
#[derive(Debug, Clone, PartialEq)]
pub enum LegSpec {
    Command(Vec<String>),
    Checkout(PathBuf),
    GitRef(String),
    Recordings(PathBuf),
    Dump(PathBuf),
}

impl LegSpec {
    /// Parses `kind:value`, or guesses from what exists.
    pub fn parse(s: &str) -> Result<LegSpec, String> {
        if let Some((kind, rest)) = s.split_once(':') {
            match kind {
                "cmd" => return split_words(rest).map(LegSpec::Command),
                "dir" => return Ok(LegSpec::Checkout(rest.into())),
                "ref" => return Ok(LegSpec::GitRef(rest.into())),
                "rec" => return Ok(LegSpec::Recordings(rest.into())),
                "dump" => return Ok(LegSpec::Dump(rest.into())),
                _ => {}
            }
        }
        let p = Path::new(s);
        if p.is_dir() {
            if p.join("bridgewire.toml").exists() || p.join("Cargo.toml").exists() {
                return Ok(LegSpec::Checkout(p.into()));
            }
            if !DumpLeg::keys(p).is_empty() {
                return Ok(LegSpec::Dump(p.into()));
            }
            if crate::cell::discover(p).is_ok() {
                return Ok(LegSpec::Recordings(p.into()));
            }
            return Err(format!(
                "{s}: a directory, but not a checkout, a recordings folder or a dump"
            ));
        }
        if !s.contains(char::is_whitespace) && git_resolves(s) {
            return Ok(LegSpec::GitRef(s.into()));
        }
        split_words(s).map(LegSpec::Command)
    }
}

fn git_resolves(rev: &str) -> bool {
    git_commit(rev).is_some()
}

/// The commit `rev` names in the current repository (`git rev-parse`), if it names one.
pub fn git_commit(rev: &str) -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--verify", "--quiet"])
        .arg(format!("{rev}^{{commit}}"))
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Splits a command line into words, honouring single and double quotes and backslashes.
pub fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err(format!("unterminated ' in {s:?}")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => cur.extend(chars.next()),
                        Some(c) => cur.push(c),
                        None => return Err(format!("unterminated \" in {s:?}")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                cur.extend(chars.next());
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    if words.is_empty() {
        return Err("empty command".into());
    }
    Ok(words)
}

/// The `[parity]` table of a checkout's `bridgewire.toml`.
#[derive(Debug, Clone, Default)]
pub struct CheckoutConfig {
    /// Shell command run in the checkout to build it.
    pub build: Option<String>,
    /// The bridge command, relative paths resolved against the checkout.
    pub bridge: Option<String>,
}

impl CheckoutConfig {
    pub fn load(checkout: &Path) -> Result<CheckoutConfig, String> {
        let path = checkout.join("bridgewire.toml");
        if !path.exists() {
            return Ok(CheckoutConfig::default());
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let doc: toml::Table = text
            .parse()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let parity = doc.get("parity").and_then(|v| v.as_table());
        let get = |k: &str| {
            parity
                .and_then(|t| t.get(k))
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        Ok(CheckoutConfig {
            build: get("build"),
            bridge: get("bridge"),
        })
    }
}

/// Builds a checkout; returns the bridge command that runs *this checkout's* bridge: it runs
/// in the checkout, and every word of it that names a path inside the checkout (relative, as
/// the program, an argument, or a `--flag=value`) is made absolute there. A checkout whose
/// `bridgewire.toml` has no `[parity] bridge` (an older ref) uses the caller's, resolved the
/// same way inside that checkout.
pub fn build_checkout(
    checkout: &Path,
    timeout: std::time::Duration,
) -> Result<BridgeCommand, String> {
    let checkout =
        &std::fs::canonicalize(checkout).map_err(|e| format!("{}: {e}", checkout.display()))?;
    let mut cfg = CheckoutConfig::load(checkout)?;
    if cfg.bridge.is_none() {
        let caller = CheckoutConfig::load(Path::new("."))?;
        cfg.bridge = caller.bridge;
        if cfg.build.is_none() {
            cfg.build = caller.build;
        }
    }
    if let Some(build) = &cfg.build {
        // The build's whole tree (compilers, linkers) goes on timeout, drop and signal.
        let mut child = crate::proc::ChildTree::spawn(
            Command::new("sh")
                .arg("-c")
                .arg(build)
                .current_dir(checkout)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped()),
        )
        .map_err(|e| format!("cannot run build `{build}`: {e}"))?;
        // Read stderr as it comes (a chatty build must not block on a full pipe); keep the tail.
        let stderr = child.stderr.take().expect("piped stderr");
        let tail_reader = std::thread::spawn(move || {
            use std::io::Read;
            let mut tail: Vec<u8> = Vec::new();
            let mut buf = [0u8; 8192];
            let mut stderr = stderr;
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 64 * 1024 {
                    tail.drain(..tail.len() - 32 * 1024);
                }
            }
            String::from_utf8_lossy(&tail).into_owned()
        });
        let start = std::time::Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => break,
                Ok(Some(status)) => {
                    child.kill_tree(); // whatever the build left running
                    let err = tail_reader.join().unwrap_or_default();
                    let tail: Vec<&str> = err.lines().rev().take(5).collect();
                    let tail: Vec<&str> = tail.into_iter().rev().collect();
                    return Err(format!(
                        "build `{build}` failed in {} ({status}): {}",
                        checkout.display(),
                        tail.join(" | ")
                    ));
                }
                Ok(None) if start.elapsed() > timeout => {
                    child.kill_tree();
                    return Err(format!(
                        "build `{build}` timed out after {}s",
                        timeout.as_secs()
                    ));
                }
                Ok(None) => std::thread::sleep(std::time::Duration::from_millis(50)),
                Err(e) => return Err(format!("build `{build}`: {e}")),
            }
        }
    }
    let bridge = cfg.bridge.ok_or_else(|| {
        format!(
            "{}: no [parity] bridge command (in its bridgewire.toml or the current directory's)",
            checkout.display()
        )
    })?;
    Ok(BridgeCommand {
        argv: resolve_in(checkout, split_words(&bridge)?),
        cwd: Some(checkout.clone()),
        ..Default::default()
    })
}

/// Makes every word of a command that names an existing path relative to `dir` absolute in
/// `dir` (the program when it contains a `/`, arguments, and `--flag=value` values).
pub fn resolve_in(dir: &Path, words: Vec<String>) -> Vec<String> {
    let inside = |w: &str| -> Option<String> {
        if w.is_empty() || Path::new(w).is_absolute() {
            return None;
        }
        let p = dir.join(w);
        p.exists().then(|| p.display().to_string())
    };
    words
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            if i == 0 && !w.contains('/') {
                return w; // a program name is looked up on PATH, not in the directory
            }
            if let Some(p) = inside(&w) {
                return p;
            }
            if i == 0 && !Path::new(&w).is_absolute() {
                return dir.join(&w).display().to_string();
            }
            if let Some((flag, value)) = w.split_once('=')
                && flag.starts_with('-')
                && let Some(p) = inside(value)
            {
                return format!("{flag}={p}");
            }
            w
        })
        .collect()
}

/// What a bridge command would execute: the directory, each word as the file it names
/// (canonical path) or as itself, and whether a word other than a PATH program names a file.
pub fn execution_identity(b: &BridgeCommand) -> (PathBuf, Vec<String>, bool) {
    let cwd = b
        .cwd
        .clone()
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_default();
    let cwd = std::fs::canonicalize(&cwd).unwrap_or(cwd);
    let mut names_file = false;
    // `env [NAME=value…] program args` runs `program`: the same program whether or not it is
    // spelled through env, and the assignments (sorted) are part of what runs.
    let mut words = Vec::new();
    let mut argv: &[String] = &b.argv;
    if let Some(first) = argv.first()
        && let Some(env) = which("env")
        && (first == "env"
            || std::fs::canonicalize(cwd.join(first)).is_ok_and(|p| p.display().to_string() == env))
    {
        let rest = &argv[1..];
        let assignment = |w: &String| {
            w.split_once('=').is_some_and(|(name, _)| {
                !name.is_empty() && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
            })
        };
        let n = rest.iter().take_while(|w| assignment(w)).count();
        // env's own options (`-i`, `-u NAME`, `--`) change what runs: left as written.
        if rest.get(n).is_some_and(|w| !w.starts_with('-')) {
            let mut assignments: Vec<String> = rest[..n].to_vec();
            assignments.sort();
            words.extend(assignments);
            argv = &rest[n..];
        }
    }
    for (i, w) in argv.iter().enumerate() {
        let word = if i == 0 && !w.contains('/') {
            which(w).unwrap_or_else(|| w.clone())
        } else {
            crate::proc::word_as_file(&cwd, w, &mut names_file)
        };
        words.push(word);
    }
    (cwd, words, names_file)
}

/// Why two legs would run the same bridge, if they would: the same files with the same
/// arguments, in the same directory, or in any directory when the command names the file it
/// runs (a program found on PATH with no file argument, like `cargo run`, may read its
/// directory, so there the directory counts).
pub fn same_bridge(a: &BridgeCommand, b: &BridgeCommand) -> Option<String> {
    let (ac, aw, af) = execution_identity(a);
    let (bc, bw, _) = execution_identity(b);
    if aw != bw {
        return None;
    }
    if ac == bc {
        return Some(format!("{} (in {})", aw.join(" "), ac.display()));
    }
    af.then(|| aw.join(" "))
}

/// A program name looked up on PATH, canonicalized.
pub fn which(program: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .and_then(|p| std::fs::canonicalize(p).ok())
        .map(|p| p.display().to_string())
}

/// Why a bridge command cannot start, checked before any cell runs: a program that is not on
/// PATH, or a path that does not exist or is not executable.
pub fn cannot_start(b: &BridgeCommand) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let program = b.argv.first()?;
    if !program.contains('/') {
        return which(program)
            .is_none()
            .then(|| format!("`{program}` is not a program on PATH"));
    }
    let path = match &b.cwd {
        Some(d) => d.join(program),
        None => PathBuf::from(program),
    };
    match std::fs::metadata(&path) {
        Err(e) => Some(format!("{}: {e}", path.display())),
        Ok(m) if m.is_dir() => Some(format!("{}: a directory, not a program", path.display())),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => {
            Some(format!("{}: not executable", path.display()))
        }
        Ok(_) => None,
    }
}

/// A temporary worktree of the current repository at `rev`, removed on drop and on
/// SIGINT/SIGTERM ([`crate::signals`]: the folder goes and the worktree is pruned).
pub struct Worktree {
    pub path: PathBuf,
    _registration: crate::signals::Registration,
    _dir: crate::signals::TempDir,
}

impl Worktree {
    pub fn add(rev: &str) -> Result<Worktree, String> {
        let dir = crate::signals::temp_dir("bridgewire-leg-").map_err(|e| e.to_string())?;
        // git names a worktree's admin folder after its basename: a unique basename keeps two
        // legs added at once from racing for `.git/worktrees/wt` (and git's own lock is not
        // held across the whole add, so adds are serialized too).
        let base = dir
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "wt".into());
        let path = dir.path().join(base);
        static ADDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _adding = ADDING.lock().unwrap_or_else(|e| e.into_inner());
        // Registered before it exists: a signal during `git worktree add` still prunes it.
        let registration = crate::signals::register(crate::signals::Cleanup::Worktree {
            repo: std::env::current_dir().unwrap_or_else(|_| ".".into()),
            path: path.clone(),
        });
        let out = Command::new("git")
            .args(["worktree", "add", "--detach", "--quiet"])
            .arg(&path)
            .arg(rev)
            .output()
            .map_err(|e| format!("git: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "git worktree add {rev}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Worktree {
            path,
            _registration: registration,
            _dir: dir,
        })
    }
}

impl Drop for Worktree {
    fn drop(&mut self) {
        let _ = Command::new("git")
            .args(["worktree", "remove", "--force"])
            .arg(&self.path)
            .output();
    }
}

/// What a report needs of a leg once its lists were compared (the lists themselves are dropped
/// so a run over thousands of cells holds only the differences).
#[derive(Debug, Clone, Default)]
pub struct LegSummary {
    pub events: usize,
    pub rows: usize,
    pub unhandled: u64,
    pub grammar_drops: usize,
    pub stalls: usize,
    /// What the comparison left out of this leg's events ([`crate::protocol::Model::left_out`]).
    pub left_out: Vec<String>,
}

impl LegSummary {
    fn of(run: &LegRun) -> LegSummary {
        LegSummary {
            events: run.events.len(),
            rows: run.rows.len(),
            unhandled: run.unhandled,
            grammar_drops: run.grammar.len(),
            stalls: run.stalls.len(),
            left_out: Vec::new(),
        }
    }
}

/// The comparison of one cell.
#[derive(Debug, Clone)]
pub struct CellParity {
    pub key: String,
    pub skipped: Option<String>,
    pub base: LegSummary,
    pub head: LegSummary,
    pub events: ListDiff,
    pub rows: ListDiff,
    pub grammar: ListDiff,
    /// Answers and spec notifications ([`LegRun::wire`]), when both legs hold them.
    pub wire: ListDiff,
    /// Why the wire layer was not compared although one leg holds it.
    pub wire_unseen: Option<String>,
    pub stale: Vec<AllowEntry>,
    /// Waits that ran out, `<side>: <what was awaited>`. A leg that stalled produced an
    /// incomplete list, so its differences are not shown as event differences.
    pub stalls: Vec<String>,
    /// A leg could not run the cell at all, `<side> leg: <why>`.
    pub errors: Vec<String>,
    pub problems: Vec<String>,
    /// A recording of this cell has unreadable lane entries (named in `errors`): invalid
    /// input, exit 2.
    pub invalid_input: bool,
    /// What a second run of one live leg showed, when the lists differed ([`Control`]).
    pub control: Option<Control>,
}

/// How a leg whose replay assembled no events is named among a cell's problems.
const EMPTY_REPLAY: &str = " empty replay: ";

/// How one cell came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail,
    Stall,
    /// A leg could not run the cell (nothing was compared).
    Error,
    Skip,
}

impl Outcome {
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Pass => "PASS",
            Outcome::Fail => "FAIL",
            Outcome::Stall => "STALL",
            Outcome::Error => "ERROR",
            Outcome::Skip => "SKIP",
        }
    }
}

impl CellParity {
    pub fn skip(key: &str, reason: &str) -> CellParity {
        CellParity {
            key: key.to_string(),
            skipped: Some(reason.to_string()),
            base: Default::default(),
            head: Default::default(),
            events: Default::default(),
            rows: Default::default(),
            grammar: Default::default(),
            wire: Default::default(),
            wire_unseen: None,
            stale: Vec::new(),
            stalls: Vec::new(),
            errors: Vec::new(),
            problems: Vec::new(),
            invalid_input: false,
            control: None,
        }
    }

    /// A cell whose recording cannot be read: nothing compared, exit 2.
    pub fn invalid_input(key: &str, errors: Vec<String>) -> CellParity {
        CellParity {
            skipped: None,
            errors,
            invalid_input: true,
            ..CellParity::skip(key, "")
        }
    }

    /// Whether a leg's problems name a fault of its own (a message forwarded under another
    /// clientId), not only that its replay came out empty (which a stall explains).
    fn names_a_fault(&self) -> bool {
        self.problems.iter().any(|p| !p.contains(EMPTY_REPLAY))
    }

    pub fn outcome(&self) -> Outcome {
        if self.skipped.is_some() {
            Outcome::Skip
        } else if !self.errors.is_empty() {
            Outcome::Error
        } else if !self.stalls.is_empty() && !self.names_a_fault() {
            // A leg's fault the spec names (a message forwarded under another clientId) is
            // the cause of a stall after it: the cell fails naming it, not a wait that ran out.
            Outcome::Stall
        } else if self.events.is_empty()
            && self.rows.is_empty()
            && self.grammar.is_empty()
            && self.wire.is_empty()
            && self.stale.is_empty()
            && self.problems.is_empty()
        {
            Outcome::Pass
        } else {
            Outcome::Fail
        }
    }

    pub fn passed(&self) -> bool {
        self.outcome() == Outcome::Pass
    }
}

/// What a second run of one live leg showed about a cell whose lists differed between the legs.
///
/// A bridge that answers through a model (or with a clock or a counter the normalization does
/// not know) does not answer alike twice: two builds of it always differ, and so would one
/// build run twice. So a cell whose events or rows differ is run once more on one live leg (the
/// base when it is live, else the head). Values that differ between that leg's two runs are the
/// bridge's own variation: they are set aside in both legs, kept as their kind (text, empty
/// text, a number, a list…, so a reply that turns empty or changes type still differs), and
/// what remains is compared. A determinism check (both legs one bridge) runs no second run.
#[derive(Debug, Clone)]
pub enum Control {
    /// The second run gave the same lists: the difference is between the builds.
    Same { side: &'static str },
    /// Values that differ between the two runs, set aside in both legs.
    Varies(Varying),
    /// The second run stalled or failed, so nothing was set aside: every difference stands.
    NotFinished { side: &'static str, why: String },
}

/// Values of a leg's comparable lists that differ between two runs of it.
#[derive(Debug, Clone, Default)]
pub struct Varying {
    /// The leg run twice.
    pub side: &'static str,
    /// Each event value that differs between the runs.
    pub events: Vec<VaryingValue>,
    /// The same for rows.
    pub rows: Vec<VaryingValue>,
    /// A layer whose length differed between the runs (`events 10 then 11`): past the shorter
    /// list nothing could be set aside.
    pub lengths: Vec<String>,
    /// Event values that differ between the runs but may not vary ([`crate::protocol::Model::may_vary`]):
    /// their events have nothing set aside.
    pub shaped: Vec<VaryingValue>,
}

impl Varying {
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
            && self.rows.is_empty()
            && self.lengths.is_empty()
            && self.shaped.is_empty()
    }

    /// How many values were set aside.
    pub fn count(&self) -> usize {
        self.events.len() + self.rows.len()
    }

    /// What was set aside, as report lines (parity's and replay's alike): `runs` names the two
    /// runs held against each other ("two runs of the base leg"), `masked` the lists the values
    /// were set aside in ("both legs"), `second` the run made again ("a second run of the base
    /// leg").
    pub fn lines(&self, runs: &str, masked: &str, second: &str) -> Vec<String> {
        let mut out = Vec::new();
        if self.count() > 0 {
            out.push(format!(
                "not compared: {} value(s) that differ between {runs} (its replies vary, as a \
model's do), set aside in {masked} as their kind: {}",
                self.count(),
                self.describe(8)
            ));
        }
        if !self.lengths.is_empty() {
            out.push(format!(
                "{second} gave lists of other lengths ({}): past the shorter one nothing was set \
aside",
                self.lengths.join(", ")
            ));
        }
        if !self.shaped.is_empty() {
            let shown = Varying {
                events: self.shaped.clone(),
                ..Default::default()
            };
            out.push(format!(
                "not set aside: {} value(s) that differ between {runs} but are no wording (who \
sent a message, how many, the options, the status, an error): {}; a bridge that answers so \
otherwise between two runs is flaky, and the difference stands",
                shown.count(),
                shown.describe(8)
            ));
        }
        out
    }

    /// `events #3 /messages/0/content, rows #1 /content`, the first `max`.
    pub fn describe(&self, max: usize) -> String {
        let all: Vec<String> = [("events", &self.events), ("rows", &self.rows)]
            .into_iter()
            .flat_map(|(layer, l)| {
                l.iter()
                    .map(move |v| format!("{layer} #{} {}", v.index, v.pointer))
            })
            .collect();
        let mut s = all.iter().take(max).cloned().collect::<Vec<_>>().join(", ");
        if all.len() > max {
            s.push_str(&format!(", … {} more", all.len() - max));
        }
        s
    }
}

/// One value of a list that differs between two runs of a leg.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaryingValue {
    /// The element's index in the list.
    pub index: usize,
    /// Where in the element (RFC 6901; empty: the whole element).
    pub pointer: String,
    /// One run had this key and the other not: it is left out of both legs' elements.
    pub key_varies: bool,
}

/// Both legs' events and rows of one cell as [`compare_cell_keeping`] compared them:
/// normalized, folded, the allowlist applied. Kept (moved, not copied) for a cell whose lists
/// differ, so a second run of one leg is compared with the first without normalizing it again
/// ([`varying_between`], [`recompare`]).
#[derive(Debug, Default)]
pub struct ComparedLists {
    base: (Vec<Value>, Vec<Value>),
    head: (Vec<Value>, Vec<Value>),
}

/// The values that differ between the first run of one leg (as `first` holds it) and `again`,
/// element by element in order. `again` is normalized, folded and allowlisted as the first
/// run was, so indices name the same slots ([`Control::Varies`]).
pub fn varying_between(
    model: &dyn crate::protocol::Model,
    (key, allow): (&str, &[AllowEntry]),
    side: &'static str,
    first: &ComparedLists,
    again: LegRun,
) -> Varying {
    let (provider, cell) = key.split_once('/').unwrap_or(("", key));
    let mut again_events = model.fold_events(model.normalize_events(again.events));
    let mut again_rows = model.normalize_rows(again.rows);
    allowlist::apply_to_one(
        allow,
        provider,
        cell,
        allowlist::Layers {
            events: &mut again_events,
            rows: &mut again_rows,
            wire: None,
        },
    );
    let (first_events, first_rows) = if side == "base" {
        &first.base
    } else {
        &first.head
    };
    let mut v = Varying {
        side,
        ..Default::default()
    };
    v.events = varying_values("events", first_events, &again_events, &mut v.lengths);
    v.rows = varying_values("rows", first_rows, &again_rows, &mut v.lengths);
    // An event that differs between the runs in a value the model says may not vary (who sent
    // a message, how many, the options…) has nothing set aside.
    let shaped: std::collections::BTreeSet<usize> = v
        .events
        .iter()
        .filter(|x| !model.may_vary(&x.pointer, x.key_varies))
        .map(|x| x.index)
        .collect();
    if !shaped.is_empty() {
        let (kept, set_aside): (Vec<_>, Vec<_>) = std::mem::take(&mut v.events)
            .into_iter()
            .partition(|x| shaped.contains(&x.index));
        v.events = set_aside;
        v.shaped = kept
            .into_iter()
            .filter(|x| !model.may_vary(&x.pointer, x.key_varies))
            .collect();
    }
    v
}

/// The values that differ between two runs' `layer` lists, element by element in order; a
/// length that differs is added to `lengths` (`events 10 then 11`: past the shorter list
/// nothing can be set aside).
pub fn varying_values(
    layer: &str,
    first: &[Value],
    again: &[Value],
    lengths: &mut Vec<String>,
) -> Vec<VaryingValue> {
    if first.len() != again.len() {
        lengths.push(format!("{layer} {} then {}", first.len(), again.len()));
    }
    let mut out = Vec::new();
    for (index, (x, y)) in first.iter().zip(again).enumerate() {
        let mut paths = Vec::new();
        differing_paths(x, y, String::new(), &mut paths);
        out.extend(paths.into_iter().map(|(pointer, key_varies)| VaryingValue {
            index,
            pointer,
            key_varies,
        }));
    }
    out
}

/// Compares `lists` (a cell's first comparison, [`compare_cell_keeping`]) again with what
/// varies between two runs of one leg set aside in both legs: `result`'s events and rows
/// become that comparison's; the rest of it (errors, grammar, wire, stale entries) stands.
pub fn recompare(
    result: &mut CellParity,
    lists: ComparedLists,
    model: &dyn crate::protocol::Model,
    varying: &Varying,
) {
    let ComparedLists {
        base: (mut be, mut br),
        head: (mut he, mut hr),
    } = lists;
    for list in [&mut be, &mut he] {
        mask_varying(list, &varying.events);
    }
    for list in [&mut br, &mut hr] {
        mask_varying(list, &varying.rows);
    }
    diff_events_and_rows(result, model, (&be, &br), (&he, &hr));
}

/// `result`'s events and rows: the two legs' lists compared, elements paired by the model's ids.
fn diff_events_and_rows(
    result: &mut CellParity,
    model: &dyn crate::protocol::Model,
    (base_events, base_rows): (&[Value], &[Value]),
    (head_events, head_rows): (&[Value], &[Value]),
) {
    result.events =
        diff::diff_lists_ids(base_events, head_events, 2, model.event_rules().id_fields);
    result.rows = diff::diff_lists_ids(base_rows, head_rows, 2, model.row_rules().id_fields);
}

/// JSON pointers (RFC 6901) below `at` where `a` and `b` differ: the deepest value that differs
/// (a key only one has, `true` beside it; a list whose length differs; two scalars).
fn differing_paths(a: &Value, b: &Value, at: String, out: &mut Vec<(String, bool)>) {
    let below = |k: &str| format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                match y.get(k) {
                    Some(vb) => differing_paths(va, vb, below(k), out),
                    None => out.push((below(k), true)),
                }
            }
            out.extend(
                y.keys()
                    .filter(|k| !x.contains_key(*k))
                    .map(|k| (below(k), true)),
            );
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                differing_paths(va, vb, below(&i.to_string()), out);
            }
        }
        _ if a != b => out.push((at, false)),
        _ => {}
    }
}

/// Sets each varying value of `list` aside as its kind, and a key only one run had aside
/// altogether ([`Control`]).
pub fn mask_varying(list: &mut [Value], paths: &[VaryingValue]) {
    for p in paths {
        let Some(element) = list.get_mut(p.index) else {
            continue;
        };
        if p.key_varies {
            let (parent, key) = p.pointer.rsplit_once('/').unwrap_or(("", ""));
            let key = key.replace("~1", "/").replace("~0", "~");
            if let Some(Value::Object(o)) = element.pointer_mut(parent) {
                o.remove(&key);
            }
            continue;
        }
        if let Some(v) = element.pointer_mut(&p.pointer) {
            let kind = match &*v {
                Value::String(s) if s.is_empty() => "empty text",
                Value::String(_) => "text",
                Value::Array(a) if a.is_empty() => "an empty list",
                Value::Array(_) => "a list",
                Value::Object(o) if o.is_empty() => "an empty object",
                Value::Object(_) => "an object",
                Value::Number(_) => "a number",
                Value::Bool(_) => "a boolean",
                Value::Null => "null",
            };
            *v = Value::String(format!("(varies between runs: {kind})"));
        }
    }
}

/// Compares two already-produced leg runs of one cell.
pub fn compare_cell(
    key: &str,
    model: &dyn crate::protocol::Model,
    base: LegRun,
    head: LegRun,
    allow: &[AllowEntry],
    dump_dir: Option<&Path>,
) -> CellParity {
    compare_cell_keeping(key, model, base, head, allow, dump_dir).0
}

/// [`compare_cell`], also giving back the lists it compared when their events or rows differ
/// (both legs complete): what a second run of one leg is held against.
pub fn compare_cell_keeping(
    key: &str,
    model: &dyn crate::protocol::Model,
    mut base: LegRun,
    mut head: LegRun,
    allow: &[AllowEntry],
    dump_dir: Option<&Path>,
) -> (CellParity, Option<ComparedLists>) {
    let (provider, cell) = key.split_once('/').unwrap_or(("", key));
    let mut problems = Vec::new();
    let mut stalls = Vec::new();
    let mut errors = Vec::new();
    for (side, run) in [("base", &base), ("head", &head)] {
        if let Some(e) = &run.error {
            errors.push(format!("{side} leg: {e}"));
        }
        for e in &run.lane_errors {
            errors.push(format!("{side} leg: unreadable recording: {e}"));
        }
        for s in &run.stalls {
            stalls.push(format!("{side}: {s}"));
        }
        for p in &run.problems {
            problems.push(format!("{side}: {p}"));
        }
        if run.error.is_none()
            && run.events.is_empty()
            && let Some(n) = run.recorded_events.filter(|n| *n > 0)
        {
            problems.push(format!(
                "{side}{EMPTY_REPLAY}the recording assembles {n} events"
            ));
        }
    }
    let left_out_of = |run: &LegRun| {
        let mut l = model.left_out(&run.events);
        l.extend(run.left_out.iter().cloned());
        l
    };
    let left_out = (left_out_of(&base), left_out_of(&head));
    base.events = model.normalize_events(std::mem::take(&mut base.events));
    head.events = model.normalize_events(std::mem::take(&mut head.events));
    base.rows = model.normalize_rows(std::mem::take(&mut base.rows));
    head.rows = model.normalize_rows(std::mem::take(&mut head.rows));
    // Counted before folding (what pins count), then folded for comparing.
    let summaries = (LegSummary::of(&base), LegSummary::of(&head));
    base.events = model.fold_events(std::mem::take(&mut base.events));
    head.events = model.fold_events(std::mem::take(&mut head.events));
    if let Some(d) = dump_dir {
        let stem = crate::pins::dump_stem(key);
        for (side, run) in [("base", &base), ("head", &head)] {
            for (layer, list) in [("events", &run.events), ("rows", &run.rows)] {
                let _ = crate::lane::write::create_like_folder(
                    &d.join(format!("{stem}.{side}.{layer}.json")),
                )
                .and_then(|mut f| {
                    use std::io::Write;
                    f.write_all(
                        crate::jsjson::to_string_pretty(&Value::Array(list.clone())).as_bytes(),
                    )
                });
            }
        }
    }
    let mut result = CellParity {
        key: key.to_string(),
        skipped: None,
        events: Default::default(),
        rows: Default::default(),
        grammar: Default::default(),
        wire: Default::default(),
        wire_unseen: None,
        stale: Vec::new(),
        stalls,
        invalid_input: base.lane_errors.len() + head.lane_errors.len() > 0,
        errors,
        problems,
        base: LegSummary {
            left_out: left_out.0,
            ..summaries.0
        },
        head: LegSummary {
            left_out: left_out.1,
            ..summaries.1
        },
        control: None,
    };
    // A leg that could not run or stalled has no complete list: comparing it would show the
    // missing tail as differences, so those cells report only the stall or the error.
    if !result.errors.is_empty() || !result.stalls.is_empty() {
        return (result, None);
    }
    let (mut be, mut br) = (base.events, base.rows);
    let (mut he, mut hr) = (head.events, head.rows);
    let grammar_list = |g: &[String]| {
        g.iter()
            .map(|s| Value::String(s.clone()))
            .collect::<Vec<_>>()
    };
    let mut bw = base.wire.as_deref().map(grammar_list);
    let mut hw = head.wire.as_deref().map(grammar_list);
    let masked = allowlist::apply(
        allow,
        provider,
        cell,
        allowlist::Layers {
            events: &mut be,
            rows: &mut br,
            wire: bw.as_mut(),
        },
        allowlist::Layers {
            events: &mut he,
            rows: &mut hr,
            wire: hw.as_mut(),
        },
    );
    diff_events_and_rows(&mut result, model, (&be, &br), (&he, &hr));
    result.grammar = diff::diff_lists(
        &grammar_list(&base.grammar),
        &grammar_list(&head.grammar),
        2,
    );
    match (&bw, &hw) {
        (Some(b), Some(h)) => {
            result.wire = diff::diff_lists(b, h, 2);
        }
        (Some(w), None) | (None, Some(w)) if !w.is_empty() => {
            let side = if bw.is_none() { "base" } else { "head" };
            result.wire_unseen = Some(format!(
                "the {side} leg does not hold them (a dump holds events, rows and drops only)"
            ));
        }
        _ => {}
    }
    result.stale = masked.stale;
    let differs = !result.events.is_empty() || !result.rows.is_empty();
    let lists = differs.then(|| ComparedLists {
        base: (be, br),
        head: (he, hr),
    });
    (result, lists)
}

/// What a live leg's stall says when something other than a slow bridge ended its wait (what
/// came in the awaited event's place, or after it): a longer `--timeout-ms` cannot help it,
/// so the verdict does not suggest one. A bridge that exited says [`EXITED`].
pub const NOT_SLOW: &str = "; not a slow bridge: ";
/// How a live leg's stall names a bridge process that exited (then `(<status>)`).
pub const EXITED: &str = "exited (";

/// How many elements of one kind a cell's text lists before it says how many it left out.
pub const MAX_LISTED: usize = 20;

/// Renders one cell's result as text lines (the reference's layout, §8.3).
pub fn render_cell(c: &CellParity) -> Vec<String> {
    if let Some(reason) = &c.skipped {
        return vec![format!("SKIP {}: {reason}", c.key)];
    }
    let outcome = c.outcome();
    if outcome == Outcome::Error {
        let mut out = vec![format!("ERROR {}: nothing compared", c.key)];
        out.extend(c.errors.iter().map(|e| format!("  {e}")));
        return out;
    }
    let mut out = vec![format!(
        "{} {}: base {} events/{} rows, head {} events/{} rows, unhandled {}→{}, grammar drops {}→{}{}",
        outcome.word(),
        c.key,
        c.base.events,
        c.base.rows,
        c.head.events,
        c.head.rows,
        c.base.unhandled,
        c.head.unhandled,
        c.base.grammar_drops,
        c.head.grammar_drops,
        if c.stalls.is_empty() {
            String::new()
        } else {
            format!(", {} stall(s)", c.stalls.len())
        }
    )];
    if !c.base.left_out.is_empty() || !c.head.left_out.is_empty() {
        let leg = |l: &[String]| {
            if l.is_empty() {
                "none".to_string()
            } else {
                l.join(", ")
            }
        };
        out.push(format!(
            "  extensions, not compared: base {}; head {}",
            leg(&c.base.left_out),
            leg(&c.head.left_out)
        ));
    }
    // A leg's fault first: what follows (a stall, differences) may be its consequence.
    for p in &c.problems {
        out.push(format!("  {p}"));
    }
    out.extend(control_lines(c));
    for s in c.stalls.iter().take(MAX_LISTED) {
        out.push(format!("  stall: {s}"));
    }
    if c.stalls.len() > MAX_LISTED {
        out.push(format!("  … {} more stall(s)", c.stalls.len() - MAX_LISTED));
    }
    if !c.stalls.is_empty() {
        // The advice only where every stall is a wait that ran out (a flood, an invalid
        // message or a misaddressed delta is not cured by waiting) and some may be a slow
        // bridge (see NOT_SLOW).
        let only_waits = c
            .stalls
            .iter()
            .all(|s| s.contains("timed out") || s.contains("within the wait"));
        let slow = c
            .stalls
            .iter()
            .any(|s| !s.contains(NOT_SLOW) && !s.contains(EXITED));
        out.push(format!(
            "  (events not compared: a stalled leg's list is incomplete{})",
            if c.names_a_fault() {
                "; the fault named above comes first"
            } else if only_waits && slow {
                "; --timeout-ms raises the wait"
            } else {
                ""
            }
        ));
    }
    let capped = |out: &mut Vec<String>, what: &str, lines: Vec<String>| {
        let n = lines.len();
        out.extend(lines.into_iter().take(MAX_LISTED));
        if n > MAX_LISTED {
            out.push(format!(
                "  … and {} more {what} not listed (--dump-dir writes both lists)",
                n - MAX_LISTED
            ));
        }
    };
    for (layer, d) in [("events", &c.events), ("rows", &c.rows)] {
        if let Some(first) = &d.first {
            out.push(format!(
                "  first {layer} divergence at base #{} / head #{}:",
                first.base_index, first.head_index
            ));
            for (i, v) in &first.before {
                out.push(format!("      {i:>4}   {}", diff::describe(v)));
            }
            for (i, v) in &first.base {
                out.push(format!("    - {i:>4}   {}", diff::describe(v)));
            }
            for (i, v) in &first.head {
                out.push(format!("    + {i:>4}   {}", diff::describe(v)));
            }
            for line in first.entry_diff.iter().take(12) {
                out.push(format!("      {line}"));
            }
            // A lone side that the other list holds elsewhere: say so, not leave it bare.
            let lone = match (first.base.as_slice(), first.head.as_slice()) {
                ([(i, _), ..], []) => d.moved.iter().find(|m| m.0 == *i),
                ([], [(j, _), ..]) => d.moved.iter().find(|m| m.1 == *j),
                _ => None,
            };
            if let Some((i, j)) = lone {
                out.push(format!(
                    "      (the same {} is at base #{i} / head #{j}: the order differs)",
                    layer.trim_end_matches('s')
                ));
            }
        }
        let moved_base: std::collections::HashSet<usize> = d.moved.iter().map(|m| m.0).collect();
        let moved_head: std::collections::HashSet<usize> = d.moved.iter().map(|m| m.1).collect();
        let base_at: std::collections::HashMap<usize, &Value> =
            d.only_in_base.iter().map(|(i, v)| (*i, v)).collect();
        let moved_lines = d
            .moved
            .iter()
            .map(|(i, j)| {
                let v = base_at.get(i).copied();
                format!(
                    "  {layer} out of order: base #{i}, head #{j}: {}",
                    v.map(diff::describe).unwrap_or_default()
                )
            })
            .collect();
        capped(&mut out, &format!("{layer} out of order"), moved_lines);
        let base_lines = d
            .only_in_base
            .iter()
            .filter(|(i, _)| !moved_base.contains(i))
            .map(|(_, v)| format!("  {layer} only in base: {}", diff::describe(v)))
            .collect();
        capped(&mut out, &format!("{layer} only in base"), base_lines);
        let head_lines = d
            .only_in_head
            .iter()
            .filter(|(j, _)| !moved_head.contains(j))
            .map(|(_, v)| format!("  {layer} only in head: {}", diff::describe(v)))
            .collect();
        capped(&mut out, &format!("{layer} only in head"), head_lines);
        let id_lines = d
            .id_mismatches
            .iter()
            .map(|m| format!("  {layer} id differs: {m}"))
            .collect();
        capped(&mut out, &format!("{layer} id differences"), id_lines);
    }
    let g_base = c
        .grammar
        .only_in_base
        .iter()
        .map(|(_, v)| format!("  grammar drop only in base: {}", v.as_str().unwrap_or("?")))
        .collect();
    capped(&mut out, "grammar drops only in base", g_base);
    let g_head = c
        .grammar
        .only_in_head
        .iter()
        .map(|(_, v)| format!("  grammar drop only in head: {}", v.as_str().unwrap_or("?")))
        .collect();
    capped(&mut out, "grammar drops only in head", g_head);
    // Answers and notifications, as `wire only in base: answer turn/start → result`.
    for (side, list) in [
        ("base", &c.wire.only_in_base),
        ("head", &c.wire.only_in_head),
    ] {
        let lines = list
            .iter()
            .map(|(_, v)| format!("  wire only in {side}: {}", v.as_str().unwrap_or("?")))
            .collect();
        capped(&mut out, &format!("wire outcomes only in {side}"), lines);
    }
    if let Some(why) = &c.wire_unseen {
        out.push(format!("  answers and notifications not compared: {why}"));
    }
    for e in &c.stale {
        out.push(format!("  stale allowlist entry {}", e.describe()));
    }
    // For display only: the comparison has been made on the values as they are.
    out.into_iter().map(|l| diff::visible(&l)).collect()
}

/// What a cell's second run showed ([`Control`]), as text lines.
fn control_lines(c: &CellParity) -> Vec<String> {
    match &c.control {
        None => Vec::new(),
        Some(Control::Same { side }) => vec![format!(
            "  a second run of the {side} leg gave the same lists: the difference is the builds', \
not a bridge whose replies vary"
        )],
        Some(Control::NotFinished { side, why }) => vec![format!(
            "  a second run of the {side} leg, to tell a bridge whose replies vary from a \
difference, did not finish ({why}): every difference stands"
        )],
        Some(Control::Varies(v)) => v
            .lines(
                &format!("two runs of the {} leg", v.side),
                "both legs",
                &format!("a second run of the {} leg", v.side),
            )
            .into_iter()
            .map(|l| format!("  {l}"))
            .collect(),
    }
}

/// The JSON of a cell's second run ([`Control`]).
fn control_json(c: &Control) -> Value {
    let values = |l: &[VaryingValue]| {
        l.iter()
            .map(|v| serde_json::json!({"index": v.index, "pointer": v.pointer, "keyVaries": v.key_varies}))
            .collect::<Vec<_>>()
    };
    match c {
        Control::Same { side } => serde_json::json!({"leg": side, "outcome": "same"}),
        Control::NotFinished { side, why } => {
            serde_json::json!({"leg": side, "outcome": "notFinished", "why": why})
        }
        Control::Varies(v) => serde_json::json!({"leg": v.side, "outcome": "varies",
            "events": values(&v.events), "rows": values(&v.rows), "lengths": v.lengths}),
    }
}

/// A leg that replays cells live against a bridge command, through the cell's protocol's
/// [`crate::protocol::Live`].
pub struct LiveLeg {
    pub label: String,
    pub bridge: BridgeCommand,
    pub timeout_ms: u64,
    /// Largest reply body a live leg reads (`--max-body`; [`crate::protocol::LiveLimits`]).
    pub max_body: usize,
    /// Bound on a whole reply a live leg reads (`--max-reply-time`; [`crate::protocol::LiveLimits`]).
    pub max_reply: std::time::Duration,
}

impl LegRunner for LiveLeg {
    fn label(&self) -> String {
        self.label.clone()
    }
    fn replays_live(&self) -> bool {
        true
    }
    fn bridge(&self) -> Option<&BridgeCommand> {
        Some(&self.bridge)
    }
    fn run(&self, key: &str, cell: Option<&Cell>) -> LegRun {
        let Some(cell) = cell else {
            return LegRun {
                error: Some(format!("no recording for {key}")),
                ..Default::default()
            };
        };
        leg_run_of(
            cell,
            cell.protocol
                .live()
                .replay(cell, &self.bridge, self.limits()),
        )
    }
    fn run_together(&self, cells: &[&Cell]) -> Option<Vec<LegRun>> {
        let first = cells.first()?;
        if cells.iter().any(|c| c.protocol != first.protocol) {
            return None;
        }
        let replays = first
            .protocol
            .live()
            .replay_together(cells, &self.bridge, self.limits())?;
        Some(
            cells
                .iter()
                .zip(replays)
                .map(|(c, r)| leg_run_of(c, r))
                .collect(),
        )
    }
}

impl LiveLeg {
    fn limits(&self) -> crate::protocol::LiveLimits {
        crate::protocol::LiveLimits {
            timeout: std::time::Duration::from_millis(self.timeout_ms),
            max_body: self.max_body,
            max_reply: self.max_reply,
        }
    }
}

/// A live replay of a cell as a leg's run; rows are projected from the events.
pub fn leg_run_of(cell: &Cell, r: crate::protocol::LiveReplay) -> LegRun {
    let model = cell.protocol.model();
    let mut rows = model.row_projector();
    for e in &r.events {
        rows.push(e);
    }
    LegRun {
        unhandled: r.events.iter().filter(|e| model.is_unhandled(e)).count() as u64,
        rows: rows.finish(),
        grammar: r.grammar,
        stalls: r.stalls,
        error: r.error,
        skip: r.skip,
        events: r.events,
        recorded_events: None,
        left_out: r.left_out,
        lane_errors: Vec::new(),
        wire: r.wire,
        wire_in_cell: r.wire_in_cell,
        refused: r.refused,
        problems: r.problems,
    }
}

/// One cell as a report verdict (id = the cell key): a sub-check per layer, so a report shows
/// which of events, rows, grammar drops, allowlist, stalls and leg errors failed.
pub fn verdict(c: &CellParity) -> crate::rule::Verdict {
    use crate::rule::{SubCheck, Verdict};
    if let Some(reason) = &c.skipped {
        return Verdict::not_run(&c.key, reason.clone());
    }
    let layer = |name: &str, d: &ListDiff| {
        if d.is_empty() {
            SubCheck::pass(name, "no difference")
        } else {
            let mut ev: Vec<String> = Vec::new();
            ev.extend(
                d.only_in_base
                    .iter()
                    .take(MAX_LISTED)
                    .map(|(i, v)| format!("only in base #{i}: {}", diff::describe(v))),
            );
            ev.extend(
                d.only_in_head
                    .iter()
                    .take(MAX_LISTED)
                    .map(|(i, v)| format!("only in head #{i}: {}", diff::describe(v))),
            );
            ev.extend(
                d.id_mismatches
                    .iter()
                    .take(MAX_LISTED)
                    .map(|m| format!("id differs: {m}")),
            );
            let listed = ev.len();
            let total = d.only_in_base.len() + d.only_in_head.len() + d.id_mismatches.len();
            if total > listed {
                ev.push(format!("… {} more", total - listed));
            }
            SubCheck::fail(name, diff::visible(&ev.join("\n")))
        }
    };
    let list = |name: &str, items: &[String]| {
        if items.is_empty() {
            SubCheck::pass(name, "none")
        } else {
            SubCheck::fail(name, items.join("\n"))
        }
    };
    let mut subs = vec![list("legs-ran", &c.errors), list("no-stall", &c.stalls)];
    if c.errors.is_empty() && c.stalls.is_empty() {
        subs.push(layer("events", &c.events));
        subs.push(layer("rows", &c.rows));
        subs.push(layer("grammar", &c.grammar));
        subs.push(match &c.wire_unseen {
            Some(why) => SubCheck::skipped("wire", format!("not compared: {why}")),
            None => layer("wire", &c.wire),
        });
        subs.push(list(
            "allowlist-current",
            &c.stale
                .iter()
                .map(|e| format!("stale entry {}", e.describe()))
                .collect::<Vec<_>>(),
        ));
    } else {
        subs.push(SubCheck::skipped(
            "events",
            "not compared: a leg stalled or did not run",
        ));
    }
    // A live leg's spec problems (a wrong welcome clientId) are their own sub-check, beside the
    // empty-replay one.
    let (empty, spec): (Vec<String>, Vec<String>) = c
        .problems
        .iter()
        .cloned()
        .partition(|p| p.contains(EMPTY_REPLAY));
    subs.push(list("replay-not-empty", &empty));
    if let Some(Control::Varies(v)) = &c.control
        && v.count() > 0
    {
        subs.push(SubCheck::skipped(
            "varying-values",
            format!(
                "{} value(s) that differ between two runs of the {} leg, not compared: {}",
                v.count(),
                v.side,
                v.describe(MAX_LISTED)
            ),
        ));
    }
    if !spec.is_empty() {
        subs.push(list("live-spec", &spec));
    }
    let detail = render_cell(c).join("\n");
    let mut v = Verdict::from_subchecks(&c.key, subs);
    if v.status != crate::rule::Status::Pass {
        v.detail = detail;
    }
    v
}

/// One cell as JSON (`--format json`).
pub fn cell_json(c: &CellParity) -> Value {
    let layer = |d: &ListDiff| {
        serde_json::json!({
            "onlyInBase": d.only_in_base.iter().map(|(i, v)| serde_json::json!({"index": i, "element": v})).collect::<Vec<_>>(),
            "onlyInHead": d.only_in_head.iter().map(|(i, v)| serde_json::json!({"index": i, "element": v})).collect::<Vec<_>>(),
            "idMismatches": d.id_mismatches,
        })
    };
    let leg = |l: &LegSummary| {
        serde_json::json!({"events": l.events, "rows": l.rows, "unhandled": l.unhandled,
            "grammarDrops": l.grammar_drops, "stalls": l.stalls, "leftOut": l.left_out})
    };
    serde_json::json!({
        "cell": c.key,
        "outcome": c.outcome().word().to_lowercase(),
        "skipped": c.skipped,
        "base": leg(&c.base),
        "head": leg(&c.head),
        "events": layer(&c.events),
        "rows": layer(&c.rows),
        "grammar": layer(&c.grammar),
        "wire": layer(&c.wire),
        "wireNotCompared": c.wire_unseen,
        "staleAllowlist": c.stale.iter().map(|e| e.describe()).collect::<Vec<_>>(),
        "stalls": c.stalls,
        "errors": c.errors,
        "problems": c.problems,
        "invalidInput": c.invalid_input,
        "secondRun": c.control.as_ref().map(control_json),
    })
}

/// Both legs' handshakes of one protocol, compared: what each states that the runtime acts on
/// ([`crate::protocol::Identity::facts`]), after the allowlist's `handshake` entries. A live leg
/// states it when started, a recorded leg as its cells were recorded; a leg that holds none (a
/// dump, cells recorded without it) leaves it not compared, saying why.
#[derive(Debug, Clone)]
pub struct HandshakeParity {
    pub protocol: String,
    /// `/path: base → head`, one per differing fact, then why the runtime would refuse a leg.
    pub differences: Vec<String>,
    pub stale: Vec<AllowEntry>,
    /// Where a recorded leg's handshake was read (`base: as recorded with 2 cells of rec:…`).
    pub sources: Vec<String>,
    /// Why the handshakes were not compared; its `handshake` entries are then not judged.
    pub not_compared: Option<String>,
}

impl HandshakeParity {
    pub fn failed(&self) -> bool {
        !self.differences.is_empty() || !self.stale.is_empty()
    }

    /// Not compared: one leg's handshake is not known (`why`). The allowlist's `handshake`
    /// entries for it are named as not judged, neither used nor stale.
    pub fn not_compared(protocol: &str, why: String) -> HandshakeParity {
        HandshakeParity {
            protocol: protocol.to_string(),
            differences: Vec::new(),
            stale: Vec::new(),
            sources: Vec::new(),
            not_compared: Some(why),
        }
    }

    /// `PASS|FAIL|SKIP handshake <protocol>` and what differs.
    pub fn render(&self) -> Vec<String> {
        if let Some(why) = &self.not_compared {
            return vec![diff::visible(&format!(
                "SKIP handshake {}: not compared: {why}",
                self.protocol
            ))];
        }
        // A stale entry fails the run as a difference does, so the line says FAIL for it too.
        let mut out = vec![if !self.failed() {
            format!(
                "PASS handshake {}: both legs state the same handshake",
                self.protocol
            )
        } else if self.differences.is_empty() {
            format!(
                "FAIL handshake {}: both legs state the same handshake, but the allowlist names a difference that is not there",
                self.protocol
            )
        } else {
            format!(
                "FAIL handshake {}: the legs' handshakes differ, so the runtime treats them otherwise whatever the cells show",
                self.protocol
            )
        }];
        out.extend(self.differences.iter().map(|d| format!("  {d}")));
        out.extend(
            self.stale
                .iter()
                .map(|e| format!("  stale allowlist entry {}", e.describe())),
        );
        out.extend(self.sources.iter().map(|s| format!("  {s}")));
        out.into_iter().map(|l| diff::visible(&l)).collect()
    }

    pub fn verdict(&self) -> crate::rule::Verdict {
        use crate::rule::{SubCheck, Verdict};
        let id = format!("handshake/{}", self.protocol);
        if let Some(why) = &self.not_compared {
            return Verdict::skipped(&id, format!("not compared: {why}"));
        }
        let stale: Vec<String> = self
            .stale
            .iter()
            .map(|e| format!("stale entry {}", e.describe()))
            .collect();
        let mut evidence = self.differences.clone();
        evidence.extend(self.sources.iter().cloned());
        Verdict::from_subchecks(
            &id,
            vec![
                if self.differences.is_empty() {
                    SubCheck::pass(
                        "handshake",
                        if self.sources.is_empty() {
                            "no difference".to_string()
                        } else {
                            format!("no difference; {}", self.sources.join("; "))
                        },
                    )
                } else {
                    SubCheck::fail("handshake", diff::visible(&evidence.join("\n")))
                },
                if stale.is_empty() {
                    SubCheck::pass("allowlist-current", "none")
                } else {
                    SubCheck::fail("allowlist-current", stale.join("\n"))
                },
            ],
        )
    }

    pub fn json(&self) -> Value {
        let outcome = if self.not_compared.is_some() {
            "skip"
        } else if self.failed() {
            "fail"
        } else {
            "pass"
        };
        serde_json::json!({
            "protocol": self.protocol,
            "outcome": outcome,
            "differences": self.differences,
            "stale": self.stale.iter().map(|e| e.describe()).collect::<Vec<_>>(),
            "sources": self.sources,
            "notCompared": self.not_compared,
        })
    }
}

/// Compares two legs' handshakes of `protocol`. `providers` are the providers of its cells: a
/// `handshake` entry applies when its provider is `*` or one of them.
pub fn compare_handshakes(
    protocol: &str,
    providers: &[&str],
    base: &crate::protocol::Identity,
    head: &crate::protocol::Identity,
    allow: &[AllowEntry],
) -> HandshakeParity {
    let (mut b, mut h) = (base.facts.clone(), head.facts.clone());
    let mut stale = Vec::new();
    for e in allow.iter().filter(|e| {
        e.layer == allowlist::Layer::Handshake
            && (e.provider == "*" || providers.contains(&e.provider.as_str()))
    }) {
        if e.mask_value(&mut b) + e.mask_value(&mut h) == 0 {
            stale.push(e.clone());
        }
    }
    let mut differences = diff::json_diff(&b, &h);
    if !differences.is_empty() && base.refused != head.refused {
        for (side, why) in [("base", &base.refused), ("head", &head.refused)] {
            if let Some(why) = why {
                differences.push(format!("{side}: {why}"));
            }
        }
    }
    HandshakeParity {
        protocol: protocol.to_string(),
        differences,
        stale,
        sources: Vec::new(),
        not_compared: None,
    }
}

/// A recorded leg's handshake: the one its cells of a protocol were recorded with, read from
/// each cell's manifest (`record-cells`, `package`) or from the recording's own handshake
/// exchange (a process-scoped cell, as a recorder writes it). `Err` says why there is none to
/// compare: no cell holds one, or its cells were recorded from bridges stating different
/// handshakes.
pub fn recorded_handshake(
    label: &str,
    cells: &[Cell],
    live: &dyn crate::protocol::Live,
) -> Result<(crate::protocol::Identity, usize), String> {
    let mut seen: Vec<(crate::protocol::Identity, Vec<&str>)> = Vec::new();
    for c in cells {
        let Some(id) = crate::cells::manifest_handshake(c).or_else(|| live.recorded_identity(c))
        else {
            continue;
        };
        match seen
            .iter_mut()
            .find(|(s, _)| s.facts == id.facts && s.refused == id.refused)
        {
            Some((_, keys)) => keys.push(&c.key),
            None => seen.push((id, vec![&c.key])),
        }
    }
    match seen.len() {
        0 => Err(format!(
            "none of {label}'s {} {} cell(s) holds its bridge's handshake: neither a manifest.json \
with `bridge.handshake` (`record-cells` writes one) nor the recording's own handshake \
(a process-scoped cell holds it)",
            cells.len(),
            live.protocol()
        )),
        1 => {
            let (id, keys) = seen.pop().expect("one");
            Ok((id, keys.len()))
        }
        n => Err(format!(
            "{label}'s cells were recorded from {n} bridges stating different handshakes ({})",
            seen.iter()
                .map(|(_, keys)| keys.first().copied().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(" vs ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(events: Vec<Value>) -> LegRun {
        LegRun {
            events,
            ..Default::default()
        }
    }

    /// What differs between two runs is set aside in both legs as its kind (a key one run
    /// lacks, altogether); a head whose value changes kind, or that changes what did not vary,
    /// still differs.
    #[test]
    fn values_that_vary_between_runs_are_set_aside_as_their_kind() {
        let model = crate::protocol::Protocol::DEFAULT.model();
        let first = run(vec![
            json!({"type": "a", "text": "hi ~1", "list": [1], "extra": 1, "same": "x"}),
        ]);
        let again = run(vec![
            json!({"type": "a", "text": "hi ~2", "list": [1, 2], "same": "x"}),
        ]);
        // The base leg's first run against `head`; where they differ, the base leg's second
        // run (`again`) tells what varies, and the cell is compared again without it.
        let compare = |head: Value, again: &LegRun| {
            let (mut cell, lists) =
                compare_cell_keeping("p/c", model, first.clone(), run(vec![head]), &[], None);
            let lists = lists.expect("the lists differ");
            let v = varying_between(model, ("p/c", &[]), "base", &lists, again.clone());
            recompare(&mut cell, lists, model, &v);
            (cell, v)
        };
        let (cell, v) = compare(
            json!({"type": "a", "text": "yo", "list": [3, 4, 5], "same": "x"}),
            &again,
        );
        let pointers: Vec<(&str, bool)> = v
            .events
            .iter()
            .map(|p| (p.pointer.as_str(), p.key_varies))
            .collect();
        assert_eq!(
            pointers,
            [("/text", false), ("/list", false), ("/extra", true)]
        );
        assert!(v.lengths.is_empty());
        // Another text, another non-empty list, no `extra`: nothing left to tell.
        assert!(cell.passed(), "{:?}", cell.events);
        // Text that turns empty, and a value that did not vary, still differ.
        for head in [
            json!({"type": "a", "text": "", "list": [3], "same": "x"}),
            json!({"type": "a", "text": "yo", "list": [3], "same": "y"}),
        ] {
            assert!(!compare(head, &again).0.passed());
        }
        // Lists of another length: named, nothing past the shorter one set aside.
        let longer = run(vec![json!({"type": "a"}), json!({"type": "b"})]);
        let (cell, v) = compare(json!({"type": "b"}), &longer);
        assert_eq!(v.lengths, ["events 1 then 2"]);
        assert!(!cell.passed());
    }

    /// The allowlist applies to the second run as to the first: a value it takes out of both
    /// legs is not counted again as one that varies.
    #[test]
    fn a_second_run_is_held_against_the_first_as_the_allowlist_left_it() {
        let model = crate::protocol::Protocol::DEFAULT.model();
        let allow = allowlist::parse(
            r##"[{"provider":"*","cell":"*","layer":"events","path":"/*/stamp","pr":"#1","reason":"r"}]"##,
            "t",
        )
        .unwrap();
        let leg = |stamp: u64, text: &str| {
            run(vec![
                json!({"type": "a", "stamp": stamp, "text": text, "same": "x"}),
            ])
        };
        let (mut cell, lists) =
            compare_cell_keeping("p/c", model, leg(1, "hi ~1"), leg(7, "hi"), &allow, None);
        let lists = lists.expect("the texts differ");
        let v = varying_between(model, ("p/c", &allow), "base", &lists, leg(2, "hi ~2"));
        let pointers: Vec<&str> = v.events.iter().map(|p| p.pointer.as_str()).collect();
        assert_eq!(pointers, ["/text"], "{v:?}");
        recompare(&mut cell, lists, model, &v);
        assert!(cell.passed(), "{:?}", cell.events);
        assert!(cell.stale.is_empty(), "the entry applied");
    }
}

#[cfg(test)]
mod outcome_tests {
    use super::*;

    /// A stall after a leg's named fault (a message forwarded under another clientId, whose
    /// answer then reaches nobody) fails the cell naming the fault first, without advice to
    /// wait longer; a stall alone stays a stall with that advice.
    #[test]
    fn a_fault_named_before_a_stall_fails_the_cell() {
        let mut c = CellParity {
            skipped: None,
            ..CellParity::skip("hub/cell", "")
        };
        c.stalls = vec![
            "head: timed out waiting for hub→browser event #6 (typing: no event within the wait)"
                .into(),
        ];
        assert_eq!(c.outcome(), Outcome::Stall);
        assert!(
            render_cell(&c)
                .iter()
                .any(|l| l.contains("--timeout-ms raises the wait"))
        );
        c.problems = vec!["head empty replay: the recording assembles 24 events".into()];
        assert_eq!(
            c.outcome(),
            Outcome::Stall,
            "an empty replay is the stall's consequence"
        );
        c.problems =
            vec!["head: the hub forwarded this browser's message under another clientId".into()];
        assert_eq!(c.outcome(), Outcome::Fail);
        let lines = render_cell(&c);
        let at = |needle: &str| lines.iter().position(|l| l.contains(needle));
        assert!(
            at("forwarded this browser's message") < at("stall: "),
            "{lines:#?}"
        );
        assert!(
            !lines.iter().any(|l| l.contains("--timeout-ms")),
            "{lines:#?}"
        );
    }
}

#[cfg(test)]
mod same_bridge_tests {
    use super::same_bridge;
    use crate::protocol::BridgeCommand;

    fn cmd(words: &[&str]) -> BridgeCommand {
        BridgeCommand {
            argv: words.iter().map(|w| w.to_string()).collect(),
            cwd: Some(std::env::temp_dir()),
            address_pattern: None,
        }
    }

    /// `env program` runs `program`: spelled through env (by name or path, with the same
    /// assignments in any order) it is the same bridge; other assignments make another.
    #[test]
    fn a_program_spelled_through_env_is_the_same_program() {
        let Some(env) = super::which("env") else {
            return;
        };
        let plain = cmd(&["sh", "-c", "exit 0"]);
        assert!(same_bridge(&plain, &cmd(&["env", "sh", "-c", "exit 0"])).is_some());
        assert!(same_bridge(&plain, &cmd(&[&env, "sh", "-c", "exit 0"])).is_some());
        assert!(
            same_bridge(
                &cmd(&["env", "A=1", "B=2", "sh", "-c", "exit 0"]),
                &cmd(&["env", "B=2", "A=1", "sh", "-c", "exit 0"])
            )
            .is_some()
        );
        assert!(same_bridge(&plain, &cmd(&["env", "A=1", "sh", "-c", "exit 0"])).is_none());
        assert!(same_bridge(&plain, &cmd(&["env", "-i", "sh", "-c", "exit 0"])).is_none());
    }
}
