//! Fresh memory faulted in ahead of its use, on a thread of its own.
//!
//! A large compile fills gigabytes (the hands-on day's step 2: 3.7 GB allocated at its
//! peak, 4.3 GB of pages), and the kernel clears every fresh page on the thread that first
//! writes it — on this virtual machine also backing it from the host, at a pace that moves
//! from run to run (the same compile's system time moved between 2.5 and 10 s). The
//! lowering runs on one thread, so its page faults were on the compile's critical path
//! (`perf record` of step 2: the kernel's page clearing over half of the lowering thread's
//! samples), while the other core was partly idle.
//!
//! [`start`] reserves address space as an arena of the allocator (mimalloc's
//! `mi_reserve_os_memory_ex`: nothing is faulted in; mimalloc takes reserved arenas before
//! asking the OS again) and starts a thread, `ipusim-prefault`, that faults in the
//! allocator's first arena (made before `main`; the main thread allocates from it first)
//! and then the reserved one from their starts, with `madvise(MADV_POPULATE_WRITE)`, which
//! maps cleared pages where none are mapped and leaves mapped pages and their contents
//! alone. mimalloc hands out an arena's memory from its start, so the pages the next
//! allocations take are mostly there already. The thread keeps what it has faulted in
//! (the pages in use counted) at [`target`] of the most the process has held
//! ([`crate::allocator::peak_bytes`]): a quarter more — the pages in use ran 19% above the
//! bytes allocated on the hands-on step 2, so with less the thread fell behind the
//! allocator and saved nothing (measured: an eighth more) — and [`AHEAD`] more.
//!
//! Only on Linux (the advice is Linux's, since 5.14; where it is refused the thread stops
//! and nothing else changes). `IPUSIM_PREFAULT=0` in the environment turns it off.

/// Bytes the thread faults in beyond a quarter more than the process's peak: our choice,
/// small, since a small program's whole footprint is tens of megabytes.
pub const AHEAD: u64 = 16 << 20;

/// The bytes to have faulted in (the pages in use counted) when the process has held at
/// most `peak` bytes at once: a quarter more, and [`AHEAD`] (see the module docs).
pub fn target(peak: u64) -> u64 {
    peak.saturating_add(peak / 4).saturating_add(AHEAD)
}

/// Reserves the arena and starts the thread (see the module docs); does nothing when the
/// environment sets `IPUSIM_PREFAULT=0`, when the reservation fails or off Linux.
pub fn start() {
    if std::env::var_os("IPUSIM_PREFAULT").is_some_and(|v| v == "0") {
        return;
    }
    #[cfg(target_os = "linux")]
    linux::start();
}

#[cfg(target_os = "linux")]
pub(crate) mod linux {
    use std::ffi::c_void;
    use std::time::Duration;

    /// The address space reserved: our choice, twice the largest compile we know of (the
    /// CNN README's 8-IPU ResNet-50, 4.0 GB) and under mimalloc's largest arena (16 GiB).
    /// A process that needs more takes it from mimalloc's own arenas, unhelped.
    const ARENA: usize = 8 << 30;

    /// Bytes faulted in by one call: our choice, four 2 MiB pages, so that the thread
    /// follows the process closely.
    const STEP: usize = 8 << 20;

    extern "C" {
        /// mimalloc's `mi_arena_area` (`include/mimalloc.h` of v3): where an arena lies
        /// and its size (`libmimalloc-sys` does not bind it).
        fn mi_arena_area(arena_id: libmimalloc_sys::mi_arena_id_t, size: *mut usize)
            -> *mut c_void;
    }

    /// `MADV_POPULATE_WRITE` (Linux 5.14, `include/uapi/asm-generic/mman-common.h`).
    const MADV_POPULATE_WRITE: libc::c_int = 23;

    pub(super) fn start() {
        // The allocator's first arena: the mapping holding a block the main thread
        // allocates now.
        let probe = Box::new(0u8);
        let first = mapping_of(&*probe as *const u8 as usize);
        drop(probe);
        let mut id: libmimalloc_sys::mi_arena_id_t = std::ptr::null_mut();
        let mut size = 0usize;
        // SAFETY: asks mimalloc for an arena of address space (mapped without memory
        // behind it until written, as any fresh mapping) and reads back where it lies;
        // mimalloc owns it and never unmaps it.
        let base = unsafe {
            if libmimalloc_sys::mi_reserve_os_memory_ex(ARENA, true, true, false, &mut id) != 0 {
                return;
            }
            mi_arena_area(id, &mut size)
        };
        if base.is_null() || size == 0 {
            return;
        }
        let mut faulting = FaultIn::new(first.into_iter().chain([(base as usize, size)]).collect());
        let _ = std::thread::Builder::new()
            .name("ipusim-prefault".into())
            .spawn(move || {
                let mut idle = Duration::from_micros(500);
                while !faulting.finished() {
                    let want = super::target(crate::allocator::peak_bytes());
                    if faulting.step(want) {
                        idle = Duration::from_micros(500);
                    } else {
                        std::thread::sleep(idle);
                        idle = (idle * 2).min(Duration::from_millis(20));
                    }
                }
            });
    }

