//! Side Search as a client: its request byte habits and the decoders of its builds.
//!
//! Reference: `reference/side-bridge-clients.md` §1 (request bytes), §2 (decoding), §8
//! (profiles). Encoding reproduces the app's Swift `JSONEncoder` output: compact, optional keys
//! omitted, key order shuffled per object, `/` escaped as `\/`, upper-case UUIDs, `sources` on
//! every message. Decoding reproduces the library's synthesized `Decodable` per revision.

use serde_json::{Map, Value};

/// One client build (§8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    /// Early library revision: `sources` required, strict `from`.
    Alpha,
    /// Intermediate library revision: tolerant `from`, optional `sources`.
    Beta,
    /// Current library revision.
    Gamma,
    /// Pre-release app branch: non-2xx status → generic error bubble, body never read.
    AppDev,
    /// The current app (library γ, status ignored).
    App,
}

impl Profile {
    pub const ALL: [Profile; 5] = [
        Profile::App,
        Profile::Gamma,
        Profile::Beta,
        Profile::Alpha,
        Profile::AppDev,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Profile::Alpha => "alpha",
            Profile::Beta => "beta",
            Profile::Gamma => "gamma",
            Profile::AppDev => "app-dev",
            Profile::App => "app",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Profile::Alpha => "α, the strict early library types",
            Profile::Beta => "β, the intermediate library types",
            Profile::Gamma => "γ, the current library types",
            Profile::AppDev => "app-dev, the older pre-release app build",
            Profile::App => "app, the current app",
        }
    }
}

/// `from` as the library decodes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    User,
    Assistant,
    System,
    Unknown,
}

impl From {
    pub fn as_str(self) -> &'static str {
        match self {
            From::User => "user",
            From::Assistant => "assistant",
            From::System => "system",
            From::Unknown => "unknown",
        }
    }
    pub fn parse(s: &str) -> Option<From> {
        match s {
            "user" => Some(From::User),
            "assistant" => Some(From::Assistant),
            "system" => Some(From::System),
            "unknown" => Some(From::Unknown),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub title: String,
    pub url: String,
}

/// A decoded message. `id` is kept as the bridge wrote it; [`Msg::key`] compares as a UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub id: String,
    pub from: From,
    pub content: String,
    pub sources: Vec<Source>,
}

impl Msg {
    pub fn user(id: &str, content: &str) -> Msg {
        Msg {
            id: id.to_ascii_uppercase(),
            from: From::User,
            content: content.into(),
            sources: Vec::new(),
        }
    }
    /// The id as a UUID value compares (letter case ignored).
    pub fn key(&self) -> String {
        self.id.to_ascii_uppercase()
    }
}

/// Session options as decoded (`None` = absent or null).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    pub disable_send_history: Option<bool>,
    pub end_session: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    pub messages: Vec<Msg>,
    pub options: Option<Options>,
}

/// `8-4-4-4-12` hex digits, either case (Foundation's `UUID(uuidString:)`).
pub fn is_textual_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 36 {
        return false;
    }
    b.iter().enumerate().all(|(i, c)| match i {
        8 | 13 | 18 | 23 => *c == b'-',
        _ => c.is_ascii_hexdigit(),
    })
}

/// The library's decoding of a reply body (no HTTP status involved).
pub fn decode(profile: Profile, body: &[u8]) -> Result<Reply, String> {
    let v = parse_json(body)?;
    decode_value(profile, v)
}

