//! `bridgewire init <protocol>`: writes a commented `bridgewire.toml` for a new project.

use super::exit;
use std::path::PathBuf;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitProtocol {
    Bb,
    Sidebridge,
    Bridle,
}

#[derive(clap::Args, Debug)]
pub struct InitArgs {
    /// The protocol your bridge speaks.
    #[arg(value_enum)]
    pub protocol: InitProtocol,
    /// Where to write the file.
    #[arg(long, value_name = "PATH", default_value = crate::config::FILE_NAME)]
    pub config: PathBuf,
    /// Replace an existing file.
    #[arg(long)]
    pub force: bool,
}

/// The commented template for `p` (every template loads without warnings: a test checks).
pub fn template(p: InitProtocol) -> &'static str {
    match p {
        InitProtocol::Bb => include_str!("templates/bb.toml"),
        InitProtocol::Sidebridge => include_str!("templates/sidebridge.toml"),
        InitProtocol::Bridle => include_str!("templates/bridle.toml"),
    }
}

pub fn run(a: &InitArgs) -> u8 {
    if a.config.exists() && !a.force {
        eprintln!(
            "bridgewire init: {} already exists (pass --force to replace it)",
            a.config.display()
        );
        return exit::INVALID_INPUT;
    }
    if let Err(e) = std::fs::write(&a.config, template(a.protocol)) {
        eprintln!("bridgewire init: cannot write {}: {e}", a.config.display());
        return exit::INVALID_INPUT;
    }
    let next = match a.protocol {
        InitProtocol::Bb => "bridgewire check bb -- <your bridge command>",
        InitProtocol::Sidebridge => "bridgewire check sidebridge --url <your server URL>",
        InitProtocol::Bridle => "bridgewire check bridle hub -- <your hub command>",
    };
    println!("wrote {}", a.config.display());
    println!("next: edit it, then run `{next}`");
    exit::OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_loads_without_warnings() {
        for p in [
            InitProtocol::Bb,
            InitProtocol::Sidebridge,
            InitProtocol::Bridle,
        ] {
            let cfg = crate::config::Config::parse(template(p), std::path::Path::new("t.toml"))
                .unwrap_or_else(|e| panic!("{p:?}: {e}"));
            assert!(cfg.warnings.is_empty(), "{p:?}: {:?}", cfg.warnings);
        }
        // Uncommenting every line of the bb template still loads without warnings.
        let all: String = template(InitProtocol::Bb)
            .lines()
            .map(|l| {
                let t = l.strip_prefix("# ").unwrap_or(l);
                let looks_like_toml = t.starts_with('[') || t.contains(" = ");
                if l.starts_with("# ") && looks_like_toml {
                    t
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let cfg = crate::config::Config::parse(&all, std::path::Path::new("t.toml")).unwrap();
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
        assert!(cfg.bb_fixture.icons.is_some() && cfg.bb_fixture.cwd.is_some());
    }

    #[test]
    fn the_bb_template_names_every_fixture_key_and_the_rules_it_runs() {
        let t = template(InitProtocol::Bb);
        for r in crate::rule::catalogue_cached()
            .iter()
            .filter(|r| r.protocol == "bb")
        {
            if let Some(key) = &r.fixture {
                assert!(t.contains(&format!("# {key} = ")), "{key} missing");
                assert!(t.contains(&r.id), "{} missing", r.id);
            }
        }
    }
}
