//! The `ipusim` command-line tool; all logic lives in [`ipusim::cli`], the allocator's
//! choice in [`ipusim::allocator`].

#[global_allocator]
static ALLOCATOR: ipusim::allocator::Allocator = ipusim::allocator::Allocator;

fn main() {
    ipusim::allocator::configure();
    std::process::exit(ipusim::cli::main());
}