/// The body as JSON, or why it is none (not UTF-8, empty, a syntax error, nested deeper than
/// the app's decoder allows).
///
/// Whether the body is JSON is decided by [`scan_json`], strict RFC 8259 as Foundation's
/// `JSONSerialization` (the app's decoder) reads it: nesting up to 512 levels, any number
/// literal of the grammar. serde_json alone would refuse valid JSON the app accepts (its
/// nesting limit of 128, numbers beyond f64 such as `1e400`), a false alarm on a reply with such
/// an extension. So serde reads a sanitized copy: a container nested deeper than
/// [`KEEP_DEPTH`] becomes `null` and an out-of-range number `0` (no field the app reads lies
/// that deep, and each keeps its kind: a number stays a number). Nothing recurses: deeper
/// input is an error found by a loop, never a recursion.
///
/// A UTF-8 byte order mark before the JSON is skipped, as the app's decoder skips it: the
/// library decodes with Foundation's `JSONDecoder`, whose `withUTF8Representation` drops a
/// leading `EF BB BF` before scanning (docs/sidebridge.md, "A byte order mark"). Only the one
/// mark at the very start: a second one, or one after whitespace, is no JSON to the app either
/// and is named as a mark ([`bom_note`]).
pub fn parse_json(body: &[u8]) -> Result<Value, String> {
    let body = body.strip_prefix(UTF8_BOM).unwrap_or(body);
    let text = std::str::from_utf8(body).map_err(|e| format!("body is not UTF-8 ({e})"))?;
    if text.trim().is_empty() {
        return Err("empty body".into());
    }
    let not_json = |e: String| {
        let head: String = text.chars().take(40).collect();
        match bom_note(text) {
            Some(mark) => format!("{mark}; not JSON ({e}); body starts {head:?}"),
            None => format!("not JSON ({e}); body starts {head:?}"),
        }
    };
    let edits = match scan_json(text.as_bytes()) {
        Ok(edits) => edits,
        // serde's wording where it refuses for the same cause (its line and column), with ours
        // for nesting; ours where serde stops at its own nesting limit first or accepts.
        Err(mine) => {
            return Err(not_json(match serde_json::from_str::<Value>(text) {
                Err(e) if mine.depth => format!("{e}; {}", mine.what),
                // serde words an unpaired surrogate escape as "unexpected end of hex escape".
                Err(_) if mine.surrogate => mine.what,
                Err(e) if !e.to_string().contains("recursion limit") => e.to_string(),
                _ => mine.what,
            }));
        }
    };
    let sanitized;
    let text = if edits.is_empty() {
        text
    } else {
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (from, to, with) in edits {
            out.push_str(&text[at..from]);
            out.push_str(with);
            at = to;
        }
        out.push_str(&text[at..]);
        sanitized = out;
        &sanitized
    };
    serde_json::from_str(text).map_err(|e| not_json(e.to_string()))
}

/// The UTF-8 encoding of U+FEFF, the byte order mark.
pub const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Whether a body starts with a UTF-8 byte order mark (which [`parse_json`] skips, as the app's
/// decoder does).
pub fn starts_with_bom(body: &[u8]) -> bool {
    body.starts_with(UTF8_BOM)
}

/// Names a byte order mark the app's decoder does not skip (what remains after the one it
/// skips at the very start): one leading the rest, or one after leading whitespace.
fn bom_note(text: &str) -> Option<&'static str> {
    let after_ws = text.trim_start_matches([' ', '\t', '\n', '\r']);
    if text.starts_with('\u{feff}') {
        Some(
            "a second UTF-8 byte order mark (U+FEFF): the app's decoder skips one at the very start only",
        )
    } else if after_ws.starts_with('\u{feff}') {
        Some(
            "a UTF-8 byte order mark (U+FEFF) after whitespace: the app's decoder skips one at the very start only",
        )
    } else {
        None
    }
}

/// The nesting the app's decoder accepts (Foundation's `JSONSerialization`: 512 levels).
pub const MAX_DEPTH: usize = 512;
/// Containers nested deeper than this are read as `null` by [`parse_json`] (serde's own limit
/// is 128; every field the app reads is within 6 levels).
pub const KEEP_DEPTH: usize = 64;

/// Why [`scan_json`] refused a body.
#[derive(Debug)]
pub struct ScanError {
    pub what: String,
    /// Refused only for nesting deeper than [`MAX_DEPTH`].
    pub depth: bool,
    /// Refused for an unpaired UTF-16 surrogate escape (said in our words, not serde's).
    pub surrogate: bool,
}

