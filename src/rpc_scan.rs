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
        match key {
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
                        if k == b"threadId" {
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

/// The end (exclusive) of the JSON value starting at `start` (after whitespace), with no
/// recursion; `None` when it is not a complete value.
pub fn value_end(line: &[u8], start: usize) -> Option<usize> {
    let mut s = Scanner { b: line, i: start };
    s.skip_value()?;
    Some(s.i)
}

/// How deep [`any_key`] looks for keys (its walk recurses, so this bounds its stack).
pub const MAX_KEY_DEPTH: usize = 128;

/// Whether any object key anywhere in the JSON text satisfies `pred` (false for non-JSON). One
/// structural pass that skips string values with memchr: the redaction pre-filter.
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
    walk(&mut s, pred, &mut found, 0).is_some() && found
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

    /// Walks an object, calling `f` with each raw key (escapes are rare in keys; a key with an
    /// escape is compared in its raw form, which only matters for exotic spellings).
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
    fn string_span(&mut self) -> Option<(usize, usize)> {
        if self.peek()? != b'"' {
            return None;
        }
        self.i += 1;
        let start = self.i;
        loop {
            let rel = memchr::memchr2(b'"', b'\\', &self.b[self.i..])?;
            self.i += rel;
            if self.b[self.i] == b'\\' {
                self.i += 2;
                if self.i > self.b.len() {
                    return None;
                }
            } else {
                let end = self.i;
                self.i += 1;
                // Raw control characters inside a *skipped* string are not checked: the scan
                // only needs the structure, and checking every byte of every payload would cost
                // the recorder a pass over the whole line. Extracted values are checked.
                return Some((start, end));
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
