//! The allocator of the `ipusim` binary, and of the benchmarks that measure what the binary
//! does: mimalloc, with large OS pages allowed (transparent huge pages, which mimalloc asks
//! for with `madvise(MADV_HUGEPAGE)`) and freed memory kept for reuse rather than purged.
//!
//! A compile of a large CNN fills gigabytes of small blocks (vertices, copies, plans), and
//! under glibc's malloc a third of its time was the kernel's page faults and page clearing.
//! Measured alternately on the 2-core machine (2026-11-27): `ipusim compile
//! programs/resnet50.ron` 11.0-13.1 s under glibc's malloc, 8.5-9.1 s with this allocator;
//! the hands-on day's step 2 49.8-63.3 s and 34.2-39.0 s. The large-page default is ours
//! (`MIMALLOC_ALLOW_LARGE_OS_PAGES=0` in the environment turns it off); without transparent
//! huge pages mimalloc uses ordinary pages.
//!
//! Purging is off by default, also our choice: mimalloc hands memory that has been free for
//! a while back to the OS, and a compile frees and refills its lowering's temporaries node
//! after node, so the kernel cleared the same pages again and again (14-22 thousand page
//! faults, many of them 2 MiB pages, for ResNet-50's 1.6 GB). Kept, the freed memory is
//! reused by the next allocations and the process's peak stays what the data needs (it grew
//! by 0.6-1.8%). Measured alternately on 2026-11-27: `ipusim compile programs/resnet50.ron`
//! 4.5-6.1 s and about 1,060 page faults against 5.3-8.6 s and 14-21 thousand (four runs
//! each; 1.63 GB against 1.61-1.63 GB); the hands-on day's step 2 27.6-28.7 s against
//! 30.9-32.3 s (5.73 GB against 5.71 GB); three training steps of a ResNet-20 at batch 32
//! 7.6-7.7 s against 8.5 s; `ipusim run programs/resnet50.ron --synthetic-data --steps 1`
//! 16.1 s against 20.3 s (2.20 GB against 2.17 GB). `MIMALLOC_PURGE_DELAY` in the environment (milliseconds, mimalloc's
//! meaning) wins.
//!
//! A binary declares `#[global_allocator] static A: Allocator = Allocator;` and calls
//! [`configure`] first thing in `main`.

pub use mimalloc::MiMalloc as Allocator;

/// mimalloc's `mi_option_purge_delay`: the 16th entry (15) of `mi_option_e` in the
/// `include/mimalloc.h` of the mimalloc v3 that `libmimalloc-sys` 0.1.49 builds (the crate
/// names no constant for it). −1 means never purge.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Allows large OS pages and keeps freed memory unless the environment says otherwise;
/// call before the large allocations (the options are read when mimalloc asks the OS for
/// memory and when it would purge).
pub fn configure() {
    // SAFETY: sets two options' defaults; the options only choose how fresh OS memory is
    // backed and whether free memory goes back to the OS. A value the user set in the
    // environment wins.
    unsafe {
        libmimalloc_sys::mi_option_set_enabled_default(
            libmimalloc_sys::mi_option_large_os_pages,
            true,
        );
        libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, -1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option we set is mimalloc's purge delay: before `configure` it holds v3's default
    /// of 1000 ms (unless the environment sets it), after it −1.
    #[test]
    fn configure_turns_purging_off() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: reads and sets allocator options, nothing else.
        unsafe {
            assert_eq!(libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY), 1000);
            configure();
            assert_eq!(libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY), -1);
            assert!(libmimalloc_sys::mi_option_is_enabled(
                libmimalloc_sys::mi_option_large_os_pages
            ));
        }
    }
}
