//! The `ipusim` command-line tool; all logic lives in [`ipusim::cli`].

fn main() {
    std::process::exit(ipusim::cli::main());
}