/// Strict JSON (RFC 8259) checked without recursion: `Ok` with the edits [`parse_json`] makes
/// before serde reads it (byte range, replacement), or why it is not JSON.
pub fn scan_json(b: &[u8]) -> Result<Vec<(usize, usize, &'static str)>, ScanError> {
    fn err(what: String) -> ScanError {
        ScanError {
            what,
            depth: false,
            surrogate: false,
        }
    }
    fn ws(b: &[u8], i: &mut usize) {
        while *i < b.len() && matches!(b[*i], b' ' | b'\t' | b'\n' | b'\r') {
            *i += 1;
        }
    }
    fn string(b: &[u8], i: &mut usize) -> Result<(), ScanError> {
        if b.get(*i) != Some(&b'"') {
            return Err(err(format!("expected a string at byte {i}")));
        }
        *i += 1;
        loop {
            match b.get(*i) {
                None => return Err(err("unterminated string".into())),
                Some(b'"') => {
                    *i += 1;
                    return Ok(());
                }
                Some(b'\\') => match b.get(*i + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => *i += 2,
                    Some(b'u')
                        if b.len() >= *i + 6
                            && b[*i + 2..*i + 6].iter().all(u8::is_ascii_hexdigit) =>
                    {
                        // A surrogate escape must be a high one followed by a low one: one
                        // alone names no character, and the app's decoder refuses it.
                        let unit = |at: usize| {
                            std::str::from_utf8(&b[at + 2..at + 6])
                                .ok()
                                .and_then(|h| u16::from_str_radix(h, 16).ok())
                        };
                        let high = unit(*i).unwrap_or(0);
                        let paired = (0xD800..0xDC00).contains(&high)
                            && b.len() >= *i + 12
                            && b[*i + 6] == b'\\'
                            && b[*i + 7] == b'u'
                            && b[*i + 8..*i + 12].iter().all(u8::is_ascii_hexdigit)
                            && unit(*i + 6).is_some_and(|l| (0xDC00..0xE000).contains(&l));
                        if (0xD800..0xE000).contains(&high) && !paired {
                            return Err(ScanError {
                                what: format!(
                                    "an unpaired UTF-16 surrogate escape \\u{high:04x} at byte {i}: it names no character, and the app's JSON decoder refuses it"
                                ),
                                depth: false,
                                surrogate: true,
                            });
                        }
                        *i += if paired { 12 } else { 6 }
                    }
                    _ => return Err(err(format!("invalid escape at byte {i}"))),
                },
                Some(c) if *c < 0x20 => {
                    return Err(err(format!("control character in a string at byte {i}")));
                }
                Some(_) => *i += 1,
            }
        }
    }
    fn digits(b: &[u8], i: &mut usize) -> Result<(), ScanError> {
        let from = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        if *i == from {
            return Err(err(format!("expected a digit at byte {i}")));
        }
        Ok(())
    }
    fn number(b: &[u8], i: &mut usize) -> Result<(), ScanError> {
        if b.get(*i) == Some(&b'-') {
            *i += 1;
        }
        if b.get(*i) == Some(&b'0') {
            *i += 1;
        } else {
            digits(b, i)?;
        }
        if b.get(*i) == Some(&b'.') {
            *i += 1;
            digits(b, i)?;
        }
        if matches!(b.get(*i), Some(b'e' | b'E')) {
            *i += 1;
            if matches!(b.get(*i), Some(b'+' | b'-')) {
                *i += 1;
            }
            digits(b, i)?;
        }
        Ok(())
    }
    fn key(b: &[u8], i: &mut usize) -> Result<(), ScanError> {
        ws(b, i);
        string(b, i)?;
        ws(b, i);
        if b.get(*i) != Some(&b':') {
            return Err(err(format!("expected `:` at byte {i}")));
        }
        *i += 1;
        Ok(())
    }
    let mut i = 0usize;
    let mut stack: Vec<u8> = Vec::new();
    let mut edits = Vec::new();
    // The container being read as `null`: where it starts, its depth.
    let mut cut: Option<(usize, usize)> = None;
    'value: loop {
        ws(b, &mut i);
        let Some(&c) = b.get(i) else {
            return Err(err("unexpected end of input".into()));
        };
        match c {
            b'{' | b'[' => {
                stack.push(c);
                if stack.len() > MAX_DEPTH {
                    return Err(ScanError {
                        what: format!(
                            "nested deeper than {MAX_DEPTH} levels, the limit of the app's decoder (Foundation's JSONSerialization)"
                        ),
                        depth: true,
                        surrogate: false,
                    });
                }
                if stack.len() > KEEP_DEPTH && cut.is_none() {
                    cut = Some((i, stack.len()));
                }
                i += 1;
                ws(b, &mut i);
                let close = if c == b'{' { b'}' } else { b']' };
                if b.get(i) != Some(&close) {
                    if c == b'{' {
                        key(b, &mut i)?;
                    }
                    continue 'value;
                }
            }
            b'"' => string(b, &mut i)?,
            b't' | b'f' | b'n' => {
                let word: &[u8] = match c {
                    b't' => b"true",
                    b'f' => b"false",
                    _ => b"null",
                };
                if !b[i..].starts_with(word) {
                    return Err(err(format!("invalid literal at byte {i}")));
                }
                i += word.len();
            }
            b'-' | b'0'..=b'9' => {
                let from = i;
                number(b, &mut i)?;
                let out_of_range = std::str::from_utf8(&b[from..i])
                    .ok()
                    .and_then(|t| t.parse::<f64>().ok())
                    .is_none_or(f64::is_infinite);
                if out_of_range && cut.is_none() {
                    edits.push((from, i, "0"));
                }
            }
            _ => return Err(err(format!("expected a value at byte {i}"))),
        }
        // After a value, or at the closing bracket of an empty container.
        loop {
            ws(b, &mut i);
            let Some(&top) = stack.last() else {
                return if i == b.len() {
                    Ok(edits)
                } else {
                    Err(err(format!("trailing characters at byte {i}")))
                };
            };
            let close = if top == b'{' { b'}' } else { b']' };
            match b.get(i) {
                Some(&x) if x == close => {
                    stack.pop();
                    i += 1;
                    if let Some((from, depth)) = cut
                        && stack.len() + 1 == depth
                    {
                        edits.push((from, i, "null"));
                        cut = None;
                    }
                }
                Some(b',') => {
                    i += 1;
                    if top == b'{' {
                        key(b, &mut i)?;
                    }
                    continue 'value;
                }
                _ => {
                    return Err(err(format!(
                        "expected `,` or `{}` at byte {i}",
                        close as char
                    )));
                }
            }
        }
    }
}

