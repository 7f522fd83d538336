//! Merging a scope's lanes into one stream ordered by `(run, seq)`.
//!
//! bb's reader concatenates the lanes (in the protocol's direction order) and sorts stably by
//! `(run, seq)`. Lanes can be gigabytes, so bridgewire does the same without holding them: a
//! cheap pre-scan reads only each line's `(run, seq)` and, when every lane is already in order
//! (always true of recorder output), the lanes are k-way merged as streams with ties broken by
//! lane order, which is exactly the stable sort's result. A lane out of order (hand-edited, or
//! two processes appending one thread at once) falls back to an in-memory stable sort, with a
//! warning, so the order is still bb's.
//! So does a lane with a line longer than the pre-scan's head whose key the head cannot show
//! (`run`/`seq` after a long field, or repeated past the head): its order was not checked.

use super::read::{LaneError, LaneReader, parse_entry, peek_key};
use super::{Entry, LazyEntry, SeqKey};
use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Read, Seek};
use std::path::PathBuf;

/// Lanes up to this size are read whole, once (one `open`, one `read`): the sortedness
/// pre-scan and the parse then work on memory. Bigger lanes are streamed, pre-scanned and
/// rewound on the same descriptor.
pub const WHOLE_LANE_LIMIT: u64 = 1 << 20;
/// The first read of a lane, before its size is asked (see [`LaneSource::open`]).
const FIRST_READ: usize = 32 << 10;

/// Where a lane's bytes come from.
pub enum LaneSource {
    Memory(Cursor<Vec<u8>>),
    File(BufReader<File>),
}

impl Read for LaneSource {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            LaneSource::Memory(c) => c.read(buf),
            LaneSource::File(f) => f.read(buf),
        }
    }
}

impl BufRead for LaneSource {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        match self {
            LaneSource::Memory(c) => c.fill_buf(),
            LaneSource::File(f) => f.fill_buf(),
        }
    }

    fn consume(&mut self, n: usize) {
        match self {
            LaneSource::Memory(c) => c.consume(n),
            LaneSource::File(f) => f.consume(n),
        }
    }
}

