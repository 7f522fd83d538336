/// mimalloc: the pins pass allocates and frees small JSON values at a high rate (serde_json
/// trees per delta and event); glibc's malloc cost 10–15 % more CPU there and kept per-thread
/// arenas that grew with the run (see BENCHMARKS.md, "Offline pins").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    bridgewire::cli::run(std::env::args_os())
}
