//! The integer Q-network the scheduler evaluates in the kernel: 11 features
//! → `hidden` ReLU units → one Q-value per queue, INT8 (or INT4) weights and
//! 32-bit accumulators, no floating point (BPF has none).
//!
//! This is the reference forward pass. `policy_net.bpf.h` is its C twin;
//! the scheduler's `policy_net` test runs both on thousands of random
//! inputs through BPF_PROG_TEST_RUN and requires identical Q-values.
//!
//! ```text
//! acc_j = b1_j + Σ_i w1_ji · x_i                      (x_i in 0..=128)
//! h_j   = acc_j <= 0 ? 0 : min(HIDDEN_MAX, (acc_j · requant) >> REQUANT_SHIFT)
//! q_k   = b2_k + Σ_j w2_kj · h_j
//! action = the first k with the largest q_k
//! ```

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::features::{State, NR_FEATURES};

/// Largest hidden layer the BPF side holds (`CUSTOS_NET_MAX_HIDDEN`).
pub const MAX_HIDDEN: usize = 256;
/// Largest number of actions, one per queue (`CUSTOS_MAX_QUEUES`).
pub const MAX_ACTIONS: usize = 8;
/// Hidden activations are requantised to [0, HIDDEN_MAX] (`CUSTOS_NET_HIDDEN_MAX`).
pub const HIDDEN_MAX: i32 = 127;
/// Fixed-point shift of the requantisation multiplier (`CUSTOS_NET_REQUANT_SHIFT`).
pub const REQUANT_SHIFT: u32 = 16;
/// Bounds that keep every product inside 64 bits and every sum inside 32
/// (`CUSTOS_NET_BIAS_LIMIT`, `CUSTOS_NET_REQUANT_LIMIT`): |acc| < 2^25, so
/// acc · requant < 2^56; |q| ≤ 2^25 + 256 · 128 · 127 < 2^31.
pub const BIAS_LIMIT: i32 = 1 << 24;
pub const REQUANT_LIMIT: u32 = 1 << 30;

/// Weights of the integer network, row-major.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QNet {
    pub hidden: usize,
    pub actions: usize,
    /// Largest |weight| (127 for INT8, 7 for INT4).
    pub weight_max: i8,
    /// `hidden × NR_FEATURES`: row j holds unit j's input weights.
    pub w1: Vec<i8>,
    pub b1: Vec<i32>,
    pub requant: u32,
    /// `actions × hidden`.
    pub w2: Vec<i8>,
    pub b2: Vec<i32>,
}

impl QNet {
    /// Every shape and bound the BPF side relies on; a model that fails
    /// here never reaches the kernel.
    pub fn validate(&self) -> Result<()> {
        if self.hidden == 0 || self.hidden > MAX_HIDDEN {
            bail!(
                "hidden layer of {} units; 1 to {MAX_HIDDEN} supported",
                self.hidden
            );
        }
        if self.actions < 2 || self.actions > MAX_ACTIONS {
            bail!("{} actions; 2 to {MAX_ACTIONS} supported", self.actions);
        }
        if self.weight_max <= 0 {
            bail!("weight_max {} must be positive", self.weight_max);
        }
        let shapes = [
            ("w1", self.w1.len(), self.hidden * NR_FEATURES),
            ("b1", self.b1.len(), self.hidden),
            ("w2", self.w2.len(), self.actions * self.hidden),
            ("b2", self.b2.len(), self.actions),
        ];
        for (name, got, want) in shapes {
            if got != want {
                bail!("{name} has {got} values, the shape needs {want}");
            }
        }
        if let Some(w) = self
            .w1
            .iter()
            .chain(&self.w2)
            .find(|w| w.unsigned_abs() > self.weight_max as u8)
        {
            bail!(
                "weight {w} exceeds the model's weight_max {}",
                self.weight_max
            );
        }
        if let Some(b) = self
            .b1
            .iter()
            .chain(&self.b2)
            .find(|b| b.unsigned_abs() > BIAS_LIMIT as u32)
        {
            bail!("bias {b} exceeds ±{BIAS_LIMIT}");
        }
        if self.requant == 0 || self.requant > REQUANT_LIMIT {
            bail!(
                "requantisation multiplier {} outside 1..={REQUANT_LIMIT}",
                self.requant
            );
        }
        Ok(())
    }

