//! `bridgewire.toml`: per-project settings, found from the project under test (the working
//! directory and its parents up to the repository root; see [`discover`]) or given with
//! `--config`. The bb conformance fixture:
//!
//! ```toml
//! [bb.fixture]
//! cwd = "/tmp/work"                                  # default: a fresh temporary directory
//! promptInput = [{ type = "text", text = "hello" }]  # default: one text item "hello"
//! options = { permissionMode = "full" }              # default: the kit's options (§9.2)
//! zeroWorkPromptInput = [{ type = "text", text = "/noop" }]       # opt-in
//! interruptiblePromptInput = [{ type = "text", text = "/hold" }]  # opt-in
//! icons = { pluginId = "my-plugin", names = ["terminal"] }        # opt-in
//! ```
//!
//! A prompt input may also be written as a plain string, shorthand for one text item.
//! Unknown keys are warnings (naming the file and the key), not errors; a wrong type is an error.
//!
//! Every command validates the whole file against one registry, [`KNOWN_SECTIONS`], so a
//! section one command reads (`[parity]`, `[sidebridge]`, …) is never an "unknown key" to
//! another. A command that reads a new table or key adds one row there (see its doc).

use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The bb conformance fixture (reference §9.3), in wire form.
#[derive(Debug, Clone, PartialEq)]
pub struct BbFixture {
    /// `None`: use a fresh temporary directory.
    pub cwd: Option<String>,
    pub prompt_input: Value,
    pub options: Value,
    pub zero_work_prompt_input: Option<Value>,
    pub interruptible_prompt_input: Option<Value>,
    pub icons: Option<Icons>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Icons {
    pub plugin_id: String,
    pub names: Vec<String>,
}

impl Default for BbFixture {
    fn default() -> BbFixture {
        BbFixture {
            cwd: None,
            prompt_input: json!([{"type": "text", "text": "hello"}]),
            options: default_options(),
            zero_work_prompt_input: None,
            interruptible_prompt_input: None,
            icons: None,
        }
    }
}

/// The kit's default execution options (§9.2).
pub fn default_options() -> Value {
    json!({"permissionMode": "full", "permissionScope": "full", "approvalReviewer": null, "permissionEscalation": null})
}

/// A loaded configuration plus the warnings it produced.
#[derive(Debug, Clone, Default)]
pub struct Config {
    pub path: Option<PathBuf>,
    pub bb_fixture: BbFixture,
    /// `[sidebridge.fixture]` (see `sidebridge::fixture`); empty when absent.
    pub sidebridge_fixture: crate::sidebridge::fixture::Fixture,
    pub warnings: Vec<String>,
}

/// One table of `bridgewire.toml` that some command reads.
#[derive(Debug, Clone, Copy)]
pub struct Section {
    /// Dotted table path; `""` is the file's top level.
    pub path: &'static str,
    /// The keys it accepts (a key that is itself a known section is listed here too);
    /// `None`: any key (the table is free-form, or its owner validates it).
    pub keys: Option<&'static [&'static str]>,
    /// Which command reads it (for the docs and `bridgewire init`).
    pub read_by: &'static str,
}

/// Every table any command reads. To teach bridgewire a new table or key, add or extend a row
/// here (and list a new top-level table in the `""` row): every command then accepts it, and
/// keys outside the registry stay warnings.
pub const KNOWN_SECTIONS: &[Section] = &[
    Section {
        path: "",
        keys: Some(&["bb", "bridle", "sidebridge", "parity"]),
        read_by: "every command",
    },
    Section {
        path: "bb",
        keys: Some(&["fixture"]),
        read_by: "check bb",
    },
    Section {
        path: "bb.fixture",
        keys: Some(&[
            "cwd",
            "promptInput",
            "options",
            "zeroWorkPromptInput",
            "interruptiblePromptInput",
            "icons",
        ]),
        read_by: "check bb",
    },
    Section {
        path: "bb.fixture.options",
        keys: None,
        read_by: "check bb",
    },
    Section {
        path: "bb.fixture.icons",
        keys: Some(&["pluginId", "names"]),
        read_by: "check bb",
    },
    Section {
        path: "parity",
        keys: Some(&["build", "bridge"]),
        read_by: "parity (dir: and ref: legs)",
    },
    Section {
        path: "sidebridge",
        keys: Some(crate::sidebridge::fixture::SECTION_KEYS),
        read_by: "check sidebridge",
    },
    Section {
        path: "sidebridge.fixture",
        keys: Some(crate::sidebridge::fixture::FIXTURE_KEYS),
        read_by: "check sidebridge",
    },
    Section {
        path: "bridle",
        keys: None,
        read_by: "check/replay bridle",
    },
];

