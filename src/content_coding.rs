//! HTTP `Content-Encoding` undone, as HTTP clients do: `gzip` (`x-gzip`), `deflate` (zlib, or
//! raw deflate as some servers send it) and `br`, in the reverse of the order they were
//! applied; `identity` is none. Protocol-agnostic: Side Bridge's client and the recording
//! proxies read bodies through it.

use std::io::Read;

/// Why a body's coding could not be undone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodingError {
    /// A coding this decoder does not know (named).
    Unknown(String),
    /// The body is not valid for its coding: the coding and the decoder's error.
    Corrupt(String, String),
    /// Decoded past the limit (a compression bomb is cut off there).
    TooLarge(usize),
}

/// The codings `headers` name, in the order they were applied (`identity` left out).
pub fn codings(headers: &[(String, String)]) -> Vec<String> {
    headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("content-encoding"))
        .flat_map(|(_, v)| v.split(','))
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c != "identity")
        .collect()
}

/// The codings of `headers` as a recording names them (`"gzip"`, `"gzip, br"`), or `None`.
pub fn coding_name(headers: &[(String, String)]) -> Option<String> {
    let names = codings(headers);
    (!names.is_empty()).then(|| names.join(", "))
}

/// `body` with every coding of `headers` undone; decoded output is bounded by `max_body`.
pub fn decode(
    headers: &[(String, String)],
    mut body: Vec<u8>,
    max_body: usize,
) -> Result<Vec<u8>, CodingError> {
    for coding in codings(headers).iter().rev() {
        let mut out = Vec::new();
        let read =
            |r: &mut dyn Read, out: &mut Vec<u8>| r.take(max_body as u64 + 1).read_to_end(out);
        let result = match coding.as_str() {
            "gzip" | "x-gzip" => read(&mut flate2::read::MultiGzDecoder::new(&body[..]), &mut out),
            "deflate" => {
                read(&mut flate2::read::ZlibDecoder::new(&body[..]), &mut out).or_else(|_| {
                    out.clear();
                    read(&mut flate2::read::DeflateDecoder::new(&body[..]), &mut out)
                })
            }
            "br" => read(
                &mut brotli_decompressor::Decompressor::new(&body[..], 4096),
                &mut out,
            ),
            other => return Err(CodingError::Unknown(other.to_string())),
        };
        if let Err(e) = result {
            return Err(CodingError::Corrupt(coding.clone(), e.to_string()));
        }
        if out.len() > max_body {
            return Err(CodingError::TooLarge(max_body));
        }
        body = out;
    }
    Ok(body)
}

/// A body as a recording keeps it: decoded, with the codings undone joined (`"gzip"`), when
/// its headers name codings that decode; as sent otherwise (nothing is lost).
pub fn for_lane(
    headers: &[(String, String)],
    body: Vec<u8>,
    max_body: usize,
) -> (Vec<u8>, Option<String>) {
    let Some(name) = coding_name(headers) else {
        return (body, None);
    };
    match decode(headers, body.clone(), max_body) {
        Ok(plain) => (plain, Some(name)),
        Err(_) => (body, None),
    }
}