    /// Q-values for one input (the first `actions` entries are meaningful).
    pub fn q_values(&self, x: &State) -> [i32; MAX_ACTIONS] {
        let mut h = [0i32; MAX_HIDDEN];
        for (j, hj) in h.iter_mut().enumerate().take(self.hidden) {
            let row = &self.w1[j * NR_FEATURES..(j + 1) * NR_FEATURES];
            let acc = self.b1[j]
                + row
                    .iter()
                    .zip(x)
                    .map(|(&w, &x)| w as i32 * x as i32)
                    .sum::<i32>();
            *hj = if acc <= 0 {
                0
            } else {
                (((acc as u64 * self.requant as u64) >> REQUANT_SHIFT).min(HIDDEN_MAX as u64))
                    as i32
            };
        }
        let mut q = [0i32; MAX_ACTIONS];
        for (k, qk) in q.iter_mut().enumerate().take(self.actions) {
            let row = &self.w2[k * self.hidden..(k + 1) * self.hidden];
            *qk = self.b2[k] + row.iter().zip(&h).map(|(&w, &h)| w as i32 * h).sum::<i32>();
        }
        q
    }

    /// The action (queue) for one input: the first largest Q-value.
    pub fn action(&self, x: &State) -> usize {
        argmax(&self.q_values(x)[..self.actions])
    }
}

/// Index of the first largest value (ties go to the lower queue, as in BPF);
/// for the integer Q-values and the float network's alike.
pub fn argmax<T: PartialOrd>(q: &[T]) -> usize {
    let mut best = 0;
    for (k, v) in q.iter().enumerate() {
        if *v > q[best] {
            best = k;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> QNet {
        // One unit reading nr_event, two actions: queue 1 wins when it is high.
        let mut w1 = vec![0i8; 2 * NR_FEATURES];
        w1[7] = 1;
        w1[NR_FEATURES + 10] = 1;
        QNet {
            hidden: 2,
            actions: 2,
            weight_max: 127,
            w1,
            b1: vec![-20, 0],
            requant: 1 << REQUANT_SHIFT,
            w2: vec![0, 1, 1, 0],
            b2: vec![0, 0],
        }
    }

    #[test]
    fn forward_pass_follows_its_formula() {
        let net = tiny();
        net.validate().unwrap();
        let mut x = [0u8; NR_FEATURES];
        x[10] = 64;
        x[7] = 30;
        // h0 = relu(30 - 20) = 10, h1 = 64; q0 = h1 = 64, q1 = h0 = 10.
        assert_eq!(&net.q_values(&x)[..2], &[64, 10]);
        assert_eq!(net.action(&x), 0);
        x[7] = 128;
        assert_eq!(&net.q_values(&x)[..2], &[64, 108]);
        assert_eq!(net.action(&x), 1);
    }

    #[test]
    fn hidden_units_saturate_and_ties_go_low() {
        let mut net = tiny();
        net.requant = 4 << REQUANT_SHIFT;
        let mut x = [0u8; NR_FEATURES];
        x[10] = 128; // 4 · 128 = 512 saturates at 127
        x[7] = 51; // 4 · 31 = 124
        assert_eq!(&net.q_values(&x)[..2], &[127, 124]);
        assert_eq!(argmax(&[3, 5, 5]), 1);
    }

    #[test]
    fn malformed_networks_are_refused() {
        let mut net = tiny();
        net.w1.pop();
        assert!(net
            .validate()
            .unwrap_err()
            .to_string()
            .contains("w1 has 21"));
        let mut net = tiny();
        net.weight_max = 7;
        net.w2[0] = 8;
        assert!(net.validate().is_err());
        let mut net = tiny();
        net.b1[0] = BIAS_LIMIT + 1;
        assert!(net.validate().is_err());
        let mut net = tiny();
        net.hidden = MAX_HIDDEN + 1;
        assert!(net.validate().is_err());
        let mut net = tiny();
        net.requant = 0;
        assert!(net.validate().is_err());
    }
}
