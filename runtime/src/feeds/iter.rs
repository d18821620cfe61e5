//! A Rust iterator as an infeed, for library users: each item is one micro-batch, a host
//! [`Tensor`] of exactly the stream's type (an exact-mode `f64` tensor of a float dtype is
//! rounded once to that dtype). When the iterator ends, the next micro-batch is an error
//! naming how many were delivered.

use super::{check_len, value_error, Feed, FeedError};
use crate::codec::tensor_to_bytes;
use crate::stream::StreamType;
use ipusim_sim::tensor::Tensor;

/// Micro-batches from an iterator of host tensors.
pub struct IteratorFeed {
    items: Box<dyn Iterator<Item = Tensor> + Send>,
    delivered: u64,
}

impl IteratorFeed {
    /// A feed over `items`.
    pub fn new(items: impl Iterator<Item = Tensor> + Send + 'static) -> IteratorFeed {
        IteratorFeed {
            items: Box::new(items),
            delivered: 0,
        }
    }
}

impl std::fmt::Debug for IteratorFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IteratorFeed {{ delivered: {} }}", self.delivered)
    }
}

impl Feed for IteratorFeed {
    fn fill(&mut self, stream: &StreamType, dst: &mut [u8]) -> Result<(), FeedError> {
        check_len(stream, self.delivered, dst)?;
        let Some(t) = self.items.next() else {
            return Err(FeedError::Shorter {
                stream: stream.name.clone(),
                message: format!(
                    "the iterator ended after {} micro-batch{}",
                    self.delivered,
                    if self.delivered == 1 { "" } else { "es" }
                ),
            });
        };
        if t.ty() != stream.tensor_type() {
            return Err(FeedError::Value {
                stream: stream.name.clone(),
                micro_batch: self.delivered,
                message: format!(
                    "the iterator gave a tensor of type {}, the stream is {}",
                    t.ty(),
                    stream.tensor_type()
                ),
            });
        }
        let bytes = tensor_to_bytes(&t).map_err(|e| value_error(stream, self.delivered, e))?;
        dst.copy_from_slice(&bytes);
        self.delivered += 1;
        Ok(())
    }

    fn remaining(&self, _: &StreamType) -> Option<u64> {
        None
    }

    fn describe(&self) -> String {
        "a Rust iterator".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipusim_ir::DType;

    #[test]
    fn items_are_micro_batches_until_the_end() {
        let s = StreamType::new("x", DType::I32, [2]);
        let items = (0..2).map(|i| Tensor::i32([2], vec![i, i + 1]).unwrap());
        let mut f = IteratorFeed::new(items);
        let mut buf = vec![0u8; 8];
        f.fill(&s, &mut buf).unwrap();
        f.fill(&s, &mut buf).unwrap();
        assert_eq!(buf[4..], 2i32.to_le_bytes());
        let e = f.fill(&s, &mut buf).unwrap_err();
        assert_eq!(
            e.to_string(),
            "infeed 'x' is shorter than the run needs: the iterator ended after 2 micro-batches"
        );
        let mut g = IteratorFeed::new(std::iter::once(Tensor::f32([2], vec![1.0, 2.0]).unwrap()));
        let e = g.fill(&s, &mut buf).unwrap_err();
        assert!(
            e.to_string().contains("type f32[2], the stream is i32[2]"),
            "{e}"
        );
    }
}
