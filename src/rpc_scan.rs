//! A fast, allocation-light scanner for the top level of a JSON-RPC line.
//!
//! The recorder must classify every line that crosses (request, response or notification; its
//! id; `params.threadId`) without slowing the wire. A full parse builds the whole tree; this
//! scanner walks the bytes once, skipping values it does not need, and validates structure as
//! it goes, so a line it cannot read is treated as bb treats non-JSON: scope `_process`.
//!
//! Nothing here recurses on the input's nesting: skipped values are walked with an explicit
//! stack (one byte per level), and [`any_key`] looks inside at most [`MAX_KEY_DEPTH`] levels
//! (deeper containers answer "maybe", so the redactor decides). A line nested arbitrarily deep is
//! classified like any other line and recorded as its bytes.

/// What the recorder needs to know about a line.
#[derive(Debug, Default, PartialEq)]
pub struct RpcInfo {
    /// `number:<js number>` or `string:<text>`, bb's pending-map key; `None` without an id.
    pub id_key: Option<String>,
    pub method: Option<String>,
    pub thread_id: Option<String>,
}

impl RpcInfo {
    pub fn is_request(&self) -> bool {
        self.id_key.is_some() && self.method.is_some()
    }
    pub fn is_response(&self) -> bool {
        self.id_key.is_some() && self.method.is_none()
    }
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

/// Scans a line; `None` when it is not a JSON object.
pub fn scan(line: &[u8]) -> Option<RpcInfo> {
    let mut s = Scanner { b: line, i: 0 };
    s.ws();
    let mut info = RpcInfo::default();
    s.object(|s, key| {
        let name = key_name(key);
        match name.as_ref() {
            b"id" => {
                s.ws();
                match s.peek()? {
                    b'"' => {
                        let text = s.string_value()?;
                        info.id_key = Some(format!("string:{text}"));
                    }
                    b'-' | b'0'..=b'9' => {
                        let start = s.i;
                        s.number()?;
                        let n: f64 = std::str::from_utf8(&s.b[start..s.i]).ok()?.parse().ok()?;
                        info.id_key = Some(format!("number:{}", crate::jsjson::format_f64(n)));
                    }
                    _ => {
                        info.id_key = None;
                        s.skip_value()?;
                    }
                }
            }
            b"method" => {
                s.ws();
                if s.peek()? == b'"' {
                    info.method = Some(s.string_value()?);
                } else {
                    info.method = None;
                    s.skip_value()?;
                }
            }
            b"params" => {
                s.ws();
                info.thread_id = None;
                if s.peek()? == b'{' {
                    let mut tid = None;
                    s.object(|s, k| {
                        if key_name(k).as_ref() == b"threadId" {
                            s.ws();
                            if s.peek()? == b'"' {
                                tid = Some(s.string_value()?);
                            } else {
                                tid = None;
                                s.skip_value()?;
                            }
                        } else {
                            s.skip_value()?;
                        }
                        Some(())
                    })?;
                    info.thread_id = tid;
                } else {
                    s.skip_value()?;
                }
            }
            _ => s.skip_value()?,
        }
        Some(())
    })?;
    s.ws();
    (s.i == s.b.len()).then_some(info)
}

/// A JSON-RPC id as bb keys its pending maps (`number:<js number>` / `string:<text>`), borrowed
/// from the line where it can be.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IdKey<'a> {
    /// The number's `f64` bits (`-0` as `0`): equal bits, equal JS text.
    Number(u64),
    String(std::borrow::Cow<'a, str>),
}

impl IdKey<'_> {
    pub fn into_owned(self) -> IdKey<'static> {
        match self {
            IdKey::Number(n) => IdKey::Number(n),
            IdKey::String(s) => IdKey::String(std::borrow::Cow::Owned(s.into_owned())),
        }
    }
}

/// [`RpcInfo`] borrowed from the line: what the recorder needs, without allocating.
#[derive(Debug, Default, PartialEq)]
pub struct RpcRef<'a> {
    pub id: Option<IdKey<'a>>,
    pub has_method: bool,
    pub thread_id: Option<std::borrow::Cow<'a, str>>,
}

impl RpcRef<'_> {
    pub fn is_request(&self) -> bool {
        self.id.is_some() && self.has_method
    }
    pub fn is_response(&self) -> bool {
        self.id.is_some() && !self.has_method
    }
}