/// [`decode`] of a received reply, opaque ones included (their reason is kept).
pub fn decode_reply(profile: Profile, r: &super::transport::HttpReply) -> Result<Reply, String> {
    match &r.opaque {
        Some((why, _)) => Err(why.clone()),
        None => decode(profile, &r.body),
    }
}

/// A part of a reply that can make profile γ drop it, for naming the rule that judges that
/// part (one fault, one verdict).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The body as a whole: strict JSON, UTF-8, a top-level object, `messages` an array.
    Top,
    /// A message's required keys and their types (`id` a UUID string, `content` a string).
    Message,
    /// A message's `sources`.
    Sources,
    /// `options` and its flags.
    Options,
}

/// Every part of a received reply that profile γ cannot decode (empty when it decodes).
pub fn gamma_faults(r: &super::transport::HttpReply) -> Vec<Part> {
    if r.opaque.is_some() {
        return vec![Part::Top];
    }
    let Ok(Value::Object(top)) = parse_json(&r.body) else {
        return vec![Part::Top];
    };
    let mut parts = Vec::new();
    let mut add = |p: Part| {
        if !parts.contains(&p) {
            parts.push(p);
        }
    };
    match top.get("messages") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for item in items {
                if let Err(e) = decode_message(Profile::Gamma, item) {
                    add(if e.starts_with("sources") {
                        Part::Sources
                    } else {
                        Part::Message
                    });
                }
            }
        }
        Some(_) => add(Part::Top),
    }
    match top.get("options") {
        None | Some(Value::Null) => {}
        Some(Value::Object(o)) => {
            if ["disableSendHistory", "endSession"]
                .iter()
                .any(|k| o.get(*k).is_some_and(|f| !(f.is_boolean() || f.is_null())))
            {
                add(Part::Options);
            }
        }
        Some(_) => add(Part::Options),
    }
    parts
}

