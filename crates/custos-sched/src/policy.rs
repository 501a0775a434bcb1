//! The kernel side of the learned policy, seen from user space: the
//! integer network in the layout `policy_net.bpf.h` reads, and a probe that
//! runs that very header (with the feature normalisation) through
//! BPF_PROG_TEST_RUN, so tests compare it with the Rust reference and the
//! policy benchmark times it, on any kernel with BPF.

use std::mem::MaybeUninit;

use anyhow::{bail, Context, Result};
use custos_policy::features::{State, NR_FEATURES};
use custos_policy::net::{QNet, MAX_ACTIONS};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject, ProgramInput};

use crate::bpf_intf::{custos_net, custos_policy_probe};
use crate::policy_probe_skel::{PolicyProbeSkel, PolicyProbeSkelBuilder};

/// The network as one map entry of `policy_nets` (zero padding included).
pub fn to_bpf_net(net: &QNet) -> Result<custos_net> {
    net.validate()?;
    // SAFETY: custos_net is plain integers; all-zero is a valid value.
    let mut out: custos_net = unsafe { std::mem::zeroed() };
    if net.hidden > out.b1.len() || net.actions > out.b2.len() {
        bail!(
            "network of {}x{} does not fit the kernel's {}x{}",
            net.hidden,
            net.actions,
            out.b1.len(),
            out.b2.len()
        );
    }
    out.hidden = net.hidden as u32;
    out.actions = net.actions as u32;
    out.requant = net.requant;
    for j in 0..net.hidden {
        out.b1[j] = net.b1[j];
        out.w1[j][..NR_FEATURES].copy_from_slice(&net.w1[j * NR_FEATURES..(j + 1) * NR_FEATURES]);
        for k in 0..net.actions {
            out.w2[k][j] = net.w2[k * net.hidden + j];
        }
    }
    out.b2[..net.actions].copy_from_slice(&net.b2);
    Ok(out)
}

/// The bytes of a map value or a test-run context.
pub(crate) fn as_bytes<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is a bindgen'd plain C struct; reading its bytes is fine.
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }
}

/// What one probe run returned.
#[derive(Clone, Copy, Debug)]
pub struct ProbeRun {
    pub action: usize,
    pub q: [i32; MAX_ACTIONS],
    /// Time of all the forward passes asked for, in the kernel.
    pub elapsed_ns: u64,
}

/// policy_probe.bpf.c loaded into the running kernel.
pub struct PolicyProbe {
    skel: PolicyProbeSkel<'static>,
}

impl PolicyProbe {
    pub fn load() -> Result<Self> {
        // The skeleton borrows its object storage for its whole life; one
        // probe per process run is all anyone loads, so leaking it is fine.
        let storage: &'static mut MaybeUninit<OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let open = PolicyProbeSkelBuilder::default()
            .open(storage)
            .context("cannot open the policy probe BPF program")?;
        let skel = open
            .load()
            .context("cannot load the policy probe BPF program (needs root and BPF)")?;
        Ok(PolicyProbe { skel })
    }

    /// Installs the network the next runs evaluate.
    pub fn set_net(&mut self, net: &QNet) -> Result<()> {
        let value = to_bpf_net(net)?;
        self.skel
            .maps
            .probe_net
            .update(&0u32.to_ne_bytes(), as_bytes(&value), MapFlags::ANY)
            .context("writing the probe's network")
    }

