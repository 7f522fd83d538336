//! WebSocket framing (RFC 6455 §5) for the recording proxy, which relays raw bytes and reads
//! the frames back off the forwarding path.
//!
//! * [`Boundary`]: where frames end in a relayed byte stream, from headers only (the
//!   forwarding path uses it to know when a close frame can be inserted on shutdown);
//! * [`FrameParser`]: messages out of one direction's byte stream, fed in chunks as they were
//!   read from the socket (a frame may be split across chunks, a chunk may hold many frames):
//!   unmasks client frames, joins fragmented messages, skips ping and pong frames (also when
//!   they interleave a fragmented message) and reports a close frame (its payload dropped:
//!   the recorder keeps that the side closed, not its code or reason).
//!
//! No extension is supported: the proxy strips `Sec-WebSocket-Extensions` from the upgrade
//! request, so a frame with a reserved bit set is a protocol error.

use axum::body::Bytes;

/// Largest message recorded (a frame or the join of a fragmented message): the limit
/// tungstenite, the proxy's codec before, applied.
pub const MAX_MESSAGE: u64 = 64 << 20;

/// A complete data message, or a close frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Text(Bytes),
    Binary(Bytes),
    /// The side sent a close frame (RFC 6455 §5.5.1): it ends the connection.
    Close,
}

/// Why a stream stopped being parsed (the bytes are still relayed; the peer judges them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// A reserved bit set (no extension was negotiated).
    Reserved(u8),
    /// An opcode RFC 6455 does not define.
    Opcode(u8),
    /// A continuation frame with no message to continue, or a data frame inside one.
    Fragmentation,
    /// A control frame longer than 125 bytes or fragmented.
    Control,
    /// A message past [`MAX_MESSAGE`].
    TooBig(u64),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Reserved(b) => write!(f, "reserved bits {b:#x} set (no extension)"),
            FrameError::Opcode(o) => write!(f, "undefined opcode {o:#x}"),
            FrameError::Fragmentation => write!(f, "continuation frame out of order"),
            FrameError::Control => write!(f, "control frame fragmented or over 125 bytes"),
            FrameError::TooBig(n) => write!(f, "message of {n} bytes (limit {MAX_MESSAGE})"),
        }
    }
}

/// A frame header: its length in bytes and the payload's, once `buf` holds all of it.
struct Header {
    fin: bool,
    rsv: u8,
    opcode: u8,
    mask: Option<[u8; 4]>,
    len: usize,
    payload: u64,
}

/// Parses a header from the start of `buf`; `None` while it is incomplete.
fn header(buf: &[u8]) -> Option<Header> {
    if buf.len() < 2 {
        return None;
    }
    let (b0, b1) = (buf[0], buf[1]);
    let masked = b1 & 0x80 != 0;
    let (ext, payload) = match b1 & 0x7f {
        126 => (
            2,
            u16::from_be_bytes(buf.get(2..4)?.try_into().ok()?) as u64,
        ),
        127 => (8, u64::from_be_bytes(buf.get(2..10)?.try_into().ok()?)),
        n => (0, n as u64),
    };
    let len = 2 + ext + if masked { 4 } else { 0 };
    if buf.len() < len {
        return None;
    }
    let mask = masked.then(|| buf[len - 4..len].try_into().expect("4 bytes"));
    Some(Header {
        fin: b0 & 0x80 != 0,
        rsv: b0 & 0x70,
        opcode: b0 & 0x0f,
        mask,
        len,
        payload,
    })
}

/// Tracks frame boundaries in a byte stream from the headers alone (payloads are skipped, not
/// read): cheap enough for the forwarding path.
#[derive(Debug, Default)]
pub struct Boundary {
    hdr: [u8; 14],
    have: usize,
    skip: u64,
}

impl Boundary {
    /// Moves past `data`, the next bytes of the stream.
    pub fn advance(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.skip > 0 {
                let n = (self.skip.min(data.len() as u64)) as usize;
                self.skip -= n as u64;
                data = &data[n..];
                continue;
            }
            self.hdr[self.have] = data[0];
            self.have += 1;
            data = &data[1..];
            if let Some(h) = header(&self.hdr[..self.have]) {
                self.skip = h.payload;
                self.have = 0;
            }
        }
    }

    /// No frame is partly through: a new frame may start here.
    pub fn at_boundary(&self) -> bool {
        self.have == 0 && self.skip == 0
    }
}

