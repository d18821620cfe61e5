//! The allocator of the `ipusim` binary, and of the benchmarks that measure what the binary
//! does: mimalloc, with large OS pages allowed (transparent huge pages, which mimalloc asks
//! for with `madvise(MADV_HUGEPAGE)`).
//!
//! A compile of a large CNN fills gigabytes of small blocks (vertices, copies, plans), and
//! under glibc's malloc a third of its time was the kernel's page faults and page clearing.
//! Measured alternately on the 2-core machine (2026-11-27): `ipusim compile
//! programs/resnet50.ron` 11.0-13.1 s under glibc's malloc, 8.5-9.1 s with this allocator;
//! the hands-on day's step 2 49.8-63.3 s and 34.2-39.0 s. The large-page default is ours
//! (`MIMALLOC_ALLOW_LARGE_OS_PAGES=0` in the environment turns it off); without transparent
//! huge pages mimalloc uses ordinary pages.
//!
//! A binary declares `#[global_allocator] static A: Allocator = Allocator;` and calls
//! [`configure`] first thing in `main`.

pub use mimalloc::MiMalloc as Allocator;

/// Allows large OS pages unless the environment says otherwise; call before the large
/// allocations (the option is read when mimalloc asks the OS for memory).
pub fn configure() {
    // SAFETY: sets an option's default; the option only chooses how fresh OS memory is
    // backed. A value the user set in the environment wins.
    unsafe {
        libmimalloc_sys::mi_option_set_enabled_default(
            libmimalloc_sys::mi_option_large_os_pages,
            true,
        );
    }
}