    /// The start and length of the mapping of this process holding address `p`
    /// (`/proc/self/maps`).
    pub(crate) fn mapping_of(p: usize) -> Option<(usize, usize)> {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        maps.lines().find_map(|line| {
            let (lo, hi) = line.split_whitespace().next()?.split_once('-')?;
            let lo = usize::from_str_radix(lo, 16).ok()?;
            let hi = usize::from_str_radix(hi, 16).ok()?;
            (lo <= p && p < hi).then_some((lo, hi - lo))
        })
    }

    /// Regions of this process's memory faulted in one after the other from their starts.
    pub(crate) struct FaultIn {
        regions: Vec<(usize, usize)>,
        region: usize,
        at: usize,
        /// Bytes covered so far over all regions.
        pub(crate) done: u64,
    }

    impl FaultIn {
        /// `regions` as (start, length): writable mappings of this process that are never
        /// unmapped while it runs.
        pub(crate) fn new(regions: Vec<(usize, usize)>) -> FaultIn {
            FaultIn {
                regions,
                region: 0,
                at: 0,
                done: 0,
            }
        }

        pub(crate) fn finished(&self) -> bool {
            self.region >= self.regions.len()
        }

        /// Faults in the next [`STEP`] bytes when fewer than `want` are covered; false
        /// when there was nothing to do.
        pub(crate) fn step(&mut self, want: u64) -> bool {
            if self.finished() || self.done >= want {
                return false;
            }
            let (base, size) = self.regions[self.region];
            let n = STEP.min(size - self.at);
            // SAFETY: the range lies in a writable mapping of this process that is never
            // unmapped (`new`); populating only maps cleared pages where none are mapped
            // and leaves mapped pages, and what is written in them, as they are.
            let r =
                unsafe { libc::madvise((base + self.at) as *mut c_void, n, MADV_POPULATE_WRITE) };
            self.at += n;
            self.done += n as u64;
            // A refusal (a kernel before 5.14, a range not writable) ends the region.
            if r != 0 || self.at == size {
                self.region += 1;
                self.at = 0;
            }
            true
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::linux::{mapping_of, FaultIn};
    use super::*;

    /// Pages of `[p, p + len)` resident in memory (`mincore`).
    fn resident(p: *mut u8, len: usize) -> usize {
        let page = 4096;
        let mut v = vec![0u8; len.div_ceil(page)];
        // SAFETY: `p` is page-aligned and `len` bytes of it are mapped (the caller's
        // mapping); `v` has one byte per page.
        assert_eq!(unsafe { libc::mincore(p.cast(), len, v.as_mut_ptr()) }, 0);
        v.iter().filter(|&&b| b & 1 != 0).count()
    }

    /// The thread's step faults in a mapping from its start up to the bytes wanted and no
    /// further, and leaves what is written in it alone.
    #[test]
    fn faulting_in_maps_pages_up_to_the_target_and_keeps_their_contents() {
        let len = 64 << 20;
        // SAFETY: a fresh private anonymous mapping, unmapped at the end of the test.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // Ordinary pages, so that residency is counted page by page whatever the machine's
        // transparent huge page setting.
        // SAFETY: advice on the mapping made above.
        unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) };
        let p = p.cast::<u8>();
        // SAFETY: inside the mapping.
        unsafe { p.add(4 << 20).write(7) };
        assert_eq!(mapping_of(p as usize).map(|m| m.0), Some(p as usize));
        let mut f = FaultIn::new(vec![(p as usize, len)]);
        let want = 20 << 20;
        while f.step(want) {}
        // 8 MiB at a time: 24 MiB covered, and not one page beyond.
        assert_eq!(f.done, 24 << 20);
        assert!(!f.finished());
        if resident(p, len) > 1 {
            // The kernel has the advice (5.14 and later).
            assert_eq!(resident(p, 24 << 20), (24 << 20) / 4096);
            assert_eq!(resident(unsafe { p.add(24 << 20) }, len - (24 << 20)), 0);
        }
        // SAFETY: inside the mapping.
        assert_eq!(unsafe { p.add(4 << 20).read() }, 7);
        while f.step(u64::MAX) {}
        assert!(f.finished());
        assert_eq!(f.done, len as u64);
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(p.cast(), len) };
    }

    /// The target is a quarter above the peak, and a small margin.
    #[test]
    fn the_target_is_a_quarter_above_the_peak() {
        assert_eq!(target(0), AHEAD);
        assert_eq!(target(4 << 30), (5 << 30) + AHEAD);
        assert_eq!(target(u64::MAX), u64::MAX);
    }
}