/// One pass over a line answering both of the recorder's questions.
#[derive(Debug, Default, PartialEq)]
pub struct LineScan<'a> {
    /// As [`scan`] classifies the line (`None`: not a JSON object).
    pub rpc: Option<RpcRef<'a>>,
    /// As [`any_key`] answers for the same predicate.
    pub key_hit: bool,
}

/// [`scan`] and [`any_key`] fused into one walk of the line with no recursion: the recorder's
/// per-line pass (the scope of the line and whether redaction must look at it).
pub fn scan_line<'a>(line: &'a [u8], pred: &mut dyn FnMut(&str) -> bool) -> LineScan<'a> {
    scan_line_raw_keys(line, |k: &[u8]| {
        std::str::from_utf8(k).is_ok_and(&mut *pred)
    })
}

/// The key predicate of [`scan_line_raw_keys`]: any `FnMut(&[u8]) -> bool`, or a caller's own
/// type whose method the walk can inline (the recorder's: as a closure it stayed a call per
/// key).
pub trait KeyTest {
    fn may_matter(&mut self, key: &[u8]) -> bool;
}

impl<F: FnMut(&[u8]) -> bool> KeyTest for F {
    #[inline]
    fn may_matter(&mut self, key: &[u8]) -> bool {
        self(key)
    }
}

