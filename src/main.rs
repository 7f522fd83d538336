fn main() -> std::process::ExitCode {
    bridgewire::cli::run(std::env::args_os())
}