impl LaneSource {
    /// Opens a lane once: small files are read whole.
    pub fn open(path: &std::path::Path) -> std::io::Result<LaneSource> {
        let file = File::open(path)?;
        // A first read of up to `FIRST_READ` bytes without asking the size: most lanes (a
        // corpus cell's) end within it, which saves a `statx` per lane in folders of 10⁵
        // cells.
        let mut bytes = Vec::with_capacity(FIRST_READ);
        if read_to_capacity(&file, &mut bytes)? {
            return Ok(LaneSource::Memory(Cursor::new(bytes)));
        }
        let len = file.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
        if len <= WHOLE_LANE_LIMIT {
            // Read here, not by `File::read_to_end`, which asks the size again (a second
            // `statx` and an `lseek` per lane): the rest in one `read`, then the end of file;
            // a file that grew meanwhile is read to its new end.
            let mut filled = bytes.len();
            bytes.resize((len as usize + 1).max(filled + 1), 0);
            loop {
                if filled == bytes.len() {
                    bytes.resize(bytes.len() * 2, 0);
                }
                match (&file).read(&mut bytes[filled..]) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            bytes.truncate(filled);
            Ok(LaneSource::Memory(Cursor::new(bytes)))
        } else {
            let mut f = BufReader::with_capacity(256 * 1024, file);
            f.rewind()?;
            Ok(LaneSource::File(f))
        }
    }

    fn rewind(&mut self) -> std::io::Result<()> {
        match self {
            LaneSource::Memory(c) => {
                c.set_position(0);
                Ok(())
            }
            LaneSource::File(f) => f.rewind(),
        }
    }
}

/// Reads `file` into `buf`'s spare capacity (not zeroed first) until the end of file (`true`)
/// or a full buffer (`false`). `Read::read_to_end` would start with an 8 KiB read and grow it,
/// one `read` more per lane of 8 to 32 KiB.
fn read_to_capacity(file: &File, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    loop {
        let spare = buf.capacity() - buf.len();
        if spare == 0 {
            return Ok(false);
        }
        // SAFETY: `read` writes at most `spare` bytes into the allocation past `len`, and
        // `len` grows only by what it reports written.
        let n = unsafe {
            libc::read(
                file.as_raw_fd(),
                buf.as_mut_ptr().add(buf.len()).cast(),
                spare,
            )
        };
        match n {
            0 => return Ok(true),
            n if n > 0 => unsafe { buf.set_len(buf.len() + n as usize) },
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// One lane file of a cell.
#[derive(Debug, Clone)]
pub struct LaneFile {
    /// The direction the entries must carry (`bridge→runtime`, even for a `.current` file).
    pub dir: String,
    pub path: PathBuf,
}

/// Diagnostics gathered while merging: errors name `file:line`; warnings are informational.
#[derive(Debug, Default, Clone)]
pub struct MergeReport {
    pub errors: Vec<LaneError>,
    pub warnings: Vec<String>,
    /// The cut last lines among the warnings (ignored entries), by file and line.
    pub cut_lines: Vec<LaneError>,
}

impl MergeReport {
    fn push(&mut self, e: LaneError) {
        if e.is_warning() {
            self.warnings.push(e.to_string());
            self.cut_lines.push(e);
        } else {
            self.errors.push(e);
        }
    }
}

/// A merged, ordered stream of entries. Bad entries are skipped and collected in
/// [`MergedEntries::report`], so one bad line costs one entry, never the cell.
pub struct MergedEntries {
    mode: Mode,
    report: MergeReport,
}

enum Mode {
    Stream {
        readers: Vec<LaneReader<LaneSource>>,
        heads: Vec<Option<LazyEntry>>,
    },
    Sorted(std::vec::IntoIter<LazyEntry>),
}

impl MergedEntries {
    /// Opens and merges `lanes` (given in tie-break order).
    pub fn open(lanes: &[LaneFile]) -> MergedEntries {
        Self::open_with(lanes, false)
    }

    /// [`MergedEntries::open`] for [`MergedEntries::next_lazy`]: lines are kept escaped
    /// where they can be ([`super::LazyLine`]).
    pub fn open_lazy(lanes: &[LaneFile]) -> MergedEntries {
        Self::open_with(lanes, true)
    }

    fn open_with(lanes: &[LaneFile], lazy: bool) -> MergedEntries {
        let mut report = MergeReport::default();
        let mut sorted = true;
        let mut readers = Vec::new();
        for lane in lanes {
            let io_err = |e: std::io::Error| LaneError {
                path: lane.path.clone(),
                line: 0,
                kind: super::read::LaneErrorKind::Io(e.to_string()),
            };
            let mut source = match LaneSource::open(&lane.path) {
                Ok(s) => s,
                Err(e) => {
                    report.push(io_err(e));
                    continue;
                }
            };
            match lane_is_sorted(&mut source).and_then(|s| source.rewind().map(|()| s)) {
                Ok(PreScan::Sorted) => {}
                Ok(PreScan::Unsorted) => {
                    report.warnings.push(format!(
                        "{}: entries are not in (run, seq) order; sorting the cell in memory",
                        lane.path.display()
                    ));
                    sorted = false;
                }
                Ok(PreScan::Unseen(line)) => {
                    report.warnings.push(format!(
                        "{}:{line}: this line's (run, seq) is not in its first {HEAD} bytes; sorting the cell in memory",
                        lane.path.display()
                    ));
                    sorted = false;
                }
                Err(e) => {
                    report.push(io_err(e));
                    continue;
                }
            }
            let reader = LaneReader::new(source, &lane.path, Some(&lane.dir));
            readers.push(if lazy { reader.lazy_lines() } else { reader });
        }
        if sorted {
            let heads = vec![None; readers.len()];
            let mut merged = MergedEntries {
                mode: Mode::Stream { readers, heads },
                report,
            };
            merged.fill_all();
            merged
        } else {
            let mut all = Vec::new();
            for mut reader in readers {
                while let Some(item) = reader.next_lazy() {
                    match item {
                        Ok(e) => all.push(e),
                        Err(e) => report.push(e),
                    }
                }
            }
            all.sort_by_key(LazyEntry::key); // stable: lane order breaks ties
            MergedEntries {
                mode: Mode::Sorted(all.into_iter()),
                report,
            }
        }
    }

    fn fill_all(&mut self) {
        if let Mode::Stream { readers, .. } = &self.mode {
            for i in 0..readers.len() {
                self.fill(i);
            }
        }
    }

    fn fill(&mut self, i: usize) {
        let Mode::Stream { readers, heads } = &mut self.mode else {
            return;
        };
        loop {
            match readers[i].next_lazy() {
                None => {
                    heads[i] = None;
                    return;
                }
                Some(Ok(e)) => {
                    heads[i] = Some(e);
                    return;
                }
                Some(Err(e)) => self.report.push(e),
            }
        }
    }

    /// Diagnostics so far (complete once the iterator is exhausted).
    pub fn report(&self) -> &MergeReport {
        &self.report
    }

    pub fn into_report(self) -> MergeReport {
        self.report
    }
}

impl Iterator for MergedEntries {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        self.next_lazy().map(LazyEntry::into_entry)
    }
}

impl MergedEntries {
    /// The next entry, its `line` still escaped if the lanes were opened by
    /// [`MergedEntries::open_lazy`] and it could be kept so.
    pub fn next_lazy(&mut self) -> Option<LazyEntry> {
        match &mut self.mode {
            Mode::Sorted(it) => it.next(),
            Mode::Stream { heads, .. } => {
                let mut best: Option<(usize, SeqKey)> = None;
                for (i, h) in heads.iter().enumerate() {
                    if let Some(e) = h {
                        let k = e.key();
                        if best.is_none_or(|(_, bk)| k.cmp(&bk).is_lt()) {
                            best = Some((i, k));
                        }
                    }
                }
                let (i, _) = best?;
                let entry = heads[i].take();
                self.fill(i);
                entry
            }
        }
    }
}

/// How much of each line the pre-scan keeps.
const HEAD: usize = 4096;

/// What the pre-scan found.
#[derive(Debug, PartialEq)]
enum PreScan {
    /// Every key seen is in non-decreasing `(run, seq)` order.
    Sorted,
    Unsorted,
    /// Line N (1-based) is longer than [`HEAD`] and its key cannot be read from the head alone
    /// (`run`/`seq` after a long field, or repeated past the head: the full parse takes the
    /// last). Streaming would trust an order nobody checked, so the cell is sorted in memory.
    Unseen(usize),
}

/// Pre-scan: is the lane in non-decreasing `(run, seq)` order? Unparsable lines are ignored
/// here; the real read reports them.
fn lane_is_sorted(reader: &mut impl BufRead) -> std::io::Result<PreScan> {
    let mut prev: Option<SeqKey> = None;
    let mut buf = Vec::new();
    let mut line_no = 0;
    loop {
        buf.clear();
        line_no += 1;
        // Bound the memory of the pre-scan too: only the head of a line is kept.
        let head = read_line_head(reader, &mut buf, HEAD)?;
        if head.consumed == 0 {
            return Ok(PreScan::Sorted);
        }
        let key = if head.truncated {
            match peek_key(&buf) {
                Some(k) if !head.key_in_tail => k,
                _ => return Ok(PreScan::Unseen(line_no)),
            }
        } else {
            match peek_key(&buf).or_else(|| parse_entry(&buf, None).ok().map(|e| e.key())) {
                Some(k) => k,
                None => continue,
            }
        };
        if prev.is_some_and(|p| key.cmp(&p).is_lt()) {
            return Ok(PreScan::Unsorted);
        }
        prev = Some(key);
    }
}

/// One line as [`read_line_head`] saw it.
struct LineHead {
    /// Bytes consumed, the newline included (0 at the end of input).
    consumed: usize,
    /// The line was longer than the bytes kept.
    truncated: bool,
    /// A `"run"` or `"seq"` token occurs in the bytes not kept (or across the cut): the key
    /// the full parse would take may not be the head's.
    key_in_tail: bool,
}

/// Reads one line, keeping at most `keep` bytes of it and watching the rest for `run`/`seq`
/// key tokens.
fn read_line_head<R: BufRead>(
    r: &mut R,
    out: &mut Vec<u8>,
    keep: usize,
) -> std::io::Result<LineHead> {
    let finders = &*super::read::KEY_FINDERS;
    let has_token = |hay: &[u8]| finders.run.find(hay).is_some() || finders.seq.find(hay).is_some();
    let mut head = LineHead {
        consumed: 0,
        truncated: false,
        key_in_tail: false,
    };
    // The last bytes before the part being scanned, so a token cut across reads (or across
    // the head's end) is still seen.
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            return Ok(head);
        }
        let (take, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let content = if done {
            &chunk[..take - 1]
        } else {
            &chunk[..take]
        };
        let room = keep.saturating_sub(out.len());
        let kept = content.len().min(room);
        out.extend_from_slice(&content[..kept]);
        let tail = &content[kept..];
        if !tail.is_empty() {
            if !head.truncated {
                head.truncated = true;
                carry.extend_from_slice(&out[out.len().saturating_sub(4)..]);
            }
            if !head.key_in_tail {
                let mut seam = std::mem::take(&mut carry);
                seam.extend_from_slice(&tail[..tail.len().min(4)]);
                head.key_in_tail = has_token(&seam) || has_token(tail);
                // The next seam starts with the last 4 bytes scanned so far.
                seam.extend_from_slice(&tail[tail.len().saturating_sub(4)..]);
                carry = seam[seam.len().saturating_sub(4)..].to_vec();
            }
        }
        r.consume(take);
        head.consumed += take;
        if done {
            return Ok(head);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lane(dir: &tempfile::TempDir, name: &str, d: &str, seqs: &[(f64, f64)]) -> LaneFile {
        let path = dir.path().join(name);
        let mut f = File::create(&path).unwrap();
        for (run, seq) in seqs {
            let e = Entry {
                ts: 0.0,
                run: *run,
                seq: *seq,
                dir: d.into(),
                line: format!("{run}/{seq}"),
                extra: Default::default(),
            };
            writeln!(f, "{}", e.to_line()).unwrap();
        }
        LaneFile {
            dir: d.into(),
            path,
        }
    }

    #[test]
    fn merges_by_run_then_seq_with_lane_order_ties() {
        let t = tempfile::tempdir().unwrap();
        let a = lane(
            &t,
            "a",
            "runtime→bridge",
            &[(1.0, 1.0), (1.0, 5.0), (2.0, 1.0)],
        );
        let b = lane(
            &t,
            "b",
            "bridge→runtime",
            &[(1.0, 2.0), (1.0, 5.0), (1.0, 5.5), (2.0, 0.5)],
        );
        let lines: Vec<String> = MergedEntries::open(&[a, b]).map(|e| e.line).collect();
        assert_eq!(lines, ["1/1", "1/2", "1/5", "1/5", "1/5.5", "2/0.5", "2/1"]);
    }

    /// A long line whose `run`/`seq` the pre-scan's head cannot show must not be streamed on
    /// trust: the lane is out of order, and only the full parse can tell.
    #[test]
    fn keys_past_the_head_of_a_long_line_are_not_trusted() {
        let t = tempfile::tempdir().unwrap();
        let long = "x".repeat(3 * HEAD);
        let cases: [(&str, String); 3] = [
            // `run`/`seq` after the long `line`.
            (
                "after",
                format!("{{\"ts\":0,\"dir\":\"x\",\"line\":\"{long}\",\"run\":1,\"seq\":3}}"),
            ),
            // A repeated `seq` past the head: the full parse takes the last one (3).
            (
                "repeated",
                format!(
                    "{{\"ts\":0,\"run\":1,\"seq\":0,\"dir\":\"x\",\"line\":\"{long}\",\"seq\":3}}"
                ),
            ),
            // The repeated key cut across the head's end (`"s` kept, `eq"` not).
            (
                "seam",
                format!(
                    "{{\"ts\":0,\"run\":1,\"seq\":0,\"dir\":\"x\",\"line\":\"{}\",\"seq\":3}}",
                    "y".repeat(HEAD - 2 - 2 - 42)
                ),
            ),
        ];
        for (name, first) in cases {
            let path = t.path().join(name);
            let mut f = File::create(&path).unwrap();
            writeln!(f, "{first}").unwrap();
            writeln!(
                f,
                "{{\"ts\":0,\"run\":1,\"seq\":1,\"dir\":\"x\",\"line\":\"1/1\"}}"
            )
            .unwrap();
            drop(f);
            let a = LaneFile {
                dir: "x".into(),
                path,
            };
            let b = lane(&t, &format!("{name}-b"), "y", &[(1.0, 2.0)]);
            let mut m = MergedEntries::open(&[a, b]);
            let seqs: Vec<f64> = m.by_ref().map(|e| e.seq).collect();
            assert_eq!(seqs, [1.0, 2.0, 3.0], "{name}");
            assert_eq!(
                m.report().warnings.len(),
                1,
                "{name}: {:?}",
                m.report().warnings
            );
            assert!(
                m.report().warnings[0].contains(":1:"),
                "{name}: {:?}",
                m.report().warnings
            );
        }
    }

    /// A long line whose key is in its head (the recorder's layout) keeps the streaming path.
    #[test]
    fn a_long_line_with_its_key_in_the_head_streams() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("a");
        let mut f = File::create(&path).unwrap();
        let long = "z".repeat(3 * HEAD);
        writeln!(
            f,
            "{{\"ts\":0,\"run\":1,\"seq\":1,\"dir\":\"x\",\"line\":\"{long}\"}}"
        )
        .unwrap();
        writeln!(
            f,
            "{{\"ts\":0,\"run\":1,\"seq\":3,\"dir\":\"x\",\"line\":\"\\\"seq\\\": text\"}}"
        )
        .unwrap();
        drop(f);
        let a = LaneFile {
            dir: "x".into(),
            path,
        };
        let b = lane(&t, "b", "y", &[(1.0, 2.0)]);
        let mut m = MergedEntries::open(&[a, b]);
        assert!(matches!(m.mode, Mode::Stream { .. }));
        let seqs: Vec<f64> = m.by_ref().map(|e| e.seq).collect();
        assert_eq!(seqs, [1.0, 2.0, 3.0]);
        assert!(m.report().warnings.is_empty(), "{:?}", m.report().warnings);
    }

    /// Oracle for the first read without a size: every length around `FIRST_READ` and
    /// `WHOLE_LANE_LIMIT` gives the file's bytes, from memory up to the limit and streamed
    /// past it.
    #[test]
    fn a_lane_opens_to_its_bytes_at_every_size_around_the_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lane.ndjson");
        let limit = WHOLE_LANE_LIMIT as usize;
        for len in [
            0,
            1,
            FIRST_READ - 1,
            FIRST_READ,
            FIRST_READ + 1,
            2 * FIRST_READ,
            limit - 1,
            limit,
            limit + 1,
            limit + FIRST_READ + 3,
        ] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            std::fs::write(&path, &bytes).unwrap();
            let mut source = LaneSource::open(&path).unwrap();
            let in_memory = matches!(source, LaneSource::Memory(_));
            assert_eq!(in_memory, len <= limit, "{len} bytes");
            let mut read = Vec::new();
            source.read_to_end(&mut read).unwrap();
            assert!(read == bytes, "{len} bytes read back differently");
            source.rewind().unwrap();
            read.clear();
            source.read_to_end(&mut read).unwrap();
            assert!(
                read == bytes,
                "{len} bytes read back differently after a rewind"
            );
        }
        // A directory where a lane should be fails as reading it does.
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        assert!(LaneSource::open(&sub).is_err());
    }

    #[test]
    fn unsorted_lane_falls_back_to_stable_sort() {
        let t = tempfile::tempdir().unwrap();
        let a = lane(&t, "a", "x", &[(1.0, 3.0), (1.0, 1.0)]);
        let b = lane(&t, "b", "y", &[(1.0, 2.0)]);
        let mut m = MergedEntries::open(&[a, b]);
        let lines: Vec<String> = m.by_ref().map(|e| e.line).collect();
        assert_eq!(lines, ["1/1", "1/2", "1/3"]);
        assert_eq!(m.report().warnings.len(), 1);
    }
}