/// A message a stream ended inside of: its kind, the payload that came (unmasked: the
/// fragments so far and the current frame's part) and the length its headers declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    pub text: bool,
    pub got: Vec<u8>,
    pub declared: u64,
}

/// One direction's messages, parsed from its bytes in the order they were read.
#[derive(Debug, Default)]
pub struct FrameParser {
    /// Bytes of a frame not complete yet (empty between frames on the common path).
    carry: Vec<u8>,
    /// The message being joined from fragments: (text, payload so far).
    fragments: Option<(bool, Vec<u8>)>,
    /// Set on a protocol error: later bytes are not parsed.
    failed: Option<FrameError>,
}

impl FrameParser {
    pub fn new() -> FrameParser {
        FrameParser::default()
    }

    /// Part of a message has come and the rest has not (a frame cut by the chunking, or a
    /// message's first fragments).
    pub fn mid_message(&self) -> bool {
        !self.carry.is_empty() || self.fragments.is_some()
    }

    /// The message the stream stopped inside of, once its frame's header came (`None` between
    /// messages, inside a header, or after an error).
    pub fn cut(&self) -> Option<Cut> {
        if self.failed.is_some() {
            return None;
        }
        // Any control frame left here is incomplete and not part of the message.
        let current = header(&self.carry).filter(|h| h.opcode & 0x08 == 0);
        let (text, mut got) = match (&self.fragments, &current) {
            (Some((text, b)), _) => (*text, b.clone()),
            (None, Some(h)) if h.opcode == 1 || h.opcode == 2 => (h.opcode == 1, Vec::new()),
            _ => return None,
        };
        let mut declared = got.len() as u64;
        if let Some(h) = current {
            // The carry holds less than the frame (a whole one would have been parsed).
            let part = &self.carry[h.len..];
            append_unmasked(
                &mut got,
                &part[..part.len().min(h.payload as usize)],
                h.mask,
            );
            declared += h.payload;
        }
        Some(Cut {
            text,
            got,
            declared,
        })
    }

    /// The error that stopped parsing, if any.
    pub fn failed(&self) -> Option<&FrameError> {
        self.failed.as_ref()
    }

    /// Parses the next bytes of the stream, calling `out` with each message completed.
    /// After an error, nothing more is parsed (and the error is returned once).
    pub fn feed(&mut self, chunk: &Bytes, out: &mut impl FnMut(Message)) -> Result<(), FrameError> {
        if self.failed.is_some() {
            return Ok(());
        }
        let r = if self.carry.is_empty() {
            // The common path: whole frames in the chunk, unmasked payloads shared with it.
            let used = self.parse(chunk, Some(chunk), out);
            if let Ok(n) = used {
                self.carry.extend_from_slice(&chunk[n..]);
            }
            used.map(|_| ())
        } else {
            let mut carry = std::mem::take(&mut self.carry);
            carry.extend_from_slice(chunk);
            let used = self.parse(&carry, None, out);
            if let Ok(n) = used {
                carry.drain(..n);
                self.carry = carry;
            }
            used.map(|_| ())
        };
        if let Err(e) = &r {
            self.failed = Some(e.clone());
            self.carry = Vec::new();
            self.fragments = None;
        }
        r
    }

