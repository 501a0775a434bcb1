//! Transitions: what the scheduler saw, did and got for one task between
//! two of its decisions (seed 000 §5, T = (S_t → S_t+1)), and the reward
//! the DQN learns from (Eq. 10–11).
//!
//! The kernel emits one per decision through a ring buffer
//! (`struct custos_transition` in the scheduler's policy_intf.h); a
//! recording is a file of them (`custos sched --record-transitions`).

use std::io::{self, Read, Write};

use anyhow::{bail, Context, Result};

use crate::features::{State, NR_FEATURES};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Transition {
    pub pid: u32,
    /// The queue chosen at S_t.
    pub action: u8,
    /// 1 when the network ran, 0 when the delta function reused the last action.
    pub inferred: u8,
    pub state: State,
    pub next_state: State,
    /// The task's provenance events between the two decisions (E_t), and
    /// how many of them were lost (E^d_t).
    pub events: u32,
    pub drops: u32,
    /// Idle slices on the CPU before the task ran at t and at t+1 (C_t, C_t+1).
    pub idle_before: u32,
    pub idle_after: u32,
    pub at_ns: u64,
}

/// r_c = −E^d/E (Eq. 10): the share of the cycle's events that was lost.
pub fn completeness_reward(events: u32, drops: u32) -> f32 {
    if events == 0 {
        0.0
    } else {
        -(drops.min(events) as f32) / events as f32
    }
}

/// r_p = C_t / (C_t + C_t+1 + 1) (Eq. 11): fewer idle slices next time is better.
pub fn utilization_reward(idle_before: u32, idle_after: u32) -> f32 {
    idle_before as f32 / (idle_before as f32 + idle_after as f32 + 1.0)
}

impl Transition {
    /// r = r_c + r_p.
    pub fn reward(&self) -> f32 {
        completeness_reward(self.events, self.drops)
            + utilization_reward(self.idle_before, self.idle_after)
    }

    /// Size of one record in a recording.
    pub const RECORD_BYTES: usize = 4 + 1 + 1 + 2 * NR_FEATURES + 4 * 4 + 8;

    pub fn encode(&self) -> [u8; Self::RECORD_BYTES] {
        let mut b = [0u8; Self::RECORD_BYTES];
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            b[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(&self.pid.to_le_bytes());
        put(&[self.action, self.inferred]);
        put(&self.state);
        put(&self.next_state);
        for v in [self.events, self.drops, self.idle_before, self.idle_after] {
            put(&v.to_le_bytes());
        }
        put(&self.at_ns.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; Self::RECORD_BYTES]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let mut state = [0u8; NR_FEATURES];
        let mut next_state = [0u8; NR_FEATURES];
        state.copy_from_slice(&b[6..6 + NR_FEATURES]);
        next_state.copy_from_slice(&b[6 + NR_FEATURES..6 + 2 * NR_FEATURES]);
        let n = 6 + 2 * NR_FEATURES;
        Transition {
            pid: u32_at(0),
            action: b[4],
            inferred: b[5],
            state,
            next_state,
            events: u32_at(n),
            drops: u32_at(n + 4),
            idle_before: u32_at(n + 8),
            idle_after: u32_at(n + 12),
            at_ns: u64::from_le_bytes(b[n + 16..n + 24].try_into().unwrap()),
        }
    }
}

/// First bytes of a recording: a name and a format version.
pub const RECORDING_MAGIC: &[u8; 8] = b"CUSTOSTR";
pub const RECORDING_VERSION: u32 = 1;

/// Writes a recording: header, then fixed-size records.
pub struct RecordingWriter<W: Write> {
    out: W,
    pub written: u64,
}

impl<W: Write> RecordingWriter<W> {
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(RECORDING_MAGIC)?;
        out.write_all(&RECORDING_VERSION.to_le_bytes())?;
        out.write_all(&(NR_FEATURES as u32).to_le_bytes())?;
        Ok(RecordingWriter { out, written: 0 })
    }

