//! Reading bridgewire's text report, and running many bridgewire runs on the machine's cores.

/// The verdict lines of a text report that did not pass (not sub-checks, not the summary).
pub fn not_passed(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| {
            ["fail ", "warn ", "skipped ", "not run "]
                .iter()
                .any(|p| l.starts_with(p))
                && !l.starts_with("not run (")
        })
        .collect()
}

/// `f` over every item, two at a time (the machine's two cores), the results in item order.
pub fn two_at_a_time<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    at_a_time(2, items, f)
}

/// `f` over every item, `n` at a time, the results in item order. More than the two cores
/// for runs that mostly wait (a check's quiet windows), measured as such.
pub fn at_a_time<T: Sync, R: Send>(n: usize, items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::with_capacity(items.len()));
    std::thread::scope(|s| {
        for _ in 0..n.max(1) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(item) = items.get(i) else { break };
                    let r = f(item);
                    results.lock().unwrap().push((i, r));
                }
            });
        }
    });
    let mut r = results.into_inner().unwrap();
    r.sort_by_key(|(i, _)| *i);
    r.into_iter().map(|(_, v)| v).collect()
}