/// [`scan_line`] with the keys handed over as bytes: the key's text (escapes decoded) when it
/// has an escape, else its raw bytes, which may not be UTF-8 (`pred` must answer `false` for
/// those, as [`scan_line`]'s does). Lets a caller memoize keys without checking UTF-8 first.
pub fn scan_line_raw_keys<'a>(line: &'a [u8], mut pred: impl KeyTest) -> LineScan<'a> {
    #[derive(Clone, Copy, PartialEq)]
    enum Ctx {
        Top,
        Params,
        Other,
    }
    #[derive(Clone, Copy, PartialEq)]
    enum Slot {
        None,
        Id,
        Method,
        Params,
        ThreadId,
    }
    #[derive(Clone, Copy)]
    struct Frame {
        closer: u8,
        ctx: Ctx,
    }
    let mut s = Scanner { b: line, i: 0 };
    let mut found = false;
    // A value of id/method/threadId that `scan` refuses (raw control character, bad escape,
    // unparsable number) makes the whole line "not classified", as there.
    let mut rpc_ok = true;
    let mut rpc = RpcRef::default();
    let mut stack = FrameStack::new(Frame {
        closer: 0,
        ctx: Ctx::Other,
    });
    let mut slot = Slot::None;
    // A line that is not one well-formed JSON value may hide a key the walk never reached (a
    // broken member, a second value): redaction's full pass decides when it has any string.
    let fail = || LineScan {
        rpc: None,
        key_hit: has_string(line),
    };
    // A key just read (raw bytes, quotes excluded; `esc`: it has a backslash) in a frame of
    // `ctx`: checks it, returns the slot of its value. Inlined into the walk (a line has ~8
    // keys; as a called closure the call and its saved registers were ~half of its cost).
    #[inline(always)]
    fn key_slot(
        pred: &mut impl KeyTest,
        raw: &[u8],
        esc: bool,
        ctx: Ctx,
        found: &mut bool,
    ) -> Slot {
        if !*found {
            *found = if esc {
                escaped_key_hit(raw, pred)
            } else {
                pred.may_matter(raw)
            };
        }
        if ctx == Ctx::Other {
            return Slot::None;
        }
        let name = if esc {
            key_name(raw)
        } else {
            std::borrow::Cow::Borrowed(raw)
        };
        match (ctx, name.as_ref()) {
            (Ctx::Top, b"id") => Slot::Id,
            (Ctx::Top, b"method") => Slot::Method,
            (Ctx::Top, b"params") => Slot::Params,
            (Ctx::Params, b"threadId") => Slot::ThreadId,
            _ => Slot::None,
        }
    }
    s.ws();
    let top_is_object = s.peek() == Some(b'{');
    loop {
        // A value starts here; `slot` says what it is to the classification.
        s.ws();
        let Some(c) = s.peek() else { return fail() };
        match c {
            b'"' => match slot {
                Slot::Id | Slot::Method | Slot::ThreadId => {
                    let Some((start, end, esc)) = s.string_span_esc() else {
                        return fail();
                    };
                    let text = string_text_esc(line, start, end, esc);
                    rpc_ok &= text.is_some();
                    match slot {
                        Slot::Id => rpc.id = text.map(IdKey::String),
                        Slot::Method => rpc.has_method = text.is_some(),
                        _ => rpc.thread_id = text,
                    }
                }
                _ => {
                    if s.string_span().is_none() {
                        return fail();
                    }
                    // A later `params` that is a string replaces the object before it, and
                    // its `threadId` with it (the last of duplicated keys wins, as in bb's
                    // `JSON.parse`).
                    if slot == Slot::Params {
                        rpc.thread_id = None;
                    }
                }
            },
            b'{' | b'[' => {
                if stack.len() >= MAX_KEY_DEPTH {
                    found = true; // as deep as `any_key` looks: "maybe", the redactor decides
                }
                match slot {
                    Slot::Id => rpc.id = None,
                    Slot::Method => rpc.has_method = false,
                    Slot::Params | Slot::ThreadId => rpc.thread_id = None,
                    Slot::None => {}
                }
                let ctx = if stack.is_empty() && c == b'{' {
                    Ctx::Top
                } else if slot == Slot::Params && c == b'{' {
                    Ctx::Params
                } else {
                    Ctx::Other
                };
                s.i += 1;
                s.ws();
                let closer = if c == b'{' { b'}' } else { b']' };
                if s.peek() == Some(closer) {
                    s.i += 1;
                } else {
                    stack.push(Frame { closer, ctx });
                    slot = Slot::None;
                    if c == b'{' {
                        let Some((start, end, esc)) = s.string_span_esc() else {
                            return fail();
                        };
                        slot = key_slot(&mut pred, &line[start..end], esc, ctx, &mut found);
                        if s.expect(b':').is_none() {
                            return fail();
                        }
                    }
                    continue;
                }
            }
            b't' | b'f' | b'n' => {
                let lit: &[u8] = match c {
                    b't' => b"true",
                    b'f' => b"false",
                    _ => b"null",
                };
                if s.literal(lit).is_none() {
                    return fail();
                }
                match slot {
                    Slot::Id => rpc.id = None,
                    Slot::Method => rpc.has_method = false,
                    Slot::Params | Slot::ThreadId => rpc.thread_id = None,
                    Slot::None => {}
                }
            }
            _ => {
                let start = s.i;
                if s.number().is_none() {
                    return fail();
                }
                match slot {
                    // `scan` reads a number id only from `-` or a digit; else it is no id.
                    Slot::Id if !matches!(c, b'-' | b'0'..=b'9') => rpc.id = None,
                    Slot::Id => {
                        let text = &line[start..s.i];
                        // Most ids are a few digits: read without the float parser.
                        let n = crate::util::small_integer(text).or_else(|| {
                            std::str::from_utf8(text)
                                .ok()
                                .and_then(|t| t.parse::<f64>().ok())
                        });
                        rpc_ok &= n.is_some();
                        rpc.id = n.map(|n| IdKey::Number(if n == 0.0 { 0 } else { n.to_bits() }));
                    }
                    Slot::Method => rpc.has_method = false,
                    Slot::Params | Slot::ThreadId => rpc.thread_id = None,
                    Slot::None => {}
                }
            }
        }
        // A value ended: close what it completes, or move to the container's next member.
        slot = Slot::None;
        loop {
            let Some(f) = stack.last() else {
                // The top value is complete.
                s.ws();
                let whole = s.i == line.len();
                return LineScan {
                    rpc: (top_is_object && rpc_ok && whole).then_some(rpc),
                    key_hit: found || (!whole && has_string(line)),
                };
            };
            let (closer, ctx) = (f.closer, f.ctx);
            s.ws();
            match s.peek() {
                Some(b',') => {
                    s.i += 1;
                    if closer == b'}' {
                        s.ws();
                        let Some((start, end, esc)) = s.string_span_esc() else {
                            return fail();
                        };
                        slot = key_slot(&mut pred, &line[start..end], esc, ctx, &mut found);
                        if s.expect(b':').is_none() {
                            return fail();
                        }
                    }
                    break;
                }
                Some(c) if c == closer => {
                    s.i += 1;
                    stack.pop();
                }
                _ => return fail(),
            }
        }
    }
}