    pub fn write(&mut self, t: &Transition) -> io::Result<()> {
        self.written += 1;
        self.out.write_all(&t.encode())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Reads a whole recording. A file that is not one, of another version, or
/// cut inside a record is an error naming what is wrong; nothing is guessed.
pub fn read_recording<R: Read>(mut input: R, name: &str) -> Result<Vec<Transition>> {
    let mut header = [0u8; 16];
    input
        .read_exact(&mut header)
        .with_context(|| format!("{name}: too short for a transition recording"))?;
    if &header[..8] != RECORDING_MAGIC {
        bail!("{name}: not a Custos transition recording (no CUSTOSTR header)");
    }
    let version = u32::from_le_bytes(header[8..12].try_into().unwrap());
    let features = u32::from_le_bytes(header[12..16].try_into().unwrap());
    if version != RECORDING_VERSION {
        bail!("{name}: recording format {version}, this build reads {RECORDING_VERSION}");
    }
    if features as usize != NR_FEATURES {
        bail!("{name}: recorded with {features} features, this build has {NR_FEATURES}");
    }
    let mut body = Vec::new();
    input
        .read_to_end(&mut body)
        .with_context(|| format!("reading {name}"))?;
    if body.len() % Transition::RECORD_BYTES != 0 {
        bail!(
            "{name}: truncated: {} bytes after the last whole record (of {} bytes)",
            body.len() % Transition::RECORD_BYTES,
            Transition::RECORD_BYTES
        );
    }
    Ok(body
        .chunks_exact(Transition::RECORD_BYTES)
        .map(|c| Transition::decode(c.try_into().unwrap()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(i: u32) -> Transition {
        let mut state = [0u8; NR_FEATURES];
        let mut next_state = [0u8; NR_FEATURES];
        for f in 0..NR_FEATURES {
            state[f] = (i as usize * 7 + f) as u8 % 129;
            next_state[f] = (i as usize * 3 + 2 * f) as u8 % 129;
        }
        Transition {
            pid: 1000 + i,
            action: (i % 4) as u8,
            inferred: (i % 2) as u8,
            state,
            next_state,
            events: 10 * i,
            drops: i,
            idle_before: i % 3,
            idle_after: i % 5,
            at_ns: 1 << 40 | i as u64,
        }
    }

    #[test]
    fn rewards_follow_eq_10_and_11() {
        assert_eq!(completeness_reward(0, 0), 0.0);
        assert_eq!(completeness_reward(100, 25), -0.25);
        assert_eq!(completeness_reward(10, 30), -1.0);
        assert_eq!(utilization_reward(0, 5), 0.0);
        assert_eq!(utilization_reward(3, 0), 0.75);
        let t = Transition {
            events: 4,
            drops: 1,
            idle_before: 1,
            idle_after: 0,
            ..Default::default()
        };
        assert_eq!(t.reward(), -0.25 + 0.5);
    }

    #[test]
    fn recordings_round_trip() {
        let all: Vec<_> = (0..50).map(sample).collect();
        let mut w = RecordingWriter::new(Vec::new()).unwrap();
        for t in &all {
            w.write(t).unwrap();
        }
        let bytes = w.out;
        assert_eq!(read_recording(&bytes[..], "mem").unwrap(), all);
    }

    #[test]
    fn bad_recordings_are_clear_errors() {
        let mut w = RecordingWriter::new(Vec::new()).unwrap();
        w.write(&sample(1)).unwrap();
        let bytes = w.out;
        let cut = read_recording(&bytes[..bytes.len() - 3], "f")
            .unwrap_err()
            .to_string();
        assert!(cut.contains("truncated"), "{cut}");
        let mut other = bytes.clone();
        other[0] = b'X';
        assert!(read_recording(&other[..], "f")
            .unwrap_err()
            .to_string()
            .contains("not a Custos"));
        let mut newer = bytes.clone();
        newer[8] = 9;
        assert!(read_recording(&newer[..], "f")
            .unwrap_err()
            .to_string()
            .contains("format 9"));
        assert!(read_recording(&bytes[..5], "f")
            .unwrap_err()
            .to_string()
            .contains("too short"));
    }
}
