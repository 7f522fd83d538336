//! Tools a test needs from the machine: python3, node, the canonical npm packages under
//! `tests/node`. A test never passes on evidence it did not see: when a tool is missing, under
//! CI (`CI` set, as `.ci/run` runs) the test panics naming the tool and the reason; elsewhere
//! it prints `SKIPPED: <test>: <tool> not available (<reason>)` on stderr and the caller skips
//! (returns, or leaves out the part that needs the tool).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// Whether this run is CI's: `CI` set to anything but empty, `0` or `false`.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// What a missing tool means for `test`: a panic under CI, else a visible SKIPPED line.
/// Returns `false` (the tool is not there) so callers can `return` or leave a part out.
pub fn missing(test: &str, tool: &str, reason: &str) -> bool {
    if under_ci() {
        panic!(
            "{test}: {tool} not available under CI ({reason}); CI must not pass a test on \
             evidence it did not see"
        );
    }
    // Straight to the process's stderr: libtest captures `eprintln!` of a passing test, and
    // a skip must be seen.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {test}: {tool} not available ({reason})"
    );
    false
}

/// `program --version` runs and succeeds: `Err(why)` otherwise.
fn runs(program: &str) -> Result<(), String> {
    match Command::new(program).arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!("`{program} --version` exited with {}", o.status)),
        Err(e) => Err(format!("`{program} --version`: {e}")),
    }
}

/// The Python interpreter to run peers with (`python3`, else `python`), or `None` after
/// [`missing`] (which panics under CI).
pub fn python(test: &str) -> Option<&'static str> {
    static FOUND: OnceLock<Result<&'static str, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let mut why = Vec::new();
        for p in ["python3", "python"] {
            match runs(p) {
                Ok(()) => return Ok(p),
                Err(e) => why.push(e),
            }
        }
        Err(why.join("; "))
    });
    match found {
        Ok(p) => Some(*p),
        Err(why) => {
            missing(test, "python3", why);
            None
        }
    }
}

/// Whether `node` runs; when not, [`missing`] decides (panic under CI).
pub fn node(test: &str) -> bool {
    static RUNS: OnceLock<Result<(), String>> = OnceLock::new();
    match RUNS.get_or_init(|| runs("node")) {
        Ok(()) => true,
        Err(why) => missing(test, "node", why),
    }
}

/// `tests/node`, where `npm ci --prefix tests/node` installs the canonical packages.
pub fn node_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node")
}

/// Whether `node` runs and each npm package (`socket.io`, `socket.io-client`, ...) is installed
/// under `tests/node/node_modules`; when not, [`missing`] decides (panic under CI).
pub fn node_packages(test: &str, packages: &[&str]) -> bool {
    if !node(test) {
        return false;
    }
    let absent: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !node_dir().join("node_modules").join(p).is_dir())
        .collect();
    if absent.is_empty() {
        return true;
    }
    missing(
        test,
        "node",
        &format!(
            "tests/node/node_modules lacks {}: run `npm ci --prefix tests/node`",
            absent.join(", ")
        ),
    )
}

/// `/usr/bin/perl` with JSON::PP (core), for the Perl peer (`tests/peers/bb-perl`): `None` when
/// it is missing ([`missing`] says so, or panics under CI).
pub fn perl(test: &str) -> Option<&'static str> {
    const PERL: &str = "/usr/bin/perl";
    let ok = Command::new(PERL)
        .args(["-MJSON::PP", "-MIO::Select", "-MFile::Temp", "-e1"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok
        || missing(
            test,
            "perl",
            "/usr/bin/perl with JSON::PP runs the Perl bb peer",
        )
    {
        Some(PERL)
    } else {
        None
    }
}
