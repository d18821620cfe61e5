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
//! Requests whose alignment a plain mimalloc block already has (at most 16 bytes, and no
//! more than the size) take mimalloc's plain calls; the others its aligned ones ([`plain`]).
//!
//! Fresh memory is faulted in ahead of its use by a thread of its own ([`crate::prefault`]),
//! which needs to know how much the process has allocated: the allocator counts the live
//! bytes, per thread, and adds them to a process-wide figure a mebibyte at a time.
//!
//! A binary declares `#[global_allocator] static A: Allocator = Allocator;` and calls
//! [`configure`] first thing in `main`.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

/// mimalloc, counting the bytes the process holds ([`peak_bytes`]).
pub struct Allocator;

/// Bytes allocated and not freed, as far as the threads have reported them (each reports
/// when its own count has moved by [`REPORT`] bytes, so the figure is within
/// `threads × REPORT` of the truth).
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// The most [`LIVE`] has been.
static PEAK: AtomicIsize = AtomicIsize::new(0);
/// A thread reports its count when it has moved by this much (our choice: a mebibyte is
/// thousands of small blocks, so the shared counter is touched rarely).
const REPORT: isize = 1 << 20;

thread_local! {
    /// This thread's bytes not yet reported to [`LIVE`].
    static UNREPORTED: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // A thread being torn down has no count left to keep: its delta is dropped.
    let _ = UNREPORTED.try_with(|c| {
        let n = c.get() + delta;
        if n.abs() >= REPORT {
            let live = LIVE.fetch_add(n, Ordering::Relaxed) + n;
            PEAK.fetch_max(live, Ordering::Relaxed);
            c.set(0);
        } else {
            c.set(n);
        }
    });
}

/// The most bytes the process has held at once so far (within a few mebibytes).
pub fn peak_bytes() -> u64 {
    PEAK.load(Ordering::Relaxed).max(0) as u64
}

/// The alignment every mimalloc block of at least this many bytes has (mimalloc's
/// `MI_MAX_ALIGN_SIZE` on 64-bit targets, `include/mimalloc/types.h`: blocks of 16 bytes or
/// more are 16-byte aligned, smaller ones 8-byte, as `_mi_page_malloc_zero` asserts in
/// `src/alloc.c`).
const PLAIN_ALIGN: usize = 16;

/// Whether a plain `mi_malloc` of `layout.size()` bytes is aligned enough for `layout`: an
/// alignment of at most [`PLAIN_ALIGN`] and no larger than the size (an 8-byte block is
/// 8-byte aligned). The `mimalloc` crate sends every request through `mi_malloc_aligned`,
/// whose fast path takes a block only when the size class's page has one free at hand; else
/// a size that is not a power of two (most of a compile's: 24, 48, 112 bytes, and every
/// list above 1 KiB) is over-allocated by the alignment, into the next size class
/// (`mi_theap_malloc_zero_aligned_at_generic`, `src/alloc-aligned.c`) — 7.6 M of ResNet-50
/// compile's 26.6 M allocations (callgrind, 2026-12-03).
fn plain(layout: &Layout) -> bool {
    layout.align() <= PLAIN_ALIGN && layout.align() <= layout.size()
}

// SAFETY: every call is mimalloc's, plain ones only where the block's alignment suffices
// ([`plain`]); the counting only reads the layout sizes.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = if plain(&layout) {
            libmimalloc_sys::mi_malloc(layout.size()).cast()
        } else {
            mimalloc::MiMalloc.alloc(layout)
        };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = if plain(&layout) {
            libmimalloc_sys::mi_zalloc(layout.size()).cast()
        } else {
            mimalloc::MiMalloc.alloc_zeroed(layout)
        };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        mimalloc::MiMalloc.dealloc(ptr, layout);
        count(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY (of the layout): `new_size` is non-zero and, rounded up to the alignment,
        // does not overflow (`GlobalAlloc::realloc`'s contract).
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let p = if plain(&new_layout) {
            libmimalloc_sys::mi_realloc(ptr.cast(), new_size).cast()
        } else {
            mimalloc::MiMalloc.realloc(ptr, layout, new_size)
        };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

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

    /// Blocks allocated through the allocator raise the peak it reports by their size, and
    /// small ones are reported once they add up to [`REPORT`] bytes; freeing them lowers
    /// the live count, not the peak.
    #[test]
    fn the_allocator_counts_its_peak() {
        let big = Layout::from_size_align(8 << 20, 8).unwrap();
        let small = Layout::from_size_align(1024, 8).unwrap();
        // SAFETY: blocks allocated here and freed with their own layouts.
        unsafe {
            let before = LIVE.load(Ordering::Relaxed);
            let p = Allocator.alloc(big);
            assert!(!p.is_null());
            assert!(peak_bytes() >= before.max(0) as u64 + (8 << 20));
            let smalls: Vec<*mut u8> = (0..2048).map(|_| Allocator.alloc(small)).collect();
            // 2 MiB of small blocks: at least one report of a mebibyte.
            assert!(LIVE.load(Ordering::Relaxed) >= before + (8 << 20) + REPORT);
            let peak = peak_bytes();
            for q in smalls {
                Allocator.dealloc(q, small);
            }
            Allocator.dealloc(p, big);
            assert!(LIVE.load(Ordering::Relaxed) <= before + REPORT);
            assert_eq!(peak_bytes(), peak);
        }
    }

    /// Every block is aligned as its layout asks, whether a plain call or an aligned one
    /// made it (alignments 1 to 4 KiB, sizes below, at and above them, small and large);
    /// zeroed blocks are zero; a block grown or shrunk keeps its bytes and its alignment,
    /// across the two kinds of call (a block of 8 bytes aligned to 16 grown to 24, one of 16
    /// shrunk to 9).
    #[test]
    fn every_block_is_aligned_as_its_layout_asks() {
        let aligned = |p: *mut u8, align: usize| !p.is_null() && (p as usize).is_multiple_of(align);
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [
                1usize, 7, 8, 9, 15, 16, 24, 48, 112, 1000, 1500, 5000, 70_000,
            ] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: non-zero sizes; every block is freed with its layout, written and
                // read within its size.
                unsafe {
                    let fill = |p: *mut u8| (0..size).for_each(|i| *p.add(i) = i as u8);
                    let kept = |p: *mut u8, n: usize| (0..n).all(|i| *p.add(i) == i as u8);
                    let mut p = Allocator.alloc(layout);
                    assert!(aligned(p, align), "size {size} align {align}");
                    fill(p);
                    for new in [size / 2 + 1, size * 3] {
                        let q = Allocator.realloc(p, layout, new);
                        assert!(aligned(q, align), "{size} -> {new}, align {align}");
                        assert!(kept(q, size.min(new)), "{size} -> {new}, align {align}");
                        let grown = Layout::from_size_align(new, align).unwrap();
                        p = Allocator.realloc(q, grown, size);
                        assert!(aligned(p, align), "{new} -> {size}, align {align}");
                        assert!(kept(p, size.min(new)), "{new} -> {size}, align {align}");
                        fill(p);
                    }
                    Allocator.dealloc(p, layout);
                    let z = Allocator.alloc_zeroed(layout);
                    assert!(aligned(z, align));
                    assert!((0..size).all(|i| *z.add(i) == 0), "zeroed {size} {align}");
                    Allocator.dealloc(z, layout);
                }
            }
        }
    }
}
