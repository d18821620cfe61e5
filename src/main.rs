//! The `ipusim` command-line tool; all logic lives in [`ipusim::cli`], the allocator's
//! choice in [`ipusim::allocator`], its faulting in of fresh memory in [`ipusim::prefault`].

#[global_allocator]
static ALLOCATOR: ipusim::allocator::Allocator = ipusim::allocator::Allocator;

fn main() {
    ipusim::allocator::configure();
    ipusim::prefault::start();
    std::process::exit(ipusim::cli::main());
}
