//! A program run on the reference interpreter with the same host as a [`crate::Session`]:
//! the same feeds, the same outfeed collectors, the same loop (`device_iterations` ×
//! (`gradient_accumulation` micro-batches, then the update)). It is the oracle the tiled
//! execution is compared with (the flagship's loss curve, outfeed modes), and lets a program
//! be checked before it is compiled.

use crate::connect::{check_connected, connect};
use crate::error::{RuntimeError, StreamError};
use crate::host::SessionHost;
use crate::options::SessionOptions;
use crate::outfeed::OutfeedData;
use crate::stream::{graph_streams, StreamType};
use ipusim_compiler::build::{source_program, step_graph};
use ipusim_ir::Program;
use ipusim_sim::interp::{Interpreter, Streams};
use ipusim_sim::tensor::Tensor;
use std::collections::BTreeMap;
use std::path::Path;

/// A program on the reference interpreter.
pub struct ReferenceSession {
    interp: Interpreter,
    host: SessionHost,
    infeeds: Vec<StreamType>,
    gradient_accumulation: u32,
    device_iterations: u32,
}

impl ReferenceSession {
    /// The step graph of `program` on the interpreter, run and connected as `options` say
    /// (target, partials, threads and trace are ignored); CSV paths are relative to
    /// `base_dir`.
    pub fn new(
        program: &Program,
        base_dir: &Path,
        options: &SessionOptions,
    ) -> Result<ReferenceSession, RuntimeError> {
        let source =
            source_program(program, &options.build).map_err(|e| RuntimeError::build(program, e))?;
        let program = &*source;
        let build = options.build.of_source();
        let step = step_graph(program, &build).map_err(|e| RuntimeError::build(program, e))?;
        let (infeeds, outfeeds) = graph_streams(&step.graph);
        let host = connect(program, base_dir, &infeeds, &outfeeds, &options.streams)?;
        check_connected(&host, &infeeds)?;
        Ok(ReferenceSession {
            interp: Interpreter::new(&step.graph, options.fp, options.seed)?,
            host,
            infeeds,
            gradient_accumulation: step.gradient_accumulation.max(1),
            device_iterations: options
                .build
                .device_iterations
                .unwrap_or(step.device_iterations)
                .max(1),
        })
    }

    /// The interpreter (variables, flags).
    pub fn interpreter(&self) -> &Interpreter {
        &self.interp
    }

    /// Overwrites a variable (e.g. from a checkpoint).
    pub fn set_variable(
        &mut self,
        name: &str,
        value: ipusim_sim::tensor::Tensor,
    ) -> Result<(), RuntimeError> {
        Ok(self.interp.set_variable(name, value)?)
    }

    /// The host (to connect feeds).
    pub fn host_mut(&mut self) -> &mut SessionHost {
        &mut self.host
    }

    /// One run: `device_iterations` steps of `gradient_accumulation` micro-batches each;
    /// returns each outfeed's data.
    pub fn run(&mut self) -> Result<BTreeMap<String, OutfeedData>, RuntimeError> {
        let per_run = u64::from(self.device_iterations) * u64::from(self.gradient_accumulation);
        let needs = self
            .infeeds
            .iter()
            .map(|s| (s.name.clone(), per_run))
            .collect();
        self.host.begin_run(&needs)?;
        for _ in 0..self.device_iterations {
            for _ in 0..self.gradient_accumulation {
                let mut feeds = Streams::new();
                for s in &self.infeeds {
                    let mut buf = vec![0u8; s.bytes()];
                    self.host.next_infeed(&s.name, &mut buf)?;
                    let t = Tensor::from_bytes(s.dtype, s.shape.clone(), &buf).map_err(|_| {
                        StreamError::Malformed {
                            stream: s.to_string(),
                        }
                    })?;
                    feeds.insert(s.name.clone(), t);
                }
                let out = self.interp.micro_batch(&feeds)?;
                self.send(out)?;
            }
            let out = self.interp.update()?;
            self.send(out)?;
        }
        Ok(self.host.finish_run())
    }

    fn send(&mut self, out: Streams) -> Result<(), RuntimeError> {
        for (name, t) in out {
            let bytes = crate::codec::tensor_to_bytes(&t).map_err(|source| StreamError::Value {
                name: name.clone(),
                source,
            })?;
            self.host.receive_outfeed(&name, &bytes)?;
        }
        Ok(())
    }
}