/// The registry row for `path`.
pub fn section(path: &str) -> Option<&'static Section> {
    KNOWN_SECTIONS.iter().find(|s| s.path == path)
}

/// Warnings for every key of `table` (at dotted `path`) outside [`KNOWN_SECTIONS`].
fn unknown_keys(
    file: &str,
    path: &str,
    table: &serde_json::Map<String, Value>,
    out: &mut Vec<String>,
) {
    let Some(sec) = section(path) else { return };
    let Some(keys) = sec.keys else { return };
    for (k, v) in table {
        let full = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        if !keys.contains(&k.as_str()) {
            out.push(format!("{file}: unknown key `{full}` (ignored)"));
        } else if let Some(sub) = v.as_object() {
            unknown_keys(file, &full, sub, out);
        }
    }
}

/// The file name bridgewire looks for.
pub const FILE_NAME: &str = "bridgewire.toml";

/// The directories searched for [`FILE_NAME`] from `start`, nearest first: `start` and its
/// parents up to the repository root (the first directory holding `.git`). Outside a
/// repository only `start` itself: a check run from `/tmp` must never pick up a file from
/// an unrelated directory above it.
pub fn search_dirs(start: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut cur = Some(start);
    while let Some(d) = cur {
        dirs.push(d.to_path_buf());
        if d.join(".git").exists() {
            return dirs;
        }
        cur = d.parent();
    }
    vec![start.to_path_buf()]
}

/// The nearest `bridgewire.toml` in [`search_dirs`] of `start`.
pub fn discover(start: &Path) -> Option<PathBuf> {
    search_dirs(start)
        .into_iter()
        .map(|d| d.join(FILE_NAME))
        .find(|p| p.is_file())
}

/// Where a command's configuration came from, for the line it prints.
#[derive(Debug, Clone)]
pub enum Source {
    /// `--config PATH`.
    Given(PathBuf),
    /// Found by [`discover`].
    Found(PathBuf),
    /// None found; the directories searched.
    None(Vec<PathBuf>),
}

impl Source {
    /// `config: <path>` or `config: none (searched …)`.
    pub fn describe(&self) -> String {
        match self {
            Source::Given(p) => format!("config: {} (--config)", p.display()),
            Source::Found(p) => format!("config: {}", p.display()),
            Source::None(dirs) => {
                let first = dirs
                    .first()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default();
                let scope = match dirs.last() {
                    Some(last) if dirs.len() > 1 => format!("{first} up to {}", last.display()),
                    _ => first,
                };
                format!("config: none (no {FILE_NAME} in {scope}); using defaults")
            }
        }
    }
}

impl Config {
    /// `--config PATH` when given, else the file [`discover`]ed from the working directory,
    /// else the defaults. Returns where it came from.
    pub fn find(explicit: Option<&Path>) -> Result<(Config, Source), String> {
        if let Some(p) = explicit {
            return Ok((Config::load(p)?, Source::Given(p.to_path_buf())));
        }
        let cwd = std::env::current_dir().map_err(|e| format!("working directory: {e}"))?;
        match discover(&cwd) {
            Some(p) => Ok((Config::load(&p)?, Source::Found(p))),
            None => Ok((Config::default(), Source::None(search_dirs(&cwd)))),
        }
    }
}

