//! Secrets sweep (issue 15, item 4): known secrets are planted in every position a client,
//! a bridge or a fixture may put them; each protocol records through bridgewire and `check bb`
//! writes every report format; then the whole output tree (and stdout/stderr) is searched.
//! The expected count is 0 hits, and each test also asserts the traffic really crossed (so a
//! run that recorded nothing cannot pass).
//!
//! The upstream servers here are Python stdlib programs, not bridgewire's reference peers.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BRIDGEWIRE: &str = env!("CARGO_BIN_EXE_bridgewire");

/// Every file under `root` (raw bytes, plus decoded `lineBase64`/`bodyBase64` values), then
/// the extra texts: the secrets found, with where.
fn sweep(root: &Path, extra: &[(&str, &[u8])], secrets: &[&str]) -> Vec<String> {
    let mut hits = Vec::new();
    let mut check = |what: &str, bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        for s in secrets {
            if text.contains(s) {
                hits.push(format!("{s} in {what}"));
            }
        }
    };
    for e in walkdir::WalkDir::new(root).into_iter().flatten() {
        if !e.file_type().is_file() {
            continue;
        }
        let bytes = std::fs::read(e.path()).unwrap();
        check(&e.path().display().to_string(), &bytes);
        for l in bytes.split(|&b| b == b'\n') {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(l) {
                for k in ["lineBase64", "bodyBase64"] {
                    if let Some(b) = v[k].as_str() {
                        check(
                            &format!("{} ({k})", e.path().display()),
                            &bridgewire::util::base64_decode(b).unwrap_or_default(),
                        );
                    }
                }
                // A Side Bridge envelope quotes the body as text inside the lane line.
                if let Some(line) = v["line"].as_str()
                    && let Ok(env) = serde_json::from_str::<serde_json::Value>(line)
                    && let Some(b) = env["bodyBase64"].as_str()
                {
                    check(
                        &format!("{} (envelope bodyBase64)", e.path().display()),
                        &bridgewire::util::base64_decode(b).unwrap_or_default(),
                    );
                }
            }
        }
    }
    for (what, bytes) in extra {
        check(what, bytes);
    }
    hits
}

fn files_under(root: &Path) -> usize {
    walkdir::WalkDir::new(root)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .count()
}

/// Starts a program that prints its URL as the first stdout line.
fn start(mut cmd: Command) -> (Child, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    (child, first.trim().trim_end_matches('/').to_string())
}

fn stop(mut child: Child) -> Vec<u8> {
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.wait();
    let mut err = Vec::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_end(&mut err);
    }
    err
}

