//! Append-only lane writer: the recording side of the lane format.
//!
//! A writer owns one append-mode file per `(scope, direction)`, opened lazily on its first line
//! and kept open, and shares the process-wide `seq` counter with its siblings
//! ([`LaneWriter::sibling`]): a recorder gives each direction's thread its own writer, so the
//! two directions never wait for each other's disk writes, while every line still gets its
//! place in one total order (a seq is taken before the line is forwarded, so effects always
//! sort after their causes). Every call writes its
//! entries straight to the file descriptors (no user-space buffer survives a call), so a crash of
//! either peer or of bridgewire itself loses at most the lines still being handled. Recorders
//! record a line *before* forwarding it, so whatever the other side has seen is on disk.

use super::scope_dir_name;
use crate::jsjson::{format_f64, write_str_bytes};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// One line to record.
#[derive(Debug, Clone, Copy)]
pub struct Line<'a> {
    /// Thread (or other scope) id; `None` → `_process`.
    pub scope: Option<&'a str>,
    pub dir: &'a str,
    pub bytes: &'a [u8],
    /// Which of the scope's connections carried the line, when a recorder files several at
    /// once into one lane (two browser tabs of one user in one cell): written as `"conn"` after
    /// `line`, so a replay can play each connection on its own socket. `None`: not written.
    pub conn: Option<u64>,
}

/// Up to this many lanes in a batch, a line's group is found by comparing (scope, dir) with
/// each group's; past it, by the batch's hash index.
const FEW_GROUPS: usize = 32;

/// Lane files a writer keeps open at once.
pub const MAX_OPEN_FILES: usize = 256;

/// How many created scope folders a writer remembers (a `String` each) before forgetting them.
const MAX_KNOWN_FOLDERS: usize = 4096;

pub struct LaneWriter {
    root: PathBuf,
    run: i64,
    seq: std::sync::Arc<std::sync::atomic::AtomicU64>,
    last: u64,
    /// Open lane files by `folder/dir` (a folder name has no `/`), looked up through
    /// [`LaneWriter::key_buf`] so a batch allocates nothing to find its files.
    files: crate::util::FastMap<String, File>,
    key_buf: String,
    /// Scope → folder name ([`scope_dir_name`]) for the scopes seen last, so a batch does not
    /// rebuild the name per lane; `names_none` is `_process`'s slot. Cleared past
    /// [`MAX_KNOWN_FOLDERS`].
    names: crate::util::FastMap<Box<str>, usize>,
    name_index: crate::util::FastMap<String, usize>,
    name_text: Vec<String>,
    names_none: Option<usize>,
    /// A batch's groups (one per lane file touched), kept with their buffers between batches.
    groups: Vec<Group>,
    /// `{"ts":…,"run":…,"seq":` for the millisecond `head_ms`: rebuilt when the clock moves,
    /// not per batch (formatting the two numbers was a fifth of a one-line batch's work).
    head: Vec<u8>,
    head_ms: Option<i64>,
    /// `,"dir":…,"line":` of `dir_part_of` (a writer records one direction, usually).
    dir_part: Vec<u8>,
    dir_part_of: String,
    /// Scope folders this writer has created (or found): a file reopened after the
    /// [`MAX_OPEN_FILES`] cap closed it skips the `mkdir` walk (a missing folder is still
    /// recreated: the open's `NotFound` falls back to it). Cleared past [`MAX_KNOWN_FOLDERS`].
    made: std::collections::HashSet<String>,
    failures: u64,
    redactor: Option<Redactor>,
    /// The known-secret set behind `redactor` when it is one ([`LaneWriter::with_secrets`]):
    /// lets a caller that scanned the keys itself skip the redactor's own key walk.
    secrets: Option<std::sync::Arc<crate::redact::Secrets>>,
    /// Permission bits of lane files (folders get the matching search bits).
    file_mode: u32,
    /// Lane files kept open at once ([`MAX_OPEN_FILES`] unless raised).
    max_open: usize,
}

/// One lane file's share of a batch: the batch's first line of that lane (its scope and
/// direction), the lane's folder name (an index into the writer's names) and its entries.
struct Group {
    first: usize,
    name: usize,
    /// The first line's [`LaneFp`].
    fp: LaneFp,
    buf: Vec<u8>,
}

/// A line's (scope, direction) reduced to words, so a batch finds a line's group without a
/// `memcmp` call per group tried (with 16 thread lanes and `_process` in a batch, the bench's
/// lines tried ~6 groups each, and the calls were a quarter of the batch loop). Each text is
/// its length (`u64::MAX`: no scope) and two words that hold all of its bytes when it has at
/// most 16: equal fingerprints of such texts are equal texts; longer texts are compared in
/// full after their fingerprints agree.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
struct LaneFp {
    scope: [u64; 3],
    dir: [u64; 3],
}

impl LaneFp {
    #[inline]
    fn of(line: &Line<'_>) -> LaneFp {
        LaneFp {
            scope: match line.scope {
                Some(s) => text_fp(s.as_bytes()),
                None => [u64::MAX, 0, 0],
            },
            dir: text_fp(line.dir.as_bytes()),
        }
    }

    /// Whether equal fingerprints alone prove the texts equal.
    #[inline]
    fn exact(&self) -> bool {
        (self.scope[0] <= 16 || self.scope[0] == u64::MAX) && self.dir[0] <= 16
    }
}

