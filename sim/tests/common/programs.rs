//! The programs the engine tests run: every `.ron` program in the workspace's `programs/`
//! and in `tests/programs/sim/`, and small targets to compile them for.

#![allow(dead_code)]

use ipusim_compiler::{BuildOptions, PartialsType, Target};
use ipusim_runtime::launch::{launch, LaunchError, LaunchOptions, Launched};
use ipusim_sim::engine::{EngineError, EngineOptions};
use std::path::{Path, PathBuf};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Shipped programs that are there for their cycle reports only: a 224×224 ResNet-50 does
/// not fit one IPU and the hands-on day's ResNet101 not two, so there is nothing to simulate
/// (`tests/cli_model.rs` and `docs/hands-on.md` hold their reports).
const REPORT_ONLY: &[&str] = &["resnet50.ron", "hands_on_resnet101.ron"];

/// Every program file the engine can run: `programs/*.ron` (but [`REPORT_ONLY`]), then
/// `tests/programs/sim/*.ron`, sorted.
pub fn all() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ["programs", "tests/programs/sim"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        files.retain(|p| p.extension().is_some_and(|e| e == "ron"));
        files.retain(|p| {
            !p.file_name()
                .is_some_and(|n| REPORT_ONLY.iter().any(|r| n == *r))
        });
        files.sort();
        out.extend(files);
    }
    out
}

/// One of the engine tests' own programs.
pub fn sim_program(name: &str) -> PathBuf {
    root()
        .join("tests/programs/sim")
        .join(format!("{name}.ron"))
}

/// An Mk2 with `tiles` tiles.
pub fn mk2(tiles: u32) -> Target {
    let mut t = Target::mk2();
    t.name = format!("mk2-{tiles}");
    t.tiles = tiles;
    t
}

/// Launches `path` for `target` with `engine` options and float partials.
pub fn launch_with(path: &Path, target: &Target, engine: EngineOptions) -> Launched {
    launch_partials(path, target, engine, PartialsType::Float)
}

/// Launches `path` with a partials type.
pub fn launch_partials(
    path: &Path,
    target: &Target,
    engine: EngineOptions,
    partials: PartialsType,
) -> Launched {
    try_launch(path, target, engine, partials)
        .unwrap_or_else(|| panic!("{} does not fit in {}", path.display(), target.name))
}

/// Launches `path`, or `None` when it does not fit in the target's tile memory (a program
/// written for a whole chip need not fit a 16-tile one); any other failure panics.
pub fn try_launch(
    path: &Path,
    target: &Target,
    engine: EngineOptions,
    partials: PartialsType,
) -> Option<Launched> {
    try_launch_in(path, target, engine, partials, None)
}

/// [`try_launch`] with a precision policy override.
pub fn try_launch_in(
    path: &Path,
    target: &Target,
    engine: EngineOptions,
    partials: PartialsType,
    precision: Option<ipusim_ir::Precision>,
) -> Option<Launched> {
    let options = LaunchOptions {
        build: BuildOptions {
            target: target.clone(),
            precision,
            partials,
            ..BuildOptions::default()
        },
        engine,
    };
    match launch(path, &options) {
        Ok(l) => Some(l),
        Err(LaunchError::Build {
            source: EngineError::OutOfMemory { .. },
            ..
        }) => {
            println!(
                "{}: does not fit in {}, skipped",
                path.display(),
                target.name
            );
            None
        }
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

/// The file name of a program path.
pub fn name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}
