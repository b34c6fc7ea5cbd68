//! Merges several sorted iterators (memtables, SSTables) into one sorted
//! stream: the tablet server's merged view and the input of compactions.
//!
//! A binary min-heap of child indices ordered by (current key, child index):
//! each step costs O(log k) comparisons for k children. Equal keys from
//! different children are all yielded, lower child index first, so callers
//! that list newer sources first see them first.

use crate::iterator::InternalIterator;
use crate::value::Value;
use crate::Result;
use std::cmp::Ordering;

pub struct MergingIterator {
    children: Vec<Box<dyn InternalIterator>>,
    /// Indices of valid children, heap-ordered; `heap[0]` is the current one.
    heap: Vec<usize>,
    /// The runner-up: the heap position (1 or 2) of the smaller of the
    /// top's two children, while known. It stays the runner-up as long as
    /// the top stays on top, so a step that leaves the top on top (a long
    /// stretch of one source) costs one comparison, not two.
    runner: Runner,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Runner {
    Unknown,
    /// The top is the only child left.
    Alone,
    At(usize),
}

impl MergingIterator {
    pub fn new(children: Vec<Box<dyn InternalIterator>>) -> Self {
        let heap = Vec::with_capacity(children.len());
        MergingIterator {
            children,
            heap,
            runner: Runner::Unknown,
        }
    }

    /// The runner-up's heap position, found with at most one comparison.
    fn runner(&mut self) -> Runner {
        if self.runner == Runner::Unknown {
            self.runner = match self.heap.len() {
                0 | 1 => Runner::Alone,
                2 => Runner::At(1),
                _ if less(&self.children, self.heap[2], self.heap[1]) => Runner::At(2),
                _ => Runner::At(1),
            };
        }
        self.runner
    }

    /// Which child the current entry comes from (`None` when not valid).
    #[cfg(test)]
    pub fn current_child(&self) -> Option<usize> {
        self.heap.first().copied()
    }

    /// Rebuilds the heap from every valid child after a repositioning.
    fn rebuild(&mut self) {
        self.runner = Runner::Unknown;
        self.heap.clear();
        self.heap
            .extend((0..self.children.len()).filter(|&i| self.children[i].valid()));
        for pos in (0..self.heap.len() / 2).rev() {
            sift_down(&mut self.heap, &self.children, pos);
        }
    }

    fn reposition(
        &mut self,
        mut f: impl FnMut(&mut Box<dyn InternalIterator>) -> Result<()>,
    ) -> Result<()> {
        for child in &mut self.children {
            if let Err(e) = f(child) {
                self.runner = Runner::Unknown;
                self.heap.clear();
                return Err(e);
            }
        }
        self.rebuild();
        Ok(())
    }
}

fn less(children: &[Box<dyn InternalIterator>], a: usize, b: usize) -> bool {
    match children[a].key().cmp(children[b].key()) {
        Ordering::Less => true,
        Ordering::Greater => false,
        Ordering::Equal => a < b,
    }
}

fn sift_down(heap: &mut [usize], children: &[Box<dyn InternalIterator>], mut pos: usize) {
    loop {
        let l = 2 * pos + 1;
        if l >= heap.len() {
            return;
        }
        let r = l + 1;
        let mut smallest = l;
        if r < heap.len() && less(children, heap[r], heap[l]) {
            smallest = r;
        }
        if !less(children, heap[smallest], heap[pos]) {
            return;
        }
        heap.swap(pos, smallest);
        pos = smallest;
    }
}

impl InternalIterator for MergingIterator {
    fn seek_to_first(&mut self) -> Result<()> {
        self.reposition(|c| c.seek_to_first())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.reposition(|c| c.seek(target))
    }

    fn next(&mut self) -> Result<()> {
        let Some(&top) = self.heap.first() else {
            return Ok(());
        };
        if let Err(e) = self.children[top].next() {
            self.runner = Runner::Unknown;
            self.heap.clear();
            return Err(e);
        }
        if self.children[top].valid() {
            match self.runner() {
                Runner::Alone => return Ok(()),
                Runner::At(r) if less(&self.children, top, self.heap[r]) => return Ok(()),
                _ => {}
            }
        } else {
            self.heap.swap_remove(0);
        }
        self.runner = Runner::Unknown;
        sift_down(&mut self.heap, &self.children, 0);
        Ok(())
    }

    fn valid(&self) -> bool {
        !self.heap.is_empty()
    }

    fn key(&self) -> &[u8] {
        self.heap.first().map_or(&[], |&i| self.children[i].key())
    }

    fn value(&self) -> &[u8] {
        self.heap.first().map_or(&[], |&i| self.children[i].value())
    }

    fn shared_value(&self) -> Value {
        self.heap
            .first()
            .map_or(Value::new(), |&i| self.children[i].shared_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iterator::{drain, Failing, VecIterator};
    use crate::Error;
    use rand::{Rng, SeedableRng};
    use std::sync::Arc;

    type Entries = Vec<(Vec<u8>, Vec<u8>)>;

    fn random_children(rng: &mut rand::rngs::StdRng) -> Vec<Entries> {
        let k = rng.gen_range(0..7);
        (0..k)
            .map(|c| {
                let n = rng.gen_range(0..60);
                let mut v: Entries = (0..n)
                    .map(|_| {
                        let len = rng.gen_range(0..3);
                        let key: Vec<u8> = (0..len).map(|_| rng.gen_range(b'a'..b'e')).collect();
                        (key, vec![c as u8])
                    })
                    .collect();
                v.sort();
                v.dedup_by(|a, b| a.0 == b.0);
                v
            })
            .collect()
    }

    fn merged(children: &[Entries]) -> MergingIterator {
        MergingIterator::new(
            children
                .iter()
                .map(|c| {
                    Box::new(VecIterator::new(Arc::new(c.clone()))) as Box<dyn InternalIterator>
                })
                .collect(),
        )
    }

    /// The expected merge: by key, then by child index (values hold the child).
    fn model(children: &[Entries]) -> Entries {
        let mut all: Entries = children.iter().flatten().cloned().collect();
        all.sort(); // values are child indices, so ties order by child
        all
    }

    #[test]
    fn matches_sorted_model() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for _ in 0..300 {
            let children = random_children(&mut rng);
            let want = model(&children);
            let mut it = merged(&children);
            it.seek_to_first().unwrap();
            assert_eq!(drain(&mut it), want);
            for _ in 0..10 {
                let len = rng.gen_range(0..3);
                let t: Vec<u8> = (0..len).map(|_| rng.gen_range(b'a'..b'f')).collect();
                it.seek(&t).unwrap();
                let tail: Entries = want.iter().filter(|(k, _)| *k >= t).cloned().collect();
                if let Some((_, v)) = tail.first() {
                    assert_eq!(it.current_child(), Some(v[0] as usize));
                }
                assert_eq!(drain(&mut it), tail);
            }
        }
    }

    #[test]
    fn child_error_propagates_and_invalidates() {
        let ok: Box<dyn InternalIterator> = Box::new(VecIterator::new(Arc::new(vec![(
            b"a".to_vec(),
            b"1".to_vec(),
        )])));
        let mut it = MergingIterator::new(vec![ok, Box::new(Failing)]);
        assert!(matches!(it.seek_to_first(), Err(Error::Corruption(_))));
        assert!(!it.valid());
    }
}