/// Whether a key with an escape, decoded (a key that does not decode answers `false`), passes
/// `pred`. Out of line: keys with escapes are rare.
#[inline(never)]
fn escaped_key_hit(raw: &[u8], pred: &mut impl KeyTest) -> bool {
    let mut quoted = Vec::with_capacity(raw.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(raw);
    quoted.push(b'"');
    serde_json::from_slice::<String>(&quoted).is_ok_and(|k| pred.may_matter(k.as_bytes()))
}

/// An object key as the full parse names it: its raw bytes, or decoded when it has an escape
/// (`"\u0069d"` is `id` to serde_json and JSON.parse, which take the last of duplicated keys;
/// compared raw, `{"id":1,"\u0069d":2}` kept the first).
fn key_name(raw: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if memchr::memchr(b'\\', raw).is_none() {
        return std::borrow::Cow::Borrowed(raw);
    }
    let mut quoted = Vec::with_capacity(raw.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(raw);
    quoted.push(b'"');
    match serde_json::from_slice::<String>(&quoted) {
        Ok(k) => std::borrow::Cow::Owned(k.into_bytes()),
        Err(_) => std::borrow::Cow::Borrowed(raw),
    }
}

/// A string's text as [`Scanner::string_value`] reads it (raw control characters refused),
/// borrowed when it has no escapes.
fn string_text(b: &[u8], start: usize, end: usize) -> Option<std::borrow::Cow<'_, str>> {
    let raw = &b[start..end];
    if raw.iter().any(|&c| c < 0x20) {
        return None;
    }
    if memchr::memchr(b'\\', raw).is_none() {
        return std::str::from_utf8(raw)
            .ok()
            .map(std::borrow::Cow::Borrowed);
    }
    serde_json::from_slice::<String>(&b[start - 1..end + 1])
        .ok()
        .map(std::borrow::Cow::Owned)
}

/// [`string_text`] for a string whose backslashes the span already told (`esc`). Not inlined:
/// inlined, it made the walk ~230 instructions per line dearer (callgrind) than the call.
#[inline(never)]
fn string_text_esc(
    b: &[u8],
    start: usize,
    end: usize,
    esc: bool,
) -> Option<std::borrow::Cow<'_, str>> {
    if !esc {
        let raw = &b[start..end];
        // Most ids, methods and thread ids are short ASCII: one 16-byte compare over the 16
        // bytes from the string's start, or, near the line's end (a `threadId` is often last),
        // the line's last 16; the bytes outside the string are masked out.
        #[cfg(target_arch = "x86_64")]
        if raw.len() <= 16 && b.len() >= 16 {
            let at = start.min(b.len() - 16);
            // SAFETY: SSE2 is part of x86-64; the load reads b[at..at + 16], inside `b`
            // (`at` + 16 <= b.len() by the `min` and the check above).
            let odd = unsafe {
                use std::arch::x86_64::*;
                let v = _mm_loadu_si128(b.as_ptr().add(at).cast());
                // A control byte (unsigned < 0x20) or a non-ASCII one (top bit).
                let low = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
                _mm_movemask_epi8(_mm_or_si128(low, v)) as u32
            } >> (start - at)
                & ((1u32 << raw.len()) - 1);
            if odd == 0 {
                // SAFETY: every byte is ASCII, which is UTF-8.
                return Some(std::borrow::Cow::Borrowed(unsafe {
                    std::str::from_utf8_unchecked(raw)
                }));
            }
        }
        // One pass: no control character, and ASCII needs no UTF-8 check.
        let (mut low, mut high) = (false, 0u8);
        for &c in raw {
            low |= c < 0x20;
            high |= c;
        }
        if low {
            return None;
        }
        if high < 0x80 {
            // SAFETY: every byte is ASCII, which is UTF-8.
            return Some(std::borrow::Cow::Borrowed(unsafe {
                std::str::from_utf8_unchecked(raw)
            }));
        }
        return std::str::from_utf8(raw)
            .ok()
            .map(std::borrow::Cow::Borrowed);
    }
    string_text(b, start, end)
}

/// A stack kept on the machine stack up to [`FrameStack::INLINE`] levels (every JSON-RPC line
/// has a few), spilling to the heap past them: no allocation per line.
struct FrameStack<T: Copy> {
    /// Slots below `len` (up to [`FrameStack::INLINE`]) hold pushed frames; the rest `fill`.
    inline: [T; 32],
    len: usize,
    spill: Vec<T>,
}

