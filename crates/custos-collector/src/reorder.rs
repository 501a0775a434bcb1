//! The last stage of the consumer: merges the CPUs' streams into one stream in
//! time order, so the output is causally ordered (docs/event-schema.md,
//! "Order").
//!
//! Each CPU's lines arrive here already in sequence order (the consumer holds
//! them back until every earlier number of that CPU is delivered or settled as
//! lost), and on one CPU sequence order is time order: a record takes its
//! number and then its time with preemption off. So a k-way merge by time is
//! enough, as long as nothing is written while a CPU could still produce an
//! older line: each CPU has a `floor`, a time no line of it still to come is
//! older than, and a line is written only when no CPU's floor is below it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::Write;

use crate::workflows::{JobStep, Workflows};

/// Lines of one CPU, in sequence order, not yet written.
#[derive(Default)]
struct CpuLines {
    /// The lines' bytes, oldest first: a ring, so that writing lines from
    /// its front never moves the rest (compacting a Vec did, 3 % of the
    /// consumer's time at 800 k events/s).
    bytes: VecDeque<u8>,
    /// Each line in `bytes`: its time, length and, for an event, what
    /// the workflow tracker needs of it.
    items: VecDeque<(u64, u32, Option<JobStep>)>,
    /// No line of this CPU not yet pushed is older than this.
    floor_ns: u64,
}

/// The merge of every CPU's ordered lines into one ordered stream (its bound,
/// `max_bytes`, is kept by the consumer: `Consumer::relieve`).
pub struct Merge {
    cpus: Vec<CpuLines>,
    /// The first line of each CPU that has lines: (time, cpu).
    heads: BinaryHeap<Reverse<(u64, usize)>>,
    buffered: usize,
    /// Time of the last line written.
    last_out_ns: u64,
    /// Lines written older than a line written before them (only after the
    /// byte budget forced lines out early, or for late records).
    pub out_of_order: u64,
    pub max_bytes: usize,
    /// Links the events into workflows as they come out in order (None: off).
    pub workflows: Option<Workflows>,
    /// An event line's end with its workflow fields, and the workflow it
    /// names when it is the plain `,"workflow":N}\n` (reused while the
    /// workflow stays the same, as it mostly does from line to line).
    tail: Vec<u8>,
    tail_of: Option<u64>,
}

impl Merge {
    pub fn new(nr_cpus: usize, max_bytes: usize) -> Self {
        Merge {
            cpus: (0..nr_cpus).map(|_| CpuLines::default()).collect(),
            heads: BinaryHeap::new(),
            buffered: 0,
            last_out_ns: 0,
            out_of_order: 0,
            max_bytes,
            workflows: None,
            tail: Vec::new(),
            tail_of: None,
        }
    }

    /// Links the event lines into workflows on their way out.
    pub fn with_workflows(mut self) -> Self {
        self.workflows = Some(Workflows::new());
        self
    }

    /// For an event line leaving now (in causal order): assigns its
    /// workflow and puts the line's new end, its workflow fields and `}\n`,
    /// in `tail`. Returns whether the line's own `}\n` gives way to it.
    fn close_line(&mut self, step: Option<JobStep>) -> bool {
        let (Some(wf), Some(step)) = (&mut self.workflows, step) else {
            return false;
        };
        let (workflow, start) = wf.assign(&step);
        // Most lines name the workflow of the line before: its end is reused.
        if start.is_some() || self.tail_of != Some(workflow) {
            self.tail.clear();
            crate::workflows::suffix(&mut self.tail, workflow, start);
            self.tail_of = start.is_none().then_some(workflow);
        }
        true
    }

    fn cpu(&mut self, cpu: usize) -> &mut CpuLines {
        if cpu >= self.cpus.len() {
            self.cpus.resize_with(cpu + 1, CpuLines::default);
        }
        &mut self.cpus[cpu]
    }

    /// Appends the next line of `cpu` (the caller keeps each CPU's order);
    /// `step` for an event line (it ends in `}\n`).
    pub fn push(&mut self, cpu: usize, time_ns: u64, line: &[u8], step: Option<JobStep>) {
        let c = self.cpu(cpu);
        let was_empty = c.items.is_empty();
        c.bytes.extend(line);
        c.items.push_back((time_ns, line.len() as u32, step));
        c.floor_ns = c.floor_ns.max(time_ns);
        self.buffered += line.len();
        if was_empty {
            self.heads.push(Reverse((time_ns, cpu)));
        }
    }

    /// Raises what is known of `cpu`: none of its lines still to come is older than `ns`.
    pub fn raise_floor(&mut self, cpu: usize, ns: u64) {
        let c = self.cpu(cpu);
        c.floor_ns = c.floor_ns.max(ns);
    }

