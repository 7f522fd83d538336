//! The Bridle recording proxy raises bridgewire's soft open-file limit for its lane files; a
//! child bridgewire spawns afterwards (the next hub of `cells record`, a bridge) must still
//! start with the soft limit bridgewire had. One test in its own binary: it changes the
//! process's limits.

use bridgewire::bridle::spawn::ChildGuard;
use std::time::{Duration, Instant};

fn soft_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct passed.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_cur
}

#[test]
fn a_child_spawned_after_the_proxy_started_keeps_the_original_soft_nofile_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        // Leave room to raise: a soft limit below the hard one, as most logins have.
        lim.rlim_cur = lim.rlim_max.min(4096) / 2;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    let original = lim.rlim_cur;
    let tmp = tempfile::tempdir().expect("tmp");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let cfg = bridgewire::bridle::proxy::ProxyConfig {
            // Never contacted: no client connects.
            upstream: "http://127.0.0.1:9".into(),
            dir: tmp.path().join("lanes"),
            redact: true,
            mode: 0o600,
            jwt_secret: None,
            api_key: None,
        };
        bridgewire::bridle::proxy::serve(listener, cfg, async {
            let _ = stopped.await;
        })
        .await
    });
    // The proxy raises the limit as it starts.
    let deadline = Instant::now() + Duration::from_secs(30);
    while soft_limit() == original && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        soft_limit() > original,
        "the proxy did not raise the soft limit from {original} (hard {}): nothing to check",
        lim.rlim_max
    );
    let argv = ["sh", "-c", "ulimit -Sn"].map(std::ffi::OsString::from);
    let child = ChildGuard::spawn(&argv, &[]).expect("spawn sh");
    let line = child
        .line(Duration::from_secs(30))
        .expect("ulimit -Sn output");
    assert_eq!(
        line.trim(),
        original.to_string(),
        "a child spawned after the proxy raised bridgewire's soft limit to {}",
        soft_limit()
    );
    let _ = stop.send(());
    rt.block_on(server)
        .expect("proxy task")
        .expect("proxy stops");
}
