//! Weights files: the values of large variables beside a program instead of inside it.
//!
//! `ipusim import model.onnx -o model.ron` writes the imported weights to
//! `model.weights.bin` and each variable as `init: File(path: "model.weights.bin", offset: N,
//! encoding: F32)`, so that the program stays a file a person reads. Loading the program reads
//! every such variable's values (path relative to the program file, inside its directory)
//! into [`Init::Values`]; the rest of the crate never sees a `File`. A missing file, one
//! shorter than a variable needs, or a path outside the program's directory is an error at
//! the variable's node.

use super::doc::ProgramDoc;
use super::error::{ErrorKind, ProgramError};
use super::locate::SourceMap;
use crate::op::{Encoding, Init, Op};
use std::path::Path;

/// Reads every `File` initialiser of `doc` into `Values`; `base` is the program's directory.
pub(crate) fn read(doc: &mut ProgramDoc, base: &Path, map: &SourceMap) -> Result<(), ProgramError> {
    for (i, node) in doc.nodes.iter_mut().enumerate() {
        let Op::Variable { shape, init, .. } = &mut node.op else {
            continue;
        };
        let Init::File {
            path,
            offset,
            encoding,
        } = init
        else {
            continue;
        };
        let at = |message: String| map.at(&format!("nodes[{i}].op"), ErrorKind::Io, message);
        let values =
            read_values(base, path, *offset, *encoding, shape.num_elements()).map_err(at)?;
        *init = Init::Values(values);
    }
    Ok(())
}

fn read_values(
    base: &Path,
    path: &str,
    offset: u64,
    encoding: Encoding,
    n: usize,
) -> Result<Vec<f64>, String> {
    let need = (n as u64).saturating_mul(encoding.size() as u64);
    let bytes = super::input::read_beside(base, path, offset, need, "weights file", "program")?;
    Ok(match encoding {
        Encoding::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        Encoding::F64 => bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("chunks_exact gives 8 bytes")))
            .collect(),
    })
}

/// Moves every `Values` initialiser of `doc` with more than [`INLINE_MAX`] values to the
/// weights file `name`, returning its bytes: FP32 when every value is an `f32`, else FP64, so
/// that reading it back gives the same values exactly.
pub(crate) fn split(doc: &mut ProgramDoc, name: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    for node in &mut doc.nodes {
        let Op::Variable { init, .. } = &mut node.op else {
            continue;
        };
        let Init::Values(v) = init else {
            continue;
        };
        if v.len() <= INLINE_MAX {
            continue;
        }
        let exact32 = v.iter().all(|&x| x.is_nan() || (x as f32) as f64 == x);
        let encoding = if exact32 {
            Encoding::F32
        } else {
            Encoding::F64
        };
        let offset = bytes.len() as u64;
        for &x in v.iter() {
            match encoding {
                Encoding::F32 => bytes.extend_from_slice(&(x as f32).to_le_bytes()),
                Encoding::F64 => bytes.extend_from_slice(&x.to_le_bytes()),
            }
        }
        *init = Init::File {
            path: name.to_string(),
            offset,
            encoding,
        };
    }
    bytes
}

/// Variables of at most this many values stay inline (a bias, a batch-norm scale); our
/// choice, so that a small program needs no second file.
pub const INLINE_MAX: usize = 64;