/// Bodies that are not JSON at all are kept up to this many bytes (with the reason).
pub const OPAQUE_KEEP: usize = 64 * 1024;

/// Marks a reply whose large body is not JSON at all as opaque, keeping its first
/// [`OPAQUE_KEEP`] bytes and the reason decoding gives.
pub fn make_opaque_if_undecodable(r: &mut super::transport::HttpReply) {
    if r.opaque.is_some() || r.body.len() <= OPAQUE_KEEP {
        return;
    }
    if let Err(why) = parse_json(&r.body) {
        r.opaque = Some((why, r.body.len()));
        r.body.truncate(OPAQUE_KEEP);
        r.body.shrink_to_fit();
    }
}

fn decode_value(profile: Profile, v: Value) -> Result<Reply, String> {
    let Value::Object(top) = v else {
        return Err(format!("top level is {} not an object", kind(&v)));
    };
    let mut reply = Reply::default();
    match top.get("messages") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                reply.messages.push(
                    decode_message(profile, item).map_err(|e| format!("messages[{i}]: {e}"))?,
                );
            }
        }
        Some(other) => return Err(format!("`messages` is {} not an array", kind(other))),
    }
    match top.get("options") {
        None | Some(Value::Null) => {}
        Some(Value::Object(o)) => {
            let flag = |k: &str| -> Result<Option<bool>, String> {
                match o.get(k) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::Bool(b)) => Ok(Some(*b)),
                    Some(other) => Err(format!("options.{k} is {other} not a boolean")),
                }
            };
            reply.options = Some(Options {
                disable_send_history: flag("disableSendHistory")?,
                end_session: flag("endSession")?,
            });
        }
        Some(other) => return Err(format!("`options` is {} not an object", kind(other))),
    }
    Ok(reply)
}

fn decode_message(profile: Profile, v: &Value) -> Result<Msg, String> {
    let Value::Object(m) = v else {
        return Err(format!("is {} not an object", kind(v)));
    };
    let id = match m.get("id") {
        None => return Err("missing required key `id`".into()),
        Some(Value::String(s)) if is_textual_uuid(s) => s.clone(),
        Some(Value::String(s)) => return Err(format!("id {s:?} is not a UUID string")),
        Some(other) => return Err(format!("id is {} not a string", kind(other))),
    };
    let from = match m.get("from") {
        None => return Err("missing required key `from`".into()),
        Some(Value::String(s)) => match From::parse(s) {
            Some(f) => f,
            None if profile == Profile::Alpha => {
                return Err(format!("from {s:?} is not user/assistant/system"));
            }
            None => From::Unknown,
        },
        Some(other) if profile == Profile::Alpha => {
            return Err(format!("from is {} not a string", kind(other)));
        }
        Some(_) => From::Unknown,
    };
    let content = match m.get("content") {
        None => return Err("missing required key `content`".into()),
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(format!("content is {} not a string", kind(other))),
    };
    let sources = match m.get("sources") {
        None | Some(Value::Null) if profile == Profile::Alpha => {
            return Err("missing required key `sources`".into());
        }
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut out = Vec::new();
            for (i, s) in items.iter().enumerate() {
                let title = s.get("title").and_then(Value::as_str);
                let url = s.get("url").and_then(Value::as_str);
                match (title, url) {
                    (Some(_), Some("")) => return Err(format!("sources[{i}].url is empty")),
                    (Some(t), Some(u)) => out.push(Source {
                        title: t.into(),
                        url: u.into(),
                    }),
                    _ if !s.is_object() => {
                        return Err(format!("sources[{i}] is {} not an object", kind(s)));
                    }
                    _ => {
                        // Each field that is not a string, named (not both when one is wrong).
                        let wrong: Vec<String> = [("title", title), ("url", url)]
                            .into_iter()
                            .filter(|(_, v)| v.is_none())
                            .map(|(k, _)| match s.get(k) {
                                None | Some(Value::Null) => format!("sources[{i}].{k} is missing"),
                                Some(v) => {
                                    format!("sources[{i}].{k} is {} not a string", kind(v))
                                }
                            })
                            .collect();
                        return Err(wrong.join(" and "));
                    }
                }
            }
            out
        }
        Some(other) => return Err(format!("sources is {} not an array", kind(other))),
    };
    Ok(Msg {
        id,
        from,
        content,
        sources,
    })
}

