//! The lowering's side thread: work whose result nothing in the lowering reads until a
//! settle point, done on a thread of its own while the lowering goes on — an exchange's
//! recorded copies built ([`super::copies`]) and a compute set's per-tile cycle estimates
//! (`ipusim_exe::cycles::tile_work_cycles`, which read the vertices' codelets, parameters
//! and operand lengths, never their offsets, so they are final once the set is emitted).
//!
//! The lowering runs on one thread (its decisions depend on one another); on a large CNN
//! the copies keep the side thread about half busy, and the cycle estimates were a pass of
//! their own over every tile's work after the memory plan. Each job's result depends on the
//! job alone, so it is the same whichever thread does it and whenever: jobs are done in the
//! order sent and their results given back in that order.

use super::copies::{Copies, Recorded};
use super::Lowerer;
use crate::executable::{ByteCopy, ExchangeId, TileWork};
use crate::target::Target;
use std::sync::mpsc;

/// Work for the side thread.
pub(crate) enum Job {
    /// Build exchange `.0`'s copies.
    Copies(u32, Copies),
    /// Estimate the cycles of compute set `.0`'s tiles.
    Cycles(u32, Vec<TileWork>),
}

/// A job done.
pub(crate) enum Done {
    /// Exchange `.0`'s copies.
    Copies(u32, Vec<ByteCopy>),
    /// Compute set `.0`'s tiles, each with its cycles, and the slowest tile's cycles.
    Cycles(u32, Vec<TileWork>, u64),
}

/// Emptied request lists on their way back to the lowering ([`SideWorker::spare`]): our own
/// choice of a few, enough for the exchanges recorded while one is built, so that the
/// lists of the largest exchanges are not held beyond that.
const SPARES: usize = 4;

impl Job {
    /// Does the job on the calling thread.
    pub fn run(self, target: &Target) -> Done {
        self.run_recycling(target, |_| {})
    }

    /// Does the job on the calling thread, handing the emptied request lists of the
    /// copies it builds to `spare`.
    fn run_recycling(self, target: &Target, spare: impl FnMut(Recorded)) -> Done {
        match self {
            Job::Copies(id, copies) => Done::Copies(id, copies.build_recycling(spare)),
            Job::Cycles(id, mut tiles) => {
                for tw in &mut tiles {
                    tw.cycles = ipusim_exe::cycles::tile_work_cycles(target, tw);
                }
                let slowest = tiles.iter().map(|t| t.cycles).max().unwrap_or(0);
                Done::Cycles(id, tiles, slowest)
            }
        }
    }
}

/// The side thread: jobs in, results out, in the order sent.
pub(crate) struct SideWorker {
    jobs: Option<mpsc::Sender<Job>>,
    done: mpsc::Receiver<Done>,
    /// Request lists the thread has built and emptied, for the lowering to fill again:
    /// a recorded exchange's lists grow to hundreds of thousands of entries, and each grew
    /// anew, doubling and faulting in fresh pages, on the lowering's thread.
    spare: mpsc::Receiver<Recorded>,
    thread: Option<std::thread::JoinHandle<()>>,
    pending: usize,
    /// For jobs done on the caller's thread when the side thread could not be started.
    target: Target,
}

impl SideWorker {
    /// Starts the thread for `target`'s estimates.
    pub fn start(target: &Target) -> SideWorker {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (outbox, done) = mpsc::channel();
        let (spares, spare) = mpsc::sync_channel(SPARES);
        let on_thread = target.clone();
        let thread = std::thread::Builder::new()
            .name("ipusim-lowering-side".into())
            .spawn(move || {
                for job in inbox {
                    // A full channel drops the lists (the lowering has enough).
                    let done = job.run_recycling(&on_thread, |r| {
                        let _ = spares.try_send(r);
                    });
                    if outbox.send(done).is_err() {
                        return;
                    }
                }
            })
            .ok();
        SideWorker {
            jobs: thread.as_ref().map(|_| jobs),
            done,
            spare,
            thread,
            pending: 0,
            target: target.clone(),
        }
    }

    /// Sends `job` to the thread: `None`, or the job done on the caller's thread when there
    /// is no thread (it could not be started).
    pub fn submit(&mut self, job: Job) -> Option<Done> {
        match &self.jobs {
            Some(jobs) => match jobs.send(job) {
                Ok(()) => {
                    self.pending += 1;
                    None
                }
                Err(mpsc::SendError(job)) => Some(job.run(&self.target)),
            },
            None => Some(job.run(&self.target)),
        }
    }

    /// An emptied request list the thread gave back, if any.
    pub fn spare(&self) -> Option<Recorded> {
        self.spare.try_recv().ok()
    }