/// [`LaneFp`]'s words for one text: its length, then its first and last 8 bytes (4 and 4 below
/// 8 bytes, overlapping; byte by byte below 4).
#[inline]
fn text_fp(b: &[u8]) -> [u64; 3] {
    let n = b.len();
    let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let half = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes")) as u64;
    if n >= 8 {
        [n as u64, word(0), word(n - 8)]
    } else if n >= 4 {
        [n as u64, half(0) | half(n - 4) << 32, 0]
    } else {
        let mut w = 0u64;
        for (i, &c) in b.iter().enumerate() {
            w |= (c as u64) << (8 * i);
        }
        [n as u64, w, 0]
    }
}

/// Lane files are private by default (`0600` in `0700` folders): recordings hold what crossed
/// the wire.
pub const DEFAULT_FILE_MODE: u32 = 0o600;

/// The folder mode that goes with a file mode: search permission wherever reading is allowed.
pub fn dir_mode(file_mode: u32) -> u32 {
    file_mode | ((file_mode & 0o444) >> 2)
}

/// `create_dir_all` with `mode` for every folder it creates.
pub fn create_dirs(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
}

/// Writes a whole file created with `mode` (replacing any file there, whose mode does not
/// survive): a `.<name>.tmp` sibling first, then renamed over `path`, so a reader never sees
/// half a file. The folder is created with [`dir_mode`] of `mode` when missing.
pub fn write_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mode = mode & 0o777;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_dirs(dir, dir_mode(mode))?;
    }
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)?;
    // The umask may have taken bits `mode` asked for.
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// Creates (or truncates) a file whose permission bits are its folder's read/write bits: a
/// dump folder created `0700` (the default `--mode`) holds `0600` files, one created `0755`
/// holds `0644` files.
pub fn create_like_folder(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let mode = match dir {
        Some(d) => std::fs::metadata(d)?.permissions().mode() & 0o666,
        None => DEFAULT_FILE_MODE,
    };
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    if f.metadata()?.is_file() {
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    Ok(f)
}

/// Rewrites a line's bytes before they are written (`None` = keep the original bytes); it sees
/// every line, UTF-8 or not, so a line recorded as `lineBase64` is redacted too. E.g. a
/// per-recording [`crate::redact::Secrets`] ([`LaneWriter::with_secrets`]).
pub type Redactor = std::sync::Arc<dyn Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync>;

impl LaneWriter {
    /// A writer whose `run` is now (ms since the epoch), like bb's recorder.
    pub fn create(root: &Path) -> io::Result<LaneWriter> {
        Self::with_run(root, crate::util::now_ms())
    }

    pub fn with_run(root: &Path, run: i64) -> io::Result<LaneWriter> {
        create_dirs(root, dir_mode(DEFAULT_FILE_MODE))?;
        Ok(Self::blank(root.to_path_buf(), run, Default::default()))
    }

    /// A writer with no files open, nothing cached and the default settings.
    fn blank(
        root: PathBuf,
        run: i64,
        seq: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) -> LaneWriter {
        LaneWriter {
            root,
            run,
            seq,
            last: 0,
            files: Default::default(),
            key_buf: String::new(),
            names: Default::default(),
            name_index: Default::default(),
            name_text: Vec::new(),
            names_none: None,
            groups: Vec::new(),
            head: Vec::new(),
            head_ms: None,
            dir_part: Vec::new(),
            dir_part_of: String::new(),
            made: Default::default(),
            failures: 0,
            redactor: None,
            secrets: None,
            file_mode: DEFAULT_FILE_MODE,
            max_open: MAX_OPEN_FILES,
        }
    }

    /// Creates lane files with `mode` (e.g. `0o644`) and folders with [`dir_mode`] of it; the
    /// root gets that folder mode too.
    pub fn with_mode(mut self, mode: u32) -> io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        self.file_mode = mode & 0o777;
        std::fs::set_permissions(
            &self.root,
            std::fs::Permissions::from_mode(dir_mode(self.file_mode)),
        )?;
        Ok(self)
    }

    /// Keeps up to `n` lane files open (at least [`MAX_OPEN_FILES`]): a recorder writing many
    /// lanes at once (the Bridle proxy: four per browser) would otherwise close and reopen
    /// them all the time. The caller keeps `n` within its descriptor limit.
    pub fn with_max_open_files(mut self, n: usize) -> Self {
        self.max_open = n.max(MAX_OPEN_FILES);
        self
    }

    /// Passes every line through `redactor` before it is written.
    pub fn with_redactor(mut self, redactor: Redactor) -> Self {
        self.redactor = Some(redactor);
        self.secrets = None;
        self
    }

    /// Redacts every line with `secrets` (bb §1.9 rules plus every value it learned).
    pub fn with_secrets(self, secrets: std::sync::Arc<crate::redact::Secrets>) -> Self {
        let set = secrets.clone();
        let mut w =
            self.with_redactor(std::sync::Arc::new(move |b: &[u8]| secrets.redact_bytes(b)));
        w.secrets = Some(set);
        w
    }

    /// A writer for the same recording (root, run, seq counter, redaction) with its own files.
    pub fn sibling(&self) -> LaneWriter {
        LaneWriter {
            redactor: self.redactor.clone(),
            secrets: self.secrets.clone(),
            file_mode: self.file_mode,
            max_open: self.max_open,
            ..Self::blank(self.root.clone(), self.run, self.seq.clone())
        }
    }

    pub fn run(&self) -> i64 {
        self.run
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How many appends failed (each failure is also reported once on stderr).
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// The last seq this writer handed out.
    pub fn last_seq(&self) -> u64 {
        self.last
    }

    /// Records one line and returns its seq.
    pub fn append(&mut self, line: Line<'_>) -> u64 {
        self.append_batch(std::slice::from_ref(&line));
        self.last
    }

    /// Records lines in order, one `write` per file touched. Seqs are consecutive.
    pub fn append_batch(&mut self, lines: &[Line<'_>]) {
        self.append_lines(lines, None);
    }

    /// [`LaneWriter::append_batch`] for a caller that already walked each line's keys with
    /// [`crate::redact::key_may_matter`] (`key_hits[i]`: what
    /// [`crate::redact::may_need_redaction`] would answer for line `i`).
    pub fn append_batch_scanned(&mut self, lines: &[Line<'_>], key_hits: &[bool]) {
        assert_eq!(lines.len(), key_hits.len(), "one key answer per line");
        self.append_lines(lines, Some(key_hits));
    }

    fn append_lines(&mut self, lines: &[Line<'_>], key_hits: Option<&[bool]>) {
        if lines.is_empty() {
            return;
        }
        // Between batches only: a batch's groups hold indices into the names.
        if self.name_text.len() >= MAX_KNOWN_FOLDERS {
            self.names.clear();
            self.name_index.clear();
            self.name_text.clear();
            self.names_none = None;
        }
        // The part of every entry before its seq: `{"ts":…,"run":…,"seq":`.
        let ms = crate::util::now_ms();
        if self.head_ms != Some(ms) {
            self.head.clear();
            self.head.extend_from_slice(b"{\"ts\":");
            self.head
                .extend_from_slice(format_f64(ms as f64).as_bytes());
            self.head.extend_from_slice(b",\"run\":");
            self.head
                .extend_from_slice(format_f64(self.run as f64).as_bytes());
            self.head.extend_from_slice(b",\"seq\":");
            self.head_ms = Some(ms);
        }
        // Lines grouped by lane file, in order inside each group; the previous line's group is
        // tried first (runs of one lane are common). Two scopes can share a folder name (`a/b`,
        // `a:b`): groups are per folder, so a lane file still gets its lines in seq order.
        let mut ngroups = 0usize;
        let mut last = usize::MAX;
        // Past FEW_GROUPS lanes (the Bridle proxy's hundreds), (folder, dir) → group, so a line
        // is not compared with every group.
        let mut index: crate::util::FastMap<(usize, &str), usize> = Default::default();
        // Seqs are taken for the whole batch at once; counted even if a write then fails, as
        // bb does.
        let first = self
            .seq
            .fetch_add(lines.len() as u64, std::sync::atomic::Ordering::SeqCst);
        for (i, line) in lines.iter().enumerate() {
            self.last = first + i as u64 + 1;
            let fp = LaneFp::of(line);
            let same = |g: &Group| {
                g.fp == fp
                    && (fp.exact() || {
                        let l = &lines[g.first];
                        l.scope == line.scope && l.dir == line.dir
                    })
            };
            let idx = if last < ngroups && same(&self.groups[last]) {
                last
            } else if let Some(j) = (ngroups <= FEW_GROUPS)
                .then(|| self.groups[..ngroups].iter().position(same))
                .flatten()
            {
                // A few lanes (a recorder's scopes): comparing is cheaper than hashing.
                j
            } else {
                let name = self.name_of(line.scope);
                let found = if ngroups <= FEW_GROUPS {
                    self.groups[..ngroups]
                        .iter()
                        .position(|g| g.name == name && lines[g.first].dir == line.dir)
                } else {
                    index.get(&(name, line.dir)).copied()
                };
                match found {
                    Some(j) => j,
                    None => {
                        if ngroups == self.groups.len() {
                            self.groups.push(Group {
                                first: i,
                                name,
                                fp,
                                buf: Vec::new(),
                            });
                        } else {
                            let g = &mut self.groups[ngroups];
                            g.first = i;
                            g.name = name;
                            g.fp = fp;
                            g.buf.clear();
                        }
                        ngroups += 1;
                        if ngroups > FEW_GROUPS {
                            if index.is_empty() {
                                for (k, g) in self.groups[..ngroups].iter().enumerate() {
                                    index.insert((g.name, lines[g.first].dir), k);
                                }
                            } else {
                                index.insert((name, line.dir), ngroups - 1);
                            }
                        }
                        ngroups - 1
                    }
                }
            };
            last = idx;
            // Redaction sees the raw bytes (a non-UTF-8 line is redacted before `lineBase64`).
            let redacted = match (&self.secrets, key_hits) {
                (Some(set), Some(hits)) => set.redact_bytes_scanned(line.bytes, hits[i]),
                _ => self.redactor.as_ref().and_then(|r| r(line.bytes)),
            };
            let bytes = redacted.as_deref().unwrap_or(line.bytes);
            if self.dir_part_of != line.dir {
                self.dir_part.clear();
                self.dir_part.extend_from_slice(b",\"dir\":");
                write_str_bytes(&mut self.dir_part, line.dir);
                self.dir_part.extend_from_slice(b",\"line\":");
                self.dir_part_of.clear();
                self.dir_part_of.push_str(line.dir);
            }
            let out = &mut self.groups[idx].buf;
            out.extend_from_slice(&self.head);
            push_u64(out, self.last);
            out.extend_from_slice(&self.dir_part);
            let at = out.len();
            // Written as text first: one pass escapes and tells whether the line is ASCII;
            // only a non-ASCII line is checked for UTF-8 (and redone if it is not).
            if !push_json_string(out, bytes) && std::str::from_utf8(bytes).is_err() {
                out.truncate(at);
                // bb's decoder would substitute U+FFFD; keep the exact bytes beside it.
                write_str_bytes(out, &String::from_utf8_lossy(bytes));
                out.extend_from_slice(b",\"lineBase64\":\"");
                out.extend_from_slice(crate::util::base64_encode(bytes).as_bytes());
                out.push(b'"');
            }
            if let Some(conn) = line.conn {
                out.extend_from_slice(b",\"conn\":");
                push_u64(out, conn);
            }
            out.extend_from_slice(b"}\n");
        }
        for k in 0..ngroups {
            let (name, dir) = (self.groups[k].name, lines[self.groups[k].first].dir);
            let buf = std::mem::take(&mut self.groups[k].buf);
            if let Err(e) = self.write_file(name, dir, &buf) {
                self.failures += 1;
                eprintln!(
                    "bridgewire recorder: failed to append to {}: {e}",
                    self.root
                        .join(&self.name_text[name])
                        .join(format!("{dir}.ndjson"))
                        .display()
                );
            }
            self.groups[k].buf = buf;
        }
    }

    /// The index of `scope`'s folder name in `name_text`; scopes with the same folder name
    /// share one index.
    fn name_of(&mut self, scope: Option<&str>) -> usize {
        let known = match scope {
            None => self.names_none,
            Some(s) => self.names.get(s).copied(),
        };
        if let Some(i) = known {
            return i;
        }
        let text = scope_dir_name(scope);
        let i = match self.name_index.get(text.as_str()) {
            Some(&i) => i,
            None => {
                self.name_text.push(text.clone());
                self.name_index.insert(text, self.name_text.len() - 1);
                self.name_text.len() - 1
            }
        };
        match scope {
            None => self.names_none = Some(i),
            Some(s) => {
                self.names.insert(Box::from(s), i);
            }
        }
        i
    }

    fn write_file(&mut self, name: usize, dir: &str, bytes: &[u8]) -> io::Result<()> {
        self.key_buf.clear();
        self.key_buf.push_str(&self.name_text[name]);
        self.key_buf.push('/');
        self.key_buf.push_str(dir);
        if let Some(f) = self.files.get_mut(self.key_buf.as_str()) {
            return f.write_all(bytes);
        }
        // A long-running recorder (one scope per chat) must not run out of descriptors:
        // past the cap, close them all; files are reopened in append mode on demand.
        if self.files.len() >= self.max_open {
            self.files.clear();
        }
        let scope = self.name_text[name].as_str();
        let folder = self.root.join(scope);
        let mode = self.file_mode;
        if !self.made.contains(scope) {
            create_dirs(&folder, dir_mode(mode))?;
            if self.made.len() >= MAX_KNOWN_FOLDERS {
                self.made.clear();
            }
            self.made.insert(scope.to_string());
        }
        use std::os::unix::fs::OpenOptionsExt;
        let path = folder.join(format!("{dir}.ndjson"));
        let open = || {
            OpenOptions::new()
                .mode(mode)
                .create(true)
                .append(true)
                .open(&path)
        };
        let mut file = match open() {
            // The folder went away since this writer made it: make it again.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                create_dirs(&folder, dir_mode(mode))?;
                open()?
            }
            r => r?,
        };
        let r = file.write_all(bytes);
        self.files.insert(self.key_buf.clone(), file);
        r
    }
}

/// Appends one encoded entry plus `\n` to `out`.
pub fn encode_entry(out: &mut Vec<u8>, ts: &str, run: &str, seq: u64, dir: &str, bytes: &[u8]) {
    encode_entry_text(
        out,
        ts,
        run,
        seq,
        dir,
        std::str::from_utf8(bytes).map_err(|_| bytes),
    );
}

/// As [`encode_entry`], with the line already checked: `Ok` text or `Err` non-UTF-8 bytes.
fn encode_entry_text(
    out: &mut Vec<u8>,
    ts: &str,
    run: &str,
    seq: u64,
    dir: &str,
    text: Result<&str, &[u8]>,
) {
    out.extend_from_slice(b"{\"ts\":");
    out.extend_from_slice(ts.as_bytes());
    out.extend_from_slice(b",\"run\":");
    out.extend_from_slice(run.as_bytes());
    out.extend_from_slice(b",\"seq\":");
    push_u64(out, seq);
    out.extend_from_slice(b",\"dir\":");
    write_str_bytes(out, dir);
    out.extend_from_slice(b",\"line\":");
    match text {
        Ok(text) => {
            push_json_string(out, text.as_bytes());
        }
        Err(bytes) => {
            // bb's decoder would substitute U+FFFD; keep the exact bytes beside it.
            write_str_bytes(out, &String::from_utf8_lossy(bytes));
            out.extend_from_slice(b",\"lineBase64\":\"");
            out.extend_from_slice(crate::util::base64_encode(bytes).as_bytes());
            out.push(b'"');
        }
    }
    out.extend_from_slice(b"}\n");
}

/// Appends `bytes` (UTF-8) as a JSON string literal, escaped as `JSON.stringify` escapes it.
/// Returns whether every byte was ASCII (the caller may skip its own UTF-8 check then).
///
/// The recorder's hot loop: every recorded byte passes here once. Thirty-two bytes at a time
/// where the CPU has AVX2 (checked once at run time), else sixteen (SSE2, which every x86-64
/// has); runs with nothing to escape are copied whole.
pub fn push_json_string(out: &mut Vec<u8>, bytes: &[u8]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            unsafe { push_json_string_avx2(out, bytes) }
        } else {
            push_json_string_sse2(out, bytes)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        out.reserve(bytes.len() + bytes.len() / 8 + 2);
        out.push(b'"');
        let mut start = 0;
        let mut high = 0u8;
        loop {
            let (i, h) = next_escape(bytes, start);
            high |= h;
            out.extend_from_slice(&bytes[start..i]);
            if i == bytes.len() {
                break;
            }
            crate::jsjson::push_escape(out, bytes[i]);
            start = i + 1;
        }
        out.push(b'"');
        high & 0x80 == 0
    }
}

/// [`push_json_string`] with SSE2 (16-byte blocks; the AVX2 one is [`push_json_string_avx2`],
/// which pads the tail instead): every block is stored whole, then the output moves past the
/// bytes before the first one to escape (if any); `"` and `\\` (the common escapes in a JSON
/// line) cost one stored backslash, no call.
///
/// Room kept in `out`: the quotes, every remaining byte doubled (`"` → `\\"`), a block store
/// past the end. A control character (6 bytes) re-checks the room.
#[cfg(target_arch = "x86_64")]
fn push_json_string_sse2(out: &mut Vec<u8>, bytes: &[u8]) -> bool {
    // SAFETY: SSE2 is part of x86-64. Loads read whole blocks inside `bytes` (src + 16 <= n).
    // Writes go to `dst`, which stays below `out.capacity()` by the invariant
    // `capacity - dst >= room(n - src)`: a block step writes at most 16 and advances dst by at
    // most the src it consumes; an escape of `"`/`\\` writes 2 for 1 consumed; any other escape
    // re-reserves first. `set_len` covers only initialized bytes.
    unsafe {
        use std::arch::x86_64::*;
        let room = |rest: usize| rest * 2 + 34;
        out.reserve(room(bytes.len()));
        let n = bytes.len();
        let mut src = 0usize;
        let mut dst = out.len();
        let base = |out: &mut Vec<u8>| out.as_mut_ptr();
        *base(out).add(dst) = b'"';
        dst += 1;
        let quote = _mm_set1_epi8(b'"' as i8);
        let bslash = _mm_set1_epi8(b'\\' as i8);
        let ctrl_max = _mm_set1_epi8(0x1f);
        let mut seen = _mm_setzero_si128();
        let mut tail_high = 0u8;
        loop {
            let m = if src + 16 <= n {
                let v = _mm_loadu_si128(bytes.as_ptr().add(src).cast());
                seen = _mm_or_si128(seen, v);
                let ctrl = _mm_cmpeq_epi8(_mm_min_epu8(v, ctrl_max), v);
                let hit = _mm_or_si128(
                    _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                    ctrl,
                );
                _mm_storeu_si128(base(out).add(dst).cast(), v);
                let m = _mm_movemask_epi8(hit) as u32;
                if m == 0 {
                    src += 16;
                    dst += 16;
                    continue;
                }
                m.trailing_zeros() as usize
            } else {
                // The tail, a byte at a time.
                let mut k = 0;
                while src + k < n {
                    let c = bytes[src + k];
                    if c < 0x20 || c == b'"' || c == b'\\' {
                        break;
                    }
                    tail_high |= c;
                    *base(out).add(dst + k) = c;
                    k += 1;
                }
                if src + k == n {
                    dst += k;
                    break;
                }
                k
            };
            // Bytes before the escape are already stored.
            src += m;
            dst += m;
            let c = bytes[src];
            src += 1;
            if c == b'"' || c == b'\\' {
                *base(out).add(dst) = b'\\';
                *base(out).add(dst + 1) = c;
                dst += 2;
            } else {
                out.set_len(dst);
                crate::jsjson::push_escape(out, c);
                out.reserve(room(n - src));
                dst = out.len();
            }
        }
        *base(out).add(dst) = b'"';
        out.set_len(dst + 1);
        _mm_movemask_epi8(seen) == 0 && tail_high & 0x80 == 0
    }
}

/// [`push_json_string`] with AVX2, 32-byte blocks to the end of the string.
///
/// Every block is stored whole, then the output moves past it; a `"` or `\\` (a JSON line
/// has one every few bytes) gets its backslash by storing the block again one byte further
/// from that byte on, so a block with several costs no restart. While 64 bytes or more remain
/// the blocks are read from `bytes` with no mask (the bench's lines, ~440 bytes with ~27
/// quotes, spent a third of this function's instructions on the per-block tail masks and
/// another third on a 14-instruction step per quote; now ~9). The last bytes (fewer than 64)
/// are copied into a zeroed stack buffer first, so the same block steps run to the end
/// (bytes past the string are masked out) instead of a byte-at-a-time tail: short strings
/// and line ends, where a JSON line's quotes cluster, take the fast path too.
///
/// Room kept in `out` from `dst` on: the closing quote, every remaining byte doubled, 64 bytes
/// of stores past the end (each store writes 32). A control character (up to 6 bytes) is
/// written by [`crate::jsjson::push_escape`] and the room is reserved again after it.
///
/// # Safety
/// The CPU must have AVX2. Loads read 32 bytes at `src + j` for a position `j` < 32 of the
/// block: inside `bytes` while 64 or more bytes remain, else inside the 96-byte buffer (the
/// string's last bytes start at its beginning, so `j` + 32 stays below 96).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn push_json_string_avx2(out: &mut Vec<u8>, bytes: &[u8]) -> bool {
    use std::arch::x86_64::*;
    let room = |rest: usize| rest * 2 + 1 + 64;
    let mut rem = bytes.len();
    out.reserve(1 + room(rem));
    let mut dst = out.len();
    let mut base = out.as_mut_ptr();
    // SAFETY (this block): stores stay within the room reserved above (see the docs): a block
    // step consumes `stop` bytes and writes `stop` plus one per backslash added (at most
    // 2 × `stop`), and its last store ends at most 33 bytes past the block's output, within
    // the 64 spare; loads as the docs say; `set_len` covers only bytes written.
    unsafe {
        *base.add(dst) = b'"';
        dst += 1;
        let quote = _mm256_set1_epi8(b'"' as i8);
        let bslash = _mm256_set1_epi8(b'\\' as i8);
        let ctrl_max = _mm256_set1_epi8(0x1f);
        // Every byte of the string is OR-ed in (pad bytes are zero): its top bit says ASCII.
        let mut seen = _mm256_setzero_si256();
        let mut src = bytes.as_ptr();
        // One block of `len` bytes (`valid`: their bits) at `src`: stored, then its quotes and
        // backslashes, then a control character if it has one.
        macro_rules! block {
            ($len:expr, $valid:expr) => {{
                let (len, valid): (usize, u32) = ($len, $valid);
                let v = _mm256_loadu_si256(src.cast());
                seen = _mm256_or_si256(seen, v);
                let qb = _mm256_or_si256(_mm256_cmpeq_epi8(v, quote), _mm256_cmpeq_epi8(v, bslash));
                let ctrl = _mm256_cmpeq_epi8(_mm256_min_epu8(v, ctrl_max), v);
                _mm256_storeu_si256(base.add(dst).cast(), v);
                let m = _mm256_movemask_epi8(_mm256_or_si256(qb, ctrl)) as u32 & valid;
                if m == 0 {
                    src = src.add(len);
                    dst += len;
                    rem -= len;
                } else {
                    let c = _mm256_movemask_epi8(ctrl) as u32 & valid;
                    // The block's bytes up to `stop` (its length, or the first control
                    // character); below it `m` holds only quotes and backslashes.
                    let (stop, mut q) = if c == 0 {
                        (len, m)
                    } else {
                        let stop = c.trailing_zeros() as usize;
                        (stop, m & ((1u32 << stop) - 1))
                    };
                    let mut added = 0usize;
                    while q != 0 {
                        let j = q.trailing_zeros() as usize;
                        // Byte `j` of the block sits at `dst + j + added` now.
                        let at = base.add(dst + j + added);
                        *at = b'\\';
                        _mm256_storeu_si256(
                            at.add(1).cast(),
                            _mm256_loadu_si256(src.add(j).cast()),
                        );
                        added += 1;
                        q &= q - 1;
                    }
                    dst += stop + added;
                    src = src.add(stop);
                    rem -= stop;
                    if c != 0 {
                        out.set_len(dst);
                        crate::jsjson::push_escape(out, *src);
                        src = src.add(1);
                        rem -= 1;
                        out.reserve(room(rem));
                        base = out.as_mut_ptr();
                        dst = out.len();
                    }
                }
            }};
        }
        while rem >= 64 {
            block!(32, u32::MAX);
        }
        if rem > 0 {
            let mut pad = [0u8; 96];
            std::ptr::copy_nonoverlapping(src, pad.as_mut_ptr(), rem);
            src = pad.as_ptr();
            while rem > 0 {
                if rem >= 32 {
                    block!(32, u32::MAX);
                } else {
                    block!(rem, (1u32 << rem) - 1);
                }
            }
        }
        *base.add(dst) = b'"';
        out.set_len(dst + 1);
        _mm256_movemask_epi8(seen) == 0
    }
}

/// The first position at or after `from` of a byte JSON must escape (`"`, `\\`, a control
/// character), or `bytes.len()`; and `0x80` if a non-ASCII byte of `bytes` was seen on the way
/// (bytes past the stop may count too), else 0.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn next_escape(bytes: &[u8], mut from: usize) -> (usize, u8) {
    let mut high = 0u8;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of x86-64; every load reads 16 bytes inside `bytes` (checked by the
    // loop condition), unaligned loads are allowed.
    unsafe {
        use std::arch::x86_64::*;
        let quote = _mm_set1_epi8(b'"' as i8);
        let bslash = _mm_set1_epi8(b'\\' as i8);
        let ctrl_max = _mm_set1_epi8(0x1f);
        let mut seen = _mm_setzero_si128();
        while from + 16 <= bytes.len() {
            let v = _mm_loadu_si128(bytes.as_ptr().add(from).cast());
            seen = _mm_or_si128(seen, v);
            // unsigned v <= 0x1f  <=>  min(v, 0x1f) == v
            let ctrl = _mm_cmpeq_epi8(_mm_min_epu8(v, ctrl_max), v);
            let hit = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                ctrl,
            );
            let m = _mm_movemask_epi8(hit) as u32;
            if m != 0 {
                // `seen` may include bytes past the hit: they are bytes of the same string,
                // which is all the caller asks about.
                let h = if _mm_movemask_epi8(seen) != 0 {
                    0x80
                } else {
                    0
                };
                return (from + m.trailing_zeros() as usize, h);
            }
            from += 16;
        }
        if _mm_movemask_epi8(seen) != 0 {
            high = 0x80;
        }
    }
    while from < bytes.len() {
        let c = bytes[from];
        if c < 0x20 || c == b'"' || c == b'\\' {
            return (from, high);
        }
        high |= c;
        from += 1;
    }
    (from, high & 0x80)
}