impl Config {
    /// Loads `path`. Errors name the file and the key.
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        Config::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Config, String> {
        let file = path.display().to_string();
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| format!("{file}: invalid TOML: {}", e.message()))?;
        let root = serde_json::to_value(&table).map_err(|e| format!("{file}: {e}"))?;
        let mut cfg = Config {
            path: Some(path.to_path_buf()),
            ..Config::default()
        };
        let root = root.as_object().cloned().unwrap_or_default();
        unknown_keys(&file, "", &root, &mut cfg.warnings);
        if let Some(sb) = root.get("sidebridge") {
            cfg.sidebridge_fixture =
                crate::sidebridge::fixture::parse_section(sb, &file, &mut cfg.warnings)?;
        }
        let Some(bb) = root.get("bb") else {
            return Ok(cfg);
        };
        let bb = bb
            .as_object()
            .ok_or_else(|| format!("{file}: `bb` must be a table"))?;
        let Some(fx) = bb.get("fixture") else {
            return Ok(cfg);
        };
        let fx = fx
            .as_object()
            .ok_or_else(|| format!("{file}: `bb.fixture` must be a table"))?;
        let f = &mut cfg.bb_fixture;
        let key = |k: &str| format!("{file}: `bb.fixture.{k}`");
        if let Some(v) = fx.get("cwd") {
            f.cwd = Some(
                v.as_str()
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| format!("{} must be a non-empty string", key("cwd")))?
                    .to_string(),
            );
        }
        if let Some(v) = fx.get("promptInput") {
            f.prompt_input = input(v).map_err(|e| format!("{}: {e}", key("promptInput")))?;
        }
        if let Some(v) = fx.get("options") {
            if !v.is_object() {
                return Err(format!("{} must be a table", key("options")));
            }
            f.options = v.clone();
        }
        if let Some(v) = fx.get("zeroWorkPromptInput") {
            f.zero_work_prompt_input =
                Some(input(v).map_err(|e| format!("{}: {e}", key("zeroWorkPromptInput")))?);
        }
        if let Some(v) = fx.get("interruptiblePromptInput") {
            f.interruptible_prompt_input =
                Some(input(v).map_err(|e| format!("{}: {e}", key("interruptiblePromptInput")))?);
        }
        if let Some(v) = fx.get("icons") {
            let o = v
                .as_object()
                .ok_or_else(|| format!("{} must be a table {{pluginId, names}}", key("icons")))?;
            let plugin_id = o
                .get("pluginId")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| format!("{}.pluginId must be a non-empty string", key("icons")))?
                .to_string();
            let names = o
                .get("names")
                .and_then(Value::as_array)
                .and_then(|a| {
                    a.iter()
                        .map(|n| n.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| format!("{}.names must be an array of strings", key("icons")))?;
            cfg.bb_fixture.icons = Some(Icons { plugin_id, names });
        }
        Ok(cfg)
    }
}

