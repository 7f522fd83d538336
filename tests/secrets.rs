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

mod common;

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
    let r = common::http::exchange(method, &format!("{base}{path}"), headers, body);
    format!("{}\r\n\r\n{}", r.head, String::from_utf8_lossy(&r.body))
}

/// A Python stdlib HTTP server (not ours) whose `do_POST` is `handler` (indented by 8 spaces,
/// the request's `content-length` already read into `n`): the command line to start it, which
/// prints its URL first.
fn python_post_server(handler: &str) -> Command {
    let script = format!(
        r#"
import http.server, json, gzip
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        n = int(self.headers.get("content-length", 0))
{handler}
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print("http://127.0.0.1:%d/" % s.server_address[1], flush=True)
s.serve_forever()
"#
    );
    let mut c = Command::new("python3");
    c.args(["-c", &script]);
    c
}

/// A Side Bridge-shaped upstream that echoes the request (body and every header) back in its
/// message text and sets a cookie.
fn echo_server() -> Command {
    python_post_server(
        r#"        body = self.rfile.read(n).decode("utf-8", "replace")
        text = "you sent " + body + " with " + repr(dict(self.headers)) + " to " + self.path
        out = json.dumps({"messages": [{"id": "A", "from": "assistant", "content": text, "sources": []}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("set-cookie", "session=S3CR3T-setcookie-0009")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)"#,
    )
}

/// issue 15: `record sidebridge` recorded the key in the query string and the `Cookie`,
/// `X-Api-Key` and `Proxy-Authorization` headers.
#[test]
fn record_sidebridge_keeps_no_credential() {
    // `--keep-key` keeps the key headers (x-sidebridge-key, Authorization) on purpose; every
    // other credential, and its echo in the reply, goes either way (with --keep-key the echoes
    // of Cookie / X-Api-Key / Proxy-Authorization were recorded).
    for keep_key in [false, true] {
        let mut secrets = vec![
            "S3CR3T-query-0001",
            "S3CR3T-cookie-0002",
            "S3CR3T-xapikey-0003",
            "S3CR3T-proxyauth-0004",
            "S3CR3T-body-0006",
            "S3CR3T-setcookie-0009",
        ];
        if !keep_key {
            secrets.extend(["S3CR3T-sbkey-0005", "S3CR3T-bearer-0007"]);
        }
        let t = tempfile::tempdir().unwrap();
        let up = echo_server();
        let (upstream, up_url) = start(up);
        let mut rec = Command::new(BRIDGEWIRE);
        rec.args(["record", "sidebridge", "--upstream", &format!("{up_url}/")])
            .arg("--dir")
            .arg(t.path());
        if keep_key {
            rec.arg("--keep-key");
        }
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
        assert!(
            hits.is_empty(),
            "--keep-key {keep_key}: secrets on disk: {hits:#?}"
        );
        if keep_key {
            let lanes = common::files::text_under(t.path());
            assert!(
                lanes.contains("S3CR3T-sbkey-0005"),
                "--keep-key kept the key"
            );
        }
    }
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

/// A hub's HTTP API that asks for an `Authorization` header (an extension the spec does not
/// have), echoes it in its answer, sets a cookie, and gzips the answer though the request did
/// not ask.
fn auth_gzip_api() -> Command {
    python_post_server(
        r#"        self.rfile.read(n)
        auth = self.headers.get("authorization", "")
        if auth != "Bearer S3CR3T-bearer-bridle-0012":
            status, doc = 401, {"ok": False}
        else:
            status, doc = 200, {"text": "Final answer (you sent " + auth + ")", "messageId": "", "ts": 1}
        out = gzip.compress(json.dumps(doc).encode())
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-encoding", "gzip")
        self.send_header("set-cookie", "hubsession=S3CR3T-hubcookie-0013")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)"#,
    )
}

/// `record bridle` forwards an HTTP API request's end-to-end headers (it sent only
/// `Content-Type`, so a hub asking for `Authorization` refused every request through it) and
/// returns the hub's (it returned only `Content-Type`: a gzipped answer reached the client
/// without its `Content-Encoding`). The lane holds the answer decoded, and the credential the
/// hub echoes is redacted there.
#[test]
fn record_bridle_forwards_http_api_headers_and_records_compressed_answers_decoded() {
    let secrets = ["S3CR3T-bearer-bridle-0012", "S3CR3T-hubcookie-0013"];
    let t = tempfile::tempdir().unwrap();
    let up = auth_gzip_api();
    let (upstream, up_url) = start(up);
    let mut rec = Command::new(BRIDGEWIRE);
    rec.args(["record", "bridle", "--upstream", &up_url])
        .arg("--dir")
        .arg(t.path());
    let (proxy, url) = start(rec);
    let r = common::http::post_json(
        &format!("{url}/api/agent/a1/message/sync"),
        &[("Authorization", "Bearer S3CR3T-bearer-bridle-0012")],
        r#"{"text":"hello"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.head);
    let head = r.head.to_ascii_lowercase();
    assert!(head.contains("content-encoding: gzip"), "{}", r.head);
    assert!(head.contains("set-cookie: hubsession="), "{}", r.head);
    let mut text = String::new();
    flate2::read::GzDecoder::new(&r.body[..])
        .read_to_string(&mut text)
        .unwrap();
    assert!(text.contains("Final answer"), "{text}");
    let err = stop(proxy);
    let _ = stop(upstream);
    let lanes = common::files::text_under(t.path());
    assert!(
        lanes.contains("Final answer"),
        "the answer is recorded decoded: {lanes}"
    );
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

/// Lanes and reports are created 0600 in 0700 folders unless `--mode` says otherwise: every
/// command that writes them (`record bb|sidebridge|bridle`, `rerecord bb`,
/// `replay sidebridge --write-current`, report files and dump folders).
#[test]
fn every_writer_is_private_unless_mode_says_otherwise() {
    use std::os::unix::fs::PermissionsExt;
    let m = |p: &Path| {
        std::fs::metadata(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .permissions()
            .mode()
            & 0o777
    };
    let up = echo_server();
    let (upstream, up_url) = start(up);
    let mut hub = Command::new(env!("CARGO_BIN_EXE_bridle-ref-hub"));
    hub.args([
        "--listen",
        "127.0.0.1:0",
        "--jwt-secret",
        "mode-test-jwt",
        "--api-key",
        "mode-test-key",
    ]);
    let (hub, hub_url) = start(hub);
    for (mode, file, dir) in [(None, 0o600, 0o700), (Some("644"), 0o644, 0o755)] {
        let t = tempfile::tempdir().unwrap();
        let mode_args: Vec<&str> = mode.map(|m| vec!["--mode", m]).unwrap_or_default();
        let what = format!("--mode {mode:?}");

        // record bb (py bridge), then rerecord bb of its cell.
        let bb = t.path().join("bb");
        let mut child = Command::new(BRIDGEWIRE)
            .args(["record", "bb", "--provider", "py", "--dir"])
            .arg(&bb)
            .args(&mode_args)
            .arg("--")
            .args(py_bb_bridge())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        for (line, answer) in [
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
                r#""id":1"#,
            ),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":"thread/start","params":{"threadId":"t1","cwd":"/tmp/w"}}"#,
                r#""id":2"#,
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"turn/start","params":{"threadId":"t1","input":[{"type":"text","text":"hi"}]}}"#,
                "turn.boundary",
            ),
            (
                r#"{"jsonrpc":"2.0","id":4,"method":"thread/stop","params":{"threadId":"t1","intent":"release"}}"#,
                r#""id":4"#,
            ),
        ] {
            writeln!(stdin, "{line}").unwrap();
            stdin.flush().unwrap();
            loop {
                let l = lines.next().expect("bridge answered").unwrap();
                if l.contains(answer) {
                    break;
                }
            }
        }
        drop(stdin);
        child.wait().unwrap();
        let cell = bb.join("py/t1");
        assert_eq!(m(&bb), dir, "record bb root, {what}");
        assert_eq!(m(&cell), dir, "record bb scope folder, {what}");
        assert_eq!(
            m(&cell.join("runtime→bridge.ndjson")),
            file,
            "record bb lane, {what}"
        );
        let out = Command::new(BRIDGEWIRE)
            .args(["rerecord", "bb", "--timeout-ms", "8000"])
            .args(&mode_args)
            .arg(&cell)
            .arg("--")
            .args(py_bb_bridge())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "rerecord: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(
            m(&cell.join("bridge→runtime.current.ndjson")),
            file,
            "rerecord bb lane, {what}"
        );

        // record sidebridge, then replay sidebridge --write-current.
        let sb = t.path().join("sb");
        let mut rc = Command::new(BRIDGEWIRE);
        rc.args([
            "record",
            "sidebridge",
            "--bridge",
            "echo",
            "--upstream",
            &format!("{up_url}/"),
        ])
        .arg("--dir")
        .arg(&sb)
        .args(&mode_args);
        let (proxy, url) = start(rc);
        let reply = http(
            &url,
            "POST",
            "/",
            &[("Content-Type", "application/json")],
            r#"{"chatId":"c1","text":"hi","messages":[]}"#,
        );
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        stop(proxy);
        assert_eq!(m(&sb), dir, "record sidebridge root, {what}");
        assert_eq!(
            m(&sb.join("echo")),
            dir,
            "record sidebridge bridge folder, {what}"
        );
        assert_eq!(
            m(&sb.join("echo/C1")),
            dir,
            "record sidebridge chat folder, {what}"
        );
        assert_eq!(
            m(&sb.join("echo/C1/client→bridge.ndjson")),
            file,
            "record sidebridge lane, {what}"
        );
        let out = Command::new(BRIDGEWIRE)
            .args(["replay", "sidebridge", "--write-current", "--url", &up_url])
            .args(&mode_args)
            .arg(&sb)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "replay sidebridge: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(
            m(&sb.join("echo/C1/bridge→client.current.ndjson")),
            file,
            "replay --write-current lane, {what}"
        );

        // record bridle (an HTTP API exchange).
        let br = t.path().join("br");
        let mut rc = Command::new(BRIDGEWIRE);
        rc.args([
            "record",
            "bridle",
            "--hub",
            "ref",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &hub_url,
        ])
        .arg("--dir")
        .arg(&br)
        .args(&mode_args);
        let (proxy, url) = start(rc);
        let reply = http(
            &url,
            "POST",
            "/api/agent/a1/message",
            &[("Content-Type", "application/json")],
            r#"{"text":"hi"}"#,
        );
        assert!(reply.starts_with("HTTP/1.1"), "{reply}");
        std::thread::sleep(Duration::from_millis(200));
        stop(proxy);
        assert_eq!(m(&br.join("ref")), dir, "record bridle root, {what}");
        assert_eq!(
            m(&br.join("ref/a1__http")),
            dir,
            "record bridle cell folder, {what}"
        );
        assert_eq!(
            m(&br.join("ref/a1__http/http→hub.ndjson")),
            file,
            "record bridle lane, {what}"
        );

        // Reports and dumps (pins; parity and check share the same writer).
        let reports = t.path().join("reports/new");
        let dump = t.path().join("dump");
        let out = Command::new(BRIDGEWIRE)
            .args(["pins", "--update"])
            .arg(&sb)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = Command::new(BRIDGEWIRE)
            .arg("pins")
            .args(&mode_args)
            .arg("--junit")
            .arg(reports.join("r.xml"))
            .arg("--html")
            .arg(reports.join("r.html"))
            .arg("--dump-dir")
            .arg(&dump)
            .arg(&sb)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(m(&reports), dir, "report folder created, {what}");
        assert_eq!(m(&reports.join("r.xml")), file, "junit report, {what}");
        assert_eq!(m(&reports.join("r.html")), file, "html report, {what}");
        assert_eq!(m(&dump), dir, "dump folder, {what}");
        let dumped: Vec<_> = std::fs::read_dir(&dump).unwrap().flatten().collect();
        assert!(!dumped.is_empty());
        for d in dumped {
            assert_eq!(m(&d.path()), file, "{}, {what}", d.path().display());
        }
    }
    stop(upstream);
    stop(hub);
}