    fn run(&self, ctx: &mut custos_policy_probe) -> Result<()> {
        // SAFETY: the context is plain integers, in and out.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                ctx as *mut _ as *mut u8,
                std::mem::size_of::<custos_policy_probe>(),
            )
        };
        // A syscall program's context is copied back into ctx_in.
        let input = ProgramInput {
            context_in: Some(bytes),
            ..Default::default()
        };
        let res = self
            .skel
            .progs
            .policy_probe
            .test_run(input)
            .context("BPF_PROG_TEST_RUN of the policy probe")?;
        if res.return_value != 0 {
            bail!("the policy probe found no network");
        }
        Ok(())
    }

    /// The kernel's Q-values and action for one input, `reps` times over.
    pub fn forward(&self, x: &State, reps: u32) -> Result<ProbeRun> {
        // SAFETY: plain integers; all-zero is valid.
        let mut ctx: custos_policy_probe = unsafe { std::mem::zeroed() };
        ctx.x[..NR_FEATURES].copy_from_slice(x);
        ctx.reps = reps.max(1);
        self.run(&mut ctx)?;
        let mut q = [0i32; MAX_ACTIONS];
        q.copy_from_slice(&ctx.q[..MAX_ACTIONS]);
        Ok(ProbeRun {
            action: ctx.action as usize,
            q,
            elapsed_ns: ctx.elapsed_ns,
        })
    }

    /// The kernel's `norm_log2` of each value.
    pub fn norm_log2(&self, values: &[u64]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(values.len());
        // SAFETY: plain integers; all-zero is valid.
        let mut ctx: custos_policy_probe = unsafe { std::mem::zeroed() };
        for chunk in values.chunks(ctx.norm_in.len()) {
            ctx.norm_in =
                [0; crate::bpf_intf::custos_probe_consts_CUSTOS_PROBE_NORM_VALUES as usize];
            ctx.norm_in[..chunk.len()].copy_from_slice(chunk);
            ctx.reps = 1;
            self.run(&mut ctx)?;
            out.extend_from_slice(&ctx.norm_out[..chunk.len()]);
        }
        Ok(out)
    }
}

