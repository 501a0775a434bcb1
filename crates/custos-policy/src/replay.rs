//! The replay memory (seed 000 §4.2): a bounded FIFO of transitions the DQN
//! trainer samples its mini-batches from.
//!
//! Sampling uniformly from many past transitions, rather than learning from
//! them in arrival order, breaks the correlation between consecutive
//! decisions of the same task; the bound keeps memory fixed and lets old
//! behaviour age out as the policy changes.

use std::collections::VecDeque;

use anyhow::{bail, Result};
use rand::Rng;

use crate::transition::Transition;

#[derive(Clone, Debug)]
pub struct ReplayMemory {
    capacity: usize,
    entries: VecDeque<Transition>,
    evictions: u64,
}

impl ReplayMemory {
    /// A memory holding at most `capacity` transitions (at least one).
    pub fn new(capacity: usize) -> Result<Self> {
        if capacity == 0 {
            bail!("a replay memory needs room for at least one transition");
        }
        // Do not reserve `capacity` up front: callers may pass a generous
        // bound and fill only part of it.
        Ok(ReplayMemory {
            capacity,
            entries: VecDeque::new(),
            evictions: 0,
        })
    }

    /// Adds a transition; when full, the oldest one is evicted (and counted).
    pub fn push(&mut self, t: Transition) {
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
            self.evictions += 1;
        }
        self.entries.push_back(t);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many transitions were pushed out to make room.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// The stored transitions, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Transition> {
        self.entries.iter()
    }

    /// `batch` transitions drawn uniformly with replacement (empty when the
    /// memory is). With replacement, so a batch larger than the memory is
    /// still a valid (if repetitive) batch; the rng is the caller's so that
    /// a seeded one makes training reproducible.
    pub fn sample<R: Rng + ?Sized>(&self, batch: usize, rng: &mut R) -> Vec<&Transition> {
        if self.entries.is_empty() {
            return Vec::new();
        }
        (0..batch)
            .map(|_| &self.entries[rng.gen_range(0..self.entries.len())])
            .collect()
    }
}

impl Extend<Transition> for ReplayMemory {
    fn extend<I: IntoIterator<Item = Transition>>(&mut self, iter: I) {
        for t in iter {
            self.push(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    /// A transition told apart by its pid.
    fn t(pid: u32) -> Transition {
        Transition {
            pid,
            ..Default::default()
        }
    }

    #[test]
    fn the_memory_is_bounded_and_evicts_the_oldest() {
        let mut m = ReplayMemory::new(3).unwrap();
        assert!(m.is_empty());
        for pid in 0..5 {
            m.push(t(pid));
        }
        assert_eq!(m.len(), 3);
        assert_eq!(m.capacity(), 3);
        assert_eq!(m.evictions(), 2);
        assert_eq!(m.iter().map(|t| t.pid).collect::<Vec<_>>(), [2, 3, 4]);
        m.extend([t(5)]);
        assert_eq!(m.iter().map(|t| t.pid).collect::<Vec<_>>(), [3, 4, 5]);
        assert_eq!(m.evictions(), 3);
        assert!(ReplayMemory::new(0).is_err());
    }

    #[test]
    fn sampling_is_uniform_covering_and_reproducible() {
        let mut m = ReplayMemory::new(100).unwrap();
        assert!(m.sample(8, &mut StdRng::seed_from_u64(1)).is_empty());
        m.extend((0..10).map(t));

        let mut counts = [0u32; 10];
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..200 {
            let batch = m.sample(50, &mut rng);
            assert_eq!(batch.len(), 50);
            for s in batch {
                counts[s.pid as usize] += 1;
            }
        }
        // 10 000 draws over 10 entries: each near 1 000 (σ ≈ 30).
        for (pid, &c) in counts.iter().enumerate() {
            assert!(
                (850..1150).contains(&c),
                "entry {pid} drawn {c} times of 10000"
            );
        }

        // With replacement: a batch larger than the memory.
        assert_eq!(m.sample(25, &mut rng).len(), 25);

        let pids = |seed| {
            m.sample(20, &mut StdRng::seed_from_u64(seed))
                .iter()
                .map(|t| t.pid)
                .collect::<Vec<_>>()
        };
        assert_eq!(pids(42), pids(42));
        assert_ne!(pids(42), pids(43));
    }
}