/// What a client build does with a whole HTTP reply: `Ok` = rendered, `Err` = dropped.
pub fn judge(profile: Profile, status: u16, body: &[u8]) -> Result<Reply, String> {
    if profile == Profile::AppDev && !(200..300).contains(&status) {
        return Err(format!(
            "status {status}: app-dev shows a generic error bubble and never reads the body"
        ));
    }
    decode(profile, body)
}

/// [`judge`] of a received reply, opaque ones included.
pub fn judge_reply(profile: Profile, r: &super::transport::HttpReply) -> Result<Reply, String> {
    if profile == Profile::AppDev && !(200..300).contains(&r.status) {
        return judge(profile, r.status, &[]);
    }
    decode_reply(profile, r)
}

/// A JSON type name for messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding

/// How request bytes are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// The app's habits (§1.2).
    App,
    /// Canonical bytes: fixed key order, `/` unescaped, `sources` only when non-empty.
    Canonical,
}

/// A small deterministic generator (xorshift64*), enough to shuffle keys and make ids.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A fresh upper-case v4 UUID.
    pub fn uuid(&mut self) -> String {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.next_u64().to_le_bytes());
        bytes[8..].copy_from_slice(&self.next_u64().to_le_bytes());
        uuid::Builder::from_random_bytes(bytes)
            .into_uuid()
            .hyphenated()
            .to_string()
            .to_ascii_uppercase()
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

fn write_json_str(out: &mut String, s: &str, style: Style) {
    let q = serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    if style == Style::App {
        out.push_str(&q.replace('/', "\\/"));
    } else {
        out.push_str(&q);
    }
}

fn write_value(out: &mut String, v: &Value, style: Style, rng: &mut Rng) {
    match v {
        Value::String(s) => write_json_str(out, s, style),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item, style, rng);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map, style, rng),
        other => out.push_str(&other.to_string()),
    }
}

fn write_object(out: &mut String, map: &Map<String, Value>, style: Style, rng: &mut Rng) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    if style == Style::App {
        rng.shuffle(&mut entries);
    }
    out.push('{');
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_json_str(out, k, style);
        out.push(':');
        write_value(out, v, style, rng);
    }
    out.push('}');
}

/// A message as a request carries it.
pub fn message_value(m: &Msg, style: Style) -> Value {
    let mut o = Map::new();
    let id = if style == Style::App {
        m.id.to_ascii_uppercase()
    } else {
        m.id.clone()
    };
    o.insert("id".into(), Value::String(id));
    o.insert("from".into(), Value::String(m.from.as_str().into()));
    o.insert("content".into(), Value::String(m.content.clone()));
    if style == Style::App || !m.sources.is_empty() {
        o.insert(
            "sources".into(),
            Value::Array(
                m.sources
                    .iter()
                    .map(|s| serde_json::json!({"title": s.title, "url": s.url}))
                    .collect(),
            ),
        );
    }
    Value::Object(o)
}

/// A User Request's fields before encoding.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub version: String,
    pub chat_id: String,
    pub messages: Option<Vec<Msg>>,
    pub history: Option<Vec<Msg>>,
    /// Extra top-level keys (legacy `type`, future fields).
    pub extra: Vec<(String, Value)>,
}

impl Request {
    pub fn to_value(&self, style: Style) -> Map<String, Value> {
        let mut o = Map::new();
        o.insert("sidebridge".into(), Value::String(self.version.clone()));
        let chat = if style == Style::App {
            self.chat_id.to_ascii_uppercase()
        } else {
            self.chat_id.clone()
        };
        o.insert("chatId".into(), Value::String(chat));
        if let Some(ms) = &self.messages {
            o.insert(
                "messages".into(),
                Value::Array(ms.iter().map(|m| message_value(m, style)).collect()),
            );
        }
        if let Some(h) = &self.history {
            o.insert(
                "history".into(),
                Value::Array(h.iter().map(|m| message_value(m, style)).collect()),
            );
        }
        for (k, v) in &self.extra {
            o.insert(k.clone(), v.clone());
        }
        o
    }