// ---------------------------------------------------------------------------------------------
// The sweep over every command (issue 15, deliverable 4: "plant known secrets in every position
// above, record with every protocol, run every command with every report format, grep the whole
// output tree: 0 hits").
// ---------------------------------------------------------------------------------------------

/// A planted secret: where it was put, and its value (distinct and random per run and position).
struct Plant {
    position: &'static str,
    value: String,
}

fn random_tag() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

struct Plants(Vec<Plant>);

impl Plants {
    fn add(&mut self, position: &'static str) -> String {
        let value = format!("Sx{}{}", position.len(), random_tag());
        let value = format!("{value}{}", &random_tag()[..6]);
        self.0.push(Plant {
            position,
            value: value.clone(),
        });
        value
    }
    fn values(&self) -> Vec<&str> {
        self.0.iter().map(|p| p.value.as_str()).collect()
    }
}

/// A bb wrapper bridge: the independent Python bridge (`tests/fixtures/py_bb_bridge.py`), with
/// stdin read leniently (a non-UTF-8 line must not end it).
fn py_bb_bridge() -> Vec<String> {
    vec![
        "python3".into(),
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/py_bb_bridge.py"
        )
        .into(),
    ]
}

/// One command run of the sweep: its words, stdout and stderr.
struct Ran {
    what: String,
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

fn run_bw(cwd: &Path, args: &[String]) -> Ran {
    // `PY_BB_FLAW=…` as the first word: the bb bridge runs with that flaw (a failing run quotes
    // frames in its reports).
    let (env, args) = match args.first().and_then(|a| a.strip_prefix("PY_BB_FLAW=")) {
        Some(f) => (Some(f.to_string()), &args[1..]),
        None => (None, args),
    };
    let mut cmd = Command::new(BRIDGEWIRE);
    if let Some(f) = env {
        cmd.env("PY_BB_FLAW", f);
    }
    let mut child = cmd
        .args(args)
        .current_dir(cwd)
        .env("PYTHONIOENCODING", "utf-8:surrogateescape")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded: a command that hangs is killed and named.
    let (mut so, mut se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let t_out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = so.read_to_end(&mut b);
        b
    });
    let t_err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = se.read_to_end(&mut b);
        b
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ran {
        what: args.join(" "),
        code,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// The leaf commands of the CLI definition (`["check", "bridle", "hub"]`, …).
fn leaf_commands() -> Vec<Vec<String>> {
    fn walk(c: &clap::Command, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        let subs: Vec<&clap::Command> = c
            .get_subcommands()
            .filter(|s| s.get_name() != "help")
            .collect();
        if subs.is_empty() && !path.is_empty() {
            out.push(path.clone());
        }
        for s in subs {
            path.push(s.get_name().to_string());
            walk(s, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(&bridgewire::cli::command(), &mut Vec::new(), &mut out);
    out
}

/// The report options a leaf command has, from the CLI definition.
fn report_options(path: &[String]) -> Vec<String> {
    let mut c = bridgewire::cli::command();
    for w in path {
        c = c.find_subcommand(w).unwrap().clone();
    }
    c.get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|l| {
            matches!(
                *l,
                "format"
                    | "junit"
                    | "markdown"
                    | "html"
                    | "json"
                    | "raw"
                    | "dump-dir"
                    | "write-current"
                    | "update"
                    | "verbose"
                    | "stats"
            )
        })
        .map(str::to_string)
        .collect()
}

/// Commands the sweep does not run, with why: they neither read recordings nor talk to peers
/// beyond what the sweep runs them through.
const NOT_SWEPT: &[(&str, &str)] = &[
    (
        "init",
        "writes a template config; reads no recording, talks to no peer",
    ),
    (
        "rules",
        "prints the rule catalogue; reads no recording, talks to no peer",
    ),
    (
        "provider-double",
        "run by `replay bb`'s wrapper inside the bridge under replay (swept through replay bb, rerecord bb, parity, check bb)",
    ),
    (
        "record child",
        "run by a bridge under `record bb` / `record-cells --provider-env` (its lanes are the recording's)",
    ),
];

fn sv(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

/// Every position, every protocol, every command, every format: 0 hits.
#[test]
fn sweep_every_command_every_format_finds_no_planted_secret() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    std::fs::create_dir(root.join(".git")).unwrap();
    let rec = root.join("rec");
    let out = root.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let mut plants = Plants(Vec::new());
    let mut extra: Vec<(String, Vec<u8>)> = Vec::new();

    // ---------------- record bb: every §1.9 container, list forms, depth, bytes, URLs. ------
    let bb_api = plants.add("bb params.apiKey (first seen, repeated later in a prompt)");
    let bb_env_map = plants.add("bb options.env map {GH_TOKEN}");
    let bb_env_list = plants.add("bb options.env [{name, value}] list");
    let bb_envvars = plants.add("bb options.envVars map {OPENAI_API_KEY}");
    let bb_hdr_pairs = plants.add("bb headers [[Cookie, …]] pair list");
    let bb_hdr_objs = plants.add("bb headers [{name: Authorization, value}] list");
    let bb_hdr_xapi = plants.add("bb headers map X-Api-Key");
    let bb_hdr_proxy = plants.add("bb headers map Proxy-Authorization");
    let bb_hdr_cookie = plants.add("bb requestHeaders map Cookie");
    let bb_url = plants.add("bb baseUrl ?access_token= query parameter");
    let bb_deep = plants.add("bb apiKey nested 200 deep");
    let bb_deeper = plants.add("bb token nested 2000 deep");
    let bb_bytes = plants.add("bb apiKey in a non-UTF-8 line");
    let bb_bytes_env = plants.add("bb env list in a non-UTF-8 line");
    let bb_password = plants.add("bb nested auth.password");
    let bb_bridge_said = plants.add("bb secret the bridge echoes from a prompt (known value)");
    let init = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"clientInfo":{{"name":"sweep"}},"apiKey":"{bb_api}","options":{{"env":{{"GH_TOKEN":"{bb_env_map}","PATH":"/bin"}},"envVars":{{"OPENAI_API_KEY":"{bb_envvars}"}},"baseUrl":"https://p.example/v1?mode=x&access_token={bb_url}"}},"auth":{{"user":"u","password":"{bb_password}"}}}}}}"#
    );
    let start_line = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"thread/start","params":{{"threadId":"thr_sweep","cwd":"/tmp/w","options":{{"env":[{{"name":"ANTHROPIC_API_KEY","value":"{bb_env_list}"}},{{"name":"PATH","value":"/bin"}}],"headers":[["Cookie","sid={bb_hdr_pairs}"],["Accept","*/*"]],"extraHeaders":[{{"name":"Authorization","value":"Bearer {bb_hdr_objs}"}}],"httpHeaders":{{"X-Api-Key":"{bb_hdr_xapi}","Proxy-Authorization":"Basic {bb_hdr_proxy}"}},"requestHeaders":{{"Cookie":["a={bb_hdr_cookie}"]}}}}}}}}"#
    );
    // A prompt that repeats the earlier apiKey (a non-secret position), and a token the
    // bridge will echo back once learned: first stated under a secret key here.
    let learn = format!(
        r#"{{"jsonrpc":"2.0","method":"sweep/note","params":{{"threadId":"thr_sweep","token":"{bb_bridge_said}"}}}}"#
    );
    let turn = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"turn/start","params":{{"threadId":"thr_sweep","clientRequestId":"creq_1","input":[{{"type":"text","text":"use {bb_api} and {bb_bridge_said} please"}}]}}}}"#
    );
    let stop_line = r#"{"jsonrpc":"2.0","id":4,"method":"thread/stop","params":{"threadId":"thr_sweep","intent":"release"}}"#.to_string();
    let deep = format!(
        r#"{{"jsonrpc":"2.0","method":"sweep/deep","params":{{"threadId":"thr_sweep","a":{}{{"apiKey":"{bb_deep}"}}{}}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let deeper = format!(
        r#"{{"jsonrpc":"2.0","method":"sweep/deeper","params":{{"threadId":"thr_sweep","a":{}{{"x":{{"token":"{bb_deeper}"}}}}{}}}}}"#,
        "[".repeat(2000),
        "]".repeat(2000)
    );
    let mut bytes_line =
        br#"{"jsonrpc":"2.0","method":"sweep/bytes","params":{"threadId":"thr_sweep","note":"x"#
            .to_vec();
    bytes_line.push(0xff);
    bytes_line.extend_from_slice(
        format!(
            r#"","apiKey":"{bb_bytes}","env":[{{"name":"GH_TOKEN","value":"{bb_bytes_env}"}}]}}}}"#
        )
        .as_bytes(),
    );
    let bb_rec = rec.join("bb");
    // The same session recorded raw too (`--no-redact`): the input of the second half, where
    // the commands that read recordings must redact what they show and write themselves.
    let raw = root.join("raw");
    for (dir, flags) in [(&bb_rec, &[][..]), (&raw.join("bb"), &["--no-redact"][..])] {
        let mut cmd = Command::new(BRIDGEWIRE);
        cmd.args(["record", "bb", "--provider", "py", "--dir"])
            .arg(dir)
            .args(flags)
            .arg("--")
            .args(py_bb_bridge())
            .env("PYTHONIOENCODING", "utf-8:surrogateescape")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                all.extend_from_slice(l.as_bytes());
                all.push(b'\n');
                let _ = tx.send(l);
            }
            all
        });
        let wait_for = |needle: &str| {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let l = rx
                    .recv_timeout(left)
                    .unwrap_or_else(|_| panic!("bridge never said {needle}"));
                if l.contains(needle) {
                    return;
                }
            }
        };
        for (line, answer) in [
            (init.as_bytes().to_vec(), Some(r#""id":1"#)),
            (start_line.as_bytes().to_vec(), Some(r#""id":2"#)),
            (learn.as_bytes().to_vec(), None),
            (turn.as_bytes().to_vec(), Some("echo: use")),
            (stop_line.as_bytes().to_vec(), Some(r#""id":4"#)),
            // Last: Python's json gives up on the depth (the bridge may end; it is recorded).
            (bytes_line.clone(), None),
            (deep.as_bytes().to_vec(), None),
            (deeper.as_bytes().to_vec(), None),
        ] {
            stdin.write_all(&line).unwrap();
            stdin.write_all(b"\n").unwrap();
            stdin.flush().unwrap();
            if let Some(a) = answer {
                wait_for(a);
            }
        }
        drop(stdin);
        let _ = child.wait().unwrap();
        let said = reader.join().unwrap();
        let mut err = Vec::new();
        child.stderr.take().unwrap().read_to_end(&mut err).unwrap();
        extra.push(("record bb stdout (what the runtime saw)".into(), Vec::new()));
        // The runtime's own view is not bridgewire's output (it is the wire): only checked to
        // prove the echo crossed.
        assert!(
            String::from_utf8_lossy(&said).contains(&bb_api),
            "the bridge echoed the prompt"
        );
        extra.push(("record bb stderr".into(), err));
    }
    let bb_cell = bb_rec.join("py/thr_sweep");
    assert!(bb_cell.join("runtime→bridge.ndjson").is_file());

    // ---------------- record sidebridge: query, every credential header, POST bodies. -------
    let sb_query = plants.add("sidebridge ?key= query parameter");
    let sb_cookie = plants.add("sidebridge Cookie header");
    let sb_xapi = plants.add("sidebridge X-Api-Key header");
    let sb_proxy = plants.add("sidebridge Proxy-Authorization header");
    let sb_key = plants.add("sidebridge x-sidebridge-key (the protocol key header)");
    let sb_auth = plants.add("sidebridge Authorization: Bearer header");
    let sb_body = plants.add("sidebridge POST body apiKey (then repeated in a later text)");
    let sb_body_env = plants.add("sidebridge POST body env list");
    let sb_cli_key = plants.add("sidebridge --key of replay/check (echoed back by the server)");
    let up = echo_server();
    let (upstream, up_url) = start(up);
    let sb_rec = rec.join("sb");
    for (dir, flags) in [(&sb_rec, &[][..]), (&raw.join("sb"), &["--keep-key"][..])] {
        let mut rc = Command::new(BRIDGEWIRE);
        rc.args([
            "record",
            "sidebridge",
            "--bridge",
            "echo",
            "--upstream",
            &format!("{up_url}/"),
        ])
        .arg("--dir")
        .arg(dir)
        .args(flags);
        let (proxy, url) = start(rc);
        let (cookie, proxy_auth, bearer) = (
            format!("sid={sb_cookie}; theme=dark"),
            format!("Basic {sb_proxy}"),
            format!("Bearer {sb_auth}"),
        );
        let headers = [
            ("Content-Type", "application/json"),
            ("Cookie", cookie.as_str()),
            ("X-Api-Key", sb_xapi.as_str()),
            ("Proxy-Authorization", proxy_auth.as_str()),
            ("x-sidebridge-key", sb_key.as_str()),
            ("Authorization", bearer.as_str()),
        ];
        let bodies = [
            format!(
                r#"{{"chatId":"c1","text":"hello","apiKey":"{sb_body}","env":[{{"name":"GH_TOKEN","value":"{sb_body_env}"}}],"messages":[]}}"#
            ),
            format!(r#"{{"chatId":"c1","text":"again {sb_body}","messages":[]}}"#),
        ];
        for body in &bodies {
            let reply = http(
                &url,
                "POST",
                &format!("/?key={sb_query}&mode=x"),
                &headers,
                body,
            );
            assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        }
        let err = stop(proxy);
        extra.push(("record sidebridge stderr".into(), err));
    }

    // ---------------- record bridle: handshakes (apiKey, JWT), HTTP API bodies. -------------
    let br_jwt_secret = plants.add("bridle hub JWT secret (--jwt-secret)");
    let br_api = plants.add("bridle agent apiKey (register handshake; --api-key)");
    let br_body_api = plants.add("bridle HTTP API body apiKey");
    let br_query = plants.add("bridle Engine.IO handshake ?token= query");
    let br_hdr = plants.add("bridle HTTP API X-Api-Key header");
    let jwt = bridgewire::bridle::sign_jwt(&br_jwt_secret, "u-sweep", &[]);
    let jwt_sig = jwt.rsplit('.').next().unwrap().to_string();
    plants.0.push(Plant {
        position: "bridle browser JWT (handshake auth.token, HTTP body jwt, Authorization)",
        value: jwt.clone(),
    });
    plants.0.push(Plant {
        position: "bridle browser JWT signature part",
        value: jwt_sig,
    });
    let mut hub = Command::new(env!("CARGO_BIN_EXE_bridle-ref-hub"));
    hub.args([
        "--listen",
        "127.0.0.1:0",
        "--jwt-secret",
        &br_jwt_secret,
        "--api-key",
        &br_api,
    ])
    .env("BRIDLE_SYNC_TIMEOUT_MS", "3000");
    let (hub, hub_url) = start(hub);
    let br_rec = rec.join("br");
    {
        let mut rc = Command::new(BRIDGEWIRE);
        rc.args([
            "record",
            "bridle",
            "--hub",
            "ref",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &hub_url,
            // Told the hub's secrets, to record what kind of credential a handshake sent.
            "--jwt-secret",
            &br_jwt_secret,
        ])
        .arg("--dir")
        .arg(&br_rec)
        .env("BRIDLE_API_KEY", &br_api);
        let (proxy, url) = start(rc);
        let mut agent = Command::new(env!("CARGO_BIN_EXE_bridle-ref-agent"))
            .env("BRIDLE_URL", &url)
            .env("BRIDLE_API_KEY", &br_api)
            .env("BRIDLE_AGENT_ID", "bot-s")
            .env("BRIDLE_RECONNECT_MS", "200")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut ok = false;
            for _ in 0..200 {
                if let Ok(r) = reqwest::get(format!("{url}/api/agent/bot-s/health")).await
                    && let Ok(v) = r.json::<serde_json::Value>().await
                    && v["agentConnected"] == true
                {
                    ok = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(ok, "the agent connected through the proxy");
            use bridgewire::bridle::transport::{Options, Socket};
            let opts = Options {
                open_timeout: Duration::from_secs(10),
                ..Options::default()
            };
            let mut b = Socket::connect(
                &url,
                "/ws/client",
                Some(serde_json::json!({"token": jwt, "agentId": "bot-s"})),
                &opts,
            )
            .await
            .unwrap();
            b.recv(Duration::from_secs(10)).await.unwrap();
            // A message repeating the agent's apiKey (known from the register handshake).
            b.emit(
                "message",
                serde_json::json!({"text": format!("hello {br_api}")}),
            );
            b.recv_named("stream_end", Duration::from_secs(10))
                .await
                .unwrap();
        });
        let body = format!(
            r#"{{"text":"sync please","apiKey":"{br_body_api}","jwt":"{jwt}","meta":{{"auth":{{"token":"{jwt}"}}}}}}"#
        );
        let reply = http(
            &url,
            "POST",
            "/api/agent/bot-s/message/sync",
            &[
                ("Content-Type", "application/json"),
                ("Authorization", &format!("Bearer {jwt}")),
                ("X-Api-Key", &br_hdr),
            ],
            &body,
        );
        assert!(reply.starts_with("HTTP/1.1"), "{reply}");
        let reply = http(
            &url,
            "GET",
            &format!("/socket.io/?EIO=4&transport=polling&token={br_query}"),
            &[],
            "",
        );
        assert!(reply.starts_with("HTTP/1.1"), "{reply}");
        std::thread::sleep(Duration::from_millis(300));
        let _ = agent.kill();
        let _ = agent.wait();
        let err = stop(proxy);
        extra.push(("record bridle stderr".into(), err));
    }

    // ---------------- every command over the recordings, every format. -----------------------
    let bb_fix_api = plants.add("check bb fixture options.apiKey (config)");
    let bb_fix_env = plants.add("check bb fixture options.env (config)");
    let bb_fix_hdr = plants.add("check bb fixture options.headers Authorization (config)");
    let config = root.join("bridgewire.toml");
    std::fs::write(
        &config,
        format!(
            "[bb.fixture]\noptions = {{ permissionMode = \"full\", apiKey = \"{bb_fix_api}\", env = {{ GH_TOKEN = \"{bb_fix_env}\" }}, headers = {{ Authorization = \"Bearer {bb_fix_hdr}\" }} }}\n"
        ),
    )
    .unwrap();
    let p = |x: &Path| x.to_string_lossy().into_owned();
    // The bb bridge is started with a secret on its command line (manifests, report targets
    // and leg labels name the command).
    let bb_argv = plants.add("bb bridge command line --api-key (every command that starts it)");
    let mut bridge = py_bb_bridge();
    bridge.extend(["--api-key".into(), bb_argv.clone()]);
    let hub_bin = env!("CARGO_BIN_EXE_bridle-ref-hub").to_string();
    let agent_bin = env!("CARGO_BIN_EXE_bridle-ref-agent").to_string();
    // rec: a copy per protocol for the commands that write into recordings (pins --update,
    // rerecord, replay --write-current), so every command also reads what the others wrote.
    let mut runs: Vec<(Vec<String>, Vec<String>)> = Vec::new(); // (leaf, args)
    let formats = ["text", "json"];
    let reports = |name: &str, f: &str| {
        let d = out.join(name.replace(' ', "-")).join(f);
        vec![
            "--junit".to_string(),
            p(&d.join("r.xml")),
            "--markdown".into(),
            p(&d.join("r.md")),
            "--html".into(),
            p(&d.join("r.html")),
        ]
    };
    let (raw_bb, raw_sb) = (raw.join("bb"), raw.join("sb"));
    for (proto, dir) in [
        ("bb", &bb_rec),
        ("sb", &sb_rec),
        ("br", &br_rec),
        ("rawbb", &raw_bb),
        ("rawsb", &raw_sb),
    ] {
        for f in formats {
            let mut a = sv(&["pins", "--format", f, "--dump-dir"]);
            a.push(p(&out.join(format!("pins-dump-{proto}-{f}"))));
            a.extend(reports(&format!("pins-{proto}"), f));
            a.push(p(dir));
            runs.push((sv(&["pins"]), a));
        }
        let mut a = sv(&["pins", "--update"]);
        a.push(p(dir));
        runs.push((sv(&["pins"]), a));
        let mut a = sv(&["pins", "--review", "--accept"]);
        a.push(p(dir));
        runs.push((sv(&["pins"]), a));
        for f in formats {
            let mut a = sv(&[
                "parity",
                "--timeout-ms",
                "8000",
                "--format",
                f,
                "--dump-dir",
            ]);
            a.push(p(&out.join(format!("parity-dump-{proto}-{f}"))));
            a.extend(reports(&format!("parity-{proto}"), f));
            a.extend(["--base".into(), format!("rec:{}", p(dir))]);
            let head = match proto {
                "bb" => format!("cmd:{}", bridge.join(" ")),
                "br" => format!("cmd:{hub_bin} --listen 127.0.0.1:0"),
                _ => format!("rec:{}", p(dir)),
            };
            // Two rec: legs of one folder are refused unless asked for (a self-comparison).
            if head.starts_with("rec:") {
                a.push("--allow-same-bridge".into());
            }
            a.extend(["--head".into(), head, p(dir)]);
            runs.push((sv(&["parity"]), a));
        }
        for cell in bridgewire::cell::discover(dir).unwrap() {
            for view in [
                &[][..],
                &["--json"][..],
                &["--raw"][..],
                &["--recorded"][..],
            ] {
                let mut a = sv(&["lanes", "--color", "never"]);
                a.extend(sv(view));
                a.push(p(&cell.path));
                runs.push((sv(&["lanes"]), a));
            }
        }
    }
    let raw_bb_cell = raw_bb.join("py/thr_sweep");
    for (f, cell) in [
        ("text", &bb_cell),
        ("json", &bb_cell),
        ("text", &raw_bb_cell),
    ] {
        let mut a = sv(&[
            "replay",
            "bb",
            "--timeout-ms",
            "8000",
            "--verbose",
            "--stats",
            "--format",
            f,
        ]);
        a.push(p(cell));
        a.push("--".into());
        a.extend(bridge.clone());
        runs.push((sv(&["replay", "bb"]), a));
        let mut a = sv(&[
            "rerecord",
            "bb",
            "--timeout-ms",
            "8000",
            "--verbose",
            "--stats",
            "--format",
            f,
        ]);
        a.push(p(cell));
        a.push("--".into());
        a.extend(bridge.clone());
        runs.push((sv(&["rerecord", "bb"]), a));
    }
    for f in formats {
        let mut a = sv(&["check", "bb", "--timeout-ms", "3000", "--config"]);
        a.push(p(&config));
        a.extend(sv(&["--format", f]));
        a.extend(reports("check-bb", f));
        a.push("--".into());
        a.extend(bridge.clone());
        runs.push((sv(&["check", "bb"]), a.clone()));
        // The same with a flawed bridge: failing verdicts quote frames.
        let mut flawed = vec!["PY_BB_FLAW=late-delta".to_string()];
        flawed.extend(
            a.into_iter()
                .map(|w| w.replace("/check-bb/", "/check-bb-flawed/")),
        );
        runs.push((sv(&["check", "bb"]), flawed));
        let mut a = sv(&[
            "check",
            "sidebridge",
            "--timeout",
            "3",
            "--verbose",
            "--url",
        ]);
        a.extend([
            up_url.clone(),
            "--key".into(),
            sb_cli_key.clone(),
            "--format".into(),
            f.into(),
        ]);
        a.extend(reports("check-sidebridge", f));
        runs.push((sv(&["check", "sidebridge"]), a));
        let mut a = sv(&[
            "check",
            "bridle",
            "hub",
            "--wait-ms",
            "2000",
            "--sync-timeout-ms",
            "1500",
            "--format",
            f,
        ]);
        a.extend([
            "--jwt-secret".into(),
            br_jwt_secret.clone(),
            "--api-key".into(),
            br_api.clone(),
        ]);
        a.extend(reports("check-bridle-hub", f));
        a.extend([
            "--".into(),
            hub_bin.clone(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ]);
        runs.push((sv(&["check", "bridle", "hub"]), a));
        let mut a = sv(&[
            "check",
            "bridle",
            "agent",
            "--wait-ms",
            "2000",
            "--turn-wait-ms",
            "5000",
            "--reconnect-wait-ms",
            "4000",
            "--format",
            f,
        ]);
        a.extend(["--api-key".into(), br_api.clone()]);
        a.extend(reports("check-bridle-agent", f));
        a.extend(["--".into(), agent_bin.clone()]);
        runs.push((sv(&["check", "bridle", "agent"]), a));
    }
    let mut a = sv(&[
        "replay",
        "sidebridge",
        "--write-current",
        "--timeout",
        "5",
        "--url",
    ]);
    a.extend([
        up_url.clone(),
        "--key".into(),
        sb_cli_key.clone(),
        p(&sb_rec),
        p(&raw_sb),
    ]);
    runs.push((sv(&["replay", "sidebridge"]), a));
    let mut a = sv(&["replay", "bridle", "--wait-ms", "3000", "--url"]);
    a.extend([
        hub_url.clone(),
        "--jwt-secret".into(),
        br_jwt_secret.clone(),
        "--api-key".into(),
        br_api.clone(),
        p(&br_rec),
    ]);
    runs.push((sv(&["replay", "bridle"]), a));
    // package / redact / record-cells.
    let tsv = root.join("cells.tsv");
    std::fs::write(&tsv, "py\tsweep\tthr_sweep\n").unwrap();
    for (from, to) in [(&bb_rec, "package"), (&raw_bb, "package-raw")] {
        let mut a = sv(&["package", "--raw"]);
        a.extend([
            p(from),
            "--cells".into(),
            p(&tsv),
            "--out".into(),
            p(&out.join(to)),
        ]);
        runs.push((sv(&["package"]), a));
    }
    for (from, to) in [(&rec, "redact"), (&raw, "redact-raw")] {
        let mut a = sv(&["redact", "--out"]);
        a.extend([p(&out.join(to)), p(from)]);
        runs.push((sv(&["redact"]), a));
    }
    let side_bridge = sv(&[
        "python3",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/py_side_bridge.py"
        ),
    ]);
    let hub_cmd = vec![hub_bin.clone(), "--listen".into(), "127.0.0.1:0".into()];
    for (proto, cmd) in [
        ("bb", &bridge),
        ("sidebridge", &side_bridge),
        ("bridle", &hub_cmd),
    ] {
        let mut a = sv(&["record-cells", proto, "--timeout-ms", "8000", "--out"]);
        a.push(p(&out.join(format!("record-cells-{proto}"))));
        a.push("--".into());
        a.extend(cmd.iter().cloned());
        runs.push((sv(&["record-cells"]), a));
    }

    // Every leaf command is swept or named as not swept, and every report option it has is used.
    let mut swept: std::collections::BTreeSet<Vec<String>> =
        runs.iter().map(|(l, _)| l.clone()).collect();
    // The recorders ran above (their lanes are the input of everything else).
    for r in ["bb", "sidebridge", "bridle"] {
        swept.insert(sv(&["record", r]));
    }
    for leaf in leaf_commands() {
        let name = leaf.join(" ");
        if NOT_SWEPT.iter().any(|(n, _)| *n == name) {
            continue;
        }
        assert!(
            swept.contains(&leaf),
            "`{name}` is not in the sweep (add it, or to NOT_SWEPT with why)"
        );
        for opt in report_options(&leaf)
            .into_iter()
            .filter(|_| leaf[0] != "record")
        {
            let used = runs
                .iter()
                .filter(|(l, _)| *l == leaf)
                .any(|(_, a)| a.iter().any(|w| *w == format!("--{opt}")));
            let by_value = opt == "format"
                && ["json", "text"].iter().all(|f| {
                    runs.iter()
                        .filter(|(l, _)| *l == leaf)
                        .any(|(_, a)| a.windows(2).any(|w| w[0] == "--format" && w[1] == *f))
                });
            assert!(
                used && (opt != "format" || by_value),
                "`{name} --{opt}` is not exercised by the sweep"
            );
        }
    }

    // The raw recordings are input (unredacted on purpose); what the commands write into
    // them (pins, `.current` lanes) is output and is searched.
    let raw_inputs: Vec<(std::path::PathBuf, Vec<u8>)> = walkdir::WalkDir::new(&raw)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .map(|e| (e.path().to_path_buf(), std::fs::read(e.path()).unwrap()))
        .collect();
    assert!(
        raw_inputs
            .iter()
            .any(|(_, b)| String::from_utf8_lossy(b).contains(&bb_api)),
        "the raw recording holds the secrets"
    );
    // `check bridle hub` and `check bridle agent` start their own hub or agent and read no
    // recording: each runs on a thread of its own beside the others (18 s each, mostly waits),
    // which run in order (some read what an earlier one wrote).
    let (own_peer, in_order): (Vec<_>, Vec<_>) = runs
        .iter()
        .partition(|(leaf, _)| leaf.len() == 3 && leaf[..2] == ["check", "bridle"]);
    let ran = std::thread::scope(|s| {
        let beside: Vec<_> = own_peer
            .iter()
            .map(|(_, a)| s.spawn(move || run_bw(root, a)))
            .collect();
        let mut ran: Vec<Ran> = in_order.iter().map(|(_, a)| run_bw(root, a)).collect();
        ran.extend(
            beside
                .into_iter()
                .map(|h| h.join().expect("a run's thread")),
        );
        ran
    });
    for r in &ran {
        assert!(
            r.code.is_some(),
            "`{}` hung: {}",
            r.what,
            String::from_utf8_lossy(&r.stderr)
        );
    }
    let _ = stop(upstream);
    let _ = stop(hub);
    for r in &ran {
        extra.push((format!("`{}` stdout", r.what), r.stdout.clone()));
        extra.push((format!("`{}` stderr", r.what), r.stderr.clone()));
    }
    // The inputs the user wrote (the config) are not output; everything else under root is.
    std::fs::remove_file(&config).unwrap();
    for (path, bytes) in &raw_inputs {
        if std::fs::read(path).ok().as_ref() == Some(bytes) {
            std::fs::remove_file(path).unwrap();
        }
    }
    let extra_refs: Vec<(&str, &[u8])> = extra
        .iter()
        .map(|(w, b)| (w.as_str(), b.as_slice()))
        .collect();
    let values = plants.values();
    let hits = sweep(root, &extra_refs, &values);
    let named: Vec<String> = hits
        .iter()
        .map(|h| {
            let p = plants.0.iter().find(|p| h.starts_with(&p.value)).unwrap();
            format!("[{}] {h}", p.position)
        })
        .collect();
    let files = files_under(root);
    eprintln!(
        "secrets sweep: {} positions planted, 3 protocols recorded, {} command runs ({} leaf commands), {} files + {} stdout/stderr texts searched, {} hits",
        plants.0.len(),
        ran.len(),
        swept.len(),
        files,
        extra.len(),
        named.len()
    );
    for r in &ran {
        eprintln!(
            "  exit {:?}: {}",
            r.code,
            r.what.chars().take(160).collect::<String>()
        );
        if r.code == Some(2) {
            eprintln!(
                "    stderr: {}",
                String::from_utf8_lossy(&r.stderr)
                    .chars()
                    .take(600)
                    .collect::<String>()
            );
        }
    }
    assert!(
        named.is_empty(),
        "planted secrets found:\n{}",
        named.join("\n")
    );
}

/// `lanes` shows a raw recording (`--no-redact`, another recorder) redacted in every view, and
/// as stored only with `--no-redact`.
#[test]
fn lanes_shows_raw_recordings_redacted_unless_no_redact() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("rec");
    let secret = "S3CR3T-lanes-raw-0042";
    let mut child = Command::new(BRIDGEWIRE)
        .args(["record", "bb", "--no-redact", "--dir"])
        .arg(&root)
        .args(["--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // The key first, then an echo of it in a non-secret position.
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"m","params":{{"threadId":"t1","apiKey":"{secret}"}}}}"#
    )
    .unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"n","params":{{"threadId":"t1","text":"say {secret}"}}}}"#
    )
    .unwrap();
    drop(stdin);
    assert!(child.wait().unwrap().success());
    let cell = root.join("t1");
    let raw = std::fs::read_to_string(cell.join("runtime→bridge.ndjson")).unwrap();
    assert!(raw.contains(secret), "recorded raw: {raw}");
    let lanes = |extra: &[&str]| {
        let out = Command::new(BRIDGEWIRE)
            .args(["lanes", "--color", "never"])
            .args(extra)
            .arg(&cell)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for view in [&[][..], &["--json"], &["--raw"]] {
        let shown = lanes(view);
        assert!(shown.contains("say [redacted]"), "{view:?}: {shown}");
        assert!(!shown.contains(secret), "{view:?}: {shown}");
    }
    assert!(lanes(&["--raw", "--no-redact"]).contains(&format!("say {secret}")));
}

/// `redact` (and `package`, which redacts the same way) on a raw recording: a non-UTF-8 line's
/// bytes (`lineBase64`), and a value stated under a secret key in one file but echoed in a file
/// read before it, used to survive.
#[test]
fn redact_command_covers_raw_bytes_and_values_from_other_files() {
    let t = tempfile::tempdir().unwrap();
    let cell = t.path().join("in/p/c");
    std::fs::create_dir_all(&cell).unwrap();
    let (key, bytes_key) = ("S3CR3T-redact-key-0051", "S3CR3T-redact-bytes-0052");
    let entry = |seq: u32, dir: &str, line: &str| {
        format!(
            r#"{{"ts":1,"run":1,"seq":{seq},"dir":"{dir}","line":{}}}"#,
            serde_json::to_string(line).unwrap()
        )
    };
    let mut raw_line = br#"{"jsonrpc":"2.0","method":"x","params":{"note":"a"#.to_vec();
    raw_line.push(0xff);
    raw_line.extend_from_slice(format!(r#"","apiKey":"{bytes_key}"}}}}"#).as_bytes());
    let b64 = format!(
        r#"{{"ts":1,"run":1,"seq":3,"dir":"runtime→bridge","line":{},"lineBase64":"{}"}}"#,
        serde_json::to_string(&String::from_utf8_lossy(&raw_line)).unwrap(),
        bridgewire::util::base64_encode(&raw_line)
    );
    std::fs::write(
        cell.join("runtime→bridge.ndjson"),
        format!(
            "{}\n{b64}\n",
            entry(1, "runtime→bridge", &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"apiKey":"{key}"}}}}"#))
        ),
    )
    .unwrap();
    // `bridge→runtime` sorts (and is read) before `runtime→bridge`.
    std::fs::write(
        cell.join("bridge→runtime.ndjson"),
        entry(
            2,
            "bridge→runtime",
            &format!(r#"{{"jsonrpc":"2.0","method":"m","params":{{"text":"echo {key}"}}}}"#),
        ) + "\n",
    )
    .unwrap();
    let out = t.path().join("out");
    let o = Command::new(BRIDGEWIRE)
        .arg("redact")
        .arg(t.path().join("in"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let hits = sweep(&out, &[], &[key, bytes_key]);
    assert!(hits.is_empty(), "{hits:#?}");
    let echoed = std::fs::read_to_string(out.join("p/c/bridge→runtime.ndjson")).unwrap();
    assert!(echoed.contains("echo [redacted]"), "{echoed}");
}