    /// What is known of `cpu` (see [`Merge::raise_floor`]).
    pub fn floor(&self, cpu: usize) -> u64 {
        self.cpus.get(cpu).map_or(0, |c| c.floor_ns)
    }

    pub fn buffered_bytes(&self) -> usize {
        self.buffered
    }

    pub fn buffered_lines(&self) -> usize {
        self.cpus.iter().map(|c| c.items.len()).sum()
    }

    /// Writes a line now, outside the merge (one the consumer holds back
    /// for an earlier number of its CPU, written early to keep the bound).
    pub fn write_early<W: Write>(
        &mut self,
        out: &mut W,
        time_ns: u64,
        line: &[u8],
        step: Option<JobStep>,
    ) -> std::io::Result<()> {
        if self.close_line(step) {
            out.write_all(&line[..line.len() - 2])?;
            out.write_all(&self.tail)?;
        } else {
            out.write_all(line)?;
        }
        if time_ns < self.last_out_ns {
            self.out_of_order += 1;
        }
        self.last_out_ns = self.last_out_ns.max(time_ns);
        Ok(())
    }

    /// Writes every line no CPU can still precede; with `all`, every line.
    /// Returns how many it wrote.
    pub fn release<W: Write>(&mut self, out: &mut W, all: bool) -> std::io::Result<u64> {
        let mut written = 0;
        // The oldest time a CPU without buffered lines may still produce
        // (a CPU with lines is represented by its head in `heads`).
        let mut watermark = (u64::MAX, usize::MAX);
        if !all {
            for (i, c) in self.cpus.iter().enumerate() {
                if c.items.is_empty() {
                    watermark = watermark.min((c.floor_ns, i));
                }
            }
        }
        while let Some(&Reverse((time, cpu))) = self.heads.peek() {
            if (time, cpu) > watermark {
                break;
            }
            self.heads.pop();
            let (t, len, step) = self.cpus[cpu].items.pop_front().expect("a head has a line");
            debug_assert_eq!(t, time);
            let len = len as usize;
            let tracked = self.close_line(step);
            let c = &mut self.cpus[cpu];
            let body = if tracked { len - 2 } else { len };
            let (front, back) = c.bytes.as_slices();
            if front.len() >= body {
                out.write_all(&front[..body])?;
            } else {
                out.write_all(front)?;
                out.write_all(&back[..body - front.len()])?;
            }
            if tracked {
                out.write_all(&self.tail)?;
            }
            c.bytes.drain(..len);
            self.buffered -= len;
            if c.items.is_empty() {
                if !all {
                    watermark = watermark.min((c.floor_ns, cpu));
                }
            } else {
                self.heads.push(Reverse((c.items[0].0, cpu)));
            }
            if time < self.last_out_ns {
                self.out_of_order += 1;
            }
            self.last_out_ns = self.last_out_ns.max(time);
            written += 1;
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(out: &[u8]) -> Vec<&str> {
        std::str::from_utf8(out).unwrap().lines().collect()
    }

    #[test]
    fn cpus_merge_by_time_once_no_cpu_can_precede() {
        let mut m = Merge::new(2, 1 << 20);
        let mut out = Vec::new();
        m.push(0, 10, b"a10\n", None);
        m.push(0, 30, b"a30\n", None);
        // CPU 1 has said nothing: it may still produce something older.
        m.release(&mut out, false).unwrap();
        assert!(out.is_empty());
        m.push(1, 20, b"b20\n", None);
        m.release(&mut out, false).unwrap();
        // a30 waits: CPU 1 may still have something between 20 and 30.
        assert_eq!(lines(&out), ["a10", "b20"]);
        m.raise_floor(1, 25);
        m.release(&mut out, false).unwrap();
        assert_eq!(lines(&out), ["a10", "b20"]);
        m.raise_floor(1, 40);
        m.release(&mut out, false).unwrap();
        assert_eq!(lines(&out), ["a10", "b20", "a30"]);
        assert_eq!(m.buffered_bytes(), 0);
        assert_eq!(m.out_of_order, 0);
    }

    #[test]
    fn release_all_empties_the_buffer_in_time_order() {
        let mut m = Merge::new(3, 1 << 20);
        let mut out = Vec::new();
        for (cpu, t) in [(2, 5u64), (0, 7), (1, 1), (2, 9), (0, 8)] {
            m.push(cpu, t, format!("{cpu}:{t}\n").as_bytes(), None);
        }
        m.release(&mut out, true).unwrap();
        assert_eq!(lines(&out), ["1:1", "2:5", "0:7", "0:8", "2:9"]);
        assert_eq!(m.buffered_lines(), 0);
    }
}