    /// Parses the complete frames at the start of `buf` (`shared`: the same bytes, to slice
    /// payloads from without a copy); returns how many bytes they took.
    fn parse(
        &mut self,
        buf: &[u8],
        shared: Option<&Bytes>,
        out: &mut impl FnMut(Message),
    ) -> Result<usize, FrameError> {
        let mut at = 0;
        while let Some(h) = header(&buf[at..]) {
            if h.rsv != 0 {
                return Err(FrameError::Reserved(h.rsv));
            }
            let control = h.opcode & 0x08 != 0;
            if control && (!h.fin || h.payload > 125) {
                return Err(FrameError::Control);
            }
            let joined = self.fragments.as_ref().map_or(0, |(_, b)| b.len() as u64);
            if h.payload.saturating_add(joined) > MAX_MESSAGE {
                return Err(FrameError::TooBig(h.payload.saturating_add(joined)));
            }
            let end = at + h.len + h.payload as usize;
            if buf.len() < end {
                break;
            }
            let body = at + h.len..end;
            at = end;
            let payload = |buf: &[u8]| -> Bytes {
                match (h.mask, shared) {
                    (None, Some(s)) => s.slice(body.clone()),
                    (None, None) => Bytes::copy_from_slice(&buf[body.clone()]),
                    (Some(m), _) => Bytes::from(unmask(&buf[body.clone()], m)),
                }
            };
            match h.opcode {
                0x8 => out(Message::Close),
                0x9 | 0xa => {}
                0x1 | 0x2 => {
                    if self.fragments.is_some() {
                        return Err(FrameError::Fragmentation);
                    }
                    let text = h.opcode == 1;
                    if h.fin {
                        let p = payload(buf);
                        out(if text {
                            Message::Text(p)
                        } else {
                            Message::Binary(p)
                        });
                    } else {
                        let mut b = Vec::new();
                        append_unmasked(&mut b, &buf[body], h.mask);
                        self.fragments = Some((text, b));
                    }
                }
                0x0 => {
                    let Some((text, mut b)) = self.fragments.take() else {
                        return Err(FrameError::Fragmentation);
                    };
                    append_unmasked(&mut b, &buf[body], h.mask);
                    if h.fin {
                        let p = Bytes::from(b);
                        out(if text {
                            Message::Text(p)
                        } else {
                            Message::Binary(p)
                        });
                    } else {
                        self.fragments = Some((text, b));
                    }
                }
                op => return Err(FrameError::Opcode(op)),
            }
        }
        // A header already past the limit is refused before its payload arrives.
        if let Some(h) = header(&buf[at..]) {
            let joined = self.fragments.as_ref().map_or(0, |(_, b)| b.len() as u64);
            if h.payload.saturating_add(joined) > MAX_MESSAGE {
                return Err(FrameError::TooBig(h.payload.saturating_add(joined)));
            }
        }
        Ok(at)
    }
}

fn unmask(data: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let mut v = Vec::with_capacity(data.len());
    append_unmasked(&mut v, data, Some(mask));
    v
}

fn append_unmasked(to: &mut Vec<u8>, data: &[u8], mask: Option<[u8; 4]>) {
    let start = to.len();
    to.extend_from_slice(data);
    if let Some(m) = mask {
        for (i, b) in to[start..].iter_mut().enumerate() {
            *b ^= m[i & 3];
        }
    }
}