/// One raw HTTP/1.1 exchange (Connection: close); returns the whole response.
fn http(base: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> String {
    let addr = base.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// A Side Bridge-shaped upstream (Python stdlib, not ours) that echoes the request (body and
/// every header) back in its message text and sets a cookie.
const ECHO_SERVER: &str = r#"
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        n = int(self.headers.get("content-length", 0))
        body = self.rfile.read(n).decode("utf-8", "replace")
        text = "you sent " + body + " with " + repr(dict(self.headers)) + " to " + self.path
        out = json.dumps({"messages": [{"id": "A", "from": "assistant", "content": text, "sources": []}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("set-cookie", "session=S3CR3T-setcookie-0009")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print("http://127.0.0.1:%d/" % s.server_address[1], flush=True)
s.serve_forever()
"#;

/// issue 15: `record sidebridge` recorded the key in the query string and the `Cookie`,
/// `X-Api-Key` and `Proxy-Authorization` headers.
#[test]
fn record_sidebridge_keeps_no_credential() {
    let secrets = [
        "S3CR3T-query-0001",
        "S3CR3T-cookie-0002",
        "S3CR3T-xapikey-0003",
        "S3CR3T-proxyauth-0004",
        "S3CR3T-sbkey-0005",
        "S3CR3T-body-0006",
        "S3CR3T-bearer-0007",
        "S3CR3T-setcookie-0009",
    ];
    let t = tempfile::tempdir().unwrap();
    let mut up = Command::new("python3");
    up.args(["-c", ECHO_SERVER]);
    let (upstream, up_url) = start(up);
    let mut rec = Command::new(BRIDGEWIRE);
    rec.args(["record", "sidebridge", "--upstream", &format!("{up_url}/")])
        .arg("--dir")
        .arg(t.path());
    let (proxy, url) = start(rec);
    let body = r#"{"chatId":"c1","text":"hello","apiKey":"S3CR3T-body-0006","messages":[]}"#;
    let reply = http(
        &url,
        "POST",
        "/?key=S3CR3T-query-0001&mode=x",
        &[
            ("Content-Type", "application/json"),
            ("Cookie", "sid=S3CR3T-cookie-0002; theme=dark"),
            ("X-Api-Key", "S3CR3T-xapikey-0003"),
            ("Proxy-Authorization", "Basic S3CR3T-proxyauth-0004"),
            ("x-sidebridge-key", "S3CR3T-sbkey-0005"),
            ("Authorization", "Bearer S3CR3T-bearer-0007"),
        ],
        body,
    );
    assert!(
        reply.starts_with("HTTP/1.1 200") && reply.contains("S3CR3T-cookie-0002"),
        "the exchange crossed unchanged: {reply}"
    );
    let err = stop(proxy);
    let _ = stop(upstream);
    assert!(files_under(t.path()) >= 2, "both lanes were written");
    let hits = sweep(t.path(), &[("stderr", &err)], &secrets);
    assert!(hits.is_empty(), "secrets on disk: {hits:#?}");
}

/// issue 15: `record bridle` recorded an apiKey or a JWT inside an HTTP API body.
#[test]
fn record_bridle_keeps_no_credential_in_http_api_bodies() {
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJTM0NSM1Qtand0In0.S3CR3Tsignature0008xx";
    let secrets = ["S3CR3T-apikey-0010", jwt, "S3CR3T-token-0011"];
    let t = tempfile::tempdir().unwrap();
    let mut hub = Command::new(env!("CARGO_BIN_EXE_bridle-ref-hub"));
    hub.args(["--listen", "127.0.0.1:0"]);
    let (hub, hub_url) = start(hub);
    let mut rec = Command::new(BRIDGEWIRE);
    rec.args(["record", "bridle", "--upstream", &hub_url])
        .arg("--dir")
        .arg(t.path());
    let (proxy, url) = start(rec);
    let body = format!(
        r#"{{"text":"hello","apiKey":"S3CR3T-apikey-0010","jwt":"{jwt}","meta":{{"auth":{{"token":"S3CR3T-token-0011"}}}}}}"#
    );
    let reply = http(
        &url,
        "POST",
        "/api/agent/a1/message",
        &[("Content-Type", "application/json")],
        &body,
    );
    assert!(reply.starts_with("HTTP/1.1"), "{reply}");
    let err = stop(proxy);
    let _ = stop(hub);
    assert!(files_under(t.path()) >= 1, "the HTTP API lane was written");
    let hits = sweep(t.path(), &[("stderr", &err)], &secrets);
    assert!(hits.is_empty(), "secrets on disk: {hits:#?}");
}

/// issue 15: `check bb` wrote its fixture's secrets (apiKey, env, Authorization) into its JSON,
/// JUnit and HTML reports. Every format is written, from a failing run (so frames are quoted).
#[test]
fn check_bb_reports_carry_no_fixture_secret() {
    let secrets = [
        "S3CR3T-fixture-apikey-01",
        "S3CR3T-fixture-env-02",
        "S3CR3T-fixture-bearer-03",
    ];
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join(".git")).unwrap();
    std::fs::write(
        t.path().join("bridgewire.toml"),
        r#"[bb.fixture]
options = { permissionMode = "full", apiKey = "S3CR3T-fixture-apikey-01", env = { GH_TOKEN = "S3CR3T-fixture-env-02" }, headers = { Authorization = "Bearer S3CR3T-fixture-bearer-03" } }
"#,
    )
    .unwrap();
    let out_dir = t.path().join("reports");
    let mut outputs = Vec::new();
    for format in ["json", "text"] {
        let out = Command::new(BRIDGEWIRE)
            .args(["check", "bb", "--timeout-ms", "2000", "--format", format])
            .arg("--junit")
            .arg(out_dir.join(format!("{format}.xml")))
            .arg("--markdown")
            .arg(out_dir.join(format!("{format}.md")))
            .arg("--html")
            .arg(out_dir.join(format!("{format}.html")))
            .args(["--", env!("CARGO_BIN_EXE_bb-ref-bridge")])
            .env(
                "BB_REF_PROVIDER_COMMAND",
                env!("CARGO_BIN_EXE_bb-ref-provider"),
            )
            .env("BB_REF_BRIDGE_BREAK", "no-turn-completed")
            .current_dir(t.path())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        outputs.push((format, out));
    }
    assert_eq!(files_under(&out_dir), 6, "every report file was written");
    let extra: Vec<(String, Vec<u8>)> = outputs
        .iter()
        .flat_map(|(f, o)| {
            [
                (format!("{f} stdout"), o.stdout.clone()),
                (format!("{f} stderr"), o.stderr.clone()),
            ]
        })
        .collect();
    let extra: Vec<(&str, &[u8])> = extra
        .iter()
        .map(|(w, b)| (w.as_str(), b.as_slice()))
        .collect();
    let hits = sweep(&out_dir, &extra, &secrets);
    assert!(hits.is_empty(), "secrets in reports: {hits:#?}");
    // The reports are private.
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(&out_dir).unwrap().flatten() {
        let mode = e.metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", e.path().display());
    }
}

/// Lanes are created 0600 in 0700 folders unless `--mode` says otherwise.
#[test]
fn lanes_are_private_unless_mode_says_otherwise() {
    use std::os::unix::fs::PermissionsExt;
    for (mode, file, dir) in [(None, 0o600, 0o700), (Some("644"), 0o644, 0o755)] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("rec");
        let mut cmd = Command::new(BRIDGEWIRE);
        cmd.args(["record", "bb", "--dir"]).arg(&root);
        if let Some(m) = mode {
            cmd.args(["--mode", m]);
        }
        let mut child = cmd
            .args(["--", "cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":{\"threadId\":\"t1\"}}\n")
            .unwrap();
        assert!(child.wait().unwrap().success());
        let m = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(m(&root), dir, "root, --mode {mode:?}");
        assert_eq!(m(&root.join("t1")), dir, "scope folder, --mode {mode:?}");
        assert_eq!(
            m(&root.join("t1/runtime→bridge.ndjson")),
            file,
            "lane, --mode {mode:?}"
        );
    }
}