/// The kernel's cost of one forward pass of `net`, in ns: the median and
/// the 90th percentile over `samples` timings of `reps` passes each, on
/// random inputs (the JIT-compiled header the scheduler runs).
pub fn inference_cost(net: &QNet, samples: usize, reps: u32) -> Result<(f64, f64)> {
    use rand::{Rng, SeedableRng};
    let mut probe = PolicyProbe::load()?;
    probe.set_net(net)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut per_pass: Vec<f64> = Vec::with_capacity(samples);
    for _ in 0..samples.max(1) {
        let mut x = [0u8; NR_FEATURES];
        x.iter_mut()
            .for_each(|v| *v = rng.gen_range(0..=custos_policy::features::FEATURE_MAX));
        let run = probe.forward(&x, reps)?;
        per_pass.push(run.elapsed_ns as f64 / reps.max(1) as f64);
    }
    per_pass.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| per_pass[((per_pass.len() - 1) as f64 * q).round() as usize];
    Ok((at(0.5), at(0.9)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf_intf as c;
    use custos_policy::{features, net};
    use rand::{Rng, SeedableRng};

    #[test]
    fn c_and_rust_share_the_networks_numbers() {
        assert_eq!(
            c::custos_policy_consts_CUSTOS_NET_MAX_HIDDEN as usize,
            net::MAX_HIDDEN
        );
        assert_eq!(
            c::custos_sched_consts_CUSTOS_MAX_QUEUES as usize,
            net::MAX_ACTIONS
        );
        assert_eq!(
            c::custos_policy_consts_CUSTOS_NET_HIDDEN_MAX as i32,
            net::HIDDEN_MAX
        );
        assert_eq!(
            c::custos_policy_consts_CUSTOS_NET_REQUANT_SHIFT,
            net::REQUANT_SHIFT
        );
        assert_eq!(
            c::custos_policy_consts_CUSTOS_NET_BIAS_LIMIT as i32,
            net::BIAS_LIMIT
        );
        assert_eq!(
            c::custos_policy_consts_CUSTOS_NET_REQUANT_LIMIT,
            net::REQUANT_LIMIT
        );
        assert!(c::custos_policy_consts_CUSTOS_NET_ROW as usize >= features::NR_FEATURES);
    }

    /// A random network within the bounds `QNet::validate` allows, with
    /// biases and multipliers drawn wide so saturation and negative
    /// accumulators both happen.
    fn random_net(rng: &mut impl Rng, hidden: usize, actions: usize, weight_max: i8) -> QNet {
        let w = |rng: &mut dyn rand::RngCore| rng.gen_range(-weight_max..=weight_max);
        QNet {
            hidden,
            actions,
            weight_max,
            w1: (0..hidden * NR_FEATURES).map(|_| w(rng)).collect(),
            b1: (0..hidden)
                .map(|_| rng.gen_range(-60_000..=60_000))
                .collect(),
            requant: rng.gen_range(1..=4_000),
            w2: (0..actions * hidden).map(|_| w(rng)).collect(),
            b2: (0..actions)
                .map(|_| rng.gen_range(-200_000..=200_000))
                .collect(),
        }
    }

    fn random_state(rng: &mut impl Rng) -> State {
        let mut x = [0u8; NR_FEATURES];
        for v in &mut x {
            // Edges (0, 128) often, the rest uniform.
            *v = match rng.gen_range(0..8) {
                0 => 0,
                1 => features::FEATURE_MAX,
                _ => rng.gen_range(0..=features::FEATURE_MAX),
            };
        }
        x
    }

    /// The bit-exactness requirement: the kernel's forward pass and
    /// the Rust reference agree on every Q-value, over random networks of
    /// every supported shape (INT8 and INT4 ranges, the largest bounds) and
    /// thousands of random inputs.
    #[test]
    fn the_kernel_network_matches_the_rust_reference_bit_for_bit() {
        let mut probe = PolicyProbe::load().unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x00C0_5705);
        let mut tested = 0;
        let shapes = [
            (1, 2, 127),
            (8, 4, 7),
            (64, 4, 127),
            (256, 8, 127),
            (37, 3, 7),
        ];
        for &(hidden, actions, weight_max) in &shapes {
            for _ in 0..3 {
                let net = random_net(&mut rng, hidden, actions, weight_max);
                probe.set_net(&net).unwrap();
                for _ in 0..300 {
                    let x = random_state(&mut rng);
                    let kernel = probe.forward(&x, 1).unwrap();
                    let q = net.q_values(&x);
                    assert_eq!(
                        kernel.q[..actions],
                        q[..actions],
                        "net {hidden}x{actions}, input {x:?}"
                    );
                    assert_eq!(kernel.action, net.action(&x), "input {x:?}");
                    tested += 1;
                }
            }
        }
        // The extremes: largest biases and multiplier, all inputs at 128.
        let mut net = random_net(&mut rng, net::MAX_HIDDEN, net::MAX_ACTIONS, 127);
        net.w1.iter_mut().for_each(|w| *w = 127);
        net.b1.iter_mut().for_each(|b| *b = net::BIAS_LIMIT);
        net.requant = net::REQUANT_LIMIT;
        net.w2
            .iter_mut()
            .enumerate()
            .for_each(|(i, w)| *w = if i % 2 == 0 { 127 } else { -127 });
        net.b2.iter_mut().for_each(|b| *b = -net::BIAS_LIMIT);
        probe.set_net(&net).unwrap();
        for x in [[128u8; NR_FEATURES], [0u8; NR_FEATURES]] {
            assert_eq!(probe.forward(&x, 1).unwrap().q, net.q_values(&x));
            tested += 1;
        }
        assert!(tested >= 4_000, "{tested} inputs tested");
    }

    #[test]
    fn the_kernel_normalisation_matches_the_rust_one() {
        let probe = PolicyProbe::load().unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut values: Vec<u64> = (0..64)
            .flat_map(|b| [1u64 << b, (1u64 << b) - 1, (1u64 << b) + 1])
            .collect();
        values.extend([0, u64::MAX, 1000, 12345]);
        values.extend((0..2000).map(|_| rng.gen::<u64>() >> rng.gen_range(0..64)));
        let kernel = probe.norm_log2(&values).unwrap();
        for (v, k) in values.iter().zip(&kernel) {
            assert_eq!(*k, features::norm_log2(*v), "norm_log2({v})");
        }
    }

    #[test]
    fn a_network_the_kernel_cannot_hold_is_refused() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut net = random_net(&mut rng, 4, 4, 127);
        net.hidden = net::MAX_HIDDEN + 1;
        assert!(to_bpf_net(&net).is_err());
    }
}
