//! `bridgewire.toml`: per-project settings. Today only the bb conformance fixture:
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

/// Top-level sections bridgewire (or a colleague's subcommand) reads.
const KNOWN_TOP: &[&str] = &["bb", "bridle", "sidebridge"];
const KNOWN_BB: &[&str] = &["fixture"];
const KNOWN_FIXTURE: &[&str] = &[
    "cwd",
    "promptInput",
    "options",
    "zeroWorkPromptInput",
    "interruptiblePromptInput",
    "icons",
];

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
        for k in root.keys() {
            if !KNOWN_TOP.contains(&k.as_str()) {
                cfg.warnings
                    .push(format!("{file}: unknown key `{k}` (ignored)"));
            }
        }
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
        for k in bb.keys() {
            if !KNOWN_BB.contains(&k.as_str()) {
                cfg.warnings
                    .push(format!("{file}: unknown key `bb.{k}` (ignored)"));
            }
        }
        let Some(fx) = bb.get("fixture") else {
            return Ok(cfg);
        };
        let fx = fx
            .as_object()
            .ok_or_else(|| format!("{file}: `bb.fixture` must be a table"))?;
        for k in fx.keys() {
            if !KNOWN_FIXTURE.contains(&k.as_str()) {
                cfg.warnings
                    .push(format!("{file}: unknown key `bb.fixture.{k}` (ignored)"));
            }
        }
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
            for k in o.keys() {
                if k != "pluginId" && k != "names" {
                    cfg.warnings.push(format!(
                        "{file}: unknown key `bb.fixture.icons.{k}` (ignored)"
                    ));
                }
            }
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
                "x.toml: unknown key `typo` (ignored)",
                "x.toml: unknown key `bb.fixture.bogus` (ignored)",
                "x.toml: unknown key `bb.fixture.icons.extra` (ignored)",
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
}