    /// Every job sent so far, done, in the order sent. A panic on the thread (a bug) is
    /// raised again here.
    pub fn settle(&mut self) -> Vec<Done> {
        let mut out = Vec::with_capacity(self.pending);
        while self.pending > 0 {
            match self.done.recv() {
                Ok(done) => {
                    out.push(done);
                    self.pending -= 1;
                }
                Err(_) => {
                    self.jobs = None;
                    if let Some(Err(panic)) = self.thread.take().map(|t| t.join()) {
                        std::panic::resume_unwind(panic);
                    }
                    unreachable!("the side thread ended with jobs pending and without a panic");
                }
            }
        }
        out
    }
}

impl Drop for SideWorker {
    fn drop(&mut self) {
        // Closing the channel ends the thread once it has done what it was sent.
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Lowerer<'_> {
    /// Gives exchange `id` its copies: built on the side thread when some are recorded
    /// ([`Lowerer::settle`] fills them in), else now.
    pub(super) fn build_copies(&mut self, id: ExchangeId, copies: Copies) {
        if copies.recorded() {
            self.on_side_thread(Job::Copies(id.0, copies));
        } else {
            self.exchanges[id.0 as usize].copies = copies.build();
        }
    }

    /// Hands `job` to the side thread (started with the first job), or fills in its result
    /// now when it was done on this thread.
    pub(super) fn on_side_thread(&mut self, job: Job) {
        let target = self.target;
        let done = self
            .side
            .get_or_insert_with(|| SideWorker::start(target))
            .submit(job);
        if let Some(done) = done {
            self.fill_in(done);
        }
    }

    /// A request list for an exchange being recorded: one the side thread emptied, if it
    /// gave one back, else a new one.
    pub(crate) fn fresh_recorded(&self) -> Recorded {
        self.side
            .as_ref()
            .and_then(SideWorker::spare)
            .unwrap_or_default()
    }

    fn fill_in(&mut self, done: Done) {
        match done {
            Done::Copies(id, copies) => self.exchanges[id as usize].copies = copies,
            Done::Cycles(id, tiles, slowest) => {
                let cs = &mut self.compute_sets[id as usize];
                cs.tiles = tiles;
                cs.cycles = slowest;
            }
        }
    }

    /// Waits for the side thread to do every job sent and fills in their results: called
    /// before anything reads an exchange's copies or a compute set's tiles.
    pub fn settle(&mut self) {
        let done = match &mut self.side {
            Some(worker) => worker.settle(),
            None => return,
        };
        for d in done {
            self.fill_in(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::copies::tests::{exchange, requests};
    use super::*;
    use crate::codelets::{BlockParams, Codelet, ReduceOp, VertexParams};
    use crate::executable::{Operand, Operands, TensorId, TileId, Vertex, VertexGroup};
    use ipusim_ir::DType;

    /// A compute set's tiles: `n` tiles of one reduction vertex each, of growing lengths.
    fn tiles(n: u32) -> Vec<TileWork> {
        (0..n)
            .map(|t| TileWork {
                tile: TileId::new(0, t),
                groups: vec![VertexGroup {
                    codelet: Codelet::Reduce {
                        op: ReduceOp::Sum,
                        input: DType::F32,
                        acc: DType::F32,
                        output: DType::F32,
                    },
                    vertices: vec![Vertex {
                        worker: 0,
                        operands: Operands::from_iter([
                            Operand {
                                tensor: TensorId(0),
                                offset: 0,
                                len: 16 * (t + 1),
                            },
                            Operand {
                                tensor: TensorId(1),
                                offset: 0,
                                len: 4,
                            },
                        ]),
                        params: VertexParams::Block(BlockParams::new(1, 4, 4, (0, 4))),
                    }],
                }],
                cycles: 0,
            })
            .collect()
    }

    /// Jobs done on the side thread, copies of several exchanges and parts and the cycles of
    /// compute sets interleaved, come back in the order sent with the results of the same
    /// jobs done on the caller's thread.
    #[test]
    fn jobs_done_on_the_side_thread_are_those_done_in_place_in_order() {
        let target = Target::mk2();
        let job = |k: usize| {
            if k % 3 == 2 {
                Job::Cycles(k as u32, tiles(k as u32 + 1))
            } else {
                Job::Copies(k as u32, exchange(k % requests().len()))
            }
        };
        let n = 3 * requests().len();
        let mut worker = SideWorker::start(&target);
        for k in 0..n {
            assert!(worker.submit(job(k)).is_none());
        }
        let done = worker.settle();
        assert_eq!(done.len(), n);
        for (k, got) in done.into_iter().enumerate() {
            match (got, job(k).run(&target)) {
                (Done::Copies(a, x), Done::Copies(b, y)) => assert_eq!((a, x), (b, y)),
                (Done::Cycles(a, x, cx), Done::Cycles(b, y, cy)) => {
                    assert_eq!((a, &x, cx), (b, &y, cy));
                    assert!(x.iter().all(|t| t.cycles > 0));
                    assert_eq!(cx, x.iter().map(|t| t.cycles).max().unwrap());
                }
                _ => panic!("job {k} came back as another kind"),
            }
        }
    }
}
