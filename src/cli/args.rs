//! Argument types every command shares, so a flag reads and parses the same everywhere:
//! durations with units, `--partition hash:M/N`.

use std::time::Duration;

/// Splits `"1.5s"` into (1.5, "s"). Errors name the value.
fn number_and_unit(s: &str) -> Result<(f64, &str), String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| {
        format!("`{s}` is not a duration (write e.g. 15s, 750ms, 2m, or milliseconds)")
    })?;
    if !n.is_finite() {
        return Err(format!("`{s}` is not a finite duration"));
    }
    Ok((n, unit.trim()))
}

fn unit_ms(unit: &str, s: &str) -> Result<f64, String> {
    Ok(match unit {
        "ms" => 1.0,
        "s" => 1000.0,
        "m" | "min" => 60_000.0,
        "h" => 3_600_000.0,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (use ms, s, m or h)")),
    })
}

/// A duration written with a unit (`750ms`, `15s`, `1.5s`, `2m`, `1h`); a bare number is
/// milliseconds (what every `--…-ms` flag always took). Returns milliseconds.
pub fn parse_ms(s: &str) -> Result<u64, String> {
    let (n, unit) = number_and_unit(s)?;
    let per = if unit.is_empty() {
        1.0
    } else {
        unit_ms(unit, s)?
    };
    let ms = n * per;
    if ms > u64::MAX as f64 / 2.0 {
        return Err(format!("`{s}` is too long"));
    }
    Ok(ms.round() as u64)
}

/// [`parse_ms`] as a [`Duration`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_ms(s).map(Duration::from_millis)
}

/// For flags whose bare numbers have always been seconds (`check sidebridge --timeout 60`):
/// units work as everywhere (`750ms`, `15s`); a bare number stays seconds. Returns seconds.
pub fn parse_secs(s: &str) -> Result<f64, String> {
    let (n, unit) = number_and_unit(s)?;
    if unit.is_empty() {
        return Ok(n);
    }
    Ok(n * unit_ms(unit, s)? / 1000.0)
}

/// `--url-pattern REGEX`, compiled while the arguments are read: a broken pattern is a usage
/// error (exit 2 naming the flag) before any bridge starts, the same for every command.
pub fn parse_regex(s: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(s).map_err(|e| e.to_string())
}

/// `hash:M/N`: shard M (1-based) of N; a cell belongs to the shard its key hashes to, so N CI
/// machines given `hash:1/N` … `hash:N/N` together run every cell exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub index: u64,
    pub count: u64,
}

impl Partition {
    /// Whether the cell with `key` (`<provider>/<cell>`) is in this shard.
    pub fn includes(&self, key: &str) -> bool {
        // FNV-1a 64: stable across runs, machines and versions (unlike std's hasher).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h % self.count == self.index - 1
    }
}

pub fn parse_partition(s: &str) -> Result<Partition, String> {
    let bad = || format!("`{s}`: expected hash:M/N with 1 <= M <= N (e.g. hash:1/3)");
    let rest = s.strip_prefix("hash:").ok_or_else(bad)?;
    let (m, n) = rest.split_once('/').ok_or_else(bad)?;
    let index: u64 = m.trim().parse().map_err(|_| bad())?;
    let count: u64 = n.trim().parse().map_err(|_| bad())?;
    if index == 0 || count == 0 || index > count {
        return Err(bad());
    }
    Ok(Partition { index, count })
}

/// `--partition hash:M/N`, flattened into every command that runs over recorded cells.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PartitionArgs {
    /// Run only shard M of N of the cells (`hash:M/N`, by a stable hash of each cell's key), to
    /// split recordings across CI machines.
    #[arg(long, value_name = "hash:M/N", value_parser = parse_partition)]
    pub partition: Option<Partition>,
}

impl PartitionArgs {
    pub fn includes(&self, key: &str) -> bool {
        self.partition.is_none_or(|p| p.includes(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_with_units_and_bare_milliseconds() {
        for (s, ms) in [
            ("750ms", 750),
            ("15s", 15_000),
            ("1.5s", 1_500),
            ("2m", 120_000),
            ("1h", 3_600_000),
            ("1500", 1_500),
            (" 20 ms", 20),
        ] {
            assert_eq!(parse_ms(s), Ok(ms), "{s}");
        }
        for s in ["", "s", "-1s", "5 parsecs", "1e3", "inf"] {
            assert!(parse_ms(s).is_err(), "{s}");
        }
        assert_eq!(parse_secs("60"), Ok(60.0));
        assert_eq!(parse_secs("750ms"), Ok(0.75));
        assert_eq!(parse_secs("2m"), Ok(120.0));
    }

    #[test]
    fn partitions_cover_every_cell_once() {
        assert!(parse_partition("hash:0/3").is_err());
        assert!(parse_partition("hash:4/3").is_err());
        assert!(parse_partition("1/3").is_err());
        let shards: Vec<Partition> = (1..=3)
            .map(|m| parse_partition(&format!("hash:{m}/3")).unwrap())
            .collect();
        let keys: Vec<String> = (0..200).map(|i| format!("p/cell-{i}")).collect();
        let mut sizes = [0usize; 3];
        for k in &keys {
            let owners: Vec<usize> = (0..3).filter(|&i| shards[i].includes(k)).collect();
            assert_eq!(owners.len(), 1, "{k}");
            sizes[owners[0]] += 1;
        }
        assert!(sizes.iter().all(|&n| n > 30), "{sizes:?}");
    }
}