impl<T: Copy> FrameStack<T> {
    const INLINE: usize = 32;

    /// An empty stack whose unused slots hold `fill` (a plain array fills with a few vector
    /// stores; an array of `Option` was 32 byte stores per line).
    #[inline]
    fn new(fill: T) -> Self {
        FrameStack {
            inline: [fill; 32],
            len: 0,
            spill: Vec::new(),
        }
    }

    #[inline]
    fn push(&mut self, f: T) {
        if self.len < Self::INLINE {
            self.inline[self.len] = f;
        } else {
            self.spill.push(f);
        }
        self.len += 1;
    }

    #[inline]
    fn pop(&mut self) {
        if self.len > Self::INLINE {
            self.spill.pop();
        }
        self.len = self.len.saturating_sub(1);
    }

    #[inline]
    fn last(&self) -> Option<T> {
        match self.len {
            0 => None,
            n if n <= Self::INLINE => Some(self.inline[n - 1]),
            _ => self.spill.last().copied(),
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The end (exclusive) of the JSON value starting at `start` (after whitespace), with no
/// recursion; `None` when it is not a complete value.
pub fn value_end(line: &[u8], start: usize) -> Option<usize> {
    let mut s = Scanner { b: line, i: start };
    s.skip_value()?;
    Some(s.i)
}

/// How deep [`any_key`] looks for keys (its walk recurses, so this bounds its stack).
pub const MAX_KEY_DEPTH: usize = 128;

/// Whether any object key anywhere in the JSON text satisfies `pred`; for text that is not one
/// well-formed JSON value, whether it has any string at all (a key the walk could not reach
/// may hide there). One structural pass that skips string values with memchr: the redaction
/// pre-filter, which may say "maybe" but must never miss.
pub fn any_key(line: &[u8], pred: &dyn Fn(&str) -> bool) -> bool {
    fn walk(
        s: &mut Scanner<'_>,
        pred: &dyn Fn(&str) -> bool,
        found: &mut bool,
        depth: usize,
    ) -> Option<()> {
        s.ws();
        match s.peek()? {
            b'{' if depth < MAX_KEY_DEPTH => s.object(|s, key| {
                if !*found {
                    let hit = if memchr::memchr(b'\\', key).is_some() {
                        let mut quoted = Vec::with_capacity(key.len() + 2);
                        quoted.push(b'"');
                        quoted.extend_from_slice(key);
                        quoted.push(b'"');
                        serde_json::from_slice::<String>(&quoted).is_ok_and(|k| pred(&k))
                    } else {
                        std::str::from_utf8(key).is_ok_and(pred)
                    };
                    *found |= hit;
                }
                walk(s, pred, found, depth + 1)
            }),
            b'[' if depth < MAX_KEY_DEPTH => {
                s.i += 1;
                s.ws();
                if s.peek()? == b']' {
                    s.i += 1;
                    return Some(());
                }
                loop {
                    walk(s, pred, found, depth + 1)?;
                    s.ws();
                    match s.peek()? {
                        b',' => s.i += 1,
                        b']' => {
                            s.i += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b'{' | b'[' => {
                *found = true; // too deep to look inside: let the full pass decide
                s.skip_value()
            }
            _ => s.skip_value(),
        }
    }
    let mut s = Scanner { b: line, i: 0 };
    let mut found = false;
    if walk(&mut s, pred, &mut found, 0).is_none() {
        // Not one well-formed value: a key may sit past where the walk stopped (a broken
        // member), so the full pass decides when the line has any string.
        return has_string(line);
    }
    s.ws();
    // A second value after the first (`{…}{"apiKey":…}`) is not walked: same answer.
    found || (s.i < line.len() && has_string(line))
}

/// Whether `line` has a `"` at all (no key without one).
fn has_string(line: &[u8]) -> bool {
    memchr::memchr(b'"', line).is_some()
}

/// The position of the first `"` or `\\` in `b`. Most strings of a JSON-RPC line (keys, ids,
/// methods) are short: one 16-byte compare finds their end without a call; longer ones go to
/// memchr.
#[inline(always)]
fn quote_or_backslash(b: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if b.len() >= 16 {
        // SAFETY: SSE2 is part of x86-64; the load reads 16 bytes inside `b` (checked above).
        let m = unsafe {
            use std::arch::x86_64::*;
            let v = _mm_loadu_si128(b.as_ptr().cast());
            let hit = _mm_or_si128(
                _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8)),
                _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8)),
            );
            _mm_movemask_epi8(hit) as u32
        };
        return if m != 0 {
            Some(m.trailing_zeros() as usize)
        } else {
            memchr::memchr2(b'"', b'\\', &b[16..]).map(|r| r + 16)
        };
    }
    b.iter().position(|&c| c == b'"' || c == b'\\')
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn expect(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// Walks an object, calling `f` with each raw key (callers that compare it use
    /// [`key_name`], so an escaped spelling names the same key as in a full parse).
    fn object(&mut self, mut f: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        self.expect(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            self.ws();
            let (start, end) = self.string_span()?;
            let key = &self.b[start..end];
            self.expect(b':')?;
            f(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// The span of a string's raw contents (between the quotes); the cursor moves past it.
    #[inline]
    fn string_span(&mut self) -> Option<(usize, usize)> {
        self.string_span_esc().map(|(start, end, _)| (start, end))
    }

    /// [`Scanner::string_span`], and whether the string has a backslash (an escape to decode:
    /// without one its raw bytes are its text, so callers need not look again).
    ///
    /// Raw control characters inside a string are not checked here: the scan only needs the
    /// structure, and checking every byte of every payload would cost the recorder a pass over
    /// the whole line. Extracted values are checked.
    ///
    /// Inlined into the walks: a JSON-RPC line is mostly short strings (keys, ids, kinds), and
    /// the call around each cost as much as finding its end (callgrind: ~83 instructions per
    /// string with the call, on the bench's lines).
    #[inline(always)]
    fn string_span_esc(&mut self) -> Option<(usize, usize, bool)> {
        if self.peek()? != b'"' {
            return None;
        }
        self.i += 1;
        let start = self.i;
        let mut esc = false;
        loop {
            self.i += quote_or_backslash(&self.b[self.i..])?;
            if self.b[self.i] == b'\\' {
                esc = true;
                self.i += 2;
                if self.i > self.b.len() {
                    return None;
                }
            } else {
                let end = self.i;
                self.i += 1;
                return Some((start, end, esc));
            }
        }
    }

    fn string_value(&mut self) -> Option<String> {
        let (start, end) = self.string_span()?;
        let raw = &self.b[start..end];
        if raw.iter().any(|&c| c < 0x20) {
            return None; // raw control characters are not JSON
        }
        if memchr::memchr(b'\\', raw).is_none() {
            return std::str::from_utf8(raw).ok().map(str::to_string);
        }
        serde_json::from_slice::<String>(&self.b[start - 1..end + 1]).ok()
    }

    fn number(&mut self) -> Option<()> {
        let start = self.i;
        while let Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        (self.i > start).then_some(())
    }

    /// Skips one value of any depth without recursion: nesting is tracked on an explicit stack
    /// of the closers awaited (one byte per level, bounded by the line), so a line of 35 000
    /// nested `[` is skipped (and validated) like any other instead of overflowing the stack.
    fn skip_value(&mut self) -> Option<()> {
        let mut closers: Vec<u8> = Vec::new();
        loop {
            // A value starts here.
            self.ws();
            match self.peek()? {
                b'"' => {
                    self.string_span()?;
                }
                b'{' => {
                    self.i += 1;
                    self.ws();
                    if self.peek()? == b'}' {
                        self.i += 1;
                    } else {
                        closers.push(b'}');
                        self.string_span()?;
                        self.expect(b':')?;
                        continue;
                    }
                }
                b'[' => {
                    self.i += 1;
                    self.ws();
                    if self.peek()? == b']' {
                        self.i += 1;
                    } else {
                        closers.push(b']');
                        continue;
                    }
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                _ => self.number()?,
            }
            // A value ended: close what it completes, or move to the container's next member.
            loop {
                let Some(&closer) = closers.last() else {
                    return Some(());
                };
                self.ws();
                match self.peek()? {
                    b',' => {
                        self.i += 1;
                        if closer == b'}' {
                            self.ws();
                            self.string_span()?;
                            self.expect(b':')?;
                        }
                        break;
                    }
                    c if c == closer => {
                        self.i += 1;
                        closers.pop();
                    }
                    _ => return None,
                }
            }
        }
    }

    fn literal(&mut self, lit: &[u8]) -> Option<()> {
        if self.b[self.i..].starts_with(lit) {
            self.i += lit.len();
            Some(())
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_like_a_full_parse() {
        let r = scan(br#"{"jsonrpc":"2.0","id":3,"method":"thread/stop","params":{"x":[1,{"threadId":"no"}],"threadId":"thr_a"}}"#).unwrap();
        assert_eq!(r.id_key.as_deref(), Some("number:3"));
        assert_eq!(r.method.as_deref(), Some("thread/stop"));
        assert_eq!(r.thread_id.as_deref(), Some("thr_a"));
        assert!(r.is_request());
        let r = scan(br#"{"id":"echo-req-1","result":{"a":"\"}"}}"#).unwrap();
        assert_eq!(r.id_key.as_deref(), Some("string:echo-req-1"));
        assert!(r.is_response());
        let r = scan(br#" {"id":3.0,"error":{}} "#).unwrap();
        assert_eq!(r.id_key.as_deref(), Some("number:3"));
        let r = scan(br#"{"id":"a\u0041","method":"m"}"#).unwrap();
        assert_eq!(r.id_key.as_deref(), Some("string:aA"));
        assert_eq!(
            scan(br#"{"method":"n","params":{"threadId":7}}"#)
                .unwrap()
                .thread_id,
            None
        );
    }

    #[test]
    fn any_depth_is_skipped_without_recursion() {
        // issue 15: 35 000 nested `[` overflowed the stack of the recursive skip.
        let deep = format!("{}{}", "[".repeat(35_000), "]".repeat(35_000));
        let line = format!(r#"{{"id":1,"method":"m","params":{{"threadId":"t","x":{deep}}}}}"#);
        let r = scan(line.as_bytes()).unwrap();
        assert_eq!(r.thread_id.as_deref(), Some("t"));
        assert!(r.is_request());
        let objs = format!(
            r#"{{"a":{}1{}}}"#,
            r#"{"k":"#.repeat(35_000),
            "}".repeat(35_000)
        );
        assert!(scan(objs.as_bytes()).is_some());
        // Unclosed, mismatched or bare deep input is not an object: `None`, no crash.
        let open = format!(r#"{{"x":{}"#, "[".repeat(35_000));
        assert_eq!(scan(open.as_bytes()), None);
        let mismatched = format!(r#"{{"x":{}}}}}"#, "[".repeat(3));
        assert_eq!(scan(mismatched.as_bytes()), None);
        assert_eq!(scan(deep.as_bytes()), None);
        // The key pre-filter answers "maybe" below its depth and never recurses further.
        assert!(any_key(deep.as_bytes(), &|_| false));
        let shallow = format!(r#"{{"x":{}1{}}}"#, "[".repeat(10), "]".repeat(10));
        assert!(!any_key(shallow.as_bytes(), &|_| false));
        assert!(any_key(shallow.as_bytes(), &|k| k == "x"));
    }

    /// `scan_line` must answer exactly as `scan` and `any_key` do, on good and broken lines.
    #[test]
    fn the_fused_scan_agrees_with_scan_and_any_key() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let pieces: &[&str] = &[
            r#"{"jsonrpc":"2.0","id":7,"method":"turn/start","params":{"threadId":"thr_a","input":[{"text":"hi \"x\""}]}}"#,
            r#"{"id":"s-1","result":{"token":"abc","deep":[[[{"k":1}]]]}}"#,
            r#"{"method":"thread/delta","params":{"x":{"threadId":"no"},"threadId":"t\u0041"}}"#,
            r#" {"id":-0.0,"error":{"code":-32600}} "#,
            r#"{"id":1e400,"method":null,"params":[1,2]}"#,
            r#"{"id":true,"method":"m","params":{"threadId":5}}"#,
            r#"{"id":"a","id":2,"method":"m","method":3,"params":{"threadId":"a"},"params":{}}"#,
            r#"{"id":1,"method":"m","params":{"threadId":"a"},"params":"x"}"#,
            r#"{"id":1,"method":"m","params":{"threadId":"a"},"params":null}"#,
            r#"{"id":1,"method":"m","params":{"threadId":"a"},"params":7}"#,
            r#"{"env":{"API_KEY":"v"},"headers":[["Authorization","b"]],"callbackUrl":"http://x?token=1"}"#,
            r#"{"a\u0074oken":1,"\u0069d":3}"#,
            r#"[{"apiKey":"x"}]"#,
            r#""just a string""#,
            "this is { not json",
            r#"{"id":"bad\q","method":"m"}"#,
            "{\"id\":\"ctl\u{1}\",\"method\":\"m\"}",
            r#"{"id":01,"method":"m"}"#,
            r#"{"id":000,"method":"m"}"#,
            r#"{"id":999999999999999,"method":"m"}"#,
            r#"{"id":9999999999999999,"method":"m"}"#,
            r#"{"id":12345678901234567890,"result":{}}"#,
            r#"{"id":1-2,"method":"m"}"#,
        ];
        let pred = |k: &str| k.ends_with("oken") || k == "env" || k.ends_with("Url");
        let mut lines: Vec<Vec<u8>> = pieces.iter().map(|p| p.as_bytes().to_vec()).collect();
        let deep = format!(
            r#"{{"id":1,"method":"m","x":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        lines.push(deep.into_bytes());
        for _ in 0..20_000 {
            let mut l = pieces[(next() % pieces.len() as u64) as usize]
                .as_bytes()
                .to_vec();
            for _ in 0..1 + next() % 3 {
                let at = (next() % (l.len() as u64 + 1)) as usize;
                match next() % 4 {
                    0 => l.truncate(at),
                    1 if at < l.len() => {
                        l.remove(at);
                    }
                    _ => {
                        let junk = b"{}[]\":,\\ 0a\x01";
                        l.insert(at, junk[(next() % junk.len() as u64) as usize])
                    }
                }
            }
            lines.push(l);
        }
        for l in &lines {
            let fused = scan_line(l, &mut |k: &str| pred(k));
            let want = scan(l);
            let got = fused.rpc.as_ref().map(|r| RpcInfo {
                id_key: r.id.as_ref().map(|id| match id {
                    IdKey::Number(bits) => {
                        format!(
                            "number:{}",
                            crate::jsjson::format_f64(f64::from_bits(*bits))
                        )
                    }
                    IdKey::String(s) => format!("string:{s}"),
                }),
                method: r.has_method.then(|| {
                    want.as_ref()
                        .and_then(|w| w.method.clone())
                        .unwrap_or_default()
                }),
                thread_id: r.thread_id.as_ref().map(|t| t.to_string()),
            });
            assert_eq!(got, want, "{}", String::from_utf8_lossy(l));
            assert_eq!(
                fused.key_hit,
                any_key(l, &pred),
                "{}",
                String::from_utf8_lossy(l)
            );
        }
    }

    /// The 16-byte fast path of `string_text_esc` answers as the byte loop (`string_text`)
    /// for every short string, with a control, non-ASCII or bad byte at every position, and
    /// with the line ending at or just past the string.
    #[test]
    fn short_string_text_agrees_with_the_byte_loop() {
        let odd: &[&[u8]] = &[
            b"a",
            b"\x01",
            b"\x1f",
            b" ",
            b"\x7f",
            b"\xc3\xa9",
            b"\xff",
            b"\x80",
        ];
        for len in 0..=20usize {
            for at in 0..len.max(1) {
                for o in odd {
                    let mut raw: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
                    if len > 0 {
                        raw.splice(at..at + 1, o.iter().copied());
                    }
                    for tail in [
                        &b""[..],
                        b"\"",
                        b"\"}",
                        b"\":\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01",
                    ] {
                        let mut line = b"{\"".to_vec();
                        line.extend_from_slice(&raw);
                        line.extend_from_slice(tail);
                        let (start, end) = (2, 2 + raw.len());
                        assert_eq!(
                            string_text_esc(&line, start, end, false),
                            string_text(&line, start, end),
                            "{:?}",
                            String::from_utf8_lossy(&line)
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn rejects_what_is_not_an_object() {
        for bad in [
            &b"this is { not json"[..],
            b"[1]",
            b"{\"a\":}",
            b"{\"a\":1",
            b"{\"a\":1} x",
            b"\"s\"",
        ] {
            assert_eq!(scan(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