/// "00" to "99": two digits per division.
const DIGIT_PAIRS: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

/// Appends the decimal digits of `n`, two per division, written into a stack buffer and then
/// copied (every entry's seq passes here; a digit per division and the buffer returned by
/// value were ~90 instructions for a 5-digit seq).
#[inline]
fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    while n >= 100 {
        let r = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[r..r + 2]);
    }
    if n >= 10 {
        let r = n as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[r..r + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    out.extend_from_slice(&buf[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lane::read::LaneReader;

    #[test]
    fn simd_escaping_matches_the_scalar_escaper() {
        // Every escape class at every offset of a 16- and a 32-byte block, and around block ends.
        let specials: &[&str] = &[
            "\"", "\\", "\n", "\r", "\t", "\u{8}", "\u{c}", "\u{1}", "\u{1f}", "é", "漢", "\u{7f}",
            " ",
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for n in 0..4000 {
            let len = n % 200;
            let mut text = String::new();
            while text.len() < len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x.is_multiple_of(5) {
                    text.push_str(specials[(x / 5 % specials.len() as u64) as usize]);
                } else {
                    text.push((b'a' + (x % 26) as u8) as char);
                }
            }
            let mut simd = Vec::new();
            let ascii = push_json_string(&mut simd, text.as_bytes());
            let mut scalar = Vec::new();
            write_str_bytes(&mut scalar, &text);
            assert_eq!(
                String::from_utf8(simd).unwrap(),
                String::from_utf8(scalar).unwrap()
            );
            assert_eq!(ascii, text.is_ascii(), "{text:?}");
            // Both widths, whichever the CPU picks above.
            #[cfg(target_arch = "x86_64")]
            {
                let mut narrow = Vec::new();
                assert_eq!(push_json_string_sse2(&mut narrow, text.as_bytes()), ascii);
                assert_eq!(narrow, scalar_bytes(&text), "sse2: {text:?}");
                if std::arch::is_x86_feature_detected!("avx2") {
                    let mut wide = Vec::new();
                    // SAFETY: the CPU has AVX2.
                    let a = unsafe { push_json_string_avx2(&mut wide, text.as_bytes()) };
                    assert_eq!(a, ascii);
                    assert_eq!(wide, scalar_bytes(&text), "avx2: {text:?}");
                }
            }
            let back: String = serde_json::from_str(&text_json(&text)).unwrap();
            assert_eq!(back, text);
        }
    }

    /// The padded tail of the AVX2 escaper: every length around the block and tail edges, runs
    /// of one escape class up to the end (the last bytes go through the stack buffer).
    #[test]
    fn escaping_runs_to_the_end_of_every_length() {
        for len in 0..=160 {
            for fill in ["\"", "\\", "\u{1}", "\n", "a", "é", "\"a", "a\u{1f}\""] {
                let mut text = String::new();
                while text.len() < len {
                    text.push_str(fill);
                }
                for t in [text.clone(), format!("x{text}"), format!("{text}\"")] {
                    let mut got = Vec::new();
                    let ascii = push_json_string(&mut got, t.as_bytes());
                    assert_eq!(got, scalar_bytes(&t), "{t:?}");
                    assert_eq!(ascii, t.is_ascii(), "{t:?}");
                }
            }
        }
    }

    /// One escape (or a non-ASCII character) at every position of strings around the AVX2
    /// escaper's edges: its unmasked 32-byte blocks while 64 bytes or more remain, the hand-over
    /// to the padded tail, and block steps cut short by a control character.
    #[test]
    fn one_escape_at_every_position_around_the_block_edges() {
        let lens = (0..=130).chain(190..=200).chain(250..=260);
        for len in lens {
            for special in ["\"", "\\", "\u{1}", "\n", "é"] {
                for at in 0..=len {
                    let text = format!("{}{special}{}", "a".repeat(at), "b".repeat(len - at));
                    let mut got = Vec::new();
                    let ascii = push_json_string(&mut got, text.as_bytes());
                    assert_eq!(got, scalar_bytes(&text), "{text:?}");
                    assert_eq!(ascii, text.is_ascii(), "{text:?}");
                }
            }
        }
    }

    fn scalar_bytes(text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        write_str_bytes(&mut out, text);
        out
    }

    fn text_json(text: &str) -> String {
        let mut out = Vec::new();
        push_json_string(&mut out, text.as_bytes());
        String::from_utf8(out).unwrap()
    }

    /// Lines of scopes that share lengths, prefixes and suffixes (the fingerprint's words) and
    /// of several directions, interleaved in one batch, each land in their own lane in order.
    #[test]
    fn lanes_of_look_alike_scopes_get_their_own_lines() {
        let t = tempfile::tempdir().unwrap();
        let mut w = LaneWriter::with_run(t.path(), 1).unwrap();
        let mut scopes: Vec<Option<String>> = vec![None, Some(String::new())];
        for len in 1..=40 {
            for c in [b'a', b'b'] {
                let mut s = vec![b'x'; len];
                s[len / 2] = c;
                scopes.push(Some(String::from_utf8(s).unwrap()));
            }
        }
        let dirs = [
            "runtime→bridge",
            "bridge→runtime",
            "up",
            "a-much-longer-direction-name",
        ];
        let texts: Vec<String> = (0..3 * scopes.len()).map(|i| format!("l{i}")).collect();
        let lines: Vec<Line<'_>> = (0..texts.len())
            .map(|i| Line {
                scope: scopes[(i * 7) % scopes.len()].as_deref(),
                dir: dirs[i % dirs.len()],
                bytes: texts[i].as_bytes(),
                conn: None,
            })
            .collect();
        w.append_batch(&lines);
        assert_eq!(w.failures, 0);
        let mut want: std::collections::BTreeMap<PathBuf, Vec<String>> = Default::default();
        for l in &lines {
            let p = t
                .path()
                .join(scope_dir_name(l.scope))
                .join(format!("{}.ndjson", l.dir));
            want.entry(p)
                .or_default()
                .push(String::from_utf8(l.bytes.to_vec()).unwrap());
        }
        for (p, texts) in want {
            let dir = p.file_stem().unwrap().to_str().unwrap().to_string();
            let got: Vec<String> = LaneReader::open(&p, Some(&dir))
                .unwrap()
                .map(|r| r.unwrap().line)
                .collect();
            assert_eq!(got, texts, "{}", p.display());
        }
    }

    #[test]
    fn digits_are_written_as_display_writes_them() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut ns: Vec<u64> = vec![0, 1, 9, 10, 99, 100, 101, 999, 1000, u64::MAX, u64::MAX - 1];
        ns.extend((0..64).map(|k| 1u64 << k));
        ns.extend((0..20).map(|k| 10u64.pow(k)));
        ns.extend((0..20).map(|k| 10u64.pow(k) - 1));
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ns.push(x >> (x % 64));
        }
        for n in ns {
            let mut out = b"x".to_vec();
            push_u64(&mut out, n);
            assert_eq!(out, format!("x{n}").into_bytes());
        }
    }

    #[test]
    fn reopened_lane_recreates_a_folder_removed_after_it_was_made() {
        // Past MAX_OPEN_FILES the writer closes its files and reopens them on demand without
        // the mkdir walk for folders it made; a folder removed meanwhile must come back.
        let t = tempfile::tempdir().unwrap();
        let mut w = LaneWriter::with_run(t.path(), 1).unwrap();
        let scopes: Vec<String> = (0..=MAX_OPEN_FILES).map(|i| format!("s{i}")).collect();
        for s in &scopes {
            w.append(Line {
                scope: Some(s),
                dir: "up",
                bytes: b"x",
                conn: None,
            });
        }
        std::fs::remove_dir_all(t.path().join("s0")).unwrap();
        w.append(Line {
            scope: Some("s0"),
            dir: "up",
            bytes: b"y",
            conn: None,
        });
        assert_eq!(w.failures, 0);
        let text = std::fs::read_to_string(t.path().join("s0/up.ndjson")).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("\"line\":\"y\""), "{text}");
        // A folder still there is reused: the lane keeps its earlier line.
        w.append(Line {
            scope: Some("s1"),
            dir: "up",
            bytes: b"z",
            conn: None,
        });
        let text = std::fs::read_to_string(t.path().join("s1/up.ndjson")).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
    }

    #[test]
    fn writes_scoped_lanes_with_one_seq_counter() {
        let t = tempfile::tempdir().unwrap();
        let mut w = LaneWriter::with_run(t.path(), 42).unwrap();
        w.append(Line {
            scope: None,
            dir: "runtime→bridge",
            bytes: b"{\"id\":1}",
            conn: None,
        });
        w.append_batch(&[
            Line {
                scope: Some("thr/1"),
                dir: "bridge→runtime",
                bytes: b"a",
                conn: None,
            },
            Line {
                scope: Some("thr/1"),
                dir: "bridge→runtime",
                bytes: b"b\xff",
                conn: Some(7),
            },
            Line {
                scope: Some("_process"),
                dir: "bridge→runtime",
                bytes: b"c",
                conn: None,
            },
        ]);
        let read = |p: PathBuf, d: &str| -> Vec<crate::lane::Entry> {
            LaneReader::open(&p, Some(d))
                .unwrap()
                .map(|r| r.unwrap())
                .collect()
        };
        let p = read(
            t.path().join("_process/runtime→bridge.ndjson"),
            "runtime→bridge",
        );
        assert_eq!(
            (p[0].run, p[0].seq, p[0].line.as_str()),
            (42.0, 1.0, "{\"id\":1}")
        );
        let thr = read(
            t.path().join("thr-1/bridge→runtime.ndjson"),
            "bridge→runtime",
        );
        assert_eq!(thr.iter().map(|e| e.seq).collect::<Vec<_>>(), [2.0, 3.0]);
        assert_eq!(thr[1].line, "b\u{fffd}");
        assert_eq!(thr[1].raw_bytes(), b"b\xff");
        // The connection a line was on follows it, after the exact bytes of a non-UTF-8 line.
        assert_eq!((thr[0].conn(), thr[1].conn()), (None, Some(7)));
        let odd = read(
            t.path().join("t-_process/bridge→runtime.ndjson"),
            "bridge→runtime",
        );
        assert_eq!(odd[0].seq, 4.0);
    }
}
