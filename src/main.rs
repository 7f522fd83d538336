/// mimalloc instead of glibc's malloc: the offline passes (`pins`, dumps, parity) build and
/// drop many small JSON trees and strings per line, and glibc's allocator was about a sixth of
/// `pins`' CPU on corpus cells (`perf`, `-j 1`); mimalloc cuts that share by about half.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    bridgewire::cli::run(std::env::args_os())
}