/// Encodes one frame (for tests and for the close frames the proxy sends when it stops).
pub fn encode(fin: bool, opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut v = Vec::with_capacity(payload.len() + 14);
    v.push(if fin { 0x80 } else { 0 } | (opcode & 0x0f));
    let m = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => v.push(m | n as u8),
        n if n <= 0xffff => {
            v.push(m | 126);
            v.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            v.push(m | 127);
            v.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if let Some(k) = mask {
        v.extend_from_slice(&k);
    }
    append_unmasked(&mut v, payload, mask);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_in(chunks: &[&[u8]]) -> (Vec<Message>, Result<(), FrameError>) {
        let mut p = FrameParser::new();
        let mut got = Vec::new();
        let mut r = Ok(());
        for c in chunks {
            r = r.and(p.feed(&Bytes::copy_from_slice(c), &mut |m| got.push(m)));
        }
        (got, r)
    }

    fn text(s: &str) -> Message {
        Message::Text(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn frames_parse_whatever_the_chunking() {
        let key = Some([0x12, 0x34, 0x56, 0x78]);
        let long = "x".repeat(70_000);
        let mid = "y".repeat(300);
        let mut stream = Vec::new();
        stream.extend(encode(true, 1, b"42[\"a\"]", key));
        stream.extend(encode(true, 9, b"ping", key));
        // A fragmented text message with a ping between its fragments.
        stream.extend(encode(false, 1, b"42[\"fr", key));
        stream.extend(encode(true, 10, b"", key));
        stream.extend(encode(false, 0, b"agm", key));
        stream.extend(encode(true, 0, b"ent\"]", key));
        stream.extend(encode(true, 2, &[0, 1, 2, 255], None));
        stream.extend(encode(true, 1, long.as_bytes(), None));
        stream.extend(encode(true, 1, mid.as_bytes(), key));
        stream.extend(encode(true, 8, &[3, 232], key));
        let want = vec![
            text("42[\"a\"]"),
            text("42[\"fragment\"]"),
            Message::Binary(Bytes::from_static(&[0, 1, 2, 255])),
            text(&long),
            text(&mid),
            // The close frame: reported (the recorder writes the connection's end), its code
            // and reason dropped.
            Message::Close,
        ];
        // Whole, byte by byte, and in every two-way split.
        assert_eq!(feed_in(&[&stream]), (want.clone(), Ok(())));
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(feed_in(&bytes), (want.clone(), Ok(())));
        for cut in (0..stream.len()).step_by(97) {
            let (a, b) = stream.split_at(cut);
            assert_eq!(feed_in(&[a, b]), (want.clone(), Ok(())), "cut at {cut}");
        }
        // Boundaries: only at frame ends.
        let mut b = Boundary::default();
        let first = encode(true, 1, long.as_bytes(), key);
        b.advance(&first[..5]);
        assert!(!b.at_boundary());
        b.advance(&first[5..first.len() - 1]);
        assert!(!b.at_boundary());
        b.advance(&first[first.len() - 1..]);
        assert!(b.at_boundary());
        let mut b = Boundary::default();
        for c in stream.chunks(7) {
            b.advance(c);
        }
        assert!(b.at_boundary());
    }

    #[test]
    fn protocol_errors_stop_parsing_with_their_cause() {
        let cases: Vec<(Vec<u8>, FrameError)> = vec![
            // Compressed (RSV1) frame: no extension was negotiated.
            ([0xc1u8, 0x01, b'x'].to_vec(), FrameError::Reserved(0x40)),
            ([0x83u8, 0x00].to_vec(), FrameError::Opcode(3)),
            (encode(true, 0, b"x", None), FrameError::Fragmentation),
            (
                [encode(false, 1, b"a", None), encode(true, 2, b"b", None)].concat(),
                FrameError::Fragmentation,
            ),
            (encode(false, 9, b"", None), FrameError::Control),
            (encode(true, 9, &[0; 126], None), FrameError::Control),
            (
                [0x81u8, 127, 0, 0, 0, 0, 0x10, 0, 0, 0].to_vec(),
                FrameError::TooBig(1 << 28),
            ),
        ];
        for (bytes, want) in cases {
            let (got, r) = feed_in(&[&bytes, &encode(true, 1, b"after", None)]);
            assert_eq!(r, Err(want.clone()), "{bytes:?}");
            assert!(got.is_empty(), "{want}: {got:?}");
        }
    }

    /// A stream that ends inside a message says what came of it: a masked frame cut in its
    /// payload (unmasked, the length its header declared), a fragmented message cut in a
    /// continuation (the fragments joined), nothing between messages or inside a header.
    #[test]
    fn a_stream_ended_inside_a_message_names_its_start_and_length() {
        let key = Some([9, 8, 7, 6]);
        let frame = encode(true, 1, "hello, world".as_bytes(), key);
        let mut p = FrameParser::new();
        let mut got = Vec::new();
        p.feed(&Bytes::copy_from_slice(&frame[..2 + 4 + 5]), &mut |m| {
            got.push(m)
        })
        .unwrap();
        assert!(got.is_empty());
        assert_eq!(
            p.cut(),
            Some(Cut {
                text: true,
                got: b"hello".to_vec(),
                declared: 12
            })
        );
        // Fragments: "ab" whole, then a continuation cut after one byte of three.
        let mut p = FrameParser::new();
        let mut bytes = encode(false, 2, b"ab", None);
        bytes.extend(&encode(true, 0, b"cde", None)[..3]);
        p.feed(&Bytes::from(bytes), &mut |m| got.push(m)).unwrap();
        assert_eq!(
            p.cut(),
            Some(Cut {
                text: false,
                got: b"abc".to_vec(),
                declared: 5
            })
        );
        // Between messages, and one byte into a header: nothing.
        let mut p = FrameParser::new();
        p.feed(&Bytes::from(encode(true, 1, b"x", None)), &mut |m| {
            got.push(m)
        })
        .unwrap();
        assert_eq!(p.cut(), None);
        p.feed(&Bytes::from_static(&[0x81]), &mut |m| got.push(m))
            .unwrap();
        assert_eq!(p.cut(), None);
    }
}