    /// The request body, as the app (or canonically) writes it.
    pub fn encode(&self, style: Style, rng: &mut Rng) -> Vec<u8> {
        let mut out = String::new();
        write_object(&mut out, &self.to_value(style), style, rng);
        out.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unpaired_surrogate_escape_is_named_and_a_pair_is_read() {
        for body in [
            r#"{"a":"x\ud800y"}"#,
            r#"{"a":"x\ud800"}"#,
            r#"{"a":"x\udc00y"}"#,
            r#"{"a":"\ud800\u0041"}"#,
            r#"{"a":"\ud800\ud800"}"#,
        ] {
            let e = parse_json(body.as_bytes()).expect_err(body);
            assert!(
                e.contains("unpaired UTF-16 surrogate escape"),
                "{body}: {e}"
            );
        }
        let v = parse_json(br#"{"a":"\ud83d\ude00 \u00e9"}"#).expect("a pair");
        assert_eq!(v["a"], "\u{1F600} \u{e9}");
    }

    #[test]
    fn app_bytes_have_the_habits() {
        let mut rng = Rng::new(7);
        let m = Msg::user(
            "00c5d592-6b1e-4c3a-9d2f-0a7e5b3c1d44",
            "see https://example.com/a",
        );
        let r = Request {
            version: "1.0".into(),
            chat_id: "401790b9-38c5-429d-ae6a-fc4cf35a88ad".into(),
            messages: Some(vec![m.clone()]),
            history: Some(vec![m]),
            extra: vec![],
        };
        let text = String::from_utf8(r.encode(Style::App, &mut rng)).unwrap();
        assert!(text.contains("https:\\/\\/example.com\\/a"));
        assert!(text.contains("401790B9-38C5-429D-AE6A-FC4CF35A88AD"));
        assert!(text.contains("\"sources\":[]"));
        assert!(!text.contains(' ') || text.contains("see https"));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["messages"][0]["content"], "see https://example.com/a");
        // Key order varies between encodings.
        let orders: std::collections::HashSet<String> = (0..20)
            .map(|_| {
                let t = String::from_utf8(r.encode(Style::App, &mut rng)).unwrap();
                t.chars().take(12).collect()
            })
            .collect();
        assert!(orders.len() > 1);
    }

    #[test]
    fn json_the_app_accepts_decodes_and_json_it_refuses_does_not() {
        // Valid JSON beyond serde's limits, in keys the app ignores: decoded.
        let huge = br#"{"x-score":1e400,"y":-1E+999,"z":[12345678901234567890123456789e300],"messages":[]}"#;
        assert!(decode(Profile::Gamma, huge).is_ok());
        let deep = |n: usize| {
            format!(
                r#"{{"x-trace":{}{},"options":{{"endSession":true}}}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        let r = decode(Profile::Gamma, deep(150).as_bytes()).unwrap();
        assert_eq!(r.options.and_then(|o| o.end_session), Some(true));
        assert!(decode(Profile::Gamma, deep(MAX_DEPTH - 1).as_bytes()).is_ok());
        let e = decode(Profile::Gamma, deep(MAX_DEPTH).as_bytes()).unwrap_err();
        assert!(e.contains("deeper than 512"), "{e}");
        // A huge number where the app wants a boolean is still a number.
        let e = decode(Profile::Gamma, br#"{"options":{"endSession":1e400}}"#).unwrap_err();
        assert!(e.contains("not a boolean"), "{e}");
        // What strict JSON refuses, serde refuses too, with its wording.
        for bad in [
            "{",
            "{}x",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            "+1",
            "NaN",
            "[Infinity]",
            "'a'",
            "{a:1}",
            "\"\t\"",
            "\"\\x\"",
            "\"\\u12\"",
            "tru",
            "nul",
            "[1 2]",
            "{\"a\" 1}",
            "[[]",
            "[]]",
            "{\"a\":1 \"b\":2}",
        ] {
            assert!(scan_json(bad.as_bytes()).is_err(), "{bad}");
            assert!(serde_json::from_str::<Value>(bad).is_err(), "{bad}");
        }
        for good in [
            "0",
            "-0.0e-0",
            "[]",
            "{}",
            " [ 1 , { \"a\" : [ ] } ] ",
            "\"\\u00e4\\/\\n\"",
            "true",
            "[null,false]",
            "1E+2",
            "{\"a\":{\"b\":{}}}",
        ] {
            assert_eq!(scan_json(good.as_bytes()).unwrap(), vec![], "{good}");
            assert!(serde_json::from_str::<Value>(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn profiles_differ_as_the_reference_says() {
        let no_sources = br#"{"messages":[{"id":"D2DF7849-0000-4000-8000-000000000000","from":"assistant","content":"hi"}]}"#;
        assert!(decode(Profile::Gamma, no_sources).is_ok());
        assert!(decode(Profile::Alpha, no_sources).is_err());
        let bot = br#"{"messages":[{"id":"D2DF7849-0000-4000-8000-000000000000","from":"bot","content":"hi","sources":[]}]}"#;
        assert_eq!(
            decode(Profile::Beta, bot).unwrap().messages[0].from,
            From::Unknown
        );
        assert!(decode(Profile::Alpha, bot).is_err());
        let null_from = br#"{"messages":[{"id":"d2df7849-0000-4000-8000-000000000000","from":null,"content":"hi"}]}"#;
        assert_eq!(
            decode(Profile::Gamma, null_from).unwrap().messages[0].from,
            From::Unknown
        );
        let missing_from =
            br#"{"messages":[{"id":"d2df7849-0000-4000-8000-000000000000","content":"hi"}]}"#;
        assert!(decode(Profile::Gamma, missing_from).is_err());
        assert!(decode(Profile::Gamma, br#"{"options":{"endSession":1}}"#).is_err());
        assert!(decode(Profile::Gamma, br#"{"options":{"endSession":null}}"#).is_ok());
        assert!(decode(Profile::Gamma, b"[]").is_err());
        assert!(decode(Profile::Gamma, b"<html>").is_err());
        assert!(judge(Profile::App, 500, b"{}").is_ok());
        assert!(judge(Profile::AppDev, 500, b"{}").is_err());
        let bad_id = br#"{"messages":[{"id":"msg-1","from":"assistant","content":"hi"}]}"#;
        assert!(decode(Profile::Gamma, bad_id).is_err());
    }

    /// One UTF-8 byte order mark at the very start is skipped, as Foundation's `JSONDecoder`
    /// skips it; a second one, or one after whitespace, is refused naming the mark.
    #[test]
    fn a_leading_byte_order_mark_is_skipped_as_the_apps_decoder_skips_it() {
        let reply = br#"{"messages":[{"id":"D2DF7849-0000-4000-8000-000000000000","from":"assistant","content":"hi","sources":[]}]}"#;
        let with_bom = [UTF8_BOM, reply.as_slice()].concat();
        assert_eq!(
            decode(Profile::Gamma, &with_bom).unwrap(),
            decode(Profile::Gamma, reply).unwrap()
        );
        assert!(starts_with_bom(&with_bom) && !starts_with_bom(reply));
        assert_eq!(
            decode(Profile::Gamma, UTF8_BOM).unwrap_err(),
            "empty body",
            "a mark alone is an empty body"
        );
        let twice = [UTF8_BOM, UTF8_BOM, b"{}"].concat();
        let e = decode(Profile::Gamma, &twice).unwrap_err();
        assert!(e.starts_with("a second UTF-8 byte order mark"), "{e}");
        let after_ws = [b" ".as_slice(), UTF8_BOM, b"{}"].concat();
        let e = decode(Profile::Gamma, &after_ws).unwrap_err();
        assert!(
            e.contains("byte order mark (U+FEFF) after whitespace"),
            "{e}"
        );
    }
}
