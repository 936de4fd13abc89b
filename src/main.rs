//! The `tierfs` binary: everything lives in the library's `cli` module.
fn main() {
    std::process::exit(tierfs::cli::main());
}