/// A prompt input: an array of input items (objects with a string `type`), or a string as
/// shorthand for one text item.
fn input(v: &Value) -> Result<Value, String> {
    match v {
        Value::String(s) => Ok(json!([{"type": "text", "text": s}])),
        Value::Array(items) => {
            for (i, it) in items.iter().enumerate() {
                if it.get("type").and_then(Value::as_str).is_none() {
                    return Err(format!("item {i} must be a table with a string `type`"));
                }
            }
            Ok(v.clone())
        }
        _ => Err("must be an array of input items or a string".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fixture_and_warns_on_unknown_keys() {
        let text = r#"
typo = 1
[bb.fixture]
cwd = "/tmp"
promptInput = [{type = "text", text = "hi"}]
zeroWorkPromptInput = "/noop"
icons = {pluginId = "p", names = ["a", "b"], extra = 1}
bogus = true
"#;
        let cfg = Config::parse(text, Path::new("x.toml")).unwrap();
        let f = &cfg.bb_fixture;
        assert_eq!(f.cwd.as_deref(), Some("/tmp"));
        assert_eq!(f.prompt_input, json!([{"type": "text", "text": "hi"}]));
        assert_eq!(
            f.zero_work_prompt_input,
            Some(json!([{"type": "text", "text": "/noop"}]))
        );
        assert_eq!(f.options, default_options());
        assert_eq!(f.icons.as_ref().unwrap().names, vec!["a", "b"]);
        assert_eq!(
            cfg.warnings,
            vec![
                "x.toml: unknown key `bb.fixture.bogus` (ignored)",
                "x.toml: unknown key `bb.fixture.icons.extra` (ignored)",
                "x.toml: unknown key `typo` (ignored)",
            ]
        );
    }

    #[test]
    fn the_repository_config_loads_without_warnings() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("bridgewire.toml");
        let cfg = Config::load(&p).unwrap();
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
        let f = &cfg.bb_fixture;
        assert_eq!(
            f.zero_work_prompt_input,
            Some(json!([{"type": "text", "text": "/noop"}]))
        );
        assert_eq!(
            f.interruptible_prompt_input,
            Some(json!([{"type": "text", "text": "/hold"}]))
        );
        assert_eq!(f.icons.as_ref().unwrap().plugin_id, "bb-ref");
    }

    #[test]
    fn wrong_types_are_errors_naming_the_key() {
        let e = Config::parse("[bb.fixture]\npromptInput = 3\n", Path::new("c.toml")).unwrap_err();
        assert!(
            e.contains("c.toml") && e.contains("bb.fixture.promptInput"),
            "{e}"
        );
        let e = Config::parse("[bb.fixture\n", Path::new("c.toml")).unwrap_err();
        assert!(e.contains("invalid TOML"), "{e}");
    }

    #[test]
    fn every_commands_sections_are_known_to_all() {
        let text = r#"
[bb.fixture]
options = { permissionMode = "full", anything = 1 }
[parity]
build = "make"
bridge = "./bridge"
oops = 1
[sidebridge]
whatever = 1
[sidebridge.fixture]
endSession = "bye"
[bridle]
x = 2
[nonsense]
"#;
        let cfg = Config::parse(text, Path::new("p.toml")).unwrap();
        assert_eq!(
            cfg.warnings,
            vec![
                "p.toml: unknown key `nonsense` (ignored)",
                "p.toml: unknown key `parity.oops` (ignored)",
                "p.toml: unknown key `sidebridge.whatever` (ignored)",
            ]
        );
    }

    #[test]
    fn discovery_walks_up_to_the_repository_root_only() {
        let t = tempfile::tempdir().unwrap();
        let outer = t.path();
        let repo = outer.join("repo");
        let deep = repo.join("a/b");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        // A file above the repository root is never found.
        std::fs::write(outer.join(FILE_NAME), "").unwrap();
        assert_eq!(discover(&deep), None);
        assert_eq!(search_dirs(&deep).last().unwrap(), &repo);
        std::fs::write(repo.join(FILE_NAME), "").unwrap();
        assert_eq!(discover(&deep), Some(repo.join(FILE_NAME)));
        std::fs::write(repo.join("a").join(FILE_NAME), "").unwrap();
        assert_eq!(discover(&deep), Some(repo.join("a").join(FILE_NAME)));
        // Outside any repository only the start directory counts.
        let lone = outer.join("lone/x");
        std::fs::create_dir_all(&lone).unwrap();
        std::fs::write(outer.join("lone").join(FILE_NAME), "").unwrap();
        assert_eq!(discover(&lone), None);
        assert_eq!(search_dirs(&lone), vec![lone.clone()]);
        let none = Source::None(search_dirs(&deep)).describe();
        assert!(none.contains("up to") && none.contains("repo"), "{none}");
    }
}
