//! Differential test of the Socket.IO decoder (`src/bridle/wire.rs`) against the canonical JS
//! decoder, `socket.io-parser`'s `Decoder#decodeString` (tests/node/node_modules, run by
//! tests/node/sio-decode.js): the same packet texts, the same accept/reject, and for accepted
//! ones the same type, namespace, ack id, attachment count and data.
//!
//! The texts: a table of headers the JS decoder is lax or strict about (`3 1`, `""`, `0[]`,
//! `1{}`, `2[1]`, `50-…`, ids with spaces…) and a deterministic sample of every combination of
//! type, attachment header, namespace, id and payload pieces. JSON the two parsers read
//! differently by design (lone surrogates, numbers beyond f64, nesting past 128) is left out.

use bridgewire::bridle::wire::SioPacket;
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};

mod common;
use common::need::node_dir;

/// The packet texts: the table, then a sample of the product of the pieces.
fn corpus() -> Vec<String> {
    let mut texts: Vec<String> = [
        "3 1",
        "3 1[]",
        "31[]",
        "3[]",
        "3",
        "",
        " ",
        "\t{}",
        "\u{a0}",
        "\u{85}",
        "\u{feff}",
        "2[\"a\"]",
        "2",
        "2[]",
        "2[1]",
        "2[1.5,\"x\"]",
        "2[\"connect\"]",
        "2[\"disconnecting\"]",
        "2[\"connect \"]",
        "2{}",
        "2\"a\"",
        "0",
        "0/a",
        "0/a,",
        "0/a,{}",
        "0{}",
        "0[]",
        "0null",
        "0\"x\"",
        "1",
        "1/a,",
        "1{}",
        "1/a,null",
        "4\"x\"",
        "4{}",
        "4[]",
        "41",
        "51-[\"a\"]",
        "50-[\"a\"]",
        "510-[\"a\"]",
        "511-[\"a\"]",
        "5 1-[\"a\"]",
        "51.0-[\"a\"]",
        "50x1-[\"a\"]",
        "51e0-[\"a\"]",
        "5+1-[\"a\"]",
        "5-[\"a\"]",
        "51[\"a\"]",
        "5x-[]",
        "61-[]",
        "61-{}",
        "2 [\"a\"]",
        "21 2[\"a\"]",
        "2 7[\"a\"]",
        "27 [\"a\"]",
        "2007[\"a\"]",
        "299999999999999999999999[\"a\"]",
        "3/a,1[]",
        "2/a,x",
        "2/a[\"x\"]",
        "2/a,7[\"x\"]",
        "2/,[\"x\"]",
        "2/é,[\"x\"]",
        "9",
        "7",
        "a",
        "é",
        "😀",
        "2[\"a\"] ",
        "2 [\"a\"] ",
        "2[\"a\",{\"b\":[1.5,-0,1e21,1e-7]}]",
        "0{\"a\":1,\"a\":2}",
        "2[\"a\"]x",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let kinds = [
        "", "0", "1", "2", "3", "4", "5", "6", "7", " ", "\t", "x", "\u{a0}",
    ];
    let binary = [
        "", "1-", "0-", "10-", "11-", " 1-", "1.5-", "0x2-", "1e0-", "-", "x-", "1",
    ];
    let nsps = ["", "/", "/a", "/a,", "/ws/client,", "/a,b", "/a b,"];
    let ids = [
        "",
        "1",
        "12",
        " 1",
        "1 2",
        " ",
        "007",
        "99999999999999999999",
        "\u{3000}4",
    ];
    let data = [
        "",
        "{}",
        "[]",
        "[\"a\"]",
        "[1]",
        "[\"connect\"]",
        "\"x\"",
        "null",
        "false",
        "1",
        "{\"a\":1}",
        "[\"a\",{\"b\":[1.5,-0]}]",
        "{",
        "x",
        " [\"a\"]",
        "[\"newListener\",1]",
        "[\"a\"] ",
        "[\"a\"]]",
    ];
    let total = kinds.len() * binary.len() * nsps.len() * ids.len() * data.len();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..6000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut n = (x % total as u64) as usize;
        let mut pick = |len: usize| {
            let i = n % len;
            n /= len;
            i
        };
        let (k, b, s, i, d) = (
            pick(kinds.len()),
            pick(binary.len()),
            pick(nsps.len()),
            pick(ids.len()),
            pick(data.len()),
        );
        texts.push(format!(
            "{}{}{}{}{}",
            kinds[k], binary[b], nsps[s], ids[i], data[d]
        ));
    }
    texts
}

/// Our decoding in the JS script's terms (`None`: refused, with why).
fn ours(text: &str) -> Result<Value, String> {
    let p = SioPacket::decode(text).map_err(|e| e.to_string())?;
    // The ack id as JS writes a number: the encoder's text after the type, attachments and
    // namespace.
    let id = p.ack.map(|_| {
        let mut bare = p.clone();
        bare.nsp = "/".into();
        bare.data = None;
        bare.attachments = 0;
        bare.kind = bridgewire::bridle::wire::SioType::Ack;
        bare.encode()[1..].to_string()
    });
    Ok(serde_json::json!({
        "type": p.kind as u8,
        "nsp": p.nsp,
        "id": id,
        "attachments": p.attachments,
        "data": p.data.as_ref().map(bridgewire::jsjson::to_string),
    }))
}

#[test]
fn the_socket_io_decoder_agrees_with_socket_io_parser() {
    if !common::need::node_packages(
        "the_socket_io_decoder_agrees_with_socket_io_parser",
        &["socket.io-parser"],
    ) {
        return;
    }
    let texts = corpus();
    let mut child = Command::new("node")
        .arg("sio-decode.js")
        .current_dir(node_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node runs");
    let input: String = texts
        .iter()
        .map(|t| serde_json::to_string(t).unwrap() + "\n")
        .collect();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "node: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let js: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(js.len(), texts.len(), "one answer per packet text");
    let (mut accepted, mut refused) = (0, 0);
    let mut problems = Vec::new();
    for (text, js) in texts.iter().zip(&js) {
        match (ours(text), js.get("ok")) {
            (Ok(mine), Some(theirs)) => {
                accepted += 1;
                if &mine != theirs {
                    problems.push(format!("{text:?}: ours {mine}, socket.io-parser {theirs}"));
                }
            }
            (Err(_), None) => refused += 1,
            (Ok(mine), None) => problems.push(format!(
                "{text:?}: ours accepts ({mine}), socket.io-parser refuses ({})",
                js["err"]
            )),
            (Err(e), Some(theirs)) => problems.push(format!(
                "{text:?}: ours refuses ({e}), socket.io-parser accepts ({theirs})"
            )),
        }
    }
    assert!(
        problems.is_empty(),
        "{} disagreement(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
    // Both sides of the comparison were exercised.
    assert!(
        accepted > 100 && refused > 100,
        "{accepted} accepted, {refused} refused"
    );
}
