//! Runtime CPU-feature dispatch for the hot slice kernels.
//!
//! The kernels are written once as portable, auto-vectorisable Rust (`#[inline(always)]`
//! bodies over fixed-size blocks). This module compiles each body a second and third time
//! with AVX-512 or AVX2 enabled and picks the best version the running CPU supports, so one
//! portable binary still gets wide vectors (the 64-bit multiplies of the PCG lanes in
//! [`super::rng`] need AVX-512DQ's `vpmullq` to be fast). Every version computes bit-identical
//! results: integer code and correctly rounded IEEE operations do not depend on vector width.

/// Defines `$vis fn $name(args) -> ret` that runs `$body(args)` compiled for the best
/// available x86-64 feature level (AVX-512, AVX2, baseline), or the portable build elsewhere.
/// Exported (hidden) so that the benchmarks' native baselines get the same vector width as
/// the simulator's kernels.
#[doc(hidden)]
#[macro_export]
macro_rules! simd_dispatch {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty => $body:path) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx512bw,avx2,fma")]
                unsafe fn avx512($($arg: $ty),*) -> $ret {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) -> $ret {
                    $body($($arg),*)
                }
                if std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512dq")
                    && std::is_x86_feature_detected!("avx512vl")
                    && std::is_x86_feature_detected!("avx512bw")
                {
                    // SAFETY: the CPU supports every feature `avx512` was compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU supports every feature `avx2` was compiled for.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}

pub(crate) use crate::simd_dispatch;
